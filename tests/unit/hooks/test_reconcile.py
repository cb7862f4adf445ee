"""The ``pre-reconcile`` and ``finalize`` phases of Hooks API v1 (docs/hooks.md, issue 8) in the reconcilers.

The three real reconcilers run against a real ``ObjectStore`` and the ``RecordingCluster`` (the boundary
port: it applies status and finalizers back into the store and completes a deletion once the last
finalizer is gone, like the API server); the hooks are real aiohttp servers on 127.0.0.1. Asserted: a
non-True condition makes the object Ready=False with the hook's reason and message, the error matrix
(permanent/non-permanent × continue/stop × timeout/connection refused) on status, Events and requeue,
``observedGeneration`` always the controller's, the children of each kind (never a Secret value), and a
``finalize`` hook blocking deletion until it answers 2xx. Flux's reconcile semantics: reference §6.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api import FINALIZER, RECONCILE_REQUEST_ANNOTATION
from notification_controller.api.hooks import HOOKS_FINALIZER, HooksConfig
from notification_controller.api.objects import parse_object
from notification_controller.controllers.alert import AlertReconciler
from notification_controller.controllers.base import Result
from notification_controller.controllers.events import EventRecorder
from notification_controller.controllers.manager import ControllerManager
from notification_controller.controllers.provider import ProviderReconciler
from notification_controller.controllers.receiver import ReceiverReconciler
from notification_controller.core import conditions as cond
from notification_controller.core.redact import Redactor
from notification_controller.hooks import Hooks
from notification_controller.hooks.client import error_answer
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP
from tests.support.capture import CaptureServer, Reply
from tests.support.recording_cluster import RecordingCluster

NS = "default"
CANARY = "CANARY-hook-4b7d-s3cr3t"
HOOK_KEY = "hook-signing-key-9a1f"
EXPECTED_PATH = "/hook/b5870897382949f6a6c2012394737b779ec2e77e0f01692279430f864810dc1a"


# --------------------------------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------------------------------


class Rig:
    """Store + recording cluster + the three reconcilers with hooks, wired like ``ControllerManager``."""

    def __init__(self, http: OutboundHTTP, config: HooksConfig | None = None) -> None:
        self.store = ObjectStore()
        self.cluster = RecordingCluster(self.store)
        self.clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
        self.registry = CollectorRegistry()
        self.redactor = Redactor([CANARY])
        self.recorder = EventRecorder(self.cluster, self.clock, self.redactor)
        self.hooks = Hooks(
            self.store,
            self.cluster,
            http,
            registry=self.registry,
            config=config,
            runtime_namespace=NS,
            clock=self.clock,
        )
        kw: dict[str, Any] = {"redactor": self.redactor, "hooks": self.hooks.reconcile}
        self.receivers = ReceiverReconciler(self.store, self.cluster, self.recorder, self.clock, **kw)
        self.providers = ProviderReconciler(self.store, self.cluster, self.recorder, self.clock, **kw)
        self.alerts = AlertReconciler(self.store, self.cluster, self.recorder, self.clock, **kw)

    def add(self, *docs: dict[str, Any]) -> None:
        for doc in docs:
            self.store.upsert(parse_object(doc))

    async def reconcile(self, kind: str, name: str) -> Result:
        if kind == "Receiver":
            return await self.receivers.reconcile((NS, name))
        if kind == "Provider":
            return await self.providers.reconcile((NS, name))
        return await self.alerts.reconcile((NS, name))

    async def settle(self, kind: str, name: str) -> Result:
        """Reconcile until done or until something other than the finalizer requeue is asked for."""
        for _ in range(3):
            result = await self.reconcile(kind, name)
            obj = self.get(kind, name)
            if obj is None or result != Result(requeue=True) or obj.status.conditions:
                return result
        return result

    def get(self, kind: str, name: str) -> Any:
        return self.store.get(kind, NS, name)

    def condition(self, kind: str, name: str, type_: str) -> tuple[str, str, str] | None:
        obj = self.get(kind, name)
        found = cond.find(obj.status.conditions, type_)
        return None if found is None else (found.status.value, found.reason, found.message)

    def calls(self, phase: str, hook: str, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "notification_hook_calls_total", {"phase": phase, "hook": hook, "outcome": outcome}
        )
        return value or 0.0

    def warnings(self, name: str) -> list[tuple[str, str]]:
        return [(e.reason, e.message) for e in self.cluster.events_for(name) if e.type == "Warning"]


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP()
    await client.start()
    yield client
    await client.close()


def hook(name: str, url: str, *capabilities: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "address": {"uri": url + "/hook"},
        "capabilities": list(capabilities) or ["pre-reconcile"],
        **extra,
    }


def secret(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "stringData": data,
    }


def receiver(hooks: list[dict[str, Any]] | None = None, name: str = "test-receiver") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "github",
        "resources": [
            {"kind": "GitRepository", "name": "podinfo"},
            {
                "kind": "Kustomization",
                "name": "*",
                "namespace": "apps",
                "matchLabels": {"team": "a"},
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
        ],
        "secretRef": {"name": "test-token"},
    }
    if hooks is not None:
        spec["hooks"] = hooks
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1",
        "kind": "Receiver",
        "metadata": {"name": name, "namespace": NS, "generation": 1, "uid": "uid-r"},
        "spec": spec,
    }


def provider(hooks: list[dict[str, Any]] | None = None, generation: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "generic",
        "address": "https://example.com/hook",
        "secretRef": {"name": "creds"},
    }
    if hooks is not None:
        spec["hooks"] = hooks
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": "webhook", "namespace": NS, "generation": generation, "uid": "uid-p"},
        "spec": spec,
    }


def alert(hooks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "providerRef": {"name": "webhook"},
        "eventSources": [{"kind": "Kustomization", "name": "*"}],
    }
    if hooks is not None:
        spec["hooks"] = hooks
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Alert",
        "metadata": {"name": "on-call", "namespace": NS, "generation": 1, "uid": "uid-a"},
        "spec": spec,
    }


def conditions_answer(*conditions: dict[str, Any]) -> Reply:
    return Reply(body={"object": {"status": {"conditions": list(conditions)}}})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def deleting(obj: Any) -> Any:
    meta = obj.metadata.model_copy(update={"deletion_timestamp": datetime(2026, 1, 2, tzinfo=UTC)})
    return obj.model_copy(update={"metadata": meta})


# --------------------------------------------------------------------------------------------------
# pre-reconcile
# --------------------------------------------------------------------------------------------------


async def test_receiver_hook_non_true_condition_makes_it_not_ready_then_true_makes_it_ready(
    http: OutboundHTTP,
) -> None:
    """Issue 8: a returned condition that is not True → Ready=False with the hook's reason and message;
    the hook's conditions are stored; once they are True the Receiver is Ready again (reference §6.3 text)."""
    answers = [
        conditions_answer(
            {
                "type": "GitHubWebhook",
                "status": "False",
                "reason": "Registering",
                "message": "creating the webhook",
            }
        ),
        conditions_answer(
            {"type": "GitHubWebhook", "status": "True", "reason": "Registered", "message": "id 42"}
        ),
    ]
    async with CaptureServer() as server:
        server.on("POST", "/hook", lambda req: answers[min(len(server.requests), 2) - 1])
        r = Rig(http)
        r.add(secret("test-token", token="test-token"), receiver([hook("github", server.url)]))
        result = await r.settle("Receiver", "test-receiver")
        assert result == Result(requeue=True)  # asked again with backoff until the hook reports True
        assert r.condition("Receiver", "test-receiver", "Ready") == (
            "False",
            "Registering",
            "creating the webhook",
        )
        assert r.condition("Receiver", "test-receiver", "GitHubWebhook") == (
            "False",
            "Registering",
            "creating the webhook",
        )
        assert r.get("Receiver", "test-receiver").status.webhook_path == EXPECTED_PATH
        assert ("Registering", "creating the webhook") in r.warnings("test-receiver")
        assert r.calls("pre-reconcile", "github", "changed") == 1

        [request] = server.requests
        body = request.json()
        assert (body["version"], body["phase"]) == ("v1", "pre-reconcile")
        assert body["object"]["kind"] == "Receiver"
        assert body["object"]["metadata"]["name"] == "test-receiver"
        assert "status" in body["object"]
        assert body["children"] == {
            "resources": [
                {
                    "apiVersion": "source.toolkit.fluxcd.io/v1",
                    "kind": "GitRepository",
                    "name": "podinfo",
                    "namespace": NS,
                },
                {
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                    "kind": "Kustomization",
                    "name": "*",
                    "namespace": "apps",
                    "matchLabels": {"team": "a"},
                },
            ],
            "webhookPath": EXPECTED_PATH,
        }

        assert await r.reconcile("Receiver", "test-receiver") == Result(requeue_after=600.0)
        assert r.condition("Receiver", "test-receiver", "Ready") == (
            "True",
            "Succeeded",
            f"Receiver initialized for path: {EXPECTED_PATH}",
        )
        assert r.condition("Receiver", "test-receiver", "GitHubWebhook") == ("True", "Registered", "id 42")
        # The second hook call saw the status the first one produced.
        previous = server.requests[1].json()["object"]["status"]["conditions"]
        assert {"type": "GitHubWebhook", "status": "False"}.items() <= next(
            c for c in previous if c["type"] == "GitHubWebhook"
        ).items()


