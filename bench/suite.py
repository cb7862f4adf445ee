"""The six benchmarks. Each starts its own processes, measures after a short warm-up, and adds rows.

A benchmark that cannot run for a reason outside this repository's control (receiver server not
available yet) records a skip; one that raises is a crash, and ``python -m bench`` exits non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from . import profile, workloads
from .load import BodyFactory, LoadResult, percentile, run_load
from .procs import Controller, Helper, RSSSampler, metric_sum, parse_samples, running_controller, settle
from .report import Row, RunReport

MB = "MB"
MS = "ms"


class Skip(Exception):
    """The benchmark cannot run here; the message (printed as is) says which and why."""


@dataclass
class Timing:
    warmup: float = 1.0
    measure: float = 8.0
    connections: int = 32
    scale_measure: float = 6.0
    rate_seconds: float = 10.0
    receiver_wait: float = 30.0


@dataclass
class Context:
    work: Path
    logs: Path
    report: RunReport
    timing: Timing = field(default_factory=Timing)
    profile_dir: Path | None = None
    receiver_prefill: bool = False
    startups: dict[str, tuple[float, float]] = field(default_factory=dict)  # seconds to ready, RSS MB
    settles: dict[str, tuple[float, float]] = field(default_factory=dict)  # ready → idle seconds, RSS MB
    _baseline: LoadResult | None = None
    _next_index: int = 0
    started: float = field(default_factory=time.perf_counter)

    def step(self, message: str) -> None:
        """Progress on stdout, so a slow phase is visible while it runs."""
        print(f"   [{time.perf_counter() - self.started:6.1f}s] {message}", flush=True)

    def dir(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def indexes(self, count: int) -> int:
        """A fresh range of event indexes: no two phases of a run ever send the same event."""
        first = self._next_index
        self._next_index += count
        return first

    def detail(self, bench: str, **values: Any) -> None:
        self.report.details.setdefault(bench, {}).update(values)

    async def load(
        self,
        url: str,
        body_for: BodyFactory,
        *,
        seconds: float,
        max_requests: int = 200_000,
        connections: int | None = None,
        **kwargs: Any,
    ) -> LoadResult:
        return await run_load(
            url,
            body_for,
            connections=connections or self.timing.connections,
            max_requests=max_requests,
            max_duration=seconds,
            first_index=self.indexes(max_requests),
            **kwargs,
        )

    def set_baseline(self, result: LoadResult) -> None:
        self._baseline = result
        self.detail("baseline", load=result.summary())

    async def baseline(self) -> LoadResult:
        """Bare aiohttp + JSON parse, same events, same generator: measured once per run."""
        if self._baseline is None:
            async with Helper("bench.baseline", [], self.logs) as base:
                url = base.url + "/"
                await self.load(url, workloads.no_match_event, seconds=self.timing.warmup, max_requests=3000)
                self.set_baseline(await self.load(url, workloads.no_match_event, seconds=self.timing.measure))
        assert self._baseline is not None
        return self._baseline


Target = tuple[str, BodyFactory, dict[str, Any]]


async def interleaved(
    ctx: Context, targets: list[Target], seconds: float, slices: int = 4
) -> list[LoadResult]:
    """Measure several servers in alternating slices (A B A B ...) and add each one's slices up.

    On a shared, noisy machine the load changes over time; alternating short slices exposes every
    server to the same conditions, so their ratio is much steadier than with back-to-back runs.
    """
    results = [LoadResult() for _ in targets]
    for _ in range(slices):
        for result, (url, body_for, kwargs) in zip(results, targets, strict=True):
            result.merge(await ctx.load(url, body_for, seconds=seconds / slices, **kwargs))
    return results


@contextlib.asynccontextmanager
async def profiled(ctx: Context, controller: Controller, name: str, seconds: float) -> AsyncIterator[None]:
    """Run py-spy on the controller alongside the block when ``--profile`` was given."""
    if ctx.profile_dir is None:
        yield
        return
    task = asyncio.create_task(profile.record(controller.pid, seconds, ctx.profile_dir / f"{name}.txt"))
    try:
        yield
    finally:
        result = await task
        text = result if isinstance(result, str) else result.render(25)
        ctx.detail("profile", **{name: text})
        print(f"--- profile of the controller during {name} ---\n{text}\n", flush=True)


async def metrics(controller: Controller) -> str:
    return await controller.metrics_text()


def delivery_totals(text: str) -> dict[str, float]:
    samples = parse_samples(text, "notification_")
    return {
        "notifications": metric_sum(samples, "notification_notifications_total"),
        "delivered": metric_sum(samples, "notification_delivered_total"),
        "failed": metric_sum(samples, "notification_delivery_failed_total"),
        "dropped": metric_sum(samples, "notification_dropped_total"),
        "dropped_overload": metric_sum(samples, "notification_dropped_total", {"reason": "overload"}),
        "pending": metric_sum(samples, "notification_pending"),
        "received": metric_sum(samples, "notification_events_received_total"),
        "unmatched": metric_sum(samples, "notification_events_unmatched_total"),
    }


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) if k != "pending" else after[k] for k in after}


async def sink_stats(sink: Helper, phase: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(f"{sink.url}/_stats", params={"phase": phase}) as resp,
    ):
        data: dict[str, Any] = await resp.json()
        return data


async def wait_drained(controller: Controller, timeout: float) -> dict[str, float]:
    """Poll until nothing is pending in the controller (or the deadline); returns the last totals."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        totals = delivery_totals(await metrics(controller))
        if totals["pending"] == 0 or loop.time() >= deadline:
            return totals
        await asyncio.sleep(0.2)


