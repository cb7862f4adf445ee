"""The provider contract: options, requests, the notifier protocol and the HTTP notifier base."""

from __future__ import annotations

import abc
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..api.alert import Alert
from ..api.event import Event
from ..api.provider import Provider, ProviderType
from ..core.redact import ADDRESS_PART_MIN, SecretValue
from ..outbound import OutboundRequest, OutboundResponse
from .message import Edit, Message, Thread

if TYPE_CHECKING:
    from ..outbound import OutboundHTTP
    from ..outbound.identity import WorkloadIdentity
    from ..outbound.tokens import TokenCache


@dataclass(frozen=True)
class ProviderOptions:
    """Everything a notifier needs, resolved from the Provider spec and its Secrets (reference §3.8).

    Secret material is held as ``SecretValue``; ``secret_data`` is the whole ``secretRef`` Secret
    (GitHub App keys, NATS creds...). ``masks`` lists values to hide in every error text.
    """

    type: ProviderType
    name: str
    namespace: str
    uid: str = ""
    address: str = ""
    channel: str = ""
    username: str = ""
    token: SecretValue | None = None
    password: SecretValue | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    proxy: SecretValue | None = None
    tls: ssl.SSLContext | None = None
    timeout: float = 15.0
    commit_status: str = ""
    secret_data: Mapping[str, bytes] = field(default_factory=dict)
    provider: Provider | None = None

    @property
    def token_text(self) -> str:
        return self.token.reveal() if self.token else ""

    @property
    def password_text(self) -> str:
        return self.password.reveal() if self.password else ""

    def masks(self) -> list[str]:
        """Values that must never appear in an error, log line or Event (computed once per options)."""
        cached: list[str] | None = self.__dict__.get("_masks")
        if cached is None:
            cached = self._compute_masks()
            object.__setattr__(self, "_masks", cached)
        return cached

    def _compute_masks(self) -> list[str]:
        out = [v.reveal().strip() for v in (self.token, self.password, self.proxy) if v]
        out.extend(v for v in self.headers.values() if len(v) >= 4)
        # Webhook URLs carry their credential in the path or query (Slack, Teams, Discord...); a short tail is a
        # word, not a credential ("/fail" masked inside "failed" made errors unreadable), the threshold is
        # core.redact.address_forms' (the form sent, masked where it stands whole)
        tail = self.address.split("://", 1)[-1].partition("/")[2]
        if len(tail) >= ADDRESS_PART_MIN:
            out.append(tail)
        for key, raw in self.secret_data.items():
            if key in (
                "username",
                "region",
            ):  # names, not credentials: "us-east-1" masked made errors unreadable
                continue
            text = raw.decode("utf-8", errors="replace").strip()
            if len(text) >= 4:
                out.append(text)
        return [m for m in out if m]


@dataclass(frozen=True)
class DeliveryContext:
    """Per-delivery context handed to ``post``: the outbound path and the Alert that matched."""

    http: OutboundHTTP
    alert: Alert | None = None
    tokens: TokenCache | None = None  # owned by the dispatcher (GitHub App and cloud tokens)
    identity: WorkloadIdentity | None = None  # cloud workload identity (outbound/identity.py)
    commit_status: str = ""  # git providers: this delivery's commit status id (dispatch/rules.py)
    message: Message | None = None  # a pre-send stage's message (template, group); None: Message.of(event)
    thread: Thread | None = None  # spec.threadBy: the conversation to post into (chat types that thread)
    edit: Edit | None = None  # spec.resolveInPlace: the message to edit, or to report (chat types that edit)
    body: bytes | None = None  # a Provider's bodyTemplate, rendered (generic types)
    templated: bool = False  # ``message`` was rendered from the Alert's spec.template

    @property
    def template(self) -> Message | None:
        """The Alert template's message, for the types that keep their own shape (the event they forward,
        a commit status, a span): they render a template, never a group's or a recovery's message."""
        return self.message if self.templated else None


class Notifier(Protocol):
    type: ClassVar[ProviderType]

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        """Deliver one event. Raises ``DeliveryError`` (secrets already masked) on failure."""
        ...


class HTTPNotifier(abc.ABC):
    """Base for providers that send one HTTP request per event through ``OutboundHTTP``.

    Subclasses implement ``build_request`` (pure) and may override ``check_response`` (e.g. Slack's
    ``{"ok": true}``) or ``should_send`` (e.g. skip ``Progressing`` events).
    """

    type: ClassVar[ProviderType]
    uses_proxy: ClassVar[bool] = True
    uses_tls: ClassVar[bool] = True
    template_only: ClassVar[bool] = False
    """True for the types that forward Flux's event (generic, sentry): see ``DeliveryContext.template``."""
    propagates_trace: ClassVar[bool] = False
    """True for the types whose receivers can continue a trace (generic, generic-hmac, cloudevents): with
    ``--otlp-endpoint`` their requests carry the delivery's W3C ``traceparent``."""

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts

    def message_for(self, message: Message | None, templated: bool) -> Message | None:
        """What ``build_request`` renders: a pre-send stage's message, or only a template's."""
        return message if templated or not self.template_only else None

    def should_send(self, event: Event) -> bool:
        return True

    @abc.abstractmethod
    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        """The exact request for ``event`` (pure: no I/O). Chat and incident types render ``message``
        (``Message.of(event)`` when None); the others may ignore it."""

    def check_response(self, response: OutboundResponse) -> None:
        """Raise ``PermanentDeliveryError`` if a 2xx answer still means failure."""

    def masks(self) -> Sequence[str]:
        """Values to mask in error texts: the options' secrets, plus what a type derives from them."""
        return self.opts.masks()

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        if not self.should_send(event):
            return
        await self.send(self.build_request(event, self.message_for(ctx.message, ctx.templated)), ctx)

    async def send(self, request: OutboundRequest, ctx: DeliveryContext) -> OutboundResponse:
        """One request through the outbound path with this Provider's timeout, proxy, TLS and masks."""
        return await ctx.http.send(
            request,
            timeout=self.opts.timeout,
            proxy=self.opts.proxy.reveal() if (self.opts.proxy and self.uses_proxy) else None,
            tls=self.opts.tls if self.uses_tls else None,
            masks=self.masks(),
            check=self.check_response,
        )


def json_headers(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if extra:
        headers.update(extra)
    return headers


def obj_name(event: Event) -> str:
    """``lower(kind)/name.namespace`` — how chat providers title an event (reference §4.0)."""
    obj = event.involved_object
    return f"{obj.kind.lower()}/{obj.name}.{obj.namespace}"


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]