async def test_converged_object_with_a_stable_hook_writes_nothing_on_resync(http: OutboundHTTP) -> None:
    """Sync-handler semantics (seed 004): stable answers → no status write (checklist D13)."""
    async with CaptureServer() as server:
        server.on("POST", "/hook", conditions_answer({"type": "Audited", "status": "True", "reason": "Fine"}))
        r = Rig(http)
        r.add(secret("creds", token=CANARY), provider([hook("audit", server.url)]))
        await r.settle("Provider", "webhook")
        assert r.condition("Provider", "webhook", "Audited") == (
            "True",
            "Fine",
            "hook 'audit' reported Audited=True",
        )
        assert r.condition("Provider", "webhook", "Ready") == ("True", "Succeeded", "Provider is ready")
        writes = len(r.cluster.status_patches)
        assert await r.reconcile("Provider", "webhook") == Result()
        assert len(r.cluster.status_patches) == writes
        assert r.calls("pre-reconcile", "audit", "ok") >= 1


async def test_null_and_empty_answers_change_nothing_and_observed_generation_is_the_controllers(
    http: OutboundHTTP,
) -> None:
    answers = [
        Reply(body=b""),
        Reply(body={"object": None}),
        Reply(body={"object": {"status": None}}),
        Reply(
            body={
                "object": {
                    "status": {
                        "observedGeneration": 99,
                        "conditions": [
                            {
                                "type": "Extra",
                                "status": "True",
                                "reason": "Ok",
                                "observedGeneration": 99,
                                "lastTransitionTime": "1999-01-01T00:00:00Z",
                            },
                            {"type": "Reconciling", "status": "False", "reason": "Ignored"},
                        ],
                    }
                }
            }
        ),
    ]
    async with CaptureServer() as a, CaptureServer() as b, CaptureServer() as c, CaptureServer() as d:
        for server, answer in zip((a, b, c, d), answers, strict=True):
            server.on("POST", "/hook", answer)
        r = Rig(http)
        r.add(
            secret("creds", token=CANARY),
            provider([hook(n, s.url) for n, s in zip("abcd", (a, b, c, d), strict=True)], generation=7),
        )
        await r.settle("Provider", "webhook")
        status = r.get("Provider", "webhook").status
        assert status.observed_generation == 7
        assert [c.type for c in status.conditions] == ["Ready", "Extra"]
        extra = cond.find(status.conditions, "Extra")
        assert extra is not None
        assert extra.observed_generation == 7
        assert extra.last_transition_time == datetime(2026, 1, 1, tzinfo=UTC)
        assert (r.calls("pre-reconcile", "a", "ok"), r.calls("pre-reconcile", "c", "ok")) == (1, 1)
        assert r.calls("pre-reconcile", "d", "changed") == 1


