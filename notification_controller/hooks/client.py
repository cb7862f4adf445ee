"""Call one hook: resolve its address, sign, POST JSON through ``OutboundHTTP``, read the answer.

* **Address**: ``uri`` as is; a Service ``ref`` becomes ``<scheme>://<name>.<namespace>.svc.cluster.local:
  <port><path>`` with scheme, port and path from ``uri`` when both are set (default ``http``, port 80 —
  443 for https — and ``/``). The Service must exist (``Cluster.get_metadata``; cached 30 s).
* **Signing**: with ``secretRef``, ``X-Signature: sha256=<hex HMAC-SHA256(token, body)>`` over the exact
  bytes sent, as the ``generic-hmac`` provider signs. **TLS**: ``certSecretRef`` as for providers.
* **Transport**: the one outbound path (``OutboundHTTP.send``) with ``retry=False``: the Hooks API has its
  own retry rule (the error body's ``permanent``), applied here within the hook's ``timeout``.
* **Errors** become ``HookCallError``: an error answer (any non-2xx) carries the hook's ``message``,
  ``permanent`` and ``continue``; a timeout or a connection error is non-permanent without continue;
  a 2xx body that is not JSON is permanent. Messages are masked (hook token, URLs redacted).

``OutboundHTTP`` reports a non-2xx answer as a ``DeliveryError`` carrying ``status`` and ``body`` (the first
KiB, masked): ``error_answer`` reads them, no message is parsed. An error body longer than 1 KiB loses its
structure and counts as a plain non-permanent error.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from ..api.common import Secret
from ..api.hooks import ServiceReference
from ..core.redact import SecretValue, mask_token, redact_url
from ..errors import ConfigError, DeliveryError, FailureReason, HookError, KubeError
from ..lib.backoff import backoff
from ..lib.signing import hmac_signature
from ..objects.base import Cluster, ObjectStore
from ..outbound import OutboundHTTP, OutboundRequest
from ..providers.options import tls_context
from .registry import BoundHook

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Signature"
SIGNING_KEY = "token"
MAX_MESSAGE = 1024
SERVICE_TTL = 30.0


class HookCallError(HookError):
    """A hook call failed. ``permanent``/``proceed`` come from the hook's error body (``continue``)."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        proceed: bool = False,
        timeout: bool = False,
        status: int | None = None,
    ) -> None:
        super().__init__(message, permanent=permanent, proceed=proceed)
        self.timeout = timeout
        self.status = status


@dataclass(frozen=True)
class HookTarget:
    """A hook ready to be called: resolved URL, time budget, signing key, TLS and values to mask."""

    name: str
    url: str
    timeout: float
    signing_key: SecretValue | None = None
    tls: ssl.SSLContext | None = None
    masks: tuple[str, ...] = ()

    def mask(self, text: str) -> str:
        for value in self.masks:
            text = mask_token(text, value)
        return text


def service_url(ref: ServiceReference, uri: str | None, default_namespace: str) -> str:
    """The URL of a Service ``ref``, combined with the scheme, port and path of ``uri`` when given."""
    namespace = ref.namespace or default_namespace
    scheme, port, path, query = "http", None, "/", ""
    if uri:
        parts = urlsplit(uri)
        scheme = parts.scheme or "http"
        port = parts.port
        path = parts.path or "/"
        query = parts.query
    if port is None:
        port = ref.port or (443 if scheme == "https" else 80)
    host = f"{ref.name}.{namespace}.svc.cluster.local:{port}"
    return urlunsplit((scheme, host, path, query, ""))


def error_answer(exc: DeliveryError) -> tuple[int, str] | None:
    """(status, body text) of a non-2xx answer reported by ``OutboundHTTP``; None for transport errors."""
    if exc.status is None:
        return None
    return exc.status, exc.body


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


