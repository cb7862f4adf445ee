"""The event path end to end: a real controller (local mode) and real local HTTP servers as providers.

Reference §2 (what producers send), §3.1–3.6 (ingest, limiter, matching, dispatch), §4.0 (retries).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from pathlib import Path

import pytest

from notification_controller.api.event import Event
from notification_controller.settings import EventSettings
from tests.integration.appkit import local_cluster, metric, post_event, running_app, write
from tests.support.capture import CaptureServer, Reply

KS = "kustomize.toolkit.fluxcd.io"
CANARY = "canary-token-6f1c9d"


def manifests(
    tmp: Path, url: str, *, ptype: str = "generic", timeout: str = "5s", extra_alert: str = ""
) -> Path:
    write(
        tmp,
        "objects.yaml",
        f"""\
        apiVersion: v1
        kind: Secret
        metadata: {{name: creds, namespace: flux-system}}
        stringData:
          token: {CANARY}
          headers: |
            X-Team: platform
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: sink, namespace: flux-system}}
        spec:
          type: {ptype}
          address: {url}/hook/{CANARY}
          timeout: {timeout}
          secretRef: {{name: creds}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: all, namespace: flux-system}}
        spec:
          providerRef: {{name: sink}}
          eventSources:
            - kind: Kustomization
              name: '*'
          eventMetadata: {{cluster: prod-eu}}
          {extra_alert}
        """,
    )
    return tmp


def flux_request(message: str = "Reconciliation finished", **metadata: str) -> bytes:
    """The exact body Flux's runtime/events recorder POSTs (reference §2): Go field order, group prefixes."""
    md = {
        f"{KS}/revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41",
        f"{KS}/checksum": "deadbeef",
        f"{KS}/token": "dedup-token",
        "event.toolkit.fluxcd.io/deployment": "blue",
        "unprefixed": "dropped",
        **metadata,
    }
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": "apps",
                "uid": "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9",
                "apiVersion": f"{KS}/v1",
                "resourceVersion": "81123",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": md,
            "reportingController": "kustomize-controller",
            "reportingInstance": "kustomize-controller-7f5d9c7b8-x2x4k",
        },
        separators=(",", ":"),
    ).encode()


async def test_flux_producer_request_reaches_generic_provider(tmp_path: Path) -> None:
    """§2 + §3.2 + §3.4 + §3.6: prefixes stripped, checksum dropped, token removed, alert metadata merged."""
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        resp = await post_event(app, flux_request())
        assert resp.status == 202
        assert resp.headers["X-RateLimit-Limit"] == "1"
        [req] = await sink.wait_for(1)
        assert req.method == "POST"
        assert req.path == f"/hook/{CANARY}"
        assert req.headers["Content-Type"] == "application/json"
        assert req.headers["gotk-component"] == "kustomize-controller"
        assert req.headers["X-Team"] == "platform"
        expected = Event.model_validate(
            {
                "involvedObject": {
                    "kind": "Kustomization",
                    "namespace": "flux-system",
                    "name": "apps",
                    "uid": "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9",
                    "apiVersion": f"{KS}/v1",
                    "resourceVersion": "81123",
                },
                "severity": "info",
                "timestamp": "2026-11-22T10:00:00Z",
                "message": "Reconciliation finished",
                "reason": "ReconciliationSucceeded",
                "metadata": {
                    "revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41",
                    "deployment": "blue",
                    "cluster": "prod-eu",
                },
                "reportingController": "kustomize-controller",
                "reportingInstance": "kustomize-controller-7f5d9c7b8-x2x4k",
            }
        )
        assert req.body == expected.to_go_json()
        assert await app.dispatcher.wait_idle(5)
        assert metric(app, "notification_delivered_total", provider_type="generic") == 1


async def test_generic_hmac_signature_verifies(tmp_path: Path) -> None:
    """§4.1 generic-hmac: X-Signature = sha256=<hex HMAC-SHA256(token, exact body)>."""
    async with (
        CaptureServer() as sink,
        running_app(manifests(tmp_path, sink.url, ptype="generic-hmac")) as app,
    ):
        assert (await post_event(app, flux_request())).status == 202
        [req] = await sink.wait_for(1)
        expected = "sha256=" + hmac.new(CANARY.encode(), req.body, hashlib.sha256).hexdigest()
        assert req.headers["X-Signature"] == expected


