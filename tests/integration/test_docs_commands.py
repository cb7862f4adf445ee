"""Every shell command in README.md and docs/ runs as written from a fresh clone (issue 25, "Done when").

The commands are extracted from the Markdown itself: every line of a ```` ```sh ```` block and every ``$ ``
line of a ```` ```console ```` block (the exit status a console block shows with ``echo $?`` is the one
expected). They run with bash in a copy of the repository's tracked files (``git ls-files``: what a clone
has) whose ``.venv`` is this test's virtualenv, so ``make run`` and ``.venv/bin/notification-controller``
resolve as they would after ``make venv``.

Commands that start a server (``make run``, ``make sink``, ``make hook``, the controller itself) are started
in the background as a reader in another terminal would, probed until they answer, and stopped when the next
block starts its own or the file ends. A block that needs a server a previous block of the same page did not
start names it in ``NEEDS``. Commands that need a cluster, an image builder, a registry or minutes of work are
skipped by ``SKIP``: an explicit, reviewed list of prefixes, each with the reason; a command that matches
neither list runs. Both lists are checked: an entry that no longer matches any command fails the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]

SKIP: dict[str, str] = {
    "kubectl ": "needs a Kubernetes cluster (the e2e suite applies config/ and dist/ to a real API server)",
    "docker ": "needs a container engine and a registry (tests/integration/test_installed_wheel.py installs "
    "the wheel as the Dockerfile does)",
    "make image": "docker build",
    "make test": "the whole suite (it runs this test)",
    "make bench": "minutes of load (tests/integration/test_bench_smoke.py runs the bench quickly)",
    "kubectl kustomize clusters/": "renders the repository flux bootstrap wrote (the e2e renders the fixture)",
    "kustomize build clusters/": "renders your cluster repository (docs/check.md; tests/unit/test_check.py "
    "feeds check on stdin)",
    "flux ": "Flux's CLI against a cluster",
    "cp -r dist/flux-system/notification-controller clusters/": "needs the repository flux bootstrap wrote",
    "gcloud ": "needs a Google Cloud project",
    'curl -X POST -H "Content-Type: application/json" -H "Ce-': "a placeholder host (<host><webhookPath>)",
    'curl -X POST -H "Content-Type: application/json" -H "X-Signature': "a placeholder host (flux.example.com)",
}
"""Command prefix -> why it is not run here. Review every addition."""

NEEDS: dict[tuple[str, str], str] = {
    ("docs/install.md", "curl -s 127.0.0.1:8080/metrics"): "make run",
}
"""(page, a command's prefix) -> the server it needs that no earlier block of the page started."""


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Server:
    pattern: str
    url: str  # probed until it answers (any HTTP status: the port is up)


SERVERS = [
    Server(r"^make run\b", "http://127.0.0.1:9440/readyz"),
    Server(r"^make sink\b", "http://127.0.0.1:9999/"),
    Server(r"^make hook\b", "http://127.0.0.1:9595/"),
    Server(r"^\.venv/bin/notification-controller --manifests\b", "http://127.0.0.1:9440/readyz"),
]

EXPECT: dict[str, str] = {
    "curl -i -X POST -H 'Content-Type: application/json' --data @examples/event.json": "HTTP/1.1 202",
    "curl -i -X POST -H 'Content-Type: application/json' -H 'X-GitHub-Event: push'": "HTTP/1.1 200",
    ".venv/bin/notification-controller get alerts": "all-flux-system  True",
    ".venv/bin/notification-controller dead-letters list --store sqlite:/tmp/nc-state.db": "no dead letters",
    ".venv/bin/notification-controller send --manifests examples/manifests --provider local-sink": "delivered",
}
"""Command prefix -> text its output must contain (what the page says it prints)."""


@dataclass
class Block:
    page: str
    line: int
    commands: list[str] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)


def _logical_lines(lines: list[str]) -> Iterator[str]:
    buffer = ""
    for raw in lines:
        if raw.rstrip().endswith("\\"):
            buffer += raw.rstrip()[:-1] + " "
            continue
        yield buffer + raw
        buffer = ""


def _strip_comment(command: str) -> str:
    """Drop a trailing ``# comment`` outside quotes (the pages annotate commands that way)."""
    quote = ""
    for i, ch in enumerate(command):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1] in " \t"):
            return command[:i].rstrip()
    return command.rstrip()


def extract(page: str) -> list[Block]:
    blocks: list[Block] = []
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence in ("```sh", "```console"):
            start, body = i + 1, []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            block = Block(page, start)
            if fence == "```sh":
                for command in map(_strip_comment, _logical_lines(body)):
                    if command:
                        block.commands.append(command.strip())
                        block.exits.append(0)
            else:
                for n, text in enumerate(body):
                    if not text.startswith("$ "):
                        continue
                    command = _strip_comment(text[2:])
                    if command == "echo $?":
                        block.exits[-1] = int(body[n + 1])
                    else:
                        block.commands.append(command)
                        block.exits.append(0)
            blocks.append(block)
        i += 1
    return blocks


