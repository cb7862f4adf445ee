"""Silences as objects in local mode (issue 26 item 1): a running controller loads Silence documents from
the manifests directory at every poll, reports invalid ones with file, line and field like any other
document, writes their status (Pending → Active → Expired, on time), removes a file the ``silence`` CLI wrote
once it has been expired for ``--silence-retention``, and keeps every other file (the manifests are the
user's). The real ``App`` in-process, real files, real polling; no mocks."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from notification_controller import get
from notification_controller.api.silence import Silence, SilenceState
from notification_controller.app import App
from notification_controller.core import conditions as cond
from notification_controller.objects.local import SILENCE_CLI_ANNOTATION, LocalManifests
from notification_controller.settings import SilenceSettings
from notification_controller.silences import CREATED_BY_CLI
from tests.integration.appkit import post_event, running_app, write

SCRIPT = Path(sys.executable).parent / "notification-controller"
DEADLINE = 30.0  # generous: a loaded 2-core machine polls late, never wrong


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def silence_doc(
    name: str, starts: datetime | None, ends: datetime, *, cli: bool = False, extra: str = ""
) -> str:
    annotations = f'\n  annotations:\n    {SILENCE_CLI_ANNOTATION}: "true"' if cli else ""
    starts_line = f"\n  startsAt: {stamp(starts)}" if starts is not None else ""
    return f"""\
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata:
  name: {name}
  namespace: apps{annotations}
spec:
  matchers:
  - name: kind
    value: Kustomization
    matchType: ={starts_line}
  endsAt: {stamp(ends)}{extra}