async def test_status_codes_of_the_ingest_endpoint(tmp_path: Path) -> None:
    """§3.2: 413 over 3 MiB (exactly 3 MiB accepted), 400 bad JSON, 429 duplicate, 405 not POST."""
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        assert (await post_event(app, b"{not json")).status == 400
        assert (await post_event(app, b'{"metadata": {"k": 1}}')).status == 400
        cap = 3 * 1024 * 1024
        base = flux_request(message="")
        padding = cap - len(base)
        exact = flux_request(message="x" * padding)
        assert len(exact) == cap
        assert (await post_event(app, exact)).status == 202
        assert (await post_event(app, flux_request(message="y" * (padding + 1)))).status == 413
        first = await post_event(app, flux_request(message="dup"))
        second = await post_event(app, flux_request(message="dup"))
        assert (first.status, second.status) == (202, 429)
        assert second.headers["X-RateLimit-Remaining"] == "0"
        assert second.headers["Retry-After"] == second.headers["X-RateLimit-Reset"]
        # a different revision is a different event (§3.3)
        other = await post_event(
            app, flux_request(message="dup", **{f"{KS}/revision": "main@sha1:" + "1" * 40})
        )
        assert other.status == 202
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{app.ports['events']}/") as resp:
                assert resp.status == 405
        assert metric(app, "notification_events_rejected_total", reason="rate_limited") == 1
        assert metric(app, "notification_events_rejected_total", reason="too_large") == 1
        assert (
            metric(
                app,
                "gotk_event_http_request_duration_seconds_count",
                service="",
                handler="/",
                method="POST",
                code="202",
            )
            >= 3
        )


async def test_retries_5xx_then_succeeds(tmp_path: Path) -> None:
    """§4.0: 500/502/503 are retried within the timeout."""
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        sink.script(Reply(500), Reply(502), Reply(503))
        assert (await post_event(app, flux_request())).status == 202
        requests = await sink.wait_for(4)
        assert len(requests) == 4
        assert await app.dispatcher.wait_idle(5)
        assert metric(app, "notification_delivered_total", provider_type="generic") == 1


async def test_4xx_is_not_retried_and_failure_is_evented_without_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """§3.6 step 11 + §4.0: 400 is final; Warning NotificationDispatchFailed on the Alert, token masked."""
    caplog.set_level(logging.DEBUG)
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        sink.script(Reply(400, body=f"bad request, your token {CANARY} is wrong"))
        assert (await post_event(app, flux_request())).status == 202
        await sink.wait_for(1)
        assert await app.dispatcher.wait_idle(5)
        await asyncio.sleep(0.05)
        assert len(sink.requests) == 1
        assert (
            metric(app, "notification_delivery_failed_total", provider_type="generic", reason="http_400") == 1
        )
        events = [e for e in local_cluster(app).events if e[2] == "NotificationDispatchFailed"]
        assert len(events) == 1
        ref, type_, _, message = events[0]
        assert (ref.kind, ref.name, type_) == ("Alert", "all", "Warning")
        assert message.startswith("failed to send notification for Kustomization/flux-system/apps:")
        assert "400" in message
        assert CANARY not in message
        assert all(CANARY not in r.getMessage() for r in caplog.records)
        # Flux's level and structured keys for a failed delivery (issue 16): error, never warning.
        [failed] = [r for r in caplog.records if r.getMessage().startswith("failed to send notification")]
        assert failed.levelno == logging.ERROR
        keys = failed.__dict__["fields"]
        assert (keys["name"], keys["namespace"], keys["reconciler kind"]) == ("all", "flux-system", "Alert")
        assert "400" in keys["error"] and CANARY not in keys["error"]


async def test_provider_timeout_is_honoured(tmp_path: Path) -> None:
    """§3.6 step 11: spec.timeout bounds all attempts of one delivery."""
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url, timeout="1s")) as app:
        sink.script(*[Reply(delay=5)] * 5)
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert (await post_event(app, flux_request())).status == 202
        assert await app.dispatcher.wait_idle(4)
        assert loop.time() - start < 2.5
        assert (
            metric(app, "notification_delivery_failed_total", provider_type="generic", reason="timeout") == 1
        )


async def test_connection_refused_is_retried_and_counted(tmp_path: Path) -> None:
    async with running_app(manifests(tmp_path, "http://127.0.0.1:9", timeout="2s")) as app:
        assert (await post_event(app, flux_request())).status == 202
        assert await app.dispatcher.wait_idle(5)
        assert app.http.attempts == 5
        assert (
            metric(app, "notification_delivery_failed_total", provider_type="generic", reason="connection")
            == 1
        )


