"""The image's install path without a registry or Docker (issue 25): the wheel, installed as the Dockerfile does.

The Dockerfile's builder runs ``pip wheel ".[speed,nats,tracing]"`` and its runtime ``pip install --no-index
--find-links=/wheels "notification-controller[speed,nats,tracing]"``; the same two commands run here into a clean venv
(no source tree on its path, no test extras), then the README demo runs through the *installed* console script
from a directory outside the repository: local mode on examples/manifests, an event POSTed (202 with
``X-RateLimit-*``, the same again 429), the notification at a local sink signed with the Secret's key, the
GitHub receiver (200, bad signature 400, GET 405), ``/metrics`` naming the version, and ``--version``.

Time: the dependency wheels and the venv built from them are cached under
``~/.cache/notification-controller/wheel-venv-<hash of pyproject.toml>`` (the first run takes ~30 s on a
loaded machine); our own wheel is rebuilt and reinstalled with ``--no-index`` on every run, so the code tested
is the tree's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import aiohttp
import pytest

from tests.support.capture import CaptureServer
from tests.support.ports import free_port, listener_ports

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
VERSION = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "notification-controller"
EXTRAS = "[speed,nats,tracing]"  # the Dockerfile's


def _pip(python: Path | str, *args: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH, no venv of the suite: only what the installed package brings."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the freshly built wheel installed the Dockerfile's way; its bin/ directory."""
    tmp = tmp_path_factory.mktemp("wheel")
    ours = tmp / "ours"
    _pip(sys.executable, "wheel", "--no-deps", "--wheel-dir", str(ours), str(ROOT))
    (wheel,) = ours.glob("notification_controller-*.whl")
    assert wheel.name.startswith(f"notification_controller-{VERSION}-"), wheel.name
    key = hashlib.sha256(PYPROJECT.read_bytes()).hexdigest()[:16]
    cached = CACHE / f"wheel-venv-{key}"
    if not (cached / "bin" / "notification-controller").exists():
        wheels = tmp / "wheels"  # the builder stage: ours and every dependency as wheels
        _pip(sys.executable, "wheel", "--wheel-dir", str(wheels), f"{ROOT}{EXTRAS}")
        building = CACHE / f"wheel-venv-{key}.{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, timeout=120)
        # The runtime stage, offline.
        _pip(
            building / "bin" / "python",
            "install",
            "--no-index",
            f"--find-links={wheels}",
            f"notification-controller{EXTRAS}",
        )
        try:
            building.rename(cached)
        except OSError:  # another run finished first: use its venv
            shutil.rmtree(building, ignore_errors=True)
    # Always the tree's code: our wheel again, offline, its dependencies already there.
    _pip(cached / "bin" / "python", "install", "--no-index", "--no-deps", "--force-reinstall", str(wheel))
    return cached / "bin"


