"""A ``cloudevents`` Provider through the real controller in local mode (issue 28).

1. Round trip: one controller is both ends. A HelmRelease ``UpgradeSucceeded`` event posted to its event
   endpoint goes out as a ``dev.cdevents.service.upgraded`` CloudEvent to its own ``cdevents`` Receiver, which
   validates the CDEvent, filters on the ``ce-type`` header (``spec.events``) and annotates the listed
   HelmRelease (``reconcile.fluxcd.io/requestedAt``). An upgrade FAILURE is Flux's type with Flux's event as
   data: the same receiver refuses it, and the delivery fails, counted.
2. Durable store (sqlite): a sink that answers 503 until the outbox's second attempt gets every attempt with
   one ``ce-id`` — the ``Idempotency-Key`` the outbox sends — so a receiver can drop redeliveries; the
   request parses with the CloudEvents SDK; a sink that answers 400 turns the notification into a dead
   letter that the ``dead-letters`` command lists. That Provider's ``bodyTemplate`` is the event's data.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from cloudevents.core.bindings.http import HTTPMessage, from_http_event

from notification_controller.api import RECONCILE_REQUEST_ANNOTATION
from notification_controller.app import App
from notification_controller.core.webhook import webhook_path
from notification_controller.deadletters import main as dead_letters
from notification_controller.receivers.cdevents import validate_cdevent
from notification_controller.settings import StoreSettings
from tests.integration.appkit import local_cluster, metric, post_event, running_app, write
from tests.support.capture import CaptureServer, Reply

NS = "apps"
TOKEN = "roundtrip-receiver-token"
UPGRADED = "dev.cdevents.service.upgraded.0.2.0"

RECEIVER = f"""\
apiVersion: v1
kind: Secret
metadata: {{name: cdevents-token, namespace: {NS}}}
stringData: {{token: {TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: deployments, namespace: {NS}}}
spec:
  type: cdevents
  events: [{UPGRADED}]
  secretRef: {{name: cdevents-token}}
  resources:
    - {{apiVersion: helm.toolkit.fluxcd.io/v2, kind: HelmRelease, name: frontend}}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: frontend, namespace: {NS}}}
spec: {{chart: {{spec: {{chart: frontend}}}}}}
"""


def provider(address: str, name: str = "deployments", source: str = "*", **spec: str) -> str:
    extra = "".join(f"\n  {key}: {value}" for key, value in spec.items())
    return f"""\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: {NS}}}
spec:
  type: cloudevents
  address: "{address}"
  timeout: 5s{extra}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: {NS}}}
spec:
  providerRef: {{name: {name}}}
  eventMetadata: {{environment: prod-eu}}
  eventSources: [{{kind: HelmRelease, name: "{source}"}}]
