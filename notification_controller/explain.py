"""``notification-controller explain|send``: why an event did or did not notify, and "is my token right?".

``explain --event FILE.json (--manifests DIR | --kubeconfig FILE)`` reads the Alerts, Providers and Secrets
(from a directory of YAML, or once from the API server) and runs the event through the controller's own
pipeline, not a copy of it (issue 25: the copy forwarded the ``token`` metadata the dispatcher strips, so the
generic-hmac signature differed, and called an Alert with a broken template invalid where the controller
sends the default message). The event is decoded and cleaned as the event server does (``Event.decode``,
``cleanup_metadata``), then ``dispatch/builder.py`` builds the pipeline in dry run (``dispatch/dryrun.py``):
``Dispatcher.admit`` (the dispatcher's clean-up, the matcher, Flux's rules, noise control over a throwaway
memory store, the sandbox for what the controller runs there), then ``Deliverer.deliver`` for each
notification (resolution, templates, the notifier), whose HTTP request is recorded and, only with
``--send``, sent through the real outbound client: the bytes at the sink are the controller's, signature
included (tests/integration/test_explain_corpus.py compares them with a running controller's).

One line per Alert: ``would send -> Provider …`` (with what went wrong on the way but did not stop it: a
filter that failed, fail open; a template that failed, default message) or ``would not send: <stage>:
<reason>``, the stage being ``matcher`` (suspended, invalid, kind, namespace, name, severity, inclusion or
exclusion list, labels), ``rules`` (Provider missing, ``--no-cross-namespace-refs``, workload identity, a
notifier that cannot be built) or the name of the stage that dropped it (``provider-suspended``,
``commit-status-metadata``, ``noise-filter``, ``noise-threshold``, ``quiet-silence``: ``held by Silence
ns/name until <time> (matchers ...)``, ``quiet-window``: ``muted by spec.muteTimes[i] until <time>``...).
Noise control starts from empty state: a threshold is not reached by one event, a repeat is not a repeat.
Silences and mute windows are evaluated at ``--at`` (RFC 3339; default: now). ``quiet-inhibit``:
``inhibited by GitRepository/ns/name (failing since <time>)``, with the graph of the manifests' (or the
cluster's) Kustomizations and HelmReleases and the failures recorded in the controller's store, read (never
written) with ``--store sqlite:PATH|nats://…`` (noise control then starts from that state too).
Pre-dispatch hooks are not called. A Provider that is not one HTTP request (NATS, Pub/Sub, Event Hubs...)
is not simulated: it is sent only with ``--send``.

``send --provider NAME [-n NAMESPACE]`` (or ``NS/NAME``; the namespace defaults to ``flux-system``, as
``flux``'s) sends one sample event through one Provider and prints the outcome. ``explain -n NAMESPACE`` looks
only at that namespace's Alerts. ``-o text|json|yaml`` as every command (lib/output.py).

Exit status: 0 at least one Alert would send (``send``: delivered), 1 none would (``send``: failed), 2 bad
input (unreadable event or manifests, unknown Provider, API server unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from prometheus_client import CollectorRegistry

from .api.alert import Alert
from .api.event import Event, EventDecodeError
from .api.objects import parse_object
from .api.provider import Provider
from .api.silence import SILENCE_GROUP, SILENCE_VERSION
from .core.matching import SourceMatch, compile_alert, encode_message
from .core.metadata import cleanup_metadata
from .core.redact import mask_token, redact_url
from .dispatch.builder import build
from .dispatch.dryrun import DryRunQueue, Outcome, ReadThroughState, Recorded, Recorder, RecordingHTTP
from .dispatch.notifiers import NotifierCache
from .errors import ControllerError, DeliveryError, KubeError
from .kube.cluster import KubeCluster
from .lib.clock import Clock, ManualClock
from .lib.output import add_output_flag, dump
from .metrics import NoiseMetrics
from .objects.base import Cluster, ObjectStore
from .objects.graph import FluxGraph, GraphSource, LocalGraph, StaticGraph
from .objects.local import LocalCluster, load_directory
from .outbound import OutboundHTTP, OutboundRequest
from .providers.base import DeliveryContext, HTTPNotifier
from .sandbox import SandboxPool
from .settings import EventSettings, Settings
from .store.base import Store
from .store.memory import MemoryStore

MASK = "***"
SENSITIVE_HEADERS = frozenset(
    {"authorization", "x-signature", "x-api-key", "dd-api-key", "api-key", "x-sentry-auth"}
)


@dataclasses.dataclass
class AlertExplanation:
    """One line per Alert: ``would send`` or ``would not send: <stage>: <reason>``."""

    alert: str
    matched: bool  # the matcher took it (event sources, severity, inclusion/exclusion, labels)
    verdict: str = "would not send"
    stage: str = ""  # the stage that dropped it ("matcher", "provider", "noise-threshold", ...)
    reason: str = ""
    provider: str = ""
    provider_type: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    request: dict[str, Any] | None = None
    sent: str = ""

    @property
    def sends(self) -> bool:
        return self.verdict == "would send"


# ---- loading -------------------------------------------------------------------------------------------
def load_manifests(directory: Path) -> tuple[ObjectStore, LocalCluster]:
    """The objects, and the local cluster the controller's local mode builds over them (the other
    objects in the directory answer label lookups)."""
    result = load_directory(directory)
    if result.errors:
        raise ControllerError("; ".join(str(e) for e in result.errors[:5]))
    store = ObjectStore()
    for obj in result.objects:
        store.upsert(obj)
    store.mark_synced()
    local = LocalCluster(store)
    local.set_others(result.others)
    return store, local


async def load_cluster(kubeconfig: str) -> tuple[ObjectStore, Any]:
    """Alerts, Providers and Secrets of every namespace, read once. Returns the store and the client."""
    from .kube.client import KubeClient, api_path

    client = await KubeClient.connect(kubeconfig)
    store = ObjectStore()
    for group, version, plural, kind in (
        ("", "v1", "secrets", "Secret"),
        ("notification.toolkit.fluxcd.io", "v1beta3", "providers", "Provider"),
        ("notification.toolkit.fluxcd.io", "v1beta3", "alerts", "Alert"),
        (SILENCE_GROUP, SILENCE_VERSION, "silences", "Silence"),
    ):
        try:
            items, _ = await client.list(api_path(group, version, plural))
        except KubeError as exc:
            if kind == "Silence" and exc.status in (403, 404):  # no Silence CRD, or not ours to read
                continue
            raise
        for raw in items:
            raw.setdefault("kind", kind)
            raw.setdefault("apiVersion", f"{group}/{version}" if group else version)
            try:
                store.upsert(parse_object(raw))
            except ControllerError:
                continue  # what the controller would refuse too; the Alert then reads as missing
    store.mark_synced()
    return store, client


async def load_graph(client: Any) -> FluxGraph:
    """Flux's graph from the cluster's Kustomizations and HelmReleases, read once (absent CRDs, or no right
    to read them: no edges from that kind)."""
    from .kube.client import api_path

    graph = FluxGraph()
    for group, version, plural in (
        ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations"),
        ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
    ):
        try:
            items, _ = await client.list(api_path(group, version, plural))
        except KubeError as exc:
            if exc.status in (403, 404):
                continue
            raise
        kind = "Kustomization" if plural == "kustomizations" else "HelmRelease"
        for raw in items:
            graph.put_document({**raw, "kind": kind})
    return graph


async def _open_state(url: str) -> Store:
    """The controller's durable store, for reading (``--store``): a SQLite file must exist already."""
    from .settings import StoreSettings
    from .store import store_from_settings

    state = store_from_settings(StoreSettings(url=url), retain=False)
    if not state.durable:
        raise ControllerError("--store: the memory store keeps nothing outside the controller")
    path = getattr(state, "path", None)
    if isinstance(path, Path) and not path.is_file():
        raise ControllerError(f"--store: {path}: no such database file (is it the controller's?)")
    await state.start()
    return state


