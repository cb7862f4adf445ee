"""The processes a benchmark runs: the controller (as users run it), the baseline and the sink.

Each is a separate OS process on 127.0.0.1, so the server under test, the load generator (the driver's
own process) and the sink never share an interpreter or a GIL. The controller is started exactly like
``tests/integration/test_process.py`` does: ``python -m notification_controller --manifests <dir>`` on
free ports, here with ``--log-level=error`` so logging does not dominate the profile.

Memory is read from ``/proc/<pid>/status``: ``VmRSS`` (resident now) and ``VmHWM`` (the peak resident
size since the process started, maintained by the kernel, so a short spike between two samples is not
missed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
PORT_NAMES = ("events", "receiver", "metrics", "health")


class BenchProcessError(RuntimeError):
    """A process under benchmark failed to start, died, or did not stop."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: the sockets stay bound until all are chosen (released one at a time, the
    kernel may hand the same port out twice)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def read_proc_status(pid: int) -> dict[str, int]:
    """``Vm*`` lines of ``/proc/<pid>/status`` in kB (empty once the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Vm"):
                    key, _, value = line.partition(":")
                    out[key] = int(value.split()[0])
    except (OSError, ValueError):
        return {}
    return out


def rss_mb(pid: int) -> float:
    return read_proc_status(pid).get("VmRSS", 0) / 1024


def hwm_mb(pid: int) -> float:
    return read_proc_status(pid).get("VmHWM", 0) / 1024


CLOCK_TICK = 1 / os.sysconf("SC_CLK_TCK")  # the resolution of utime/stime (10 ms on Linux)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (``/proc/<pid>/stat``), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK


async def quiet_cpu(pid: int, *, window: float = 0.2, timeout: float = 60.0) -> float:
    """``cpu_seconds(pid)`` once the process has gone quiet: the reading taken at the start of the first
    ``window`` in which it used at most one clock tick (so the idle wait itself is not charged).

    After a load run a server may still work through what it accepted (a dispatch backlog); the CPU
    per event must include that work, and nothing after it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = cpu_seconds(pid)
    while loop.time() < deadline:
        await asyncio.sleep(window)
        now = cpu_seconds(pid)
        if now - last <= CLOCK_TICK * 1.01:
            return last
        last = now
    return last


