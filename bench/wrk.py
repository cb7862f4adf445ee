"""Throughput load with ``wrk`` (a C load generator), so a benchmark measures the server, not itself.

The Python generator (``bench/load.py``) tops out near 11,500 req/s on a 2-core machine: a baseline
faster than that was capped by the generator and every ratio looked better than it was (issue 17).
``wrk`` costs a fraction of that per request; ``bench/deps.sh`` installs it (``make bench`` calls it).
Open-loop latency at a fixed rate stays with the Python generator (``wrk`` measures latency from the
moment it sent, which hides a server falling behind; wrk2 is not packaged).

Every request is a distinct event: ``bench/wrk.lua`` fills the ``@@N@@`` markers of a template
(bodies from ``bench/workloads.py``, one per line; headers may hold the marker too) with a number no
other request of the run uses. Each run gets its own range of numbers from the caller (``first``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "@@N@@"
SCRIPT = Path(__file__).resolve().with_name("wrk.lua")


class WrkError(RuntimeError):
    """wrk is missing, failed, or printed no result."""


def wrk_binary() -> str:
    exe = shutil.which("wrk")
    if exe is None:
        raise WrkError(
            "wrk is not installed: run `bash bench/deps.sh` (make bench does) or apt-get install wrk"
        )
    return exe


def write_templates(path: Path, bodies: Iterable[bytes], *, require_marker: bool = True) -> Path:
    """One body per line; each must be one line holding the marker (unless a header holds it)."""
    lines = []
    for body in bodies:
        text = body.decode()
        if "\n" in text or (require_marker and MARKER not in text):
            raise ValueError(f"a request template must be one line holding {MARKER}: {text[:80]!r}")
        lines.append(text)
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class WrkResult:
    """What one ``wrk`` run measured (latencies in seconds, as ``LoadResult``)."""

    requests: int = 0
    elapsed: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    errors: dict[str, int] = field(default_factory=dict)
    p50: float = 0.0
    p99: float = 0.0
    runs: int = 0

    @property
    def rps(self) -> float:
        return self.requests / self.elapsed if self.elapsed > 0 else 0.0

    def rate_of(self, status: int) -> float:
        return self.statuses[status] / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def socket_errors(self) -> int:
        return sum(n for kind, n in self.errors.items() if kind != "status")

    def merge(self, other: WrkResult) -> WrkResult:
        """Add another slice. Percentiles cannot be merged: the slices' worst p50/p99 is kept."""
        self.requests += other.requests
        self.elapsed += other.elapsed
        self.statuses.update(other.statuses)
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.p50 = max(self.p50, other.p50)
        self.p99 = max(self.p99, other.p99)
        self.runs += other.runs
        return self

    def summary(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        errors = {kind: n for kind, n in self.errors.items() if n}
        return (
            f"wrk: {self.requests} requests in {self.elapsed:.2f}s = {self.rps:.0f} req/s "
            f"({self.runs} run(s)), p50 {self.p50 * 1000:.2f} ms, p99 {self.p99 * 1000:.2f} ms, "
            f"errors {errors or 0} [{codes}]"
        )


def parse_output(text: str) -> WrkResult:
    for line in text.splitlines():
        if line.startswith("WRK_JSON "):
            data = json.loads(line[len("WRK_JSON ") :])
            return WrkResult(
                requests=int(data["requests"]),
                elapsed=data["duration_us"] / 1e6,
                statuses=Counter({int(code): int(n) for code, n in data["statuses"].items()}),
                errors={kind: int(n) for kind, n in data["errors"].items()},
                p50=data["latency_us"]["p50"] / 1e6,
                p99=data["latency_us"]["p99"] / 1e6,
                runs=1,
            )
    raise WrkError(f"wrk printed no result:\n{text[-1500:]}")


async def run_wrk(
    url: str,
    templates: Path,
    *,
    seconds: int,
    first: int,
    connections: int = 32,
    threads: int = 1,
    headers: Sequence[str] = (),
    timeout: float = 10.0,
) -> WrkResult:
    """``wrk`` against ``url`` for ``seconds`` (whole seconds, at least 1) with distinct requests.

    ``first`` is this run's first request number (the caller keeps runs apart); ``headers`` are
    ``"Name: value"`` strings that may hold the marker.
    """
    command = [
        wrk_binary(),
        f"--threads={threads}",
        f"--connections={connections}",
        f"--duration={max(1, int(seconds))}s",
        f"--timeout={max(1, round(timeout))}s",
        f"--script={SCRIPT}",
        url,
        "--",
        str(templates),
        str(first),
        str(threads),
        *headers,
    ]
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + timeout + 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise WrkError(f"wrk did not finish within {seconds + timeout + 30:.0f}s") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise WrkError(f"wrk exited with {proc.returncode}:\n{text[-1500:]}")
    return parse_output(text)
