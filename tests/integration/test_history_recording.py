"""The history records what the pipeline decided (issue 27 item 1): real controller processes in local mode,
a real HTTP sink, read back through the UI listener's read-only API (``/api/history``) and the store.

* memory store: delivered (status, latency, masked request), suppressed by noise control and by a Silence,
  dropped by a Flux rule, unmatched, duplicate (429) and refused (400) — each once, with the right fields,
  and no Secret value or token of an address in any record;
* SQLite: failed → retrying → delivered, and → dead_lettered; the history survives SIGKILL and a restart;
* NATS: two replicas on one nats-server answer for each other.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.controllers import ControllerProcess, FlakySink, event, post_event
from tests.support.nats_server import run_nats_server
from tests.support.ports import free_port

NS = "flux-system"
TOKEN = "ghp_CANARYtoken0123456789abcdefABCDEF"
PATH_SECRET = "T0001/B0002/CANARYpathSECRET42xyz"


def manifests(directory: Path, sink_url: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "all.yaml").write_text(
        f"""apiVersion: v1
kind: Secret
metadata: {{name: gh, namespace: {NS}}}
stringData: {{token: {TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: {NS}}}
spec: {{type: generic, address: "{sink_url}/{PATH_SECRET}", timeout: 2s}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: github, namespace: {NS}}}
spec: {{type: github, address: "https://github.com/org/repo", secretRef: {{name: gh}}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: all, namespace: {NS}}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: info
  eventSources: [{{kind: Kustomization, name: "*"}}]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: noisy, namespace: {NS}}}
spec:
  providerRef: {{name: sink}}
  eventSources: [{{kind: HelmRelease, name: "*"}}]
  threshold: {{count: 3, within: 10m}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: commits, namespace: {NS}}}
spec:
  providerRef: {{name: github}}
  eventSources: [{{kind: GitRepository, name: "*"}}]
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata: {{name: freeze, namespace: {NS}}}
spec:
  matchers: [{{name: name, value: frozen}}]
  startsAt: "2020-01-01T00:00:00Z"
  endsAt: "2099-01-01T00:00:00Z"
  comment: deploy freeze
