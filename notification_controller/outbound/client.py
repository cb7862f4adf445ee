"""The ONE outbound HTTP path. Providers never create a client or a retry loop of their own.

Two transports behind one ``send``: a request with no proxy goes through ``h1client.H1Client`` (our HTTP/1.1
client on llhttp, a third of aiohttp's CPU per request, issue 17); a proxied one (HTTP CONNECT, SOCKS, or
from the environment) through aiohttp. Both get the same headers (``request.wire_headers``: framing headers
dropped, control and non-ASCII characters refused), TLS context, redirect rule, body cap, response-head
limits, deadline, retries, failure reasons and error texts (issue 23 item 13; ``tests/adversarial/
test_transport_parity.py`` runs one hostile-server battery against both). No compressed answers are asked
for (bodies are not decompressed).

Owns the pooled ``aiohttp.ClientSession``, the per-delivery time budget (``spec.timeout`` covers all
attempts, as Flux's context deadline does), proxies, TLS, retries (tenacity, driven by the pure
``retry`` module: at most 5 attempts, 2 s·2ⁿ capped at 30 s, ``Retry-After`` honoured when it fits in
the budget), response bodies capped at 64 KiB, and redaction: error texts carry no token, password or
webhook URL. Redirects are followed only to the same scheme, host and port (Flux follows any; an
authenticated request must never be replayed to another host, checklist E7).

``aiohttp_socks`` is imported with the first SOCKS proxy and ``tenacity`` with the first retry (issue 17):
most processes never use a SOCKS proxy, and most deliveries succeed at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import io
import logging
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
from yarl import URL

from ..core.redact import address_forms, credential_echoes, mask_token, redact_url, redact_urls_in
from ..errors import DeliveryError, FailureReason, PermanentDeliveryError, RetryableDeliveryError
from .h1client import MAX_FIELD, MAX_HEADERS, H1Client
from .h1client import METHODS as DIRECT_METHODS
from .request import InvalidHeader, OutboundRequest, OutboundResponse, wire_headers
from .retry import backoff, classify_exception, classify_status, describe_exception, failure_of

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("idempotency_key", default="")
"""Set by the dispatcher around a delivery from a durable outbox: every request of that delivery carries
it as ``Idempotency-Key`` (IETF httpapi-idempotency-key-header), on every attempt, so a receiver can drop
redeliveries. A header of that name from the Provider's own headers wins."""

MAX_REDIRECTS = 10
MAX_SOCKS_SESSIONS = 32
SOCKS_SCHEMES = ("socks5://", "socks5h://", "socks4://")


