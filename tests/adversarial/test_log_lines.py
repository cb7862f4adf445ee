"""Logs an operator can filter by object, one line per failure (issue 25 item 5: "JSON logs carry
kind/name/namespace inside msg; each failure is logged twice, a dead letter four times; a deliberate hook
veto is logged at error").

The real controller process (local mode, ``--log-encoding=json``, where Kubernetes Events also go to the
log) with:

* a Provider that answers 500 (one failed delivery) and one that answers 400 on a SQLite store (one dead
  letter: the attempt's failure and the dead-lettering, one line each);
* an Alert whose pre-dispatch hook vetoes (``{"drop": true}``): one line, at info;
* reconciles of every object: their lines carry controller-runtime's keys and a ``reconcileID``.

Each line about one of these objects carries Flux's keys as JSON keys: ``kind``, ``name``, ``namespace``,
``controllerKind``, ``controllerGroup``, controller-runtime's ``{"<Kind>": {"name", "namespace"}}``, and the
Provider as ``provider`` (``namespace/name``) for deliveries.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.capture import CaptureServer, Reply
from tests.support.controllers import ControllerProcess, event, post_event

pytestmark = pytest.mark.timeout(120)

GROUP = "notification.toolkit.fluxcd.io"


def alert(name: str, provider: str, source: str, hooks: str = "") -> str:
    return f"""---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: flux-system}}
spec:
  providerRef: {{name: {provider}}}
  eventSources: [{{kind: Kustomization, name: {source}}}]{hooks}
"""


def provider(name: str, url: str) -> str:
    return f"""---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: flux-system}}
spec: {{type: generic, address: "{url}"}}
"""


def lines(controller: ControllerProcess) -> list[dict[str, Any]]:
    assert controller.log_path is not None
    out = []
    for raw in controller.log_path.read_text().splitlines():
        if raw.startswith("{"):
            out.append(json.loads(raw))
    return out


def about(records: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    return [r for r in records if text in r["msg"]]


def assert_object_keys(record: dict[str, Any], kind: str, name: str) -> None:
    assert record["kind"] == record["controllerKind"] == kind, record
    assert (record["name"], record["namespace"]) == (name, "flux-system"), record
    assert record["controllerGroup"] == GROUP, record
    assert record[kind] == {"name": name, "namespace": "flux-system"}, record


async def wait_metric(controller: ControllerProcess, name: str, value: float, **labels: str) -> None:
    async with asyncio.timeout(30):
        while await controller.metric(name, **labels) < value:
            await asyncio.sleep(0.1)


async def start(tmp_path: Path, docs: str, *args: str) -> ControllerProcess:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "all.yaml").write_text(docs, encoding="utf-8")
    controller = ControllerProcess(manifests, list(args), log_path=tmp_path / "controller.log")
    await controller.start()
    return controller


async def test_a_failure_and_a_veto_are_one_line_each_with_flux_keys(tmp_path: Path) -> None:
    async with CaptureServer() as server:
        server.on("POST", "/fail", Reply(500, {"error": "down"}))
        server.on("POST", "/ok", Reply(200, {}))
        server.on("POST", "/veto", Reply(200, {"drop": True, "message": "outside office hours"}))
        hooks = f"""
  hooks:
    - name: office-hours
      address: {{uri: "{server.url}/veto"}}
      capabilities: [pre-dispatch]"""
        docs = provider("failing", f"{server.url}/fail") + alert("failing", "failing", "broken")
        docs += provider("ok", f"{server.url}/ok") + alert("vetoed", "ok", "quiet", hooks)
        controller = await start(tmp_path, docs)
        try:
            async with aiohttp.ClientSession() as session:
                for name in ("broken", "quiet"):
                    assert await post_event(session, controller.events_url, event(name)) == 202
            await wait_metric(controller, "notification_delivery_failed_total", 1)
            await wait_metric(controller, "notification_dropped_total", 1, reason="hook")
        finally:
            await controller.stop()
        records = lines(controller)

        failure = about(records, "Kustomization/flux-system/broken")
        assert [r["level"] for r in failure] == ["error"], failure  # was two: the line and its Event
        assert_object_keys(failure[0], "Alert", "failing")
        assert failure[0]["provider"] == "flux-system/failing"
        assert "500" in failure[0]["error"]

        veto = about(records, "Kustomization/flux-system/quiet")
        assert [r["level"] for r in veto] == ["info"], veto  # a decision, not an error; once
        assert "outside office hours" in veto[0]["msg"]
        assert_object_keys(veto[0], "Alert", "vetoed")

        # the reconciles: every Event line names its object in keys and comes with the reconcile's id
        ready = about(records, "Alert is ready")
        assert {r["name"] for r in ready} == {"failing", "vetoed"}
        for record in ready:
            assert_object_keys(record, "Alert", record["name"])
            assert len(record["reconcileID"]) == 36  # a UUID, as controller-runtime's
        assert len({r["reconcileID"] for r in ready}) == 2


async def test_a_dead_letter_is_the_failure_and_the_dead_letter_once_each(tmp_path: Path) -> None:
    async with CaptureServer() as server:
        server.on("POST", "/refuse", Reply(400, {"error": "bad request"}))
        docs = provider("refusing", f"{server.url}/refuse") + alert("refusing", "refusing", "rejected")
        controller = await start(tmp_path, docs, f"--store=sqlite:{tmp_path / 'state.db'}")
        try:
            async with aiohttp.ClientSession() as session:
                async with asyncio.timeout(30):  # 503 until the store is open
                    while await post_event(session, controller.events_url, event("rejected")) != 202:
                        await asyncio.sleep(0.1)
            await wait_metric(controller, "notification_dead_letters_total", 1)
        finally:
            await controller.stop()
        records = about(lines(controller), "Kustomization/flux-system/rejected")
        assert [r["level"] for r in records] == ["error", "error"], records  # was four
        failure, dead = records
        assert "dead letter" not in failure["msg"] and "dead letter" in dead["msg"]
        for record in records:
            assert_object_keys(record, "Alert", "refusing")
            assert record["provider"] == "flux-system/refusing"
        assert dead["reason"] == "permanent"
