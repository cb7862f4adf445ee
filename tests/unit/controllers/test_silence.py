"""The Silence reconciler (controllers/silence.py) against a real ``ObjectStore``, the ``RecordingCluster`` port
(it applies status writes and deletions back into the store, as the API server and the watch would) and a
real ``MemoryStore`` for the held count. Time is a ``ManualClock``: no sleeping."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.common import ConditionStatus
from notification_controller.api.objects import parse_object
from notification_controller.api.silence import Silence, SilenceState
from notification_controller.controllers.base import DONE
from notification_controller.controllers.events import NORMAL, WARNING, EventRecorder
from notification_controller.controllers.manager import ControllerManager
from notification_controller.controllers.silence import (
    ALL_NAMESPACES_NOT_ALLOWED,
    HELD_READS_PER_SECOND,
    HELD_REFRESH,
    SilenceReconciler,
    all_namespaces_error,
    reconcile_errors,
    silence_errors,
)
from notification_controller.core import conditions as cond
from notification_controller.errors import KubeError
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import Change, ObjectStore
from notification_controller.settings import SilenceSettings
from notification_controller.store.memory import MemoryStore
from tests.support.recording_cluster import RecordingCluster

T0 = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
NS = "apps"
HOUR = 3600.0


def silence(name: str = "s", ns: str = NS, uid: str = "uid-s", **spec: Any) -> Silence:
    spec.setdefault("matchers", [{"name": "kind", "value": "Kustomization"}])
    raw = {
        "apiVersion": "notification-controller.io/v1alpha1",
        "kind": "Silence",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "generation": 1,
            "creationTimestamp": T0.isoformat(),
        },
        "spec": spec,
    }
    obj = parse_object(raw, receiver_rules=False)  # as the informer parses it: the reconciler reports
    assert isinstance(obj, Silence)
    return obj


class Harness:
    def __init__(self, *, retention: float = 24 * HOUR, cluster_namespace: str = "", start: datetime = T0):
        self.store = ObjectStore()
        self.cluster = RecordingCluster(self.store)
        self.clock = ManualClock(start)
        self.reconciler = SilenceReconciler(
            self.store,
            self.cluster,
            EventRecorder(self.cluster, self.clock, refill_seconds=0.001),
            self.clock,
            retention=retention,
            cluster_namespace=cluster_namespace,
        )
        self.store.subscribe(self._watch)  # as the manager does

    def _watch(self, change: Change) -> None:
        self.reconciler.watch(change)

    def add(self, obj: Silence) -> None:
        self.store.upsert(obj)

    def now(self, at: datetime) -> None:
        self.clock.advance((at - self.clock.now()).total_seconds())

    def current(self, name: str = "s", ns: str = NS) -> Silence:
        obj = self.store.silence(ns, name)
        assert obj is not None
        return obj

    def events(self, name: str = "s") -> list[tuple[str, str, str]]:
        return [(e.type, e.reason, e.message) for e in self.cluster.events_for(name, kind="Silence")]


def ready(obj: Silence) -> tuple[str, str, str] | None:
    found = cond.find(obj.status.conditions, cond.READY)
    return None if found is None else (found.status.value, found.reason, found.message)


async def test_pending_active_expired_with_a_requeue_exactly_at_each_transition() -> None:
    h = Harness(retention=0)
    starts, ends = T0 + timedelta(minutes=5), T0 + timedelta(minutes=35)
    h.add(silence(startsAt=starts.isoformat(), endsAt=ends.isoformat()))

    result = await h.reconciler.reconcile((NS, "s"))
    status = h.current().status
    assert (status.state, status.starts_at, status.ends_at) == (SilenceState.PENDING, starts, ends)
    assert status.observed_generation == 1
    assert ready(h.current()) == (
        "True",
        "Pending",
        "pending: starts at 2026-11-27T10:05:00Z, ends at 2026-11-27T10:35:00Z",
    )
    assert result.requeue_after == 300.0  # exactly the start
    assert h.events() == []

    h.now(starts)
    result = await h.reconciler.reconcile((NS, "s"))
    assert h.current().status.state is SilenceState.ACTIVE
    assert ready(h.current()) == ("True", "Active", "active until 2026-11-27T10:35:00Z")
    assert result.requeue_after == 1800.0  # exactly the end (no held count to refresh)
    assert h.events() == [(NORMAL, "Active", "Silence active until 2026-11-27T10:35:00Z")]

    writes = h.reconciler.status_writes
    assert await h.reconciler.reconcile((NS, "s")) == result  # a resync: nothing written, no second Event
    assert h.reconciler.status_writes == writes
    assert len(h.events()) == 1

    h.now(ends)
    result = await h.reconciler.reconcile((NS, "s"))
    assert h.current().status.state is SilenceState.EXPIRED
    assert ready(h.current()) == ("True", "Expired", "expired at 2026-11-27T10:35:00Z")
    assert result == DONE  # retention 0: kept forever, nothing left to happen
    assert h.events()[-1] == (NORMAL, "Expired", "Silence expired at 2026-11-27T10:35:00Z")
    assert h.cluster.deletions == []


async def test_duration_counts_from_creation_and_a_silence_created_active_says_so_once() -> None:
    h = Harness(retention=0)
    h.add(silence(duration="2h"))
    h.now(T0 + timedelta(minutes=1))
    result = await h.reconciler.reconcile((NS, "s"))
    assert h.current().status.ends_at == T0 + timedelta(hours=2)
    assert result.requeue_after == 2 * HOUR - 60
    assert [r for _, r, _ in h.events()] == ["Active"]


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        (
            {"matchers": [{"name": "name", "value": "apps-(", "matchType": "=~"}], "duration": "1h"},
            "spec.matchers[0].value",
            "is not an RE2 expression",
        ),
        ({"matchers": [{"name": "kind", "value": "K"}]}, "spec.endsAt", "spec.endsAt or spec.duration"),
        ({"duration": "1h", "comment": "c" * 1025}, "spec.comment", "longer than 1024"),
        ({"duration": "1h", "createdBy": "u" * 257}, "spec.createdBy", "longer than 256"),
        (
            {"startsAt": T0.isoformat(), "endsAt": (T0 - timedelta(hours=1)).isoformat()},
            "spec.endsAt",
            "must not be before spec.startsAt",
        ),
    ],
)
async def test_an_invalid_silence_is_ready_false_naming_the_field(
    spec: dict[str, Any], field: str, text: str
) -> None:
    h = Harness()
    h.add(silence(**spec))
    assert await h.reconciler.reconcile((NS, "s")) == DONE  # terminal: only an edit helps
    obj = h.current()
    status, reason, message = ready(obj) or ("", "", "")
    assert (status, reason) == ("False", cond.VALIDATION_FAILED)
    assert message.startswith(field) and text in message
    stalled = cond.find(obj.status.conditions, cond.STALLED)
    assert stalled is not None and stalled.status == ConditionStatus.TRUE
    assert obj.status.state is None
    assert h.events() == [(WARNING, cond.VALIDATION_FAILED, message)]
    await h.reconciler.reconcile((NS, "s"))
    assert len(h.events()) == 1  # said once


async def test_without_a_creation_time_start_at_is_required() -> None:
    raw = silence(duration="1h").model_dump(by_alias=True, mode="json", exclude_none=True)
    del raw["metadata"]["creationTimestamp"]
    obj = parse_object(raw, receiver_rules=False)
    assert isinstance(obj, Silence)
    assert silence_errors(obj) == []  # what ``check`` says: the API server would set the creation time
    assert reconcile_errors(obj) == [
        "spec.startsAt is required when the object has no creation time (local mode: a file has none)"
    ]


async def test_all_namespaces_outside_the_cluster_namespace_is_ready_false_and_says_what_it_does() -> None:
    h = Harness(cluster_namespace="monitoring")
    h.add(silence(duration="1h", allNamespaces=True))
    h.add(silence("global", "monitoring", uid="uid-g", duration="1h", allNamespaces=True))
    await h.reconciler.reconcile((NS, "s"))
    await h.reconciler.reconcile(("monitoring", "global"))
    status, reason, message = ready(h.current()) or ("", "", "")
    assert (status, reason) == ("False", ALL_NAMESPACES_NOT_ALLOWED)
    assert message == (
        "spec.allNamespaces is ignored: only a Silence in namespace 'monitoring' (the controller's "
        "--cluster-silences-namespace) holds the Alerts of every namespace; this Silence holds the Alerts of "
        "namespace 'apps' only"
    )
    assert h.current().status.state is SilenceState.ACTIVE  # it still holds its own namespace's
    assert ready(h.current("global", "monitoring")) == ("True", "Active", "active until 2026-11-27T11:00:00Z")
    off = all_namespaces_error(h.current("global", "monitoring"), "")
    assert off is not None and "--cluster-silences-namespace is not set" in off


async def test_held_count_comes_from_the_store_at_most_every_ten_seconds() -> None:
    h = Harness(retention=0)
    kv = MemoryStore(clock=h.clock)
    reads: list[str] = []

    async def held(s: Silence) -> int:  # what dispatch/quiet/held.py's held_total reads
        key = f"quiet/silence-held/{s.metadata.namespace}/{s.metadata.name}/{s.metadata.uid}"
        reads.append(key)
        entry = await kv.kv_get(key)
        return 0 if entry is None else int(entry.value)

    h.reconciler.held_count = held
    h.add(silence(duration="1h"))
    await kv.kv_put("quiet/silence-held/apps/s/uid-s", b"7")
    result = await h.reconciler.reconcile((NS, "s"))
    assert h.current().status.held == 7
    assert result.requeue_after == HELD_REFRESH  # refreshed while Active
    assert reads == ["quiet/silence-held/apps/s/uid-s"]

    await kv.kv_put("quiet/silence-held/apps/s/uid-s", b"9")
    writes = h.reconciler.status_writes
    h.clock.advance(1)
    await h.reconciler.reconcile((NS, "s"))  # a change of the object 1 s later: no read, no write
    assert (h.current().status.held, h.reconciler.status_writes, len(reads)) == (7, writes, 1)

    h.clock.advance(HELD_REFRESH)
    await h.reconciler.reconcile((NS, "s"))
    assert h.current().status.held == 9

    await kv.kv_put("quiet/silence-held/apps/s/uid-s", b"12")
    h.now(T0 + timedelta(hours=1))
    result = await h.reconciler.reconcile((NS, "s"))  # the transition reads the final count
    assert (h.current().status.state, h.current().status.held) == (SilenceState.EXPIRED, 12)
    assert result == DONE


async def test_a_silence_ending_when_it_starts_has_ended_and_is_valid() -> None:
    """``silence expire`` within the second of ``add`` writes ``endsAt`` equal to ``startsAt``."""
    h = Harness(retention=0)
    h.add(silence(startsAt=T0.isoformat(), endsAt=T0.isoformat()))
    assert await h.reconciler.reconcile((NS, "s")) == DONE
    assert h.current().status.state is SilenceState.EXPIRED
    assert ready(h.current()) == ("True", "Expired", "expired at 2026-11-27T10:00:00Z")


async def test_an_expired_silence_is_deleted_after_retention_with_its_uid() -> None:
    h = Harness(retention=2 * HOUR)
    h.add(silence(duration="1h"))
    h.now(T0 + timedelta(hours=1, minutes=30))
    result = await h.reconciler.reconcile((NS, "s"))
    assert h.current().status.state is SilenceState.EXPIRED
    assert result.requeue_after == 1.5 * HOUR  # exactly at the end of retention
    h.clock.advance(1.5 * HOUR)
    assert await h.reconciler.reconcile((NS, "s")) == DONE
    assert [(r.kind, r.namespace, r.name, r.uid) for r in h.cluster.deletions] == [
        ("Silence", NS, "s", "uid-s")
    ]
    assert h.store.silence(NS, "s") is None


async def test_a_new_silence_of_the_same_name_or_one_already_gone_is_not_an_error() -> None:
    h = Harness(retention=HOUR)
    h.add(silence(duration="1h"))
    h.now(T0 + timedelta(hours=3))
    h.cluster.fail_next.append(KubeError("Precondition failed: UID", status=409))
    assert await h.reconciler.reconcile((NS, "s")) == DONE
    h.cluster.fail_next.append(KubeError("not found", status=404))
    assert await h.reconciler.reconcile((NS, "s")) == DONE
    h.cluster.fail_next.append(KubeError("etcd is down", status=500))
    with pytest.raises(KubeError):  # retried with backoff by the manager
        await h.reconciler.reconcile((NS, "s"))


async def test_a_silence_local_mode_keeps_is_not_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(retention=HOUR)
    h.add(silence(duration="1h"))
    h.now(T0 + timedelta(hours=3))
    h.cluster.fail_next.append(KubeError("x.yaml was not written by the silence CLI", status=405))
    with caplog.at_level(logging.INFO, logger="notification_controller.controllers.silence"):
        assert await h.reconciler.reconcile((NS, "s")) == DONE
        assert await h.reconciler.reconcile((NS, "s")) == DONE  # fail_next is empty: no second attempt
    assert h.cluster.deletions == []
    assert h.current().status.state is SilenceState.EXPIRED
    kept = [r.getMessage() for r in caplog.records if "is kept" in r.getMessage()]
    assert kept == ["Silence/apps/s expired and is kept: x.yaml was not written by the silence CLI"]


async def test_the_manager_runs_silences_and_schedules_the_next_transition() -> None:
    store = ObjectStore()
    cluster = RecordingCluster(store)
    clock = ManualClock(T0)
    manager = ControllerManager(
        store,
        cluster,
        clock,
        registry=CollectorRegistry(),
        silences=SilenceSettings(retention=0, cluster_namespace="monitoring"),
    )
    reconciler = manager.reconcilers["Silence"]
    assert isinstance(reconciler, SilenceReconciler)
    assert (reconciler.retention, reconciler.cluster_namespace) == (0, "monitoring")
    store.upsert(silence(startsAt=(T0 + timedelta(minutes=1)).isoformat(), duration="10m"))
    result = await manager.process("Silence", (NS, "s"))
    assert result is not None and result.requeue_after == 60.0
    assert manager.queues["Silence"].delayed == frozenset({(NS, "s")})


async def test_many_silences_refresh_their_held_counts_more_slowly() -> None:
    """Silences are a tenant's to create: 1,000 Active ones must not mean 100 reconciles (and store reads) a
    second. The refresh stretches so that all of them together stay under ``HELD_READS_PER_SECOND``."""
    h = Harness(retention=0)
    reads = 0

    async def held(s: Silence) -> int:
        nonlocal reads
        reads += 1
        return 0

    h.reconciler.held_count = held
    for i in range(1000):
        h.add(silence(f"s{i}", uid=f"uid-{i}", duration="2h"))
    delays = {(await h.reconciler.reconcile((NS, f"s{i}"))).requeue_after for i in range(1000)}
    assert delays == {1000 / HELD_READS_PER_SECOND} == {20.0}
    assert reads == 1000  # each read once; the next only after 20 s
    for i in range(1000):
        await h.reconciler.reconcile((NS, f"s{i}"))
    assert reads == 1000
    for i in range(990):
        h.store.delete("Silence", NS, f"s{i}")
    result = await h.reconciler.reconcile((NS, "s999"))
    assert result.requeue_after == HELD_REFRESH  # few Silences: back to 10 s