def ms(seconds: float) -> float:
    return seconds * 1000


# ---- 1 ---------------------------------------------------------------------------------------------------
async def bench_ingest(ctx: Context) -> None:
    """Event ingest when no Alert matches: the cost of the 202 path alone, vs the baseline."""
    name = "1 ingest, no match"
    t = ctx.timing
    manifests = workloads.no_match_manifests(ctx.dir("ingest"))
    async with (
        Helper("bench.baseline", [], ctx.logs) as baseline,
        running_controller(manifests, ctx.logs) as (controller, startup),
    ):
        ctx.detail(name, startup_s=startup)
        ctx.startups["small"] = (startup, controller.rss_mb())
        base_url, url = baseline.url + "/", controller.url("events")
        for target in (base_url, url):
            await ctx.load(target, workloads.no_match_event, seconds=t.warmup, max_requests=3000)
        async with profiled(ctx, controller, "ingest", 2 * t.measure):
            base, result = await interleaved(
                ctx,
                [(base_url, workloads.no_match_event, {}), (url, workloads.no_match_event, {})],
                t.measure,
            )
        rss = controller.rss_mb()
    ctx.set_baseline(base)
    ctx.detail(name, load=result.summary(), rss_mb=rss)
    other = result.requests - result.statuses[202]
    note = f"{other} answers were not 202: {dict(result.statuses)}" if other or result.errors else ""
    rate = result.rate_of(202)
    ctx.report.add(
        Row(name, "accepted req/s", rate, "/s", base.rps, "≥ 0.60 × baseline", rate >= 0.6 * base.rps, note)
    )
    ctx.report.add(Row(name, "p50 latency", ms(result.p50), MS, ms(base.p50)))
    ctx.report.add(Row(name, "p99 latency", ms(result.p99), MS, ms(base.p99)))


