"""The ``pre-dispatch`` phase of Hooks API v1 (docs/hooks.md, issue 8) with real local hook servers.

The real ``Dispatcher`` runs with the ``PreDispatchHooks`` stage; hooks and the provider are aiohttp servers
on 127.0.0.1 (``CaptureServer``). Asserted: the chain (each hook sees the previous one's output, the
provider receives the final event), the order controller-wide → Alert → Provider, ``drop``, the error
matrix (permanent/non-permanent × continue/stop × timeout/connection refused) with the notification's
fate, the metrics and the Warning Event, HMAC signing, TLS, and that no Secret value reaches a hook.
Flux's event and dispatch semantics around the stage: reference §2, §3.6.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.hooks import HooksConfig
from notification_controller.api.objects import parse_object
from notification_controller.dispatch.builder import build
from notification_controller.dispatch.dispatcher import Dispatcher
from notification_controller.hooks import Hooks
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from tests.support.capture import CapturedRequest, CaptureServer, Reply, mint_tls
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink

NS = "flux-system"
KS = "kustomize.toolkit.fluxcd.io"
PROVIDER_CANARY = "provider-token-canary-5d1e"
HOOK_KEY = "hook-hmac-key-canary-77c2"
PHASE = "pre-dispatch"


# --------------------------------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------------------------------


@dataclass
class Rig:
    store: ObjectStore
    cluster: MemoryCluster
    registry: CollectorRegistry
    sink: LogSink
    dispatcher: Dispatcher
    provider: CaptureServer

    def add(self, *docs: dict[str, Any]) -> None:
        for doc in docs:
            self.store.upsert(parse_object(doc))

    async def send(self, event: Event | None = None) -> None:
        assert self.dispatcher.admit(event or flux_event()) == 1
        assert await self.dispatcher.wait_idle(20)

    def hook_calls(self, hook: str, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "notification_hook_calls_total", {"phase": PHASE, "hook": hook, "outcome": outcome}
        )
        return value or 0.0

    def dropped(self) -> float:
        value = self.registry.get_sample_value(
            "notification_dropped_total", {"provider_type": "generic", "reason": "hook"}
        )
        return value or 0.0

    def delivered(self) -> float:
        return sum(
            sample.value
            for family in self.registry.collect()
            for sample in family.samples
            if sample.name == "notification_delivered_total"
            and sample.labels.get("provider_type") == "generic"
        )

    def warnings(self) -> list[str]:
        return [message for _, type_, reason, message in self.sink.events if reason == "NotificationDropped"]


@asynccontextmanager
async def rig(config: HooksConfig | None = None) -> AsyncIterator[Rig]:
    store = ObjectStore()
    cluster = MemoryCluster()
    registry = CollectorRegistry()
    http = OutboundHTTP(RetryPolicy(max_attempts=2, wait_min=0.01, wait_max=0.02))
    await http.start()
    hooks = Hooks(
        store,
        cluster,
        http,
        registry=registry,
        config=config,
        runtime_namespace=NS,
        backoff_min=0.02,
        backoff_max=0.05,
    )
    sink = LogSink()
    dispatcher = build(
        store, cluster, http, sink, EventMetrics(registry), hooks=[hooks.pre_dispatch]
    ).dispatcher
    try:
        async with CaptureServer() as provider:
            yield Rig(store, cluster, registry, sink, dispatcher, provider)
    finally:
        await dispatcher.shutdown(1)
        await http.close()


def hook(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": {"uri": url + "/hook"}, "capabilities": [PHASE], **extra}


def provider(url: str, hooks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "generic", "address": url + "/sink", "secretRef": {"name": "creds"}}
    if hooks is not None:
        spec["hooks"] = hooks
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": "sink", "namespace": NS},
        "spec": spec,
    }


def alert(hooks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "providerRef": {"name": "sink"},
        "eventSources": [{"kind": "Kustomization", "name": "*"}],
        "eventMetadata": {"cluster": "prod-eu"},
    }
    if hooks is not None:
        spec["hooks"] = hooks
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Alert",
        "metadata": {"name": "on-call", "namespace": NS},
        "spec": spec,
    }


def secret(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "stringData": data,
    }


def flux_event(message: str = "Reconciliation finished") -> Event:
    return Event.model_validate(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": NS,
                "name": "apps",
                "uid": "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9",
                "apiVersion": f"{KS}/v1",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": {f"{KS}/revision": "main@sha1:0c9c2e41"},
            "reportingController": "kustomize-controller",
        }
    )


def appending(label: str, order: list[str]) -> Callable[[CapturedRequest], Reply]:
    """A hook that appends ``label`` to metadata ``trail`` and to the message, and records the call order."""

    def answer(request: CapturedRequest) -> Reply:
        order.append(label)
        event = request.json()["event"]
        metadata = dict(event.get("metadata") or {})
        metadata["trail"] = ",".join(filter(None, [metadata.get("trail", ""), label]))
        return Reply(
            body={"event": {**event, "metadata": metadata, "message": event["message"] + f" [{label}]"}}
        )

    return answer


def closed_port() -> int:
    """A port nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --------------------------------------------------------------------------------------------------
