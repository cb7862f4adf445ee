"""``generic`` and ``generic-hmac``: the event JSON as Flux sends it (reference §4.1).

``generic-hmac`` adds ``X-Signature: sha256=<hex HMAC-SHA256(token, body)>`` over the exact bytes sent,
so receivers (including our own ``generic-hmac`` receiver) can verify it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.signing import hmac_signature
from ..outbound import OutboundRequest, shared_headers
from .base import DeliveryContext, HTTPNotifier, ProviderOptions
from .message import Message, with_text
from .validation import require_url


def generic_headers(event: Event, opts: ProviderOptions) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "gotk-component": event.reporting_controller}
    headers.update(opts.headers)
    return headers


class GenericNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.GENERIC
    template_only: ClassVar[bool] = True
    propagates_trace: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address)
        # The headers depend on the event only through its reporting controller: built again when it
        # changes, shared read-only between requests otherwise (the notifier lives as long as its options).
        self._headers: tuple[str, Mapping[str, str]] | None = None

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        await self.send(
            self.build_request(event, self.message_for(ctx.message, ctx.templated), body=ctx.body), ctx
        )

    def build_request(
        self, event: Event, message: Message | None = None, *, body: bytes | None = None
    ) -> OutboundRequest:
        """The event as Go's JSON (a template's text as its message), or ``body`` (a rendered
        ``spec.bodyTemplate``)."""
        component = event.reporting_controller
        cached = self._headers
        if cached is None or cached[0] != component:
            cached = self._headers = (component, shared_headers(generic_headers(event, self.opts)))
        return OutboundRequest(
            "POST",
            self.opts.address,
            cached[1],
            body if body is not None else with_text(event, message).to_go_json(),
        )


class GenericHMACNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.GENERIC_HMAC
    template_only: ClassVar[bool] = True
    propagates_trace: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address)
        if not opts.token_text:
            raise ProviderConfigError("HMAC key is empty")

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        await self.send(
            self.build_request(event, self.message_for(ctx.message, ctx.templated), body=ctx.body), ctx
        )

    def build_request(
        self, event: Event, message: Message | None = None, *, body: bytes | None = None
    ) -> OutboundRequest:
        """Signed as usual: ``X-Signature`` is the HMAC of the body sent, templated or not."""
        body = body if body is not None else with_text(event, message).to_go_json()
        headers = generic_headers(event, self.opts)
        headers["X-Signature"] = hmac_signature(self.opts.token_text.encode(), body)
        return OutboundRequest("POST", self.opts.address, headers, body)
