"""The UI listener's JSON API (server/ui/api.py, issue 27 item 2) on a real controller process in local mode.

The installed command runs the controller with ``--ui-addr``; real local HTTP servers are its Providers'
endpoints: one accepts, one refuses with 400 (the memory store then gives up: ``failed``). Events are
POSTed to the real event listener; the API must answer what happened — delivered, failed, unmatched, held
by a Silence — through every endpoint and filter, refuse bad parameters with a 400 naming them, refuse
other methods with 405, stream a new record to a subscriber live, answer 503 past the subscriber cap, and
never carry a Secret's value (the canaries below are in the Providers' Secrets: URL path, header, token).
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.test_process import wait_ready
from tests.support.capture import CaptureServer, Reply
from tests.support.ports import free_port, listener_ports

SCRIPT = Path(sys.executable).parent / "notification-controller"
NS = "flux-system"
CANARY_PATH = "canary-path-7f3a9c1e5b"
CANARY_HEADER = "canary-header-2d8e4b6f0a"
CANARY_TOKEN = "canary-token-9c4e1a7b3d"
CANARIES = (CANARY_PATH, CANARY_HEADER, CANARY_TOKEN)


def manifests(ok_url: str, bad_url: str) -> str:
    """Two Providers (their addresses and headers in Secrets), an Alert each, and an active Silence."""
    return textwrap.dedent(
        f"""
        apiVersion: v1
        kind: Secret
        metadata: {{name: ok-secret, namespace: {NS}}}
        stringData:
          address: {ok_url}/{CANARY_PATH}
          token: {CANARY_TOKEN}
          headers: |
            X-Api-Key: {CANARY_HEADER}
        ---
        apiVersion: v1
        kind: Secret
        metadata: {{name: bad-secret, namespace: {NS}}}
        stringData:
          address: {bad_url}/{CANARY_PATH}
          headers: |
            X-Api-Key: {CANARY_HEADER}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: ok, namespace: {NS}}}
        spec: {{type: generic, secretRef: {{name: ok-secret}}, timeout: 5s}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: bad, namespace: {NS}}}
        spec: {{type: generic, secretRef: {{name: bad-secret}}, timeout: 5s}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: ok, namespace: {NS}}}
        spec:
          providerRef: {{name: ok}}
          eventSources: [{{kind: Kustomization, name: apps}}, {{kind: Kustomization, name: muted}}]
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: bad, namespace: {NS}}}
        spec:
          providerRef: {{name: bad}}
          eventSources: [{{kind: Kustomization, name: broken}}]
        ---
        apiVersion: notification-controller.io/v1alpha1
        kind: Silence
        metadata: {{name: hush, namespace: {NS}}}
        spec:
          matchers: [{{name: name, value: muted}}]
          startsAt: "2020-01-01T00:00:00Z"
          endsAt: "2099-01-01T00:00:00Z"
          comment: maintenance
          createdBy: test
        """
    )


def event(name: str, message: str = "Reconciliation finished", kind: str = "Kustomization") -> bytes:
    return json.dumps(
        {
            "involvedObject": {"kind": kind, "namespace": NS, "name": name, "apiVersion": "v1"},
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": {"revision": "main@sha1:0c9c2e41"},
            "reportingController": "kustomize-controller",
        }
    ).encode()


@dataclass
class Controller:
    ui: str  # http://127.0.0.1:PORT
    events: str
    health: str
    ok: CaptureServer
    bad: CaptureServer
    proc: asyncio.subprocess.Process

    async def post(self, body: bytes) -> int:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                self.events, data=body, headers={"Content-Type": "application/json"}
            ) as r:
                return r.status

    async def get(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], Any]:
        async with aiohttp.ClientSession() as session:
            async with session.request(method, self.ui + path) as resp:
                body = await resp.read()
                data = json.loads(body) if body else None
                return resp.status, dict(resp.headers), data

    async def records(self, query: str = "", n: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
        """``/api/history?query``'s items once there are at least ``n`` (recording is asynchronous)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            status, _, data = await self.get("/api/history" + (f"?{query}" if query else ""))
            assert status == 200, data
            if len(data["items"]) >= n or loop.time() > deadline:
                return list(data["items"])
            await asyncio.sleep(0.1)


