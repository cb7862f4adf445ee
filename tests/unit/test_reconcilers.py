"""The Receiver, Provider and Alert reconcilers, the event recorder and the controller manager.

The reconcilers run against a real ``ObjectStore`` and ``RecordingCluster`` (the boundary port: it records
writes and applies status/finalizers back into the store, as the API server and the watch would).
Flux's behaviour is reference §6 (texts of §6.3 and §6.4 are asserted verbatim); what goes beyond Flux
(Provider and Alert status) is documented in docs/status.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from notification_controller.api import FINALIZER, RECONCILE_REQUEST_ANNOTATION
from notification_controller.api.alert import Alert
from notification_controller.api.common import Condition, ConditionStatus, Secret
from notification_controller.api.objects import Object, parse_object
from notification_controller.api.provider import COMMIT_STATUS_EXPR_MESSAGE, Provider
from notification_controller.api.receiver import Receiver
from notification_controller.controllers.alert import AlertReconciler
from notification_controller.controllers.base import Result
from notification_controller.controllers.events import NORMAL, WARNING, EventRecorder
from notification_controller.controllers.manager import (
    RECONCILE_BUCKETS,
    ControllerManager,
    exponential_buckets_range,
)
from notification_controller.controllers.provider import ProviderReconciler
from notification_controller.controllers.receiver import ReceiverReconciler
from notification_controller.core import conditions as cond
from notification_controller.core.redact import Redactor
from notification_controller.core.webhook import webhook_path
from notification_controller.errors import KubeError
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import Change, Key, ObjectRef, ObjectStore
from notification_controller.settings import KubeSettings
from tests.support.capture import mint_tls
from tests.support.recording_cluster import RecordingCluster

EXPECTED_PATH = "/hook/b5870897382949f6a6c2012394737b779ec2e77e0f01692279430f864810dc1a"
CANARY = "CANARY-9f3b1c-s3cr3t"
NS = "default"

# --------------------------------------------------------------------------------------------------
# Builders and harness
# --------------------------------------------------------------------------------------------------


def _meta(name: str, ns: str, generation: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "generation": generation, "uid": f"uid-{name}", **extra}


def secret(name: str, ns: str = NS, **string_data: str) -> Secret:
    return Secret.from_manifest(
        {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(name, ns, 0), "stringData": string_data}
    )


def receiver(
    name: str = "test-receiver",
    ns: str = NS,
    *,
    generation: int = 1,
    meta: Mapping[str, Any] | None = None,
    **spec: Any,
) -> Receiver:
    body: dict[str, Any] = {
        "type": "generic",
        "resources": [{"kind": "GitRepository", "name": "podinfo"}],
        "secretRef": {"name": "test-token"},
    }
    body.update(spec)
    body = {k: v for k, v in body.items() if v is not None}
    # model_validate, not parse_object: these tests also feed specs the CRD rules reject (old API servers).
    return Receiver.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": _meta(name, ns, generation, **(meta or {})),
            "spec": body,
        }
    )


def provider(name: str = "webhook", ns: str = NS, *, generation: int = 1, **spec: Any) -> Provider:
    body: dict[str, Any] = {"type": "generic", "address": "https://example.com/hook"}
    body.update(spec)
    body = {k: v for k, v in body.items() if v is not None}
    return Provider.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": _meta(name, ns, generation),
            "spec": body,
        }
    )


def alert(
    name: str = "on-call",
    ns: str = NS,
    *,
    generation: int = 1,
    meta: Mapping[str, Any] | None = None,
    **spec: Any,
) -> Alert:
    body: dict[str, Any] = {
        "providerRef": {"name": "webhook"},
        "eventSources": [{"kind": "Kustomization", "name": "*"}],
    }
    body.update(spec)
    return Alert.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": _meta(name, ns, generation, **(meta or {})),
            "spec": body,
        }
    )


def with_meta(obj: Any, **update: Any) -> Any:
    return obj.model_copy(update={"metadata": obj.metadata.model_copy(update=update)})


def respec(obj: Any, **spec_update: Any) -> Any:
    """A spec edit as the API server applies it: status and finalizers kept, generation bumped."""
    meta = obj.metadata.model_copy(update={"generation": obj.metadata.generation + 1})
    return obj.model_copy(update={"spec": obj.spec.model_copy(update=spec_update), "metadata": meta})


def ready(obj: Receiver | Provider | Alert) -> Condition:
    found = cond.find(obj.status.conditions, cond.READY)
    assert found is not None, f"no Ready condition in {obj.status}"
    return found


def types_of(obj: Receiver | Provider | Alert) -> list[str]:
    return [c.type for c in obj.status.conditions]


class Harness:
    """Store + recording cluster + the three reconcilers, wired like the manager wires them."""

    def __init__(self, *, no_cross_namespace_refs: bool = False, redactor: Redactor | None = None) -> None:
        self.store = ObjectStore()
        self.cluster = RecordingCluster(self.store)
        self.clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
        self.recorder = EventRecorder(self.cluster, self.clock, redactor)
        self.receivers = ReceiverReconciler(
            self.store, self.cluster, self.recorder, self.clock, redactor=redactor
        )
        self.providers = ProviderReconciler(
            self.store, self.cluster, self.recorder, self.clock, redactor=redactor
        )
        self.alerts = AlertReconciler(
            self.store,
            self.cluster,
            self.recorder,
            self.clock,
            redactor=redactor,
            no_cross_namespace_refs=no_cross_namespace_refs,
        )
        self.enqueued: list[tuple[str, Key]] = []
        self.store.subscribe(self._on_change)

    def _on_change(self, change: Change) -> None:
        for kind, rec in (("Receiver", self.receivers), ("Provider", self.providers), ("Alert", self.alerts)):
            self.enqueued.extend((kind, key) for key in rec.watch(change))

    def reconciler(self, kind: str) -> ReceiverReconciler | ProviderReconciler | AlertReconciler:
        if kind == "Receiver":
            return self.receivers
        return self.providers if kind == "Provider" else self.alerts

    def add(self, *objs: Object) -> None:
        for obj in objs:
            self.store.upsert(obj)

    async def settle(self, kind: str, name: str, ns: str = NS) -> Result:
        """Reconcile as the queue would: again while asked for an immediate retry without error."""
        rec = self.reconciler(kind)
        for _ in range(5):
            result = await rec.reconcile((ns, name))
            if not result.requeue or result.error is not None:
                return result
        raise AssertionError("did not settle in 5 reconciles")

    def get_receiver(self, name: str = "test-receiver", ns: str = NS) -> Receiver:
        obj = self.store.receiver(ns, name)
        assert obj is not None
        return obj

    def get_provider(self, name: str = "webhook", ns: str = NS) -> Provider:
        obj = self.store.provider(ns, name)
        assert obj is not None
        return obj

    def get_alert(self, name: str = "on-call", ns: str = NS) -> Alert:
        obj = self.store.alert(ns, name)
        assert obj is not None
        return obj

    def events(self, name: str) -> list[tuple[str, str, str]]:
        return [(e.type, e.reason, e.message) for e in self.cluster.events_for(name)]


# --------------------------------------------------------------------------------------------------
# Receiver (reference §6.3)
# --------------------------------------------------------------------------------------------------


async def test_receiver_happy_path_publishes_the_exact_webhook_path() -> None:
    """§6.3 steps 2, 7-9 and the deferred patch: finalizer, Ready=True Succeeded, webhookPath, event, requeue."""
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())

    first = await h.receivers.reconcile((NS, "test-receiver"))
    assert first == Result(requeue=True)
    assert h.get_receiver().metadata.finalizers == [FINALIZER]
    assert h.cluster.status_patches == []  # nothing to say yet

    second = await h.receivers.reconcile((NS, "test-receiver"))
    assert second.requeue_after == 600.0 and second.error is None
    obj = h.get_receiver()
    assert obj.status.webhook_path == EXPECTED_PATH
    assert types_of(obj) == ["Ready"]
    cnd = ready(obj)
    assert (cnd.status, cnd.reason, cnd.message) == (
        ConditionStatus.TRUE,
        "Succeeded",
        f"Receiver initialized for path: {EXPECTED_PATH}",
    )
    assert cnd.observed_generation == 1
    assert cnd.last_transition_time == datetime(2026, 1, 1, tzinfo=UTC)
    assert obj.status.observed_generation == 1
    assert h.events("test-receiver") == [(NORMAL, "Succeeded", "Reconciliation finished, next run in 10m0s")]
    patch = h.cluster.patches_for("test-receiver")[-1]
    assert patch["webhookPath"] == EXPECTED_PATH
    assert patch["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


async def test_receiver_resync_is_idempotent_and_writes_nothing() -> None:
    """Checklist D13: reconciling a converged Receiver again sends no status patch."""
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())
    await h.settle("Receiver", "test-receiver")
    patches = len(h.cluster.status_patches)
    h.clock.advance(30)
    for _ in range(3):
        result = await h.receivers.reconcile((NS, "test-receiver"))
        assert result.requeue_after == 600.0
    assert len(h.cluster.status_patches) == patches
    assert h.receivers.status_writes == 1
    # Each reconcile records its Succeeded event again (the API adapter bumps count/lastTimestamp of the
    # first, as client-go's correlator does): `flux reconcile` shows a fresh Event, never silence.
    assert len(h.events("test-receiver")) == 4
    ref = ObjectRef.of(h.get_receiver())
    assert h.recorder.repeats(ref, NORMAL, "Succeeded", "Reconciliation finished, next run in 10m0s") == 3


async def test_receiver_interval_drives_requeue_and_event_text() -> None:
    h = Harness()
    h.add(secret("test-token", token="t0ken"), receiver(interval="1h30m"))
    result = await h.settle("Receiver", "test-receiver")
    assert result.requeue_after == 5400.0
    assert h.events("test-receiver")[-1] == (
        NORMAL,
        "Succeeded",
        "Reconciliation finished, next run in 1h30m0s",
    )


async def test_token_change_changes_the_path_and_is_triggered_by_the_secret() -> None:
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())
    await h.settle("Receiver", "test-receiver")
    h.enqueued.clear()
    h.clock.advance(60)
    h.add(secret("test-token", token="rotated-token"))
    assert ("Receiver", (NS, "test-receiver")) in h.enqueued  # the Secret watch maps back to the Receiver
    await h.receivers.reconcile((NS, "test-receiver"))
    obj = h.get_receiver()
    new_path = webhook_path(b"rotated-token", "test-receiver", NS)
    assert obj.status.webhook_path == new_path != EXPECTED_PATH
    assert ready(obj).message == f"Receiver initialized for path: {new_path}"
    assert ready(obj).last_transition_time == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert h.store.receiver_by_path(new_path) is not None
    assert h.store.receiver_by_path(EXPECTED_PATH) is None


async def test_missing_secret_gives_token_not_found_then_ready_when_it_appears() -> None:
    """§6.3 step 8: Flux's error text, Ready=False TokenNotFound, webhookPath cleared, retried with backoff."""
    h = Harness()
    h.add(receiver())
    result = await h.settle("Receiver", "test-receiver")
    message = "unable to read token from secret 'default/test-token' error: secrets \"test-token\" not found"
    assert result == Result(requeue=True, error=message)
    obj = h.get_receiver()
    assert types_of(obj) == ["Reconciling", "Ready"]
    rc = cond.find(obj.status.conditions, cond.RECONCILING)
    assert rc is not None and (rc.status, rc.reason, rc.message) == (
        ConditionStatus.TRUE,
        "ProgressingWithRetry",
        "Reconciliation in progress",
    )
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.FALSE,
        "TokenNotFound",
        message,
    )
    assert obj.status.webhook_path is None  # cleared (Flux writes ""; a merge patch clears with null)
    assert obj.status.observed_generation == -1  # not observed: the reconcile failed
    assert h.events("test-receiver") == [(WARNING, "Failed", message)]

    # A retry that fails the same way writes nothing (lastTransitionTime stays).
    patches = len(h.cluster.status_patches)
    h.clock.advance(5)
    await h.receivers.reconcile((NS, "test-receiver"))
    assert len(h.cluster.status_patches) == patches

    h.enqueued.clear()
    h.add(secret("test-token", token="test-token"))
    assert h.enqueued == [("Receiver", (NS, "test-receiver"))]
    result = await h.receivers.reconcile((NS, "test-receiver"))
    obj = h.get_receiver()
    assert result.requeue_after == 600.0
    assert types_of(obj) == ["Ready"]
    assert ready(obj).status == ConditionStatus.TRUE
    assert ready(obj).last_transition_time == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert obj.status.webhook_path == EXPECTED_PATH
    assert obj.status.observed_generation == 1