# The chain
# --------------------------------------------------------------------------------------------------


async def test_chain_controller_wide_then_alert_then_provider_each_sees_the_previous_output() -> None:
    """Issue 8: hooks run in series, controller-wide first, then the Alert's, then the Provider's; each gets
    the previous one's output; the provider receives the final event (reference §3.6 for the merge)."""
    order: list[str] = []
    async with CaptureServer() as wide, CaptureServer() as on_alert, CaptureServer() as on_provider:
        wide.on("POST", "/hook", appending("wide", order))
        on_alert.on("POST", "/hook", appending("alert", order))
        on_provider.on("POST", "/hook", appending("provider", order))
        config = HooksConfig.model_validate({"hooks": [{**hook("wide", wide.url), "kinds": ["Provider"]}]})
        async with rig(config) as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url, [hook("enrich-p", on_provider.url)]),
                alert([hook("enrich-a", on_alert.url)]),
            )
            await r.send()
            assert order == ["wide", "alert", "provider"]

            first = wide.requests[0].json()
            assert first["version"] == "v1"
            assert first["phase"] == PHASE
            assert first["provider"] == {"name": "sink", "namespace": NS, "type": "generic"}
            assert first["alert"]["metadata"]["name"] == "on-call"
            assert first["alert"]["spec"]["hooks"][0]["name"] == "enrich-a"
            # After matching and metadata merge: prefixes stripped, the Alert's eventMetadata added.
            assert first["event"]["metadata"] == {"revision": "main@sha1:0c9c2e41", "cluster": "prod-eu"}
            assert first["event"]["involvedObject"]["name"] == "apps"
            assert "trail" not in first["event"]["metadata"]
            assert on_alert.requests[0].json()["event"]["metadata"]["trail"] == "wide"
            assert on_alert.requests[0].json()["event"]["message"] == "Reconciliation finished [wide]"
            assert on_provider.requests[0].json()["event"]["metadata"]["trail"] == "wide,alert"

            [delivered] = r.provider.requests
            body = delivered.json()
            assert body["message"] == "Reconciliation finished [wide] [alert] [provider]"
            assert body["metadata"] == {
                "revision": "main@sha1:0c9c2e41",
                "cluster": "prod-eu",
                "trail": "wide,alert,provider",
            }
            assert body["involvedObject"]["uid"] == "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9"
            for name in ("wide", "enrich-a", "enrich-p"):
                assert r.hook_calls(name, "changed") == 1
            assert r.delivered() == 1
            assert r.dropped() == 0


async def test_severity_can_change_and_empty_answers_change_nothing() -> None:
    """``{}``, ``null`` and an empty body mean no change; severity/message/metadata may be replaced."""
    async with CaptureServer() as first, CaptureServer() as second, CaptureServer() as third:
        first.on("POST", "/hook", Reply(body={}))
        second.on("POST", "/hook", Reply(body=b""))
        third.on("POST", "/hook", Reply(body={"event": {"severity": "error", "metadata": None}}))
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url),
                alert([hook("a", first.url), hook("b", second.url), hook("c", third.url)]),
            )
            await r.send()
            body = r.provider.requests[0].json()
            assert body["severity"] == "error"
            assert "metadata" not in body  # replaced by an empty map
            assert body["message"] == "Reconciliation finished"
            assert (r.hook_calls("a", "ok"), r.hook_calls("b", "ok"), r.hook_calls("c", "changed")) == (
                1,
                1,
                1,
            )


async def test_drop_drops_counts_and_warns_and_stops_the_chain() -> None:
    """``{"drop": true}``: nothing is sent, later hooks are not asked, drop counted and evented on the Alert."""
    async with CaptureServer() as veto, CaptureServer() as later:
        veto.on("POST", "/hook", Reply(body={"drop": True, "message": "outside office hours"}))
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url, [hook("later", later.url)]),
                alert([hook("office-hours", veto.url)]),
            )
            await r.send()
            assert r.provider.requests == []
            assert later.requests == []
            assert r.dropped() == 1
            assert r.hook_calls("office-hours", "dropped") == 1
            assert r.warnings() == [
                "notification for Kustomization/flux-system/apps dropped by hook 'office-hours': "
                "outside office hours"
            ]
            ref, type_, _, _ = r.sink.events[0]
            assert (ref.kind, ref.name, type_) == ("Alert", "on-call", "Warning")