@asynccontextmanager
async def running_controller(
    tmp_path: Path, *extra: str, refusal: str = "bad request: no such channel"
) -> AsyncIterator[Controller]:
    """The installed command in local mode with ``--ui-addr``, its Providers' endpoints real local servers:
    ``ok`` accepts, ``bad`` answers 400 with ``refusal`` (a permanent refusal)."""
    async with CaptureServer() as ok, CaptureServer() as bad:
        bad.on("*", "/", Reply(status=400, body=refusal))
        directory = tmp_path / "manifests"
        directory.mkdir(exist_ok=True)
        (directory / "all.yaml").write_text(manifests(ok.url, bad.url))
        ports = listener_ports()
        ui_port = free_port()
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            "--manifests",
            str(directory),
            f"--events-addr=127.0.0.1:{ports['events']}",
            f"--receiverAddr=127.0.0.1:{ports['receiver']}",
            f"--metrics-addr=127.0.0.1:{ports['metrics']}",
            f"--health-addr=127.0.0.1:{ports['health']}",
            f"--ui-addr=127.0.0.1:{ui_port}",
            *extra,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            await wait_ready(f"http://127.0.0.1:{ports['health']}/readyz", timeout=60)
            yield Controller(
                ui=f"http://127.0.0.1:{ui_port}",
                events=f"http://127.0.0.1:{ports['events']}/",
                health=f"http://127.0.0.1:{ports['health']}",
                ok=ok,
                bad=bad,
                proc=proc,
            )
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def post_the_four(c: Controller) -> None:
    """delivered (apps), failed (broken: 400), suppressed (muted: the Silence), unmatched (a GitRepository no
    Alert names), then apps again: a duplicate (429)."""
    for body in (event("apps"), event("broken"), event("muted"), event("nobody", kind="GitRepository")):
        assert await c.post(body) == 202
    assert await c.post(event("apps")) == 429


