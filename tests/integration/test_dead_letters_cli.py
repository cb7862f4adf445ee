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
from notification_controller.state import NewItem, open_store


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
    assert _run("list", "--store", f"sqlite:{tmp_path / 'x.db'}", "--alert", "no-slash")[0] == 2
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
    from notification_controller.state import store_from_settings
    from notification_controller.state.nats import NATSStore

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
