"""Composition root: builds every component from ``Settings`` and runs them in one TaskGroup.

    store (local | kube informers) ─┬─> event server ──> Dispatcher ──> provider lanes ──> OutboundHTTP
                                    │                       └─ --store=sqlite|nats: durable outbox ─┘
                                    ├─> receiver server ──> Cluster.annotate
                                    └─> controllers (leader only) ──> Cluster.patch_status / Events
    metrics server, health server

Shutdown (SIGTERM/SIGINT): readiness goes false, listeners close (no new work), in-flight deliveries
get ``--shutdown-grace-period`` to finish, what is left is counted as dropped, exit code 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from . import logsetup
from .api.silence import Silence
from .controllers.alert import AlertReconciler
from .controllers.events import EventRecorder
from .controllers.manager import ControllerManager
from .controllers.provider import ProviderReconciler
from .controllers.silence import SilenceReconciler
from .core.ratelimit import FixedWindowLimiter
from .core.redact import Redactor
from .dispatch.builder import build as build_pipeline
from .dispatch.duplicates import SharedDuplicateWindow
from .dispatch.heartbeat import Heartbeats
from .dispatch.quiet.held import held_total
from .errors import ConfigError, KubeError, StoreError
from .history import History, open_history
from .history.recorder import Recorder
from .hooks import Hooks, load_hooks_config
from .lib import buildinfo
from .lib.clock import Clock, SystemClock
from .lib.memtrim import release_free_memory
from .metrics import DeliveryMetrics, EventMetrics, HistoryMetrics, InhibitMetrics, NoiseMetrics
from .objects.base import Change, Cluster, ObjectStore, secret_data
from .objects.graph import FluxGraph, GraphSource
from .outbound import OutboundHTTP, RetryPolicy
from .outbound.tokens import TokenCache
from .sandbox import SandboxPool
from .server.events import EventEndpoint, EventServerSettings
from .server.events import runner_kwargs as event_runner_kwargs
from .server.health import create_health_app
from .server.http1 import HTTPServer
from .server.metrics import create_metrics_app
from .settings import Settings, compat_notices
from .store import store_from_settings
from .store.base import Store
from .store.instrumented import InstrumentedStore
from .store.memory import MemoryStore
from .tracing import open_tracer

if TYPE_CHECKING:
    from .server.ui.context import Actions

log = logging.getLogger(__name__)


def split_addr(addr: str) -> tuple[str | None, int]:
    """``:9090`` → (None, 9090) (all interfaces); ``127.0.0.1:0`` → ('127.0.0.1', 0)."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    return (host or None), int(port)


