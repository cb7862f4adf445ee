"""Benchmark 8: durable delivery (``--store``), sqlite and NATS JetStream against the memory store.

Three controllers on the same manifests and sink: ``memory`` (Flux's at-most-once), ``sqlite:`` (one file
in the run's work directory) and ``nats://`` (a ``nats-server -js`` started here). Measured as the other
delivery benchmark: delivered notifications per second under wrk load, interleaved (A B C A B C) so the
noisy machine treats them alike, CPU per notification from ``/proc``; then POST→delivery latency at a fixed
200 events/s. Targets (issue 13): sqlite ≥ 0.5 × memory delivered/s, NATS ≥ 0.3 ×, p99 ≤ 100 ms for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from . import workloads
from .load import percentile
from .procs import cpu_seconds, running_controller
from .report import Row
from .suite import MS, Context, Skip, Target, cpu_row, drained, interleaved, rate_row

NAME = "8 durable delivery, 1 generic Provider"
RATE = 200.0
LISTEN = re.compile(rb"Listening for client connections on [^\s:]+:(\d+)")


@contextlib.asynccontextmanager
async def nats_server(work: Path, log_dir: Path) -> AsyncIterator[str]:
    binary = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None
    )
    if binary is None:
        raise Skip("nats-server is not installed (apt-get install nats-server)")
    log = (log_dir / "nats-server.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        binary,
        "-a",
        "127.0.0.1",
        "-p",
        "-1",
        "-js",
        "-sd",
        str(work),
        stdout=log,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        port = 0
        async with asyncio.timeout(20):
            while not port:
                line = await proc.stderr.readline()
                if not line:
                    raise Skip("nats-server exited at start")
                log.write(line)
                if match := LISTEN.search(line):
                    port = int(match.group(1))
        drain = asyncio.create_task(_copy(proc.stderr, log))
        try:
            yield f"nats://127.0.0.1:{port}"
        finally:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        log.close()


async def _copy(stream: asyncio.StreamReader, out: Any) -> None:
    while line := await stream.readline():
        out.write(line)


async def bench_durable(ctx: Context) -> None:
    from .procs import Helper

    pending = ["--max-pending-notifications=1000000"]

    def templates(phase: str) -> Path:
        return ctx.templates(phase, workloads.dispatch_templates(phase))

    async with (
        Helper("bench.sink", [], ctx.logs) as sink,
        nats_server(ctx.dir("durable-nats"), ctx.logs) as nats_url,
    ):
        manifests = workloads.dispatch_manifests(ctx.dir("durable"), sink.url)
        db = ctx.dir("durable-sqlite") / "state.db"
        async with (
            running_controller(manifests, ctx.logs, pending) as (memory, _),
            running_controller(manifests, ctx.logs, [*pending, f"--store=sqlite:{db}"]) as (sqlite, _),
            running_controller(manifests, ctx.logs, [*pending, f"--store={nats_url}"]) as (nats, _),
        ):
            controllers = {"memory": memory, "sqlite": sqlite, "nats": nats}
            targets = [
                Target(who, c.pid, c.url("events"), templates, sink=sink, per_notification=True)
                for who, c in controllers.items()
            ]
            measured = dict(zip(controllers, await interleaved(ctx, "durable", targets), strict=True))
            ctx.step(f"throughput measured; latency at {RATE:.0f} events/s")
            latency: dict[str, tuple[list[float], int, int, float]] = {}
            for who, c in controllers.items():
                phase = f"durable-rate-{who}"
                before = cpu_seconds(c.pid)
                rated = await ctx.load(
                    c.url("events"),
                    workloads.dispatch_events(phase),
                    seconds=ctx.timing.rate_seconds + 1,
                    max_requests=int(RATE * ctx.timing.rate_seconds),
                    rate=RATE,
                    connections=16,
                )
                after, stats = await drained(c.pid, sink, phase)
                latency[who] = (
                    sorted(stats["latencies_ms"]),
                    rated.statuses[202],
                    stats["received"],
                    after - before,
                )
    base = measured["memory"]
    ctx.detail(NAME, **{who: m.summary() for who, m in measured.items()})
    for who, at_least in (("sqlite", 0.5), ("nats", 0.3)):
        ours = measured[who]
        note = (
            f"{ours.events} accepted, {ours.notifications} delivered"
            if ours.events != ours.notifications
            else ""
        )
        ctx.report.add(
            rate_row(
                NAME,
                f"delivered/s, {who}",
                ours.delivered_rate,
                base.delivered_rate,
                "memory store",
                at_least,
            )
        )
        ctx.report.add(
            cpu_row(
                NAME,
                f"notification, {who}",
                ours.cpu_us(per_notification=True),
                base.cpu_us(per_notification=True),
                "memory store",
                1.5,
                note=note,
            )
        )
    for who in ("memory", "sqlite", "nats"):
        lat, accepted, received, _ = latency[who]
        p99 = percentile(lat, 99) if lat else None
        target, passed = ("≤ 100 ms", p99 is not None and p99 <= 100) if who != "memory" else ("", None)
        ctx.report.add(
            Row(
                NAME,
                f"POST→delivery p99 @{RATE:.0f}/s, {who}",
                p99,
                MS,
                target=target,
                passed=passed,
                note=f"{accepted} accepted, {received} delivered",
            )
        )