def test_the_venv_holds_the_installed_package_only(venv: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(venv / "python"), "-c", "import notification_controller as n, pytest; print(n.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        timeout=60,
        check=False,
    )
    assert "No module named 'pytest'" in done.stderr  # no test extras: the image's set of packages
    done = subprocess.run(
        [str(venv / "python"), "-c", "import notification_controller as n; print(n.__file__, n.__version__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        timeout=60,
        check=True,
    )
    path, version = done.stdout.split()
    assert Path(path).is_relative_to(venv.parent)
    assert version == VERSION


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_installed_console_script_reports_pyprojects_version(
    venv: Path, tmp_path: Path, argv: list[str]
) -> None:
    done = subprocess.run(
        [str(venv / "notification-controller"), *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith(f"notification-controller {VERSION} (Python 3.")


def _exited(proc: asyncio.subprocess.Process) -> bool:
    return proc.returncode is not None


async def _post(
    session: aiohttp.ClientSession, url: str, body: bytes, **headers: str
) -> aiohttp.ClientResponse:
    async with session.post(url, data=body, headers={"Content-Type": "application/json", **headers}) as resp:
        await resp.read()
        return resp


async def test_readme_demo_through_the_installed_console_script(venv: Path, tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        manifests = tmp_path / "manifests"
        shutil.copytree(ROOT / "examples" / "manifests", manifests)
        text = (manifests / "notifications.yaml").read_text().replace("http://127.0.0.1:9999", sink.url)
        (manifests / "notifications.yaml").write_text(text)
        ports = {**listener_ports(), "ui": free_port()}
        proc = await asyncio.create_subprocess_exec(
            str(venv / "notification-controller"),
            "--manifests",
            str(manifests),
            "--log-encoding",
            "console",
            f"--events-addr=127.0.0.1:{ports['events']}",
            f"--receiverAddr=127.0.0.1:{ports['receiver']}",
            f"--metrics-addr=127.0.0.1:{ports['metrics']}",
            f"--health-addr=127.0.0.1:{ports['health']}",
            f"--ui-addr=127.0.0.1:{ports['ui']}",
            cwd=tmp_path,
            env=_clean_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with aiohttp.ClientSession() as session:
                deadline = asyncio.get_running_loop().time() + 60
                while True:
                    assert not _exited(proc), "the installed controller exited"
                    try:
                        async with session.get(f"http://127.0.0.1:{ports['health']}/readyz") as resp:
                            if resp.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    assert asyncio.get_running_loop().time() < deadline, "never ready"
                    await asyncio.sleep(0.1)
                event = (ROOT / "examples" / "event.json").read_bytes()
                events_url = f"http://127.0.0.1:{ports['events']}/"
                first = await _post(session, events_url, event)
                assert first.status == 202
                assert "X-RateLimit-Limit" in first.headers
                assert (await _post(session, events_url, event)).status == 429
                [req] = await sink.wait_for(1, timeout=20)
                assert req.path == "/flux"
                expected = hmac.new(b"change-me-hmac-key", req.body, hashlib.sha256).hexdigest()
                assert req.headers["X-Signature"] == f"sha256={expected}"
                assert req.json()["metadata"] == {
                    "cluster": "local-demo",
                    "revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41",
                }
                # The GitHub receiver of examples/manifests/receiver.yaml, as the README signs it.
                token = "local-receiver-token"
                hook = "/hook/" + hashlib.sha256(f"{token}github-pushflux-system".encode()).hexdigest()
                hook_url = f"http://127.0.0.1:{ports['receiver']}{hook}"
                body = b'{"ref":"refs/heads/main"}'
                good = "sha256=" + hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
                github = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "demo-1"}
                assert (
                    await _post(session, hook_url, body, **github, **{"X-Hub-Signature-256": good})
                ).status == 200
                bad = {"X-Hub-Signature-256": "sha256=" + "0" * 64, "X-GitHub-Delivery": "demo-2"}
                assert (await _post(session, hook_url, body, **{**github, **bad})).status == 400
                async with session.get(hook_url) as resp:
                    assert resp.status == 405
                async with session.get(f"http://127.0.0.1:{ports['metrics']}/metrics") as resp:
                    metrics = await resp.text()
                # the web UI: its templates and static files are package data of the wheel
                ui = f"http://127.0.0.1:{ports['ui']}"
                for path, expected in [
                    ("/", "local-sink"),
                    ("/events", "o-delivered"),  # the event posted above, delivered
                    ("/static/live.js", "EventSource"),
                    ("/static/ui.css", "font"),
                ]:
                    async with session.get(ui + path) as resp:
                        assert resp.status == 200, (path, resp.status)
                        assert expected in await resp.text(), path
            assert 'notification_controller_build_info{python="' in metrics
            assert f'version="{VERSION}"}} 1.0' in metrics
            assert (
                'notification_delivered_total{provider="flux-system/local-sink",provider_type="generic-hmac"} 1.0'
                in metrics
            )
        finally:
            if not _exited(proc):
                proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=40)
        assert proc.returncode == 0, stderr.decode()[-2000:]
        assert "change-me-hmac-key" not in stderr.decode()