# ---- 2 ---------------------------------------------------------------------------------------------------
async def bench_dispatch(ctx: Context) -> None:
    """Ingest + delivery to one generic Provider: delivered/s at full speed, latency at 1,000/s."""
    name = "2 ingest+dispatch"
    t = ctx.timing
    base = await ctx.baseline()
    async with Helper("bench.sink", [], ctx.logs) as sink:
        manifests = workloads.dispatch_manifests(ctx.dir("dispatch"), sink.url)
        async with running_controller(manifests, ctx.logs) as (controller, _):
            url = controller.url("events")
            await ctx.load(url, workloads.dispatch_events("warmup"), seconds=t.warmup, max_requests=2000)
            await wait_drained(controller, 20)
            before = delivery_totals(await metrics(controller))

            started_ns = time.time_ns()
            async with profiled(ctx, controller, "dispatch", t.measure):
                full = await ctx.load(url, workloads.dispatch_events("full"), seconds=t.measure)
            totals = delta(await wait_drained(controller, 30), before)
            stats = await sink_stats(sink, "full")
            span = (stats["last_ns"] - started_ns) / 1e9 if stats["received"] else 0.0
            delivered_rate = stats["received"] / span if span > 0 else 0.0
            ctx.detail(
                name, full_load=full.summary(), full_totals=totals, full_sink_received=stats["received"]
            )

            before = delivery_totals(await metrics(controller))
            rated = await ctx.load(
                url,
                workloads.dispatch_events("rate"),
                seconds=t.rate_seconds + 1,
                max_requests=int(1000 * t.rate_seconds),
                rate=1000.0,
                connections=64,
            )
            rate_totals = delta(await wait_drained(controller, 30), before)
            rate_stats = await sink_stats(sink, "rate")
            ctx.detail(name, rate_load=rated.summary(), rate_totals=rate_totals)

    notes = []
    if totals["dropped"]:
        notes.append(f"{totals['dropped']:.0f} notifications dropped (overload) at full speed")
    if stats["duplicates"]:
        notes.append(f"{stats['duplicates']} duplicates at the sink")
    ctx.report.add(
        Row(
            name,
            "delivered events/s (full speed)",
            delivered_rate,
            "/s",
            base.rps,
            "≥ 4,000 /s",
            delivered_rate >= 4000,
            "; ".join(notes) + ("; " if notes else "") + "baseline = bare ingest req/s",
        )
    )
    ctx.report.add(Row(name, "accepted events/s (full speed)", full.rate_of(202), "/s", base.rps))
    latencies = sorted(rate_stats["latencies_ms"])
    p99 = percentile(latencies, 99)
    sent = rated.statuses[202]
    rate_note = (
        f"offered {rated.requests} at {rated.rps:.0f}/s, {sent} accepted, {rate_stats['received']} delivered"
    )
    ctx.report.add(Row(name, "POST→delivery p50 @1,000/s", percentile(latencies, 50), MS))
    ctx.report.add(
        Row(
            name,
            "POST→delivery p99 @1,000/s",
            p99,
            MS,
            None,
            "≤ 50 ms",
            p99 <= 50 if latencies else False,
            rate_note,
        )
    )


# ---- 3 ---------------------------------------------------------------------------------------------------
SCALE_SIZES = (10, 1_000, 10_000)


