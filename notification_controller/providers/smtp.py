"""``smtp`` (beyond Flux): one email per notification, plain text and HTML, to the ``channel``'s recipients.

Flux has no email provider (gitops-playground#101 "uses Alertmanager because Flux does not support SMTP");
Alertmanager and Argo's notifications engine have one, and this type follows them where they agree.

Configuration (docs/providers/smtp.md): ``address`` is ``smtp://HOST[:PORT]`` (default port 587, STARTTLS
when the server offers it; ``?starttls=required`` refuses to send without it) or ``smtps://HOST[:PORT]``
(implicit TLS, RFC 8314, default port 465); ``?hello=NAME`` sets the EHLO name (default ``localhost``, as Go's
``net/smtp`` and Alertmanager). ``channel`` lists the recipients (comma-separated, at most
``MAX_RECIPIENTS``), ``username`` is the From address (``Name <addr>`` allowed). AUTH (PLAIN or LOGIN, the
server's choice; CRAM-MD5 too when offered) uses the Secret's ``username``/``password`` (the From address
when the Secret has only a password). ``certSecretRef`` (CA, client certificate) applies to STARTTLS and
smtps alike; ``proxySecretRef`` does not apply (SMTP is not HTTP).

Credentials never cross an unencrypted connection: AUTH is refused (permanently, ``tls``) unless the session
is TLS or the server is on a loopback address, the rule of Go's ``net/smtp`` ``PlainAuth``. A server that
stops offering STARTTLS (or a network that strips it, the classic downgrade) therefore cannot collect the
password; an unauthenticated relay keeps working without TLS unless ``starttls=required``.

The message is built by pure functions (``build_email``): the Alert template's or a stage's ``Message``
(``ctx.message``), else ``Message.of(event)``, as the chat types render it; multipart/alternative with a
text/plain and a text/html part (every value HTML-escaped); a Subject ``[severity] title: reason``. Header
values pass through ``header_text`` (control and line-separator characters become spaces, length capped)
before the stdlib's ``email`` package, which also refuses CR/LF: an event field cannot add a header.

Failures use the outbound vocabulary: a 5xx reply is a ``PermanentDeliveryError`` (``smtp_5xx``), a 4xx a
``RetryableDeliveryError`` (``smtp_4xx``); connection errors, resets and timeouts are retried; a certificate
that does not verify is permanent (``tls_verification``), another handshake failure retried, as
``outbound/transport.py`` classifies them. Attempts are retried inside ``spec.timeout`` with the outbound
retry policy's attempts and ``lib.backoff`` waits (``DeliveryContext.http.policy``), so the memory store's one
delivery survives a greylisting ``451`` as an HTTP type survives a ``503``; the whole delivery, every
attempt and wait included, is bounded by ``spec.timeout``.

Why ``aiosmtplib`` (a core dependency, imported only when an smtp Provider is built): it is asyncio-native,
so the delivery is cancelled at the budget like every other one (``smtplib`` in a thread cannot be
interrupted: a server dripping a byte per socket timeout keeps the thread, and its reply reader keeps an
unbounded list of continuation lines). aiosmtplib caps a reply at 32 KiB and a line at 8 KiB, refuses
control characters in commands, and since 5.1.2 fixes STARTTLS response injection (pinned ``>=5.1.2``).
``tests/integration/test_smtp_hostile.py`` holds it to those bounds against hostile servers; the real-server
tests (``tests/integration/test_smtp.py``) run it against ``aiosmtpd`` with STARTTLS, smtps and AUTH.
"""

from __future__ import annotations

import asyncio
import datetime
import html
import importlib
import ipaddress
import logging
import re
import socket
import ssl
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import format_datetime
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    ProviderConfigError,
    RetryableDeliveryError,
)
from ..lib.backoff import backoff
from ..outbound import ATTEMPT_LOG, IDEMPOTENCY_KEY, masked
from ..outbound.transport import os_error_detail, tls_verification_detail
from .base import DeliveryContext, ProviderOptions
from .message import Message

log = logging.getLogger(__name__)

MAX_RECIPIENTS = 50
"""Recipients per Provider: a mailing list is the place for more (and a typo'd channel cannot fan out)."""
MAX_ADDRESS = 254  # RFC 5321 §4.5.3.1.3: a path is 256 octets with its angle brackets
MAX_DISPLAY_NAME = 64
MAX_SUBJECT = 200  # characters; RFC 5322 recommends 78 per line, the header is folded
MAX_HEADER_VALUE = 256
MAX_TEXT = 32 * 1024  # characters of the message text and of each field value
MAX_REPLY_EXCERPT = 256  # characters of a server reply quoted in an error
DEFAULT_PORTS = {"smtp": 587, "smtps": 465}  # RFC 6409 submission, RFC 8314 submissions
INSTALL_HINT = "it is a dependency of notification-controller: reinstall the package"

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS_RE = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*@{_LABEL}(?:\.{_LABEL})*")
_NAMED_RE = re.compile(r"(?P<name>[^<>]*?)\s*<(?P<addr>[^<>]*)>")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]+")
_HELLO_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