async def test_secret_without_token_key() -> None:
    h = Harness()
    h.add(secret("test-token", other="x"), receiver())
    result = await h.settle("Receiver", "test-receiver")
    assert result.error == "invalid 'default/test-token' secret data: required fields 'token'"
    assert ready(h.get_receiver()).reason == "TokenNotFound"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"resourceFilter": "res.metadata.name =="},
            "invalid resourceFilter expression: ",
        ),
        (
            {"resources": [{"kind": "GitRepository", "name": "podinfo", "filter": "'not a bool'"}]},
            'invalid filter expression for resources[0] (kind="GitRepository", name="podinfo"): ',
        ),
        (
            {"resourceFilter": "claims.sub == 'x'"},  # claims is only declared for generic-oidc
            "invalid resourceFilter expression: ",
        ),
    ],
)
async def test_invalid_cel_is_terminal(spec: dict[str, Any], message: str) -> None:
    """§6.3 step 4: InvalidCELExpression, Ready=False + Stalled=True, observedGeneration set, no requeue."""
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver(**spec))
    result = await h.settle("Receiver", "test-receiver")
    assert result == Result()
    obj = h.get_receiver()
    assert types_of(obj) == ["Stalled", "Ready"]
    prefix = "Reconciliation failed terminally due to configuration error: " + message
    for c in obj.status.conditions:
        assert c.status == ConditionStatus.TRUE if c.type == "Stalled" else ConditionStatus.FALSE
        assert c.reason == "InvalidCELExpression"
        assert c.message.startswith(prefix), c.message
    assert obj.status.observed_generation == 1
    assert obj.status.webhook_path is None
    events = h.events("test-receiver")
    assert len(events) == 1 and events[0][:2] == (WARNING, "InvalidCELExpression")
    assert events[0][2].startswith(prefix)