async def test_changing_the_involved_object_is_rejected_with_a_drop_and_a_warning() -> None:
    """docs/hooks.md: the involvedObject is the notification's identity; a hook may not change it."""

    def rename(request: CapturedRequest) -> Reply:
        event = request.json()["event"]
        event["involvedObject"]["name"] = "something-else"
        return Reply(body={"event": event})

    async with CaptureServer() as bad:
        bad.on("POST", "/hook", rename)
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url),
                alert([hook("bad", bad.url)]),
            )
            await r.send()
            assert r.provider.requests == []
            assert r.dropped() == 1
            assert r.hook_calls("bad", "error") == 1
            [warning] = r.warnings()
            assert "the event's involvedObject may not change" in warning


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        pytest.param(Reply(body="not json"), "not JSON", id="not-json"),
        pytest.param(Reply(body=[1, 2]), "must be a JSON object", id="list"),
        pytest.param(Reply(body={"event": {"metadata": {"n": 1}}}), "object of strings", id="metadata"),
        pytest.param(Reply(body={"event": {"severity": "fatal"}}), "severity", id="severity"),
        pytest.param(Reply(body={"drop": "yes"}), "'drop' must be a boolean", id="drop"),
    ],
)
async def test_invalid_answers_drop_the_notification(answer: Reply, what: str) -> None:
    async with CaptureServer() as bad:
        bad.on("POST", "/hook", answer)
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url),
                alert([hook("bad", bad.url)]),
            )
            await r.send()
            assert r.provider.requests == []
            assert len(bad.requests) == 1  # an invalid answer is permanent: not retried
            assert r.dropped() == 1
            [warning] = r.warnings()
            assert what in warning


# --------------------------------------------------------------------------------------------------
# The error matrix
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    reply: Reply | None  # None: connection refused
    delivered: bool
    outcome: str
    calls: str  # "one" or "several" (retried within the timeout)
    warning: str = ""


MATRIX = [
    pytest.param(
        Case(
            Reply(500, {"message": "enricher down", "permanent": False}),
            False,
            "error",
            "several",
            "hook 'h' answered 500: enricher down",
        ),
        id="non-permanent-stop",
    ),
    pytest.param(
        Case(Reply(503, {"message": "busy", "continue": True}), True, "continued", "one"),
        id="non-permanent-continue",
    ),
    pytest.param(
        Case(
            Reply(422, {"message": "refused by policy", "permanent": True}),
            False,
            "error",
            "one",
            "hook 'h' answered 422: refused by policy",
        ),
        id="permanent-stop",
    ),
    pytest.param(
        Case(
            Reply(400, {"message": "cannot enrich", "permanent": True, "continue": True}),
            True,
            "continued",
            "one",
        ),
        id="permanent-continue",
    ),
    pytest.param(
        Case(
            Reply(500, "plain text failure"),
            False,
            "error",
            "several",
            "hook 'h' answered 500: plain text failure",
        ),
        id="no-json-body-is-non-permanent",
    ),
    pytest.param(
        Case(Reply(body={}, delay=10), False, "timeout", "one", "hook 'h' timed out after 0.6s"),
        id="timeout",
    ),
    pytest.param(
        Case(None, False, "error", "none", "hook 'h' could not be reached"),
        id="connection-refused",
    ),
]


@pytest.mark.parametrize("case", MATRIX)
async def test_error_matrix(case: Case) -> None:
    """Issue 8 errors: non-permanent → retried with backoff within the timeout; ``continue`` → delivered
    unchanged; otherwise dropped (counted, Warning Event). Timeouts and refused connections are
    non-permanent without continue."""
    async with CaptureServer() as server:
        if case.reply is not None:
            server.on("POST", "/hook", case.reply)
        url = server.url if case.reply is not None else f"http://127.0.0.1:{closed_port()}"
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url),
                alert([hook("h", url, timeout="600ms")]),
            )
            await r.send()
            if case.delivered:
                [sent] = r.provider.requests
                assert sent.json()["message"] == "Reconciliation finished"
                assert (r.delivered(), r.dropped(), r.warnings()) == (1, 0, [])
            else:
                assert r.provider.requests == []
                assert (r.delivered(), r.dropped()) == (0, 1)
                [warning] = r.warnings()
                assert warning.startswith("notification for Kustomization/flux-system/apps dropped: ")
                assert case.warning in warning
            assert r.hook_calls("h", case.outcome) == 1
            count = r.registry.get_sample_value(
                "notification_hook_duration_seconds_count", {"phase": PHASE, "hook": "h"}
            )
            assert count == 1
            if case.calls == "one":
                assert len(server.requests) == 1
            elif case.calls == "several":
                assert len(server.requests) >= 2