"""


async def until(check: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={check()!r}")


def state(app: App, name: str) -> SilenceState | None:
    found = app.store.silence("apps", name)
    return None if found is None else found.status.state


def ready(silence: Silence | None) -> tuple[str, str] | None:
    found = None if silence is None else cond.find(silence.status.conditions, cond.READY)
    return None if found is None else (found.status.value, found.reason)


async def test_silences_load_report_their_state_on_time_and_cli_files_go_after_retention(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = datetime.now(UTC)
    write(
        tmp_path,
        "maintenance.yaml",
        silence_doc("maintenance", now - timedelta(minutes=1), now + timedelta(seconds=3)),
    )
    write(tmp_path, "later.yaml", silence_doc("later", now + timedelta(seconds=2), now + timedelta(hours=1)))
    cli_file = write(
        tmp_path,
        "silence-quick.yaml",
        silence_doc("quick", now - timedelta(hours=1), now + timedelta(seconds=1), cli=True),
    )
    gitops_file = write(
        tmp_path, "old.yaml", silence_doc("old", now - timedelta(hours=2), now - timedelta(hours=1))
    )
    with caplog.at_level(logging.INFO, logger="notification_controller"):
        async with running_app(tmp_path, silences=SilenceSettings(retention=2.0)) as app:
            assert await until(lambda: state(app, "maintenance") is SilenceState.ACTIVE, "maintenance active")
            maintenance = app.store.silence("apps", "maintenance")
            assert ready(maintenance) == ("True", "Active")
            assert state(app, "later") is SilenceState.PENDING or await until(
                lambda: state(app, "later") is SilenceState.PENDING, "later pending"
            )
            assert await until(lambda: state(app, "later") is SilenceState.ACTIVE, "later starts on time")
            assert await until(lambda: state(app, "maintenance") is SilenceState.EXPIRED, "maintenance ends")
            # The CLI's file goes once expired for 2 s; the user's old.yaml stays (expired, kept).
            await until(lambda: not cli_file.exists(), "the CLI's file removed after retention")
            await until(lambda: app.store.silence("apps", "quick") is None, "quick gone from the cache")
            assert gitops_file.exists()
            assert state(app, "old") is SilenceState.EXPIRED
            kept = [r.getMessage() for r in caplog.records if "is kept" in r.getMessage()]
            assert (
                len(kept) == 1
                and "Silence/apps/old" in kept[0]
                and "not written by the silence CLI" in kept[0]
            )
            # `get silences` shows the controller's view: in local mode the only place a status shows
            table = io.StringIO()
            argv = ["silences", "-n", "apps", "--addr", f"127.0.0.1:{app.ports['health']}"]
            assert await asyncio.to_thread(get.main, argv, table) == 0
            header, *rows = table.getvalue().splitlines()
            assert header.split() == ["NAME", "READY", "STATE", "ENDS", "HELD", "MESSAGE"]
            cells = {row.split()[0]: row.split()[:5] for row in rows}
            assert cells["later"][1:3] == ["True", "Active"]
            assert cells["old"][1:3] == ["True", "Expired"]
            assert cells["old"][3].startswith(stamp(now - timedelta(hours=1))[:19])
            assert "quick" not in cells
            as_json = io.StringIO()
            assert await asyncio.to_thread(get.main, [*argv, "-o", "json"], as_json) == 0
            later = next(r for r in json.loads(as_json.getvalue()) if r["name"] == "later")
            assert (later["kind"], later["state"], later["held"]) == ("Silence", "Active", 0)
            # events are still served
            response = await post_event(app, b'{"involvedObject": {}}')
            assert response.status == 202  # the controller serves events all along
    events = [r.getMessage() for r in caplog.records if "event Normal" in r.getMessage()]
    assert any("Active on Silence apps/maintenance" in e for e in events), events
    assert any("Expired on Silence apps/maintenance" in e for e in events), events


async def test_invalid_silence_documents_are_reported_with_file_line_and_field(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    write(tmp_path, "good.yaml", silence_doc("good", now, now + timedelta(hours=1)))
    write(
        tmp_path,
        "bad-regex.yaml",
        silence_doc("bad", now, now + timedelta(hours=1)).replace(
            "value: Kustomization\n    matchType: =", 'value: "apps-("\n    matchType: =~'
        ),
    )
    write(tmp_path, "no-start.yaml", silence_doc("nostart", None, now + timedelta(hours=1)))
    write(tmp_path, "backwards.yaml", silence_doc("backwards", now, now - timedelta(hours=1)))
    # ``silence expire`` within the second of ``add``: it has ended, which is not an error
    write(tmp_path, "zero.yaml", silence_doc("zero", now, now))
    async with running_app(tmp_path) as app:
        feeder = app._feeder
        assert isinstance(feeder, LocalManifests)
        errors = {(e.source, e.line, e.field): str(e) for e in feeder.last_errors}
        assert set(errors) == {
            ("bad-regex.yaml", 9, "spec.matchers[0].value"),
            ("no-start.yaml", 6, "spec.startsAt"),  # absent: its parent's line
            ("backwards.yaml", 12, "spec.endsAt"),
        }, errors
        assert "is not an RE2 expression" in errors[("bad-regex.yaml", 9, "spec.matchers[0].value")]
        assert "required in local mode" in errors[("no-start.yaml", 6, "spec.startsAt")]
        assert "must not be before spec.startsAt" in errors[("backwards.yaml", 12, "spec.endsAt")]
        assert app.store.silence("apps", "bad") is None
        assert await until(lambda: state(app, "good") is SilenceState.ACTIVE, "the valid one still loads")
        assert await until(lambda: state(app, "zero") is SilenceState.EXPIRED, "the zero-length one loads")
        # fixed in place: the next poll loads it
        write(tmp_path, "no-start.yaml", silence_doc("nostart", now, now + timedelta(hours=1)))
        assert await until(lambda: state(app, "nostart") is SilenceState.ACTIVE, "the fixed file loads")


async def test_a_file_the_silence_cli_wrote_goes_after_retention_and_a_shared_file_stays(
    tmp_path: Path,
) -> None:
    """The installed ``silence add`` (H-cli's command, as a user runs it) writes the file; the controller
    removes it once the Silence has been expired for ``--silence-retention``. The same annotation on a
    Silence of a file that holds other documents too does not make that file removable."""
    assert CREATED_BY_CLI == SILENCE_CLI_ANNOTATION  # the command and the loader agree on the mark
    done = await asyncio.to_thread(
        subprocess.run,
        [
            *(str(SCRIPT), "silence", "add", "--manifests", str(tmp_path), "-n", "apps"),
            *("--match", "kind=Kustomization", "--for", "2s", "--comment", "quick fix"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (written,) = tmp_path.glob("silence-*.yaml")
    now = datetime.now(UTC)
    shared = silence_doc("shared", now - timedelta(hours=2), now - timedelta(hours=1), cli=True)
    other = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes, namespace: apps}\n"
    shared_file = write(tmp_path, "shared.yaml", shared + other)
    async with running_app(tmp_path, silences=SilenceSettings(retention=1.0)) as app:
        name = written.stem
        assert await until(lambda: state(app, name) is not None, "the CLI's Silence loaded")
        await until(lambda: not written.exists(), "the CLI's file removed after expiry + retention")
        await until(lambda: app.store.silence("apps", name) is None, "and gone from the cache")
        assert shared_file.exists() and state(app, "shared") is SilenceState.EXPIRED
