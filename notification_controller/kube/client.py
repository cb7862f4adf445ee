"""``KubeClient``: the one connection to the Kubernetes API server.

What it adds over ``kubernetes_asyncio``:

* **Config precedence** as in controller-runtime: ``--kubeconfig`` flag, then ``KUBECONFIG``, then the
  in-cluster service account, then ``~/.kube/config``.
* **Client-side throttling**: a token bucket (``--kube-api-qps`` 50, ``--kube-api-burst`` 300, the
  client-go defaults Flux passes) in front of every request, watches included.
* **A timeout on every call** (``--kube-api-timeout``-style budget; watches use an inactivity timeout).
* **401** (a rotated service-account token or kubeconfig credentials): the credentials are reloaded from
  their files and the request is retried once (adversarial checklist D8).
* **429**: ``Retry-After`` is honoured — retried in place while it fits the request's time budget,
  otherwise surfaced as ``KubeError(status=429, retry_after=...)`` so callers back off (D7).
* **Errors** from ``kubernetes_asyncio`` and ``aiohttp`` never leave this module: they become
  ``errors.KubeError`` whose message carries the method, the path, the status and the API server's
  ``Status.reason`` — the server's free-text message only for statuses whose message is a fixed template
  (401/403/404/409/410/429), never a response body that could echo request content.

Requests and responses are raw JSON (``dict``), not the generated models: the informers parse into our
pydantic models, and deserialising through the OpenAPI models would cost time for nothing.

``on_request(code, method, host)``, when given, is called once per HTTP attempt (retries and watches
included), as client-go feeds ``rest_client_requests_total``: ``code`` is the status or ``<error>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import orjson

from ..core.apiref import build_api_path
from ..errors import KubeError
from ..lib.retryafter import parse_retry_after
from ..lib.tokenbucket import Bucket
from . import library

log = logging.getLogger(__name__)

# Only the parts of kubernetes_asyncio used here, not its ~850 API and model modules (kube/library.py).
_k8s = library.load()
ApiException = _k8s.ApiException
OpenApiException = _k8s.OpenApiException
ConfigException = _k8s.ConfigException

DEFAULT_QPS = 50.0
DEFAULT_BURST = 300
DEFAULT_TIMEOUT = 30.0
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_TOKEN = f"{SERVICE_ACCOUNT_DIR}/token"
SERVICE_ACCOUNT_CA = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
USER_AGENT = "notification-controller/0.1 (python; kubernetes_asyncio)"

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

MAX_ERROR_BODY = 256 * 1024
MAX_429_RETRIES = 3
# Statuses whose Status.message is a server-side template naming only the resource (safe to show).
_TEMPLATED_MESSAGE_STATUSES = frozenset({401, 403, 404, 405, 409, 410, 429})

Query = Sequence[tuple[str, str]]


# ---- throttling -----------------------------------------------------------------------------------
class ClientThrottle:
    """client-go's ``flowcontrol`` throttle: ``qps`` tokens per second, at most ``burst`` saved, on the one
    token bucket (``lib/tokenbucket.py``). ``reserve()`` takes a token now and returns how long the caller
    must wait for it, so waiters are served in arrival order without a lock. ``qps <= 0`` disables it.
    """

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self._clock = clock
        self._bucket = Bucket(qps, burst, clock())
        self.burst = self._bucket.burst

    def reserve(self) -> float:
        return self._bucket.reserve(self._clock())

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


# ---- error translation (pure) ---------------------------------------------------------------------
def status_error(
    method: str, path: str, status: int, body: bytes | str | None, headers: Mapping[str, str] | None = None
) -> KubeError:
    """Translate an HTTP error answer of the API server into a ``KubeError`` with a safe message."""
    status_obj: dict[str, Any] = {}
    if body:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            status_obj = parsed
    return _status_object_error(method, path, status, status_obj, headers)


def _status_object_error(
    method: str,
    path: str,
    status: int,
    status_obj: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> KubeError:
    message = f"{method} {path}: HTTP {status}" if method else f"{path}: HTTP {status}"
    reason = status_obj.get("reason")
    if isinstance(reason, str) and reason:
        message += f" {reason}"
    text = status_obj.get("message")
    details = status_obj.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if status in _TEMPLATED_MESSAGE_STATUSES and isinstance(text, str) and text:
        message += f": {text[:512]}"
    elif isinstance(causes, list):
        fields = sorted(
            {c["field"] for c in causes if isinstance(c, dict) and isinstance(c.get("field"), str)}
        )
        if fields:
            message += " (invalid fields: " + ", ".join(fields[:10]) + ")"
    retry_after = None
    if headers is not None:
        retry_after = parse_retry_after(headers.get("Retry-After"))
    if retry_after is None and isinstance(details, dict):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and seconds >= 0:
            retry_after = float(seconds)
    return KubeError(message, status=status, retry_after=retry_after)


def watch_status_error(path: str, status_obj: Mapping[str, Any]) -> KubeError:
    """A watch ``ERROR`` event (its object is a ``metav1.Status``) as a ``KubeError``."""
    code = status_obj.get("code")
    status = code if isinstance(code, int) else 500
    return _status_object_error("WATCH", path, status, status_obj)


def translate_exception(method: str, path: str, exc: BaseException) -> KubeError:
    """Any exception of the HTTP/kube libraries as a ``KubeError`` (status 0 when there was no answer)."""
    where = f"{method} {path}"
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        headers = exc.headers if isinstance(exc.headers, Mapping) else None
        return status_error(method, path, int(exc.status or 0), exc.body, headers)
    if isinstance(exc, TimeoutError):
        return KubeError(f"{where}: request timed out")
    if isinstance(exc, aiohttp.ClientResponseError):
        return KubeError(f"{where}: HTTP {exc.status}", status=exc.status)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return KubeError(f"{where}: cannot connect to {exc.host}:{exc.port}: {exc.os_error.strerror or exc}")
    if isinstance(exc, aiohttp.ClientError):
        return KubeError(f"{where}: {type(exc).__name__}: {_short(exc)}")
    if isinstance(exc, ConfigException):
        return KubeError(f"invalid Kubernetes client configuration: {_short(exc)}")
    if isinstance(exc, (OpenApiException, OSError, ValueError)):
        return KubeError(f"{where}: {type(exc).__name__}: {_short(exc)}")
    return KubeError(f"{where}: {type(exc).__name__}")


def _abandon(response: aiohttp.ClientResponse) -> None:
    """Drop a response still streaming (a watch): abort the connection, skipping the TLS shutdown."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    if transport is not None:
        transport.abort()
    response.close()


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


