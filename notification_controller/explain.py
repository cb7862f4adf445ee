"""``notification-controller explain|send``: why an event did or did not notify, and "is my token right?".

``explain --event FILE.json (--manifests DIR | --kubeconfig FILE)`` reads the Alerts, Providers and Secrets
(from a directory of YAML, or once from the API server), then for every Alert says **matched** or the first
reason it did not, in the order the controller decides: suspended, invalid, event source (kind, namespace,
name, labels), severity, inclusion/exclusion lists, ``--no-cross-namespace-refs``, ``spec.filter``, then
Flux's per-Alert rules (Provider missing or suspended, commit-status and change-request metadata, workload
identity, a notifier that cannot be built) and a Provider whose status is not Ready. For each match it
prints the exact request the Provider would receive, after templates, with every secret masked. Nothing is
sent unless ``--send`` is given. Noise control that needs state (threshold, state change, repeat, group) is
decided at run time from the store: it is named, not simulated.

``send --provider NAME [-n NAMESPACE]`` (or ``NS/NAME``; the namespace defaults to ``flux-system``, as
``flux``'s) sends one sample event through one Provider and prints the outcome. ``explain -n NAMESPACE`` looks
only at that namespace's Alerts. ``-o text|json|yaml`` as every command (lib/output.py).

Exit status: 0 at least one Alert matched (``send``: delivered), 1 none matched (``send``: failed), 2 bad
input (unreadable event or manifests, unknown Provider, API server unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .api.alert import Alert, NotifyOn
from .api.event import Event
from .api.objects import parse_object
from .controllers.alert import alert_template_error
from .core import conditions as cond
from .core.matching import SourceMatch, compile_alert, encode_message
from .core.redact import mask_token, redact_url
from .dispatch.model import Delivery, Draft, Drop, Notification, Ref
from .dispatch.notifiers import NotifierCache
from .dispatch.rules import flux_rules
from .dispatch.templates import TemplateStage
from .errors import ControllerError, DeliveryError
from .lib.output import add_output_flag, dump
from .objects.base import ObjectStore
from .outbound import OutboundHTTP, OutboundRequest
from .providers.base import DeliveryContext, HTTPNotifier
from .providers.generic import GenericHMACNotifier, GenericNotifier

MASK = "***"
SENSITIVE_HEADERS = frozenset(
    {"authorization", "x-signature", "x-api-key", "dd-api-key", "api-key", "x-sentry-auth"}
)


@dataclasses.dataclass
class AlertExplanation:
    alert: str
    matched: bool
    reason: str = ""
    provider: str = ""
    provider_type: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    request: dict[str, Any] | None = None
    sent: str = ""


# ---- loading -------------------------------------------------------------------------------------------
def load_manifests(directory: Path) -> ObjectStore:
    from .objects.local import load_directory

    result = load_directory(directory)
    if result.errors:
        raise ControllerError("; ".join(str(e) for e in result.errors[:5]))
    store = ObjectStore()
    for obj in result.objects:
        store.upsert(obj)
    store.mark_synced()
    return store


async def load_cluster(kubeconfig: str) -> tuple[ObjectStore, Any]:
    """Alerts, Providers and Secrets of every namespace, read once. Returns the store and the client."""
    from .kube.client import KubeClient, api_path

    client = await KubeClient.connect(kubeconfig)
    store = ObjectStore()
    for group, version, plural, kind in (
        ("", "v1", "secrets", "Secret"),
        ("notification.toolkit.fluxcd.io", "v1beta3", "providers", "Provider"),
        ("notification.toolkit.fluxcd.io", "v1beta3", "alerts", "Alert"),
    ):
        items, _ = await client.list(api_path(group, version, plural))
        for raw in items:
            raw.setdefault("kind", kind)
            raw.setdefault("apiVersion", f"{group}/{version}" if group else version)
            try:
                store.upsert(parse_object(raw))
            except ControllerError:
                continue  # what the controller would refuse too; the Alert then reads as missing
    store.mark_synced()
    return store, client


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


def _filter_reason(alert: Alert, event: Event) -> str | None:
    if not alert.spec.filter:
        return None
    from .core.cel import CELError, OutputType, compile_expression

    try:
        program = compile_expression(alert.spec.filter, variables=("event",), output=OutputType.BOOL)
        if not program.evaluate_bool({"event": event.as_cel()}):
            return "filter: spec.filter returned false"
    except CELError as exc:
        return f"filter: {exc} (at run time the event would be sent, with a FilterFailed Warning)"
    return None


def _noise_notes(alert: Alert) -> list[str]:
    spec = alert.spec
    notes = []
    if spec.threshold is not None:
        notes.append(
            f"threshold: sent only on the {spec.threshold.count}th event within {spec.threshold.within}"
        )
    if spec.notify_on is NotifyOn.STATE_CHANGE:
        notes.append(
            "notifyOn StateChange: sent only if the object's severity changed since the last notification"
        )
    if spec.repeat_interval:
        notes.append(
            f"repeatInterval: an identical notification is sent at most every {spec.repeat_interval}"
        )
    if spec.group_by is not None:
        notes.append(f"groupBy: grouped, sent after groupWait ({spec.group_wait or '30s'})")
    return notes


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


class Explainer:
    def __init__(self, store: ObjectStore, *, no_cross_namespace_refs: bool = False) -> None:
        self.store = store
        self.no_cross_namespace_refs = no_cross_namespace_refs
        self.notifiers = NotifierCache(store)
        self.warnings: list[str] = []
        self.drafts: dict[str, Draft] = {}
        self.rules = flux_rules(
            store,
            self.notifiers,
            lambda alert, reason, message, annotations=None: self.warnings.append(f"{reason}: {message}"),
            no_cross_namespace_refs=no_cross_namespace_refs,
            object_level_workload_identity=True,
        )

    def explain(self, event: Event, labels: dict[str, str] | None = None) -> list[AlertExplanation]:
        alerts = sorted(self.store.alerts(), key=lambda a: (a.metadata.namespace, a.metadata.name))
        return [self._one(alert, event, labels) for alert in alerts]

    def _one(self, alert: Alert, event: Event, labels: dict[str, str] | None) -> AlertExplanation:
        name = f"{alert.metadata.namespace}/{alert.metadata.name}"
        verdict = AlertExplanation(
            name, False, provider=f"{alert.metadata.namespace}/{alert.spec.provider_ref.name}"
        )
        if alert.spec.suspend:
            verdict.reason = "suspended: spec.suspend is true"
            return verdict
        refused = compile_alert(alert).refused or alert_template_error(alert)
        if refused:
            verdict.reason = f"invalid: {refused}"
            return verdict
        why = (
            _source_reason(alert, event, labels)
            or _message_reason(alert, event)
            or _filter_reason(alert, event)
        )
        if why:
            verdict.reason = why
            return verdict
        draft = Draft(event, alert)
        try:
            for rule in self.rules:
                result = rule(draft)
                if isinstance(result, Drop):
                    verdict.reason = f"{rule.name}: {result.message or result.reason}"
                    return verdict
                assert isinstance(result, Draft), "rules built without a sandbox evaluate in process"
                draft = result
        except ControllerError as exc:
            verdict.reason = f"{rule.name}: {exc}"
            return verdict
        provider = draft.provider
        assert provider is not None
        verdict.provider_type = str(provider.spec.type)
        ready = cond.find(provider.status.conditions, cond.READY)
        if ready is not None and ready.status != "True":
            verdict.reason = f"provider not ready: {ready.reason}: {ready.message}"
            return verdict
        verdict.matched = True
        verdict.notes = _noise_notes(alert)
        self.drafts[name] = draft
        return verdict

    async def request(self, verdict: AlertExplanation, event: Event, http: OutboundHTTP | None) -> None:
        """The exact request (masked) for a matched verdict; with ``http``, send it too."""
        draft = self.drafts[verdict.alert]
        assert draft.provider is not None
        options, notifier = self.notifiers.get(draft.provider)
        notification = Notification(
            "explain",
            draft.event,
            Ref.of(draft.alert),
            Ref.of(draft.provider),
            verdict.provider_type,
            draft.commit_status,
            message=draft.message,
        )
        delivery = Delivery(
            notification, draft.event, draft.alert, draft.provider, options, notifier, message=draft.message
        )
        errors: list[str] = []
        stage = TemplateStage(lambda which: None, lambda alert, reason, message: errors.append(message))
        templated = await stage(delivery)
        assert isinstance(templated, Delivery)
        delivery = templated
        verdict.notes.extend(errors)
        if isinstance(notifier, HTTPNotifier):
            try:
                message = notifier.message_for(delivery.message, delivery.templated)
                if delivery.body is not None and isinstance(notifier, GenericNotifier | GenericHMACNotifier):
                    request = notifier.build_request(delivery.event, message, body=delivery.body)
                else:
                    request = notifier.build_request(delivery.event, message)
                verdict.request = _masked_request(request, options.masks())
            except ControllerError as exc:
                verdict.notes.append(f"the request cannot be built: {exc}")
        else:
            verdict.notes.append(f"{verdict.provider_type}: not one HTTP request (built at send time)")
        if http is not None:
            ctx = DeliveryContext(
                http=http,
                alert=draft.alert,
                commit_status=draft.commit_status,
                message=delivery.message,
                body=delivery.body,
                templated=delivery.templated,
            )
            try:
                await notifier.post(delivery.event, ctx)
                verdict.sent = "delivered"
            except DeliveryError as exc:
                error = str(exc)
                for secret in options.masks():
                    error = mask_token(error, secret)
                verdict.sent = f"failed: {error}"


# ---- the commands ----------------------------------------------------------------------------------------
def _print_text(event: Event, verdicts: list[AlertExplanation], out: TextIO) -> None:
    obj = event.involved_object
    out.write(
        f"event {obj.kind}/{obj.namespace}/{obj.name} ({event.severity or 'info'}, {event.reason or '-'})\n"
    )
    if not verdicts:
        out.write("no Alerts in scope\n")
    width = max((len(v.alert) for v in verdicts), default=5)
    for v in verdicts:
        result = (
            f"matched -> Provider {v.provider} ({v.provider_type})"
            if v.matched
            else f"not matched: {v.reason}"
        )
        out.write(f"  {v.alert:<{width}}  {result}\n")
    for v in verdicts:
        if not v.matched:
            continue
        out.write(f"\n{v.alert} -> {v.provider}:\n")
        for note in v.notes:
            out.write(f"  note: {note}\n")
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


def _read_event(path: Path) -> Event:
    text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    try:
        return Event.from_raw(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise ControllerError(f"the event is not Flux's event JSON: {exc}") from None


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    client = None
    try:
        if args.manifests is not None:
            store = load_manifests(args.manifests)
        else:
            store, client = await load_cluster(args.kubeconfig)
        if args.command == "explain":
            event = _read_event(args.event)
            explainer = Explainer(store, no_cross_namespace_refs=args.no_cross_namespace_refs)
            verdicts = explainer.explain(event)
            if args.namespace:
                verdicts = [v for v in verdicts if v.alert.partition("/")[0] == args.namespace]
            matched = [v for v in verdicts if v.matched]
            http = OutboundHTTP() if args.send else None
            if http is not None:
                await http.start()
            try:
                for v in matched:
                    await explainer.request(v, event, http)
            finally:
                if http is not None:
                    await http.close()
            if args.output != "text":
                dump(
                    {"event": event.as_cel(), "alerts": [dataclasses.asdict(v) for v in verdicts]},
                    args.output,
                    out,
                )
            else:
                _print_text(event, verdicts, out)
            return 0 if matched else 1
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
