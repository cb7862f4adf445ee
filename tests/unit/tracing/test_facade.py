"""The tracing facade (``tracing/__init__.py``): off by default, it imports nothing of OpenTelemetry and
records nothing; on, the SDK is imported then, and only then; a missing ``tracing`` extra is one clear line.

The "imports" tests run fresh interpreters: a started local-mode controller that delivered an event, with
and without ``--otlp-endpoint``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from notification_controller.cli import parse_args
from notification_controller.tracing import (
    CURRENT,
    MAX_VALUE,
    NOOP,
    NOOP_SPAN,
    SpanKind,
    bounded,
    current,
    open_tracer,
)

ROOT = Path(__file__).resolve().parents[3]


def test_the_noop_tracer_records_nothing() -> None:
    assert NOOP.enabled is False
    span = NOOP.start(
        "POST /", parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", kind=SpanKind.SERVER
    )
    assert span is NOOP_SPAN and not span.recording and span.traceparent == ""
    span.set("k", "v")
    span.fail("x")
    span.end()
    assert CURRENT.get() is None and current() is NOOP_SPAN
    assert open_tracer("") is NOOP


def test_values_are_bounded() -> None:
    assert bounded("x" * 10_000) == "x" * (MAX_VALUE - 1) + "…"
    assert bounded("short") == "short" and bounded(7) == 7 and bounded(True) is True


def test_the_flag_and_the_environment() -> None:
    assert parse_args([], environ={}).tracing.otlp_endpoint == ""
    assert parse_args(["--otlp-endpoint=http://c:4318"], environ={}).tracing.otlp_endpoint == "http://c:4318"
    from_env = parse_args([], environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"})
    assert from_env.tracing.otlp_endpoint == "http://otel:4318"
    both = parse_args(
        ["--otlp-endpoint=http://flag:4318"], environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env"}
    )
    assert both.tracing.otlp_endpoint == "http://flag:4318"


PROBE = """
import asyncio, json, sys
import aiohttp
from notification_controller.app import App
from notification_controller.cli import parse_args

async def main():
    settings = parse_args([
        "--manifests", sys.argv[1], "--events-addr=127.0.0.1:0", "--receiverAddr=127.0.0.1:0",
        "--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", *sys.argv[2:],
    ], environ={})
    app = await App.create(settings)
    await app.start()
    try:
        for _ in range(500):
            if app.ready() and all(app.controllers.reconciles.values()):
                break
            await asyncio.sleep(0.01)
        body = {"involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "podinfo",
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1"}, "severity": "info", "message": "m",
                "reason": "ReconciliationSucceeded", "reportingController": "kustomize-controller",
                "timestamp": "2026-11-22T10:00:00Z"}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{app.ports['events']}/", json=body,
                    headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) as r:
                status = r.status
        await app.dispatcher.wait_idle(10)
    finally:
        await app.stop()
    print(json.dumps({"status": status, "modules": sorted(sys.modules)}))

asyncio.run(main())
"""


def otel_modules(*flags: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / "examples" / "manifests"), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["status"] == 202
    return [
        m
        for m in result["modules"]
        if m in ("opentelemetry.trace", "opentelemetry.sdk") or m.startswith("opentelemetry.sdk.")
    ]


def test_without_the_flag_no_opentelemetry_sdk_or_api_module_is_imported() -> None:
    assert otel_modules() == []


def test_with_the_flag_the_sdk_is_imported() -> None:
    loaded = otel_modules("--otlp-endpoint=http://127.0.0.1:9")  # nothing listens: spans are dropped
    assert "opentelemetry.trace" in loaded and "opentelemetry.sdk.trace" in loaded


def test_a_missing_tracing_extra_is_one_clear_line(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.sdk'] = None  # as if the tracing extra were not installed\n"
        "from notification_controller.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--manifests",
            str(ROOT / "examples" / "manifests"),
            "--otlp-endpoint=http://127.0.0.1:4318",
            "--events-addr=127.0.0.1:0",
            "--log-encoding=console",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert "Traceback" not in run.stderr
    (line,) = [line for line in lines if "cannot start" in line]
    assert "--otlp-endpoint needs the OpenTelemetry SDK" in line
    assert "pip install 'notification-controller[tracing]'" in line