# ---- configuration --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigSource:
    """Where the client configuration comes from; ``load()`` can be called again to reload credentials."""

    kind: Literal["kubeconfig", "in-cluster"]
    path: str = ""
    context: str | None = None
    token_file: str = SERVICE_ACCOUNT_TOKEN
    ca_file: str = SERVICE_ACCOUNT_CA
    environ: Mapping[str, str] | None = None

    def describe(self) -> str:
        return f"kubeconfig {self.path}" if self.kind == "kubeconfig" else "in-cluster service account"

    async def load(self) -> Any:
        """A fresh ``kubernetes_asyncio`` ``Configuration`` read from the files now."""
        configuration = _k8s.Configuration()
        try:
            if self.kind == "kubeconfig":
                await _k8s.load_kube_config(
                    config_file=self.path,
                    context=self.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                load_incluster: Any = _k8s.load_incluster_config
                load_incluster(
                    client_configuration=configuration,
                    token_filename=self.token_file,
                    cert_filename=self.ca_file,
                    environ=dict(self.environ if self.environ is not None else os.environ),
                )
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            raise KubeError(
                f"cannot load Kubernetes configuration from {self.describe()}: {_short(exc)}"
            ) from exc
        return configuration


def resolve_config_source(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: str | None = None,
    token_file: str = SERVICE_ACCOUNT_TOKEN,
    ca_file: str = SERVICE_ACCOUNT_CA,
) -> ConfigSource:
    """Pick the configuration: ``--kubeconfig``, ``KUBECONFIG``, in-cluster, ``~/.kube/config``."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return ConfigSource("kubeconfig", path=kubeconfig, context=context)
    if env.get("KUBECONFIG"):
        return ConfigSource("kubeconfig", path=env["KUBECONFIG"], context=context)
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        return ConfigSource("in-cluster", token_file=token_file, ca_file=ca_file, environ=dict(env))
    default = Path(home if home is not None else Path.home()) / ".kube" / "config"
    if default.is_file():
        return ConfigSource("kubeconfig", path=str(default), context=context)
    raise KubeError(
        "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account"
    )


def api_path(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None
) -> str:
    """``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` otherwise.

    Every part is validated against Kubernetes' grammar and percent-encoded (``core.apiref``): a part
    that could change the path's structure (``/``, ``..``, ``?``, ``#``, ``%``) raises ``InvalidReference``
    (a ``KubeError``) and no request is made.
    """
    return build_api_path(group, version, plural, namespace, name)


# ---- the client -----------------------------------------------------------------------------------
class WatchStalled(KubeError):
    """A watch stream sent nothing for longer than its inactivity timeout (checklist D5)."""


class KubeClient:
    """Raw JSON access to the API server with throttling, timeouts, credential reload and safe errors."""

    def __init__(
        self,
        source: ConfigSource,
        configuration: Any,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
        on_request: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.source = source
        self.timeout = timeout
        self.on_request = on_request  # (code, method, host) per attempt: rest_client_requests_total
        self.bucket = ClientThrottle(qps, burst)
        self._api = self._new_api_client(configuration)
        self._retired: list[Any] = []
        self._reload_lock = asyncio.Lock()
        self._credential_generation = 0
        self.credential_reloads = 0  # observable in tests and metrics

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
        environ: Mapping[str, str] | None = None,
        on_request: Callable[[str, str, str], None] | None = None,
    ) -> KubeClient:
        """Resolve the configuration (see ``resolve_config_source``), load it and build a client."""
        source = resolve_config_source(kubeconfig, context=context, environ=environ)
        return await cls.from_source(source, qps=qps, burst=burst, timeout=timeout, on_request=on_request)

    @classmethod
    async def from_source(
        cls,
        source: ConfigSource,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
        on_request: Callable[[str, str, str], None] | None = None,
    ) -> KubeClient:
        configuration = await source.load()
        return cls(source, configuration, qps=qps, burst=burst, timeout=timeout, on_request=on_request)

    @staticmethod
    def _new_api_client(configuration: Any) -> Any:
        try:
            api = _k8s.ApiClient(configuration)
        except (OSError, ValueError) as exc:  # unreadable CA or client certificate
            raise KubeError(f"invalid Kubernetes TLS configuration: {_short(exc)}") from exc
        api.user_agent = USER_AGENT
        return api

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def close(self) -> None:
        for api in [*self._retired, self._api]:
            with contextlib.suppress(Exception):
                # No TLS close_notify exchange: it can wait for the ssl shutdown timeout (30 s) and
                # leaves sockets unclosed if the loop stops first.
                await api.rest_client.pool_manager.connector.close(abort_ssl=True)
            with contextlib.suppress(Exception):
                await api.close()
        self._retired.clear()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- credentials ------------------------------------------------------------------------------
    async def reload_credentials(self, seen_generation: int | None = None) -> None:
        """Re-read the kubeconfig or service-account token (a 401 means they were rotated)."""
        async with self._reload_lock:
            if seen_generation is not None and seen_generation != self._credential_generation:
                return  # another request reloaded them meanwhile
            fresh = await self.source.load()
            current = self._api.configuration
            same_transport = (
                fresh.host == current.host
                and not fresh.cert_file
                and not current.cert_file
                and fresh.verify_ssl == current.verify_ssl
            )
            if same_transport:
                current.api_key = fresh.api_key
                current.api_key_prefix = fresh.api_key_prefix
                current.refresh_api_key_hook = fresh.refresh_api_key_hook
                current.username, current.password = fresh.username, fresh.password
            else:  # client certificates or endpoint changed: a new TLS session is needed
                self._retired.append(self._api)
                self._api = self._new_api_client(fresh)
            self._credential_generation += 1
            self.credential_reloads += 1
            log.info("reloaded Kubernetes credentials from %s", self.source.describe())

    # ---- requests ---------------------------------------------------------------------------------
    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None,
        body: Any,
        headers: Mapping[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """One throttled request; a 401 reloads the credentials and is retried once."""
        for attempt in (1, 2):
            await self.bucket.acquire()
            generation = self._credential_generation
            code = "<error>"
            try:
                response: aiohttp.ClientResponse = await self._api.call_api(
                    path,
                    method,
                    query_params=list(query) if query else None,
                    header_params=dict(headers),
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout,
                )
                code = str(response.status)
            except (
                ApiException,
                OpenApiException,
                aiohttp.ClientError,
                OSError,
                TimeoutError,
                ValueError,
            ) as exc:
                raise translate_exception(method, path, exc) from exc
            finally:
                if self.on_request is not None:
                    self.on_request(code, method, urlsplit(self.host).netloc or "none")
            if response.status == 401 and attempt == 1:
                response.release()
                log.warning("%s %s: 401 Unauthorized; reloading credentials", method, path)
                await self.reload_credentials(generation)
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """A JSON request; the decoded answer. Errors → ``KubeError`` (429 retried within the budget)."""
        budget = self.timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + budget
        headers = {"Content-Type": content_type, "Accept": accept}
        retries_429 = 0
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise KubeError(f"{method} {path}: request timed out")
            try:
                async with asyncio.timeout(remaining):
                    response = await self._send(
                        method,
                        path,
                        query=query,
                        body=body,
                        headers=headers,
                        timeout=aiohttp.ClientTimeout(total=remaining),
                    )
                    try:
                        data = await response.read()
                    finally:
                        response.release()
            except TimeoutError as exc:
                raise KubeError(f"{method} {path}: request timed out") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise translate_exception(method, path, exc) from exc
            if 200 <= response.status < 300:
                if not data:
                    return {}
                try:
                    decoded = orjson.loads(data)
                except orjson.JSONDecodeError as exc:
                    raise KubeError(f"{method} {path}: answer is not JSON", status=response.status) from exc
                return decoded if isinstance(decoded, dict) else {"items": decoded}
            error = status_error(method, path, response.status, data[:MAX_ERROR_BODY], response.headers)
            if response.status == 429 and retries_429 < MAX_429_RETRIES:
                wait = error.retry_after if error.retry_after is not None else 1.0
                if asyncio.get_running_loop().time() + wait < deadline:
                    retries_429 += 1
                    log.info("%s %s: 429, retrying after %.1fs", method, path, wait)
                    await asyncio.sleep(wait)
                    continue
            raise error

    async def list(
        self,
        path: str,
        *,
        query: Query | None = None,
        page_size: int = 500,
        timeout: float | None = None,
        accept: str = JSON,
    ) -> tuple[list[dict[str, Any]], str]:
        """All items of a collection (paginated with ``limit``/``continue``) and the list's resourceVersion.

        The list is a consistent read (``resourceVersion`` unset, served from etcd): never older than what
        the informer saw before (checklist D1/D3). An expired continue token (410) restarts the list.
        """
        for _ in range(3):
            items: list[dict[str, Any]] = []
            token = ""
            try:
                while True:
                    params = [*(query or ()), ("limit", str(page_size))]
                    if token:
                        params.append(("continue", token))
                    page = await self.request("GET", path, query=params, timeout=timeout, accept=accept)
                    page_items = page.get("items") or []
                    if not isinstance(page_items, list):
                        raise KubeError(f"GET {path}: list answer without items")
                    items.extend(i for i in page_items if isinstance(i, dict))
                    meta = page.get("metadata") or {}
                    token = str(meta.get("continue") or "")
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except KubeError as exc:
                if exc.gone and token:
                    log.info("GET %s: continue token expired; restarting the list", path)
                    continue
                raise
        raise KubeError(f"GET {path}: list kept expiring", status=410)

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        inactivity_timeout: float,
        query: Query | None = None,
        bookmarks: bool = True,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events (``{"type": ..., "object": ...}``) until the server ends the stream.

        Raises ``KubeError`` if the watch cannot start (e.g. 410 for a too-old resourceVersion) and
        ``WatchStalled`` when nothing arrives for ``inactivity_timeout`` seconds. Use with
        ``contextlib.aclosing`` so the connection is released when the consumer stops early.
        """
        params: list[tuple[str, str]] = [
            *(query or ()),
            ("watch", "1"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource_version:
            params.append(("resourceVersion", resource_version))
        if bookmarks:
            params.append(("allowWatchBookmarks", "true"))
        connect = min(self.timeout, inactivity_timeout)
        try:
            async with asyncio.timeout(connect):
                response = await self._send(
                    "GET",
                    path,
                    query=params,
                    body=None,
                    headers={"Accept": JSON, "Content-Type": JSON},
                    timeout=aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect),
                )
        except TimeoutError as exc:
            raise KubeError(f"WATCH {path}: request timed out") from exc
        try:
            if response.status != 200:
                try:
                    async with asyncio.timeout(connect):
                        data = await response.content.read(MAX_ERROR_BODY)
                except (TimeoutError, aiohttp.ClientError, OSError):
                    data = b""
                raise status_error("WATCH", path, response.status, data, response.headers)
            while True:
                try:
                    async with asyncio.timeout(inactivity_timeout):
                        line = await response.content.readline()
                except TimeoutError as exc:
                    raise WatchStalled(f"WATCH {path}: no data for {inactivity_timeout:.0f}s") from exc
                except (aiohttp.ClientError, OSError, ValueError) as exc:
                    raise translate_exception("WATCH", path, exc) from exc
                if not line:
                    return  # the server closed the stream (timeoutSeconds elapsed)
                line = line.strip()
                if not line:
                    continue
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    log.warning("WATCH %s: skipping an undecodable event line", path)
                    continue
                if isinstance(event, dict):
                    yield event
        finally:
            _abandon(response)