async def test_chain_order_controller_wide_first_and_each_sees_the_previous_output(
    http: OutboundHTTP,
) -> None:
    async with CaptureServer() as wide, CaptureServer() as own:
        wide.on("POST", "/hook", conditions_answer({"type": "Wide", "status": "True", "reason": "Ok"}))
        own.on("POST", "/hook", conditions_answer({"type": "Own", "status": "True", "reason": "Ok"}))
        config = HooksConfig.model_validate({"hooks": [{**hook("wide", wide.url), "kinds": ["Alert"]}]})
        r = Rig(http, config)
        r.add(secret("creds", token=CANARY), provider(), alert([hook("own", own.url)]))
        await r.settle("Provider", "webhook")
        await r.settle("Alert", "on-call")
        assert len(wide.requests) == 1  # the controller-wide hook selects Alerts only
        seen = [c["type"] for c in own.requests[0].json()["object"]["status"]["conditions"]]
        assert "Wide" in seen
        assert own.requests[0].json()["children"] == {
            "providerRef": {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "name": "webhook",
                "namespace": NS,
            }
        }
        types = [c.type for c in r.get("Alert", "on-call").status.conditions]
        assert types == ["Ready", "Own", "Wide"]  # the controller's order: Ready, then by type


async def test_hooks_are_not_called_when_the_controller_already_failed(http: OutboundHTTP) -> None:
    """The hook extends readiness; a Receiver without its token is reported as Flux does, hook not called."""
    async with CaptureServer() as server:
        r = Rig(http)
        r.add(receiver([hook("github", server.url)]))
        await r.settle("Receiver", "test-receiver")
        assert r.condition("Receiver", "test-receiver", "Ready")[1] == "TokenNotFound"  # type: ignore[index]
        assert server.requests == []


