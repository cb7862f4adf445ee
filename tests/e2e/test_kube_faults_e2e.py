"""The controller process against Kubernetes API faults (issue 7 "Faults", checklist D).

The controller runs as a subprocess with the ServiceAccount of ``config/rbac`` against the real test
API server (kube-apiserver v1.20 + etcd), as in ``test_controller_e2e.py``. What is proven here, at
the level of the whole process:

* **API server unavailable for 30 s** (checklist D4, D10 "liveness OK"): events are still accepted
  (202) and delivered from the informer cache for Alerts that existed before; ``/healthz`` stays 200;
  after the restart an edited Alert, a new Alert and a new Provider are honoured (the informers
  reconnected and match against current objects) and the reconcilers resume (a new Receiver gets its
  ``status.webhookPath``, reference §5.1 / §6.3). The process never exits and logs no traceback.
* **etcd compaction + restart** (checklist D1/D3 with a real server): the informers' resourceVersions
  are compacted away, so the watch after the restart gets 410 Gone and must relist; delivery then
  follows an Alert created after the restart.
* **Watch closed and slow list** (checklist D1, D10): a small TLS reverse proxy in front of the API
  server (``ApiProxy``, the controller's kubeconfig points at it) delays the Alert list, cuts every
  open watch connection and answers the next Alert watch with a ``410 Expired`` ``ERROR`` event. A slow
  first list keeps the controller unready (events 503, never a 202 from an empty cache) while
  ``/healthz`` stays 200; a slow *re*list serves events from the last good cache (202, delivered),
  and objects created while the list was slow arrive through the watch that follows it.

What is not repeated here, because ``tests/e2e/test_kube_layer.py`` covers it for the informer
against the real server and a scripted one: an object deleted while the API server is down is
tombstoned (``test_object_deleted_while_the_api_server_is_down_is_tombstoned_and_informers_recover``,
D2), ``ERROR 410`` mid-stream relists and converges (``test_error_410_mid_stream_relists_and_converges_
to_server_state``, D1), watch errors back off exponentially (``test_watch_errors_back_off_exponentially_
and_are_not_fatal``, D4), a silent stream is restarted from the last resourceVersion
(``test_silent_watch_is_restarted_with_the_last_resource_version``, D5), bookmarks (D6), ``Retry-After``
(D7), 401 credential reload (D8) and an unreachable server at start-up (D10).

Measured numbers are printed with the prefix ``[faults]`` (run with ``-s`` to see them) and recorded in
docs/kubernetes.md, "Faults and load".
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import yaml
from aiohttp import web

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    Controller,
    ThreadedSink,
    apply,
    flux_event,
    get,
    post_event,
    ready,
    wait_for,
)
from tests.support.capture import mint_tls

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 30.0
# An informer retrying a dead API server backs off 0.8 s doubling to 30 s (+20% jitter): after a long
# outage the next attempt can be up to ~36 s away. Recovery is asserted against that bound plus slack.
RECOVERY_BOUND = 75.0
T = TypeVar("T")


# ---- fixtures -------------------------------------------------------------------------------------
@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    server = ThreadedSink()
    yield server
    server.close()


@pytest.fixture
def apiserver_restored(installed: KubeTestServer) -> Iterator[KubeTestServer]:
    """The API server, guaranteed to be running again after the test (other tests share it)."""
    try:
        yield installed
    finally:
        installed.start_apiserver()


# ---- helpers --------------------------------------------------------------------------------------
def probe(controller: Controller, path: str) -> int:
    """HTTP status of ``GET <health server><path>``; 0 when the server does not answer."""
    try:
        with urllib.request.urlopen(controller.url("health", path), timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def assert_alive(controller: Controller) -> None:
    code = controller.proc.poll()
    assert code is None, f"controller exited with {code}:\n{controller.log()[-3000:]}"


def assert_clean_log(controller: Controller) -> None:
    log = controller.log()
    assert "Traceback" not in log, log[-5000:]


def is_ready(kube: KubeTestServer, kind: str, namespace: str, name: str) -> bool:
    return (ready(get(kube, kind, namespace, name)) or ("",))[0] == "True"


def deliveries(sink: ThreadedSink, path: str) -> list[str]:
    """Messages the sink received on ``path`` (the generic provider POSTs the event as JSON)."""
    return [r.json().get("message", "") for r in sink.requests() if r.path == path]


def provider(namespace: str, name: str, address: str) -> str:
    return textwrap.dedent(
        f"""\
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: {name}, namespace: {namespace}}}
        spec: {{type: generic, address: "{address}"}}
        """
    )


def alert(namespace: str, name: str, provider_ref: str, kind: str, source: str) -> str:
    return textwrap.dedent(
        f"""\
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: {name}, namespace: {namespace}}}
        spec:
          providerRef: {{name: {provider_ref}}}
          eventSources: [{{kind: {kind}, name: '{source}'}}]
        """
    )


def deliver_until_seen(
    controller: Controller,
    sink: ThreadedSink,
    path: str,
    event: dict[str, Any],
    label: str,
    timeout: float,
) -> float:
    """POST distinct events (each must get 202) until one arrives on ``path``; the seconds it took."""
    start = time.monotonic()
    sent: list[str] = []

    def attempt() -> bool:
        assert_alive(controller)
        message = f"{label}-{len(sent)}"
        sent.append(message)
        assert post_event(controller, {**event, "message": message}) == 202
        return bool(set(sent) & set(deliveries(sink, path)))

    wait_for(attempt, timeout=timeout, interval=0.5, what=f"{label} delivered to {path}")
    return time.monotonic() - start


def etcd_revision(kube: KubeTestServer) -> int:
    """The current etcd revision, from etcd's JSON gRPC gateway (no etcdctl needed)."""
    request = urllib.request.Request(
        f"{kube.etcd_url}/v3/kv/range",
        data=json.dumps({"key": base64.b64encode(b"/registry/namespaces/default").decode()}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return int(json.loads(resp.read())["header"]["revision"])


def etcd_compact(kube: KubeTestServer, revision: int) -> None:
    """``etcdctl compact <revision> --physical`` through the gateway."""
    request = urllib.request.Request(
        f"{kube.etcd_url}/v3/kv/compaction",
        data=json.dumps({"revision": str(revision), "physical": True}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200


# ---- the 30 s outage --------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_thirty_second_outage_is_served_from_cache_and_recovered(
    apiserver_restored: KubeTestServer, sa_kubeconfig: Path, namespace: str, sink: ThreadedSink
) -> None:
    """D4/D10: 30 s without an API server — events 202 and delivered, /healthz 200; then it all resumes."""
    kube = apiserver_restored
    apply(
        kube,
        provider(namespace, "before", f"{sink.url}/before")
        + alert(namespace, "apps", "before", "Kustomization", "*")
        + f"---\napiVersion: v1\nkind: Secret\nmetadata: {{name: hook-token, namespace: {namespace}}}\n"
        "stringData: {token: outage-hook-token}\n",
    )
    controller = Controller(kube, sa_kubeconfig, name="outage")
    try:
        controller.wait_ready()
        wait_for(lambda: is_ready(kube, "alert", namespace, "apps"), what="alert ready")
        app = flux_event(namespace, "app", "")
        deliver_until_seen(controller, sink, "/before", app, "warmup", timeout=30)

        kube.stop_apiserver()
        stopped = time.monotonic()
        outage: list[str] = []
        while time.monotonic() - stopped < OUTAGE_SECONDS:
            assert_alive(controller)
            assert probe(controller, "/healthz") == 200
            assert probe(controller, "/readyz") == 200  # the last good cache keeps serving
            message = f"outage-{len(outage)}"
            assert post_event(controller, {**app, "message": message}) == 202
            outage.append(message)
            time.sleep(1.0)  # pacing inside the deliberate 30 s outage
        wait_for(
            lambda: set(outage) <= set(deliveries(sink, "/before")),
            timeout=30,
            what="every event of the outage delivered",
        )
        kube.start_apiserver()
        restarted = time.monotonic()
        down_for = restarted - stopped

        # Right away, with kubectl: a new Provider, the Alert edited to use it, a new Alert, a Receiver.
        apply(
            kube,
            provider(namespace, "after", f"{sink.url}/after")
            + alert(namespace, "apps", "after", "Kustomization", "*")
            + alert(namespace, "late", "after", "GitRepository", "late")
            + textwrap.dedent(
                f"""\
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1
                kind: Receiver
                metadata: {{name: hook, namespace: {namespace}}}
                spec:
                  type: generic
                  secretRef: {{name: hook-token}}
                  resources: [{{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: late}}]
                """
            ),
        )
        # Each event goes to exactly one Alert: arriving on /after proves the edit reached the cache.
        edited_after = deliver_until_seen(controller, sink, "/after", app, "edited", timeout=RECOVERY_BOUND)
        late = flux_event(namespace, "late", "", kind="GitRepository")
        late["involvedObject"]["apiVersion"] = "source.toolkit.fluxcd.io/v1"
        deliver_until_seen(controller, sink, "/after", late, "new-alert", timeout=RECOVERY_BOUND)
        new_alert_after = time.monotonic() - restarted

        path = "/hook/" + hashlib.sha256(f"outage-hook-tokenhook{namespace}".encode()).hexdigest()
        wait_for(
            lambda: (
                ((get(kube, "receiver", namespace, "hook") or {}).get("status") or {}).get("webhookPath")
                == path
            ),
            timeout=RECOVERY_BOUND,
            what="new Receiver reconciled after the restart",
        )
        receiver_after = time.monotonic() - restarted
        wait_for(
            lambda: is_ready(kube, "alert", namespace, "apps"),
            timeout=RECOVERY_BOUND,
            what="edited Alert Ready for generation 2",
        )
        assert get(kube, "alert", namespace, "apps")["metadata"]["generation"] == 2  # type: ignore[index]
        # One Alert, one delivery per event: nothing reached both the old and the new Provider.
        assert not set(deliveries(sink, "/before")) & set(deliveries(sink, "/after"))
        print(
            f"\n[faults] outage {down_for:.1f}s, {len(outage)} events accepted and delivered during it; "
            f"after restart: edited Alert honoured in {edited_after:.1f}s, new Alert in "
            f"{new_alert_after:.1f}s, Receiver webhookPath in {receiver_after:.1f}s"
        )
        assert_alive(controller)
        assert_clean_log(controller)
    finally:
        code = controller.stop()
    assert code == 0, controller.log()[-3000:]


# ---- compaction: the watch must relist on 410 -------------------------------------------------------
@pytest.mark.timeout(240)
def test_etcd_compaction_and_restart_force_a_relist_and_delivery_follows(
    apiserver_restored: KubeTestServer, sa_kubeconfig: Path, namespace: str, sink: ThreadedSink
) -> None:
    """D1/D3 on the real server: resourceVersions compacted away → 410 → relist; new Alerts are honoured."""
    kube = apiserver_restored
    apply(
        kube,
        provider(namespace, "before", f"{sink.url}/before")
        + alert(namespace, "apps", "before", "Kustomization", "*"),
    )
    controller = Controller(kube, sa_kubeconfig, name="compact")
    try:
        controller.wait_ready()
        wait_for(lambda: is_ready(kube, "alert", namespace, "apps"), what="alert ready")
        app = flux_event(namespace, "app", "")
        deliver_until_seen(controller, sink, "/before", app, "warmup", timeout=30)
        assert "relisting" not in controller.log()

        # Writes the informers do not watch move etcd's revision past their resourceVersions.
        for i in range(5):
            kube.kubectl("create", "configmap", f"bump-{i}", "-n", namespace, check=True)
        kube.stop_apiserver()
        revision = etcd_revision(kube)
        etcd_compact(kube, revision)
        kube.start_apiserver()
        restarted = time.monotonic()

        apply(
            kube,
            provider(namespace, "after", f"{sink.url}/after")
            + alert(namespace, "fresh", "after", "GitRepository", "fresh"),
        )
        fresh = flux_event(namespace, "fresh", "", kind="GitRepository")
        fresh["involvedObject"]["apiVersion"] = "source.toolkit.fluxcd.io/v1"
        deliver_until_seen(controller, sink, "/after", fresh, "fresh", timeout=RECOVERY_BOUND)
        recovered = time.monotonic() - restarted
        wait_for(lambda: "relisting" in controller.log(), timeout=10, what="a relist on 410 in the log")
        print(
            f"\n[faults] compacted at etcd revision {revision}; new Alert honoured {recovered:.1f}s after the restart"
        )
        assert_alive(controller)
        assert_clean_log(controller)
    finally:
        code = controller.stop()
    assert code == 0, controller.log()[-3000:]


# ---- a proxy in front of the API server: slow lists, cut watches, 410 -------------------------------
class LoopThread:
    """An asyncio event loop on a daemon thread, for servers used by synchronous tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


EXPIRED = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 1 (2)",
        "reason": "Expired",
        "code": 410,
    },
}


class ApiProxy:
    """A TLS reverse proxy to the test API server that can delay lists, cut watches and inject 410.

    * ``list_delay[plural]``: a collection GET of that resource is forwarded at once and its answer held
      back that many seconds (so the list's content is as old as a slow server's would be);
    * ``cut_watches()``: aborts every open watch connection (a watch closed without a clean end);
    * ``expire_next_watch``: plurals whose next watch is answered ``200`` + one ``ERROR 410 Expired``.
    """

    def __init__(self, kube: KubeTestServer) -> None:
        self.kube = kube
        self.tls = mint_tls()
        self.list_delay: dict[str, float] = {}
        self.expire_next_watch: set[str] = set()
        self.lists: list[tuple[str, float]] = []  # (plural, monotonic time the answer left)
        self.watches: list[str] = []
        self._open: set[asyncio.Transport] = set()
        self._thread = LoopThread()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread.run(self._start())

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.kube.ssl_context(), limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls.server_context())
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        plural = request.path.rstrip("/").rsplit("/", 1)[-1]
        watching = request.query.get("watch") in ("1", "true")
        if watching:
            self.watches.append(plural)
            if plural in self.expire_next_watch:
                self.expire_next_watch.discard(plural)
                response = web.StreamResponse(headers={"Content-Type": "application/json"})
                await response.prepare(request)
                await response.write(json.dumps(EXPIRED).encode() + b"\n")
                await response.write_eof()
                return response
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("authorization", "accept", "content-type", "user-agent")
        }
        body = await request.read()
        async with self._session.request(
            request.method,
            self.kube.url + request.rel_url.raw_path_qs,
            headers=headers,
            data=body or None,
        ) as upstream:
            content_type = upstream.headers.get("Content-Type", "application/json")
            if not watching:
                payload = await upstream.read()
                if request.method == "GET":
                    delay = self.list_delay.get(plural, 0.0)
                    if delay:
                        await asyncio.sleep(delay)
                    self.lists.append((plural, time.monotonic()))
                return web.Response(
                    status=upstream.status, body=payload, headers={"Content-Type": content_type}
                )
            response = web.StreamResponse(status=upstream.status, headers={"Content-Type": content_type})
            await response.prepare(request)
            transport = request.transport
            if transport is not None:
                self._open.add(transport)
            try:
                async for chunk in upstream.content.iter_any():
                    if transport is None or transport.is_closing():
                        break
                    await response.write(chunk)
            except (ConnectionError, aiohttp.ClientError):
                pass
            finally:
                if transport is not None:
                    self._open.discard(transport)
            return response

    def cut_watches(self) -> int:
        async def cut() -> int:
            transports = list(self._open)
            for transport in transports:
                transport.abort()
            return len(transports)

        return self._thread.run(cut())

    def kubeconfig(self, sa_kubeconfig: Path, path: Path) -> Path:
        """``sa_kubeconfig`` with the server and CA replaced by the proxy's (same token)."""
        config = yaml.safe_load(sa_kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        cluster["server"] = f"https://127.0.0.1:{self.port}"
        cluster["certificate-authority-data"] = base64.b64encode(self.tls.ca_pem).decode()
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def close(self) -> None:
        async def stop() -> None:
            for transport in list(self._open):
                transport.abort()
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        self._thread.run(stop())
        self._thread.close()


@pytest.fixture
def proxy(installed: KubeTestServer) -> Iterator[ApiProxy]:
    server = ApiProxy(installed)
    yield server
    server.close()


LIST_DELAY = 6.0


@pytest.mark.timeout(240)
def test_slow_list_and_closed_watches_through_a_proxy(
    installed: KubeTestServer,
    sa_kubeconfig: Path,
    namespace: str,
    sink: ThreadedSink,
    proxy: ApiProxy,
    tmp_path: Path,
) -> None:
    """D10 + D1: a slow first list → 503 until synced; cut watches + 410 + slow relist → cache keeps serving."""
    kube = installed
    apply(
        kube,
        provider(namespace, "before", f"{sink.url}/before")
        + alert(namespace, "apps", "before", "Kustomization", "*"),
    )
    proxy.list_delay["alerts"] = LIST_DELAY
    controller = Controller(
        kube, proxy.kubeconfig(sa_kubeconfig, tmp_path / "proxy.kubeconfig"), name="proxy"
    )
    try:
        app = flux_event(namespace, "app", "")
        # Until the (slow) Alert list has arrived: alive, not ready, events refused with 503.
        refused: list[int] = []

        def synced() -> bool:
            assert_alive(controller)
            health = probe(controller, "/healthz")
            if health == 0:
                return False  # not listening yet
            assert health == 200
            if probe(controller, "/readyz") == 200:
                return True
            try:
                code = post_event(controller, {**app, "message": f"early-{len(refused)}"})
            except OSError:
                return False  # the event server starts right after the health server
            refused.append(code)
            return False

        started = time.monotonic()
        wait_for(synced, timeout=90, interval=0.5, what="controller ready after a slow list")
        synced_after = time.monotonic() - started
        assert refused and set(refused) == {503}, refused
        assert [p for p, _ in proxy.lists].count("alerts") == 1
        deliver_until_seen(controller, sink, "/before", app, "synced", timeout=30)
        assert not any(m.startswith("early-") for m in deliveries(sink, "/before"))

        # Cut every watch; the Alert watch that follows gets 410 and the relist is slow again.
        lists_before = len(proxy.lists)
        proxy.expire_next_watch.add("alerts")
        assert proxy.cut_watches() >= 4  # alerts, providers, receivers, secrets
        cut = time.monotonic()
        apply(
            kube,
            provider(namespace, "after", f"{sink.url}/after")
            + alert(namespace, "fresh", "after", "GitRepository", "fresh"),
        )
        during: list[str] = []
        while not any(p == "alerts" for p, _ in proxy.lists[lists_before:]):
            assert time.monotonic() - cut < 60, "no relist of Alerts after the 410"
            assert_alive(controller)
            message = f"relisting-{len(during)}"
            assert post_event(controller, {**app, "message": message}) == 202  # the cache still serves
            during.append(message)
            time.sleep(0.5)  # pacing while the proxy holds the list back
        relisted_after = time.monotonic() - cut
        assert during, "the relist was not slow enough to observe"
        wait_for(
            lambda: set(during) <= set(deliveries(sink, "/before")),
            timeout=30,
            what="events of the relist window",
        )
        fresh = flux_event(namespace, "fresh", "", kind="GitRepository")
        fresh["involvedObject"]["apiVersion"] = "source.toolkit.fluxcd.io/v1"
        fresh_after = deliver_until_seen(controller, sink, "/after", fresh, "fresh", timeout=60)
        assert "relisting" in controller.log()
        print(
            f"\n[faults] slow list {LIST_DELAY:.0f}s: ready after {synced_after:.1f}s ({len(refused)} events "
            f"answered 503 before); watches cut + 410: relist done after {relisted_after:.1f}s with "
            f"{len(during)} events 202 meanwhile; new Alert honoured {fresh_after:.1f}s later"
        )
        assert_alive(controller)
        assert_clean_log(controller)
    finally:
        code = controller.stop()
    assert code == 0, controller.log()[-3000:]