"""


def helm_event(
    reason: str, name: str = "podinfo", severity: str = "info", second: int = 0, revision: str = "6.0.1"
) -> bytes:
    group = "helm.toolkit.fluxcd.io"
    return json.dumps(
        {
            "involvedObject": {
                "kind": "HelmRelease",
                "namespace": NS,
                "name": name,
                "apiVersion": f"{group}/v2",
            },
            "severity": severity,
            "timestamp": f"2026-11-27T10:00:{second:02d}Z",
            "message": f"Helm {reason} for release {NS}/{name}.v2 with chart {name}@6.0.1",
            "reason": reason,
            "metadata": {f"{group}/revision": revision, f"{group}/token": "5c1f2e"},
            "reportingController": "helm-controller",
        }
    ).encode()


async def until(check: Any, what: str, timeout: float = 30.0) -> None:
    """Poll ``check()`` (generous bound: a loaded 2-core machine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def requested_at(app: App) -> str | None:
    obj = local_cluster(app).others.get(("HelmRelease", NS, "frontend"))
    assert obj is not None
    value = (obj["metadata"].get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
    return None if value is None else str(value)


async def test_our_cdevents_receiver_accepts_what_we_emit_and_triggers_the_resource(tmp_path: Path) -> None:
    write(tmp_path, "receiver.yaml", RECEIVER)
    path = webhook_path(TOKEN.encode(), "deployments", NS)
    async with running_app(tmp_path) as app:
        await until(
            lambda: (
                (r := app.store.receiver(NS, "deployments")) is not None and r.status.webhook_path == path
            ),
            "the receiver's path",
        )
        address = f"http://127.0.0.1:{app.ports['receiver']}{path}"
        write(tmp_path, "provider.yaml", provider(address))
        await until(lambda: app.store.alert(NS, "deployments") is not None, "the Alert")
        assert requested_at(app) is None

        assert (await post_event(app, helm_event("UpgradeSucceeded"))).status == 202
        await until(lambda: requested_at(app) is not None, "the receiver's annotation")
        await until(
            lambda: metric(app, "notification_delivered_total", provider_type="cloudevents") == 1, "delivered"
        )
        assert metric(app, "notification_receiver_requests_total", type="cdevents", outcome="accepted") == 1

        # Not an outcome CDEvents has a type for: Flux's type and event, which a cdevents receiver refuses.
        first = requested_at(app)
        assert (await post_event(app, helm_event("UpgradeFailed", severity="error", second=1))).status == 202
        await until(
            lambda: metric(app, "notification_delivery_failed_total", provider_type="cloudevents") == 1,
            "failed",
        )
        assert (
            metric(app, "notification_receiver_requests_total", type="cdevents", outcome="rejected_signature")
            == 1
        )
        # A CDEvent the Receiver does not list (service.deployed): refused on its ce-type header.
        assert (await post_event(app, helm_event("InstallSucceeded", second=2))).status == 202
        await until(
            lambda: metric(app, "notification_delivery_failed_total", provider_type="cloudevents") == 2,
            "refused",
        )
        assert (
            metric(app, "notification_receiver_requests_total", type="cdevents", outcome="rejected_signature")
            == 2
        )
        assert requested_at(app) == first  # nothing else triggered
        # Another upgrade (Flux's duplicate window tells events apart by revision): accepted again.
        assert (
            await post_event(app, helm_event("UpgradeSucceeded", second=3, revision="6.0.2"))
        ).status == 202
        await until(
            lambda: (
                metric(app, "notification_receiver_requests_total", type="cdevents", outcome="accepted") == 2
            ),
            "accepted",
        )


def sdk(request: Any) -> dict[str, Any]:
    headers = {str(k): str(v) for k, v in request.headers.items()}
    return dict(from_http_event(HTTPMessage(headers=headers, body=request.body)).get_attributes())


async def test_durable_retries_keep_one_id_and_a_refusal_is_a_dead_letter(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = StoreSettings(url=f"sqlite:{db}", retry_base=0.05, retry_cap=0.2, breaker_threshold=1000)
    async with CaptureServer() as sink:
        attempts = 0

        def flaky(_: Any) -> Reply:
            nonlocal attempts
            attempts += 1
            return (
                Reply(503) if attempts <= 6 else Reply(202)
            )  # 5 attempts in one delivery, then the outbox's

        sink.on("POST", "/flaky", flaky)
        sink.on("POST", "/refusing", Reply(400, "not a sink for this"))
        manifests = tmp_path / "manifests"
        manifests.mkdir()
        write(manifests, "flaky.yaml", provider(f"{sink.url}/flaky", name="podinfo", source="podinfo"))
        write(
            manifests,
            "refusing.yaml",
            provider(
                f"{sink.url}/refusing",
                name="backend",
                source="backend",
                channel="structured",
                bodyTemplate="""'{"release": {{ event.involvedObject.name | to_json }}}'""",
            ),
        )
        async with running_app(manifests, store=store) as app:
            await until(app.ready, "the store")
            assert (await post_event(app, helm_event("UpgradeSucceeded"))).status == 202
            assert (await post_event(app, helm_event("RollbackSucceeded", name="backend"))).status == 202
            await until(
                lambda: metric(app, "notification_delivered_total", provider_type="cloudevents") == 1,
                "delivered",
            )
            await until(lambda: metric(app, "notification_dead_letters_total") == 1, "the dead letter")
            out = io.StringIO()
            args = ["list", "--store", f"sqlite:{db}", "-o", "json"]
            assert await asyncio.to_thread(dead_letters, args, out) == 0

    flaky_requests = [r for r in sink.requests if r.path == "/flaky"]
    assert len(flaky_requests) == 7
    ids = {r.headers["ce-id"] for r in flaky_requests}
    keys = {r.headers["Idempotency-Key"] for r in flaky_requests}
    assert len(ids) == 1 and ids == keys  # every attempt: the notification's id
    attributes = sdk(flaky_requests[-1])
    assert attributes["type"] == UPGRADED and attributes["id"] in ids
    assert attributes["source"] == f"/apis/helm.toolkit.fluxcd.io/v2/namespaces/{NS}/helmreleases/podinfo"
    cdevent = validate_cdevent(flaky_requests[-1].body)
    assert cdevent["subject"]["content"] == {
        "environment": {"id": "prod-eu"},  # the Alert's eventMetadata
        "artifactId": "pkg:generic/apps/podinfo@6.0.1",
    }

    refused = [r for r in sink.requests if r.path == "/refusing"]
    assert len(refused) == 1  # 400: permanent, not retried
    assert refused[0].headers["Content-Type"] == "application/cloudevents+json; charset=utf-8"
    assert sdk(refused[0])["type"] == "dev.cdevents.service.rolledback.0.2.0"  # the attributes stay...
    assert json.loads(refused[0].body)["data"] == {"release": "backend"}  # ...the bodyTemplate is the data
    rows = json.loads(out.getvalue())
    assert [(r["object"], r["alert"]) for r in rows] == [(f"HelmRelease/{NS}/backend", f"{NS}/backend")]
    assert "400" in rows[0]["error"]
