"""Silences and mute windows end to end (issue 26, "Done when"), with real processes: the controller in
local mode (a subprocess, or the App in-process when the test must move its clock), the installed
``notification-controller silence`` command, a real HTTP sink, SQLite files and a real nats-server.

* a Silence made by the CLI holds the matching notification and not the other one; ``silence expire``
  releases ONE summary naming what was held and what is still failing;
* a mute window in Europe/Berlin holds during the window and not outside it (the App's clock injected), the
  Alert's status says what is held and until when, and the end releases ONE summary;
* two replicas on one nats-server share the Silence's held count and send ONE summary;
* on SQLite the held count survives a SIGKILL, and the summary goes out once after the restart.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from notification_controller.app import App
from notification_controller.lib.clock import ManualClock
from notification_controller.settings import ServerSettings, Settings
from tests.adversarial.kit import eventually
from tests.integration.appkit import metric, post_event
from tests.support.controllers import ControllerProcess, FlakySink, manifests
from tests.support.controllers import post_event as post
from tests.support.nats_server import run_nats_server

SCRIPT = Path(sys.executable).parent / "notification-controller"
NS = "flux-system"
SUMMARY = "QuietSummary"


def silence(directory: Path, *args: str) -> str:
    """The installed command, as a user runs it."""
    done = subprocess.run(
        [str(SCRIPT), "silence", *args, "--manifests", str(directory), "-n", NS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def event(name: str, severity: str = "error", message: str = "health check failed") -> dict[str, Any]:
    return {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": NS,
            "name": name,
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": severity,
        "timestamp": "2026-11-27T10:00:00Z",
        "message": message,
        "reason": "HealthCheckFailed" if severity == "error" else "ReconciliationSucceeded",
        "reportingController": "kustomize-controller",
    }


def summaries(sink: FlakySink) -> list[dict[str, Any]]:
    return [body for body in map(json.loads, sink.bodies) if body.get("reason") == SUMMARY]


def names(sink: FlakySink) -> list[str]:
    return [
        json.loads(b)["involvedObject"]["name"] for b in sink.bodies if json.loads(b).get("reason") != SUMMARY
    ]


async def held_count(proc: ControllerProcess, reason: str = "silenced") -> float:
    return await proc.metric("notification_suppressed_total", reason=reason)


async def wait_loaded(proc: ControllerProcess, session: aiohttp.ClientSession, sink: FlakySink) -> None:
    """Until the process holds a probe event (it has read the Silence file): probes sent earlier reach the
    sink, and are not counted by the test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    i = 0
    while await held_count(proc) == 0:
        assert loop.time() < deadline, f"the Silence was never loaded: {proc.log()}"
        i += 1
        assert await post(session, proc.events_url, event("apps-probe", "info", f"probe {i}")) == 202
        await asyncio.sleep(0.2)


async def test_a_cli_silence_holds_what_matches_and_its_expiry_sends_one_summary(tmp_path: Path) -> None:
    async with FlakySink() as sink, aiohttp.ClientSession() as session:
        directory = manifests(tmp_path / "m", sink.url)
        proc = ControllerProcess(directory, ["--manifests-poll-interval=200ms"], log_path=tmp_path / "c.log")
        await proc.start()
        try:
            out = silence(
                directory,
                "add",
                "--match",
                "kind=Kustomization",
                "--match",
                "name=~apps-.*",
                "--for",
                "2h",
                "--comment",
                "database upgrade",
                "--name",
                "maint",
            )
            assert "maint" in out
            await wait_loaded(proc, session, sink)
            before = len(sink.bodies)
            assert await post(session, proc.events_url, event("apps-web")) == 202  # held
            assert await post(session, proc.events_url, event("apps-web", "info", "recovered")) == 202  # held
            assert await post(session, proc.events_url, event("apps-db")) == 202  # held, still failing
            assert await post(session, proc.events_url, event("infra")) == 202  # not matched: sent
            await eventually(lambda: len(sink.bodies) > before, timeout=30, what="the one not held")
            await eventually(lambda: _held_is(proc, 4), timeout=10, what="held")
            assert [n for n in names(sink)[before:] if n != "apps-probe"] == ["infra"]  # a probe may trail
            assert await held_count(proc) == 4  # the probe and the three

            silence(directory, "expire", "maint")
            await eventually(lambda: len(summaries(sink)) == 1, timeout=30, what="the summary")
            await asyncio.sleep(2.5)  # a few ticks of the summary task: no second one
            (summary,) = summaries(sink)
            assert summary["metadata"]["held"] == "4"
            assert summary["metadata"]["heldBy"] == "Silence flux-system/maint"
            assert (
                summary["metadata"]["stillFailing"] == "kustomization/apps-db.flux-system"
            )  # apps-web recovered
            assert summary["severity"] == "error"
            assert summary["message"].splitlines()[1] == "Comment: database upgrade"
            assert "• kustomization/apps-web.flux-system: 2 held, last info: recovered" in summary["message"]
            assert (
                "• kustomization/apps-db.flux-system: 1 held, still failing: health check failed"
                in (summary["message"])
            )
            # expired: nothing is held any more
            assert await post(session, proc.events_url, event("apps-web", message="after")) == 202
            await eventually(lambda: "apps-web" in names(sink), timeout=30, what="delivery after expiry")
        finally:
            await proc.stop()