async def test_fixing_a_terminal_receiver_clears_stalled() -> None:
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver(resourceFilter="res.metadata.name =="))
    await h.settle("Receiver", "test-receiver")
    h.enqueued.clear()
    h.add(respec(h.get_receiver(), resource_filter="res.metadata.name == 'podinfo'"))
    assert h.enqueued == [("Receiver", (NS, "test-receiver"))]
    await h.receivers.reconcile((NS, "test-receiver"))
    obj = h.get_receiver()
    assert types_of(obj) == ["Ready"]
    assert ready(obj).status == ConditionStatus.TRUE
    assert ready(obj).observed_generation == 2
    assert obj.status.observed_generation == 2


OIDC = [
    {
        "issuerURL": "https://token.actions.githubusercontent.com",
        "validations": [{"expression": "true", "message": "m"}],
    }
]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"type": "generic-oidc", "secretRef": None},
            "generic-oidc receiver requires at least one oidcProvider",
        ),
        ({"oidcProviders": OIDC}, "oidcProviders can only be set when type is generic-oidc"),
        (
            {"type": "generic-oidc", "oidcProviders": OIDC},
            "secretRef cannot be set when type is generic-oidc",
        ),
        ({"secretRef": None}, "secretRef is required when type is not generic-oidc"),
        (
            {"type": "generic-oidc", "secretRef": None, "oidcProviders": [OIDC[0], OIDC[0]]},
            'oidcProviders[1].issuerURL "https://token.actions.githubusercontent.com" is duplicated',
        ),
        (
            {
                "type": "generic-oidc",
                "secretRef": None,
                "oidcProviders": [
                    {**OIDC[0], "variables": [{"name": "", "expression": "claims.sub"}]},
                ],
            },
            "oidcProviders[0].variables[0].name is required",
        ),
    ],
)
async def test_oidc_rule_violations_are_terminal_validation_failures(
    spec: dict[str, Any], message: str
) -> None:
    """§6.3 steps 5-6a: cross-field rules (the reconciler's texts) and ValidateOIDCProvidersSpec."""
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver(**spec))
    assert await h.settle("Receiver", "test-receiver") == Result()
    obj = h.get_receiver()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "ValidationFailed")
    assert ready(obj).message == "Reconciliation failed terminally due to configuration error: " + message
    assert cond.is_true(obj.status.conditions, cond.STALLED)


async def test_oidc_validation_cel_errors_are_invalid_cel() -> None:
    h = Harness()
    providers = [
        {"issuerURL": "https://issuer.example", "validations": [{"expression": "claims.sub", "message": "m"}]}
    ]
    providers[0]["validations"] = [{"expression": "'x'", "message": "must be bool"}]
    h.add(receiver(type="generic-oidc", secretRef=None, oidcProviders=providers))
    await h.settle("Receiver", "test-receiver")
    obj = h.get_receiver()
    assert ready(obj).reason == "InvalidCELExpression"
    assert "invalid expression for oidcProviders[0].validations[0]: " in ready(obj).message


async def test_generic_oidc_receiver_uses_an_empty_token() -> None:
    h = Harness()
    claims_filter = "claims.repository == 'org/repo'"
    h.add(receiver(type="generic-oidc", secretRef=None, oidcProviders=OIDC, resourceFilter=claims_filter))
    await h.settle("Receiver", "test-receiver")
    obj = h.get_receiver()
    assert ready(obj).status == ConditionStatus.TRUE
    assert obj.status.webhook_path == webhook_path(b"", "test-receiver", NS)


async def test_suspended_receiver_is_left_alone_but_reports_success_if_ready() -> None:
    """§6.3 step 3 and Events: status untouched; the Succeeded event is still emitted when previously Ready."""
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())
    await h.settle("Receiver", "test-receiver")
    before = h.get_receiver().status
    h.clock.advance(400)  # past the event aggregation window
    h.add(respec(h.get_receiver(), suspend=True))
    h.add(secret("test-token", token="changed-while-suspended"))
    assert await h.receivers.reconcile((NS, "test-receiver")) == Result()
    after = h.get_receiver().status
    assert after.webhook_path == before.webhook_path == EXPECTED_PATH  # the token change was not picked up
    assert after.conditions == before.conditions
    # Flux's deferred patch still runs: Ready=True → observedGeneration follows the generation.
    assert after.observed_generation == 2
    assert h.events("test-receiver")[-1] == (
        NORMAL,
        "Succeeded",
        "Reconciliation finished, next run in 10m0s",
    )
    assert len(h.events("test-receiver")) == 2

    h2 = Harness()
    h2.add(receiver(suspend=True))
    await h2.settle("Receiver", "test-receiver")
    assert h2.get_receiver().status.conditions == []
    assert h2.events("test-receiver") == []


async def test_deletion_removes_the_finalizer() -> None:
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())
    await h.settle("Receiver", "test-receiver")
    obj = h.get_receiver()
    h.add(with_meta(obj, deletion_timestamp=datetime(2026, 1, 1, 1, tzinfo=UTC)))
    assert await h.receivers.reconcile((NS, "test-receiver")) == Result()
    assert h.cluster.finalizer_updates[-1][1] == []
    assert h.store.receiver(NS, "test-receiver") is None  # the (recording) API server completed the deletion
    assert h.store.receiver_by_path(EXPECTED_PATH) is None
    assert await h.receivers.reconcile((NS, "test-receiver")) == Result()  # gone: nothing to do
    h.enqueued.clear()
    h.add(secret("test-token", token="x"))
    assert h.enqueued == []  # the reverse index forgot the deleted Receiver


async def test_last_handled_reconcile_at_copies_the_annotation() -> None:
    h = Harness()
    token = "2026-01-01 10:00:00.123456789 +0000 UTC m=+42.000000001"
    h.add(
        secret("test-token", token="test-token"),
        receiver(meta={"annotations": {RECONCILE_REQUEST_ANNOTATION: token}}),
    )
    await h.settle("Receiver", "test-receiver")
    assert h.get_receiver().status.last_handled_reconcile_at == token
    assert h.cluster.patches_for("test-receiver")[-1]["lastHandledReconcileAt"] == token
    # A new request (annotation change) is a watch trigger even without a generation change.
    h.enqueued.clear()
    obj = h.get_receiver()
    h.add(with_meta(obj, annotations={RECONCILE_REQUEST_ANNOTATION: "later"}))
    assert h.enqueued == [("Receiver", (NS, "test-receiver"))]
    await h.receivers.reconcile((NS, "test-receiver"))
    assert h.get_receiver().status.last_handled_reconcile_at == "later"