async def test_non_permanent_error_then_success_within_the_timeout_delivers_the_change() -> None:
    calls: list[CapturedRequest] = []

    def answer(request: CapturedRequest) -> Reply:
        calls.append(request)
        if len(calls) == 1:
            return Reply(503, {"message": "warming up"})
        return Reply(body={"event": {"message": "enriched"}})

    async with CaptureServer() as flaky:
        flaky.on("POST", "/hook", answer)
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url),
                alert([hook("h", flaky.url)]),
            )
            await r.send()
            assert len(flaky.requests) == 2
            assert r.provider.requests[0].json()["message"] == "enriched"
            assert r.hook_calls("h", "changed") == 1
            assert r.dropped() == 0


# --------------------------------------------------------------------------------------------------
# Security: signing, TLS, no Secret values
# --------------------------------------------------------------------------------------------------


async def test_requests_are_signed_and_carry_no_secret_value() -> None:
    """``secretRef``: X-Signature like generic-hmac, verified by the hook; no Secret value in any request."""

    def verify(request: CapturedRequest) -> Reply:
        expected = "sha256=" + hmac.new(HOOK_KEY.encode(), request.body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(request.headers.get("X-Signature", ""), expected):
            return Reply(401, {"message": "bad signature", "permanent": True})
        return Reply(body={"event": {"message": "verified"}})

    async with CaptureServer() as signed:
        signed.on("POST", "/hook", verify)
        async with rig() as r:
            r.add(
                secret(
                    "creds",
                    token=PROVIDER_CANARY,
                    address=r.provider.url + "/sink",
                    password="hunter2-canary",
                ),
                secret("hook-hmac", token=HOOK_KEY),
                provider(r.provider.url),
                alert([hook("signed", signed.url, secretRef={"name": "hook-hmac"})]),
            )
            await r.send()
            assert r.provider.requests[0].json()["message"] == "verified"
            [request] = signed.requests
            assert request.headers["Content-Type"] == "application/json"
            seen = request.body.decode() + json.dumps(dict(request.headers))
            for value in (PROVIDER_CANARY, HOOK_KEY, "hunter2-canary"):
                assert value not in seen


async def test_missing_signing_secret_drops_with_a_clear_message() -> None:
    async with CaptureServer() as server, rig() as r:
        r.add(
            secret("creds", token=PROVIDER_CANARY),
            provider(r.provider.url),
            alert([hook("signed", server.url, secretRef={"name": "absent"})]),
        )
        await r.send()
        assert server.requests == []
        [warning] = r.warnings()
        assert "hook 'signed': secret 'flux-system/absent' not found" in warning


async def test_tls_from_cert_secret_ref() -> None:
    """``certSecretRef``: the hook's CA comes from the Secret, as for providers."""
    material = mint_tls()
    async with CaptureServer(tls=material) as secure:
        secure.on("POST", "/hook", Reply(body={"event": {"message": "over tls"}}))
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                secret("hook-ca", **{"ca.crt": material.ca_pem.decode()}),
                provider(r.provider.url),
                alert([hook("tls", secure.url, certSecretRef={"name": "hook-ca"})]),
            )
            await r.send()
            assert secure.url.startswith("https://")
            assert r.provider.requests[0].json()["message"] == "over tls"


async def test_unknown_ca_is_a_connection_error() -> None:
    async with CaptureServer(tls=mint_tls()) as secure:
        async with rig() as r:
            r.add(
                secret("creds", token=PROVIDER_CANARY),
                provider(r.provider.url),
                alert([hook("tls", secure.url, timeout="PT0.5S")]),
            )
            await r.send()
            assert r.provider.requests == []
            [warning] = r.warnings()
            assert "hook 'tls' could not be reached" in warning


async def test_service_ref_that_does_not_exist_drops() -> None:
    """``address.ref``: the Service must exist (404 → a clear hook error, never a request)."""
    async with rig() as r:
        r.add(
            secret("creds", token=PROVIDER_CANARY),
            provider(r.provider.url),
            alert(
                [
                    {
                        "name": "svc",
                        "address": {"ref": {"kind": "Service", "name": "enricher", "namespace": "tools"}},
                        "capabilities": [PHASE],
                    }
                ]
            ),
        )
        await r.send()
        [warning] = r.warnings()
        assert "hook 'svc': Service 'tools/enricher' not found" in warning
        assert ("get", "Service", "tools", "enricher") in r.cluster.calls


async def test_hooks_without_pre_dispatch_are_not_called() -> None:
    async with CaptureServer() as server, rig() as r:
        r.add(
            secret("creds", token=PROVIDER_CANARY),
            provider(r.provider.url),
            alert([{**hook("later", server.url), "capabilities": ["pre-reconcile", "finalize"]}]),
        )
        await r.send()
        assert server.requests == []
        assert r.delivered() == 1
