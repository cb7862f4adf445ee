"""Objects share what they hold alike (issue 17: 10,000 Alerts): statuses, fields-sets, compiled sources.

Sharing must change no value: the status written (local mode: ``LocalCluster.statuses``; cluster mode: the
patch body) is asserted byte for byte, and a shared value is never changed through another object.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from notification_controller.api.alert import Alert
from notification_controller.api.common import (
    EMPTY_STATUS,
    ObjectStatus,
    json_key,
    share_fields_sets,
    shared_status,
    with_fields,
)
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import Provider
from notification_controller.controllers.alert import AlertReconciler
from notification_controller.controllers.base import ReverseIndex
from notification_controller.controllers.events import EventRecorder
from notification_controller.controllers.provider import ProviderReconciler
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import LocalCluster, LocalManifests, load_directory

NOW = datetime(2026, 1, 1, 12, 30, 5, tzinfo=UTC)

MANIFESTS = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: sink, namespace: apps}
spec: {type: generic, address: "http://127.0.0.1:9/hook"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: a1, namespace: apps}
spec:
  providerRef: {name: sink}
  eventSources: [{kind: Kustomization, name: app-1}]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: a2, namespace: apps}
spec:
  providerRef: {name: sink}
  eventSources: [{kind: HelmRelease, name: app-2}, {kind: Bucket, name: app-2-canary}]
  inclusionList: [".*succeeded.*"]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: lost, namespace: apps}
spec:
  providerRef: {name: nowhere}
  eventSources: [{kind: Kustomization, name: app-3}]
"""

READY_ALERT = (
    b'{"conditions":[{"type":"Ready","status":"True","reason":"Succeeded","message":"Alert is ready",'
    b'"lastTransitionTime":"2026-01-01T12:30:05Z","observedGeneration":1}],"observedGeneration":1}'
)
LOST_ALERT = (
    b'{"conditions":[{"type":"Reconciling","status":"True","reason":"ProgressingWithRetry",'
    b'"message":"Reconciliation in progress","lastTransitionTime":"2026-01-01T12:30:05Z",'
    b'"observedGeneration":1},{"type":"Ready","status":"False","reason":"ProviderNotFound",'
    b"\"message\":\"Provider 'nowhere' not found in namespace 'apps'\","
    b'"lastTransitionTime":"2026-01-01T12:30:05Z","observedGeneration":1}],"observedGeneration":-1}'
)


async def _reconciled(tmp_path: Path) -> tuple[ObjectStore, LocalCluster]:
    (tmp_path / "apps.yaml").write_text(MANIFESTS)
    store = ObjectStore()
    cluster = LocalCluster(store)
    LocalManifests(tmp_path, store, cluster).load()
    clock = ManualClock(NOW)
    recorder = EventRecorder(cluster, clock)
    providers = ProviderReconciler(store, cluster, recorder, clock)
    while (await providers.reconcile(("apps", "sink"))).requeue:  # Flux's finalizer first
        pass
    alerts = AlertReconciler(store, cluster, recorder, clock)
    for name in ("a1", "a2", "lost"):
        await alerts.reconcile(("apps", name))
    return store, cluster


async def test_alerts_with_the_same_status_share_it_and_the_written_bytes_are_unchanged(
    tmp_path: Path,
) -> None:
    store, cluster = await _reconciled(tmp_path)
    a1, a2, lost = (store.alert("apps", name) for name in ("a1", "a2", "lost"))
    assert a1 is not None and a2 is not None and lost is not None

    # What local mode "writes" (its API server's copy), byte for byte.
    written = {name: cluster.statuses[("Alert", "apps", name)] for name in ("a1", "a2", "lost")}
    assert orjson.dumps(written["a1"]) == READY_ALERT
    assert orjson.dumps(written["a2"]) == READY_ALERT
    assert orjson.dumps(written["lost"]) == LOST_ALERT
    # ... and what the objects hold says the same.
    for name, alert in (("a1", a1), ("a2", a2), ("lost", lost)):
        assert alert.status.model_dump(by_alias=True, mode="json", exclude_none=True) == written[name]

    # Equal statuses: one dict, one model, one condition, one reason string.
    assert written["a1"] is written["a2"]
    assert a1.status is a2.status
    assert a1.status.conditions[0] is a2.status.conditions[0]
    assert a1.status.conditions[0].reason is a2.status.conditions[0].reason
    # A different status is its own.
    assert lost.status is not a1.status and written["lost"] is not written["a1"]