async def test_status_only_changes_do_not_retrigger_the_receiver() -> None:
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())
    await h.settle("Receiver", "test-receiver")
    assert h.cluster.status_patches  # the patch came back through the store...
    assert ("Receiver", (NS, "test-receiver")) not in h.enqueued[2:]  # ...and enqueued nothing new


async def test_webhook_path_is_never_logged_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    h = Harness()
    h.add(secret("test-token", token="test-token"), receiver())
    await h.settle("Receiver", "test-receiver")
    digest = EXPECTED_PATH.removeprefix("/hook/")
    above_debug = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert any("b5870897" in m for m in above_debug)  # the short prefix identifies it
    assert not any(digest in m for m in above_debug)
    assert any(digest in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    assert not any(digest in e.message for e in h.cluster.events)


# --------------------------------------------------------------------------------------------------
# Provider
# --------------------------------------------------------------------------------------------------


async def test_provider_ready_and_idempotent() -> None:
    h = Harness()
    h.add(secret("webhook-token", token="abc-token"), provider(secretRef={"name": "webhook-token"}))
    assert await h.settle("Provider", "webhook") == Result()
    obj = h.get_provider()
    assert obj.metadata.finalizers == [FINALIZER]
    assert types_of(obj) == ["Ready"]
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.TRUE,
        "Succeeded",
        "Provider is ready",
    )
    assert obj.status.observed_generation == 1
    assert h.events("webhook") == [(NORMAL, "Succeeded", "Provider is ready")]
    writes = h.providers.status_writes
    h.clock.advance(3600)
    await h.providers.reconcile((NS, "webhook"))
    assert h.providers.status_writes == writes
    assert len(h.events("webhook")) == 1  # events only on Ready transitions


async def test_alert_provider_status_false_keeps_them_status_free() -> None:
    """Strict drop-in (--alert-provider-status=false): Flux's v1beta3 Alert/Provider have no status, so a
    Kustomization health check never waits on them; Receivers keep theirs."""
    store = ObjectStore()
    cluster = RecordingCluster(store)
    manager = ControllerManager(store, cluster, ManualClock(), KubeSettings(alert_provider_status=False))
    store.upsert(provider())  # no Secret needed: a plain generic Provider
    store.upsert(alert())
    store.upsert(secret("test-token", token="t0ken"))
    store.upsert(receiver())
    for kind, name in (("Provider", "webhook"), ("Alert", "on-call"), ("Receiver", "test-receiver")):
        for _ in range(3):  # the first pass adds the finalizer, the next ones write status
            await manager.reconcilers[kind].reconcile((NS, name))
    patched = {ref.kind for ref, _ in cluster.status_patches}
    assert patched == {"Receiver"}
    on = ControllerManager(store, cluster, ManualClock(), KubeSettings())
    for _ in range(3):
        await on.reconcilers["Provider"].reconcile((NS, "webhook"))
    assert "Provider" in {ref.kind for ref, _ in cluster.status_patches}


async def test_provider_missing_secret_then_ready_when_it_appears() -> None:
    h = Harness()
    h.add(provider(secretRef={"name": "webhook-token"}))
    result = await h.settle("Provider", "webhook")
    message = "failed to get secret 'default/webhook-token': not found"
    assert result == Result(requeue=True, error=message)
    obj = h.get_provider()
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.FALSE,
        "SecretNotFound",
        message,
    )
    assert cond.find(obj.status.conditions, cond.RECONCILING) is not None
    assert h.events("webhook") == [(WARNING, "SecretNotFound", message)]

    h.enqueued.clear()
    h.add(secret("webhook-token", token="abc-token"))
    assert ("Provider", (NS, "webhook")) in h.enqueued
    assert await h.providers.reconcile((NS, "webhook")) == Result()
    obj = h.get_provider()
    assert types_of(obj) == ["Ready"]
    assert ready(obj).status == ConditionStatus.TRUE
    assert h.events("webhook")[-1] == (NORMAL, "Succeeded", "Provider is ready")


