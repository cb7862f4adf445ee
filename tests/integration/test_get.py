"""``notification-controller get`` (issue 25 item 7): ``flux get``'s columns in local mode, read from the running
controller's ``/status`` (server/health.py), through the installed console script, as a user runs it.

The controller is started with Flux's own Deployment args (``--watch-all-namespaces=true --log-level=info``,
gotk-components.yaml) through the same console script, so this also proves that a first argument that is a
flag still runs the controller (issue 25 item 2).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from tests.integration.test_process import wait_ready
from tests.support.ports import listener_ports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "notification-controller"

EXTRA = """
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: broken, namespace: apps}
spec: {type: slack, secretRef: {name: missing-secret}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: paused, namespace: apps}
spec:
  suspend: true
  providerRef: {name: broken}
  eventSources: [{kind: Kustomization, name: '*'}]
"""


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[str]:
    manifests = tmp_path / "manifests"
    shutil.copytree(ROOT / "examples" / "manifests", manifests)
    (manifests / "apps.yaml").write_text(EXTRA)
    ports = listener_ports()
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "--watch-all-namespaces=true",
        "--log-level=info",
        "--manifests",
        str(manifests),
        f"--events-addr=127.0.0.1:{ports['events']}",
        f"--receiverAddr=127.0.0.1:{ports['receiver']}",
        f"--metrics-addr=127.0.0.1:{ports['metrics']}",
        f"--health-addr=127.0.0.1:{ports['health']}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        addr = f"127.0.0.1:{ports['health']}"
        await wait_ready(f"http://{addr}/readyz", timeout=60)
        yield addr
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def _get(*argv: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, "get", *argv)


async def _eventually_ready(addr: str) -> None:
    """The reconcilers write status shortly after /readyz: poll until the broken Provider has its verdict."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        rows = json.loads((await _get("providers", "-A", "--addr", addr, "-o", "json")).stdout)
        if all(r["message"] != "waiting to be reconciled" for r in rows):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("providers never reconciled")


async def test_get_shows_fluxs_columns_from_the_running_controller(controller: str) -> None:
    await _eventually_ready(controller)

    done = await _get("alerts", "--addr", controller)  # -n defaults to flux-system, as flux's
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "NAME             READY  MESSAGE         SUSPENDED",
        "all-flux-system  True   Alert is ready  False",
    ]

    done = await _get("alerts", "-A", "--addr", controller)
    header, *lines = done.stdout.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "READY", "MESSAGE", "SUSPENDED"]
    assert [(line.split()[0], line.split()[1], line.split()[-1]) for line in lines] == [
        ("apps", "paused", "True"),
        ("flux-system", "all-flux-system", "False"),
    ]

    for output, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        done = await _get("providers", "-n", "apps", "--addr", controller, "-o", output)
        [broken] = load(done.stdout)
        assert (broken["name"], broken["ready"]) == ("broken", "False")
        assert "missing-secret" in broken["message"]

    done = await _get("receivers", "-n", "nowhere", "--addr", controller)
    assert (done.returncode, done.stdout) == (0, "no Receiver objects found in namespace 'nowhere'\n")
    done = await _get("receivers", "nope", "--addr", controller)
    assert done.returncode == 1 and "Receiver 'nope' not found in namespace 'flux-system'" in done.stderr


async def test_the_status_endpoint_carries_no_secret(controller: str) -> None:
    """A Receiver's webhook path is a bearer secret and its token a Secret: neither is in /status."""
    await _eventually_ready(controller)
    with urllib.request.urlopen(f"http://{controller}/status", timeout=10) as response:
        body = response.read().decode()
    kinds = {row["kind"] for row in json.loads(body)["items"]}
    assert kinds == {"Alert", "Provider", "Receiver"}
    path = hashlib.sha256(b"local-receiver-token" + b"github-push" + b"flux-system").hexdigest()
    for secret in ("local-receiver-token", "change-me-hmac-key", path, "webhookPath"):
        assert secret not in body
    assert "Receiver initialized for path: /hook/***" in body  # Flux's words, the path masked


def test_get_without_a_controller_is_one_line_and_exit_1() -> None:
    from tests.support.ports import free_port

    done = cli("get", "alerts", "--addr", f"127.0.0.1:{free_port()}")
    assert done.returncode == 1
    assert done.stderr.startswith("error: the controller at 127.0.0.1:") and "Traceback" not in done.stderr