class TargetResolver:
    """Turns a ``BoundHook`` into a ``HookTarget`` (Secrets from the store, Services from the cluster)."""

    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        *,
        service_ttl: float = SERVICE_TTL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.service_ttl = service_ttl
        self._monotonic = monotonic
        self._services: dict[tuple[str, str], float] = {}  # (namespace, name) → verified until
        self._tls: dict[tuple[str, str], tuple[object, ssl.SSLContext]] = {}

    async def resolve(self, bound: BoundHook) -> HookTarget:
        hook, ns = bound.hook, bound.namespace
        address = hook.address
        if address.ref is not None:
            await self._check_service(hook.name, address.ref.namespace or ns, address.ref.name)
            url = service_url(address.ref, address.uri, ns)
        else:
            assert address.uri is not None  # the model requires one of them
            url = address.uri
        key: SecretValue | None = None
        masks: list[str] = []
        if hook.secret_ref is not None:
            secret = self._secret(hook.name, ns, hook.secret_ref.name)
            token = secret.get_str(SIGNING_KEY)
            if not token:
                raise HookCallError(
                    f"hook '{hook.name}': secret '{ns}/{hook.secret_ref.name}' has no '{SIGNING_KEY}' key"
                )
            key = SecretValue(token)
            masks.append(token.strip())
        tls = None
        if hook.cert_secret_ref is not None:
            tls = self._tls_context(hook.name, ns, hook.cert_secret_ref.name)
        return HookTarget(hook.name, url, hook.timeout_seconds(), key, tls, tuple(m for m in masks if m))

    def _secret(self, hook: str, namespace: str, name: str) -> Secret:
        secret = self.store.secret(namespace, name)
        if secret is None:
            raise HookCallError(f"hook '{hook}': secret '{namespace}/{name}' not found")
        return secret

    def _tls_context(self, hook: str, namespace: str, name: str) -> ssl.SSLContext:
        secret = self._secret(hook, namespace, name)
        cached = self._tls.get((namespace, name))
        if cached is not None and cached[0] is secret:
            return cached[1]
        try:
            ctx = tls_context(secret)
        except ConfigError as exc:
            raise HookCallError(f"hook '{hook}': {exc}") from None
        self._tls[(namespace, name)] = (secret, ctx)
        return ctx

    async def _check_service(self, hook: str, namespace: str, name: str) -> None:
        now = self._monotonic()
        if self._services.get((namespace, name), 0.0) > now:
            return
        try:
            await self.cluster.get_metadata("v1", "Service", namespace, name)
        except KubeError as exc:
            self._services.pop((namespace, name), None)
            if exc.not_found:
                raise HookCallError(f"hook '{hook}': Service '{namespace}/{name}' not found") from None
            raise HookCallError(f"hook '{hook}': cannot read Service '{namespace}/{name}': {exc}") from None
        self._services[(namespace, name)] = now + self.service_ttl


class HookClient:
    """POSTs one request to one hook and returns the decoded 2xx answer (see the module docstring)."""

    def __init__(self, http: OutboundHTTP, *, backoff_min: float = 0.2, backoff_max: float = 2.0) -> None:
        self.http = http
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max

    async def call(self, target: HookTarget, payload: Mapping[str, Any], *, retry: bool) -> Any:
        """The JSON value of the 2xx answer (None for an empty body). Raises ``HookCallError``.

        With ``retry`` (pre-dispatch), non-permanent errors are retried with backoff while the hook's
        ``timeout`` allows; otherwise exactly one attempt is made.
        """
        body = orjson.dumps(payload)
        headers = {"Content-Type": "application/json"}
        if target.signing_key is not None:
            headers[SIGNATURE_HEADER] = hmac_signature(target.signing_key.reveal().encode(), body)
        request = OutboundRequest("POST", target.url, headers, body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + target.timeout
        attempt = 0
        last: HookCallError | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise last or self._timed_out(target)
            try:
                response = await self.http.send(
                    request, timeout=remaining, tls=target.tls, masks=target.masks, retry=False
                )
            except DeliveryError as exc:
                error = self._classify(target, exc)
            else:
                return self._decode(target, response.body)
            if error.timeout and last is not None:
                raise last  # the budget ran out while retrying: report what the hook said
            if not retry or error.permanent or error.proceed or error.timeout:
                raise error
            last = error
            delay = backoff(attempt, self.backoff_min, self.backoff_max)
            attempt += 1
            if loop.time() + delay >= deadline:
                raise error
            log.debug("hook %s failed (%s); retrying in %.2gs", target.name, error, delay)
            await asyncio.sleep(delay)

    @staticmethod
    def _timed_out(target: HookTarget) -> HookCallError:
        return HookCallError(f"hook '{target.name}' timed out after {target.timeout:g}s", timeout=True)

    @staticmethod
    def _decode(target: HookTarget, body: bytes) -> Any:
        if not body.strip():
            return None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise HookCallError(
                f"hook '{target.name}' answered 2xx with a body that is not JSON", permanent=True
            ) from None

    def _classify(self, target: HookTarget, exc: DeliveryError) -> HookCallError:
        answer = error_answer(exc)
        if answer is None:
            if exc.failure is FailureReason.TIMEOUT:
                return self._timed_out(target)
            return HookCallError(
                f"hook '{target.name}' could not be reached at {redact_url(target.url)}: "
                + target.mask(_short(str(exc)))
            )
        status, text = answer
        permanent = proceed = False
        message = text
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            permanent = data.get("permanent") is True
            proceed = data.get("continue") is True
            if isinstance(data.get("message"), str):
                message = data["message"]
        message = target.mask(_short(message)) or "(no message)"
        return HookCallError(
            f"hook '{target.name}' answered {status}: {message}",
            permanent=permanent,
            proceed=proceed,
            status=status,
        )
