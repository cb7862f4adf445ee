"""``notification-controller history`` (issue 27 item 2): the installed command, as a subprocess, against a
running controller's UI listener (``--server``) and against the store the controller kept its history in
(``--store``), which must give the same answers.

The controller is the real process in local mode (tests/integration/test_history_api.py starts it, with real
local servers as its Providers' endpoints); events are POSTed to its event listener.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.integration.test_history_api import Controller, event, no_canary, post_the_four, running_controller
from tests.support.nats_server import run_nats_server
from tests.support.ports import free_port

SCRIPT = Path(sys.executable).parent / "notification-controller"
FIVE = {"delivered", "failed", "suppressed", "unmatched", "duplicate"}
DURABLE_FIVE = FIVE - {"failed"} | {"dead_lettered"}
"""A durable store does not give up at the first refusal: a permanent one is a dead letter."""
HOSTILE = "no such channel \x1b[2J\x1b]0;owned\x07\u202efake"
"""The refusing Provider's answer: a terminal escape (clear screen, set title, bell) and a bidi override."""


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "history", *argv], capture_output=True, text=True, timeout=60, check=False
    )


async def history(*argv: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *argv)


async def records(*argv: str) -> list[dict[str, Any]]:
    done = await history(*argv, "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert isinstance(rows, list)
    return rows


async def all_five(c: Controller, five: set[str] = FIVE) -> list[dict[str, Any]]:
    """The API's items once each of the five outcomes is recorded (recording is asynchronous)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        items = await c.records()
        if {r["outcome"] for r in items} >= five:
            return items
        assert loop.time() < deadline, items
        await asyncio.sleep(0.1)


async def test_the_command_answers_from_the_running_controller(tmp_path: Path) -> None:
    async with running_controller(tmp_path, refusal=HOSTILE) as c:
        await post_the_four(c)
        items = await all_five(c)

        rows = await records("--server", c.ui)
        assert [r["id"] for r in rows] == [r["id"] for r in items]  # the API's answer, record for record
        assert rows == items
        done = await history("--server", c.ui.removeprefix("http://"), "-o", "yaml")  # HOST:PORT works too
        assert yaml.safe_load(done.stdout) == rows
        [failed] = [r for r in rows if r["outcome"] == "failed"]
        # the JSON names the Alert as namespace/name, the outcome and the reason
        assert (failed["alert"], failed["outcome"], failed["reason"]) == (
            "flux-system/bad",
            "failed",
            "ReconciliationSucceeded",
        )

        # each filter, as flags (a bare name is in -n, default flux-system)
        assert {r["outcome"] for r in await records("--server", c.ui, "--outcome", "failed")} == {"failed"}
        assert {r["alert"] for r in await records("--server", c.ui, "--alert", "ok")} == {"flux-system/ok"}
        bad = await records("--server", c.ui, "--provider", "bad", "-n", "flux-system")
        assert {r["provider"] for r in bad} == {"flux-system/bad"}
        apps = await records("--server", c.ui, "--object", "Kustomization/flux-system/apps")
        assert {r["object"] for r in apps} == {"Kustomization/flux-system/apps"} and len(apps) >= 2
        assert [r["id"] for r in await records("--server", c.ui, "--limit", "1")] == [rows[0]["id"]]
        assert len(await records("--server", c.ui, "--since", "1h")) == len(rows)
        assert await records("--server", c.ui, "--until", "2020-01-01T00:00:00Z") == []
        by_event = await records("--server", c.ui, "--event", failed["eventId"])
        assert failed["id"] in {r["id"] for r in by_event} and {r["eventId"] for r in by_event} == {
            failed["eventId"]
        }
        assert await records("--server", c.ui, "--notification", failed["notificationId"]) == [failed]

        # the table: the columns, and the provider's hostile answer escaped (no terminal control gets out)
        done = await history("--server", c.ui)
        assert done.returncode == 0, done.stderr
        header, *lines = done.stdout.splitlines()
        assert header.split() == [
            "TIME",
            "OBJECT",
            "ALERT",
            "PROVIDER",
            "OUTCOME",
            "STAGE",
            "ATTEMPT",
            "STATUS",
            "DETAIL",
        ]
        assert len(lines) == len(rows)
        [row] = [line for line in lines if " failed " in line]
        assert "flux-system/bad" in row and " 400 " in row
        assert "\\x1b[2J" in row and "\\u202e" in row
        assert not any(ch in done.stdout for ch in ("\x1b", "\x07", "\u202e"))
        done = await history("--server", c.ui, "--since", "2099-01-01T00:00:00Z")
        assert (done.returncode, done.stdout) == (0, "no records match\n")
        for out in (done.stdout, json.dumps(rows)):
            no_canary(out)


async def test_bad_usage_is_one_line_and_exit_2_an_unreachable_source_exit_1(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    for argv, needle in (
        (["--server", nobody, "--outcome", "exploded"], "error: --outcome: 'exploded' is not one of"),
        (["--server", nobody, "--since", "yesterday"], "error: --since: 'yesterday' is neither a duration"),
        (["--server", nobody, "--object", "apps"], "error: --object: 'apps' is not KIND/NAMESPACE/NAME"),
        (["--server", nobody, "--alert", "a/b/c"], "error: --alert: must be NAME or NAMESPACE/NAME"),
        (["--server", nobody, "--limit", "5000"], "error: --limit: must be between 1 and 1000"),
        (["--server", nobody, "--since", "1h", "--until", "2h"], "error: --until: earlier than since"),
        (["--server", "ftp://x"], "error: --server: 'ftp://x' is not http://HOST:PORT"),
        (["--server", nobody, "--store", "sqlite:x.db"], "error: argument --store: not allowed with"),
        ([], "error: one of the arguments --server --store is required"),
        (["--store", "memory"], "error: the memory store"),
        (["--store", "redis://x"], "error: invalid --store 'redis://x'"),
    ):
        done = await history(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.startswith(needle) and done.stderr.count("\n") == 1, (argv, done.stderr)
        assert done.stdout == ""
    for argv, needle in (
        (["--server", nobody], f"error: the controller at {nobody} did not answer /api/history"),
        (["--store", f"sqlite:{tmp_path / 'nothing.db'}"], "error: store unavailable:"),
        (
            ["--store", f"nats://127.0.0.1:{free_port()}"],
            "error: store unavailable: nats history: cannot connect",
        ),
    ):
        done = await history(*argv)
        assert (done.returncode, done.stderr.count("\n")) == (1, 1), (argv, done.stderr)
        assert done.stderr.startswith(needle) and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "nothing.db").exists()  # a reading command creates nothing


async def test_a_sqlite_store_gives_the_same_answers_running_and_after_the_controller_stopped(
    tmp_path: Path,
) -> None:
    db = tmp_path / "nc.db"
    async with running_controller(tmp_path, f"--store=sqlite:{db}") as c:
        await post_the_four(c)
        items = await all_five(c, DURABLE_FIVE)
        served = await records("--server", c.ui)
        read = await records("--store", f"sqlite:{db}")  # while the controller runs (WAL)
        assert served == items and read == items
        [dead] = [r for r in items if r["outcome"] == "dead_lettered"]
        assert dead["alert"] == "flux-system/bad" and "400" in dead["detail"]
        # the overview of a durable store: the dead letter (masked) and the outbox's lane
        _, _, overview = await c.get("/api/overview")
        [letter] = overview["deadLetters"]
        assert (letter["provider"], letter["reason"], letter["attempts"]) == (
            "flux-system/bad",
            "permanent",
            1,
        )
        assert "400" in letter["error"] and letter["deadAt"].endswith("Z")
        bad = {p["provider"]: p for p in overview["providers"]}["flux-system/bad"]
        assert bad["outboxDepth"] == 0 and bad["breaker"] in (None, "closed")  # None: no lane now (drained)
        no_canary(json.dumps(overview))
        filtered = await records("--server", c.ui, "--outcome", "dead_lettered", "--since", "1h")
    assert c.proc.returncode == 0  # stopped cleanly (SIGTERM)

    after = await records("--store", f"sqlite:{db}")
    assert after == items  # the history survived the controller
    assert await records("--store", f"sqlite:{db}", "--outcome", "dead_lettered", "--since", "1h") == filtered
    assert await records("--store", f"sqlite:{db}", "--event", dead["eventId"]) == [
        r for r in items if r["eventId"] == dead["eventId"]
    ]
    done = await history("--store", f"sqlite:{db}", "--limit", "2")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3  # header + 2


async def test_two_replicas_on_nats_share_one_history(tmp_path: Path) -> None:
    """Two controller processes on one JetStream: each records its own decisions; the command reading the
    store, and either replica's API, answer both."""
    async with run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats:
        store = f"--store=nats://127.0.0.1:{nats.port}"
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        async with (
            running_controller(tmp_path / "a", store) as a,
            running_controller(tmp_path / "b", store) as b,
        ):
            assert await a.post(event("apps", message="on replica a")) == 202
            assert await b.post(event("apps", message="on replica b")) == 202
            assert await b.post(event("apps", message="on replica a")) == 429  # the shared duplicate window
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while True:
                rows = await records(
                    "--store", f"nats://127.0.0.1:{nats.port}", "--object", "Kustomization/flux-system/apps"
                )
                seen = {(r["message"], r["outcome"]) for r in rows}
                if {
                    ("on replica a", "delivered"),
                    ("on replica b", "delivered"),
                    ("on replica a", "duplicate"),
                } <= seen:
                    break
                assert loop.time() < deadline, seen
                await asyncio.sleep(0.2)
            assert {r["message"] for r in await a.records("outcome=delivered", n=2)} == {
                "on replica a",
                "on replica b",
            }
            assert {r["message"] for r in await b.records("outcome=delivered", n=2)} == {
                "on replica a",
                "on replica b",
            }
            assert await records("--server", a.ui, "--object", "Kustomization/flux-system/apps") == rows