@dataclass
class App:
    """The running controller. ``start()`` binds and serves; ``stop()`` drains and closes."""

    settings: Settings
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    ports: dict[str, int] = field(default_factory=dict)
    retry: RetryPolicy | None = None  # tests shorten the 2 s·2ⁿ backoff
    kube: Any = None  # Kubernetes mode: the runtime.KubeConnection ``create`` made (None in local mode)
    clock: Clock = field(default_factory=SystemClock)  # tests move time (mute windows, Silences)

    @classmethod
    async def create(cls, settings: Settings, **kwargs: Any) -> App:
        """Build the App. In Kubernetes mode the API server is reached first, so every component is built
        with the real ``Cluster`` (nothing forwards or waits for a connection). Raises ``KubeError``."""
        if settings.local_mode:
            return cls(settings, **kwargs)
        from .runtime import KubeRuntime

        registry = kwargs.pop("registry", None) or CollectorRegistry()
        connection = await KubeRuntime.connect(settings, registry)
        return cls(settings, registry=registry, kube=connection, **kwargs)

    def __post_init__(self) -> None:
        s = self.settings
        self.redactor = Redactor()
        namespaces = None if s.kube.watch_all_namespaces else frozenset({s.kube.runtime_namespace})
        self.store = ObjectStore(namespaces=namespaces)
        self.store.subscribe(self._on_change)
        self.metrics = EventMetrics(self.registry)
        # the history of decisions, next to the --store (history/, docs/history.md); None: --history=false
        history_metrics = HistoryMetrics(self.registry)
        self.history: History | None = open_history(s.history, s.store, metrics=history_metrics)
        self.decisions = (
            Recorder(self.history, self.redactor, history_metrics) if self.history is not None else None
        )
        self.http = OutboundHTTP(self.retry)
        # --otlp-endpoint: the OpenTelemetry SDK is imported here, only then (tracing/, docs/tracing.md)
        self.tracer = open_tracer(s.tracing.otlp_endpoint, service_version=buildinfo.version())
        self.cluster: Cluster
        self._feeder: Any = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._runners: dict[str, web.AppRunner] = {}
        self._event_server: HTTPServer | None = None
        self._receiver_server: HTTPServer | None = None
        self._receiver_close: Callable[[], Awaitable[None]] | None = None
        self._stopping = False
        self._freeze_loaded = False  # serve_forever: freeze the first load's objects at once (_no_gc)
        self._serving = False  # every listener bound: /readyz must not say ready before :9090 answers
        inhibit_metrics = InhibitMetrics(self.registry)
        self.graph = FluxGraph(on_full=_graph_full)  # Flux's sourceRef/dependsOn edges (inhibition)
        inhibit_metrics.graph_objects.set_function(lambda: len(self.graph))
        inhibit_metrics.graph_untracked.set_function(lambda: self.graph.untracked)
        graph: GraphSource
        if s.local_mode:
            from .objects.graph import LocalGraph
            from .objects.local import LocalCluster, LocalManifests

            assert s.manifests is not None
            local_cluster = LocalCluster(self.store)
            self.cluster = local_cluster
            self._feeder = LocalManifests(
                s.manifests, self.store, local_cluster, poll_interval=s.manifests_poll_interval
            )
            graph = LocalGraph(lambda: local_cluster.others, self.graph)  # rebuilt after each reload
        else:
            from .runtime import KubeRuntime

            if self.kube is None:
                raise ConfigError("Kubernetes mode: build the App with 'await App.create(settings)'")
            self._kube = KubeRuntime(s, self.store, self.kube, self.graph)
            self.cluster = self._kube.cluster
            graph = self._kube.graph
        self.recorder = EventRecorder(self.cluster, self.clock, self.redactor)
        self.hooks = Hooks(  # Hooks API v1 (docs/hooks.md); controller-wide hooks from --hooks-config
            self.store,
            self.cluster,
            self.http,
            registry=self.registry,
            config=load_hooks_config(s.hooks_config) if s.hooks_config else None,
            runtime_namespace=s.kube.runtime_namespace,
            clock=self.clock,
        )
        self.controllers = ControllerManager(
            self.store,
            self.cluster,
            self.clock,
            s.kube,
            no_cross_namespace_refs=s.events.no_cross_namespace_refs,
            registry=self.registry,
            redactor=self.redactor,
            recorder=self.recorder,
            hooks=self.hooks.reconcile,
            silences=s.silences,
        )
        self.limiter = FixedWindowLimiter(s.events.rate_limit_interval, self.clock)
        # tenant templates and CEL beyond the inline-safe subset: worker processes (issue 23), started lazily
        self.sandbox = SandboxPool(s.sandbox, registry=self.registry)
        self.state: InstrumentedStore | None = None
        self.shared_window: SharedDuplicateWindow | None = None
        self._state_open = False
        # the duplicate windows are named so that a store creates them at start, not on the first event
        windows = (s.events.rate_limit_interval, s.receivers.replay_ttl)
        backend = store_from_settings(s.store, clock=self.clock, windows=windows)
        noise_metrics = NoiseMetrics(self.registry)
        noise_state: Store
        if backend.durable:  # --store=sqlite:…|nats://…: the outbox replaces the lanes (docs/delivery.md)
            noise_state = self.state = InstrumentedStore(backend, DeliveryMetrics(self.registry))
            self.shared_window = SharedDuplicateWindow(self.state, s.events.rate_limit_interval, self.clock)
        else:  # memory: Flux's behaviour; noise control keeps its state in this process
            memory = noise_state = MemoryStore(clock=self.clock)
            noise_metrics.store_keys.set_function(memory.keys)
        template_errors = self.metrics.template_errors
        self.pipeline = build_pipeline(  # the stage lists and their order: dispatch/builder.py
            self.store,
            self.cluster,
            self.http,
            self.recorder,
            self.metrics,
            s,
            clock=self.clock,
            redactor=self.redactor,
            tokens=(
                TokenCache(capacity=s.tokens.max_size, max_ttl=s.tokens.max_duration)
                if s.tokens.max_size > 0
                else None  # --token-cache-max-size=0: mint a token for every delivery, as Flux
            ),
            sandbox=self.sandbox,
            hooks=[self.hooks.pre_dispatch],
            template_errors=lambda which: template_errors.labels(template=which).inc(),
            noise=(noise_state, noise_metrics),
            durable=self.state,
            on_paused=self._delivery_paused,
            graph=graph,
            inhibit_metrics=inhibit_metrics,
            history=self.decisions,
            tracer=self.tracer,
        )
        self.dispatcher = self.pipeline.dispatcher
        self.outbox = self.pipeline.outbox
        assert self.pipeline.noise is not None
        self.noise = self.pipeline.noise
        silence_reconciler = self.controllers.reconcilers["Silence"]
        assert isinstance(silence_reconciler, SilenceReconciler)
        # status.held: the total the silence stage keeps in the store it holds notifications in
        silence_reconciler.held_count = lambda silence: held_total(noise_state, silence)
        self.quiet = self.pipeline.quiet  # Silences and mute windows; held notifications show on the Alert
        self.quiet.core.touched = lambda a: self.controllers.request(
            "Alert", (a.metadata.namespace, a.metadata.name)
        )
        alert_reconciler = self.controllers.reconcilers["Alert"]
        assert isinstance(alert_reconciler, AlertReconciler)
        alert_reconciler.held = self.quiet.status  # the Held condition (docs/silences.md)
        self.heartbeats = Heartbeats(  # Alert spec.heartbeat; at most once per interval: the store decides
            self.store, noise_state, clock=self.clock, leading=self._beats, counter=self.metrics.heartbeats
        )
        if self.outbox is not None:
            provider_reconciler = self.controllers.reconcilers["Provider"]
            assert isinstance(provider_reconciler, ProviderReconciler)
            provider_reconciler.delivery_paused = self.outbox.paused

    def _delivery_paused(self, lane: str) -> None:
        namespace, _, name = lane.partition("/")
        self.controllers.request("Provider", (namespace, name))  # its status says so (Delivering=False)

    async def _open_state(self) -> None:
        """Connect to the durable store, retrying: until it answers, /readyz is false and events get 503
        (Flux's emitters retry), rather than a crash loop."""
        assert self.state is not None and self.outbox is not None
        delay = 0.5
        while True:
            try:
                await self.state.start()
                break
            except StoreError as exc:
                log.error("state store %s unavailable, retrying in %gs: %s", self.state.kind, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        log.info("state store %s ready: durable delivery from the outbox", self.state.kind)
        self._state_open = True
        self.outbox.runner.start()

    async def _open_history(self, history: History) -> None:
        """Open the history's store, retrying as the state store does; a history that cannot be opened never
        stops the controller (its records are dropped and counted meanwhile)."""
        delay = 0.5
        while True:
            try:
                await history.start()
                return
            except StoreError as exc:
                log.error("history unavailable, retrying in %gs: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    def _on_change(self, change: Change) -> None:
        if change.kind == "Secret":
            # O(size of this Secret): the redactor keeps values per Secret (issue 11 item 3).
            self.redactor.set_secret((change.namespace, change.name), secret_data(change))
        elif change.kind == "Provider":
            # Secret changes need nothing here: cached notifiers are checked against the Secret objects.
            self.pipeline.deliverer.notifiers.invalidate(change.namespace, change.name)
            if change.obj is None:  # deleted: its provider="namespace/name" series go (docs/metrics.md)
                self.pipeline.report.forget_provider(change.namespace, change.name)

    @property
    def leadership_lost(self) -> bool:
        return not self.settings.local_mode and self._kube.lost.is_set()

    def _beats(self) -> bool:
        """Whether this replica sends heartbeats now: when ready, and when leading if leader election runs
        (with the memory store the replicas share no state: the leader alone keeps them once per interval)."""
        if not self.ready():
            return False
        if self.settings.local_mode or not self.settings.leader.enabled:
            return True
        elector = self._kube.elector
        return elector is not None and elector.is_leader

    def ready(self) -> bool:
        """Serving, synced, not stopping, and the durable store opened. Not the store's last answer: every
        event asks the store anyway (its failure is that event's 503) and /readyz probes it (``ping``); a
        remembered failure refused events and kept the pod unready for seconds after JetStream had elected
        a new leader (issue 23 item 10)."""
        if self.state is not None and not self._state_open:
            return False  # durable store not opened yet: a 202 could not be kept
        return self._serving and self.store.synced and not self._stopping

    async def _probe_state(self) -> None:
        """``/readyz``: the durable store can be written now (``Store.ping``; server/health.py bounds it)."""
        assert self.state is not None
        await self.state.ping()

    def _status_objects(self) -> Iterator[dict[str, Any]]:
        """``/status`` (server/health.py, ``notification-controller get``): the cache's objects, API-shaped."""

        def shape(obj: Any) -> dict[str, Any]:  # an Alert, Provider or Receiver: the same four fields
            if isinstance(obj, Silence):  # no suspend; its state, window and held count
                return {
                    "kind": "Silence",
                    "metadata": {"namespace": obj.metadata.namespace, "name": obj.metadata.name},
                    "spec": {},
                    "status": obj.status.model_dump(by_alias=True, mode="json", exclude_none=True),
                }
            return {
                "kind": type(obj).__name__,
                "metadata": {"namespace": obj.metadata.namespace, "name": obj.metadata.name},
                "spec": {"suspend": obj.spec.suspend},
                "status": {
                    "conditions": [c.model_dump(by_alias=True, mode="json") for c in obj.status.conditions]
                },
            }

        for obj in (
            *self.store.alerts(),
            *self.store.providers(),
            *self.store.receivers(),
            *self.store.silences(),
        ):
            yield shape(obj)

    async def _serve(self, name: str, app: web.Application, addr: str) -> None:
        # Every listener gets the event server's connection limits (header/idle timeout, see server.events).
        options = event_runner_kwargs(EventServerSettings())
        runner = web.AppRunner(app, shutdown_timeout=5.0, **options)
        await runner.setup()
        host, port = split_addr(addr)
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        self._runners[name] = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.ports[name] = sockets[0].getsockname()[1] if sockets else port
        log.info("%s server listening on %s", name, f"{host or '0.0.0.0'}:{self.ports[name]}")

    async def start(self) -> None:
        s = self.settings
        ui = self._ui_app() if s.ui.addr else None  # first: a bad --ui-* flag fails before anything starts
        await self.http.start()
        self._tasks.append(asyncio.create_task(self.sandbox.run(), name="sandbox"))
        if self.state is not None:
            self._tasks.append(asyncio.create_task(self._open_state(), name="state-store"))
        if self.history is not None:  # recording buffers (bounded) until it is open
            self._tasks.append(asyncio.create_task(self._open_history(self.history), name="history"))
        probe = self._probe_state if self.state is not None else None
        await self._serve(
            "health", create_health_app(self.ready, probe, self._status_objects), s.server.health_addr
        )
        await self._serve("metrics", create_metrics_app(self.registry), s.server.metrics_addr)
        if self._feeder is not None:
            with _no_gc(freeze=self._freeze_loaded):  # the first load builds objects that stay (issue 17)
                self._feeder.load()
            self._tasks.append(asyncio.create_task(self._feeder.watch(), name="manifests-watch"))
        else:
            self._tasks.extend(await self._kube.start())
        self._event_server = EventEndpoint(
            self.dispatcher,
            self.limiter,
            self.metrics,
            ready=self.ready,
            shared_window=self.shared_window,
            export_path_metrics=s.server.export_http_path_metrics,
            history=self.decisions,
            tracer=self.tracer,
            mask=self.redactor,
        ).server()
        host, port = split_addr(s.server.events_addr)
        self.ports["events"] = await self._event_server.start(host, port)
        log.info("events server listening on %s", f"{host or '0.0.0.0'}:{self.ports['events']}")
        await self._serve_receivers(s.server.receiver_addr)
        if ui is not None:  # the web UI (docs/ui.md): off unless --ui-addr
            await self._serve("ui", ui, s.ui.addr)
        self._serving = True
        self._tasks.extend(self._controllers())
        flushed = asyncio.create_task(self.noise.run(self.dispatcher.enqueue), name="noise-groups")
        self._tasks.append(flushed)
        if self.pipeline.inhibition is not None:  # releases for Alerts that did not take a recovery
            released = asyncio.create_task(
                self.pipeline.inhibition.run(self.dispatcher.enqueue), name="inhibit-releases"
            )
            self._tasks.append(released)
        summaries = asyncio.create_task(self.quiet.run(self.dispatcher.enqueue), name="quiet-summaries")
        self._tasks.append(summaries)
        beats = asyncio.create_task(self.heartbeats.run(self.dispatcher.enqueue), name="heartbeats")
        self._tasks.append(beats)
        release_free_memory()  # what start-up built and dropped goes back to the OS (lib/memtrim.py)

    def _ui_app(self) -> web.Application:
        # imported here: Jinja2's templates and the pages are loaded only when the UI is on
        from .server.health import status_rows
        from .server.ui import create_ui_app
        from .server.ui.context import UIContext

        s, outbox = self.settings, self.outbox

        def breaker(lane: str) -> str | None:
            found = outbox.runner.breaker(lane) if outbox is not None else None
            return found.state.value if found is not None else None

        actions = self._ui_actions() if s.ui.actions_token_file is not None else None
        context = UIContext(
            history=self.history,
            objects=self.store,
            status=lambda: status_rows(self._status_objects()),
            store=self.state,
            health=self.pipeline.report.health,
            breaker=breaker,
            settings=s,
            clock=self.clock,
            allowed_hosts=tuple(h.strip() for h in s.ui.allowed_hosts.split(",") if h.strip()),
            actions=actions,
        )
        return create_ui_app(context)

    def _ui_actions(self) -> Actions:
        """``--ui-actions-token-file``: the UI may replay dead letters and expire Silences (docs/ui.md). The
        token file must be readable at start (a typo fails here, not at the first click)."""
        from .server.ui.actions import TokenFile
        from .server.ui.context import Actions, UIActionError
        from .silences import Directory, SilenceError, UsageError, expire_in_cluster

        s, state = self.settings, self.state
        assert s.ui.actions_token_file is not None
        token = TokenFile(s.ui.actions_token_file)
        _, problem = token.read()
        if problem:
            raise ConfigError(f"--ui-actions-token-file {s.ui.actions_token_file}: {problem}")

        async def replay(ident: str) -> bool:
            assert state is not None
            return await state.replay([ident]) > 0

        async def expire(namespace: str, name: str) -> str:
            now = self.clock.now()
            try:
                if s.manifests is not None:
                    if not s.manifests.is_dir():
                        raise UIActionError(
                            f"--manifests {s.manifests} is one file: set the Silence's spec.endsAt there"
                        )
                    ended = await asyncio.to_thread(Directory(s.manifests).expire, namespace, name, now)
                else:
                    ended = await expire_in_cluster(self.kube.client, namespace, name, now)
            except (SilenceError, UsageError) as exc:
                raise UIActionError(str(exc)) from None
            if ended.already is not None:
                return f"Silence {namespace}/{name} had already ended ({ended.already}); nothing changed."
            where = (
                "" if s.manifests is None else f" in {ended.where}; the controller reads it on its next poll"
            )
            return f"Silence {namespace}/{name} expired{where}."

        return Actions(token=token, replay=replay if state is not None else None, expire_silence=expire)

    async def _serve_receivers(self, addr: str) -> None:
        """The receiver listener: the event listener's HTTP/1.1 layer (server/http1.py), its own handler."""
        # imported here: the receiver server pulls in PyJWT (OIDC), which the event path never needs
        from .server.receivers import ReceiverServerSettings, create_receiver_endpoint

        s, r = self.settings, self.settings.receivers
        endpoint = create_receiver_endpoint(
            self.store,
            self.cluster,
            # the server's limits with the four flags of --receiver-* and --no-cross-namespace-refs
            settings=ReceiverServerSettings(
                no_cross_namespace_refs=s.events.no_cross_namespace_refs,
                replay_ttl=r.replay_ttl,
                rate_limit=r.rate_limit,
                rate_burst=r.rate_burst,
            ),
            registry=self.registry,
            clock=self.clock,
            replay_store=self.state,
            sandbox=self.sandbox,
            http=self.http,  # OIDC discovery goes out the one outbound path (proxies, TLS)
            tracer=self.tracer,
            cluster_waits=not s.local_mode,  # local mode's cluster answers at once: no task per webhook
        )
        self._receiver_server = endpoint.server()
        self._receiver_close = endpoint.close
        host, port = split_addr(addr)
        self.ports["receiver"] = await self._receiver_server.start(host, port)
        log.info("receiver server listening on %s", f"{host or '0.0.0.0'}:{self.ports['receiver']}")

    def _controllers(self) -> list[asyncio.Task[Any]]:
        """Local mode: reconcile always. Kubernetes mode: the kube runtime runs them while leading."""
        if self.settings.local_mode:
            return [asyncio.create_task(self.controllers.run(), name="controllers")]
        return self._kube.run_controllers(self.controllers)

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting, drain deliveries, close everything."""
        if self._stopping:
            return
        self._stopping = True
        log.info("shutting down: draining deliveries for up to %gs", self.settings.server.shutdown_grace)
        if self._event_server is not None:
            await self._event_server.stop(grace=5.0)
            self._event_server = None
        if self._receiver_server is not None:
            await self._receiver_server.stop(grace=5.0)
            self._receiver_server = None
        if self._receiver_close is not None:
            await self._receiver_close()
            self._receiver_close = None
        for name in ("ui",):  # the UI's live streams end here, not after the drain
            runner = self._runners.pop(name, None)
            if runner is not None:
                await runner.cleanup()
        # the durable outbox keeps what is in flight: its lease runs out, it is sent again later
        abandoned = await self.dispatcher.shutdown(self.settings.server.shutdown_grace)
        await self.controllers.stop(deadline=5.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if not self.settings.local_mode:
            await self._kube.stop()
        if self.history is not None:  # after the drain: the last decisions are written
            await self.history.close()
        if self.state is not None:
            await self.state.close()
        await self.tracer.shutdown()  # the last spans, within 5 s: a collector that hangs does not hold us
        await self.http.close()
        for runner in self._runners.values():
            await runner.cleanup()
        self._runners.clear()
        log.info("shutdown complete (%d notifications abandoned)", abandoned)

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self._freeze_loaded = True  # the process lives on these objects; tests calling start() do not freeze
        try:
            await self.start()
        except BaseException:
            await self.stop()  # close what did start (sessions, listeners) before reporting the cause
            raise
        gc.freeze()  # what start-up built lives as long as the process: no collection scans it again
        waiters = [asyncio.create_task(stop.wait())]
        if not self.settings.local_mode:
            waiters.append(asyncio.create_task(self._kube.lost.wait()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        await self.stop()


def _graph_full(limit: int) -> None:
    log.warning(
        "inhibition: Flux's graph tracks %d objects already; the others are not tracked (their dependents' "
        "errors are not inhibited; notification_inhibit_graph_untracked counts them)",
        limit,
    )


GC_GEN0_THRESHOLD = 10_000
"""Allocations between two young-generation collections (CPython: 700). Each event allocates a few hundred
objects, almost none in cycles: at 700 the collector ran every few events and cost ~6 µs per event (issue
17, profile); loading 10,000 Alerts at start-up ran it thousands of times over a growing heap."""


@contextlib.contextmanager
def _no_gc(*, freeze: bool = False) -> Iterator[None]:
    """No cyclic-GC pass inside: for a synchronous burst of allocations that stay (local mode's first load:
    10,000 Alerts are ~400,000 tracked objects, and no cycle among what the load drops — reference counting
    frees all of it). The passes during the load cost ~0.1 s, and the young-generation pass right after it,
    over everything the load built, ~0.2 s more (issue 17). With ``freeze`` those objects go straight to
    the permanent generation, as ``serve_forever``'s ``gc.freeze()`` moves them a moment later anyway;
    without it, the next pass after the block collects as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def tune_gc() -> None:
    """Fewer cyclic-GC passes for the whole process (``App.serve_forever`` also freezes start-up's objects)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def run(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT. Exit code 0 after a graceful shutdown, 1 if a port cannot be bound."""
    # C extensions write to fd 2 directly: capture it so every line is a log record (one JSON object per line).
    stream = logsetup.StderrCapture().start() if settings.log.encoding == "json" else None
    logsetup.configure(settings.log.level, settings.log.encoding, Redactor(), stream)

    tune_gc()

    async def main() -> int:
        app = await App.create(settings)
        logsetup.configure(settings.log.level, settings.log.encoding, app.redactor, stream)
        for notice in compat_notices(settings):
            log.info("%s", notice)
        await app.serve_forever()
        return 1 if app.leadership_lost else 0

    try:
        return asyncio.run(main())
    except (OSError, KubeError, ConfigError) as exc:
        log.error("cannot start: %s", exc)
        return 1