async def test_provider_children_name_secret_keys_never_values(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        r = Rig(http)
        r.add(
            secret("creds", token=CANARY, address="https://example.com/" + CANARY),
            provider([hook("audit", server.url, secretRef={"name": "hook-key"})]),
            secret("hook-key", token=HOOK_KEY),
        )
        await r.settle("Provider", "webhook")
        [request] = server.requests
        assert request.json()["children"] == {
            "secretRef": {"name": "creds", "found": True, "keys": ["address", "token"]}
        }
        everything = request.body.decode() + json.dumps(dict(request.headers))
        assert CANARY not in everything
        assert HOOK_KEY not in everything
        assert request.headers["X-Signature"].startswith("sha256=")


async def test_removing_the_hook_removes_its_conditions(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        server.on("POST", "/hook", conditions_answer({"type": "Audited", "status": "True", "reason": "Ok"}))
        r = Rig(http)
        r.add(secret("creds", token=CANARY), provider([hook("audit", server.url)]))
        await r.settle("Provider", "webhook")
        assert r.condition("Provider", "webhook", "Audited") is not None
        current = r.get("Provider", "webhook")
        r.store.upsert(current.model_copy(update={"spec": current.spec.model_copy(update={"hooks": None})}))
        await r.reconcile("Provider", "webhook")
        assert r.condition("Provider", "webhook", "Audited") is None
        assert r.condition("Provider", "webhook", "Ready")[0] == "True"  # type: ignore[index]


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        pytest.param(Reply(body="{oops"), "not JSON", id="not-json"),
        pytest.param(conditions_answer({"type": "bad type!", "status": "True"}), "condition type", id="type"),
        pytest.param(
            conditions_answer({"type": "X", "status": "Maybe"}), "True, False or Unknown", id="status"
        ),
        pytest.param(
            conditions_answer({"type": "X", "status": "False", "reason": "no spaces"}), "reason", id="reason"
        ),
        pytest.param(
            Reply(body={"object": {"status": {"conditions": {"type": "X"}}}}), "must be a list", id="shape"
        ),
    ],
)
async def test_invalid_answers_are_permanent_hook_failures(
    http: OutboundHTTP, answer: Reply, what: str
) -> None:
    async with CaptureServer() as server:
        server.on("POST", "/hook", answer)
        r = Rig(http)
        r.add(secret("creds", token=CANARY), provider([hook("audit", server.url)]))
        assert await r.settle("Provider", "webhook") == Result()
        status, reason, message = r.condition("Provider", "webhook", "Ready")  # type: ignore[misc]
        assert (status, reason) == ("False", "HookFailed")
        assert what in message


# --------------------------------------------------------------------------------------------------
# The error matrix (reconcile phases)
# --------------------------------------------------------------------------------------------------


MATRIX = [
    pytest.param(
        Reply(500, {"message": f"backend down, key {CANARY}"}), "requeue", "error", id="non-permanent-stop"
    ),
    pytest.param(
        Reply(503, {"message": "busy", "continue": True}), "ready", "continued", id="non-permanent-continue"
    ),
    pytest.param(
        Reply(422, {"message": f"policy says no ({CANARY})", "permanent": True}),
        "failed",
        "error",
        id="permanent-stop",
    ),
    pytest.param(
        Reply(400, {"message": "meh", "permanent": True, "continue": True}),
        "ready",
        "continued",
        id="permanent-continue",
    ),
    pytest.param(Reply(body={}, delay=10), "requeue", "timeout", id="timeout"),
    pytest.param(None, "requeue", "error", id="connection-refused"),
]