async def test_replaced_objects_share_their_fields_sets_and_copies_do_not_leak(tmp_path: Path) -> None:
    store, _ = await _reconciled(tmp_path)
    a1, a2 = store.alert("apps", "a1"), store.alert("apps", "a2")
    assert a1 is not None and a2 is not None
    # replaced by their status write: shared with every model with the same explicitly-set fields
    assert a1.__pydantic_fields_set__ is a2.__pydantic_fields_set__
    assert a1.metadata.__pydantic_fields_set__ is a2.metadata.__pydantic_fields_set__
    assert a1.spec.provider_ref.__pydantic_fields_set__ is a2.spec.provider_ref.__pydantic_fields_set__
    # a2 sets inclusionList, a1 does not: not the same set
    assert a1.spec.__pydantic_fields_set__ != a2.spec.__pydantic_fields_set__
    before = a2.metadata.model_dump(exclude_unset=True)

    edited = a1.metadata.model_copy(update={"labels": {"team": "x"}})
    assert "labels" in edited.model_fields_set
    assert "labels" not in a2.metadata.model_fields_set  # the copy got its own set
    assert a2.metadata.model_dump(exclude_unset=True) == before


def test_shared_status_is_one_instance_per_json_input_and_validates_as_usual() -> None:
    raw: dict[str, Any] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": "shared-status-test",
                "lastTransitionTime": "2026-02-03T04:05:06Z",
                "observedGeneration": 2,
            }
        ],
        "observedGeneration": 2,
    }
    first = shared_status(ObjectStatus, raw)
    assert shared_status(ObjectStatus, orjson.loads(orjson.dumps(raw))) is first
    assert first == ObjectStatus.model_validate(raw)

    other = {**raw, "observedGeneration": 3}
    assert shared_status(ObjectStatus, other) is not first

    # Not JSON values (a YAML timestamp), or a null: validated, equal, never shared.
    from_yaml = {
        **raw,
        "conditions": [
            {**raw["conditions"][0], "lastTransitionTime": datetime(2026, 2, 3, 4, 5, 6, tzinfo=UTC)}
        ],
    }
    assert json_key(from_yaml) is None
    assert shared_status(ObjectStatus, from_yaml) == first
    assert shared_status(ObjectStatus, from_yaml) is not shared_status(ObjectStatus, from_yaml)
    with_null = {**raw, "lastHandledReconcileAt": None}
    assert json_key(with_null) is None
    assert shared_status(ObjectStatus, with_null) is not shared_status(ObjectStatus, with_null)

    bad = {**raw, "observedGeneration": "many"}
    for _ in range(2):  # an error is raised each time: nothing was remembered
        with pytest.raises(ValidationError):
            shared_status(ObjectStatus, bad)


def test_parsed_objects_share_equal_statuses_and_an_absent_one() -> None:
    """Cluster mode: every watch event is parsed; Alerts and Providers with equal statuses share them."""
    status = orjson.loads(READY_ALERT)

    def alert(name: str, with_status: bool) -> Alert:
        raw: dict[str, Any] = {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"providerRef": {"name": "sink"}, "eventSources": [{"kind": "Bucket", "name": name}]},
        }
        if with_status:
            raw["status"] = orjson.loads(READY_ALERT)
        obj = parse_object(raw)
        assert isinstance(obj, Alert)
        return obj

    one, two = alert("one", True), alert("two", True)
    assert one.status is two.status
    assert orjson.dumps(one.status.model_dump(by_alias=True, mode="json", exclude_none=True)) == READY_ALERT
    assert status == orjson.loads(READY_ALERT)  # the input is not changed
    assert alert("three", False).status is EMPTY_STATUS is alert("four", False).status
    provider = Provider.model_validate(
        {
            "metadata": {"name": "sink", "namespace": "apps"},
            "spec": {"type": "generic"},
            "status": orjson.loads(READY_ALERT),
        }
    )
    assert provider.status is one.status