""",
        encoding="utf-8",
    )
    return directory


def of_kind(kind: str, name: str, message: str = "m") -> dict[str, Any]:
    body = event(name, message)
    body["involvedObject"] = {**body["involvedObject"], "kind": kind}
    return body


class Controller(ControllerProcess):
    ui = 0

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.ui}/api"

    async def start(self, *, wait_ready: bool = True, timeout: float = 30.0) -> None:
        self.ui = free_port()
        self.args = [a for a in self.args if not a.startswith("--ui-addr")] + [
            f"--ui-addr=127.0.0.1:{self.ui}"
        ]
        await super().start(wait_ready=wait_ready, timeout=timeout)

    async def history(self, **query: str) -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session, session.get(f"{self.api}/history", params=query) as r:
            assert r.status == 200, await r.text()
            items: list[dict[str, Any]] = (await r.json())["items"]
            return items

    async def wait_for(self, n: int, timeout: float = 30, **query: str) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = await self.history(**query)
            if len(found) >= n:
                return found
            assert loop.time() < deadline, (query, found, self.log())
            await asyncio.sleep(0.1)


async def test_every_decision_is_recorded_once_in_the_vocabulary(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        proc = Controller(manifests(tmp_path / "m", sink.url), log_path=tmp_path / "c.log")
        await proc.start()
        try:
            async with aiohttp.ClientSession() as session:
                assert await post_event(session, proc.events_url, event("apps", f"with {TOKEN}")) == 202
                for i in range(2):  # the threshold holds the first two of three
                    podinfo = of_kind("HelmRelease", "podinfo", f"upgrade {i}")
                    assert await post_event(session, proc.events_url, podinfo) == 202
                assert await post_event(session, proc.events_url, event("frozen")) == 202  # the Silence
                assert await post_event(session, proc.events_url, of_kind("GitRepository", "src")) == 202
                assert await post_event(session, proc.events_url, of_kind("Bucket", "nobody")) == 202
                assert await post_event(session, proc.events_url, event("twice")) == 202
                assert await post_event(session, proc.events_url, event("twice")) == 429
                async with session.post(proc.events_url, data=b"{not json") as resp:
                    assert resp.status == 400

            (delivered,) = await proc.wait_for(1, outcome="delivered", object=f"Kustomization/{NS}/apps")
            assert delivered["alert"] == f"{NS}/all" and delivered["provider"] == f"{NS}/sink"
            assert delivered["providerType"] == "generic" and delivered["attempt"] == 1
            assert delivered["statusCode"] == 200 and delivered["latencyMs"] > 0
            assert (
                delivered["request"].startswith("POST http://127.0.0.1:") and "/***" in delivered["request"]
            )
            assert (
                delivered["message"] == "with *****" and delivered["eventId"] and delivered["notificationId"]
            )

            held = await proc.wait_for(2, outcome="suppressed", alert=f"{NS}/noisy")
            assert {r["stage"] for r in held} == {"threshold"} and len(held) == 2
            (silenced,) = await proc.wait_for(1, outcome="suppressed", object=f"Kustomization/{NS}/frozen")
            assert silenced["stage"] == "silenced" and f"{NS}/freeze" in silenced["detail"]
            (dropped,) = await proc.wait_for(1, outcome="dropped")
            assert dropped["stage"] == "commit_status" and dropped["alert"] == f"{NS}/commits"
            assert dropped["provider"] == f"{NS}/github" and dropped["object"] == f"GitRepository/{NS}/src"
            (unmatched,) = await proc.wait_for(1, outcome="unmatched")
            assert unmatched["object"] == f"Bucket/{NS}/nobody" and unmatched["alert"] == ""
            (duplicate,) = await proc.wait_for(1, outcome="duplicate")
            assert duplicate["object"] == f"Kustomization/{NS}/twice" and duplicate["statusCode"] == 429
            (refused,) = await proc.wait_for(1, outcome="refused")
            assert (
                refused["statusCode"] == 400 and refused["stage"] == "bad_request" and refused["object"] == ""
            )

            everything = await proc.history(limit="1000")
            by_event: dict[str, list[str]] = {}
            for r in everything:
                by_event.setdefault(r["eventId"], []).append(r["outcome"])
            assert by_event[delivered["eventId"]] == ["delivered"]  # once, not also "queued" or twice
            text = json.dumps(everything)
            assert TOKEN not in text and PATH_SECRET not in text and "CANARY" not in text
            assert await proc.metric("notification_history_records_total", outcome="suppressed") == 3
            assert await proc.metric("notification_history_dropped_total") == 0
        finally:
            assert await proc.stop() == 0


SQLITE_FAST = ["--delivery-retry-base=100ms", "--delivery-retry-cap=200ms", "--store-ack-wait=2s"]


async def test_sqlite_retries_dead_letters_and_survives_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    async with FlakySink() as sink:
        proc = Controller(
            manifests(tmp_path / "m", sink.url),
            [f"--store=sqlite:{db}", "--delivery-max-age=4s", *SQLITE_FAST],
            log_path=tmp_path / "c.log",
        )
        await proc.start()
        try:
            sink.failing = True
            async with aiohttp.ClientSession() as session:
                assert await post_event(session, proc.events_url, event("flaky")) == 202
            retrying = await proc.wait_for(2, outcome="retrying")
            assert all(r["statusCode"] == 503 and "down for maintenance" in r["detail"] for r in retrying)
            assert sorted(r["attempt"] for r in retrying)[:2] == [1, 2]
            sink.failing = False
            (delivered,) = await proc.wait_for(1, outcome="delivered")
            assert delivered["attempt"] >= 3 and delivered["eventId"] == retrying[0]["eventId"]
            assert delivered["notificationId"] == retrying[0]["notificationId"]

            sink.failing = True
            async with aiohttp.ClientSession() as session:
                assert await post_event(session, proc.events_url, event("doomed")) == 202
            (dead,) = await proc.wait_for(1, outcome="dead_lettered", timeout=40)
            assert dead["stage"] == "max-age" and dead["object"] == f"Kustomization/{NS}/doomed"
            assert dead["attempt"] >= 1
            kept = await proc.history(limit="1000")
            await written(db, {r["id"] for r in kept})  # out of the recorder's buffer, in the file
        except BaseException:
            await proc.stop()
            raise
        await proc.kill()  # SIGKILL: what was written stays
        sink.failing = False
        await proc.start()
        try:
            after = await proc.history(limit="1000")
            assert {r["id"] for r in kept} <= {r["id"] for r in after}
            conn = sqlite3.connect(db)
            try:
                (rows,) = conn.execute("SELECT COUNT(*) FROM history").fetchone()
            finally:
                conn.close()
            assert rows >= len(kept)
        finally:
            assert await proc.stop() == 0


async def written(db: Path, ids: set[str], timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        conn = sqlite3.connect(db)
        try:
            stored = {row[0] for row in conn.execute("SELECT id FROM history")}
        finally:
            conn.close()
        if ids <= stored:
            return
        assert loop.time() < deadline, ids - stored
        await asyncio.sleep(0.1)


async def test_two_replicas_on_nats_share_one_history(tmp_path: Path) -> None:
    async with run_nats_server(jetstream=True) as nats_server, FlakySink() as sink:
        args = [f"--store=nats://127.0.0.1:{nats_server.port}", *SQLITE_FAST]
        m = manifests(tmp_path / "m", sink.url)
        a = Controller(m, list(args), log_path=tmp_path / "a.log")
        b = Controller(m, list(args), log_path=tmp_path / "b.log")
        try:
            await a.start()
            await b.start()
            async with aiohttp.ClientSession() as session:
                assert await post_event(session, a.events_url, event("via-a")) == 202
                assert await post_event(session, b.events_url, of_kind("Bucket", "via-b")) == 202
            (delivered,) = await b.wait_for(1, outcome="delivered", object=f"Kustomization/{NS}/via-a")
            (unmatched,) = await a.wait_for(1, outcome="unmatched", object=f"Bucket/{NS}/via-b")
            assert delivered["statusCode"] == 200 and unmatched["alert"] == ""
        finally:
            assert await a.stop() == 0
            assert await b.stop() == 0
