"""The pipeline builder: every stage list is written out here, whole, before anything that runs it is
built (Alertmanager's ``PipelineBuilder``). Nothing is appended or assigned afterwards.

::

    pre-queue  Flux's rules (rules.py) → noise control: filter → threshold → state change → repeat → group
               → silences → mute windows (quiet/silences.py, quiet/windows.py)
               → inhibition (quiet/inhibit.py; the matcher shows it every event)
    pre-send   [durable: noise filter at send, commit status at send] → hooks → templates → thread
               → resolve in place (quiet/inplace.py: the message a recovery edits)
    post-send  thread started → resolve in place (the failure's message id kept)

Adding a stage is one module with a function (or a class with ``name`` and ``__call__``) and one line in
one of the three lists below (CONTRIBUTING.md, "Adding a pipeline stage"). The builder also wires the
two halves: the ``Deliverer`` first, then the queue that calls it (the memory lanes, or the durable
outbox with ``--store=sqlite:…|nats://…``), then the ``Dispatcher`` that fills the queue. Each component
reads its section of ``Settings`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.redact import Redactor
from ..history.recorder import Recorder
from ..lib.clock import Clock, SystemClock
from ..metrics import EventMetrics, InhibitMetrics, NoiseMetrics
from ..objects.base import Cluster, ObjectStore
from ..objects.graph import FluxGraph, GraphSource, StaticGraph
from ..outbound import OutboundHTTP
from ..outbound.identity import WorkloadIdentity
from ..outbound.tokens import TokenCache
from ..sandbox import SandboxPool
from ..settings import Settings
from ..store.base import Store
from ..store.instrumented import InstrumentedStore
from ..store.memory import MemoryStore
from ..tracing import NOOP, Tracer
from .deliverer import Deliverer
from .dispatcher import Dispatcher
from .filtering import FilterOffload
from .labels import LabelCache
from .lanes import LaneSettings, MemoryLanes
from .matcher import Matcher
from .model import Delivery, Draft, EventSink, Queue
from .noise import NoiseControl
from .notifiers import NotifierCache
from .outbox import DurableOutbox, DurableSettings, RedeliveryPolicy
from .quiet import Quiet
from .quiet.inhibit import Inhibition
from .quiet.inplace import ResolveInPlace
from .report import Reporter
from .rules import CommitStatusAtSend, flux_rules
from .stage import StageLike
from .templates import TemplateStage
from .traced import traced, traced_queue


@dataclass(frozen=True)
class Pipeline:
    dispatcher: Dispatcher
    deliverer: Deliverer
    report: Reporter
    noise: NoiseControl | None
    outbox: DurableOutbox | None
    quiet: Quiet
    inhibition: Inhibition | None = None


def build(
    store: ObjectStore,
    cluster: Cluster,
    http: OutboundHTTP,
    sink: EventSink,
    metrics: EventMetrics,
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    redactor: Redactor | None = None,
    tokens: TokenCache | None = None,
    labels: LabelCache | None = None,
    sandbox: SandboxPool | None = None,
    hooks: Sequence[StageLike[Delivery]] = (),
    template_errors: Callable[[str], None] | None = None,
    noise: tuple[Store, NoiseMetrics] | None = None,
    durable: InstrumentedStore | None = None,
    on_paused: Callable[[str], None] | None = None,
    pre_queue: Sequence[StageLike[Draft]] = (),
    pre_send: Sequence[StageLike[Delivery]] = (),
    post_send: Sequence[StageLike[Delivery]] = (),
    dry_run: tuple[Queue, Reporter] | None = None,  # explain: records, never delivers (dryrun.py)
    graph: GraphSource | None = None,  # Flux's sourceRef/dependsOn graph (inhibition; objects/graph.py)
    inhibit_metrics: InhibitMetrics | None = None,
    history: Recorder | None = None,  # the history of decisions (history/; None: --history=false)
    tracer: Tracer = NOOP,  # --otlp-endpoint: spans for stages that act, the queue, deliveries (tracing/)
) -> Pipeline:
    """``template_errors``: the templates stage runs (its error counter); ``noise``: noise control runs
    over this state store; ``durable``: the outbox replaces the memory lanes. ``pre_queue``,
    ``pre_send``, ``post_send``: extra stages after the others (tests)."""
    s = settings or Settings()
    events, kube = s.events, s.kube
    clock = clock or SystemClock()
    report = dry_run[1] if dry_run else Reporter(sink, metrics, redactor or Redactor(), history)
    notifiers = NotifierCache(store)
    object_level = s.gate("ObjectLevelWorkloadIdentity")
    control = None
    if noise is not None:
        state, noise_metrics = noise
        control = NoiseControl(
            state, store, clock, s.noise, warn=report.warn, metrics=noise_metrics, sandbox=sandbox
        )
    in_place = ResolveInPlace(noise[0], clock, noise[1]) if noise is not None else None  # resolveInPlace
    quiet = Quiet(  # Silences and mute windows, in noise control's store (docs/silences.md)
        noise[0] if noise is not None else MemoryStore(clock=clock),
        store,
        clock,
        warn=report.warn,
        metrics=noise[1] if noise is not None else None,
        cluster_namespace=s.silences.cluster_namespace,
    )
    inhibition = None
    if noise is not None:  # inhibition keeps its state in the same store as noise control
        inhibition = Inhibition(
            noise[0],
            store,
            graph if graph is not None else StaticGraph(FluxGraph()),
            clock,
            metrics=inhibit_metrics,
        )
    rules = flux_rules(
        store,
        notifiers,
        report.warn,
        no_cross_namespace_refs=events.no_cross_namespace_refs,
        object_level_workload_identity=object_level,
        sandbox=sandbox,  # commitStatusExpr beyond the inline-safe subset (issue 23)
        deferred=durable is not None,  # durable: at send time (CommitStatusAtSend)
    )
    # ---- the three stage lists --------------------------------------------------------------------------
    queue_stages: list[StageLike[Draft]] = [
        *rules,
        *(control.pre_queue() if control else ()),
        quiet.silences,
        quiet.windows,
        *((inhibition,) if inhibition else ()),  # after silences and windows (dispatch/quiet/)
        *pre_queue,
    ]
    send_stages: list[StageLike[Delivery]] = [
        *(control.at_send() if control and durable and sandbox else ()),  # the POST never waits on CEL
        *((CommitStatusAtSend(sandbox),) if durable and sandbox else ()),
        *hooks,  # before the templates: a hook's changes reach the template (docs/templates.md)
        *((TemplateStage(template_errors, report.warn, sandbox),) if template_errors else ()),
        *(control.pre_send() if control else ()),
        *(in_place.pre_send() if in_place else ()),  # after the thread: a recovery's reply goes there
        *pre_send,
    ]
    after_stages: list[StageLike[Delivery]] = [
        *(control.post_send() if control else ()),
        *(in_place.post_send() if in_place else ()),
        *post_send,
    ]
    # tracing on: each stage in a span when it acts (traced.py); off: the same lists, untouched
    queue_stages = traced(queue_stages, Draft, tracer, report.redactor)
    send_stages = traced(send_stages, Delivery, tracer, report.redactor)
    after_stages = traced(after_stages, Delivery, tracer, report.redactor)
    # ---- the components that run them ----------------------------------------------------------------
    identity = WorkloadIdentity(  # cloud workload identity: ServiceAccount tokens, metadata caches
        cluster,
        object_level=object_level,
        default_service_account=kube.default_service_account,
        custom_endpoints=kube.workload_identity_custom_endpoints,
    )
    deliverer = Deliverer(
        store,
        notifiers,
        report,
        http,
        identity,
        tokens,
        pre_send=send_stages,
        post_send=after_stages,
        tracer=tracer,
    )
    outbox = None
    queue: Queue
    if dry_run is not None:
        queue = dry_run[0]
    elif durable is not None:
        store_settings = s.store
        queue = outbox = DurableOutbox(
            durable,
            deliverer.deliver,
            store,
            report,
            durable.metrics,
            DurableSettings(
                max_age=store_settings.delivery_max_age,
                concurrency=events.provider_concurrency,
                retry=RedeliveryPolicy(base=store_settings.retry_base, cap=store_settings.retry_cap),
                breaker_threshold=store_settings.breaker_threshold,
                breaker_cooldown=store_settings.breaker_cooldown,
            ),
            clock=clock,
            on_paused=on_paused,
        )
    else:
        queue = MemoryLanes(
            LaneSettings(max_pending=events.max_pending, concurrency=events.provider_concurrency),
            report,
            deliverer.send,
        )
    matcher = Matcher(
        store,
        labels if labels is not None else LabelCache(cluster, metrics, events, clock=clock),  # matchLabels
        FilterOffload(),  # heavy message filters run off the loop (filtering.py)
        report,
        metrics,
        observe=inhibition.observe if inhibition else None,  # every event, matched or not
        tracer=tracer,
    )
    dispatcher = Dispatcher(matcher, queue_stages, traced_queue(queue, tracer), report)
    return Pipeline(dispatcher, deliverer, report, control, outbox, quiet, inhibition)
