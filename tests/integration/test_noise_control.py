"""Noise control through real controller processes (issue 14): local mode, ``--store=sqlite:``, SIGKILL.

Three Alerts on one generic sink, told apart by the kind of the involved object:
* ``state`` (Kustomization/flaky): ``notifyOn: StateChange``;
* ``threshold`` (GitRepository/*): ``threshold: {count: 3, within: 1m}``;
* ``grouped`` (HelmRelease/*): ``groupBy: [reason]``, ``groupWait: 2s``.
Their state (last severity, arrivals, open groups) is in the SQLite file, so a SIGKILLed controller
started again on it carries on where it was. A fake Slack Web API (HTTPS, reached as slack.com through
a forward proxy, trusted through certSecretRef) checks that ``threadBy`` reuses the first ``ts``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.capture import CapturedRequest, CaptureServer, ForwardProxy, Reply, mint_tls
from tests.support.controllers import ControllerProcess, FlakySink, post_event
from tests.support.nats_server import run_nats_server

MANIFESTS = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: flux-system}}
spec: {{type: generic, address: "{sink}"}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: state, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSources: [{{kind: Kustomization, name: flaky}}]
  notifyOn: StateChange
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: threshold, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSources: [{{kind: GitRepository, name: "*"}}]
  threshold: {{count: 3, within: 1m}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: grouped, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSources: [{{kind: HelmRelease, name: "*"}}]
  groupBy: [reason]
  groupWait: 2s
  groupInterval: 1m
"""


def event(
    kind: str, name: str, severity: str = "info", message: str = "ok", reason: str = "Progressing"
) -> dict[str, Any]:
    return {
        "involvedObject": {"kind": kind, "namespace": "flux-system", "name": name},
        "severity": severity,
        "timestamp": "2026-11-22T10:00:00Z",
        "message": message,
        "reason": reason,
        "reportingController": "kustomize-controller",
    }