def test_with_fields_and_share_fields_sets_keep_values() -> None:
    alert = Alert.model_validate(
        {
            "metadata": {"name": "x", "namespace": "apps"},
            "spec": {"providerRef": {"name": "sink"}, "eventSources": [{"kind": "Bucket", "name": "b"}]},
        }
    )
    status = shared_status(ObjectStatus, orjson.loads(READY_ALERT))
    copied = with_fields(alert, status=status)
    assert copied.status is status and alert.status is EMPTY_STATUS
    assert copied.model_fields_set == {"metadata", "spec", "status"}
    assert alert.model_fields_set == {"metadata", "spec"}
    assert share_fields_sets(copied) == copied
    assert copied.model_dump() == {**alert.model_dump(), "status": status.model_dump()}


def test_a_status_change_keeps_the_compiled_sources_and_the_index() -> None:
    store = ObjectStore()
    alert = Alert.model_validate(
        {
            "metadata": {"name": "x", "namespace": "apps"},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Bucket", "name": "b"}],
                "inclusionList": ["ok"],
            },
        }
    )
    store.upsert(alert)
    [before] = store.alerts_for("apps", "Bucket", "b")
    updated = with_fields(alert, status=shared_status(ObjectStatus, orjson.loads(READY_ALERT)))
    store.upsert(updated)
    [after] = store.alerts_for("apps", "Bucket", "b")
    assert after.alert is updated and store.alert("apps", "x") is updated
    assert after.sources is before.sources and after.inclusion is before.inclusion
    # a spec change is compiled again
    respecced = alert.model_copy(
        update={"spec": alert.spec.model_copy(update={"event_sources": alert.spec.event_sources * 1})}
    )
    store.upsert(
        respecced.model_copy(update={"spec": respecced.spec.model_copy(update={"inclusion_list": ["no"]})})
    )
    [changed] = store.alerts_for("apps", "Bucket", "b")
    assert changed.inclusion is not before.inclusion
    assert not changed.message_allowed("ok") and before.message_allowed("ok")


def test_reverse_index_keeps_one_tuple_and_ignores_the_same_references() -> None:
    index = ReverseIndex()
    index.set(("apps", "a"), [("apps", "sink"), ("apps", "sink")])
    index.set(("apps", "b"), [("apps", "sink")])
    assert index.users(("apps", "sink")) == [("apps", "a"), ("apps", "b")]
    index.set(("apps", "a"), [("apps", "sink")])  # a status write: the same references
    assert index.users(("apps", "sink")) == [("apps", "a"), ("apps", "b")]
    index.set(("apps", "a"), [("apps", "other")])
    assert index.users(("apps", "sink")) == [("apps", "b")]
    assert index.users(("apps", "other")) == [("apps", "a")]
    index.set(("apps", "b"), [])
    index.remove(("apps", "a"))
    assert index.users(("apps", "sink")) == [] and index.users(("apps", "other")) == []


def test_objects_without_a_generation_are_built_with_generation_one(tmp_path: Path) -> None:
    (tmp_path / "apps.yaml").write_text(
        MANIFESTS
        + """\
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: pinned, namespace: apps, generation: 7}
spec:
  providerRef: {name: sink}
  eventSources: [{kind: Kustomization, name: app-4}]
"""
    )
    plain = load_directory(tmp_path)
    assert {o.metadata.generation for o in plain.objects} == {0, 7} and not plain.implicit_generation
    result = load_directory(tmp_path, implicit_generation=True)
    assert {(o.metadata.name, o.metadata.generation) for o in result.objects} == {
        ("sink", 1),
        ("a1", 1),
        ("a2", 1),
        ("lost", 1),
        ("pinned", 7),
    }
    assert result.implicit_generation == {
        ("Provider", "apps", "sink"),
        ("Alert", "apps", "a1"),
        ("Alert", "apps", "a2"),
        ("Alert", "apps", "lost"),
    }
    store = ObjectStore()
    feeder = LocalManifests(tmp_path, store, LocalCluster(store))
    feeder.load()
    pinned, a1 = store.alert("apps", "pinned"), store.alert("apps", "a1")
    assert pinned is not None and pinned.metadata.generation == 7
    assert a1 is not None and a1.metadata.generation == 1
    (tmp_path / "apps.yaml").write_text(
        (tmp_path / "apps.yaml").read_text().replace("app-1}", "app-1b}").replace("app-4}", "app-4b}")
    )
    feeder.load()  # a spec change: one more for the implicit generation, the manifest's otherwise
    pinned, a1 = store.alert("apps", "pinned"), store.alert("apps", "a1")
    assert pinned is not None and pinned.metadata.generation == 7
    assert a1 is not None and a1.metadata.generation == 2
