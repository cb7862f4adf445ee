"""``pushover`` (beyond Flux): a push notification through Pushover's message API.

Argo's notifications engine and Alertmanager ship it; Flux does not. Pushover's documented request:
``POST https://api.pushover.net/1/messages.json``, form-encoded, with ``token`` (the application's API
token: the Secret's ``token``), ``user`` (the user or group key: ``spec.channel``, else the Secret's
``user``), ``message``, and here ``title``, ``priority``, ``timestamp`` (the event's, so a late delivery
shows when it happened) and ``html=1``. ``spec.address`` replaces the API URL (a proxy, a test server).

* Priority from severity (Pushover's -2 … 2): trace → -1 (quiet), info → 0 (normal), error → 1 (high:
  bypasses the user's quiet hours). Never 2 (emergency): it repeats until acknowledged and needs
  ``retry``/``expire``; a reconciliation failure is not a page.
* HTML (``html=1``): the text escaped, one ``<b>name</b>: value`` line per field. Pushover's limits are
  250 characters for the title and 1,024 for the message: both are cut (never inside an entity or tag).
* Answers: 200 with ``{"status": 1}``; a 4xx with ``"status": 0`` and ``errors`` is a request Pushover
  refuses (an invalid token or user key): permanent, one attempt. A 5xx or 429 is retried by the outbound
  path (its default backoff waits 2 s, then longer, up to 30 s; Pushover asks for at least 5 s between
  retries, which the later attempts keep and the first does not); the Provider's ``timeout`` bounds them.
  A 2xx whose JSON says ``status`` other than 1 is a ``provider_error``.
"""

from __future__ import annotations

import html
import json
from typing import ClassVar
from urllib.parse import urlencode

from ..api.event import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_TRACE, Event
from ..api.provider import ProviderType
from ..errors import FailureReason, PermanentDeliveryError, ProviderConfigError
from ..outbound import OutboundRequest, OutboundResponse
from .base import HTTPNotifier, ProviderOptions
from .formatting import cut
from .message import Message
from .validation import require_url

API_URL = "https://api.pushover.net/1/messages.json"
TITLE_LIMIT = 250
MESSAGE_LIMIT = 1024
PRIORITY = {SEVERITY_TRACE: -1, SEVERITY_INFO: 0, SEVERITY_ERROR: 1}
"""Severity → Pushover priority (-2 lowest, -1 low/quiet, 0 normal, 1 high, 2 emergency)."""


def cut_html(text: str, limit: int) -> str:
    """``cut`` for an HTML text: a cut never leaves half an entity (``&am``) or half a tag (``<b``)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    for opener, closer in (("&", ";"), ("<", ">")):
        at = head.rfind(opener)
        if at != -1 and closer not in head[at:]:
            head = head[:at]
    return head + "…"


def pushover_html(message: Message) -> str:
    lines = [html.escape(message.text, quote=False)]
    if message.fields:
        lines.append("")
        lines.extend(
            f"<b>{html.escape(k, quote=False)}</b>: {html.escape(v, quote=False)}" for k, v in message.fields
        )
    return cut_html("\n".join(lines), MESSAGE_LIMIT)


def pushover_form(token: str, user: str, event: Event, message: Message) -> list[tuple[str, str]]:
    """The form fields, in the order Pushover's documentation lists them."""
    form = [
        ("token", token),
        ("user", user),
        ("message", pushover_html(message)),
        ("html", "1"),
        ("priority", str(PRIORITY.get(message.severity, 0))),
        ("title", cut(message.title, TITLE_LIMIT)),
    ]
    if event.timestamp is not None and event.timestamp.year >= 1970:
        form.append(("timestamp", str(int(event.timestamp.timestamp()))))
    return form


def validate_pushover_response(response: OutboundResponse) -> None:
    """A 2xx answer is a success unless its JSON says ``status`` other than 1."""
    try:
        data = json.loads(response.body)
    except (ValueError, RecursionError):
        return  # not JSON: Pushover documents a 200 as accepted
    if isinstance(data, dict) and "status" in data and data["status"] != 1:
        raise PermanentDeliveryError(
            "Pushover answered 2xx without status 1",
            reason="pushover_status",
            failure=FailureReason.PROVIDER_ERROR,
        )


class PushoverNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.PUSHOVER

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.url = require_url(opts.address, what="Pushover API URL") if opts.address else API_URL
        if not opts.token_text.strip():
            raise ProviderConfigError("empty Pushover application token (the Secret's 'token')")
        secret_user = opts.secret_data.get("user", b"").decode("utf-8", errors="replace")
        self.user = (opts.channel or secret_user).strip()
        if not self.user:
            raise ProviderConfigError("empty Pushover user key (spec.channel or the Secret's 'user')")

    def masks(self) -> list[str]:
        """The user key too when it came from ``spec.channel`` (with any app token, it reaches the user)."""
        return [*self.opts.masks(), self.user]

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        body = urlencode(pushover_form(self.opts.token_text.strip(), self.user, event, m)).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        return OutboundRequest("POST", self.url, headers, body)

    def check_response(self, response: OutboundResponse) -> None:
        validate_pushover_response(response)