def memory_mb(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` in MB: resident now, and the peak since the process started."""
    status = read_proc_status(pid)
    return status.get("VmRSS", 0) / 1024, status.get("VmHWM", 0) / 1024


async def settle(pid: int, *, busy: float = 0.05, window: float = 0.5, timeout: float = 60.0) -> float:
    """Wait until the process uses less than ``busy`` of a CPU over ``window`` seconds.

    After ``/readyz`` the reconcilers still process every object once; measuring then would charge
    that work to whatever runs first. Returns the seconds waited (``timeout`` if it never settled).
    """
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        before = cpu_seconds(pid)
        await asyncio.sleep(window)
        if cpu_seconds(pid) - before < busy * window:
            break
    return time.perf_counter() - started


@dataclass
class RSSSampler:
    """Samples ``VmRSS`` every ``interval`` seconds while running (the peak is in ``peak_mb``)."""

    pid: int
    interval: float = 0.05
    peak_mb: float = 0.0
    samples: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, rss_mb(self.pid))
            self.samples += 1
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> float:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.peak_mb = max(self.peak_mb, rss_mb(self.pid))
        return self.peak_mb


class Helper:
    """A bench helper (``bench.baseline``, ``bench.sink``, or with ``program`` any command such as the Go
    peer) that prints ``PORT <n>`` when listening."""

    def __init__(
        self, module: str, args: Sequence[str], log_dir: Path, *, program: Sequence[str] = ()
    ) -> None:
        self.module = module
        self.args = list(args)
        self.program = list(program) or [sys.executable, "-m", module]  # e.g. the Go peer's binary
        self.log_path = log_dir / f"{module.rsplit('.', 1)[-1]}-{time.monotonic_ns()}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout: float = 30.0) -> None:
        self._log = self.log_path.open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            *self.program,
            *self.args,
            cwd=ROOT,
            env=_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
        )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            await self.stop()
            raise BenchProcessError(f"{self.module} did not start within {timeout:.0f}s") from None
        if not line.startswith(b"PORT "):
            await self.stop()
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise BenchProcessError(f"{self.module} failed to start: {tail}")
        self.port = int(line.split()[1])

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def __aenter__(self) -> Helper:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class Controller:
    """``python -m notification_controller`` on free 127.0.0.1 ports, in local mode (``--manifests``) or,
    with ``manifests=None`` and ``--kubeconfig``, in cluster mode.

    ``spawned_at`` is taken right before the ``exec``; ``wait_ready`` returns the seconds from there to
    the first ``/readyz`` 200 (the start-up benchmark).
    """

    def __init__(
        self,
        manifests: Path | None,
        log_dir: Path,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.manifests = manifests
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.wrapper: list[str] = []
        self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        self.log_path = log_dir / f"controller-{time.monotonic_ns()}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.spawned_at = 0.0
        self.returncode: int | None = None
        self._log: IO[bytes] | None = None

    def url(self, name: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        """``python -m notification_controller ...``; ``$NC_BENCH_CONTROLLER_CMD`` replaces the first
        part for A/B experiments (e.g. a wrapper script that patches something before running it)."""
        override = os.environ.get("NC_BENCH_CONTROLLER_CMD")
        program = shlex.split(override) if override else [sys.executable, "-m", "notification_controller"]
        program = [*self.wrapper, *program]  # e.g. valgrind (bench/instructions.py)
        manifests = ["--manifests", str(self.manifests)] if self.manifests is not None else []
        return [
            *program,
            *manifests,
            f"--events-addr=127.0.0.1:{self.ports['events']}",
            f"--receiverAddr=127.0.0.1:{self.ports['receiver']}",
            f"--metrics-addr=127.0.0.1:{self.ports['metrics']}",
            f"--health-addr=127.0.0.1:{self.ports['health']}",
            "--log-level=error",
            *self.extra_args,
        ]

    async def start(self) -> None:
        self._log = self.log_path.open("wb")
        self.spawned_at = time.perf_counter()
        self.proc = await asyncio.create_subprocess_exec(
            *self.command(),
            cwd=ROOT,
            env={**_env(), **self.env},
            stdout=self._log,
            stderr=self._log,
        )

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def wait_ready(self, timeout: float = 120.0, poll: float = 0.01) -> float:
        """Poll ``/readyz`` until 200; returns seconds since the process was spawned."""
        assert self.proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        url = self.url("health", "/readyz")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while loop.time() < deadline:
                if self.proc.returncode is not None:
                    raise BenchProcessError(
                        f"controller exited with {self.proc.returncode} before ready:\n{self.log_tail()}"
                    )
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return time.perf_counter() - self.spawned_at
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(poll)
        raise BenchProcessError(f"controller not ready after {timeout:.0f}s:\n{self.log_tail()}")

    async def kill(self) -> None:
        """Last resort after a failed benchmark: the process must not outlive the run."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.returncode is not None:
            raise BenchProcessError(f"controller died with {self.proc.returncode}:\n{self.log_tail()}")

    def rss_mb(self) -> float:
        return rss_mb(self.pid)

    def hwm_mb(self) -> float:
        return hwm_mb(self.pid)

    async def metrics_text(self) -> str:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(self.url("metrics", "/metrics")) as resp,
        ):
            return await resp.text()

    async def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
        return metric_sum(await self.metrics_text(), name, labels)

    async def stop(self, timeout: float = 40.0) -> int:
        """SIGTERM and wait for the graceful shutdown; a non-zero exit code raises."""
        if self.proc is None:
            return 0
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
                raise BenchProcessError(f"controller did not stop within {timeout:.0f}s") from None
            finally:
                if self._log is not None:
                    self._log.close()
                    self._log = None
        self.returncode = self.proc.returncode
        if self.returncode != 0:
            raise BenchProcessError(f"controller exited with {self.returncode}:\n{self.log_tail()}")
        return self.returncode


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


def parse_samples(text: str, prefix: str = "") -> list[Sample]:
    """Samples of the Prometheus text format whose name starts with ``prefix``.

    A hand-rolled line parser instead of ``prometheus_client.parser``: with 10,000 Alerts the
    controller's page is ~16 MB (per-object reconcile histograms) and the full parser takes seconds.
    """
    out: list[Sample] = []
    for line in text.splitlines():
        if not line.startswith(prefix) or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        try:
            out.append((match.group(1), labels, float(match.group(3))))
        except ValueError:
            continue
    return out


def metric_sum(samples: str | list[Sample], name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
    wanted = labels or {}
    parsed = parse_samples(samples, name) if isinstance(samples, str) else samples
    return sum(
        value
        for sample, sample_labels, value in parsed
        if sample == name and all(sample_labels.get(k) == v for k, v in wanted.items())
    )


@contextlib.asynccontextmanager
async def running_controller(
    manifests: Path | None,
    log_dir: Path,
    extra_args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 120.0,
) -> AsyncIterator[tuple[Controller, float]]:
    """Start, wait for ``/readyz``, yield ``(controller, seconds to ready)``, then stop gracefully.

    ``manifests=None`` runs in cluster mode (pass ``--kubeconfig`` in ``extra_args``)."""
    controller = Controller(manifests, log_dir, extra_args, env)
    await controller.start()
    try:
        startup = await controller.wait_ready(ready_timeout)
        yield controller, startup
    except BaseException:
        await controller.kill()
        raise
    controller.check_alive()
    await controller.stop()