# ---- configuration (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect: parsed from ``address``."""

    host: str
    port: int
    implicit_tls: bool
    starttls_required: bool
    hello: str
    plain_auth: bool = False
    """AUTH allowed without TLS: only to a loopback server (``localhost``, 127.0.0.0/8, ::1), as Go's
    ``net/smtp`` decides from the server's name."""

    def url(self) -> str:
        """The address as the history shows it (no query: nothing secret is in it anyway)."""
        scheme = "smtps" if self.implicit_tls else "smtp"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"


def parse_endpoint(address: str) -> Endpoint:
    """``smtp://HOST[:PORT][?starttls=required|opportunistic][&hello=NAME]`` or ``smtps://HOST[:PORT]``."""
    if not address:
        raise ProviderConfigError(
            "SMTP server (address) cannot be empty: use smtp://HOST:PORT or smtps://HOST:PORT"
        )
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError as exc:
        raise ProviderConfigError(f"invalid SMTP address: {exc}") from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ProviderConfigError("invalid SMTP address: expected smtp://HOST:PORT or smtps://HOST:PORT")
    if parts.username is not None or parts.password is not None:
        raise ProviderConfigError(
            "invalid SMTP address: credentials do not belong in the address, "
            "put them in the Secret's 'username' and 'password'"
        )
    if parts.path not in ("", "/") or parts.fragment:
        raise ProviderConfigError("invalid SMTP address: expected no path after HOST:PORT")
    implicit = parts.scheme == "smtps"
    required, hello = False, "localhost"
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "starttls" and not implicit and value in ("required", "opportunistic"):
            required = value == "required"
        elif key == "starttls":
            raise ProviderConfigError(
                "invalid SMTP address: starttls must be 'required' or 'opportunistic', and only with smtp://"
            )
        elif key == "hello" and len(value) <= 253 and _HELLO_RE.fullmatch(value):
            hello = value
        elif key == "hello":
            raise ProviderConfigError("invalid SMTP address: hello must be a host name")
        else:
            raise ProviderConfigError(
                f"invalid SMTP address: unknown parameter {key[:40]!r} (known: starttls, hello)"
            )
    host = parts.hostname
    return Endpoint(host, port or DEFAULT_PORTS[parts.scheme], implicit, required, hello, _loopback(host))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def valid_address(text: str) -> bool:
    """A bare ``local@domain`` address of RFC 5321's ASCII dot-atom form (no quoting, no IP literal)."""
    return len(text) <= MAX_ADDRESS and _ADDRESS_RE.fullmatch(text) is not None


def parse_recipients(channel: str) -> tuple[str, ...]:
    """The ``channel``: comma-separated addresses, duplicates dropped, at most ``MAX_RECIPIENTS``."""
    found: list[str] = []
    for raw in channel.split(","):
        item = raw.strip()
        if not item:
            continue
        if not valid_address(item):
            shown = header_text(item, 60)
            raise ProviderConfigError(f"invalid recipient in channel: {shown!r} is not an email address")
        if item.lower() not in (f.lower() for f in found):
            found.append(item)
        if len(found) > MAX_RECIPIENTS:
            raise ProviderConfigError(f"too many recipients in channel: at most {MAX_RECIPIENTS}")
    if not found:
        raise ProviderConfigError(
            "email recipients (channel) cannot be empty: a comma-separated list of addresses"
        )
    return tuple(found)


def parse_sender(text: str) -> Address:
    """The From: ``addr@example.com`` or ``Display Name <addr@example.com>``."""
    text = text.strip()
    if not text:
        raise ProviderConfigError("email sender (username) cannot be empty: the From address")
    name, addr = "", text
    named = _NAMED_RE.fullmatch(text)
    if named is not None:
        name, addr = named.group("name").strip().strip('"'), named.group("addr").strip()
    if not valid_address(addr):
        raise ProviderConfigError(
            f"invalid sender in username: {header_text(addr, 60)!r} is not an email address"
        )
    if len(name) > MAX_DISPLAY_NAME or header_text(name, MAX_DISPLAY_NAME) != name or '"' in name:
        raise ProviderConfigError(
            f"invalid sender in username: the display name must be at most {MAX_DISPLAY_NAME} printable "
            "characters without quotes"
        )
    local, _, domain = addr.rpartition("@")
    return Address(display_name=name, username=local, domain=domain)


