"""Hostile tenant expressions against the real controller process (issue 23 item 1).

Tenant A's Alerts carry the templates, the Provider ``bodyTemplate`` and the CEL filters from the issue
that froze the controller or grew it to 1–2.9 GB; tenant B has an ordinary Alert. One event of A's, then
B's events: B's POSTs keep getting 202 quickly, B's notifications reach the sink, ``/healthz`` answers,
the controller's RSS stays bounded, A's failures are counted (``notification_sandbox_failures_total``)
and evented on A's Alerts (the default message or, for a filter, the notification itself still goes
out), and the process survives — with the memory store and with the SQLite durable store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from tests.adversarial.kit import eventually
from tests.adversarial.test_sigterm import Controller, start
from tests.support.capture import CaptureServer

LOOP = "{% set s='x'*60000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
REPLACE = "{% set s='x'*60000 %}{{ s|replace('x', s)|replace('x', s)|length }}"
DOUBLING = "{% set s='x'*60000 %}" + "{% set s = s ~ s %}" * 20 + "{{ s|length }}"
BATCH = "{{ range(10)|batch(1000000000, 'x')|list|length }}"
SLICE = "{{ range(10)|slice(1000000000, 'x')|list|length }}"
LIPSUM = "{{ lipsum(1000000)|length }}"
BODY = '{"text": "{% set s=\'x\'*60000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"}'
SPLIT = "event.message.split('').all(a, event.message.split('').all(b, a == b))"
CEL_REPLACE = "event.message.replace('', event.message).replace('', event.message).size() > 0"

B_TEMPLATE = "{{ event.message }} ({{ event.severity }})"
B_FILTER = "[event.severity].exists(s, s == 'info')"
TEMPLATES = {
    "loop": LOOP,
    "replace": REPLACE,
    "doubling": DOUBLING,
    "batch": BATCH,
    "slice": SLICE,
    "lipsum": LIPSUM,
}
FILTERS = {"split": SPLIT, "celreplace": CEL_REPLACE}


def _provider(namespace: str, name: str, address: str, body: str | None = None) -> str:
    extra = f"\n  bodyTemplate: {json.dumps(body)}" if body else ""
    return f"""
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  type: generic
  address: "{address}"{extra}
"""


def _alert(namespace: str, name: str, provider: str, spec: str = "") -> str:
    return f"""
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  providerRef: {{name: {provider}}}
  eventSources: [{{kind: Kustomization, name: '*'}}]{spec}
