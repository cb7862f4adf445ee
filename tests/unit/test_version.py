"""One version, written once (issue 25): pyproject's ``version``, read from the package metadata by the CLI
(``version`` and ``--version``, through the installed console script too) and by ``/metrics``
(``notification_controller_build_info``). tests/integration/test_installed_wheel.py checks a freshly built wheel.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import notification_controller
from notification_controller.cli import main
from notification_controller.lib.buildinfo import describe, version
from notification_controller.metrics import EventMetrics

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_the_version_is_pyprojects() -> None:
    assert version() == PYPROJECT_VERSION
    assert notification_controller.__version__ == PYPROJECT_VERSION
    assert describe().startswith(
        f"notification-controller {PYPROJECT_VERSION} (Python {platform.python_version()}"
    )


def test_no_other_file_of_the_package_writes_the_version() -> None:
    quoted = f'"{PYPROJECT_VERSION}"'
    holders = [
        p for p in (ROOT / "notification_controller").rglob("*.py") if quoted in p.read_text(encoding="utf-8")
    ]
    assert holders == []


@pytest.mark.parametrize("argv", [["version"], ["--version"]])
def test_cli_prints_the_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's version action exits 0
        code = int(exc.code or 0)
    assert code == 0
    assert capsys.readouterr().out == describe() + "\n"


def test_version_takes_no_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "extra"]) == 2
    assert "usage: notification-controller version" in capsys.readouterr().err


def test_the_installed_console_script_and_python_m_agree() -> None:
    script = Path(sys.executable).with_name("notification-controller")
    outputs = {
        tuple(cmd): subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
        for cmd in (
            [str(script), "version"],
            [str(script), "--version"],
            [sys.executable, "-m", "notification_controller", "version"],
        )
    }
    assert set(outputs.values()) == {describe() + "\n"}


def test_build_info_gauge() -> None:
    registry = CollectorRegistry()
    EventMetrics(registry)
    text = generate_latest(registry).decode()
    line = f'notification_controller_build_info{{python="{platform.python_version()}",version="{PYPROJECT_VERSION}"}} 1.0'
    assert line in text.splitlines()