async def sink_settled(sink: Helper, phase: str, timeout: float = 30.0) -> dict[str, Any]:
    """The sink's stats for ``phase`` once its count stopped moving (or at the deadline)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    stats = await sink_stats(sink, phase)
    while loop.time() < deadline:
        await asyncio.sleep(0.5)
        fresh = await sink_stats(sink, phase)
        if fresh["received"] == stats["received"]:
            return fresh
        stats = fresh
    return stats


async def bench_scale(ctx: Context) -> None:
    """Ingest + match with 10, 1,000 and 10,000 Alerts over 100 namespaces: events/s and RSS.

    The three controllers are started one after the other (each start measured alone), each is left
    to settle after ``/readyz`` (its reconcilers handle every object once), then they are measured in
    interleaved slices so that all three see the same machine. RSS is read right after each one's
    last slice and before ``/metrics`` is scraped: with 10,000 Alerts the page is ~16 MB and building
    it grows the heap by tens of MB, which would be the benchmark's doing.
    """
    name = "3 alerts scale"
    t = ctx.timing
    plans = {size: workloads.scale_plan(size) for size in SCALE_SIZES}
    async with Helper("bench.sink", [], ctx.logs) as sink, contextlib.AsyncExitStack() as stack:
        controllers: dict[int, Controller] = {}
        for size in SCALE_SIZES:
            manifests = workloads.scale_manifests(ctx.dir(f"scale-{size}"), plans[size], sink.url)
            ctx.step(f"{size} Alerts: manifests written, starting the controller")
            controller, startup = await stack.enter_async_context(running_controller(manifests, ctx.logs))
            ready_rss = controller.rss_mb()
            settled = await settle(controller.pid)
            ctx.startups[f"{size}"] = (startup, ready_rss)
            ctx.settles[f"{size}"] = (settled, controller.rss_mb())
            ctx.step(f"{size} Alerts: ready in {startup:.1f}s, idle {settled:.1f}s later")
            controllers[size] = controller
        for size, controller in controllers.items():
            warm = workloads.scale_events(plans[size], f"warm-{size}")
            await ctx.load(controller.url("events"), warm, seconds=t.warmup, max_requests=2000)
        targets: list[Target] = [
            (controllers[size].url("events"), workloads.scale_events(plans[size], f"scale-{size}"), {})
            for size in SCALE_SIZES
        ]
        results = dict(zip(SCALE_SIZES, await interleaved(ctx, targets, t.scale_measure), strict=True))
        rss = {size: controller.rss_mb() for size, controller in controllers.items()}
        peak = {size: controller.hwm_mb() for size, controller in controllers.items()}
        ctx.step("measured; waiting for the deliveries")
        stats = {size: await sink_settled(sink, f"scale-{size}") for size in SCALE_SIZES}
        totals = {size: delivery_totals(await metrics(c)) for size, c in controllers.items()}
    rates = {size: result.rate_of(202) for size, result in results.items()}
    smallest, largest = SCALE_SIZES[0], SCALE_SIZES[-1]
    for size in SCALE_SIZES:
        per_event = stats[size]["received"] / max(1, results[size].statuses[202])
        (startup, ready_rss), (settled, settled_rss) = ctx.startups[f"{size}"], ctx.settles[f"{size}"]
        ctx.detail(
            name,
            **{
                f"{size}": {
                    "load": results[size].summary(),
                    "startup_s": startup,
                    "settle_s": settled,
                    "rss_ready_mb": ready_rss,
                    "rss_settled_mb": settled_rss,
                    "rss_mb": rss[size],
                    "hwm_mb": peak[size],
                    "totals_whole_run": totals[size],
                    "notifications_per_event": per_event,
                }
            },
        )
        reference = rates[smallest] if size != smallest else None
        target, passed = "", None
        if size == largest:
            target, passed = "≥ 0.85 × 10 Alerts", rates[size] >= 0.85 * rates[smallest]
        note = f"{per_event:.2f} notifications/event"
        if totals[size]["dropped"]:
            note += f", {totals[size]['dropped']:.0f} dropped"
        ctx.report.add(
            Row(name, f"events/s, {size:,} Alerts", rates[size], "/s", reference, target, passed, note)
        )
        rss_target, rss_passed = ("≤ 200 MB", rss[size] <= 200) if size == largest else ("", None)
        ctx.report.add(
            Row(
                name,
                f"RSS, {size:,} Alerts",
                rss[size],
                MB,
                None,
                rss_target,
                rss_passed,
                f"{ready_rss:.0f} MB at ready, {settled_rss:.0f} MB once idle, after the load",
            )
        )


# ---- 4 ---------------------------------------------------------------------------------------------------
BURST = 20_000
SLOW_SINK = 0.2
BURST_CONCURRENCY = 64


async def bench_burst(ctx: Context) -> None:
    """20,000 distinct events at once, provider answering in 200 ms: the 202 path, memory, accounting."""
    name = "4 burst"
    async with Helper("bench.sink", ["--delay", str(SLOW_SINK)], ctx.logs) as sink:
        manifests = workloads.dispatch_manifests(ctx.dir("burst"), sink.url)
        args = [f"--provider-concurrency={BURST_CONCURRENCY}"]
        async with running_controller(manifests, ctx.logs, args) as (controller, _):
            url = controller.url("events")
            await ctx.load(
                url, workloads.dispatch_events("burst-warmup"), seconds=ctx.timing.warmup, max_requests=200
            )
            await wait_drained(controller, 20)
            before = delivery_totals(await metrics(controller))
            sampler = RSSSampler(controller.pid)
            sampler.start()
            result = await ctx.load(
                url, workloads.dispatch_events("burst"), seconds=60, max_requests=BURST, connections=64
            )
            burst_peak = await sampler.stop()
            drain_started = time.perf_counter()
            totals = delta(await wait_drained(controller, 60), before)
            drain = time.perf_counter() - drain_started
            lifetime_peak = controller.hwm_mb()
            stats = await sink_stats(sink, "burst")
    accepted = result.statuses[202]
    accounted = totals["delivered"] + totals["failed"] + totals["dropped"]
    ctx.detail(
        name,
        load=result.summary(),
        totals=totals,
        sink=dict(stats, latencies_ms=len(stats["latencies_ms"])),
        rss_peak_sampled_mb=burst_peak,
        vm_hwm_mb=lifetime_peak,
        drain_s=drain,
    )
    not_accepted = (
        f"; {result.requests - accepted} not 202: {dict(result.statuses)}"
        if result.requests != accepted
        else ""
    )
    ctx.report.add(
        Row(
            name,
            "202 path p99 during burst",
            ms(result.p99),
            MS,
            note=f"{accepted} accepted at {result.rate_of(202):.0f}/s{not_accepted}",
        )
    )
    peak = max(burst_peak, lifetime_peak)
    ctx.report.add(Row(name, "peak RSS (VmHWM)", peak, MB, None, "≤ 300 MB", peak <= 300))
    ctx.report.add(
        Row(
            name,
            "delivered (sink)",
            stats["received"],
            "",
            note=f"provider {SLOW_SINK * 1000:.0f} ms/request, --provider-concurrency={BURST_CONCURRENCY}; "
            f"drained in {drain:.1f}s; pending at end {totals['pending']:.0f}",
        )
    )
    ctx.report.add(
        Row(name, "duplicates at sink", stats["duplicates"], "", None, "= 0", stats["duplicates"] == 0)
    )
    ctx.report.add(
        Row(
            name,
            "notification_dropped_total",
            totals["dropped"],
            "",
            note=f"overload: {totals['dropped_overload']:.0f}",
        )
    )
    ctx.report.add(
        Row(
            name,
            "delivered+failed+dropped",
            accounted,
            "",
            float(accepted),
            "= notifications (accepted × 1 Alert)",
            accounted == accepted and stats["received"] == totals["delivered"],
            f"delivered metric {totals['delivered']:.0f}, sink {stats['received']}, failed {totals['failed']:.0f}",
        )
    )


# ---- 5 ---------------------------------------------------------------------------------------------------
async def wait_receiver(url: str, body: bytes, timeout: float) -> None:
    """Until the hook path is known (GET stops answering 404) and a signed ping is answered 200."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    ping_headers = dict(workloads.github_headers(body, valid=True)(0, body))
    ping_headers["X-GitHub-Event"] = "ping"
    ping_headers["Content-Type"] = "application/json"
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while loop.time() < deadline:
            try:
                async with session.get(url) as resp:
                    last = f"GET {resp.status}"
                    if resp.status != 404:
                        async with session.post(url, data=body, headers=ping_headers) as ping:
                            last = f"signed ping {ping.status}"
                            if ping.status == 200:
                                return
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = type(exc).__name__
            await asyncio.sleep(0.25)
    raise Skip(f"receiver benchmark skipped: receiver server not available (after {timeout:.0f}s: {last})")


