"""Smoke test of the benchmark kit (bench/), so ``make bench`` cannot rot between runs.

Runs the real pieces for about a second each: the bare server, the bare forwarder and the sink as
subprocesses (as ``python -m bench`` starts them), ``wrk`` with ``bench/wrk.lua`` and the Python
open-loop generator against them, the CPU accounting and the result helpers. It asserts the numbers are
sane and the counts exact, not that anything is fast: this is not a benchmark, and the machine may be
busy. ``wrk`` comes from ``bench/deps.sh``, as for ``make bench``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from bench import workloads
from bench.load import percentile, run_load
from bench.procs import ROOT, Helper, metric_sum, quiet_cpu, read_proc_status
from bench.report import Row, RunReport, render_table
from bench.suite import Context, Skip, Target, Timing, measure_run, sink_stats, wait_receiver
from bench.wrk import MARKER, WrkError, parse_output, run_wrk, write_templates


@pytest.fixture(scope="module")
def wrk() -> str:
    """``wrk`` on the PATH, installed by ``bench/deps.sh`` (idempotent) when missing."""
    if shutil.which("wrk") is None:
        done = subprocess.run(["bash", str(ROOT / "bench" / "deps.sh")], capture_output=True, text=True)
        if done.returncode != 0 or shutil.which("wrk") is None:
            pytest.fail(f"bench/deps.sh could not install wrk: {done.stderr[-500:]}")
    exe = shutil.which("wrk")
    assert exe is not None
    return exe


async def test_wrk_sends_distinct_events_the_sink_counts(tmp_path: Path, wrk: str) -> None:
    """Every wrk request is a distinct event: the sink sees as many distinct keys as it got events,
    attributed to the phase, and at least as many as wrk counted answers (plus those in flight at the end).
    """
    templates = write_templates(tmp_path / "t.txt", workloads.dispatch_templates("smoke", count=7))
    async with Helper("bench.sink", [], tmp_path) as sink:
        result = await run_wrk(sink.url + "/flux", templates, seconds=1, first=10_000_000, connections=4)
        stats = await sink_stats(sink, "smoke")
    assert result.requests > 0
    assert result.statuses == {200: result.requests}
    assert result.socket_errors == 0
    assert 0 < result.p50 <= result.p99
    assert result.requests <= stats["received"] <= result.requests + 4  # 4 connections: ≤ 4 in flight
    assert stats["unique"] == stats["received"]
    assert stats["duplicates"] == 0
    assert stats["unparsed"] == 0


async def test_wrk_fills_the_marker_in_headers_and_counts_statuses(tmp_path: Path, wrk: str) -> None:
    """A header can carry the marker (GitHub delivery ids): every request gets its own value."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        await request.read()
        seen.append(request.headers["X-GitHub-Delivery"])
        return web.Response(status=400 if len(seen) % 2 else 200)

    app = web.Application()
    app.router.add_post("/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    body = workloads.github_push_body()
    templates = write_templates(tmp_path / "push.txt", [body], require_marker=False)
    try:
        result = await run_wrk(
            f"http://127.0.0.1:{port}/hook",
            templates,
            seconds=1,
            first=20_000_000,
            connections=2,
            headers=workloads.github_wrk_headers(body, valid=True),
        )
    finally:
        await runner.cleanup()
    assert result.requests > 0
    assert len(seen) >= result.requests
    assert len(set(seen)) == len(seen)
    assert all(value.startswith("72d3162e-cc78-11e3-81ab-") and MARKER not in value for value in seen)
    assert set(result.statuses) <= {200, 400}
    assert abs(result.statuses[200] - result.statuses[400]) <= 2


async def test_forwarder_delivery_is_counted_with_its_cpu(tmp_path: Path, wrk: str) -> None:
    """The bare forwarder's measured run: every accepted event reaches the sink once (prefixed phase key
    read), and the CPU until it went quiet is positive and plausible."""

    def templates(phase: str) -> Path:
        return write_templates(tmp_path / f"{phase}.txt", workloads.dispatch_templates(phase, count=5))

    ctx = Context(work=tmp_path, logs=tmp_path, report=RunReport(), timing=Timing(connections=4))
    async with Helper("bench.sink", [], tmp_path) as sink:
        async with Helper("bench.forwarder", ["--to", f"{sink.url}/fwd"], tmp_path) as forwarder:
            target = Target(
                "fwd", forwarder.pid, forwarder.url + "/", templates, sink=sink, per_notification=True
            )
            measured = await measure_run(ctx, target, "fwd-smoke", 1)
            measured.remember_memory(forwarder.pid)
        stats = await sink_stats(sink, "fwd-smoke")
    assert measured.events > 0
    assert measured.events <= measured.notifications <= measured.events + 4
    assert measured.notifications == stats["received"] == stats["unique"]
    assert 0 < measured.delivery_s < 10
    per_notification = measured.cpu_us(per_notification=True)
    assert per_notification is not None and 1 < per_notification < 100_000
    assert measured.rss_mb > 0 and measured.hwm_mb >= measured.rss_mb


async def test_quiet_cpu_stops_once_the_server_is_idle(tmp_path: Path) -> None:
    async with Helper("bench.baseline", [], tmp_path) as baseline:
        started = time.perf_counter()
        cpu = await quiet_cpu(baseline.pid, window=0.1, timeout=5)
        assert time.perf_counter() - started < 2  # an idle server is quiet at once
        assert cpu > 0  # the interpreter's start-up
        assert read_proc_status(baseline.pid)["VmRSS"] > 0


async def test_load_generator_against_baseline(tmp_path: Path) -> None:
    """Closed loop: every request answered 202, a positive rate, ordered percentiles, and it stops."""
    async with Helper("bench.baseline", [], tmp_path) as baseline:
        result = await run_load(
            baseline.url + "/", workloads.no_match_event, connections=8, max_requests=300, max_duration=5.0
        )
    assert result.requests == 300  # bounded by the request count, well before the 5 s limit
    assert result.statuses[202] == 300
    assert result.errors == 0
    assert 0 < result.p50 <= result.p99
    assert result.elapsed < 5.0


async def test_open_loop_latency_at_a_fixed_rate_reaches_the_sink(tmp_path: Path) -> None:
    """Open loop at 200/s for 1 s: the duration bound wins, and the sink measures POST→delivery latency."""
    async with Helper("bench.sink", [], tmp_path) as sink:
        result = await run_load(
            sink.url + "/flux",
            workloads.dispatch_events("open"),
            connections=4,
            max_requests=100_000,
            max_duration=1.0,
            rate=200.0,
        )
        stats = await sink_stats(sink, "open")
    assert 100 <= result.requests <= 201
    assert result.statuses[200] == result.requests
    assert result.elapsed < 3.0
    assert stats["received"] == stats["unique"] == result.requests
    assert len(stats["latencies_ms"]) == result.requests
    assert all(0 <= latency < 5000 for latency in stats["latencies_ms"])


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


def test_templates_parsing_and_report_helpers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="marker"):
        write_templates(tmp_path / "bad.txt", [b'{"message": "no marker"}'])
    assert all(MARKER in t.decode() for t in workloads.scale_templates(workloads.scale_plan(10), "p", 4))
    with pytest.raises(WrkError, match="no result"):
        parse_output("Running 1s test\n")
    parsed = parse_output(
        'x\nWRK_JSON {"requests":10,"duration_us":2000000,"bytes":1,"errors":{"connect":0,"read":1,'
        '"write":0,"status":2,"timeout":0},"latency_us":{"p50":100,"p90":200,"p99":300,"max":400,'
        '"mean":150.0},"statuses":{"202":8,"429":2}}\n'
    )
    assert (parsed.requests, parsed.rps, parsed.statuses[202], parsed.socket_errors) == (10, 5.0, 8, 1)
    assert (parsed.p50, parsed.p99) == (100e-6, 300e-6)

    text = (
        "# TYPE notification_dropped_total counter\n"
        'notification_dropped_total{provider_type="generic",reason="overload"} 5.0\n'
        'notification_dropped_total{provider_type="generic",reason="shutdown"} 2.0\n'
        "notification_pending 3.0\n"
    )
    assert metric_sum(text, "notification_dropped_total") == 7.0
    assert metric_sum(text, "notification_dropped_total", {"reason": "overload"}) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
    table = render_table(
        [
            Row("1 ingest", "CPU per event", 130.0, "µs", 100.0, "≤ 1.30 × bare", True, vs="bare"),
            Row("1 ingest", "CPU per event", 131.0, "µs", 100.0, "≤ 1.30 × bare", False, vs="bare"),
            Row("1 ingest", "VmRSS / VmHWM", 62.0, "MB", 31.0, vs="bare", peak=64.0, baseline_peak=31.5),
        ]
    )
    assert "1.30" in table and "1.31" in table
    assert "PASS" in table and "MISS" in table and "FAIL" not in table
    assert "62 / 64 MB" in table and "2.00" in table
    assert "targets: 1 PASS, 1 MISS" in table


async def test_sink_rejects_what_it_cannot_parse(tmp_path: Path) -> None:
    async with Helper("bench.sink", [], tmp_path) as sink, aiohttp.ClientSession() as session:
        async with session.post(sink.url + "/flux", data=b"not json") as resp:
            assert resp.status == 400
        assert (await sink_stats(sink, ""))["unparsed"] == 1