# ---- the message (pure) --------------------------------------------------------------------------


def header_text(value: str, limit: int = MAX_HEADER_VALUE) -> str:
    """A header-safe one-liner: control, line-separator and bidi characters become one space; capped."""
    text = _UNSAFE.sub(" ", value).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def subject_of(event: Event, message: Message) -> str:
    """``[error] kustomization/podinfo.flux-system: ReconciliationFailed`` (the title is the template's when
    the Alert has one; the reason is the event's)."""
    reason = f": {event.reason}" if event.reason else ""
    return header_text(f"[{message.severity or event.severity}] {message.title}{reason}", MAX_SUBJECT)


def _cap(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n… (truncated)"


def _facts(event: Event) -> list[tuple[str, str]]:
    obj = event.involved_object
    out = [("Object", f"{obj.kind}/{obj.namespace}/{obj.name}"), ("Reason", event.reason)]
    out.append(("Severity", event.severity))
    if event.reporting_controller:
        out.append(("Reported by", event.reporting_controller))
    if event.timestamp:
        out.append(("Time", event.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC")))
    return [(k, v) for k, v in out if v]


def text_body(event: Event, message: Message) -> str:
    lines = [_cap(message.text), ""]
    if message.fields:
        lines.extend(f"{k}: {_cap(v)}" for k, v in message.fields)
        lines.append("")
    lines.append("--")
    lines.extend(f"{k}: {v}" for k, v in _facts(event))
    return "\n".join(lines) + "\n"


def html_body(event: Event, message: Message) -> str:
    e = html.escape
    colour = "#d73a49" if (message.severity or event.severity) == "error" else "#0366d6"
    rows = "".join(
        f'<tr><th align="left" style="padding-right:1em">{e(k)}</th><td>{e(_cap(v))}</td></tr>'
        for k, v in message.fields
    )
    facts = "".join(
        f'<tr><th align="left" style="padding-right:1em">{e(k)}</th><td>{e(v)}</td></tr>'
        for k, v in _facts(event)
    )
    text = e(_cap(message.text)).replace("\n", "<br>\n")
    return (
        '<!DOCTYPE html>\n<html><body style="font-family:sans-serif">\n'
        f'<h3 style="color:{colour};margin:0 0 .5em">{e(message.title)}</h3>\n'
        f"<p>{text}</p>\n"
        + (f"<table>{rows}</table>\n" if rows else "")
        + f'<hr><table style="color:#586069;font-size:90%">{facts}</table>\n</body></html>\n'
    )


def build_email(
    event: Event,
    message: Message | None,
    sender: Address,
    recipients: Sequence[str],
    *,
    message_id: str,
    date: float | None = None,
) -> EmailMessage:
    """The whole email for one notification (pure but for ``date``, default now)."""
    message = message or Message.of(event)
    mail = EmailMessage(policy=SMTP_POLICY)
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    mail["Subject"] = subject_of(event, message)
    mail["Date"] = format_datetime_utc(time.time() if date is None else date)
    mail["Message-ID"] = f"<{message_id}@{sender.domain}>"
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation auto-replies to the controller
    obj = event.involved_object
    mail["X-Flux-Object"] = header_text(f"{obj.kind}/{obj.namespace}/{obj.name}")
    mail["X-Flux-Reason"] = header_text(event.reason)
    severity = header_text(message.severity or event.severity, 16)
    mail["X-Flux-Severity"] = severity
    if severity == "error":
        mail["Importance"] = "high"  # RFC 2156; X-Priority is what most clients show
        mail["X-Priority"] = "2 (High)"
    mail.set_content(text_body(event, message))
    mail.add_alternative(html_body(event, message), subtype="html")
    return mail


def format_datetime_utc(seconds: float) -> str:
    return format_datetime(datetime.datetime.fromtimestamp(seconds, datetime.UTC))


def reply_excerpt(text: str, masks: Sequence[str]) -> str:
    return masked(header_text(text, MAX_REPLY_EXCERPT), masks)


# ---- the notifier --------------------------------------------------------------------------------


def _import_client() -> Any:
    try:
        return importlib.import_module("aiosmtplib")
    except ImportError as exc:
        raise ProviderConfigError(
            f"the smtp provider needs the Python package 'aiosmtplib': {INSTALL_HINT}"
        ) from exc


class SMTPNotifier:
    type: ClassVar[ProviderType] = ProviderType.SMTP
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.endpoint = parse_endpoint(opts.address)
        self.recipients = parse_recipients(opts.channel)
        # resolve_options puts the Secret's username over spec.username (Flux's rule for the HTTP types); here
        # spec.username is the From address and the Secret's username the AUTH login.
        spec_username = opts.provider.spec.username if opts.provider is not None else None
        self.sender = parse_sender(spec_username or opts.username)
        login = opts.secret_data.get("username")
        self.login = login.decode("utf-8", errors="replace").strip() if login else ""
        if opts.password is not None and not self.login:
            self.login = self.sender.addr_spec
        if self.login and opts.password is None:
            raise ProviderConfigError("the Secret has a 'username' but no 'password' for SMTP AUTH")
        self._client = _import_client()
        self.attempts = 0  # attempts made (tests, like OutboundHTTP.attempts)

    def masks(self) -> Sequence[str]:
        return self.opts.masks()

    def build(self, event: Event, message: Message | None, message_id: str) -> bytes:
        mail = build_email(event, message, self.sender, self.recipients, message_id=message_id)
        return mail.as_bytes(policy=SMTP_POLICY)

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        key = IDEMPOTENCY_KEY.get()
        message_id = key or uuid.uuid4().hex  # one Message-ID for every attempt: duplicates are recognisable
        data = self.build(event, ctx.message, message_id)
        record = ATTEMPT_LOG.get()
        if record is not None:
            record.method, record.url, record.size, record.status = (
                "SMTP",
                self.endpoint.url(),
                len(data),
                None,
            )
            record.requests += 1
        timeout = self.opts.timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        policy = ctx.http.policy
        attempt = 0
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    try:
                        await self._attempt(data, deadline)
                        return
                    except RetryableDeliveryError as exc:
                        wait = backoff(attempt, policy.wait_min, policy.wait_max)
                        attempt += 1
                        if attempt >= policy.max_attempts or loop.time() + wait >= deadline:
                            raise
                        log.debug(
                            "smtp delivery attempt %d failed (%s), retrying in %.2fs",
                            attempt,
                            exc.reason,
                            wait,
                        )
                        await asyncio.sleep(wait)
        except TimeoutError:
            raise RetryableDeliveryError(
                f"email to {self.endpoint.url()} timed out after {timeout:g}s",
                reason="timeout",
                failure=FailureReason.TIMEOUT,
            ) from None

    async def _attempt(self, data: bytes, deadline: float) -> None:
        self.attempts += 1
        aiosmtplib = self._client
        errors = aiosmtplib.errors
        ep = self.endpoint
        smtp = aiosmtplib.SMTP(
            hostname=ep.host,
            port=ep.port,
            use_tls=ep.implicit_tls,
            start_tls=False if ep.implicit_tls else None,  # None: STARTTLS when the server offers it
            tls_context=self.opts.tls or _default_tls(),
            local_hostname=ep.hello,
            timeout=self.opts.timeout,
        )
        step = "connecting"
        try:
            await smtp.connect()
            tls = smtp.get_transport_info("sslcontext") is not None
            if ep.starttls_required and not tls:
                raise PermanentDeliveryError(
                    f"email to {ep.url()}: the server does not offer STARTTLS and the address says "
                    "starttls=required",
                    reason="starttls_unavailable",
                    failure=FailureReason.TLS,
                )
            if self.login:
                if not tls and not ep.plain_auth:
                    raise PermanentDeliveryError(
                        f"email to {ep.url()}: refusing to send the password over an unencrypted connection "
                        "(the server does not offer STARTTLS; use smtps:// or a server with STARTTLS)",
                        reason="auth_without_tls",
                        failure=FailureReason.TLS,
                    )
                step = "authenticating"
                await smtp.login(self.login, self.opts.password_text)
            step = "sending"
            refused, _ = await smtp.sendmail(self.sender.addr_spec, list(self.recipients), data)
            if refused:
                shown = ", ".join(f"{to} ({reply.code})" for to, reply in list(refused.items())[:5])
                log.info(
                    "email to %s: delivered, but the server refused some recipients: %s",
                    ep.url(),
                    header_text(shown, 512),
                )
            # Accepted: QUIT politely if the budget allows, never fail (nor time out) a delivered email on it.
            left = deadline - asyncio.get_running_loop().time()
            if left > 0.2:
                try:
                    async with asyncio.timeout(min(1.0, left / 2)):
                        await smtp.quit()
                except (TimeoutError, errors.SMTPException, OSError):
                    pass
        except DeliveryError:
            raise
        except errors.SMTPRecipientsRefused as exc:
            raise self._refused(exc.recipients) from None
        except errors.SMTPResponseException as exc:
            auth = isinstance(exc, errors.SMTPAuthenticationError)
            raise self._reply(step, exc.code, exc.message, auth=auth) from None
        except errors.SMTPTimeoutError:
            raise RetryableDeliveryError(
                f"email to {ep.url()}: timed out {step}", reason="timeout", failure=FailureReason.TIMEOUT
            ) from None
        except (errors.SMTPConnectError, errors.SMTPServerDisconnected, OSError) as exc:
            raise self._transport(step, exc) from None
        except errors.SMTPException as exc:
            detail = reply_excerpt(str(exc), self.masks())
            if step == "authenticating":  # no AUTH mechanism in common, AUTH not offered
                raise PermanentDeliveryError(
                    f"email to {ep.url()}: authentication impossible: {detail}",
                    reason="smtp_auth",
                    failure=FailureReason.AUTH,
                ) from None
            raise RetryableDeliveryError(
                f"email to {ep.url()}: {step} failed: {detail}",
                reason="invalid_response",
                failure=FailureReason.SERVER_ERROR,
            ) from None
        finally:
            smtp.close()

    def _reply(self, step: str, code: int, text: str, *, auth: bool = False) -> DeliveryError:
        where = f"email to {self.endpoint.url()}: {step} refused: {code} {reply_excerpt(text, self.masks())}"
        failure = FailureReason.AUTH if auth else None
        if 500 <= code <= 599:
            return PermanentDeliveryError(
                where, reason="smtp_5xx", failure=failure or FailureReason.CLIENT_ERROR
            )
        if 400 <= code <= 499:
            return RetryableDeliveryError(
                where, reason="smtp_4xx", failure=failure or FailureReason.SERVER_ERROR
            )
        # aiosmtplib's -1: a reply it could not read (too long, not a reply): the server's fault, as a 5xx is
        return RetryableDeliveryError(
            f"email to {self.endpoint.url()}: {step}: invalid reply from the server: "
            f"{reply_excerpt(text, self.masks())}",
            reason="invalid_response",
            failure=FailureReason.SERVER_ERROR,
        )

    def _refused(self, refused: Sequence[Any]) -> DeliveryError:
        """Every recipient refused: permanent only when every refusal is (a 4xx among them may pass later)."""
        shown = ", ".join(f"{r.recipient} ({r.code})" for r in refused[:5])
        more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
        text = f"email to {self.endpoint.url()}: every recipient refused: {header_text(shown, 512)}{more}"
        if refused and all(500 <= r.code <= 599 for r in refused):
            return PermanentDeliveryError(text, reason="smtp_5xx", failure=FailureReason.CLIENT_ERROR)
        return RetryableDeliveryError(text, reason="smtp_4xx", failure=FailureReason.SERVER_ERROR)

    def _transport(self, step: str, exc: BaseException) -> DeliveryError:
        prefix = f"email to {self.endpoint.url()}: {step}"
        seen: BaseException | None = exc
        for _ in range(8):  # aiosmtplib wraps the OSError it got: look down the chain
            if seen is None:
                break
            if isinstance(seen, ssl.SSLCertVerificationError):
                return PermanentDeliveryError(
                    f"{prefix}: {tls_verification_detail(seen)}",
                    reason="tls_verification",
                    failure=FailureReason.TLS,
                )
            if isinstance(seen, ssl.SSLError):
                return RetryableDeliveryError(
                    f"{prefix}: TLS error: {seen.reason or 'handshake failed'}",
                    reason="connection",
                    failure=FailureReason.TLS,
                )
            if isinstance(seen, socket.gaierror):
                return RetryableDeliveryError(
                    f"{prefix}: host not found (DNS lookup failed)", reason="dns", failure=FailureReason.DNS
                )
            seen = seen.__cause__ or seen.__context__
        detail = os_error_detail(exc) if isinstance(exc, OSError) and exc.errno else str(exc)
        return RetryableDeliveryError(
            f"{prefix}: {reply_excerpt(detail, self.masks())}",
            reason="connection",
            failure=FailureReason.CONNECTION,
        )


_DEFAULT_TLS: list[ssl.SSLContext] = []


def _default_tls() -> ssl.SSLContext:
    """The system's trust store (SSL_CERT_FILE/SSL_CERT_DIR honoured), built once: loading it costs ~10 ms."""
    if not _DEFAULT_TLS:
        _DEFAULT_TLS.append(ssl.create_default_context())
    return _DEFAULT_TLS[0]
