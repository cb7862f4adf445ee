"""Heartbeats (``dispatch/heartbeat.py``, Alert ``spec.heartbeat``): the schedule, the beat, the bound.

The schedule (``next_beat``) and the beat (``beat``) are pure. ``Heartbeats`` runs against a real
``MemoryStore`` on a ``ManualClock``: two instances on one store are two replicas, a new instance on the same
store is a restart. ``tests/integration/test_heartbeat.py`` runs it in the real controller against real servers.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from notification_controller.api.alert import Alert, heartbeat_min_interval
from notification_controller.api.objects import parse_object
from notification_controller.dispatch.heartbeat import (
    ID_PREFIX,
    INTERVAL_METADATA,
    REASON,
    Heartbeats,
    beat,
    is_heartbeat,
    key_of,
    next_beat,
)
from notification_controller.dispatch.model import Notification
from notification_controller.errors import StoreError
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.store.memory import MemoryStore

NS = "flux-system"
ENV = "NOTIFICATION_CONTROLLER_HEARTBEAT_MIN_INTERVAL"


def alert_doc(name: str = "beat", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Alert",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {
            "providerRef": {"name": "sink"},
            "eventSources": [{"kind": "Kustomization", "name": "*"}],
            "heartbeat": {"interval": "1h"},
            **spec,
        },
    }


def provider_doc(ptype: str = "generic") -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": "sink", "namespace": NS},
        "spec": {"type": ptype, "address": "http://127.0.0.1:1/hook"},
    }


def alert(**spec: Any) -> Alert:
    obj = parse_object(alert_doc(**spec))
    assert isinstance(obj, Alert)
    return obj


# ---- the schedule ------------------------------------------------------------------------------------


def test_next_beat_is_an_interval_after_the_last_and_now_without_one() -> None:
    assert next_beat(None, 3600, 1000.0) == 1000.0
    assert next_beat(1000.0, 3600, 1000.0) == 4600.0
    assert next_beat(1000.0, 3600, 4599.9) == 4600.0  # not due yet
    assert next_beat(1000.0, 3600, 9000.0) == 4600.0  # overdue: due now (no catching up)
    # a beat dated in the future (another replica's clock ahead) holds the next one back...
    assert next_beat(1100.0, 3600, 1000.0) == 4700.0
    # ...but not for ever: more than an interval ahead is a clock that stepped back
    assert next_beat(1000.0 + 3601, 3600, 1000.0) == 1000.0


# ---- the field ----------------------------------------------------------------------------------------


def test_interval_is_bounded_with_an_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert alert().spec.validation_errors() == []
    assert alert().spec.heartbeat_interval() == 3600
    short = alert(heartbeat={"interval": "30s"}).spec
    assert short.validation_errors() == ["spec.heartbeat.interval '30s' is shorter than the minimum of 1m0s"]
    assert short.heartbeat_interval() is None
    assert alert(heartbeat={"interval": "soon"}).spec.validation_errors() == [
        "spec.heartbeat.interval 'soon' is not a duration (e.g. '1h', '30m')"
    ]
    long_message = alert(heartbeat={"interval": "1m", "message": "x" * 1025}).spec.validation_errors()
    assert long_message == ["spec.heartbeat.message is longer than 1024 characters"]
    assert alert(heartbeat=None).spec.heartbeat_interval() is None


def test_minimum_is_lowered_only_by_the_documented_variable_and_never_below_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "2s")
    assert heartbeat_min_interval() == 2.0
    assert alert(heartbeat={"interval": "2s"}).spec.validation_errors() == []
    monkeypatch.setenv(ENV, "1ms")
    assert heartbeat_min_interval() == 1.0
    monkeypatch.setenv(ENV, "not a duration")
    assert heartbeat_min_interval() == 60.0


# ---- the beat -----------------------------------------------------------------------------------------


def test_a_beat_is_a_plain_notification_about_the_alert() -> None:
    a = alert(eventMetadata={"cluster": "prod-eu"}, summary="prod")
    n = beat(a, "slack", 3600, 1_800_000_000.0)
    assert is_heartbeat(n) and n.id.startswith(ID_PREFIX) and len(n.id) == len(ID_PREFIX) + 32
    assert (n.alert.key, n.provider.key, n.provider_type) == (f"{NS}/beat", f"{NS}/sink", "slack")
    assert n.received_at == 1_800_000_000.0  # its latency starts when it is made
    e = n.event
    assert (e.involved_object.kind, e.involved_object.name, e.severity, e.reason) == (
        "Alert",
        "beat",
        "info",
        REASON,
    )
    assert e.message == f"notification-controller is alive: heartbeat of Alert {NS}/beat, every 1h0m0s"
    assert e.metadata == {"cluster": "prod-eu", "summary": "prod", INTERVAL_METADATA: "1h0m0s"}
    assert Notification.from_json(n.to_json()) == n  # survives a durable outbox
    # a custom message; another beat of the same Alert is another notification (its own Idempotency-Key)
    custom = beat(alert(heartbeat={"interval": "1h", "message": "prod is up"}), "slack", 3600, 1.0)
    assert custom.event.message == "prod is up"
    assert beat(a, "slack", 3600, 2.0).id != beat(a, "slack", 3600, 3.0).id
    assert not is_heartbeat(Notification("group-x", e, n.alert, n.provider, "slack"))


# ---- the scheduler on a real store --------------------------------------------------------------------


class Rig:
    def __init__(self, *alerts: dict[str, Any], ptype: str = "generic") -> None:
        self.clock = ManualClock()
        self.state = MemoryStore(clock=self.clock)
        self.objects = ObjectStore()
        self.objects.upsert(parse_object(provider_doc(ptype)))
        for doc in alerts or (alert_doc(),):
            self.objects.upsert(parse_object(doc))
        self.queued: list[Notification] = []

    def replica(self) -> Heartbeats:
        return Heartbeats(self.objects, self.state, clock=self.clock)

    async def enqueue(self, notification: Notification) -> None:
        self.queued.append(notification)


async def test_beats_once_per_interval_across_replicas_and_a_restart() -> None:
    rig = Rig()
    one, two = rig.replica(), rig.replica()
    assert await one.beat_due(rig.enqueue) == 1  # the first beat: at once
    assert await two.beat_due(rig.enqueue) == 0  # the other replica reads it in the store
    rig.clock.advance(3599)
    assert await one.beat_due(rig.enqueue) + await two.beat_due(rig.enqueue) == 0
    rig.clock.advance(1)
    assert await two.beat_due(rig.enqueue) + await one.beat_due(rig.enqueue) == 1
    restarted = rig.replica()  # a new process on the same (durable) store
    rig.clock.advance(1800)
    assert await restarted.beat_due(rig.enqueue) == 0
    rig.clock.advance(1800)
    assert await restarted.beat_due(rig.enqueue) == 1
    assert len(rig.queued) == 3
    stamps = [n.received_at for n in rig.queued]
    assert [b - a for a, b in itertools.pairwise(stamps)] == [3600.0, 3600.0]
    assert len({n.id for n in rig.queued}) == 3


async def test_an_interval_change_applies_to_the_next_beat() -> None:
    rig = Rig()
    replica = rig.replica()
    assert await replica.beat_due(rig.enqueue) == 1
    rig.objects.upsert(parse_object(alert_doc(heartbeat={"interval": "10m"})))
    rig.clock.advance(600)
    assert await replica.beat_due(rig.enqueue) == 1


@pytest.mark.parametrize(
    ("spec", "ptype"),
    [
        ({"suspend": True}, "generic"),  # suspend stops it
        ({"heartbeat": {"interval": "10s"}}, "generic"),  # invalid: not Ready, no beat
        ({}, "github"),  # a commit status needs a commit: no beat
        ({"heartbeat": None}, "generic"),
    ],
)
async def test_no_beat_for_a_suspended_invalid_or_commit_status_alert(
    spec: dict[str, Any], ptype: str
) -> None:
    rig = Rig(alert_doc(**spec), ptype=ptype)
    assert await rig.replica().beat_due(rig.enqueue) == 0
    assert rig.queued == []


async def test_a_beat_that_could_not_be_queued_is_given_back_and_retried() -> None:
    rig = Rig()
    replica = rig.replica()

    async def refuse(notification: Notification) -> None:
        raise StoreError("outbox unavailable")

    assert await replica.beat_due(refuse) == 0  # counted as a store error, not lost:
    assert await replica.beat_due(rig.enqueue) == 1  # the next tick beats
    entry = await rig.state.kv_get(key_of(alert()))
    assert entry is not None and float(entry.value) == rig.clock.now().timestamp()


async def test_the_last_beat_of_a_deleted_alert_is_forgotten() -> None:
    rig = Rig(alert_doc("a"), alert_doc("b"))
    replica = rig.replica()
    assert await replica.beat_due(rig.enqueue) == 2
    rig.objects.delete("Alert", NS, "a")
    replica.due(rig.clock.now().timestamp())
    assert set(replica._last) == {f"heartbeat/{NS}/b"}  # bounded by the Alerts that beat
