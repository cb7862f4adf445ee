"""The ONE outbound HTTP path. Providers never create a client or a retry loop of their own.

``OutboundHTTP.send`` owns what is the same whichever library carries the bytes: the headers
(``request.wire_headers``: framing headers dropped, control and non-ASCII characters refused), the
``Idempotency-Key``, Basic auth, same-origin redirects, the body cap, the status classification, the one
deadline per delivery, the retries and the masking of error texts. A ``transport.Transport`` sends one
exchange and raises typed ``TransportError`` s (issue 24 item 2: no class-name matching anywhere).

Owns the per-delivery time budget (``spec.timeout`` covers all attempts, as Flux's context deadline does),
retries (ONE loop on tenacity, driven by the pure ``retry`` module: at most 5 attempts, ``lib.backoff``'s
2 s·2ⁿ capped at 30 s, ``Retry-After`` from ``lib.retryafter`` honoured when it fits in the budget, and a
wait that would overrun the budget gives up at once with the last error), response bodies capped at 64 KiB,
and redaction: error texts carry no token, password or webhook URL. Redirects are followed only to the same
scheme, host and port (Flux follows any; an authenticated request must never be replayed to another host,
checklist E7). No compressed answers are asked for (bodies are not decompressed).

Which transport (the decision issue 24 item 2 asks to record)
-------------------------------------------------------------
ONE client for direct and proxied requests: ``h1client.H1Client`` (httptools/llhttp, asyncio), behind the
``transport.Transport`` protocol. It tunnels HTTP CONNECT (TLS to the origin inside the tunnel with the
Provider's TLS context, ``Proxy-Authorization`` from the proxy URL's userinfo), speaks SOCKS 4/5 through
``python_socks``' asyncio API (the library aiohttp_socks wrapped), and sends plain http through an HTTP proxy
in the absolute form, as Go's ``http.Transport`` and aiohttp did. aiohttp is no longer on the outbound path.

Measured (``bench/``, 16 concurrent POSTs to a local sink, CPU per POST): ~36-40 µs for this client after the
issue-23 hardening against ~115-165 µs for aiohttp 3.14's; the hardening matched aiohttp's and Go's
strictness (head limits, idle reaping, no reuse after an early answer, no resend after a reset) and the same
hostile-server battery (``tests/adversarial/test_transport_parity.py``) passes directly and through a local
HTTP proxy; ``tests/integration/test_socks_proxy.py`` and ``tests/unit/outbound/test_transport.py`` cover
SOCKS, CONNECT refusals (407, 403), unreachable proxies and TLS through the tunnel. A delivered notification
is one such POST, so this is most of the outbound CPU the controller spends; keeping two clients meant two
sets of limits to keep equal (issue 23 items 3, 13, 14 each had to be fixed twice). Not supported, as
before: methods other than GET/POST/PUT/PATCH/DELETE (no sender uses one).

The retry loop: tenacity's ``AsyncRetrying`` is built once per client (its strategies are pure) and copied
per delivery; the first attempt runs before tenacity is entered and its error is replayed as tenacity's
attempt 1: not a second mechanism, only the common case (a delivery that succeeds at once) not paying for
tenacity's per-attempt bookkeeping, nor importing tenacity (it is imported with the first retry). The loop on
a virtual clock: ``tests/unit/outbound/test_client.py``.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit
from urllib.request import getproxies, proxy_bypass

from ..core.redact import (
    address_forms,
    credential_echoes,
    mask_token,
    mask_values,
    redact_url,
    redact_urls_in,
)
from ..errors import DeliveryError, FailureReason, PermanentDeliveryError, RetryableDeliveryError
from ..lib.backoff import backoff
from .h1client import H1Client
from .request import InvalidHeader, OutboundRequest, OutboundResponse, wire_headers
from .retry import classify_status, classify_transport
from .transport import Exchange, Transport, TransportError

if TYPE_CHECKING:  # tenacity itself is imported with the first retry (tests/unit/test_lazy_imports.py)
    from tenacity import AsyncRetrying, RetryCallState

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("idempotency_key", default="")
"""Set by the dispatcher around a delivery from a durable outbox: every request of that delivery carries
it as ``Idempotency-Key`` (IETF httpapi-idempotency-key-header), on every attempt, so a receiver can drop
redeliveries. A header of that name from the Provider's own headers wins."""

TRACEPARENT: contextvars.ContextVar[str] = contextvars.ContextVar("traceparent", default="")
"""Set by the deliverer around a delivery whose notifier ``propagates_trace`` while tracing is on
(``--otlp-endpoint``, docs/tracing.md): every request of that delivery carries it as the W3C ``traceparent``
header, naming the delivery's span, so the receiver's trace continues ours. A Provider's own header of that
name wins."""