async def bench_receivers(ctx: Context) -> None:
    """Signed GitHub pushes through signature verification, valid and invalid, vs the baseline."""
    name = "5 receivers"
    t = ctx.timing
    body = workloads.github_push_body()
    valid = workloads.github_headers(body, valid=True)
    invalid = workloads.github_headers(body, valid=False)

    def push(_: int) -> bytes:
        return body

    manifests = workloads.receiver_manifests(ctx.dir("receiver"), prefill_status=ctx.receiver_prefill)
    args = ["--receiver-rate-limit=0"]  # the per-Receiver token bucket would answer 429 to a benchmark
    async with running_controller(manifests, ctx.logs, args) as (controller, _):
        url = controller.url("receiver", workloads.receiver_path())
        try:
            await wait_receiver(url, body, t.receiver_wait)
        except Skip as exc:
            skipped: str | None = str(exc)
        else:
            skipped = None
            async with Helper("bench.baseline", [], ctx.logs) as baseline:
                base_url = baseline.url + "/hook/x"
                for target in (base_url, url):
                    await ctx.load(target, push, seconds=t.warmup, max_requests=2000, headers_for=valid)
                async with profiled(ctx, controller, "receivers", 3 * t.measure):
                    reference, good, bad = await interleaved(
                        ctx,
                        [
                            (base_url, push, {"headers_for": valid}),
                            (url, push, {"headers_for": valid}),
                            (url, push, {"headers_for": invalid}),
                        ],
                        t.measure,
                    )
    if skipped is not None:
        raise Skip(skipped)
    ctx.detail(
        name,
        valid=good.summary(),
        invalid=bad.summary(),
        baseline=reference.summary(),
        prefilled=ctx.receiver_prefill,
    )
    prefill = (
        "status pre-filled in the manifest (--receiver-status-from-manifest)" if ctx.receiver_prefill else ""
    )
    for label, result, code in (("valid signature → 200", good, 200), ("invalid signature → 400", bad, 400)):
        rate = result.rate_of(code)
        odd = result.requests - result.statuses[code]
        note = "; ".join(
            filter(None, [prefill, f"{odd} other answers: {dict(result.statuses)}" if odd else ""])
        )
        ctx.report.add(
            Row(
                name,
                f"{label} req/s",
                rate,
                "/s",
                reference.rps,
                "≥ 0.50 × baseline",
                rate >= 0.5 * reference.rps,
                note,
            )
        )
    ctx.report.add(Row(name, "valid p99 latency", ms(good.p99), MS, ms(reference.p99)))
    ctx.report.add(
        Row(
            name,
            "target patching vs real API server",
            None,
            note="not measured: " + apiserver_unavailable_reason(),
        )
    )