@pytest.mark.parametrize(("reply", "fate", "outcome"), MATRIX)
async def test_error_matrix(http: OutboundHTTP, reply: Reply | None, fate: str, outcome: str) -> None:
    """Issue 8 errors, reconcile phases: non-permanent → nothing written, Warning, requeue with backoff
    (counted as a reconcile error); ``continue`` → as if "no change"; permanent → Ready=False ``HookFailed``
    with the masked message (and Stalled: retrying cannot help)."""
    async with CaptureServer() as server:
        if reply is not None:
            server.on("POST", "/hook", reply)
        url = server.url if reply is not None else f"http://127.0.0.1:{closed_port()}"
        r = Rig(http)
        r.add(secret("creds", token=CANARY), provider([hook("audit", url, timeout="PT0.5S")]))
        result = await r.settle("Provider", "webhook")
        obj = r.get("Provider", "webhook")
        assert obj.metadata.finalizers == [FINALIZER]
        if fate == "requeue":
            assert result.error is not None and result.error.startswith("hook 'audit' ")
            assert obj.status.conditions == []  # an error writes nothing
            assert r.cluster.status_patches == []
            [(reason, message)] = r.warnings("webhook")
            assert reason == "HookFailed"
            assert message == result.error
        elif fate == "ready":
            assert result == Result()
            assert r.condition("Provider", "webhook", "Ready") == ("True", "Succeeded", "Provider is ready")
            assert r.warnings("webhook") == []
        else:
            assert result == Result()
            ready = r.condition("Provider", "webhook", "Ready")
            assert ready == ("False", "HookFailed", "hook 'audit' answered 422: policy says no (*****)")
            assert r.condition("Provider", "webhook", "Stalled") == ("True", *ready[1:])
            assert obj.status.observed_generation == 1
            assert [w[0] for w in r.warnings("webhook")] == ["HookFailed"]
        assert CANARY not in r.cluster.everything_written()
        assert r.calls("pre-reconcile", "audit", outcome) == 1
        if reply is not None:
            assert len(server.requests) == 1  # reconcile phases never retry in-call: the queue does


async def test_non_permanent_errors_are_retried_by_the_manager_with_backoff(http: OutboundHTTP) -> None:
    """Through ``ControllerManager.process``: the error counts in notification_reconcile_errors_total (per object)
    and the key is re-queued with the rate limiter (seed 004: retried after a delay with backoff)."""
    async with CaptureServer() as server:
        server.on("POST", "/hook", Reply(500, {"message": "down"}))
        store = ObjectStore()
        cluster = RecordingCluster(store)
        registry = CollectorRegistry()
        clock = ManualClock()
        hooks = Hooks(store, cluster, http, registry=registry, clock=clock)
        manager = ControllerManager(store, cluster, clock, registry=registry, hooks=hooks.reconcile)
        hooked = {kind: rec.hooks for kind, rec in manager.reconcilers.items()}
        # the Hooks API's kinds; a Silence (our own kind, no finalizer) has no hooks (controllers/silence.py)
        assert hooked == {
            "Alert": hooks.reconcile,
            "Provider": hooks.reconcile,
            "Receiver": hooks.reconcile,
            "Silence": None,
        }
        store.upsert(parse_object(secret("creds", token=CANARY)))
        store.upsert(parse_object(provider([hook("audit", server.url)])))
        assert await manager.process("Provider", (NS, "webhook")) == Result(requeue=True)  # the finalizer
        result = await manager.process("Provider", (NS, "webhook"))
        assert result is not None and result.error is not None
        labels = {"kind": "Provider", "name": "webhook", "namespace": NS}
        assert registry.get_sample_value("notification_reconcile_errors_total", labels) == 1
        assert manager.queues["Provider"].failures((NS, "webhook")) == 2
        assert (NS, "webhook") in manager.queues["Provider"].delayed
        await manager.stop(deadline=1)


async def test_missing_service_is_a_non_permanent_hook_error(http: OutboundHTTP) -> None:
    r = Rig(http)
    r.add(
        secret("creds", token=CANARY),
        provider(
            [
                {
                    "name": "svc",
                    "address": {"ref": {"name": "auditor", "port": 8080}},
                    "capabilities": ["pre-reconcile"],
                }
            ]
        ),
    )
    result = await r.settle("Provider", "webhook")
    assert result.error == "hook 'svc': Service 'default/auditor' not found"
    assert r.warnings("webhook") == [("HookFailed", "hook 'svc': Service 'default/auditor' not found")]