async def read_stream(resp: aiohttp.ClientResponse, until: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The records of a live stream, until ``until`` of them arrived."""
    records: list[dict[str, Any]] = []
    buffer = b""
    async with asyncio.timeout(timeout):
        while len(records) < until:
            buffer += await resp.content.readany()
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                lines = block.decode().split("\n")
                if lines[0] == "event: record":
                    records.append(json.loads(lines[-1].removeprefix("data: ")))
    return records


def no_canary(text: str) -> None:
    for canary in CANARIES:
        assert canary not in text, canary


async def test_every_endpoint_answers_what_happened_and_no_secret_shows(tmp_path: Path) -> None:
    async with running_controller(tmp_path) as c:
        answers: list[str] = []  # every body the API gave, checked for canaries at the end
        async with aiohttp.ClientSession() as session:
            async with session.get(c.ui + "/api/stream") as stream:
                assert stream.status == 200
                assert stream.headers["Content-Type"].startswith("text/event-stream")
                await post_the_four(c)
                live = await read_stream(stream, 5)
                answers.append(json.dumps(live))
        # the requests really carried the Secrets' values: the canaries were in play
        [refused] = await c.bad.wait_for(1, timeout=60)
        assert CANARY_PATH in refused.path and refused.headers["X-Api-Key"] == CANARY_HEADER

        items = await c.records(n=5)
        answers.append(json.dumps(items))
        outcomes = {(r["object"], r["alert"], r["outcome"]) for r in items}
        assert {
            ("Kustomization/flux-system/apps", "flux-system/ok", "delivered"),
            ("Kustomization/flux-system/broken", "flux-system/bad", "failed"),
            ("Kustomization/flux-system/muted", "flux-system/ok", "suppressed"),
            ("GitRepository/flux-system/nobody", "", "unmatched"),
            ("Kustomization/flux-system/apps", "", "duplicate"),
        } <= outcomes
        assert [r["id"] for r in items] == sorted((r["id"] for r in items), reverse=True)  # newest first
        assert {r["outcome"] for r in live} >= {"delivered", "failed", "suppressed", "unmatched", "duplicate"}

        # filters, each alone
        [failed] = await c.records("outcome=failed")
        assert (failed["provider"], failed["providerType"], failed["statusCode"]) == (
            "flux-system/bad",
            "generic",
            400,
        )
        assert failed["attempt"] >= 1 and "400" in failed["detail"] and failed["request"].startswith("POST ")
        [suppressed] = await c.records("outcome=suppressed")
        assert suppressed["stage"].startswith("silence") and "hush" in suppressed["detail"]
        assert {r["alert"] for r in await c.records("alert=flux-system/ok")} == {"flux-system/ok"}
        assert {r["provider"] for r in await c.records("provider=flux-system/bad")} == {"flux-system/bad"}
        apps = await c.records("object=" + urllib.parse.quote("Kustomization/flux-system/apps"))
        assert {r["outcome"] for r in apps} >= {"delivered", "duplicate"}
        assert {r["object"] for r in apps} == {"Kustomization/flux-system/apps"}
        assert [r["id"] for r in await c.records("limit=1")] == [items[0]["id"]]
        assert len(await c.records("since=1h")) == len(items)
        assert await c.records("until=2020-01-01T00:00:00Z", n=0) == []
        assert await c.records("since=2099-01-01T00:00:00Z", n=0) == []

        # one event, one notification
        status, headers, by_event = await c.get(f"/api/events/{failed['eventId']}")
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        assert by_event["eventId"] == failed["eventId"]
        assert {r["eventId"] for r in by_event["records"]} == {failed["eventId"]}
        assert failed["id"] in {r["id"] for r in by_event["records"]}
        status, _, by_notification = await c.get(f"/api/notifications/{failed['notificationId']}")
        assert status == 200 and by_notification["notificationId"] == failed["notificationId"]
        assert [r["id"] for r in by_notification["records"]] == [failed["id"]]
        answers += [json.dumps(by_event), json.dumps(by_notification)]

        # the overview
        status, headers, overview = await c.get("/api/overview")
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        answers.append(json.dumps(overview))
        rows = {(o["kind"], o["name"]): o for o in overview["objects"]}
        assert rows[("Alert", "ok")]["ready"] == "True" and rows[("Provider", "bad")]["ready"] == "True"
        providers = {p["provider"]: p for p in overview["providers"]}
        assert (
            providers["flux-system/ok"]["lastSuccess"] and providers["flux-system/ok"]["lastFailure"] is None
        )
        bad = providers["flux-system/bad"]
        assert bad["lastSuccess"] is None and bad["lastFailure"] and "400" in bad["lastError"]
        assert bad["type"] == "generic" and bad["outboxDepth"] is None  # memory store: no outbox
        assert overview["deadLetters"] == []
        [hush] = overview["silences"]
        assert (hush["name"], hush["state"], hush["comment"], hush["createdBy"]) == (
            "hush",
            "Active",
            "maintenance",
            "test",
        )
        assert hush["matchers"] == ["name=muted"]

        for body in answers:
            no_canary(body)


BAD = [
    ("/api/history?outcome=exploded", 400, "outcome: 'exploded' is not one of"),
    ("/api/history?since=yesterday", 400, "since:"),
    ("/api/history?until=soon", 400, "until:"),
    ("/api/history?since=1h&until=2h", 400, "until: earlier than since"),
    ("/api/history?limit=1001", 400, "limit: must be between 1 and 1000"),
    ("/api/history?limit=-1", 400, "limit:"),
    ("/api/history?object=apps", 400, "object: 'apps' is not KIND/NAMESPACE/NAME"),
    ("/api/history?alert=x", 400, "alert:"),
    ("/api/history?provider=a/b/c", 400, "provider:"),
    ("/api/history?color=red", 400, "color: unknown parameter"),
    ("/api/history?outcome=failed&outcome=delivered", 400, "outcome: given more than once"),
    ("/api/stream?since=1h", 400, "since: unknown parameter"),
    ("/api/events/%3Cscript%3E", 400, "event: '<script>' is not an id"),
    ("/api/events/0000", 404, "no records of event '0000'"),
    ("/api/notifications/ffff", 404, "no records of notification 'ffff'"),
    ("/api/overview?x=1", 400, "x: unknown parameter"),
    ("/api/nope", 404, "no such API path"),
]


async def test_bad_requests_other_methods_and_too_many_streams_are_refused_in_json(tmp_path: Path) -> None:
    async with running_controller(tmp_path) as c:
        for path, status, needle in BAD:
            got, headers, data = await c.get(path)
            assert (got, headers["Content-Type"].split(";")[0]) == (status, "application/json"), path
            assert needle in data["error"] and "Traceback" not in data["error"], (path, data)
        for path in ("/api/history", "/api/overview", "/api/stream", "/api/events/x"):
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                got, headers, data = await c.get(path, method)
                assert (got, headers.get("Allow")) == (405, "GET, HEAD"), (method, path)
                assert data["error"].startswith(f"method {method} not allowed")
            got, headers, data = await c.get(path.replace("/x", "/" + "0" * 8), "HEAD")
            assert got in (200, 404) and data is None  # HEAD: headers only

        # the live streams are bounded: every slot taken, one more is a 503; a closed one frees its slot
        from notification_controller.server.ui.context import MAX_STREAMS

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            streams = [await session.get(c.ui + "/api/stream") for _ in range(MAX_STREAMS)]
            assert {s.status for s in streams} == {200}
            async with session.get(c.ui + "/api/stream") as refused:
                assert refused.status == 503 and "too many live streams" in (await refused.json())["error"]
            streams.pop().close()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while True:  # the server notices the closed one at its next write: a new record is one
                assert await c.post(event("apps", message=f"nudge {loop.time()}")) in (202, 429)
                async with session.get(c.ui + "/api/stream") as again:
                    if again.status == 200:
                        break
                assert loop.time() < deadline, "a closed stream never gave its slot back"
                await asyncio.sleep(0.5)
            for s in streams:
                s.close()