@pytest.mark.parametrize(
    ("spec", "secrets", "message"),
    [
        (
            {"proxySecretRef": {"name": "proxy"}},
            [secret("proxy", address=f"ftp://{CANARY}.example", password=CANARY)],
            "failed to get proxy URL: address in secret 'default/proxy' must be an http, https or socks5 URL with a host",
        ),
        (
            {"certSecretRef": {"name": "tls"}},
            [
                secret(
                    "tls", **{"ca.crt": f"-----BEGIN CERTIFICATE-----\n{CANARY}\n-----END CERTIFICATE-----\n"}
                )
            ],
            "failed to get TLS config: failed to parse CA certificate",
        ),
        (
            {"certSecretRef": {"name": "tls"}},
            [secret("tls", **{"tls.crt": CANARY})],
            "failed to get TLS config: secret 'default/tls' must contain both tls.crt and tls.key",
        ),
        (
            {"secretRef": {"name": "creds"}},
            [secret("creds", headers=f"X-Token: [{CANARY}", token=CANARY)],
            "failed to read headers from secret: invalid YAML",
        ),
        (
            {"secretRef": {"name": "creds"}, "address": None},
            [secret("creds", address=f"not a url {CANARY}")],
            "invalid address: must be an absolute http or https URL",
        ),
    ],
)
async def test_bad_provider_material_is_reported_without_leaking_it(
    spec: dict[str, Any], secrets: list[Secret], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ready=False InvalidConfig with a clear message; the secret canary is nowhere (status, Events, logs)."""
    caplog.set_level(logging.DEBUG)
    h = Harness()
    h.add(*secrets, provider(**spec))
    assert await h.settle("Provider", "webhook") == Result()
    obj = h.get_provider()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "InvalidConfig")
    assert ready(obj).message == "Reconciliation failed terminally due to configuration error: " + message
    assert cond.is_true(obj.status.conditions, cond.STALLED)
    assert h.events("webhook") == [(WARNING, "InvalidConfig", ready(obj).message)]
    assert CANARY not in h.cluster.everything_written()
    assert CANARY not in obj.model_dump_json()
    assert not any(CANARY in r.getMessage() for r in caplog.records)


async def test_fixing_the_secret_revalidates_the_provider() -> None:
    h = Harness()
    h.add(secret("tls", **{"ca.crt": "garbage"}), provider(certSecretRef={"name": "tls"}))
    await h.settle("Provider", "webhook")
    assert ready(h.get_provider()).reason == "InvalidConfig"
    h.enqueued.clear()
    h.add(secret("tls", **{"ca.crt": mint_tls().ca_pem.decode()}))
    assert h.enqueued == [("Provider", (NS, "webhook"))]
    await h.providers.reconcile((NS, "webhook"))
    obj = h.get_provider()
    assert types_of(obj) == ["Ready"]  # Stalled removed
    assert ready(obj).status == ConditionStatus.TRUE


async def test_commit_status_expr_on_slack_is_a_validation_failure() -> None:
    h = Harness()
    h.add(provider(type="slack", commitStatusExpr="'ok'"))
    assert await h.settle("Provider", "webhook") == Result()
    obj = h.get_provider()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "ValidationFailed")
    assert (
        ready(obj).message
        == "Reconciliation failed terminally due to configuration error: " + COMMIT_STATUS_EXPR_MESSAGE
    )


async def test_invalid_commit_status_expr_is_invalid_cel() -> None:
    h = Harness()
    h.add(
        secret("gh", token="ghp_x"),
        provider(
            type="github",
            address="https://github.com/org/repo",
            secretRef={"name": "gh"},
            commitStatusExpr="event.reason +",
        ),
    )
    await h.settle("Provider", "webhook")
    obj = h.get_provider()
    assert ready(obj).reason == "InvalidCELExpression"
    assert "invalid commitStatusExpr expression: " in ready(obj).message


async def test_suspended_provider_status_is_untouched() -> None:
    h = Harness()
    h.add(provider(secretRef={"name": "missing"}))
    await h.settle("Provider", "webhook")
    before = h.get_provider().status
    h.add(respec(h.get_provider(), suspend=True))
    h.add(secret("missing", token="now-present"))
    assert await h.providers.reconcile((NS, "webhook")) == Result()
    after = h.get_provider().status
    assert [(c.type, c.status, c.reason, c.message, c.last_transition_time) for c in after.conditions] == [
        (c.type, c.status, c.reason, c.message, c.last_transition_time) for c in before.conditions
    ]
    assert after.observed_generation == before.observed_generation == -1


async def test_provider_deletion_removes_the_finalizer() -> None:
    h = Harness()
    h.add(provider())
    await h.settle("Provider", "webhook")
    h.add(with_meta(h.get_provider(), deletion_timestamp=datetime(2026, 1, 2, tzinfo=UTC)))
    await h.providers.reconcile((NS, "webhook"))
    assert h.store.provider(NS, "webhook") is None


async def test_finalizer_conflict_is_an_error_for_the_queue_to_retry() -> None:
    h = Harness()
    h.add(provider())
    h.cluster.fail_next.append(KubeError("conflict", status=409))
    with pytest.raises(KubeError):
        await h.providers.reconcile((NS, "webhook"))
    assert await h.settle("Provider", "webhook") == Result()
    assert ready(h.get_provider()).status == ConditionStatus.TRUE


# --------------------------------------------------------------------------------------------------
# Alert
# --------------------------------------------------------------------------------------------------


async def test_alert_with_bad_regex_is_terminal() -> None:
    h = Harness()
    h.add(provider(), alert(inclusionList=["^ok$", "(unclosed"]))
    await h.settle("Provider", "webhook")
    assert await h.alerts.reconcile((NS, "on-call")) == Result()
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "ValidationFailed")
    assert ready(obj).message == (
        "Reconciliation failed terminally due to configuration error: "
        "failed to compile inclusion regex: (unclosed (missing ))"  # Flux's words, then RE2's reason
    )
    assert cond.is_true(obj.status.conditions, cond.STALLED)
    assert obj.status.observed_generation == 1
    h2 = Harness()
    h2.add(provider(), alert(exclusionList=["a{2,1}"]))
    await h2.alerts.reconcile((NS, "on-call"))
    assert ready(h2.get_alert()).message.endswith(
        "failed to compile exclusion regex: a{2,1} (invalid repetition size)"
    )


async def test_alert_reports_every_error_with_the_first_ones_reason() -> None:
    """Issue 25 item 4: two bad regexes, a filter that is not a bool and one naming a missing field, a bad
    template: one Ready=False message lists each (Flux's words first), not only the first."""
    h = Harness()
    h.add(
        provider(),
        alert(
            inclusionList=["(unclosed"],
            exclusionList=["a{2,1}"],
            filter="event.severity",
            template={"title": "{{ event.reason "},
        ),
    )
    await h.settle("Provider", "webhook")
    assert await h.alerts.reconcile((NS, "on-call")) == Result()
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "ValidationFailed")
    parts = (
        ready(obj)
        .message.removeprefix("Reconciliation failed terminally due to configuration error: ")
        .split("; ")
    )
    assert parts[0] == "failed to compile inclusion regex: (unclosed (missing ))"
    assert parts[1] == "failed to compile exclusion regex: a{2,1} (invalid repetition size)"
    assert "expected bool, got string" in parts[2]
    assert parts[3].startswith("spec.template.title: ")
    assert len(parts) == 4


async def test_alert_filter_naming_a_missing_event_field_is_invalid_cel() -> None:
    h = Harness()
    h.add(provider(), alert(filter="event.reasn == 'Progressing'"))
    await h.settle("Provider", "webhook")
    await h.alerts.reconcile((NS, "on-call"))
    obj = h.get_alert()
    assert ready(obj).reason == "InvalidCELExpression"
    assert "undefined field 'reasn' (did you mean 'reason'?)" in ready(obj).message


async def test_alert_with_a_bad_time_interval_is_terminal() -> None:
    """Issue 26 item 3: Alertmanager's time_interval syntax, checked by the controller (local mode and API
    servers without the schema): Ready=False naming each bad field; fixing it makes the Alert Ready."""
    h = Harness()
    bad: dict[str, Any] = {
        "muteTimes": [
            {"weekdays": ["monday:friday"], "times": [{"startTime": "22:00", "endTime": "24:00"}]},
            {"weekdays": ["saturday", "fryday"], "location": "Europe/Berlin"},
        ],
        "activeTimes": [{"daysOfMonth": ["-15:5"], "location": "Mars/Olympus_Mons"}],
    }
    h.add(provider(), alert(**bad))
    await h.settle("Provider", "webhook")
    assert await h.alerts.reconcile((NS, "on-call")) == Result()
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "ValidationFailed")
    assert cond.is_true(obj.status.conditions, cond.STALLED)
    parts = (
        ready(obj)
        .message.removeprefix("Reconciliation failed terminally due to configuration error: ")
        .split("; ")
    )
    assert parts == [
        "spec.muteTimes[1].weekdays[1]: fryday is not a valid weekday",
        "spec.activeTimes[0].daysOfMonth[0]: end day must be negative if start day is negative",
        "spec.activeTimes[0].location: unknown time zone 'Mars/Olympus_Mons' "
        "(an IANA time zone, e.g. 'Europe/Berlin', 'America/New_York')",
    ]
    bad["muteTimes"][1]["weekdays"] = ["saturday", "FRIDAY"]  # names in any case, as Alertmanager's
    bad["activeTimes"] = [{"daysOfMonth": ["-15:-5"], "location": "America/New_York"}]
    h.add(alert(generation=2, **bad))
    await h.settle("Alert", "on-call")
    obj = h.get_alert()
    assert ready(obj).status == ConditionStatus.TRUE
    assert not cond.is_true(obj.status.conditions, cond.STALLED)