async def test_error_answer_reads_status_and_body_from_the_error(http: OutboundHTTP) -> None:
    """``client.error_answer`` reads ``DeliveryError.status``/``body`` of a real answer (no text parsing):
    a message with another shape changes nothing."""
    from notification_controller.errors import DeliveryError, FailureReason
    from notification_controller.outbound import OutboundRequest

    async with CaptureServer() as server:
        server.on("POST", "/x", Reply(418, {"message": "teapot", "permanent": True}))
        with pytest.raises(DeliveryError) as info:
            await http.send(OutboundRequest("POST", server.url + "/x"), timeout=2, retry=False)
        assert error_answer(info.value) == (418, '{"message": "teapot", "permanent": true}')
        assert info.value.failure is FailureReason.CLIENT_ERROR
        reworded = DeliveryError(
            "something else entirely", failure=FailureReason.CLIENT_ERROR, status=418, body="{}"
        )
        assert error_answer(reworded) == (418, "{}")
        assert (
            error_answer(
                DeliveryError(
                    "request failed with status code 500: looks like an answer",
                    failure=FailureReason.SERVER_ERROR,
                )
            )
            is None
        )


# --------------------------------------------------------------------------------------------------
# finalize
# --------------------------------------------------------------------------------------------------


async def test_finalize_blocks_deletion_until_the_hook_answers_2xx(http: OutboundHTTP) -> None:
    """Issue 8: with a finalize hook the object carries an extra finalizer and, on deletion, keeps it
    until the hook answered 2xx (so a hook can unregister a webhook before the Receiver goes)."""
    answers = [
        Reply(503, {"message": "still unregistering"}),
        Reply(500, {"message": "nope", "permanent": True}),
    ]
    async with CaptureServer() as server:
        server.on(
            "POST",
            "/hook",
            lambda req: answers[len(server.requests) - 1] if len(server.requests) <= 2 else Reply(),
        )
        r = Rig(http)
        r.add(secret("test-token", token="test-token"), receiver([hook("github", server.url, "finalize")]))
        assert await r.reconcile("Receiver", "test-receiver") == Result(requeue=True)
        assert r.get("Receiver", "test-receiver").metadata.finalizers == [FINALIZER, HOOKS_FINALIZER]
        await r.settle("Receiver", "test-receiver")
        assert server.requests == []  # finalize only runs on deletion
        assert r.condition("Receiver", "test-receiver", "Ready")[0] == "True"  # type: ignore[index]

        r.store.upsert(deleting(r.get("Receiver", "test-receiver")))
        result = await r.reconcile("Receiver", "test-receiver")  # non-permanent: retried with backoff
        assert result.error is not None and "still unregistering" in result.error
        assert await r.reconcile("Receiver", "test-receiver") == Result()  # permanent: not retried
        obj = r.get("Receiver", "test-receiver")
        assert obj is not None, "deleted although the finalize hook failed"
        assert obj.metadata.finalizers == [FINALIZER, HOOKS_FINALIZER]
        assert [w[0] for w in r.warnings("test-receiver")[-2:]] == ["HookFailed", "HookFailed"]

        # what the user is told to do: annotate (what `flux reconcile` does) → the hook is asked again
        obj = r.get("Receiver", "test-receiver")
        meta = obj.metadata.model_copy(update={"annotations": {RECONCILE_REQUEST_ANNOTATION: "now"}})
        r.store.upsert(obj.model_copy(update={"metadata": meta}))
        assert await r.reconcile("Receiver", "test-receiver") == Result()
        assert r.get("Receiver", "test-receiver") is None  # the API server completed the deletion
        body = server.requests[-1].json()
        assert (body["version"], body["phase"]) == ("v1", "finalize")
        assert body["object"]["metadata"]["deletionTimestamp"] == "2026-01-02T00:00:00Z"
        assert body["children"]["webhookPath"] == EXPECTED_PATH
        assert r.calls("finalize", "github", "error") == 2
        assert r.calls("finalize", "github", "ok") == 1


