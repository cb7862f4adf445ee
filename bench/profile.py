"""Optional profiling of the controller while a benchmark runs (``python -m bench --profile DIR``).

``py-spy`` (the ``test`` extra) samples the controller process from the outside, so nothing in the
controller changes. It pauses the target for each sample (no ``--nonblocking``): slower by a few
percent, but with ``--nonblocking`` most stacks came out truncated (a third of the samples reached the
event loop's frames), which made the inclusive times useless. It writes collapsed stacks
(``--format raw``: ``frame;frame;... count``) and this module turns them into the two lists that
matter: *self* time (where the CPU actually is) and *inclusive* time (which call trees cost most),
as percentages of all non-idle samples. py-spy also needs ptrace rights on the target (root, or
``kernel.yama.ptrace_scope=0``); without them the profile is skipped with a message, never an error.

Profiling takes CPU from the benchmark on a small machine: profiled runs are for finding hot spots,
not for the numbers in the table. py-spy samples wall-clock time of running threads: on a busy machine a
thread preempted right after a syscall (a socket ``send`` that wakes the peer) is sampled there, so
``_SelectorSocketTransport.write`` looks more expensive than its CPU cost. The µs/event column (share
of samples × the process's measured CPU per event) inherits that bias.
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
    thread_samples: int = 0  # samples of other threads (left out of the percentages)

    def top(self, counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return (
            [(name, 100.0 * count / self.samples) for name, count in counter.most_common(n)]
            if self.samples
            else []
        )

    def render(self, n: int = 20, per_event_us: float | None = None) -> str:
        """Top ``n`` self and inclusive frames; with the process's CPU µs per event, each frame's share
        of it too (share of the samples × CPU per event: where the microseconds of an event go)."""

        def line(name: str, pct: float) -> str:
            cost = f"  {pct / 100 * per_event_us:7.1f} µs/event" if per_event_us else ""
            return f"  {pct:5.1f}%{cost}  {name}"

        head = f"{self.samples} samples of the event-loop thread"
        if self.thread_samples:
            head += f" ({self.thread_samples} of other threads left out)"
        if per_event_us:
            head += f", {per_event_us:.1f} µs of CPU per event in all"
        lines = [head, "self time:"]
        lines.extend(line(name, pct) for name, pct in self.top(self.self_time, n))
        lines.append("inclusive time:")
        lines.extend(line(name, pct) for name, pct in self.top(self.inclusive, n))
        return "\n".join(lines)


def summarize(raw: str) -> Profile:
    """Self and inclusive counts of the event-loop thread's samples.

    Samples of other threads (``threading`` bootstrap frames: the default executor's idle workers, the
    stderr pump) are counted apart: py-spy reports them as active while ``/proc/<pid>/task/*/stat`` shows
    they used no CPU (0–2 ticks over a 6 s delivery run against 700 for the loop thread), so mixing them
    in would charge the event path with time nobody spent.
    """
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    thread_samples = 0
    for line in raw.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        count = int(match.group("count"))
        frames = [_short(f) for f in match.group("stack").split(";") if f.strip()]
        if not frames:
            continue
        if any(f.startswith(("_bootstrap (threading.py", "Thread._bootstrap (threading.py")) for f in frames):
            thread_samples += count
            continue
        # py-spy puts a "process/thread" pseudo-frame first; it has no "(file)" part.
        frames = [f for f in frames if "(" in f] or frames
        samples += count
        self_time[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return Profile(samples, self_time, inclusive, thread_samples)


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
