"""``notification-controller silence add|list|expire`` as users run it (issue 26 item 2): the installed console
script, in local mode on a directory, and a running controller (local mode) that loads what it wrote on its
next poll. The same on a real API server: tests/e2e/test_silence_cli_e2e.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from notification_controller.api.objects import parse_object
from notification_controller.api.silence import Silence
from tests.integration.appkit import running_app

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "notification-controller"


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env=env
    )


def ok(*argv: str) -> str:
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return done.stdout


ADD = ["silence", "add", "--match", "kind=Kustomization", "--match", "name=~apps-.*", "--for", "2h"]


def test_help_lists_the_command_and_its_actions() -> None:
    assert "silence " in ok("--help")
    top = ok("silence", "--help")
    for action in ("add", "list", "expire"):
        assert action in top
    add = ok("silence", "add", "--help").replace("\n", " ")
    for flag in (
        "--match",
        "--for",
        "--comment",
        "--starts-at",
        "--name",
        "--no-summary",
        "--all-namespaces",
    ):
        assert flag in add
    for action in ("add", "list", "expire"):
        assert "text,json,yaml" in ok("silence", action, "--help").replace(" ", "").replace("\n", "")


def test_add_list_expire_in_a_directory(tmp_path: Path) -> None:
    added = ok(*ADD, "--comment", "deploy freeze", "-n", "apps", "--manifests", str(tmp_path), "-o", "yaml")
    manifest = yaml.safe_load(added)
    name = manifest["metadata"]["name"]
    assert name.startswith("silence-") and len(name) == len("silence-20261127-101500-3fa2")
    files = list(tmp_path.iterdir())
    assert [p.name for p in files] == [f"{name}.yaml"]  # and no temporary file left behind
    # -o yaml round-trips: what was printed is what was written, and the controller's parser takes it
    assert yaml.safe_load(files[0].read_text()) == manifest
    silence = parse_object(manifest)
    assert isinstance(silence, Silence) and silence.spec.comment == "deploy freeze"
    assert manifest["metadata"]["annotations"] == {"notification-controller.io/created-by-cli": "true"}
    assert manifest["spec"]["createdBy"]  # $USER

    table = ok("silence", "list", "-n", "apps", "--manifests", str(tmp_path)).splitlines()
    assert table[0].split() == ["NAME", "STATE", "MATCHERS", "ENDS", "HELD", "CREATED", "BY", "COMMENT"]
    assert table[1].split()[:4] == [name, "Active", "kind=Kustomization", "name=~apps-.*"]
    assert table[1].endswith("deploy freeze")
    as_json = json.loads(ok("silence", "list", "-n", "apps", "--manifests", str(tmp_path), "-o", "json"))
    as_yaml = yaml.safe_load(ok("silence", "list", "-n", "apps", "--manifests", str(tmp_path), "-o", "yaml"))
    assert as_json == as_yaml and [r["name"] for r in as_json] == [name] and as_json[0]["state"] == "Active"
    assert (
        ok("silence", "list", "--manifests", str(tmp_path))
        == "no active or pending silences in namespace 'flux-system'\n"
    )
    assert ok("silence", "list", "-A", "--manifests", str(tmp_path)).splitlines()[1].split()[:2] == [
        "apps",
        name,
    ]

    expired = ok("silence", "expire", name, "-n", "apps", "--manifests", str(tmp_path))
    assert expired.startswith(f"silence apps/{name} expired at ")
    assert ok("silence", "list", "-n", "apps", "--manifests", str(tmp_path)).startswith(
        "no active or pending"
    )
    rows = json.loads(
        ok("silence", "list", "-n", "apps", "--expired", "--manifests", str(tmp_path), "-o", "json")
    )
    assert [(r["name"], r["state"]) for r in rows] == [(name, "Expired")]
    rewritten = yaml.safe_load(files[0].read_text())
    assert (
        rewritten["spec"]["endsAt"] == rows[0]["endsAt"]
        and rewritten["spec"]["matchers"] == manifest["spec"]["matchers"]
    )
    again = ok("silence", "expire", name, "-n", "apps", "--manifests", str(tmp_path))
    assert "had already ended" in again and yaml.safe_load(files[0].read_text()) == rewritten
    assert [p.name for p in tmp_path.iterdir()] == [f"{name}.yaml"]


def test_what_add_writes_passes_check(tmp_path: Path) -> None:
    """The controller's manifest checker (the loader local mode uses) accepts every file add writes."""
    ok(*ADD, "--name", "one", "--manifests", str(tmp_path))
    ok(
        *ADD,
        "--name",
        "two",
        "--starts-at",
        "2030-01-01T00:00:00Z",
        "--no-summary",
        "--manifests",
        str(tmp_path),
    )
    done = run("check", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--match", "kind=~(", "--for", "2h"],
            "error: --match 'kind=~(': not an RE2 expression: missing ): (",
        ),
        (["--match", "colour=red", "--for", "2h"], "error: --match: name 'colour' is not one of kind, name"),
        (["--match", "kind=x", "--for", "2 hours"], "error: --for: invalid duration '2 hours'"),
        (["--match", "kind=x"], "error: the following arguments are required: --for"),
        (["--for", "2h"], "error: at least one --match is needed"),
        (
            ["--match", "kind=x", "--for", "1h", "--starts-at", "22:00"],
            "error: --starts-at '22:00' is not an RFC",
        ),
        (["--match", "kind=x", "--for", "1h", "--name", "A_B"], "error: --name: invalid name 'A_B'"),
        (["--match", "kind=x", "--for", "1h", "--frobnicate"], "error: unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    done = run("silence", "add", *argv, "--manifests", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith(says) and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_usage_errors_of_every_action(tmp_path: Path) -> None:
    for argv in (
        ["silence"],
        ["silence", "mute"],
        ["silence", "list"],  # neither --manifests nor --kubeconfig
        ["silence", "list", "--manifests", str(tmp_path), "--kubeconfig", str(tmp_path / "k")],
        ["silence", "expire", "--manifests", str(tmp_path)],
        ["silence", "list", "-o", "table", "--manifests", str(tmp_path)],
    ):
        done = run(*argv)
        assert done.returncode == 2 and done.stderr.startswith("error: "), (argv, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_what_cannot_be_done_exits_1(tmp_path: Path) -> None:
    gitops = tmp_path / "freeze.yaml"
    gitops.write_text(
        "# kept in Git\napiVersion: notification-controller.io/v1alpha1\nkind: Silence\n"
        "metadata: {name: freeze, namespace: flux-system}\n"
        "spec: {matchers: [{name: kind, value: Kustomization}], startsAt: '2026-01-01T00:00:00Z', endsAt: '2099-01-01T00:00:00Z'}\n"
    )
    before = gitops.read_text()
    for argv, says in (
        (["expire", "freeze"], "which 'silence add' did not write: set its spec.endsAt there"),
        (["expire", "nothing"], "Silence flux-system/nothing not found under"),
        ([*ADD[1:], "--name", "freeze"], "Silence flux-system/freeze already exists in"),
    ):
        done = run("silence", *argv, "--manifests", str(tmp_path))
        assert done.returncode == 1 and done.stderr.startswith("error: ") and says in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
    assert gitops.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["freeze.yaml"]
    done = run("silence", "list", "--manifests", str(tmp_path / "typo"))
    assert done.returncode == 1 and "no such directory" in done.stderr
    assert not (tmp_path / "typo").exists()
    done = run("silence", "list", "--kubeconfig", str(tmp_path / "missing-kubeconfig"))
    assert done.returncode == 1 and "no such kubeconfig file" in done.stderr


def test_created_by_is_the_local_user(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "USER": "alice"}
    done = run(*ADD, "--manifests", str(tmp_path), "-o", "json", env=env)
    assert json.loads(done.stdout)["spec"]["createdBy"] == "alice"
    done = run(*ADD, "--created-by", "bob", "--manifests", str(tmp_path), "-o", "json", env=env)
    assert json.loads(done.stdout)["spec"]["createdBy"] == "bob"


async def test_a_running_controller_loads_what_add_wrote(tmp_path: Path) -> None:
    """Local mode: the Silence is in the controller's object store after its next poll, and ``expire``'s
    rewrite reaches it too (the file is replaced whole, never read half-written)."""
    async with running_app(tmp_path) as app:
        added = await asyncio.to_thread(
            ok, *ADD, "--name", "freeze", "-n", "apps", "--manifests", str(tmp_path)
        )
        assert "wrote" in added
        first = await _until(lambda: app.store.silence("apps", "freeze"))
        await asyncio.to_thread(ok, "silence", "expire", "freeze", "-n", "apps", "--manifests", str(tmp_path))

        def ended() -> Silence | None:
            held = app.store.silence("apps", "freeze")
            return held if held is not None and held.spec.ends_at != first.spec.ends_at else None

        last = await _until(ended)
    assert [str(m) for m in first.spec.matchers] == ["kind=Kustomization", "name=~apps-.*"]
    assert last.spec.ends_at < first.spec.ends_at


async def _until(probe: Any, deadline: float = 30.0) -> Any:
    # by the wall clock (a plain loop here; no looptime)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = probe()
        if value is not None:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError("the controller did not load the Silence within 30 s")