async def test_finalize_continue_lets_the_deletion_go_on(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        server.on("POST", "/hook", Reply(500, {"message": "skip me", "continue": True}))
        r = Rig(http)
        r.add(alert([hook("cleanup", server.url, "finalize")]))
        await r.reconcile("Alert", "on-call")
        assert r.get("Alert", "on-call").metadata.finalizers == [HOOKS_FINALIZER]
        r.store.upsert(deleting(r.get("Alert", "on-call")))
        assert await r.reconcile("Alert", "on-call") == Result()
        assert r.get("Alert", "on-call") is None
        assert r.calls("finalize", "cleanup", "continued") == 1


async def test_finalize_failure_policy_ignore_lets_the_deletion_go_on(http: OutboundHTTP) -> None:
    """Issue 25 item 6: failurePolicy Ignore — a stopped finalize hook does not hold the deletion, and the
    call is counted ``ignored`` (with the default, Fail, it is held: the test above)."""
    r = Rig(http)
    url = f"http://127.0.0.1:{closed_port()}"
    r.add(alert([hook("cleanup", url, "finalize", failurePolicy="Ignore")]))
    await r.reconcile("Alert", "on-call")
    r.store.upsert(deleting(r.get("Alert", "on-call")))
    assert await r.reconcile("Alert", "on-call") == Result()
    assert r.get("Alert", "on-call") is None
    assert r.calls("finalize", "cleanup", "ignored") == 1


async def test_pre_reconcile_failure_policy_ignore_keeps_the_object_ready(http: OutboundHTTP) -> None:
    """A pre-reconcile hook answering 500 with Ignore: Ready as if it had answered "no change"; with Fail
    (the default) the reconcile fails and is retried."""
    async with CaptureServer() as server:
        server.on("POST", "/hook", Reply(500, {"message": "audit service down"}))
        r = Rig(http)
        r.add(secret("test-token", token="test-token"))
        r.add(receiver([hook("audit", server.url, failurePolicy="Ignore")]))
        result = await r.settle("Receiver", "test-receiver")
        assert result.error is None
        assert r.condition("Receiver", "test-receiver", "Ready")[0] == "True"  # type: ignore[index]
        assert r.calls("pre-reconcile", "audit", "ignored") >= 1
        assert r.calls("pre-reconcile", "audit", "error") == 0

        r.add(receiver([hook("audit", server.url)], name="strict"))  # the default: Fail
        result = await r.settle("Receiver", "strict")
        assert result.error is not None and "audit service down" in result.error
        assert r.calls("pre-reconcile", "audit", "error") == 1


async def test_dropping_the_finalize_hook_drops_the_extra_finalizer(http: OutboundHTTP) -> None:
    """The escape hatch: remove the hook from the spec and the object is no longer held."""
    async with CaptureServer() as server:
        server.on("POST", "/hook", Reply(500, {"message": "never"}))
        r = Rig(http)
        r.add(secret("creds", token=CANARY), provider([hook("cleanup", server.url, "finalize")]))
        await r.settle("Provider", "webhook")
        assert r.get("Provider", "webhook").metadata.finalizers == [FINALIZER, HOOKS_FINALIZER]
        current = deleting(r.get("Provider", "webhook"))
        r.store.upsert(current.model_copy(update={"spec": current.spec.model_copy(update={"hooks": None})}))
        assert await r.reconcile("Provider", "webhook") == Result()
        assert r.get("Provider", "webhook") is None
        assert server.requests == []


async def test_alert_migration_and_hooks_finalizer_in_one_write(http: OutboundHTTP) -> None:
    """§6.1 migration (Flux's finalizer removed, Normal Migration) and the hooks' finalizer added together."""
    async with CaptureServer() as server:
        r = Rig(http)
        doc = alert([hook("cleanup", server.url, "finalize")])
        doc["metadata"]["finalizers"] = [FINALIZER, "other.io/keep"]
        r.add(doc)
        await r.reconcile("Alert", "on-call")
        assert r.get("Alert", "on-call").metadata.finalizers == ["other.io/keep", HOOKS_FINALIZER]
        assert len(r.cluster.finalizer_updates) == 1
        assert any(e.reason == "Migration" for e in r.cluster.events_for("on-call"))


# --------------------------------------------------------------------------------------------------
# Issue 16: the answer and error contract (default message, permanent finalize errors, per-object errors)
# --------------------------------------------------------------------------------------------------


async def test_conditions_without_message_get_the_default_message(http: OutboundHTTP) -> None:
    """The CRD requires ``status.conditions[].message`` (the API server answers 422 to an empty one, see
    tests/e2e/test_hooks_contract_e2e.py): True conditions without one (Scoby's examples) get the default."""
    answer = conditions_answer(
        {"type": "Webhook", "status": "True"},
        {"type": "Blank", "status": "True", "reason": "Ok", "message": "  "},
    )
    async with CaptureServer() as server:
        server.on("POST", "/hook", answer)
        r = Rig(http)
        r.add(secret("test-token", token="test-token"), receiver([hook("scoby", server.url)]))
        await r.settle("Receiver", "test-receiver")
        assert r.condition("Receiver", "test-receiver", "Webhook") == (
            "True",
            "ReportedByHook",
            "hook 'scoby' reported Webhook=True",
        )
        assert r.condition("Receiver", "test-receiver", "Blank") == (
            "True",
            "Ok",
            "hook 'scoby' reported Blank=True",
        )
        assert r.condition("Receiver", "test-receiver", "Ready")[0] == "True"  # type: ignore[index]
        for _, patch in r.cluster.status_patches:
            assert all(c.get("message") for c in patch.get("conditions", [])), patch


@pytest.mark.parametrize(
    ("controller_wide", "where"), [(False, "spec.hooks"), (True, "the --hooks-config file")]
)
async def test_permanent_finalize_error_is_not_retried_and_says_what_to_do(
    http: OutboundHTTP, controller_wide: bool, where: str
) -> None:
    """The error contract: ``permanent: true`` means "retrying will not help". Through the manager: no
    backoff, no error counted, Ready=False/Stalled=True ``HookFailed`` and a Warning with what to do; a
    ``reconcile.fluxcd.io/requestedAt`` annotation asks again."""
    answers = [Reply(409, {"message": f"webhook owned by someone else {CANARY}", "permanent": True}), Reply()]
    async with CaptureServer() as server:
        server.on("POST", "/hook", lambda req: answers[min(len(server.requests), 2) - 1])
        config = None
        own: list[dict[str, Any]] | None = [hook("cleanup", server.url, "finalize")]
        if controller_wide:
            config = HooksConfig.model_validate({"hooks": [hook("cleanup", server.url, "finalize")]})
            own = None
        r = Rig(http, config)
        registry = CollectorRegistry()
        manager = ControllerManager(
            r.store, r.cluster, r.clock, registry=registry, redactor=r.redactor, recorder=r.recorder
        )
        manager.set_hooks(r.hooks.reconcile)
        r.add(alert(own))
        await manager.process("Alert", (NS, "on-call"))
        assert HOOKS_FINALIZER in r.get("Alert", "on-call").metadata.finalizers
        r.store.upsert(deleting(r.get("Alert", "on-call")))

        assert await manager.process("Alert", (NS, "on-call")) == Result()
        queue = manager.queues["Alert"]
        assert queue.failures((NS, "on-call")) == 0 and (NS, "on-call") not in queue.delayed
        labels = {"kind": "Alert", "name": "on-call", "namespace": NS}
        assert registry.get_sample_value("notification_reconcile_errors_total", labels) is None
        ready = r.condition("Alert", "on-call", "Ready")
        stalled = r.condition("Alert", "on-call", "Stalled")
        assert ready is not None and stalled is not None
        assert (ready[:2], stalled[:2]) == (("False", "HookFailed"), ("True", "HookFailed"))
        message = stalled[2]
        assert message.startswith("deletion blocked: hook 'cleanup' answered 409: webhook owned by someone")
        assert f"remove hook 'cleanup' from {where}" in message
        assert "annotate the object with reconcile.fluxcd.io/requestedAt" in message
        assert CANARY not in message
        assert r.warnings("on-call")[-1] == ("HookFailed", message)
        assert len(server.requests) == 1

        obj = r.get("Alert", "on-call")
        meta = obj.metadata.model_copy(update={"annotations": {RECONCILE_REQUEST_ANNOTATION: "fixed"}})
        r.store.upsert(obj.model_copy(update={"metadata": meta}))
        assert await manager.process("Alert", (NS, "on-call")) == Result()
        assert r.get("Alert", "on-call") is None
        assert len(server.requests) == 2


async def test_reconcile_errors_are_counted_per_object_and_forgotten_with_it(http: OutboundHTTP) -> None:
    """``notification_reconcile_errors_total{kind,name,namespace}``, like gotk_reconcile_duration_seconds:
    which object fails is visible, and its series goes with it."""
    async with CaptureServer() as server:
        server.on("POST", "/hook", Reply(503, {"message": "busy"}))
        r = Rig(http)
        registry = CollectorRegistry()
        manager = ControllerManager(r.store, r.cluster, r.clock, registry=registry, hooks=r.hooks.reconcile)
        r.add(
            secret("test-token", token="test-token"),
            receiver([hook("audit", server.url)], name="flaky"),
            receiver(name="fine"),
        )
        for name in ("flaky", "fine"):
            for _ in range(3):
                await manager.process("Receiver", (NS, name))

        def errors(name: str) -> float | None:
            labels = {"kind": "Receiver", "name": name, "namespace": NS}
            return registry.get_sample_value("notification_reconcile_errors_total", labels)

        assert errors("flaky") == 2  # the finalizer write, then two hook failures
        assert errors("fine") is None
        assert (
            registry.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": "receiver"})
            == 2
        )

        r.store.delete("Receiver", NS, "flaky")
        await manager.process("Receiver", (NS, "flaky"))
        assert errors("flaky") is None
        await manager.stop(deadline=1)