# ---- deciding ------------------------------------------------------------------------------------------
def _source_reason(alert: Alert, event: Event, labels: dict[str, str] | None) -> str | None:
    compiled = compile_alert(alert)
    obj = event.involved_object
    sources = compiled.sources
    kinds = [s for s in sources if s.kind == obj.kind]
    if not kinds:
        return (
            f"kind: no event source is a {obj.kind} (sources: {', '.join(sorted({s.kind for s in sources}))})"
        )
    in_ns = [s for s in kinds if s.namespace == obj.namespace]
    if not in_ns:
        wanted = ", ".join(sorted({s.namespace for s in kinds}))
        return f"namespace: the {obj.kind} sources are in {wanted}, the event is from {obj.namespace}"
    named = [s for s in in_ns if s.name in ("*", obj.name)]
    if not named:
        return f"name: no {obj.kind} source is '*' or '{obj.name}'"
    severity = str(alert.spec.event_severity)
    if not (event.severity == severity or severity == "info"):
        return f"severity: the Alert wants {severity} events, this one is {event.severity or 'unset'}"
    if all(s.match_labels is not None for s in named):
        if labels is None:
            return "labels: the sources select by matchLabels; the object's labels are unknown here"
        if not any(s.labels_match(labels) for s in named):
            return "labels: the object's labels match no source's matchLabels"
    if compiled.match_sources(event) is SourceMatch.NO:
        return "event source: no source matches"
    return None