class AttemptLog:
    """What one delivery sent, for the history (issue 27): set in ``ATTEMPT_LOG`` by the deliverer around a
    delivery; every request of it writes here, so the last one is what the history shows. The address is
    kept as sent and masked by ``summary`` (``redact_url``: scheme and host only; a webhook's credential is
    in its path), so a delivery that records nothing pays two attribute stores per request."""

    __slots__ = ("method", "requests", "size", "status", "url")

    def __init__(self) -> None:
        self.method = ""
        self.url = ""
        self.size = 0
        self.status: int | None = None
        self.requests = 0

    def summary(self) -> str:
        """``POST https://hooks.slack.com/*** (1,234 B)``; "" when no HTTP request was made (NATS, Pub/Sub);
        ``(+2 requests)`` when the delivery made more than one (a commit status lists, then creates)."""
        if not self.requests:
            return ""
        more = f" (+{self.requests - 1} more)" if self.requests > 1 else ""
        shown = _REDACTED.get(self.url)
        if shown is None:
            if len(_REDACTED) >= 256:  # a Provider's address repeats: parsed once (bounded by a clear)
                _REDACTED.clear()
            shown = _REDACTED[self.url] = redact_url(self.url)
        size = (
            self.size
        )  # grouped with commas only where it has any (the format spec's path: ~1,000 instructions)
        grouped = str(size) if size < 1000 else f"{size:,}"
        return f"{self.method} {shown} ({grouped} B){more}"


_REDACTED: dict[str, str] = {}
"""``redact_url`` of the addresses recently sent to (``urlsplit`` costs ~3 µs a delivery)."""


ATTEMPT_LOG: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar("attempt_log", default=None)
"""Set by the deliverer while the history records: the requests of this delivery write their summary here."""

MAX_REDIRECTS = 10


@dataclass(frozen=True)
class RetryPolicy:
    """How ``OutboundHTTP`` retries one request: attempts, ``lib.backoff``'s bounds, the body cap."""

    max_attempts: int = 5
    wait_min: float = 2.0
    wait_max: float = 30.0
    body_limit: int = 64 * 1024


