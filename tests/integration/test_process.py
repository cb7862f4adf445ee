"""The controller as users run it: a subprocess on the bundled examples (README's `make run` flow)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from tests.support.capture import CaptureServer
from tests.support.ports import listener_ports

ROOT = Path(__file__).resolve().parents[2]


async def wait_ready(url: str, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never became ready")


async def test_examples_deliver_and_sigterm_exits_zero(tmp_path: Path) -> None:
    """README flow: the example manifests + the example event arrive at the sink; SIGTERM → exit 0."""
    async with CaptureServer() as sink:
        manifests = tmp_path / "manifests"
        shutil.copytree(ROOT / "examples" / "manifests", manifests)
        text = (manifests / "notifications.yaml").read_text().replace("http://127.0.0.1:9999", sink.url)
        (manifests / "notifications.yaml").write_text(text)
        ports = listener_ports()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "notification_controller",
            "--manifests",
            str(manifests),
            f"--events-addr=127.0.0.1:{ports['events']}",
            f"--receiverAddr=127.0.0.1:{ports['receiver']}",
            f"--metrics-addr=127.0.0.1:{ports['metrics']}",
            f"--health-addr=127.0.0.1:{ports['health']}",
            "--log-encoding=json",
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await wait_ready(f"http://127.0.0.1:{ports['health']}/readyz")
            body = (ROOT / "examples" / "event.json").read_bytes()
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    f"http://127.0.0.1:{ports['events']}/",
                    data=body,
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    assert resp.status == 202
            [req] = await sink.wait_for(1, timeout=10)
            assert req.path == "/flux"
            assert req.headers["X-Signature"].startswith("sha256=")
            assert req.json()["metadata"] == {
                "cluster": "local-demo",
                "revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41",
            }
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{ports['metrics']}/metrics") as resp:
                    text = await resp.text()
            assert (
                'notification_delivered_total{provider="flux-system/local-sink",provider_type="generic-hmac"} 1.0'
                in text
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
        assert proc.returncode == 0, stderr.decode()[-2000:]
        log = stderr.decode()
        assert "shutdown complete" in log
        assert "change-me-hmac-key" not in log  # the Secret's token never reaches the logs


async def test_port_in_use_fails_with_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "notification_controller",
            "--manifests",
            str(tmp_path),
            f"--health-addr=127.0.0.1:{port}",
            "--log-encoding=console",
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 1
    assert "cannot start" in stderr.decode()
    assert "Traceback" not in stderr.decode()


async def test_a_missing_manifests_path_is_fatal_and_closes_cleanly(tmp_path: Path) -> None:
    """A typo in --manifests must not start an empty controller that answers 202 and notifies nobody."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "notification_controller",
        "--manifests",
        str(tmp_path / "no-such-dir"),
        *(f"--{flag}=127.0.0.1:0" for flag in ("events-addr", "receiverAddr", "metrics-addr", "health-addr")),
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    text = stderr.decode()
    assert proc.returncode == 1
    assert "cannot start: --manifests" in text and "no such file or directory" in text
    assert "Traceback" not in text
    assert "Unclosed" not in text  # what did start (the outbound session, listeners) was closed


BAD_REGEX_ALERT = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: sink, namespace: default}
spec: {type: generic, address: "http://127.0.0.1:9/"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: bad-regex, namespace: default}
spec:
  providerRef: {name: sink}
  eventSources: [{kind: Kustomization, name: '*'}]
  inclusionList: ["("]
"""


async def test_json_logs_hold_on_every_path_including_c_extensions(tmp_path: Path) -> None:
    """RE2 reports a bad pattern on fd 2 from C++ ("re2.cc:242] Error parsing ..."): with --log-encoding=json
    every line the process writes is still one JSON object, and Flux's levels hold (no "warning")."""
    (tmp_path / "alert.yaml").write_text(BAD_REGEX_ALERT)
    ports = listener_ports()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "notification_controller",
        "--manifests",
        str(tmp_path),
        f"--events-addr=127.0.0.1:{ports['events']}",
        f"--receiverAddr=127.0.0.1:{ports['receiver']}",
        f"--metrics-addr=127.0.0.1:{ports['metrics']}",
        f"--health-addr=127.0.0.1:{ports['health']}",
        "--log-encoding=json",
        "--watch-configs-label-selector=team=a",  # a compatibility-only flag: one info line says so
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await wait_ready(f"http://127.0.0.1:{ports['health']}/readyz")
        event = {
            "involvedObject": {"kind": "Kustomization", "name": "app", "namespace": "default"},
            "severity": "info",
            "timestamp": "2026-01-01T00:00:00Z",
            "message": "hello",
            "reason": "Info",
            "reportingController": "kustomize-controller",
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{ports['events']}/", json=event) as resp,
        ):
            assert resp.status == 202
        await asyncio.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    lines = [line for line in stderr.decode().splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a stderr line is not JSON: {line!r}") from None
    assert {r["level"] for r in records} <= {"error", "info", "debug", "trace"}
    assert any(r["logger"] == "stderr" and "Error parsing" in r["msg"] for r in records), records
    assert any("--watch-configs-label-selector is accepted for compatibility" in r["msg"] for r in records)
    assert proc.returncode == 0