def _skip_reason(command: str) -> str | None:
    return next((why for prefix, why in SKIP.items() if command.startswith(prefix)), None)


def _server(command: str) -> Server | None:
    return next((s for s in SERVERS if re.search(s.pattern, command)), None)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files, as a clone has them, with this test's venv as ``.venv``."""
    dest = tmp_path_factory.mktemp("clone")
    # Tracked and new (not ignored) files: the working tree as its next commit would clone.
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(VENV)
    # The Makefile reinstalls when pyproject.toml is newer than the venv's stamp; the venv is this one,
    # installed from the working tree: keep make from re-pointing it at the copy.
    stamp = VENV / ".installed-run"
    if stamp.exists():
        older = stamp.stat().st_mtime - 1
        os.utime(dest / "pyproject.toml", (older, older))
    return dest


class Terminals:
    """The servers a reader would have running in other terminals; each in its own process group."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, command: str, server: Server, log: Path) -> None:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                ["bash", "-c", command], cwd=self.cwd, stdout=out, stderr=out, start_new_session=True
            )
        self.running[command] = proc
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{command!r} exited {proc.returncode}: {log.read_text()[-2000:]}"
            try:
                urllib.request.urlopen(server.url, timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # it answers
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"{command!r} never answered {server.url}: {log.read_text()[-2000:]}")

    def stop_all(self) -> None:
        for proc in self.running.values():  # the whole group: a leader that exited may leave children
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.running.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.running.clear()


def _ports_free() -> bool:
    for port in (9090, 9292, 8080, 9440, 9999, 9595, 9494):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def test_extraction_sees_the_pages_commands() -> None:
    commands = [c for page in PAGES for b in extract(page) for c in b.commands]
    assert "make run" in commands and len(commands) > 30
    for prefix in [*SKIP, *EXPECT, *(p for _, p in NEEDS)]:  # no stale entry
        assert any(c.startswith(prefix) for c in commands), f"no command starts with {prefix!r} any more"
    assert not [c for c in commands if "python -m notification_controller" in c]  # the console script


@pytest.mark.timeout(180)
def test_every_command_runs_as_written(clone: Path, tmp_path: Path) -> None:
    if not _ports_free():
        pytest.skip("the demo's fixed ports (9090, 9292, 8080, 9440, 9999, 9595, 9494) are in use")
    log = tmp_path / "servers.log"
    env = {**os.environ}
    env.pop("VIRTUAL_ENV", None)  # as a fresh shell: nothing activated, .venv/bin/... named as the pages do
    terminals = Terminals(clone)
    ran, skipped, failures = 0, [], []
    try:
        for page in PAGES:
            for block in extract(page):
                script: list[tuple[str, int]] = []
                for command, code in zip(block.commands, block.exits, strict=True):
                    why = _skip_reason(command)
                    server = _server(command)
                    if why:
                        skipped.append((f"{page}:{block.line}", command, why))
                    elif server is not None:
                        if not script and any(_server(c) for c in terminals.running):
                            terminals.stop_all()  # a block that starts servers replaces the last ones
                        terminals.start(command, server, log)
                    else:
                        script.append((command, code))
                for (needs_page, prefix), needed in NEEDS.items():
                    if needs_page == page and any(c.startswith(prefix) for c, _ in script):
                        if needed not in terminals.running:
                            terminals.start(needed, _server(needed) or SERVERS[0], log)
                if not script:
                    continue
                if any(ASSIGNMENT.match(c) for c, _ in script):
                    # Shell variables set on one line are used on the next: the block runs as one script.
                    steps = [("\n".join(c for c, _ in script), 0)]
                else:
                    steps = script
                for command, code in steps:
                    done = subprocess.run(
                        ["bash", "-e", "-o", "pipefail", "-c", command],
                        cwd=clone,
                        env=env,
                        capture_output=True,
                        timeout=60,
                        check=False,
                    )
                    ran += command.count("\n") + 1
                    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
                    wanted = [
                        t for p, t in EXPECT.items() if any(c.startswith(p) for c in command.splitlines())
                    ]
                    if done.returncode != code or any(t not in output for t in wanted):
                        failures.append(
                            f"{page}:{block.line}: {command}\n  exit {done.returncode}: {output[-800:]}"
                        )
            terminals.stop_all()
    finally:
        terminals.stop_all()
    print(f"ran {ran} commands; skipped {len(skipped)}:")
    for where, command, why in skipped:
        print(f"  {where}: {command[:70]}  ({why})")
    assert not failures, "\n".join(failures)
    assert ran >= 10
