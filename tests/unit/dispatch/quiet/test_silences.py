"""The silence stage and its summary over the real in-memory store and a manual clock: which Silences hold
(namespace, cluster-wide, active, valid), what is recorded, the one summary at the end, the bounds."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import Provider
from notification_controller.api.silence import Silence
from notification_controller.core.noise import Suppressed
from notification_controller.dispatch.model import Draft, Drop, Notification
from notification_controller.dispatch.quiet import Quiet, held_total
from notification_controller.dispatch.quiet.shared import MAX_RECORDS_PER_ALERT
from notification_controller.dispatch.quiet.silences import MAX_EVALUATED
from notification_controller.dispatch.quiet.summary import HELD, STILL_FAILING
from notification_controller.lib.clock import ManualClock
from notification_controller.metrics import NoiseMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.store.memory import MemoryStore

NS = "apps"
START = "2026-01-01T00:00:00Z"  # the ManualClock's start


def event(
    name: str = "web", severity: str = "error", message: str = "health check failed", **md: str
) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": NS, "name": name},
            "severity": severity,
            "message": message,
            "reason": "HealthCheckFailed" if severity == "error" else "ReconciliationSucceeded",
            "metadata": md,
            "reportingController": "kustomize-controller",
        }
    )


def alert(name: str = "on-call", namespace: str = NS, **spec: Any) -> Alert:
    obj = parse_object(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
                **spec,
            },
        }
    )
    assert isinstance(obj, Alert)
    return obj


def provider(namespace: str = NS) -> Provider:
    obj = parse_object(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": {"name": "sink", "namespace": namespace, "generation": 1},
            "spec": {"type": "generic", "address": "http://127.0.0.1:1/hook"},
        }
    )
    assert isinstance(obj, Provider)
    return obj


def silence(
    name: str = "maint",
    *matchers: str,
    namespace: str = NS,
    starts: str = START,
    ends: str = "2026-01-01T02:00:00Z",
    uid: str = "",
    **spec: Any,
) -> Silence:
    def parsed(text: str) -> dict[str, str]:
        found = re.match(r"^([a-z.]+)(=~|!~|!=|=)(.*)$", text)
        assert found is not None
        return {"name": found.group(1), "value": found.group(3), "matchType": found.group(2)}

    obj = parse_object(
        {
            "apiVersion": "notification-controller.io/v1alpha1",
            "kind": "Silence",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"},
            "spec": {
                "matchers": [parsed(t) for t in (matchers or ("kind=Kustomization",))],
                "startsAt": starts,
                "endsAt": ends,
                **spec,
            },
        },
        receiver_rules=False,
    )
    assert isinstance(obj, Silence)
    return obj


class Rig:
    def __init__(self, cluster_namespace: str = "", clock: ManualClock | None = None, **spec: Any) -> None:
        self.clock = clock or ManualClock()
        self.objects = ObjectStore()
        self.state = MemoryStore(clock=self.clock)
        self.registry = CollectorRegistry()
        self.warnings: list[tuple[str, str]] = []
        self.quiet = Quiet(
            self.state,
            self.objects,
            self.clock,
            warn=lambda a, reason, message: self.warnings.append((reason, message)),
            metrics=NoiseMetrics(self.registry),
            cluster_namespace=cluster_namespace,
        )
        self.sent: list[Notification] = []
        self.alert = alert(**spec)
        self.objects.upsert(self.alert)
        self.objects.upsert(provider())

    async def enqueue(self, notification: Notification) -> None:
        self.sent.append(notification)

    async def run(self, ev: Event, on: Alert | None = None) -> Draft | Drop:
        draft = Draft(ev, on or self.alert)
        result: Any = draft
        for stage in self.quiet.pre_queue():
            result = stage(result)
            if not isinstance(result, Draft | Drop):
                result = await result
            if isinstance(result, Drop):
                return result
        return result  # type: ignore[no-any-return]


@pytest.fixture
def rig() -> Rig:
    return Rig()


async def test_no_silence_is_the_old_path_synchronously(rig: Rig) -> None:
    draft = Draft(event(), rig.alert)
    assert rig.quiet.silences(draft) is draft
    assert rig.quiet.windows(draft) is draft


async def test_a_matching_active_silence_holds_and_a_non_matching_one_does_not(rig: Rig) -> None:
    rig.objects.upsert(silence("maint", "kind=Kustomization", "name=~web|db"))
    held = await rig.run(event("web"))
    assert isinstance(held, Drop) and held.suppressed and held.reason == Suppressed.SILENCED
    assert (
        "held by Silence apps/maint until 2026-01-01T02:00:00Z (matchers kind=Kustomization, name=~web|db)"
        in (held.message)
    )
    assert isinstance(await rig.run(event("api")), Draft)  # not matched: anchored regex
    assert isinstance(await rig.run(event("web"), alert(namespace="other")), Draft)  # another namespace
    assert await held_total(rig.state, rig.objects.silences_in(NS)[0]) == 1


async def test_pending_expired_and_invalid_silences_hold_nothing(rig: Rig) -> None:
    rig.objects.upsert(silence("later", starts="2026-01-01T01:00:00Z"))
    rig.objects.upsert(silence("past", starts="2025-12-31T00:00:00Z", ends="2025-12-31T01:00:00Z"))
    rig.objects.upsert(silence("broken", "name=~(", ends="2026-01-01T03:00:00Z"))
    assert isinstance(await rig.run(event()), Draft)
    rig.clock.advance(3600)  # "later" is active now
    assert isinstance(await rig.run(event()), Drop)


async def test_matchers_see_alert_provider_and_metadata(rig: Rig) -> None:
    rig.objects.upsert(silence("m", "alert=on-call", "provider=sink", "metadata.env!=prod"))
    assert isinstance(await rig.run(event(env="prod")), Draft)
    assert isinstance(await rig.run(event(env="dev")), Drop)
    assert isinstance(await rig.run(event()), Drop)  # absent metadata reads as ""


async def test_cluster_wide_silences_only_from_the_flag_namespace_and_only_when_asked() -> None:
    rig = Rig(cluster_namespace="ops")
    rig.objects.upsert(silence("all", namespace="ops", allNamespaces=True))
    rig.objects.upsert(silence("ops-only", namespace="ops", ends="2026-01-01T05:00:00Z"))
    rig.objects.upsert(silence("elsewhere", namespace="dev", allNamespaces=True))
    held = await rig.run(event())
    assert isinstance(held, Drop) and "Silence ops/all" in held.message
    plain = Rig()  # without the flag, spec.allNamespaces means nothing
    plain.objects.upsert(silence("all", namespace="ops", allNamespaces=True))
    assert isinstance(await plain.run(event()), Draft)


async def test_the_silence_ending_last_holds_so_the_summary_comes_when_nothing_holds(rig: Rig) -> None:
    rig.objects.upsert(silence("short", ends="2026-01-01T01:00:00Z"))
    rig.objects.upsert(silence("long", ends="2026-01-01T04:00:00Z"))
    held = await rig.run(event())
    assert isinstance(held, Drop) and "apps/long" in held.message


async def test_expiry_sends_one_summary_per_alert_with_counts_and_still_failing(rig: Rig) -> None:
    second = alert("team")
    rig.objects.upsert(second)
    rig.objects.upsert(silence("maint"))
    for ev in (event("web"), event("web"), event("db"), event("db", "info", "Reconciliation finished")):
        assert isinstance(await rig.run(ev), Drop)
    assert isinstance(await rig.run(event("web"), second), Drop)
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 0  # not ended yet
    rig.clock.advance(2 * 3600)
    assert isinstance(await rig.run(event("web")), Draft)  # expired: holds nothing
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 2
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 0  # once
    by_alert = {n.alert.name: n for n in rig.sent}
    first = by_alert["on-call"]
    assert first.event.metadata[HELD] == "4"
    assert first.event.metadata[STILL_FAILING] == "kustomization/web.apps"
    assert first.event.severity == "error"
    assert first.message is not None and first.message.title == (
        "Silence apps/maint ended: 4 notifications held, 1 object still failing"
    )
    assert "• kustomization/web.apps: 2 held, still failing: health check failed" in first.event.message
    assert "• kustomization/db.apps: 2 held, last info: Reconciliation finished" in first.event.message
    assert by_alert["team"].event.metadata[HELD] == "1"
    assert first.id != by_alert["team"].id


async def test_summary_false_sends_nothing_and_deletion_ends_a_silence_now(rig: Rig) -> None:
    rig.objects.upsert(silence("quiet", summary=False))
    assert isinstance(await rig.run(event()), Drop)
    rig.clock.advance(3 * 3600)
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 0
    rig.objects.upsert(silence("gone", ends="2026-01-02T00:00:00Z"))
    assert isinstance(await rig.run(event()), Drop)
    rig.objects.delete("Silence", NS, "gone")
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 1


async def test_expire_moves_the_end_to_now_and_a_later_end_postpones(rig: Rig) -> None:
    rig.objects.upsert(silence("m", ends="2026-01-01T01:00:00Z"))
    assert isinstance(await rig.run(event()), Drop)
    rig.objects.upsert(silence("m", ends="2026-01-01T05:00:00Z"))  # extended
    rig.clock.advance(3600)
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 0
    rig.objects.upsert(silence("m", ends="2026-01-01T01:00:00Z"))  # `silence expire`: endsAt now
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 1


async def test_two_processes_on_one_store_send_one_summary() -> None:
    a = Rig()
    b = Rig()
    b.state = a.state
    b.quiet = Quiet(a.state, b.objects, a.clock)
    for r in (a, b):
        r.objects.upsert(silence("m"))
    assert isinstance(await a.run(event()), Drop)
    assert isinstance(await b.run(event("db")), Drop)
    a.clock.advance(3 * 3600)
    sent = await a.quiet.summaries.send_due(a.enqueue) + await b.quiet.summaries.send_due(b.enqueue)
    assert sent == 1
    (summary,) = a.sent + b.sent
    assert summary.event.metadata[HELD] == "2"


async def test_a_restart_on_the_same_store_summarises_what_ended_while_down(rig: Rig) -> None:
    rig.objects.upsert(silence("m"))
    assert isinstance(await rig.run(event()), Drop)
    rig.clock.advance(3 * 3600)
    restarted = Quiet(rig.state, ObjectStore(), rig.clock)
    objects = restarted.core.objects
    objects.upsert(rig.alert)
    objects.upsert(provider())
    objects.upsert(silence("m"))  # the load after a start: the end passed, due at once
    sent: list[Notification] = []

    async def enqueue(n: Notification) -> None:
        sent.append(n)

    assert await restarted.summaries.send_due(enqueue) == 1
    assert sent[0].event.metadata[HELD] == "1"


async def test_a_start_does_not_look_at_silences_whose_records_expired_long_ago(rig: Rig) -> None:
    rig.clock.advance(30 * 86400)
    rig.objects.upsert(silence("ancient"))  # ended a month ago: nothing can be left to summarise
    assert not rig.quiet.summaries._due.at


async def test_past_the_bound_the_rest_are_not_evaluated_counted_and_warned_once(rig: Rig) -> None:
    for i in range(MAX_EVALUATED + 10):
        rig.objects.upsert(silence(f"s{i:04}", "name=nothing", ends=f"2026-01-01T{(i % 20) + 1:02}:00:00Z"))
    assert isinstance(await rig.run(event()), Draft)
    assert isinstance(await rig.run(event()), Draft)
    assert [r for r, _ in rig.warnings] == ["QuietLimitReached"]
    value = rig.registry.get_sample_value(
        "notification_noise_untracked_total", {"stage": "silence", "reason": "silence_limit"}
    )
    assert value == 2


async def test_past_the_record_cap_per_alert_holds_counts_but_does_not_summarise(rig: Rig) -> None:
    held: Draft | Drop = Draft(event(), rig.alert)
    for i in range(MAX_RECORDS_PER_ALERT + 1):  # Silences made one after the other, each ending later
        ends = f"2026-01-{(i // 20) + 2:02}T{i % 20:02}:00:00Z"
        rig.objects.upsert(silence(f"s{i:03}", f"name=o{i}", ends=ends))
        held = await rig.run(event(f"o{i}"))
        assert isinstance(held, Drop) and held.reason == Suppressed.SILENCED
    assert isinstance(held, Drop) and "not summarised" in held.message
    assert [r for r, _ in rig.warnings] == ["QuietLimitReached"]
    last = rig.objects.silence(NS, f"s{MAX_RECORDS_PER_ALERT:03}")
    assert last is not None and await held_total(rig.state, last) == 1
    labels = {"stage": "silence", "reason": "record_limit"}
    assert rig.registry.get_sample_value("notification_noise_untracked_total", labels) == 1


async def test_a_namespace_without_silences_costs_a_lookup(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its (empty) list of Silences is read from the object cache once and kept: later notifications cost
    the index's dict lookups only, and go on unchanged."""
    rig.objects.upsert(silence("m", namespace="elsewhere"))
    reads: list[str] = []
    silences_in = rig.objects.silences_in

    def counted(namespace: str) -> Any:
        reads.append(namespace)
        return silences_in(namespace)

    monkeypatch.setattr(rig.objects, "silences_in", counted)
    draft = Draft(event(), rig.alert)
    stage = rig.quiet.silences
    assert all(stage(draft) is draft for _ in range(1000))
    assert reads == [NS]


async def test_a_silence_made_after_its_namespace_was_looked_at_holds(rig: Rig) -> None:
    """The kept list of a namespace's Silences (empty at first) is dropped when one of them changes: the
    next notification is held, and one after its deletion goes on."""
    assert isinstance(await rig.run(event("web")), Draft)
    rig.objects.upsert(silence("maint", "name=~web"))
    assert isinstance(await rig.run(event("web")), Drop)
    rig.objects.delete("Silence", NS, "maint")
    assert isinstance(await rig.run(event("web")), Draft)