def _message_reason(alert: Alert, event: Event) -> str | None:
    compiled = compile_alert(alert)
    text = encode_message(event.message)
    if compiled.has_inclusion_list and not compiled.inclusion.any_match(text):
        return "inclusionList: no expression matches the message"
    if not compiled.exclusion.empty and compiled.exclusion.any_match(text):
        return "exclusionList: an expression matches the message"
    return None


BODY_MASK_MIN = 6
"""Secret values at least this long are masked inside the URL and the body too (shorter ones, such as a
header value ``flux``, would turn ordinary words into asterisks; headers are masked whatever their length)."""


def _masked_request(request: OutboundRequest, masks: Sequence[str]) -> dict[str, Any]:
    def mask(text: str, shortest: int = 1) -> str:
        for secret in masks:
            if len(secret) >= shortest:
                text = mask_token(text, secret)
        return text

    headers = {
        k: (MASK if k.lower() in SENSITIVE_HEADERS else mask(v)) for k, v in sorted(request.headers.items())
    }
    body = (
        request.body.decode("utf-8", "replace")
        if isinstance(request.body, bytes)
        else str(request.body or "")
    )
    return {
        "method": request.method,
        "url": mask(redact_url(request.url), BODY_MASK_MIN),
        "headers": headers,
        "body": mask(body, BODY_MASK_MIN),
    }


STAGE_OF_DROP = {
    "filter": "noise-filter",
    "threshold": "noise-threshold",
    "state": "noise-state",
    "repeat": "noise-repeat",
    "grouped": "noise-group",
    "silenced": "quiet-silence",
    "muted": "quiet-window",
    "inhibited": "quiet-inhibit",
    "suspended": "provider-suspended",
    "commit_status": "commit-status-metadata",
    "commit_status_update": "commit-status-update",
    "change_request": "change-request",
    "hook": "hook",
    "gone": "resolve",
}
"""The stage (builder.py's names) behind each drop reason (``DropReason``, ``Suppressed``)."""

DROP_TEXT = {
    "suspended": "the Provider's spec.suspend is true",
    "commit_status_update": "a commit-status update, and the Provider is not a git or generic one",
    "gone": "the Alert or Provider was deleted",
}
"""What a ``Drop`` without a message means."""

FAILED_TO_DISPATCH = "NotificationDispatchFailed"