BERLIN = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: sink, namespace: flux-system}
spec: {type: generic, address: "URL"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: night, namespace: flux-system}
spec:
  providerRef: {name: sink}
  eventSources: [{kind: Kustomization, name: '*'}]
  muteTimes:
  - times: [{startTime: "22:00", endTime: "24:00"}]
    weekdays: ["monday:friday"]
    location: Europe/Berlin
"""


@asynccontextmanager
async def app_at(directory: Path, clock: ManualClock) -> AsyncIterator[App]:
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
        ),
        manifests=directory,
        manifests_poll_interval=0.1,
    )
    app = App(settings, clock=clock)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


def held_condition(app: App) -> str | None:
    alert = app.store.alert(NS, "night")
    assert alert is not None
    found = [c for c in alert.status.conditions if c.type == "Held"]
    return found[0].message if found else None


async def test_a_mute_window_in_berlin_holds_during_it_and_its_end_sends_one_summary(tmp_path: Path) -> None:
    # Friday 2026-11-27, 21:59 in Berlin (20:59 UTC)
    clock = ManualClock(datetime(2026, 11, 27, 20, 59, tzinfo=UTC))
    async with FlakySink() as sink:
        directory = tmp_path / "m"
        directory.mkdir()
        (directory / "objects.yaml").write_text(BERLIN.replace("URL", sink.url), encoding="utf-8")
        async with app_at(directory, clock) as app:
            body = json.dumps(event("web", message="before the window")).encode()
            assert (await post_event(app, body)).status == 202
            await sink.wait_unique(1, timeout=30)

            clock.advance(60)  # 22:00 in Berlin: muted
            for ev in (event("web", message="in the window"), event("db", "info", "fine")):
                assert (await post_event(app, json.dumps(ev).encode())).status == 202
            await eventually(
                lambda: metric(app, "notification_suppressed_total", reason="muted") == 2,
                timeout=10,
                what="held",
            )
            await eventually(lambda: held_condition(app) is not None, timeout=30, what="the Held condition")
            assert "muted by spec.muteTimes[0] until 2026-11-27T23:00:00Z" in (held_condition(app) or "")

            clock.advance(2 * 3600)  # midnight in Berlin: the window is over
            body = json.dumps(event("web", message="after the window")).encode()
            assert (await post_event(app, body)).status == 202
            await eventually(lambda: len(summaries(sink)) == 1, timeout=30, what="the summary")
            await eventually(lambda: held_condition(app) is None, timeout=30, what="the Held condition to go")
            await asyncio.sleep(2.5)
            (summary,) = summaries(sink)
            assert summary["metadata"] == {
                "heldBy": "spec.muteTimes",
                "held": "2",
                "stillFailing": "kustomization/web.flux-system",
            }
            assert summary["message"].startswith(
                "spec.muteTimes ended: 2 notifications held, 1 object still failing"
            )
            messages = [json.loads(b)["message"] for b in sink.bodies if json.loads(b)["reason"] != SUMMARY]
            assert messages == ["before the window", "after the window"]


def silence_file(directory: Path, name: str, ends: datetime) -> None:
    starts = datetime.now(UTC) - timedelta(minutes=1)
    (directory / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""\
            apiVersion: notification-controller.io/v1alpha1
            kind: Silence
            metadata: {{name: {name}, namespace: {NS}}}
            spec:
              matchers: [{{name: kind, value: Kustomization}}]
              startsAt: "{starts.isoformat()}"
              endsAt: "{ends.isoformat()}"
            """
        ),
        encoding="utf-8",
    )


