"""The installed ``notification-controller`` as users run it (issue 25 item 2): every subcommand through the
console script (the image's ENTRYPOINT), quiet on a closed pipe, and reading commands that create nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "notification-controller"
EVENT = ROOT / "examples" / "events" / "kustomization-health-failed.json"
MANIFESTS = ROOT / "examples" / "manifests"


def run(*argv: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SCRIPT), *argv], stdout=stdout, stderr=subprocess.PIPE, timeout=60, check=False, cwd=ROOT
    )


@pytest.mark.parametrize("command", ["run", "get", "explain", "send", "check", "dead-letters", "version"])
def test_every_subcommand_is_dispatched_by_the_installed_script(command: str) -> None:
    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    assert b"usage: notification-controller" in done.stdout and not done.stderr


def test_the_same_output_vocabulary_everywhere(tmp_path: Path) -> None:
    explained = run("explain", "--manifests", str(MANIFESTS), "--event", str(EVENT), "-o", "yaml")
    assert explained.returncode == 0 and b"matched: true" in explained.stdout
    as_json = run("explain", "--manifests", str(MANIFESTS), "--event", str(EVENT), "-o", "json")
    assert json.loads(as_json.stdout)["alerts"][0]["matched"] is True
    for command in (["get", "alerts"], ["dead-letters", "list", "--store", "memory"], ["explain"], ["send"]):
        assert b"text,json,yaml" in run(*command, "--help").stdout.replace(b" ", b"").replace(b"\n", b"")


@pytest.mark.parametrize(
    "argv",
    [
        ["version"],
        ["--flags-table"],
        ["explain", "--manifests", str(MANIFESTS), "--event", str(EVENT)],
        ["check", str(MANIFESTS)],
    ],
    ids=["version", "flags-table", "explain", "check"],
)
def test_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    """``… | head``: the reader is gone before anything is written; no traceback, no "error: Broken pipe"."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = run(*argv, stdout=write)
    finally:
        os.close(write)
    assert done.stderr == b"", done.stderr.decode()
    assert done.returncode in (0, 141)


def test_dead_letters_on_a_missing_sqlite_file_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    done = run("dead-letters", "list", "--store", f"sqlite:{typo}")
    assert done.returncode == 1
    assert done.stderr.decode().startswith("error: store unavailable:") and b"no such database" in done.stderr
    assert not typo.exists() and list(tmp_path.iterdir()) == []


def test_no_dead_letters_is_said_in_words(tmp_path: Path) -> None:
    import asyncio

    from notification_controller.store.sqlite import SQLiteStore

    db = tmp_path / "nc.db"

    async def create() -> None:
        store = SQLiteStore(db)
        await store.start()
        await store.close()

    asyncio.run(create())
    done = run("dead-letters", "list", "--store", f"sqlite:{db}")
    assert (done.returncode, done.stdout) == (0, b"no dead letters\n")
    assert run("dead-letters", "list", "--store", f"sqlite:{db}", "-o", "yaml").stdout == b"[]\n"


def test_send_looks_a_bare_provider_name_up_in_the_default_namespace() -> None:
    done = run("send", "--manifests", str(MANIFESTS), "--provider", "local-sink", "-o", "json")
    assert b"not found" not in done.stderr
    assert json.loads(done.stdout)["provider"] == "flux-system/local-sink"  # delivered or not: it was found
    missing = run("send", "--manifests", str(MANIFESTS), "--provider", "local-sink", "-n", "apps")
    assert missing.returncode == 2
    assert missing.stderr == b"error: Provider 'local-sink' not found in namespace 'apps'\n"


def test_bad_paths_are_one_line_errors(tmp_path: Path) -> None:
    for argv in (
        ["explain", "--manifests", str(MANIFESTS), "--event", str(tmp_path / "nope.json")],
        ["explain", "--manifests", str(tmp_path / "nope"), "--event", str(EVENT)],
        ["send", "--manifests", str(tmp_path / "nope"), "--provider", "x"],
    ):
        done = run(*argv)
        assert done.returncode == 2 and b"Traceback" not in done.stderr
        assert done.stderr.startswith(b"error: ") and done.stderr.count(b"\n") == 1