class Explainer:
    """The controller's pipeline (``dispatch/builder.py``) in dry run (``dispatch/dryrun.py``): the event goes
    through ``Dispatcher.admit`` (the ingest clean-up, the matcher, Flux's rules, noise control over a
    throwaway memory store) and each notification through ``Deliverer.deliver`` (resolve, templates in the
    sandbox, the notifier's request), whose HTTP request is recorded, and sent only with ``send``."""

    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        sandbox: SandboxPool,
        *,
        no_cross_namespace_refs: bool = False,
        send: bool = False,
        clock: Clock | None = None,
        graph: GraphSource | None = None,
        state: Store | None = None,
    ) -> None:
        self.store = store
        self.send = send
        self.http = RecordingHTTP(forward=send)
        self.queue = DryRunQueue()
        self.queued: set[str] = set()
        self.recorder = Recorder()
        registry = CollectorRegistry()
        metrics = self.recorder.metrics
        settings = Settings(events=EventSettings(no_cross_namespace_refs=no_cross_namespace_refs))
        self.pipeline = build(
            store,
            cluster,
            self.http,
            self.recorder.sink,
            metrics,
            settings,
            sandbox=sandbox,
            template_errors=lambda which: None,
            # empty state, or the controller's read through (--store): nothing is written anywhere
            noise=(ReadThroughState(state) if state is not None else MemoryStore(), NoiseMetrics(registry)),
            clock=clock,  # --at: when Silences and mute windows are evaluated
            dry_run=(self.queue, self.recorder),
            graph=graph,  # inhibitDependents: the manifests' or the cluster's Kustomizations/HelmReleases
        )

    async def explain(self, event: Event, labels: dict[str, str] | None = None) -> list[AlertExplanation]:
        dispatcher = self.pipeline.dispatcher
        admitted = dispatcher.admit(event)
        if not isinstance(admitted, int):
            await admitted
        await dispatcher.wait_idle(EXPLAIN_TIMEOUT)
        requests: dict[str, list[Recorded]] = {}
        self.queued.clear()
        for notification in self.queue.take():
            key = notification.alert.key
            self.queued.add(key)
            provider = self.store.provider(notification.provider.namespace, notification.provider.name)
            if not self.send and provider is not None and not self._http(provider):
                self.recorder.of_alert(key).warnings.append(
                    ("NotSimulated", f"{provider.spec.type}: not one HTTP request; sent only with --send")
                )
                continue
            await self.pipeline.deliverer.deliver(notification)
            requests.setdefault(key, []).extend(self.http.take())
        await dispatcher.wait_idle(EXPLAIN_TIMEOUT)
        alerts = sorted(self.store.alerts(), key=lambda a: (a.metadata.namespace, a.metadata.name))
        return [self._verdict(alert, event, labels, requests.get(self._key(alert), [])) for alert in alerts]

    def _http(self, provider: Provider) -> bool:
        try:
            _, notifier = self.pipeline.deliverer.notifiers.get(provider)
        except ControllerError:
            return True  # deliver() reports it as the controller does
        return isinstance(notifier, HTTPNotifier)

    @staticmethod
    def _key(alert: Alert) -> str:
        return f"{alert.metadata.namespace}/{alert.metadata.name}"

    def _verdict(
        self, alert: Alert, event: Event, labels: dict[str, str] | None, requests: list[Recorded]
    ) -> AlertExplanation:
        key = self._key(alert)
        provider = self.store.provider(alert.metadata.namespace, alert.spec.provider_ref.name)
        verdict = AlertExplanation(
            key,
            matched=True,
            provider=f"{alert.metadata.namespace}/{alert.spec.provider_ref.name}",
            provider_type=str(provider.spec.type) if provider is not None else "",
        )
        outcome = self.recorder.outcomes.get(key)
        if outcome is None or (key not in self.queued and not outcome.drops and not _failures(outcome)):
            # the matcher did not take it: say why, in the controller's order
            verdict.matched = False
            verdict.stage = "matcher"
            verdict.reason = _matcher_reason(alert, event, labels)
            return verdict
        notes = [
            f"{reason}: {message}" for reason, message in outcome.warnings if reason != FAILED_TO_DISPATCH
        ]
        failures = _failures(outcome)
        verdict.notes = notes
        if requests:
            recorded = requests[-1]
            verdict.request = _masked_request(recorded.request, recorded.masks)
        if outcome.delivered or outcome.failed:
            verdict.verdict = "would send"
            if self.send:
                verdict.sent = "delivered" if outcome.delivered else f"failed: {outcome.failed}"
            elif outcome.failed:
                verdict.verdict = "would not send"
                verdict.stage, verdict.reason = "send", outcome.failed
            return verdict
        if outcome.drops:
            drop = outcome.drops[0]
            verdict.stage = STAGE_OF_DROP.get(str(drop.reason), str(drop.reason))
            verdict.reason = drop.message or DROP_TEXT.get(str(drop.reason), str(drop.reason))
            return verdict
        if failures:  # a rule raised (Dispatcher._failed): the message after Flux's prefix
            prefix = f"failed to dispatch notification for {event.involved_object.describe()}: "
            verdict.stage, verdict.reason = "rules", failures[0].removeprefix(prefix)
            return verdict
        if any(reason == "NotSimulated" for reason, _ in outcome.warnings):
            verdict.verdict = "would send"
            return verdict
        verdict.stage, verdict.reason = "pipeline", "dropped (see the controller's log at debug level)"
        return verdict


def _failures(outcome: Outcome) -> list[str]:
    return [message for reason, message in outcome.warnings if reason == FAILED_TO_DISPATCH]


def _matcher_reason(alert: Alert, event: Event, labels: dict[str, str] | None) -> str:
    """Why the matcher did not take ``alert`` (for the reader: the decision is the matcher's)."""
    if alert.spec.suspend:
        return "suspended: spec.suspend is true"
    refused = compile_alert(alert).refused
    if refused:
        return f"invalid: {refused}"
    return (
        _source_reason(alert, event, labels)
        or _message_reason(alert, event)
        or "labels: the object's labels could not be read or match no source"
    )