@dataclass(frozen=True)
class RetryPolicy:
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
        self._session: aiohttp.ClientSession | None = None
        self._env_proxies: dict[str, str] = {}
        # SOCKS proxies work at the connector level in aiohttp: one pooled session per proxy URL.
        self._socks_sessions: OrderedDict[str, aiohttp.ClientSession] = OrderedDict()
        # aiohttp_socks' ProxyError once a SOCKS session exists (only its connector raises it): () before
        self._proxy_errors: tuple[type[Exception], ...] = ()
        self.attempts = 0  # total attempts made (observability and tests)
        self._direct = H1Client()  # requests without a proxy (h1client.py); the others go through aiohttp

    async def start(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=512, limit_per_host=64, ttl_dns_cache=30)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                headers={"User-Agent": self._user_agent},
                # trust_env would read netrc and the proxy environment in a thread for every request
                # (a fifth of the dispatch CPU): resolve the environment proxies once instead.
                trust_env=False,
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding",),  # bodies are not decompressed: do not ask for gzip
                # the answer's head: aiohttp's defaults, written down so both transports keep one limit
                max_line_size=MAX_FIELD,
                max_field_size=MAX_FIELD,
                max_headers=MAX_HEADERS,
                # No cookie jar, as Flux's Go client (``Jar`` nil): a cookie one Provider's endpoint sets
                # is never sent with another's request through this shared session; and no cookie
                # bookkeeping per request (issue 17).
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._env_proxies = {k: v for k, v in getproxies().items() if k in ("http", "https")}

    async def close(self) -> None:
        await self._direct.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        while self._socks_sessions:
            _, session = self._socks_sessions.popitem()
            await session.close()

    async def _session_for(self, proxy: str | None) -> tuple[aiohttp.ClientSession, str | None]:
        """The session and the per-request proxy for ``proxy`` (http/https per request, socks per session)."""
        if proxy is None or not proxy.startswith(SOCKS_SCHEMES):
            return self.session, proxy
        session = self._socks_sessions.get(proxy)
        if session is None:
            from aiohttp_socks import ProxyConnector, ProxyError  # with the first SOCKS proxy

            self._proxy_errors = (ProxyError,)
            connector = ProxyConnector.from_url(proxy, limit=64, rdns=True)
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                headers={"User-Agent": self._user_agent},
                trust_env=False,
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding",),  # bodies are not decompressed: do not ask for gzip
                cookie_jar=aiohttp.DummyCookieJar(),
                # the answer's head: aiohttp's defaults, written down so both transports keep one limit
                max_line_size=MAX_FIELD,
                max_field_size=MAX_FIELD,
                max_headers=MAX_HEADERS,
            )
            self._socks_sessions[proxy] = session
            if len(self._socks_sessions) > MAX_SOCKS_SESSIONS:
                _, oldest = self._socks_sessions.popitem(last=False)
                await oldest.close()
        else:
            self._socks_sessions.move_to_end(proxy)
        return session, None

    def _direct_headers(self, headers: Mapping[str, str], body: bytes) -> list[tuple[str, str]]:
        """The request's headers, one per name (a Secret's ``content-type`` overrides the Provider's
        ``Content-Type``), plus what aiohttp's session would add that a receiver may look at: the User-Agent,
        ``Accept: */*``, a Content-Type for a body without one (``application/octet-stream``). No
        ``Accept-Encoding``: the body is not decompressed (a compressed error text would be unreadable)."""
        out: list[tuple[str, str]] = []
        names: dict[str, int] = {}
        for name, value in headers.items():
            # one line per name, the last value winning, as aiohttp's multidict and Go's Header.Set make it
            lower = name.lower()
            at = names.get(lower)
            if at is None:
                names[lower] = len(out)
                out.append((name, value))
            else:
                out[at] = (name, value)
        if "user-agent" not in names:
            out.insert(0, ("User-Agent", self._user_agent))
        if "accept" not in names:
            out.append(("Accept", "*/*"))
        if body and "content-type" not in names:
            out.append(("Content-Type", "application/octet-stream"))
        return out

    def _env_proxy(self, url: str) -> str | None:
        """HTTP(S)_PROXY from the environment (read once), honouring NO_PROXY."""
        if not self._env_proxies:
            return None
        parts = urlsplit(url)
        proxy = self._env_proxies.get(parts.scheme)
        if proxy is None or _no_proxy(parts.hostname or ""):
            return None
        return proxy

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("OutboundHTTP.start() was not called")
        return self._session

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
        try:
            # Fast path: most deliveries succeed at once, without building a tenacity loop.
            try:
                return await self._attempt(request, proxy, tls, masks, check, body_limit)
            except RetryableDeliveryError as first:
                if not retry or self.policy.max_attempts <= 1:
                    raise
                first_delay = first.retry_after
                if first_delay is None:
                    first_delay = backoff(0, self.policy.wait_min, self.policy.wait_max)
                if first_delay >= deadline - loop.time():
                    raise
                await asyncio.sleep(first_delay)
            again = functools.partial(self._attempt, request, proxy, tls, masks, check, body_limit)
            return await self._retry(again, deadline)
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
        self, attempt_once: Callable[[], Awaitable[OutboundResponse]], deadline: float
    ) -> OutboundResponse:
        """The attempts after the first (tenacity, imported with the first retry)."""
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        loop = asyncio.get_running_loop()
        policy = self.policy

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            # attempt_number counts from the first attempt made before tenacity took over
            delay = backoff(state.attempt_number, policy.wait_min, policy.wait_max)
            if isinstance(exc, RetryableDeliveryError) and exc.retry_after is not None:
                delay = exc.retry_after
            remaining = deadline - loop.time()
            if delay >= remaining:
                # Waiting would overrun the budget: give up now with the last error.
                raise (
                    exc
                    if exc is not None
                    else DeliveryError("timed out", reason="timeout", failure=FailureReason.TIMEOUT)
                )
            return delay

        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(policy.max_attempts - 1),
            wait=wait,
            retry=retry_if_exception_type(RetryableDeliveryError),
            reraise=True,
        ):
            with attempt:
                return await attempt_once()
        raise DeliveryError(
            "no attempt was made", reason="internal", failure=FailureReason.INTERNAL
        )  # unreachable: reraise=True

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
        try:
            origin = _origin(url)
        except ValueError:  # e.g. "http://[::1/x": never reaches aiohttp, and never escapes as a ValueError
            raise PermanentDeliveryError(
                f"{request.method} {redact_url(url)}: invalid URL",
                reason="invalid_url",
                failure=FailureReason.INVALID_REQUEST,
            ) from None
        headers: Mapping[str, str] = request.headers  # read only: aiohttp copies it into its own multidict
        key = IDEMPOTENCY_KEY.get()
        if key and not any(name.lower() == "idempotency-key" for name in headers):
            headers = {**headers, "Idempotency-Key": key}
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
        try:
            if proxy is None:  # the common case, without a coroutine
                session, request_proxy = self.session, None
            else:
                session, request_proxy = await self._session_for(proxy)
            limit = body_limit or self.policy.body_limit
            for _ in range(MAX_REDIRECTS + 1):
                via = request_proxy or (self._env_proxy(url) if self._env_proxies else None)
                direct = _direct_target(url) if proxy is None and via is None else None
                if direct is not None and request.method in DIRECT_METHODS:
                    scheme, host, port, target = direct
                    status, answer_headers, body = await self._direct.request(
                        request.method,
                        scheme,
                        host,
                        port,
                        target,
                        self._direct_headers(headers, request.body),
                        request.body,
                        tls=tls,
                        body_limit=limit,
                    )
                    response = OutboundResponse(status, answer_headers, body)
                else:
                    async with session.request(
                        request.method,
                        url,
                        proxy=via,
                        data=_payload(request.body),
                        headers=headers,
                        ssl=tls if tls is not None else True,
                        allow_redirects=False,
                    ) as resp:
                        body = await resp.content.read(limit)
                        response = OutboundResponse(resp.status, dict(resp.headers), body)
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
        except DeliveryError:
            raise
        except self._proxy_errors as exc:
            # the SOCKS proxy refused (bad credentials, target not allowed): not transient
            raise PermanentDeliveryError(
                _mask(f"{request.method} {redact_url(request.url)}: SOCKS proxy error: {exc}", masks),
                reason="proxy",
                failure=FailureReason.CONNECTION,
            ) from None
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            verdict = classify_exception(exc)
            # Go's shape (`Post "https://host/***": connection refused`): the quotes end the URL for the masking.
            message = _mask(f'{request.method} "{redact_url(request.url)}": {describe_exception(exc)}', masks)
            if verdict.retry:
                raise RetryableDeliveryError(
                    message, reason=verdict.reason, failure=failure_of(verdict)
                ) from None
            raise PermanentDeliveryError(
                message, reason=verdict.reason, failure=failure_of(verdict)
            ) from None
        if response.status < 200 or response.status >= 300:
            verdict = classify_status(response.status, response.headers)
            # A provider or proxy may echo the request: mask the credentials in the forms sent (Basic,
            # Proxy-Authorization, URL/JSON-encoded), on the whole body before it is cut (issue 11 item 8),
            # and the address in the form it was sent, which a provider may have rewritten (issue 23 item 15).
            sent = {*address_forms(request.url), *address_forms(url)}
            echoes = credential_echoes([*masks, *sent], headers, proxy or self._env_proxy(url))
            shown = _mask(response.text(), [*echoes, *masks])[:1024]
            text = _mask(f"request failed with status code {response.status}: {shown}", masks)
            status = response.status
            failure = failure_of(verdict, status)
            if verdict.retry:
                raise RetryableDeliveryError(
                    text,
                    reason=verdict.reason,
                    failure=failure,
                    status=status,
                    body=shown,
                    retry_after=verdict.retry_after,
                )
            raise PermanentDeliveryError(
                text, reason=verdict.reason, failure=failure, status=status, body=shown
            )
        if check is not None:
            check(response)
        return response


@functools.lru_cache(maxsize=256)  # the same few Provider addresses, every delivery
def _direct_target(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path and query) as aiohttp would send them (yarl's encoding), or None when the
    URL needs aiohttp: not http(s), credentials in it, no host."""
    parsed = URL(url)
    host = parsed.raw_host
    if parsed.scheme not in ("http", "https") or not host or parsed.raw_user or parsed.raw_password:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, host, port, parsed.raw_path_qs or "/"


def _payload(body: bytes) -> bytes | io.BytesIO | None:
    """Bodies over 1 MiB (a 1 MiB event message) go as a stream: aiohttp warns that raw bytes that large
    may block the loop. A fresh stream per request, so retries and redirects resend the whole body."""
    if not body:
        return None
    return io.BytesIO(body) if len(body) > 1 << 20 else body


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
