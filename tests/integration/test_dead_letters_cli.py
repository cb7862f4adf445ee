"""``dead-letters list|replay|drop`` on a real SQLite file (and once as a real process)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from notification_controller.deadletters import main
from notification_controller.store import NewItem, open_store


def _payload(alert: str, obj: str) -> bytes:
    ns, name = alert.split("/")
    kind, ons, oname = obj.split("/")
    return json.dumps(
        {
            "alert": {"namespace": ns, "name": name},
            "event": {"involvedObject": {"kind": kind, "namespace": ons, "name": oname}, "reason": "Failed"},
        }
    ).encode()


async def _seed(path: Path) -> None:
    store = open_store(f"sqlite:{path}")
    await store.start()
    await store.append(
        [
            NewItem("a1", "team-a/slack", _payload("team-a/on-call", "Kustomization/team-a/apps")),
            NewItem("a2", "team-a/slack", _payload("team-a/on-call", "Kustomization/team-a/infra")),
            NewItem("b1", "team-b/teams", _payload("team-b/audit", "HelmRelease/team-b/db")),
        ]
    )
    for provider, reason, error in (
        ("team-a/slack", "max-age", "503 Service Unavailable"),
        ("team-a/slack", "max-age", "connection refused"),
        ("team-b/teams", "permanent", "400 Bad Request"),
    ):
        lease = await store.lease(provider)
        assert lease is not None
        await store.dead_letter(lease, reason=reason, error=error)
    await store.close()


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


async def _arun(*argv: str) -> tuple[int, str]:
    """``main`` runs its own event loop (asyncio.run): from an async test, on a thread."""
    return await asyncio.to_thread(_run, *argv)


async def _outbox_ids(path: Path) -> list[str]:
    store = open_store(f"sqlite:{path}")
    await store.start()
    ids = []
    for provider in await store.stats():
        while (lease := await store.lease(provider)) is not None:
            ids.append(lease.id)
    await store.close()
    return sorted(ids)


async def test_list_filter_replay_and_drop(tmp_path: Path) -> None:
    db = tmp_path / "nc.db"
    await _seed(db)
    url = f"sqlite:{db}"
    rc, out = await _arun("list", "--store", url, "-o", "json")
    rows = json.loads(out)
    assert rc == 0 and [r["id"] for r in rows] == ["a1", "a2", "b1"]
    assert rows[0]["alert"] == "team-a/on-call" and rows[0]["object"] == "Kustomization/team-a/apps"
    assert rows[2]["reason"] == "permanent" and rows[2]["error"] == "400 Bad Request"
    rc, out = await _arun("list", "--store", url, "--alert", "team-b/audit")
    assert rc == 0
    lines = out.splitlines()
    assert (
        lines[0].split()[:3] == ["ID", "ALERT", "PROVIDER"] and len(lines) == 2 and lines[1].startswith("b1 ")
    )

    rc, out = await _arun("replay", "--store", url, "--alert", "team-a/on-call")
    assert (rc, out) == (0, "replayed 2 dead letters\n")
    assert await _outbox_ids(db) == ["a1", "a2"]  # back in the outbox: a running controller sends them
    rc, out = await _arun("list", "--store", url, "-o", "json")
    assert [r["id"] for r in json.loads(out)] == ["b1"]

    rc, out = await _arun("drop", "--store", url, "--all", "-o", "json")
    assert rc == 0 and json.loads(out) == {"dropped": 1, "ids": ["b1"]}
    assert await _arun("list", "--store", url, "-o", "json") == (0, "[]\n")


def test_usage_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        _run("replay", "--store", f"sqlite:{tmp_path / 'x.db'}")[0] == 2
    )  # no selection: refuse to act on all
    assert "needs --id, --alert, --provider or --all" in capsys.readouterr().err
    assert _run("list", "--store", f"sqlite:{tmp_path / 'x.db'}", "--alert", "a/b/c")[0] == 2
    assert _run("list", "--store", "memory")[0] == 2
    assert _run("list", "--store", "redis://x")[0] == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "invalid --store" in err


def test_store_unreachable_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _ = _run("list", "--store", "nats://127.0.0.1:1")
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith("error: store unavailable") and "Traceback" not in err


async def test_as_a_process(tmp_path: Path) -> None:
    db = tmp_path / "nc.db"
    await _seed(db)
    done = subprocess.run(
        [sys.executable, "-m", "notification_controller", "dead-letters", "list", "--store", f"sqlite:{db}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["ID", "a1", "a2", "b1"]


def test_nats_credentials_come_from_files_never_the_url(tmp_path: Path) -> None:
    from notification_controller.errors import ConfigError
    from notification_controller.settings import StoreSettings
    from notification_controller.store import store_from_settings
    from notification_controller.store.nats import NATSStore

    secret = tmp_path / "password"
    secret.write_text("s3cret-from-a-mounted-secret\n")
    store = store_from_settings(
        StoreSettings(url="nats://127.0.0.1:4222", nats_user="nc", nats_password_file=secret)
    )
    assert isinstance(store, NATSStore)
    assert store.auth is not None and (store.auth.user, store.auth.password) == (
        "nc",
        "s3cret-from-a-mounted-secret",
    )
    assert "s3cret" not in repr(store.auth)
    with pytest.raises(ConfigError, match="cannot read --store-nats-password-file"):
        store_from_settings(
            StoreSettings(url="nats://127.0.0.1:4222", nats_password_file=tmp_path / "missing")
        )
    with pytest.raises(ConfigError, match="credentials do not belong in the URL"):
        store_from_settings(StoreSettings(url="nats://nc:pw@127.0.0.1:4222"))


HOSTILE = {
    "name": "apps\x1b[2J\x1b[H\x07",  # clear screen, home, bell
    "namespace": "team-a\r\x1b[32mall 3 dead letters replayed OK\x1b[0m",  # a fake line over the real one
    "kind": "Kustomization\x9b31m\u202e",  # C1 CSI, a bidi override
    "reason": "Failed\x00\x7f",
    "error": "502 from provider: \x1b]0;pwned\x07\x1b[1A\u2028\x85",  # OSC title, cursor up, separators
}


async def _seed_hostile(path: Path) -> None:
    payload = json.dumps(
        {
            "alert": {"namespace": "team-a", "name": "on-call"},
            "event": {
                "involvedObject": {
                    "kind": HOSTILE["kind"],
                    "namespace": HOSTILE["namespace"],
                    "name": HOSTILE["name"],
                },
                "reason": HOSTILE["reason"],
            },
        }
    ).encode()
    store = open_store(f"sqlite:{path}")
    await store.start()
    try:
        await store.append([NewItem("evil\x1b[8m", "team-a/slack", payload)])
        lease = await store.lease("team-a/slack")
        assert lease is not None
        await store.dead_letter(lease, reason="permanent", error=HOSTILE["error"])
    finally:
        await store.close()


LIST = [sys.executable, "-m", "notification_controller", "dead-letters", "list", "--store"]


def _unsafe(text: str) -> list[str]:
    """Characters a terminal acts on: C0 but newline, DEL, C1, bidi/format controls, line separators."""
    return [
        repr(ch)
        for ch in text
        if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F or ch in "\u202e\u2028\u2029"
    ]


async def test_list_escapes_terminal_control_sequences_from_events_and_providers(tmp_path: Path) -> None:
    """Issue 23 item 12: event fields and the provider's answer reach an operator's terminal. The real
    command, as a process: not one control byte on stdout, and every one shown as an escape."""
    db = tmp_path / "nc.db"
    await _seed_hostile(db)
    for output in ("text", "json"):
        done = await asyncio.to_thread(
            subprocess.run,
            [*LIST, f"sqlite:{db}", "-o", output],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        text = done.stdout.decode("utf-8")  # strict: also proves no broken UTF-8 reached the terminal
        assert _unsafe(text) == [], (output, _unsafe(text))
        if output == "text":
            assert len(text.splitlines()) == 2  # the header and one row: no injected line
            for shown in (
                r"\x1b[2J\x1b[H\x07",
                r"team-a\r\x1b[32m",
                r"\u009b31m\u202e",
                r"evil\x1b[8m",
                r"\u2028\u0085",
            ):
                assert shown in text, (shown, text)
        else:
            row = json.loads(text)[0]
            assert row["object"] == f"{HOSTILE['kind']}/{HOSTILE['namespace']}/{HOSTILE['name']}"
            assert row["eventReason"] == HOSTILE["reason"] and row["error"] == HOSTILE["error"]


def test_escape_cell_keeps_text_and_escapes_only_what_a_terminal_acts_on() -> None:
    from notification_controller.lib.output import escape_cell

    assert escape_cell("flux-system/ünïcode apps") == "flux-system/ünïcode apps"
    assert escape_cell("a\tb\nc\\d") == r"a\tb\nc\\d"  # the backslash too: an escape cannot be faked
    assert escape_cell("\x1b\x9b\x7f\u200b\U000e0001") == r"\x1b\u009b\x7f\u200b\U000e0001"