async def test_alert_status_message_is_bounded() -> None:
    h = Harness()
    h.add(provider(), alert(inclusionList=[f"({i}" for i in range(40)]))
    await h.settle("Provider", "webhook")
    await h.alerts.reconcile((NS, "on-call"))
    message = ready(h.get_alert()).message
    assert message.count("failed to compile inclusion regex") == 10 and message.endswith("; and 30 more")


async def test_provider_reports_every_error() -> None:
    """Issue 25 item 4: a body template where the type takes none, and a commit-status expression that does
    not compile: both in the one Ready=False message, the first one's reason."""
    h = Harness()
    h.add(
        secret("gh", token="ghp_x"),
        provider(
            type="github",
            address="https://github.com/org/repo",
            secretRef={"name": "gh"},
            bodyTemplate="{{ x",
            commitStatusExpr="event.reason +",
        ),
    )
    await h.settle("Provider", "webhook")
    obj = h.get_provider()
    assert ready(obj).reason == "ValidationFailed"
    message = ready(obj).message
    assert (
        "spec.bodyTemplate is only supported for the 'generic', 'generic-hmac' and 'cloudevents' types"
        in message
    )
    assert "spec.bodyTemplate: " in message and "invalid commitStatusExpr expression: " in message


async def test_receiver_reports_every_error() -> None:
    h = Harness()
    h.add(receiver(resourceFilter="res.metadata.name +", secretRef=None))
    await h.settle("Receiver", "test-receiver")
    obj = h.get_receiver()
    assert ready(obj).reason == "InvalidCELExpression"
    assert "invalid resourceFilter expression: " in ready(obj).message
    assert ready(obj).message.endswith("; secretRef is required when type is not generic-oidc")


async def test_alert_follows_its_provider() -> None:
    """Missing Provider → not reconciled yet → Provider's failure → Ready; each step triggered by a watch."""
    h = Harness()
    h.add(alert())
    await h.alerts.reconcile((NS, "on-call"))
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.FALSE,
        "ProviderNotFound",
        "Provider 'webhook' not found in namespace 'default'",
    )
    assert obj.status.observed_generation == -1
    assert h.events("on-call") == [
        (WARNING, "ProviderNotFound", "Provider 'webhook' not found in namespace 'default'")
    ]

    h.enqueued.clear()
    h.add(provider(secretRef={"name": "webhook-token"}))
    assert ("Alert", (NS, "on-call")) in h.enqueued
    await h.alerts.reconcile((NS, "on-call"))
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.UNKNOWN,
        "ProviderNotReady",
        "Provider 'webhook' is not ready yet: waiting for it to be reconciled",
    )
    assert len(h.events("on-call")) == 1  # no Warning for a transient "not known yet"

    h.enqueued.clear()
    await h.settle("Provider", "webhook")  # SecretNotFound: its status change re-enqueues the Alert
    assert ("Alert", (NS, "on-call")) in h.enqueued
    await h.alerts.reconcile((NS, "on-call"))
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.FALSE,
        "ProviderNotReady",
        "Provider 'webhook' is not ready: failed to get secret 'default/webhook-token': not found",
    )

    h.enqueued.clear()
    h.add(secret("webhook-token", token="abc-token"))
    await h.providers.reconcile((NS, "webhook"))
    assert ("Alert", (NS, "on-call")) in h.enqueued
    await h.alerts.reconcile((NS, "on-call"))
    obj = h.get_alert()
    assert types_of(obj) == ["Ready"]
    assert (ready(obj).status, ready(obj).reason, ready(obj).message) == (
        ConditionStatus.TRUE,
        "Succeeded",
        "Alert is ready",
    )
    assert obj.status.observed_generation == 1
    assert h.events("on-call")[-1] == (NORMAL, "Succeeded", "Alert is ready")
    writes = h.alerts.status_writes
    await h.alerts.reconcile((NS, "on-call"))
    assert h.alerts.status_writes == writes


async def test_alert_with_a_suspended_provider_is_ready() -> None:
    h = Harness()
    h.add(provider(suspend=True), alert())
    await h.settle("Provider", "webhook")
    await h.alerts.reconcile((NS, "on-call"))
    assert ready(h.get_alert()).status == ConditionStatus.TRUE


async def test_alert_held_condition_follows_what_is_held_and_survives_a_store_outage() -> None:
    """Issue 26: ``Held`` (Silenced|Muted) says what a Silence or the mute window holds; refreshed every minute
    while shown; a store error keeps what it said (no requeue storm for Alerts that show nothing)."""
    from notification_controller.controllers.alert import HELD, HELD_REFRESH
    from notification_controller.errors import StoreError

    answer: list[tuple[str, str] | StoreError | None] = [None]

    async def held(obj: Alert) -> tuple[str, str] | None:
        value = answer[0]
        if isinstance(value, StoreError):
            raise value
        return value

    h = Harness()
    h.alerts.held = held
    h.add(provider(), alert())
    await h.settle("Provider", "webhook")
    assert (await h.alerts.reconcile((NS, "on-call"))).requeue_after is None
    assert cond.find(h.get_alert().status.conditions, HELD) is None
    answer[0] = StoreError("down")
    assert (await h.alerts.reconcile((NS, "on-call"))).requeue_after is None  # nothing shown: no requeue
    answer[0] = ("Silenced", "2 notifications held by Silence flux-system/maint until 2026-01-01T02:00:00Z")
    assert (await h.alerts.reconcile((NS, "on-call"))).requeue_after == HELD_REFRESH
    shown = cond.find(h.get_alert().status.conditions, HELD)
    assert shown is not None and (shown.status, shown.reason) == (ConditionStatus.TRUE, "Silenced")
    assert ready(h.get_alert()).status == ConditionStatus.TRUE
    answer[0] = StoreError("down")
    assert (await h.alerts.reconcile((NS, "on-call"))).requeue_after == HELD_REFRESH  # kept, looked at again
    assert cond.find(h.get_alert().status.conditions, HELD) is not None
    answer[0] = None
    await h.alerts.reconcile((NS, "on-call"))
    assert cond.find(h.get_alert().status.conditions, HELD) is None


async def test_cross_namespace_sources_are_denied_only_with_the_flag() -> None:
    sources = [
        {"kind": "Kustomization", "name": "*"},
        {"kind": "GitRepository", "name": "x", "namespace": "other"},
    ]
    h = Harness(no_cross_namespace_refs=True)
    h.add(provider(), alert(eventSources=sources))
    await h.settle("Provider", "webhook")
    await h.alerts.reconcile((NS, "on-call"))
    obj = h.get_alert()
    assert (ready(obj).status, ready(obj).reason) == (ConditionStatus.FALSE, "AccessDenied")
    assert "eventSources[1] GitRepository/other/x" in ready(obj).message
    h2 = Harness()
    h2.add(provider(), alert(eventSources=sources))
    await h2.settle("Provider", "webhook")
    await h2.alerts.reconcile((NS, "on-call"))
    assert ready(h2.get_alert()).status == ConditionStatus.TRUE