EXPLAIN_TIMEOUT = 30.0
"""Seconds for the pipeline's own tasks (a sandboxed filter, a label lookup) to finish."""


# ---- the commands ----------------------------------------------------------------------------------------
def verdict_line(v: AlertExplanation) -> str:
    """The one line of an Alert: ``would send -> Provider …`` or ``would not send: <stage>: <reason>``."""
    provider = f"Provider {v.provider}" + (f" ({v.provider_type})" if v.provider_type else "")
    if v.sends:
        notes = f" ({'; '.join(v.notes)})" if v.notes else ""
        return f"would send -> {provider}{notes}"
    return f"would not send: {v.stage}: {v.reason} [{provider}]"


def _print_text(event: Event, verdicts: list[AlertExplanation], out: TextIO) -> None:
    obj = event.involved_object
    out.write(
        f"event {obj.kind}/{obj.namespace}/{obj.name} ({event.severity or 'info'}, {event.reason or '-'})\n"
    )
    if not verdicts:
        out.write("no Alerts in scope\n")
    width = max((len(v.alert) for v in verdicts), default=5)
    for v in verdicts:
        out.write(f"  {v.alert:<{width}}  {verdict_line(v)}\n")
    for v in verdicts:
        if not v.sends or (v.request is None and not v.sent):
            continue
        out.write(f"\n{v.alert} -> {v.provider}:\n")
        if v.request is not None:
            req = v.request
            out.write(f"  {req['method']} {req['url']}\n")
            for key, value in req["headers"].items():
                out.write(f"  {key}: {value}\n")
            out.write(f"  {req['body']}\n")
        if v.sent:
            out.write(f"  sent: {v.sent}\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="notification-controller",
        description="Why an event did or did not notify, and is my Provider's token right?",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("explain", "say, for every Alert, whether an event matches it and what its Provider would receive"),
        ("send", "send one sample event through one Provider and print the outcome"),
    ):
        cmd = sub.add_parser(name, help=help_)
        source = cmd.add_mutually_exclusive_group(required=True)
        source.add_argument("--manifests", type=Path, help="a directory of YAML (local mode)")
        source.add_argument("--kubeconfig", help="read the objects from this cluster (once, read-only)")
        add_output_flag(cmd)
        if name == "explain":
            cmd.add_argument(
                "--event", type=Path, required=True, help="the event, as Flux's JSON ('-': stdin)"
            )
            cmd.add_argument(
                "--send", action="store_true", help="also send what matched (default: send nothing)"
            )
            cmd.add_argument(
                "--no-cross-namespace-refs", action="store_true", help="as the controller's flag"
            )
            cmd.add_argument(
                "-n", "--namespace", help="only the Alerts of this namespace (default: every namespace)"
            )
            cmd.add_argument(
                "--store",
                help="read the controller's state (noise control, inhibition) from its --store "
                "(sqlite:PATH or nats://…); nothing is written to it",
            )
            cmd.add_argument(
                "--at",
                type=_instant,
                help="evaluate Silences and mute windows at this RFC 3339 time (default: now)",
            )
        else:
            cmd.add_argument("--provider", required=True, help="NAME (in --namespace) or NAMESPACE/NAME")
            cmd.add_argument(
                "-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"default {DEFAULT_NAMESPACE}"
            )
    return parser


DEFAULT_NAMESPACE = "flux-system"
"""Where a bare Provider name is looked up: Flux's own default namespace, as ``flux`` uses."""

SAMPLE = {
    "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "notification-test",
                       "apiVersion": "kustomize.toolkit.fluxcd.io/v1"},
    "severity": "info",
    "message": "test notification from notification-controller (send command)",
    "reason": "NotificationTest",
    "reportingController": "notification-controller",
}  # fmt: skip