async def test_exclusion_list_and_unmatched_events(tmp_path: Path) -> None:
    """§3.5: exclusion list drops; events of other kinds or namespaces match nothing."""
    async with (
        CaptureServer() as sink,
        running_app(manifests(tmp_path, sink.url, extra_alert='exclusionList: ["^skip"]')) as app,
    ):
        assert (await post_event(app, flux_request(message="skip me"))).status == 202
        other_ns = json.loads(flux_request(message="other ns"))
        other_ns["involvedObject"]["namespace"] = "default"
        assert (await post_event(app, json.dumps(other_ns).encode())).status == 202
        assert (await post_event(app, flux_request(message="deliver me"))).status == 202
        [req] = await sink.wait_for(1)
        assert req.json()["message"] == "deliver me"
        await asyncio.sleep(0.1)
        assert len(sink.requests) == 1
        assert metric(app, "notification_events_unmatched_total") == 2  # excluded + other namespace


async def test_cross_namespace_refs_blocked(tmp_path: Path) -> None:
    """§3.6 step 1 / checklist C8: not sent, Warning on the Alert."""
    write(
        tmp_path,
        "objects.yaml",
        """\
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {name: sink, namespace: alerts}
        spec: {type: generic, address: "http://127.0.0.1:9/x"}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {name: remote, namespace: alerts}
        spec:
          providerRef: {name: sink}
          eventSources: [{kind: Kustomization, name: '*', namespace: flux-system}]
        """,
    )
    async with running_app(tmp_path, events=EventSettings(no_cross_namespace_refs=True)) as app:
        assert (await post_event(app, flux_request())).status == 202
        assert await app.dispatcher.wait_idle(5)
        await asyncio.sleep(0.05)
        assert app.http.attempts == 0
        [(ref, _, _reason, message)] = [
            e for e in local_cluster(app).events if e[2] == "NotificationDispatchFailed"
        ]
        assert ref.name == "remote"
        assert "cross-namespace references have been blocked" in message


async def test_manifest_change_is_picked_up(tmp_path: Path) -> None:
    """Local mode reloads on change: a suspended Alert stops delivery; invalid documents are skipped."""
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        assert (await post_event(app, flux_request(message="one"))).status == 202
        await sink.wait_for(1)
        manifests(tmp_path, sink.url, extra_alert="suspend: true")
        write(
            tmp_path,
            "broken.yaml",
            "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata: {name: x}\nspec: {}\n",
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while loop.time() < deadline:
            alert = app.store.alert("flux-system", "all")
            if alert is not None and alert.spec.suspend:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("manifest change not picked up")
        assert (await post_event(app, flux_request(message="two"))).status == 202
        await asyncio.sleep(0.2)
        assert [r.json()["message"] for r in sink.requests] == ["one"]


async def test_overload_drops_are_counted_never_silent(tmp_path: Path) -> None:
    """Beyond Flux: a cap on pending notifications; what it refuses is in notification_dropped_total."""
    async with (
        CaptureServer() as sink,
        running_app(
            manifests(tmp_path, sink.url),
            events=EventSettings(max_pending=3, provider_concurrency=1),
        ) as app,
    ):
        sink.on("POST", ".*", Reply(delay=0.3))
        for i in range(10):
            assert (await post_event(app, flux_request(message=f"m{i}"))).status == 202
        assert await app.dispatcher.wait_idle(10)
        delivered = metric(app, "notification_delivered_total", provider_type="generic")
        dropped = metric(app, "notification_dropped_total", provider_type="generic", reason="overload")
        assert delivered == 3
        assert dropped == 7
        assert len(sink.requests) == 3


async def test_shutdown_drains_in_flight_deliveries(tmp_path: Path) -> None:
    """SIGTERM semantics (app.stop): listeners close, in-flight deliveries finish within the grace period."""
    async with CaptureServer() as sink:
        sink.on("POST", ".*", Reply(delay=0.5))
        async with running_app(manifests(tmp_path, sink.url), grace=5) as app:
            for i in range(3):
                assert (await post_event(app, flux_request(message=f"m{i}"))).status == 202
        # leaving the context ran app.stop(): all three were delivered, none abandoned
        assert len(sink.requests) == 3
        assert metric(app, "notification_delivered_total", provider_type="generic") == 3