async def test_alert_finalizer_migration() -> None:
    """§6.1: the legacy finalizer is removed with a Normal Migration event, except while suspended."""
    h = Harness()
    h.add(provider(), alert(meta={"finalizers": [FINALIZER, "other.io/keep"]}))
    await h.settle("Provider", "webhook")
    await h.alerts.reconcile((NS, "on-call"))
    assert h.get_alert().metadata.finalizers == ["other.io/keep"]
    assert (NORMAL, "Migration", "removed finalizer from Alert to migrate to static Alert") in h.events(
        "on-call"
    )

    h2 = Harness()
    h2.add(alert(suspend=True, meta={"finalizers": [FINALIZER]}))
    assert await h2.alerts.reconcile((NS, "on-call")) == Result()
    assert h2.get_alert().metadata.finalizers == [FINALIZER]
    assert h2.cluster.events == []

    h3 = Harness()
    h3.add(alert(suspend=True, meta={"finalizers": [FINALIZER], "deletionTimestamp": "2026-01-01T00:00:00Z"}))
    await h3.alerts.reconcile((NS, "on-call"))
    assert h3.store.alert(NS, "on-call") is None


async def test_suspended_alert_status_is_untouched() -> None:
    h = Harness()
    h.add(alert(suspend=True))
    await h.alerts.reconcile((NS, "on-call"))
    assert h.get_alert().status.conditions == []
    assert h.cluster.status_patches == []


# --------------------------------------------------------------------------------------------------
# Event recorder
# --------------------------------------------------------------------------------------------------


async def test_event_recorder_sends_repeats_within_the_spam_filter_budget() -> None:
    """client-go's correlator: repeats are recorded (count bumps), and a per-object token bucket (burst 25,
    one token per 5 minutes) caps a flapping object, repeats included."""
    store = ObjectStore()
    cluster = RecordingCluster(store)
    clock = ManualClock()
    recorder = EventRecorder(cluster, clock)
    ref = ObjectRef("v1", "Receiver", NS, "r", "uid")
    for _ in range(11):
        assert await recorder.event(ref, WARNING, "Failed", "boom")
    assert recorder.repeats(ref, WARNING, "Failed", "boom") == 10
    assert await recorder.event(ref, WARNING, "Failed", "other message")
    for _ in range(13):
        assert await recorder.event(ref, WARNING, "Failed", "boom")
    assert len(cluster.events) == 25
    assert not await recorder.event(ref, WARNING, "Failed", "boom")  # the 26th: the bucket is empty
    assert recorder.dropped == 1
    clock.advance(300)  # one token back
    assert await recorder.event(ref, WARNING, "Failed", "boom")
    assert not await recorder.event(ref, WARNING, "Failed", "boom")
    other = ObjectRef("v1", "Receiver", NS, "other", "uid2")
    assert await recorder.event(other, WARNING, "Failed", "boom")  # buckets are per object


async def test_event_recorder_token_bucket_per_object() -> None:
    store = ObjectStore()
    cluster = RecordingCluster(store)
    clock = ManualClock()
    recorder = EventRecorder(cluster, clock)
    noisy = ObjectRef("v1", "Provider", NS, "noisy", "u1")
    quiet = ObjectRef("v1", "Provider", NS, "quiet", "u2")
    sent = [await recorder.event(noisy, WARNING, "Failed", f"message {i}") for i in range(40)]
    assert sent.count(True) == 25
    assert recorder.dropped == 15
    assert await recorder.event(quiet, WARNING, "Failed", "message 0")  # other objects unaffected
    clock.advance(300)
    assert await recorder.event(noisy, WARNING, "Failed", "message 100")
    assert not await recorder.event(noisy, WARNING, "Failed", "message 101")


async def test_event_recorder_masks_and_survives_api_errors() -> None:
    store = ObjectStore()
    cluster = RecordingCluster(store)
    recorder = EventRecorder(cluster, ManualClock(), Redactor([CANARY]))
    ref = ObjectRef("v1", "Provider", NS, "p", "u")
    assert await recorder.event(ref, WARNING, "Failed", f"value {CANARY} leaked", {"k": CANARY})
    assert cluster.events[0].message == "value ***** leaked"
    assert cluster.events[0].annotations == {"k": "*****"}
    cluster.fail_next.append(KubeError("forbidden", status=403))
    assert not await recorder.event(ref, WARNING, "Failed", "another")
    assert recorder.failed == 1


# --------------------------------------------------------------------------------------------------
# Flux documentation examples
# --------------------------------------------------------------------------------------------------


def _examples_dir() -> Path:
    local = Path(__file__).resolve().parents[1] / "data" / "flux-doc-examples"
    return local if local.is_dir() else Path("/work/shared/reference/flux-doc-examples")