"""


def manifests(sink: str) -> str:
    # tenant B's own template and filter need the sandbox too (a comprehension is not inline-safe)
    b_spec = f"\n  template: {{message: {json.dumps(B_TEMPLATE)}}}\n  filter: {json.dumps(B_FILTER)}"
    docs = [_provider("tenant-b", "b", f"{sink}/b"), _alert("tenant-b", "b", "b", b_spec)]
    docs.append(_provider("tenant-a", "a", f"{sink}/a"))
    for name, source in TEMPLATES.items():
        docs.append(_alert("tenant-a", f"t-{name}", "a", f"\n  template: {{message: {json.dumps(source)}}}"))
    for name, source in FILTERS.items():
        docs.append(_alert("tenant-a", f"f-{name}", "a", f"\n  filter: {json.dumps(source)}"))
    docs.append(_provider("tenant-a", "a-body", f"{sink}/a-body", BODY))
    docs.append(_alert("tenant-a", "body", "a-body"))
    return "".join(docs)


def event(namespace: str, message: str, name: str = "apps") -> bytes:
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": namespace,
                "name": name,
                "uid": "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9",
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "reportingController": "kustomize-controller",
        }
    ).encode()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def timed(
    session: aiohttp.ClientSession, method: str, url: str, body: bytes = b""
) -> tuple[int, float]:
    started = time.monotonic()
    try:
        async with asyncio.timeout(10):
            async with session.request(method, url, data=body or None) as resp:
                await resp.read()
                return resp.status, time.monotonic() - started
    except (aiohttp.ClientError, TimeoutError):
        return 0, time.monotonic() - started


def failures(metrics_text: str) -> dict[tuple[str, str], float]:
    out = {}
    for m in re.finditer(
        r'^notification_sandbox_failures_total\{kind="(\w+)",reason="(\w+)"\} ([0-9.e+]+)$',
        metrics_text,
        re.M,
    ):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_hostile_templates_and_filters_do_not_freeze_or_grow_the_controller(
    tmp_path: Path, store: str
) -> None:
    async with CaptureServer() as sink:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(manifests(sink.url))
        flags = ["--sandbox-timeout=2s"]  # A's filter holds a worker 2 s; the POST must not wait for it
        if store == "sqlite":
            flags.append(f"--store=sqlite:{tmp_path / 'state.db'}")
        controller: Controller = await start(tmp_path / "m", *flags)
        pid = controller.proc.pid
        peak = rss_mb(pid)
        try:
            async with aiohttp.ClientSession() as session:
                status, took = await timed(
                    session, "POST", controller.url("events"), event("tenant-a", "x" * 60000)
                )
                assert status == 202 and took < 1.5, (status, took)
                answered = []
                for i in range(8):
                    status, took = await timed(
                        session, "POST", controller.url("events"), event("tenant-b", f"b {i}")
                    )
                    assert status == 202, status
                    answered.append(took)
                    health, health_took = await timed(session, "GET", controller.url("health", "/healthz"))
                    assert health == 200, health
                    answered.append(health_took)
                    peak = max(peak, rss_mb(pid))
                    await asyncio.sleep(0.25)
                assert max(answered) < 3.0, answered  # frozen before the fix: no answer at all in 60 s

                def b_delivered() -> bool:
                    return len([r for r in sink.requests if r.path == "/b"]) >= 8

                await eventually(b_delivered, timeout=40, what="tenant B's 8 notifications")
                b_texts = sorted(r.json()["message"] for r in sink.requests if r.path == "/b")
                assert b_texts == [f"b {i} (info)" for i in range(8)], b_texts  # B's template rendered

                def a_failed() -> bool:
                    return (
                        sum(1 for r in sink.requests if r.path in ("/a", "/a-body"))
                        >= len(TEMPLATES) + len(FILTERS) + 1
                    )

                # A's notifications still go out: the default message (templates, body) or fail open (filters)
                await eventually(a_failed, timeout=60, what="tenant A's notifications, with the defaults")
                peak = max(peak, rss_mb(pid))
                async with session.get(controller.url("metrics", "/metrics")) as resp:
                    text = await resp.text()
                counted = failures(text)
                template_errors = {
                    m.group(1): float(m.group(2))
                    for m in re.finditer(
                        r'^notification_template_errors_total\{template="(\w+)"\} ([0-9.e+]+)$', text, re.M
                    )
                }
            assert controller.proc.returncode is None, "the controller died"
            # the templates end on their own bounds inside the worker (core/templates.py); the filter's
            # native comprehension can only be stopped by killing its worker
            assert template_errors.get("message", 0) >= len(TEMPLATES), template_errors
            assert template_errors.get("body", 0) >= 1, template_errors
            assert counted.get(("filter", "timeout"), 0) >= 1, counted
            assert peak < 400, f"controller RSS reached {peak:.0f} MB"  # 1-2.9 GB before the fix
            print(f"\n{store}: peak RSS {peak:.0f} MB, slowest B answer {max(answered) * 1000:.0f} ms")
        finally:
            if controller.proc.returncode is None:
                controller.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30):
                    _, stderr = await controller.proc.communicate()
            if controller.proc.returncode is None:
                controller.proc.kill()
                _, stderr = await controller.proc.communicate()
        logs = stderr.decode(errors="replace")
        assert "TemplateRenderFailed on Alert tenant-a/t-loop" in logs
        assert "TemplateRenderFailed on Alert tenant-a/body" in logs
        assert "FilterFailed on Alert tenant-a/f-split" in logs
        assert not [
            a
            for a in re.findall(r"(?:TemplateRenderFailed|FilterFailed) on Alert (\S+)", logs)
            if "tenant-b" in a
        ]
        assert controller.proc.returncode == 0


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"sandbox.worker" in cmd:
            out.append(int(entry.name))
    return out


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_sandbox_workers_die_with_a_killed_controller(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a SIGKILLed controller (OOM killer, kubelet) leaves no worker behind, not even one
    busy in a native evaluation (an idle one also sees its pipe close)."""
    async with CaptureServer() as sink:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(manifests(sink.url))
        controller = await start(tmp_path / "m", "--sandbox-timeout=60s")
        workers: list[int] = []
        try:
            async with aiohttp.ClientSession() as session:
                status, _ = await timed(
                    session, "POST", controller.url("events"), event("tenant-a", "x" * 60000)
                )
                assert status == 202

            def busy() -> bool:  # a worker deep in A's split('') comprehension
                workers[:] = _children(controller.proc.pid)
                return any(_cpu_ticks(pid) > 100 for pid in workers)

            await eventually(busy, timeout=30, what="a worker busy with tenant A's filter")
        finally:
            controller.proc.kill()
            await controller.proc.wait()

        def gone() -> bool:
            return not any(Path(f"/proc/{pid}").exists() for pid in workers)

        await eventually(gone, timeout=10, what="the workers to die with the controller")