async def test_two_replicas_on_nats_share_a_silence_and_send_one_summary(tmp_path: Path) -> None:
    fast = ["--manifests-poll-interval=200ms", "--delivery-retry-base=50ms", "--store-ack-wait=2s"]
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats,
        FlakySink() as sink,
        aiohttp.ClientSession() as session,
    ):
        directory = manifests(tmp_path / "m", sink.url)
        silence(directory, "add", "--match", "kind=Kustomization", "--for", "2h", "--name", "shared")
        procs = [
            ControllerProcess(directory, [f"--store={nats.url}", *fast], log_path=tmp_path / f"r{i}.log")
            for i in range(2)
        ]
        try:
            await asyncio.gather(*(p.start(timeout=60) for p in procs))
            a, b = procs
            assert await post(session, a.events_url, event("web")) == 202
            assert await post(session, b.events_url, event("db")) == 202
            assert await post(session, b.events_url, event("api", "info", "fine")) == 202
            for proc, n in ((a, 1), (b, 2)):
                await eventually(lambda p=proc, n=n: _held_is(p, n), timeout=30, what="held")  # type: ignore[misc]
            assert sink.bodies == []
            silence(directory, "expire", "shared")
            await eventually(lambda: len(summaries(sink)) >= 1, timeout=60, what="the summary")
            await asyncio.sleep(3.0)  # both replicas have looked at the end by now (200 ms polls, 1 s ticks)
            (summary,) = summaries(sink)
            assert summary["metadata"]["held"] == "3"  # both replicas' holds, in one record
            assert summary["metadata"]["stillFailing"] == (
                "kustomization/web.flux-system, kustomization/db.flux-system"
            )
            assert sum(sink.keys.values()) == 1  # one delivery: no duplicate summary
        finally:
            for p in procs:
                await p.stop()


async def _held_is(proc: ControllerProcess, n: int) -> bool:
    return await held_count(proc) == n


async def test_on_sqlite_held_counts_survive_a_kill_and_the_summary_goes_once(tmp_path: Path) -> None:
    async with FlakySink() as sink, aiohttp.ClientSession() as session:
        directory = manifests(tmp_path / "m", sink.url)
        silence(directory, "add", "--match", "name=~web|db", "--for", "2h", "--name", "durable")
        args = [f"--store=sqlite:{tmp_path / 'state.db'}", "--manifests-poll-interval=200ms"]
        proc = ControllerProcess(directory, args, log_path=tmp_path / "c.log")
        await proc.start()
        try:
            assert await post(session, proc.events_url, event("web")) == 202
            assert await post(session, proc.events_url, event("db")) == 202
            await eventually(lambda: _held_is(proc, 2), timeout=30, what="held")
            await proc.kill()  # nothing flushed, no shutdown hook
            silence(directory, "expire", "durable")  # it ends while the controller is down
            await proc.start()  # the load schedules the end that passed: summarised at once
            await eventually(lambda: len(summaries(sink)) == 1, timeout=60, what="the summary after restart")
            (summary,) = summaries(sink)
            assert summary["metadata"]["held"] == "2"
            await proc.stop()
            await proc.start()  # a second restart: the record is claimed, nothing more goes out
            assert await post(session, proc.events_url, event("other", "info", "after")) == 202
            await eventually(lambda: "other" in names(sink), timeout=30, what="a later delivery")
            await asyncio.sleep(2.0)
            assert len(summaries(sink)) == 1
            assert sink.duplicates == 0
        finally:
            await proc.stop()
