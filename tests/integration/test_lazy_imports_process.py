"""A local-mode controller started on the example manifests, in a fresh interpreter, imports none of the
heavy packages (issue 17, item 4): starting serves every listener and loads a ``generic`` Receiver, a
Provider and an Alert, so what ``import`` alone does not reach (the receiver server, the first load, the
first reconciles) is covered too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unit.test_lazy_imports import NOT_AT_START

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, json, sys
from notification_controller.app import App
from notification_controller.cli import parse_args

async def main():
    settings = parse_args([
        "--manifests", sys.argv[1], "--events-addr=127.0.0.1:0", "--receiverAddr=127.0.0.1:0",
        "--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0",
    ], environ={})
    app = await App.create(settings)
    await app.start()
    try:
        for _ in range(200):  # the first reconciles (local mode: they never wait on I/O)
            if app.ready() and all(app.controllers.reconciles.values()):
                break
            await asyncio.sleep(0.01)
        ready = app.ready()
    finally:
        await app.stop()
    print(json.dumps({"ready": ready, "modules": sorted(sys.modules)}))

asyncio.run(main())
"""


def test_a_started_local_mode_controller_imports_none_of_the_heavy_packages() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / "examples" / "manifests")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["ready"] is True
    loaded = sorted({m.split(".")[0] for m in result["modules"]} & set(NOT_AT_START))
    assert loaded == []
