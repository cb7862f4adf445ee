"""Smoke test of the benchmark kit (bench/), so ``make bench`` cannot rot between runs.

Runs the real pieces for about a second each: the bare server, the bare forwarder and the sink as
subprocesses (as ``python -m bench`` starts them), ``wrk`` with ``bench/wrk.lua`` and the Python
open-loop generator against them, the CPU accounting and the result helpers. It asserts the numbers are
sane and the counts exact, not that anything is fast: this is not a benchmark, and the machine may be
busy. ``wrk`` comes from ``bench/deps.sh``, as for ``make bench``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from bench import gopeer, workloads
from bench.forwarder import VARIANTS
from bench.load import percentile, run_load
from bench.procs import ROOT, Helper, metric_sum, quiet_cpu, read_proc_status
from bench.report import Row, RunReport, render_spread, render_table
from bench.suite import (
    Context,
    Skip,
    Target,
    Timing,
    Variant,
    across_processes,
    drained,
    measure_run,
    sink_stats,
    wait_receiver,
)
from bench.wrk import MARKER, WrkError, parse_output, run_wrk, write_templates
from tests.support.capture import CaptureServer


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


@pytest.mark.parametrize("variant", VARIANTS)
async def test_every_forwarder_variant_forwards_each_event_once(tmp_path: Path, variant: str) -> None:
    """Each way the baseline can forward (``--variant``) delivers every accepted event exactly once, so
    the variants measured side by side (``--only forwarders``) all do the same work."""
    async with Helper("bench.sink", [], tmp_path) as sink:
        args = ["--to", f"{sink.url}/fwd", "--variant", variant]
        async with Helper("bench.forwarder", args, tmp_path) as forwarder:
            result = await run_load(
                forwarder.url + "/",
                workloads.dispatch_events(f"v-{variant}"),
                connections=8,
                max_requests=200,
                max_duration=30.0,
            )
            async with asyncio.timeout(30):
                while (stats := await sink_stats(sink, f"v-{variant}"))["received"] < 200:
                    await asyncio.sleep(0.05)
    assert result.statuses[202] == 200
    assert stats["received"] == stats["unique"] == 200


@pytest.fixture(scope="module")
def go_peer_binary() -> Path:
    """The Go peer built as ``make bench`` builds it (Go from ``bench/deps.sh`` when missing)."""
    if gopeer.go_binary() is None:
        done = subprocess.run(["bash", str(ROOT / "bench" / "deps.sh")], capture_output=True, text=True)
        if done.returncode != 0 or gopeer.go_binary() is None:
            pytest.fail(f"bench/deps.sh could not install Go: {done.stderr[-500:]}")
    return asyncio.run(gopeer.build())


def flux_event(name: str, message: str, *, severity: str = "info", index: int = 1) -> bytes:
    return workloads.event_body(
        "Kustomization",
        "apps",
        name,
        message,
        severity=severity,
        index=index,
        metadata={"kustomize.toolkit.fluxcd.io/checksum": "abc", "event.toolkit.fluxcd.io/phase": "p"},
    )


async def test_go_peer_does_fluxs_event_path(tmp_path: Path, go_peer_binary: Path) -> None:
    """The moonshot peer does the work it is compared for: it decodes, limits duplicates (429), matches
    source kind/name (``*``)/namespace, severity and the inclusion/exclusion lists against every Alert,
    and POSTs the generic payload (metadata prefix-stripped, checksum dropped, the Alert's summary) with
    ``gotk-component`` to each matching Alert's Provider; an event no Alert takes is answered 202 and
    sent nowhere, a body that is not an event 400."""
    async with CaptureServer() as capture:
        docs = [
            workloads.provider_doc("apps", "sink", f"{capture.url}/sink"),
            workloads.alert_doc("apps", "by-name", "sink", [("Kustomization", "web")]),
            workloads.alert_doc(
                "apps",
                "filtered",
                "sink",
                [("Kustomization", "*")],
                inclusion=["^deploy"],
                exclusion=["dry-run"],
            ),
            workloads.alert_doc("apps", "errors", "sink", [("Kustomization", "db")], severity="error"),
            workloads.alert_doc("other", "elsewhere", "sink", [("Kustomization", "*")]),
        ]
        docs[1]["spec"]["summary"] = "web alerts"
        manifests = workloads.write_manifests(tmp_path / "m", {"all.yaml": docs})
        config = gopeer.write_config(manifests, tmp_path / "peer.json")
        peer = Helper("gopeer", ["--config", str(config)], tmp_path, program=[str(go_peer_binary)])
        async with peer, aiohttp.ClientSession() as session:

            async def post(body: bytes) -> int:
                async with session.post(peer.url + "/", data=body) as resp:
                    return resp.status

            assert await post(flux_event("web", "deploy started")) == 202  # by-name and filtered
            assert await post(flux_event("web", "deploy started")) == 429  # Flux's duplicate limiter
            assert await post(flux_event("api", "deploy dry-run", index=2)) == 202  # excluded
            assert await post(flux_event("api", "rollout", index=3)) == 202  # not included
            assert await post(flux_event("db", "deploy db", index=4)) == 202  # info < error: only filtered
            assert await post(flux_event("db", "deploy db", severity="error", index=5)) == 202  # both
            assert await post(b"not json") == 400
            assert await post(b'{"involvedObject": {}}') == 400
            got = await capture.wait_for(5, timeout=30)
            await asyncio.sleep(0.3)  # nothing else arrives
    assert len(capture.requests) == 5
    bodies = [orjson.loads(r.body) for r in got]
    assert sorted(b["message"] for b in bodies) == sorted(
        ["deploy started", "deploy started", "deploy db", "deploy db", "deploy db"]
    )
    summaries = sorted(b["metadata"].get("summary", "") for b in bodies)
    assert summaries == ["", "", "", "", "web alerts"]
    for request, body in zip(got, bodies, strict=True):
        assert request.path == "/sink"
        assert request.headers["gotk-component"] == "kustomize-controller"
        assert request.headers["Content-Type"] == "application/json"
        assert body["involvedObject"]["name"] in ("web", "db")
        assert body["metadata"]["phase"] == "p" and body["metadata"]["revision"].startswith("main@sha1:")
        assert "checksum" not in body["metadata"]
        assert body["timestamp"] == "2026-11-22T10:00:00Z"


def test_go_peer_build_is_cached(go_peer_binary: Path) -> None:
    """A second build of unchanged sources reuses the binary (named by the sources' hash)."""
    assert go_peer_binary.name == f"gopeer-{gopeer.source_hash()}"
    assert asyncio.run(gopeer.build()) == go_peer_binary


def test_spread_of_repeated_runs() -> None:
    """``--repeat N``: every row's min–max over the runs and how many met the target; Markdown escapes ``|``."""
    runs = [
        [Row("2 delivery", "CPU per notification", v, "µs", 100.0, "≤ 1.20 × fwd", v <= 120, vs="fwd")]
        for v in (110.0, 125.0, 118.0)
    ]
    runs[1].append(Row("2 delivery", "a|b", None))
    text = render_spread(runs)
    assert "110–125 µs" in text and "1.10–1.25" in text and "PASS 2, MISS 1" in text
    assert "100 µs" in text and "result (3 runs)" in text
    assert "not measured" in text
    markdown = render_spread(runs, markdown=True)
    assert markdown.startswith("| benchmark | metric |") and "a\\|b" in markdown


async def test_drained_waits_through_a_pause_until_every_expected_notification(tmp_path: Path) -> None:
    """A server that delivers in batches with a pause between them (a durable store) is not "drained" at
    the pause while fewer notifications than expected arrived; without ``expected`` it is (the old rule)."""
    events = workloads.dispatch_events("batches")

    async with Helper("bench.sink", [], tmp_path) as sink, aiohttp.ClientSession() as session:

        async def deliver(first: int) -> None:
            for i in range(first, first + 10):
                async with session.post(sink.url + "/flux", data=events(i)) as resp:
                    assert resp.status == 200

        async def two_batches() -> None:
            await deliver(0)
            await asyncio.sleep(3)  # ample time for the quiet windows of the first drained()
            await deliver(10)

        sender = asyncio.create_task(two_batches())
        await asyncio.sleep(0.3)
        _, early = await drained(sink.pid, sink, "batches", window=0.25)
        _, stats = await drained(sink.pid, sink, "batches", window=0.25, expected=20, grace=30)
        await sender
    assert early["received"] == 10
    assert stats["received"] == 20


async def test_across_processes_measures_every_process_of_each_variant(tmp_path: Path, wrk: str) -> None:
    """The history rows' measurement: each variant runs in its own processes (here 2 of each), every process
    is measured, and a variant's total is the sum of its processes' slices (one detail per process)."""
    templates = write_templates(tmp_path / "no-match.txt", workloads.no_match_templates(20))
    manifests = workloads.no_match_manifests(tmp_path / "manifests")
    timing = Timing(warmup=1, connections=4, ab_processes=2, ab_slices=1, ab_slice=1)
    ctx = Context(work=tmp_path, logs=tmp_path, report=RunReport(), timing=timing)
    totals = await across_processes(
        ctx,
        "ab-smoke",
        [Variant("on", manifests), Variant("off", manifests, ["--history=false"])],
        lambda who, c: Target(who, c.pid, c.url("events"), lambda _: templates),
    )
    per_process = ctx.report.details["ab-smoke"]["cpu_us_per_event"]
    assert sorted(per_process) == ["off#0", "off#1", "on#0", "on#1"]
    assert all(us is not None and 1 < us < 100_000 for us in per_process.values())
    for name in ("on", "off"):
        measured = totals[name]
        assert measured.events > 0 and measured.events == measured.load.statuses[202]
        assert measured.cpu_s > 0
        total_us = measured.cpu_us()
        assert total_us is not None
        low = min(per_process[f"{name}#0"], per_process[f"{name}#1"])
        high = max(per_process[f"{name}#0"], per_process[f"{name}#1"])
        assert low <= total_us <= high  # a weighted mean of its processes