def _instant(text: str) -> datetime:
    """``--at``: an RFC 3339 time (``2026-11-27T22:30:00+01:00``, ``…Z``)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time (e.g. 2026-11-27T22:30:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (add Z or an offset)")
    return moment.astimezone(UTC)


def _read_event(path: Path) -> Event:
    """The event as the event server admits it (server/events.py ``process``): decoded by ``Event.decode``,
    then the ingest clean-up (``cleanup_metadata``: ``<group>/checksum|digest`` and keys outside the
    object's group go; the dispatcher then drops ``<group>/token``)."""
    body = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    try:
        event = Event.decode(body)
    except EventDecodeError as exc:
        raise ControllerError(f"the event is not Flux's event JSON: {exc}") from None
    cleaned = cleanup_metadata(event.metadata, event.object_group)
    if cleaned != event.metadata:
        event = event.model_copy(update={"metadata": cleaned})
    return event


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    client = None
    local: LocalCluster | None = None
    try:
        if args.manifests is not None:
            store, local = load_manifests(args.manifests)
        else:
            store, client = await load_cluster(args.kubeconfig)
        if args.command == "explain":
            event = _read_event(args.event)
            cluster: Cluster
            graph: GraphSource
            if client is not None:
                cluster = KubeCluster(client)
                graph = StaticGraph(await load_graph(client))
            else:
                assert local is not None
                cluster = local
                graph = LocalGraph(lambda: local.others, FluxGraph())
            state = await _open_state(args.store) if args.store else None
            try:
                async with SandboxPool(Settings().sandbox, registry=CollectorRegistry()) as sandbox:
                    explainer = Explainer(
                        store,
                        cluster,
                        sandbox,
                        no_cross_namespace_refs=args.no_cross_namespace_refs,
                        send=args.send,
                        clock=ManualClock(args.at) if args.at is not None else None,
                        graph=graph,
                        state=state,
                    )
                    await explainer.http.start()
                    try:
                        verdicts = await explainer.explain(event)
                    finally:
                        await explainer.http.close()
                        await explainer.pipeline.dispatcher.shutdown(1.0)
            finally:
                if state is not None:
                    await state.close()
            if args.namespace:
                verdicts = [v for v in verdicts if v.alert.partition("/")[0] == args.namespace]
            if args.output != "text":
                dump(
                    {
                        "event": event.as_cel(),
                        "alerts": [{**dataclasses.asdict(v), "line": verdict_line(v)} for v in verdicts],
                    },
                    args.output,
                    out,
                )
            else:
                _print_text(event, verdicts, out)
            return 0 if any(v.sends for v in verdicts) else 1
        return await _send(store, args, out)
    finally:
        if client is not None:
            await client.close()


async def _send(store: ObjectStore, args: argparse.Namespace, out: TextIO) -> int:
    namespace, sep, name = str(args.provider).partition("/")
    if not sep:
        namespace, name = args.namespace, args.provider
    if not namespace or not name or "/" in name:
        raise ControllerError(f"--provider must be NAME or NAMESPACE/NAME, got {args.provider!r}")
    args.provider = f"{namespace}/{name}"
    provider = store.provider(namespace, name)
    if provider is None:
        raise ControllerError(f"Provider '{name}' not found in namespace '{namespace}'")
    notifiers = NotifierCache(store)
    options, notifier = notifiers.get(provider)
    event = Event.from_raw({**SAMPLE, "involvedObject": {**SAMPLE["involvedObject"], "namespace": namespace}})  # type: ignore[dict-item]
    http = OutboundHTTP()
    await http.start()
    try:
        await notifier.post(event, DeliveryContext(http=http))
        result = {"provider": args.provider, "type": str(provider.spec.type), "delivered": True, "error": ""}
    except DeliveryError as exc:
        error = str(exc)
        for secret in options.masks():
            error = mask_token(error, secret)
        result = {
            "provider": args.provider,
            "type": str(provider.spec.type),
            "delivered": False,
            "error": error,
        }
    finally:
        await http.close()
    if args.output != "text":
        dump(result, args.output, out)
    else:
        out.write(
            f"{args.provider} ({result['type']}): "
            + ("delivered\n" if result["delivered"] else f"failed: {result['error']}\n")
        )
    return 0 if result["delivered"] else 1


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        return asyncio.run(_run(args, out))
    except BrokenPipeError:
        raise  # the reader went away (| head): cli.main ends quietly, not "error: Broken pipe"
    except (ControllerError, OSError) as exc:
        err.write(f"error: {exc}\n")
        return 2


def explain_main(argv: Sequence[str]) -> int:
    """``notification-controller explain …`` (cli.COMMANDS)."""
    return main(["explain", *argv])


def send_main(argv: Sequence[str]) -> int:
    """``notification-controller send …`` (cli.COMMANDS)."""
    return main(["send", *argv])
