"""Optional profiling of the controller while a benchmark runs (``python -m bench --profile DIR``).

``py-spy`` (``pip install py-spy``) samples the controller process from the outside, so nothing in the
controller changes; ``--nonblocking`` keeps it from pausing the target. It writes collapsed stacks
(``--format raw``: ``frame;frame;... count``) and this module turns them into the two lists that
matter: *self* time (where the CPU actually is) and *inclusive* time (which call trees cost most),
as percentages of all non-idle samples. py-spy also needs ptrace rights on the target (root, or
``kernel.yama.ptrace_scope=0``); without them the profile is skipped with a message, never an error.

Profiling takes CPU from the benchmark on a small machine: profiled runs are for finding hot spots,
not for the numbers in the table.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    candidate = Path(sys.executable).with_name("py-spy")
    if candidate.exists():
        return str(candidate)
    return shutil.which("py-spy")


def _short(frame: str) -> str:
    """``handle (/x/site-packages/aiohttp/web_protocol.py:512)`` → ``handle (aiohttp/web_protocol.py)``."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match.group('func')} ({path})"


@dataclass
class Profile:
    samples: int
    self_time: Counter[str]
    inclusive: Counter[str]

    def top(self, counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return (
            [(name, 100.0 * count / self.samples) for name, count in counter.most_common(n)]
            if self.samples
            else []
        )

    def render(self, n: int = 20) -> str:
        lines = [f"{self.samples} samples"]
        lines.append("self time:")
        lines.extend(f"  {pct:5.1f}%  {name}" for name, pct in self.top(self.self_time, n))
        lines.append("inclusive time:")
        lines.extend(f"  {pct:5.1f}%  {name}" for name, pct in self.top(self.inclusive, n))
        return "\n".join(lines)


def summarize(raw: str) -> Profile:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        count = int(match.group("count"))
        frames = [_short(f) for f in match.group("stack").split(";") if f.strip()]
        if not frames:
            continue
        # py-spy puts a "process/thread" pseudo-frame first; it has no "(file)" part.
        frames = [f for f in frames if "(" in f] or frames
        samples += count
        self_time[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return Profile(samples, self_time, inclusive)


async def record(pid: int, seconds: float, out: Path) -> Profile | str:
    """Sample ``pid`` for ``seconds``; returns the summary, or why there is none."""
    exe = py_spy()
    if exe is None:
        return "py-spy not installed (pip install py-spy)"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        exe,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        "250",
        "--nonblocking",
        "--format",
        "raw",
        "-o",
        str(out),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await proc.communicate()
    if proc.returncode != 0 or not out.exists():
        return f"py-spy failed ({proc.returncode}): {stderr.decode(errors='replace')[-300:]}"
    profile = summarize(out.read_text(errors="replace"))
    out.with_suffix(".top.txt").write_text(profile.render(30) + "\n")
    return profile