class Budget:
    """One time budget for every request of a delivery (``spec.timeout``: a commit status lists, then
    creates; PagerDuty posts an alert, then a change event), as Flux's context deadline covers them all."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._loop = asyncio.get_running_loop()
        self.deadline = self._loop.time() + seconds

    def remaining(self, what: str) -> float:
        """Seconds left; ``DeliveryError`` (timeout) once none are: ``what`` names the request not sent."""
        left = self.deadline - self._loop.time()
        if left <= 0:
            raise DeliveryError(
                f"{what}: timed out after {self.seconds:g}s", reason="timeout", failure=FailureReason.TIMEOUT
            )
        return left


class _Deadline:
    """``asyncio.timeout_at``'s expiry for ``OutboundHTTP.send``: cancel the task once the budget is spent,
    and tell afterwards whether a ``CancelledError`` was that (and no other cancellation is pending)."""

    __slots__ = ("cancelling", "expired", "task")

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None, "OutboundHTTP.send runs in a task"
        self.task = task
        self.cancelling = task.cancelling()
        self.expired = False  # True from the expiry until its cancellation request is withdrawn

    def expire(self) -> None:
        self.expired = True
        self.task.cancel()

    def timed_out(self) -> bool:
        """After a ``CancelledError``: True when it is the budget's, i.e. no other cancellation is pending
        (the expiry's own request is withdrawn either way)."""
        if not self.expired:
            return False
        self.expired = False
        return self.task.uncancel() <= self.cancelling

    def settle(self) -> None:
        """On leaving ``send``: an expiry that ended in another outcome withdraws its request too."""
        if self.expired:
            self.expired = False
            self.task.uncancel()


class OutboundHTTP:
    """Shared outbound client. Create once per process (``start``/``close``), inject everywhere."""

    def __init__(
        self, policy: RetryPolicy | None = None, *, user_agent: str = "notification-controller"
    ) -> None:
        self.policy = policy or RetryPolicy()
        self._user_agent = user_agent
        self._env_proxies: dict[str, str] = {}
        self.attempts = 0  # total attempts made (observability and tests)
        self._transport: Transport = H1Client(user_agent=user_agent)
        self._retrying: AsyncRetrying | None = None

    async def start(self) -> None:
        self._env_proxies = {k: v for k, v in getproxies().items() if k in ("http", "https")}

    async def close(self) -> None:
        await self._transport.close()

    def _env_proxy(self, url: str) -> str | None:
        """HTTP(S)_PROXY from the environment (read once), honouring NO_PROXY."""
        if not self._env_proxies:
            return None
        parts = urlsplit(url)
        proxy = self._env_proxies.get(parts.scheme)
        if proxy is None or _no_proxy(parts.hostname or ""):
            return None
        return proxy

    async def send(
        self,
        request: OutboundRequest,
        *,
        timeout: float,
        proxy: str | None = None,
        tls: ssl.SSLContext | None = None,
        masks: Sequence[str] = (),
        check: Callable[[OutboundResponse], None] | None = None,
        retry: bool = True,
        body_limit: int | None = None,
    ) -> OutboundResponse:
        """Send with retries inside ``timeout`` seconds. Raises ``DeliveryError`` with a masked message."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # The budget is one timer that cancels this task, as ``asyncio.timeout_at`` does, without its
        # context manager (two coroutines and a Timeout object per delivery, issue 17).
        guard = _Deadline()
        handle = loop.call_at(deadline, guard.expire)
        attempt = functools.partial(self._attempt, request, proxy, tls, masks, check, body_limit)
        try:
            try:
                return await attempt()
            except RetryableDeliveryError as first:
                if not retry or self.policy.max_attempts <= 1:
                    raise
                return await self._retry(first, attempt, deadline)
        except asyncio.CancelledError:
            if not guard.timed_out():
                raise
        except TimeoutError:
            pass
        finally:
            handle.cancel()
            guard.settle()
        raise DeliveryError(
            f"request to {redact_url(request.url)} timed out after {timeout:g}s",
            reason="timeout",
            failure=FailureReason.TIMEOUT,
        )

    async def _retry(
        self,
        first: RetryableDeliveryError,
        attempt: Callable[[], Awaitable[OutboundResponse]],
        deadline: float,
    ) -> OutboundResponse:
        """THE retry loop (tenacity). The attempt ``send`` already made is tenacity's attempt 1: its error is
        replayed as that attempt's outcome, so every wait, stop and give-up decision is tenacity's, and a
        delivery that succeeds at once never builds a ``Retrying`` (~20 µs of CPU, half a direct POST)."""
        pending: RetryableDeliveryError | None = first

        async def replay_then_attempt() -> OutboundResponse:
            nonlocal pending
            if pending is not None:
                error, pending = pending, None
                raise error
            return await attempt()

        retrying = self._retrying_for(deadline)
        return await retrying(replay_then_attempt)

    def _retrying_for(self, deadline: float) -> AsyncRetrying:
        """tenacity's loop for one delivery: built once per client, copied with this delivery's deadline."""
        from tenacity import AsyncRetrying, retry_if_exception_type

        if self._retrying is None:
            self._retrying = AsyncRetrying(
                sleep=_sleep,
                wait=functools.partial(_wait, self.policy),
                retry=retry_if_exception_type(RetryableDeliveryError),
                reraise=True,
            )
        return self._retrying.copy(stop=functools.partial(_stop, self.policy.max_attempts, deadline))

    async def _attempt(
        self,
        request: OutboundRequest,
        proxy: str | None,
        tls: ssl.SSLContext | None,
        masks: Sequence[str],
        check: Callable[[OutboundResponse], None] | None,
        body_limit: int | None = None,
    ) -> OutboundResponse:
        self.attempts += 1
        url = request.url
        record = ATTEMPT_LOG.get()
        if record is not None:
            record.method, record.url, record.size, record.status = (
                request.method,
                url,
                len(request.body),
                None,
            )
            record.requests += 1
        try:
            origin = _origin(url)
        except ValueError:  # e.g. "http://[::1/x": never reaches a transport, never escapes as a ValueError
            raise PermanentDeliveryError(
                f"{request.method} {redact_url(url)}: invalid URL",
                reason="invalid_url",
                failure=FailureReason.INVALID_REQUEST,
            ) from None
        headers: Mapping[str, str] = request.headers  # read only: a transport copies what it changes
        key = IDEMPOTENCY_KEY.get()
        if key and not any(name.lower() == "idempotency-key" for name in headers):
            headers = {**headers, "Idempotency-Key": key}
        traceparent = TRACEPARENT.get()
        if traceparent and not any(name.lower() == "traceparent" for name in headers):
            headers = {**headers, "traceparent": traceparent}
        if request.basic_auth:  # set by hand: aiohttp.BasicAuth is deprecated in aiohttp 3.14
            user, password = request.basic_auth
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            headers = {**headers, "Authorization": "Basic " + token}
        try:  # one rule for both transports: framing headers dropped, control and non-ASCII refused
            headers = wire_headers(headers)
        except InvalidHeader as exc:
            raise PermanentDeliveryError(
                _mask(f'{request.method} "{redact_url(request.url)}": {exc}', masks),
                reason="invalid_header",
                failure=FailureReason.INVALID_REQUEST,
            ) from None
        limit = body_limit or self.policy.body_limit
        try:
            for _ in range(MAX_REDIRECTS + 1):
                via = proxy or (self._env_proxy(url) if self._env_proxies else None)
                exchange = Exchange(request.method, url, headers, request.body, tls, limit, via)
                response = await self._transport.send(exchange)
                if record is not None:
                    record.status = response.status
                if response.status in (301, 302, 303, 307, 308) and "Location" in response.headers:
                    target = urljoin(url, response.headers["Location"])
                    if _origin(target) != origin:
                        raise PermanentDeliveryError(
                            f"refused redirect from {redact_url(url)} to another host {redact_url(target)}",
                            reason="redirect_refused",
                            failure=FailureReason.REDIRECT,
                        )
                    url = target
                    continue
                break
            else:
                raise PermanentDeliveryError(
                    f"stopped after {MAX_REDIRECTS} redirects at {redact_url(url)}",
                    reason="redirect_loop",
                    failure=FailureReason.REDIRECT,
                )
        except TransportError as exc:
            verdict = classify_transport(exc)
            # Go's shape (`Post "https://host/***": connection refused`): the quotes end the URL for the masking.
            message = _mask(f'{request.method} "{redact_url(request.url)}": {exc.detail}', masks)
            error = RetryableDeliveryError if verdict.retry else PermanentDeliveryError
            raise error(message, reason=verdict.reason, failure=verdict.failure) from None
        except ValueError:  # a Location the URL parser refuses
            raise PermanentDeliveryError(
                _mask(f'{request.method} "{redact_url(request.url)}": invalid redirect', masks),
                reason="invalid_url",
                failure=FailureReason.INVALID_REQUEST,
            ) from None
        if response.status < 200 or response.status >= 300:
            verdict = classify_status(response.status, response.headers)
            # A provider or proxy may echo the request: mask the credentials in the forms sent (Basic,
            # Proxy-Authorization, URL/JSON-encoded), on the whole body before it is cut (issue 11 item 8),
            # and the address in the form it was sent, which a provider may have rewritten (issue 23 item 15).
            # The known secrets by substring (Flux's masktoken); the address forms, which are guesses ("/hook"
            # is a word), only where they stand whole: masking "hook" inside a Secret value that a later layer
            # masks would leave the rest of that value readable ("CANARY-*****-4b7d-s3cr3t", issue 24).
            echoes = credential_echoes(masks, headers, proxy or self._env_proxy(url))
            sent = {*address_forms(request.url), *address_forms(url)}
            shown = mask_values(_mask(response.text(), [*echoes, *masks]), credential_echoes(sent, {}))
            shown = shown[:1024]
            text = _mask(f"request failed with status code {response.status}: {shown}", masks)
            status = response.status
            if verdict.retry:
                raise RetryableDeliveryError(
                    text,
                    reason=verdict.reason,
                    failure=verdict.failure,
                    status=status,
                    body=shown,
                    retry_after=verdict.retry_after,
                )
            raise PermanentDeliveryError(
                text, reason=verdict.reason, failure=verdict.failure, status=status, body=shown
            )
        if check is not None:
            check(response)
        return response


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)  # looked up at call time: a test's virtual clock (looptime) applies


def _wait(policy: RetryPolicy, state: RetryCallState) -> float:
    """The wait before the next attempt: the receiver's ``Retry-After`` when it gave one, else the backoff
    (``attempt_number`` counts from 1, the backoff's attempt from 0)."""
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, RetryableDeliveryError) and exc.retry_after is not None:
        return exc.retry_after
    return backoff(state.attempt_number - 1, policy.wait_min, policy.wait_max)


def _stop(max_attempts: int, deadline: float, retry_state: RetryCallState) -> bool:
    """tenacity's stop: after ``max_attempts``, or when the coming wait would end at or past the delivery's
    deadline, the last error is re-raised now; a ``Retry-After`` or backoff that does not fit is not waited
    for, as Flux's context deadline would cut it anyway. tenacity computes the wait before it asks ``stop``
    (``upcoming_sleep``)."""
    if retry_state.attempt_number >= max_attempts:
        return True
    return retry_state.upcoming_sleep >= deadline - asyncio.get_running_loop().time()


def _no_proxy(host: str) -> bool:
    return bool(host) and proxy_bypass(host)


@functools.lru_cache(maxsize=256)  # the same few Provider addresses, every delivery
def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme == "http" else None)
    return parts.scheme, (parts.hostname or "").lower(), port


def _mask(text: str, masks: Sequence[str]) -> str:
    text = redact_urls_in(text)
    for secret in masks:
        text = mask_token(text, secret)
    return text


def masked(text: str, masks: Sequence[str]) -> str:
    """Public helper for notifiers with their own transports (NATS, SDKs)."""
    return _mask(text, masks)
