"""Smoke test of the benchmark kit (bench/), so ``make bench`` cannot rot between runs.

Runs the real pieces for about a second each: the baseline server and the sink as subprocesses (as
``python -m bench`` starts them), the load generator against both, and the result helpers. It asserts
the numbers are sane, not fast: this is not a benchmark, and the machine may be busy.
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from bench import workloads
from bench.load import percentile, run_load
from bench.procs import Helper, metric_sum, read_proc_status
from bench.report import Row, render_table
from bench.suite import Skip, wait_receiver


async def test_load_generator_against_baseline(tmp_path: Path) -> None:
    """Closed loop: every request answered 202, a positive rate, ordered percentiles, and it stops."""
    async with Helper("bench.baseline", [], tmp_path) as baseline:
        result = await run_load(
            baseline.url + "/", workloads.no_match_event, connections=8, max_requests=300, max_duration=5.0
        )
        assert read_proc_status(baseline.pid)["VmRSS"] > 0
    assert result.requests == 300  # bounded by the request count, well before the 5 s limit
    assert result.statuses[202] == 300
    assert result.errors == 0
    assert result.rps > 0
    assert 0 < result.p50 <= result.p99
    assert result.elapsed < 5.0


async def test_load_generator_stops_at_its_duration(tmp_path: Path) -> None:
    """Open loop at 200/s for 1 s: the duration bound wins over the request count."""
    async with Helper("bench.baseline", [], tmp_path) as baseline:
        result = await run_load(
            baseline.url + "/",
            workloads.no_match_event,
            connections=4,
            max_requests=100_000,
            max_duration=1.0,
            rate=200.0,
        )
    assert 100 <= result.requests <= 201
    assert result.statuses[202] == result.requests
    assert result.elapsed < 3.0
    assert result.p99 >= result.p50 > 0


def forwarded(index: int) -> bytes:
    """A notification as the generic provider forwards it: ``event.toolkit.fluxcd.io/`` stripped."""
    return workloads.event_body(
        "Kustomization",
        "apps",
        f"app-{index}",
        f"smoke #{index}",
        metadata={"phase": "smoke", "sent_ns": str(time.time_ns())},
        index=index,
    )


async def test_sink_counts_phases_latency_and_duplicates(tmp_path: Path) -> None:
    """The sink attributes notifications to their phase, measures latency and counts duplicate keys."""
    async with Helper("bench.sink", [], tmp_path) as sink:
        result = await run_load(
            sink.url + "/flux", forwarded, connections=4, max_requests=100, max_duration=5.0
        )
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with session.post(sink.url + "/flux", data=forwarded(7)) as resp:
                    assert resp.status == 200
            async with session.get(sink.url + "/_stats", params={"phase": "smoke"}) as resp:
                smoke = await resp.json()
            async with session.get(sink.url + "/_stats", params={"phase": "other"}) as resp:
                other = await resp.json()
    assert result.statuses[200] == 100
    assert smoke["received"] == 102
    assert smoke["unique"] == 100
    assert smoke["duplicates"] == 2  # index 7 was sent three times in all
    assert len(smoke["latencies_ms"]) == 102
    assert all(0 <= latency < 5000 for latency in smoke["latencies_ms"])
    assert smoke["first_ns"] <= smoke["last_ns"]
    assert other["received"] == 0


async def test_receiver_benchmark_skips_when_the_hook_path_is_unknown() -> None:
    """Without a Receiver answering on the hook path, benchmark 5 skips with the agreed message."""

    async def not_found(_: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        url = f"http://127.0.0.1:{port}{workloads.receiver_path()}"
        with pytest.raises(
            Skip, match=r"^receiver benchmark skipped: receiver server not available \(after 1s: GET 404\)"
        ):
            await wait_receiver(url, workloads.github_push_body(), timeout=0.6)
    finally:
        await runner.cleanup()


def test_report_and_metrics_helpers() -> None:
    text = (
        "# TYPE notification_dropped_total counter\n"
        'notification_dropped_total{provider_type="generic",reason="overload"} 5.0\n'
        'notification_dropped_total{provider_type="generic",reason="shutdown"} 2.0\n'
        "notification_pending 3.0\n"
    )
    assert metric_sum(text, "notification_dropped_total") == 7.0
    assert metric_sum(text, "notification_dropped_total", {"reason": "overload"}) == 5.0
    assert metric_sum(text, "notification_pending") == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
    table = render_table([Row("1 ingest", "req/s", 60.0, "/s", 100.0, "≥ 0.60 × baseline", True)])
    assert "0.60" in table
    assert "PASS" in table