def apiserver_unavailable_reason() -> str:
    from .procs import ROOT

    if not (ROOT / "tests" / "e2e" / "apiserver.py").exists():
        return "tests/e2e/apiserver.py not present"
    cache = Path.home() / ".cache" / "notification-controller"
    if not any(cache.glob("kube-apiserver-v*")):
        return "no cached kube-apiserver binary (make e2e-server builds it)"
    return "the kube-mode receiver benchmark is not implemented yet"


# ---- 6 ---------------------------------------------------------------------------------------------------
async def bench_startup(ctx: Context) -> None:
    """Process start → ``/readyz`` 200 in local mode with 10,000 Alerts (vs 2 objects), then → idle.

    Benchmark 3 already starts the controller on 10,000 Alerts: its start-up is reused when it ran
    (a 10,000-Alert start is the slowest step of the whole run).
    """
    name = "6 start-up"
    note = "measured at the 10,000-Alert start of benchmark 3" if "10000" in ctx.startups else ""
    if "small" not in ctx.startups:
        small = workloads.no_match_manifests(ctx.dir("startup-small"))
        async with running_controller(small, ctx.logs) as (controller, startup):
            ctx.startups["small"] = (startup, controller.rss_mb())
    if "10000" not in ctx.startups:
        plan = workloads.scale_plan(10_000)
        manifests = workloads.scale_manifests(ctx.dir("startup-10k"), plan, "http://127.0.0.1:9")
        async with running_controller(manifests, ctx.logs) as (controller, startup):
            ctx.startups["10000"] = (startup, controller.rss_mb())
            settled = await settle(controller.pid)
            ctx.settles["10000"] = (settled, controller.rss_mb())
    (reference, small_rss), (startup, rss) = ctx.startups["small"], ctx.startups["10000"]
    settled, settled_rss = ctx.settles["10000"]
    ctx.detail(
        name,
        startup_s=startup,
        reference_s=reference,
        rss_mb=rss,
        reference_rss_mb=small_rss,
        settle_s=settled,
        settled_rss_mb=settled_rss,
    )
    ctx.report.add(
        Row(
            name,
            "ready with 10,000 Alerts",
            startup,
            "s",
            reference,
            note="; ".join(filter(None, ["baseline = start-up with 2 objects", note])),
        )
    )
    ctx.report.add(
        Row(name, "ready → idle, 10,000 Alerts", settled, "s", note="CPU < 5% over 0.5 s: reconcilers done")
    )
    ctx.report.add(Row(name, "RSS when ready, 10,000 Alerts", rss, MB, small_rss))
    ctx.report.add(Row(name, "RSS when idle, 10,000 Alerts", settled_rss, MB, small_rss))


BENCHMARKS: dict[str, Callable[[Context], Awaitable[None]]] = {
    "ingest": bench_ingest,
    "dispatch": bench_dispatch,
    "scale": bench_scale,
    "burst": bench_burst,
    "receivers": bench_receivers,
    "startup": bench_startup,
}