async def post(proc: ControllerProcess, *bodies: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            assert await post_event(session, proc.events_url, body) == 202


def received(sink: FlakySink, kind: str) -> list[dict[str, Any]]:
    out = [json.loads(b) for b in sink.bodies]
    return [e for e in out if e["involvedObject"]["kind"] == kind]


async def settle(
    proc: ControllerProcess, metric: str, value: float, timeout: float = 10, **labels: str
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await proc.metric(metric, **labels) < value:
        assert loop.time() < deadline, f"{metric}{labels} never reached {value}: {proc.log()}"
        await asyncio.sleep(0.1)


async def test_noise_control_state_survives_a_sigkill_with_sqlite(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(MANIFESTS.format(sink=sink.url), encoding="utf-8")
        proc = ControllerProcess(
            tmp_path / "m", [f"--store=sqlite:{tmp_path / 'state.db'}"], log_path=tmp_path / "log"
        )
        await proc.start()

        def failing(seconds: float) -> dict[str, Any]:  # messages differ: Flux's duplicate limiter stays on
            return event(
                "Kustomization",
                "flaky",
                "error",
                f"health check failed after {seconds}s",
                "HealthCheckFailed",
            )

        # state change: the first error goes out, the same error again does not
        await post(proc, failing(2.1), failing(3.5))
        await sink.wait_unique(1, timeout=10)
        await settle(proc, "notification_suppressed_total", 1, reason="state")
        # threshold: two of three
        await post(
            proc,
            event("GitRepository", "repo", "error", "auth failed (1)"),
            event("GitRepository", "repo", "error", "auth failed (2)"),
        )
        await settle(proc, "notification_suppressed_total", 2, reason="threshold")
        # group: three releases, then the kill before groupWait is over
        await post(
            proc,
            *(
                event("HelmRelease", f"rel{i}", "error", f"install of rel{i} failed", "InstallFailed")
                for i in range(3)
            ),
        )
        await settle(proc, "notification_suppressed_total", 3, reason="grouped")
        await proc.kill()
        assert received(sink, "HelmRelease") == []

        await proc.start()  # the same SQLite file
        # the open group is flushed by the new process
        async with asyncio.timeout(15):
            while not received(sink, "HelmRelease"):
                await asyncio.sleep(0.1)
        [group] = received(sink, "HelmRelease")
        assert group["metadata"]["occurrences"] == "3" and group["severity"] == "error"
        assert "• helmrelease/rel0.flux-system: install of rel0 failed" in group["message"]
        # the object is still failing: the same error stays quiet after the restart
        await post(proc, failing(4.2))
        await settle(proc, "notification_suppressed_total", 1, reason="state")
        assert len(received(sink, "Kustomization")) == 1
        # the third arrival within the minute fires, saying how many
        await post(proc, event("GitRepository", "repo", "error", "auth failed (3)"))
        async with asyncio.timeout(10):
            while not received(sink, "GitRepository"):
                await asyncio.sleep(0.1)
        assert received(sink, "GitRepository")[0]["metadata"]["occurrences"] == "3 within 1m0s"
        # the recovery goes out and says from what
        await post(proc, event("Kustomization", "flaky", "info", "applied revision main@sha1:1234"))
        async with asyncio.timeout(10):
            while len(received(sink, "Kustomization")) < 2:
                await asyncio.sleep(0.1)
        recovery = received(sink, "Kustomization")[1]
        assert recovery["metadata"]["recoveredFrom"].startswith(
            "HealthCheckFailed: health check failed after 2.1s"
        )
        assert len(received(sink, "Kustomization")) == 2
        assert await proc.stop() == 0


SLACK = """\
apiVersion: v1
kind: Secret
metadata: {{name: slack-bot, namespace: flux-system}}
stringData:
  token: xoxb-canary-bot-token
  proxy: "{proxy}"
  ca.crt: |
{ca}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: slack, namespace: flux-system}}
spec:
  type: slack
  channel: deploys
  address: https://slack.com/api/chat.postMessage
  secretRef: {{name: slack-bot}}
  certSecretRef: {{name: slack-bot}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: threads, namespace: flux-system}}
spec:
  providerRef: {{name: slack}}
  eventSources: [{{kind: Kustomization, name: "*"}}]
  threadBy: object
"""


async def test_slack_threads_reuse_the_first_messages_ts(tmp_path: Path) -> None:
    tls = mint_tls("slack.com")
    counter = itertools.count(1)

    def answer(request: CapturedRequest) -> Reply:
        return Reply(body={"ok": True, "channel": "C1", "ts": f"1700000000.{next(counter):06d}"})

    async with CaptureServer(tls=tls) as slack:
        slack.on("POST", r"^/api/chat\.postMessage$", answer)
        async with ForwardProxy(routes={"slack.com:443": ("127.0.0.1", slack.port)}) as proxy:
            ca = "\n".join("    " + line for line in tls.ca_pem.decode().splitlines())
            (tmp_path / "m").mkdir()
            (tmp_path / "m" / "objects.yaml").write_text(
                SLACK.format(proxy=proxy.url, ca=ca), encoding="utf-8"
            )
            proc = ControllerProcess(
                tmp_path / "m", [f"--store=sqlite:{tmp_path / 'state.db'}"], log_path=tmp_path / "log"
            )
            await proc.start()
            await post(proc, event("Kustomization", "app", message="first"))
            await slack.wait_for(1, timeout=10)
            await post(
                proc,
                event("Kustomization", "app", message="second"),
                event("Kustomization", "other", message="elsewhere"),
            )
            requests = await slack.wait_for(3, timeout=10)
            await proc.kill()
            await proc.start()  # the thread id is in the store: a restarted controller keeps threading
            await post(proc, event("Kustomization", "app", message="third"))
            requests = await slack.wait_for(4, timeout=10)
            assert await proc.stop() == 0
    bodies = {r.json()["attachments"][0]["text"]: r.json() for r in requests}
    assert "thread_ts" not in bodies["first"] and "thread_ts" not in bodies["elsewhere"]
    assert bodies["second"]["thread_ts"] == bodies["third"]["thread_ts"] == "1700000000.000001"
    assert all(r.headers["Authorization"] == "Bearer xoxb-canary-bot-token" for r in requests)
    assert proxy.seen == ["slack.com:443"] * len(proxy.seen)
    assert "xoxb-canary-bot-token" not in proc.log()


async def test_two_replicas_on_nats_share_threshold_and_group_state(tmp_path: Path) -> None:
    """One threshold count and one group across two replicas: events split between them count together
    and are grouped into one notification, flushed once."""
    async with run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats, FlakySink() as sink:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(MANIFESTS.format(sink=sink.url), encoding="utf-8")
        procs = [
            ControllerProcess(tmp_path / "m", [f"--store={nats.url}"], log_path=tmp_path / f"replica-{i}.log")
            for i in range(2)
        ]
        await asyncio.gather(*(p.start() for p in procs))
        try:
            a, b = procs
            # threshold 3 within 1m: arrivals on either replica count together
            await post(a, event("GitRepository", "repo", "error", "auth failed (1)"))
            await post(b, event("GitRepository", "repo", "error", "auth failed (2)"))
            await post(a, event("GitRepository", "repo", "error", "auth failed (3)"))
            # a group fed by both replicas
            for i in range(6):
                await post(
                    procs[i % 2], event("HelmRelease", f"rel{i}", "error", f"rel{i} failed", "InstallFailed")
                )
            async with asyncio.timeout(15):
                while not (received(sink, "GitRepository") and received(sink, "HelmRelease")):
                    await asyncio.sleep(0.1)
            await asyncio.sleep(2.5)  # both flushers have had their turn: nothing else arrives
            assert [e["metadata"]["occurrences"] for e in received(sink, "GitRepository")] == [
                "3 within 1m0s"
            ]
            [group] = received(sink, "HelmRelease")
            assert group["metadata"]["occurrences"] == "6"
            assert sink.duplicates == 0
        finally:
            for p in procs:
                await p.stop()