def _load_examples() -> list[Object]:
    objects: list[Object] = []
    for path in sorted(_examples_dir().glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if not isinstance(doc, dict):
                continue
            obj = parse_object(doc, source=path.name, index=index)
            if not isinstance(obj, Secret):  # what the API server adds
                obj = with_meta(obj, generation=1, uid=f"uid-{obj.metadata.namespace}-{obj.metadata.name}")
            objects.append(obj)
    return objects


async def test_every_flux_doc_example_reaches_a_terminal_state() -> None:
    """Each Alert, Provider and Receiver of Flux's docs, with the docs' Secrets (and an Alert's Provider),
    reconciles without crashing to Ready=True or Ready=False with a reason and a message."""
    objects = _load_examples()
    assert {o.KIND for o in objects} == {"Alert", "Provider", "Receiver", "Secret"}
    secrets = [o for o in objects if isinstance(o, Secret)]
    outcomes: dict[str, int] = {}
    checked = 0
    for position, obj in enumerate(objects):
        if isinstance(obj, Secret):
            continue
        h = Harness()
        h.add(*secrets)
        key = (obj.metadata.namespace, obj.metadata.name)
        if isinstance(obj, Alert):  # the docs define the Provider just before the Alert using it
            ref = (obj.metadata.namespace, obj.spec.provider_ref.name)
            used = [
                p
                for p in objects[:position]
                if isinstance(p, Provider) and (p.metadata.namespace, p.metadata.name) == ref
            ]
            if used:
                h.add(used[-1])
                await h.settle("Provider", ref[1], ref[0])
        h.add(obj)
        await h.settle(obj.KIND, key[1], key[0])
        current = h.store.get(obj.KIND, *key)
        assert current is not None and not isinstance(current, Secret)
        checked += 1
        if getattr(obj.spec, "suspend", False):  # a Silence has none
            continue
        cnd = cond.find(current.status.conditions, cond.READY)
        assert cnd is not None, f"{obj.KIND} {key} has no Ready condition"
        assert cnd.status in (ConditionStatus.TRUE, ConditionStatus.FALSE)
        assert cnd.reason and cnd.message
        label = f"{obj.KIND}/{cnd.status}/{cnd.reason}"
        outcomes[label] = outcomes.get(label, 0) + 1
    assert checked == len(objects) - len(secrets)
    # The examples that ship their Secret become Ready; the others say precisely why not.
    assert outcomes["Receiver/True/Succeeded"] >= 10
    assert outcomes["Provider/True/Succeeded"] >= 10
    assert outcomes["Alert/True/Succeeded"] >= 1
    assert set(outcomes) <= {
        f"{kind}/{status}/{reason}"
        for kind in ("Alert", "Provider", "Receiver")
        for status, reasons in (
            ("True", ["Succeeded"]),
            (
                "False",
                ["SecretNotFound", "InvalidConfig", "TokenNotFound", "ProviderNotReady", "ProviderNotFound"],
            ),
        )
        for reason in reasons
    }, outcomes


# --------------------------------------------------------------------------------------------------
# Manager (looptime: the resync and backoff timers run on the fake loop clock)
# --------------------------------------------------------------------------------------------------


async def until(predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.05)


def _all_ready(store: ObjectStore) -> bool:
    conditions = [o.status.conditions for o in store.providers()]
    conditions += [o.status.conditions for o in store.alerts()]
    conditions += [o.status.conditions for o in store.receivers()]
    return bool(conditions) and all(cond.is_true(c, cond.READY) for c in conditions)


def _provider_ready(store: ObjectStore, name: str) -> bool:
    obj = store.provider(NS, name)
    return obj is not None and cond.is_true(obj.status.conditions, cond.READY)


def _sample(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float | None:
    return registry.get_sample_value(name, labels)


def test_reconcile_duration_buckets_match_flux() -> None:
    assert len(RECONCILE_BUCKETS) == 10
    assert RECONCILE_BUCKETS[0] == 0.01
    assert RECONCILE_BUCKETS[-1] == pytest.approx(1800)
    assert RECONCILE_BUCKETS[1] == pytest.approx(0.01 * (180000 ** (1 / 9)))
    with pytest.raises(ValueError, match="count"):
        exponential_buckets_range(1, 0.5, 3)


@pytest.mark.looptime
async def test_manager_converges_resyncs_without_writing_and_stops() -> None:
    """Initial enqueue after sync, watches, resync (D13: writes nothing), metrics, clean stop."""
    store = ObjectStore()
    cluster = RecordingCluster(store)
    registry = CollectorRegistry()
    settings = KubeSettings(concurrent=2, resync_interval=60)
    manager = ControllerManager(store, cluster, ManualClock(), settings, registry=registry)
    store.upsert(provider(secretRef={"name": "webhook-token"}))
    store.upsert(alert())
    store.upsert(receiver())
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(1)
    assert sum(manager.reconciles.values()) == 0  # nothing before the store is synced
    store.mark_synced()
    await until(lambda: cluster.patches_for("test-receiver") != [])
    assert ready(store.receiver(NS, "test-receiver")).reason == "TokenNotFound"  # type: ignore[arg-type]
    store.upsert(secret("webhook-token", token="abc-token"))
    store.upsert(secret("test-token", token="test-token"))
    await until(lambda: _all_ready(store))
    receiver_obj = store.receiver(NS, "test-receiver")
    assert receiver_obj is not None and receiver_obj.status.webhook_path == EXPECTED_PATH
    await asyncio.sleep(5)

    patches, reconciles = len(cluster.status_patches), dict(manager.reconciles)
    await asyncio.sleep(61)  # one resync
    assert all(manager.reconciles[k] > reconciles[k] for k in ("Provider", "Alert", "Receiver"))  # no Silence
    assert len(cluster.status_patches) == patches

    labels = {"kind": "Receiver", "name": "test-receiver", "namespace": NS}
    assert (_sample(registry, "gotk_reconcile_duration_seconds_count", labels) or 0) >= 3
    assert _sample(registry, "notification_reconcile_errors_total", labels) == 1.0  # TokenNotFound
    provider_labels = {"kind": "Provider", "name": "webhook", "namespace": NS}
    assert _sample(registry, "notification_reconcile_errors_total", provider_labels) == 1.0

    store.delete("Receiver", NS, "test-receiver")
    await until(lambda: _sample(registry, "gotk_reconcile_duration_seconds_count", labels) is None)

    assert await manager.stop(deadline=5)
    await asyncio.wait_for(task, 5)


class _BrokenFor(RecordingCluster):
    """Every status patch of one object fails with a 500 (an object the API server keeps refusing)."""

    broken: str = "broken"

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        if ref.name == self.broken:
            raise KubeError("Internal error", status=500)
        await super().patch_status(ref, status)


@pytest.mark.looptime
async def test_manager_keeps_reconciling_others_when_one_object_fails() -> None:
    """D9/D12: failing object retried with growing backoff; the others converge; the process lives."""
    store = ObjectStore()
    cluster = _BrokenFor(store)
    registry = CollectorRegistry()
    manager = ControllerManager(store, cluster, ManualClock(), KubeSettings(concurrent=1), registry=registry)
    store.upsert(provider("broken"))
    for i in range(5):
        store.upsert(provider(f"ok-{i}"))
    store.mark_synced()
    task = asyncio.create_task(manager.run())
    await until(lambda: all(_provider_ready(store, f"ok-{i}") for i in range(5)))
    await asyncio.sleep(60)
    labels = {"kind": "Provider", "name": "broken", "namespace": NS}
    errors = _sample(registry, "notification_reconcile_errors_total", labels) or 0
    assert 5 <= errors <= 8  # 0.75+1.5+3+6+12+24 ≈ 47s: backoff, not a hot loop
    # +1: adding the finalizer requeues with the rate limiter too (controller-runtime's Requeue: true)
    assert manager.queues["Provider"].failures((NS, "broken")) == errors + 1
    assert not task.done()
    assert await manager.stop(deadline=5)
    await asyncio.wait_for(task, 5)


@pytest.mark.looptime
async def test_manager_stop_before_sync_returns() -> None:
    store = ObjectStore()
    manager = ControllerManager(store, RecordingCluster(store), ManualClock())
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(1)
    assert await manager.stop(deadline=1)
    await asyncio.wait_for(task, 2)
    assert task.done() and task.exception() is None


async def test_status_patch_of_a_vanished_object_is_ignored() -> None:
    """The object was deleted between the read and the patch (404): nothing to do, no error."""
    h = Harness()
    h.add(with_meta(provider(), finalizers=[FINALIZER]))
    h.cluster.fail_next.append(KubeError('providers "webhook" not found', status=404))
    assert await h.providers.reconcile((NS, "webhook")) == Result()
    assert h.providers.status_writes == 0
