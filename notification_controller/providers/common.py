"""Helpers of the providers that send several requests or build Go-shaped payloads.

Go formatting (``go_json``; Go's ``%q`` is ``lib/goquote.py``), path segments, basic auth, and ``Caller``:
the thin wrapper that sends a delivery's requests (list then create, token then send) through the one outbound path under a single
time budget (``spec.timeout`` covers the whole delivery, as Flux's context deadline does), re-raising every
failure with a Flux-like prefix and masked with the secrets known so far.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import DeliveryError, FailureReason, PermanentDeliveryError, rewrap
from ..lib.gojson import dumps as go_dumps
from ..outbound import Budget, OutboundRequest, OutboundResponse, masked
from ..outbound import path_segment as path_segment  # re-export: every forge builds paths with it
from .base import DeliveryContext, ProviderOptions
from .formatting import format_name_and_description as format_name_and_description  # re-export
from .formatting import split_camelcase as split_camelcase  # re-export

# ----------------------------------------------------------------------------------------------------
# Go formatting
# ----------------------------------------------------------------------------------------------------


def go_json(value: Any, *, escape_html: bool = True, newline: bool = False) -> bytes:
    """JSON as Go writes it. ``escape_html=False, newline=True`` is a ``json.Encoder`` with
    ``SetEscapeHTML(false)`` (go-github); the defaults are ``json.Marshal`` (gitea, gitlab, bitbucket SDKs)."""
    if escape_html:
        body = go_dumps(value)
    else:
        body = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8", errors="replace"
        )
    return body + b"\n" if newline else body


def basic_auth(username: str, password: str) -> str:
    """The value of an ``Authorization: Basic`` header (Go's ``SetBasicAuth``)."""
    raw = f"{username}:{password}".encode("utf-8", errors="surrogateescape")
    return "Basic " + base64.b64encode(raw).decode("ascii")


def token_or_password(opts: ProviderOptions) -> str:
    """The Secret's ``token``, else its ``password`` (GitHub, GitLab, Gitea fallback)."""
    return opts.token_text or opts.password_text


# ----------------------------------------------------------------------------------------------------
# Change requests (reference §4.3)
# ----------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------
# Sending several requests under one budget
# ----------------------------------------------------------------------------------------------------


def is_not_found(exc: DeliveryError) -> bool:
    """True when the error is the answer 404."""
    return exc.status == 404


class Caller:
    """Sends one delivery's requests through ``ctx.http`` within ``opts.timeout`` seconds in total.

    Every failure is re-raised with a Flux-like prefix (``could not list commit statuses: ...``) and is
    masked with the provider's secrets plus any credential minted during the delivery (``add_mask``).
    """

    def __init__(self, ctx: DeliveryContext, opts: ProviderOptions) -> None:
        self.ctx = ctx
        self.opts = opts
        self._budget = Budget(opts.timeout)
        self._masks: list[str] = list(opts.masks())

    @property
    def masks(self) -> Sequence[str]:
        return tuple(self._masks)

    def add_mask(self, *values: str) -> None:
        self._masks.extend(v for v in values if v and len(v.strip()) >= 4)

    def mask(self, text: str) -> str:
        return masked(text, self._masks)

    async def send(
        self,
        request: OutboundRequest,
        *,
        what: str,
        proxy: bool = False,
        tls: bool = True,
        check: Callable[[OutboundResponse], None] | None = None,
    ) -> OutboundResponse:
        remaining = self._budget.remaining(what)
        opts = self.opts
        try:
            return await self.ctx.http.send(
                request,
                timeout=remaining,
                proxy=opts.proxy.reveal() if (proxy and opts.proxy) else None,
                tls=opts.tls if tls else None,
                masks=self._masks,
                check=check,
            )
        except DeliveryError as exc:
            raise rewrap(exc, what) from None

    async def send_json(
        self, request: OutboundRequest, *, what: str, proxy: bool = False, tls: bool = True
    ) -> Any:
        """``send`` and decode a JSON answer (an empty body is ``None``)."""
        response = await self.send(request, what=what, proxy=proxy, tls=tls)
        return decode_json(response, what)


def decode_json(response: OutboundResponse, what: str) -> Any:
    if not response.body.strip():
        return None
    try:
        return json.loads(response.body)
    except (ValueError, RecursionError):
        raise PermanentDeliveryError(
            f"{what}: the response is not valid JSON",
            reason="invalid_response",
            failure=FailureReason.PROVIDER_ERROR,
        ) from None


def json_list(value: Any) -> list[dict[str, Any]]:
    """The dict items of a JSON array (anything else counts as an empty listing)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def str_field(item: dict[str, Any], *path: str) -> str | None:
    """A nested string field of a JSON object, or None when absent or not a string."""
    value: Any = item
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, str) else None
