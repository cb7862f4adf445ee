"""``python -m bench`` (``make bench``): run the benchmarks, print the table, write the JSON results.

Exit code 0 when every benchmark ran, whether or not its targets were met (this reports, it does not
test); 1 when a benchmark crashed (an exception, a controller that died or exited non-zero, a time
limit). Results go to ``bench/results/<timestamp>.json`` and ``bench/results/latest.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .durable import bench_durable
from .forwarders import bench_forwarders
from .instructions import bench_instructions
from .load import install_fast_loop
from .report import Row, RunReport, render_spread, render_table
from .suite import BENCHMARKS as SUITE
from .suite import Context, Skip, Timing
from .wrk import WrkError, wrk_binary

BENCHMARKS = {
    **SUITE,
    "durable": bench_durable,
    "forwarders": bench_forwarders,
    "instructions": bench_instructions,
}
OPT_IN = ("forwarders", "instructions")  # not in the default selection: run with --only

RESULTS = Path(__file__).resolve().parent / "results"
BENCH_TIME_LIMIT = 240.0  # seconds per benchmark: a hang is a crash, never an endless `make bench`
TIME_LIMITS = {"instructions": 1200.0}  # everything runs under valgrind there


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument(
        "--only",
        default=None,
        help=f"comma-separated subset of: {', '.join(BENCHMARKS)} (default: all but {', '.join(OPT_IN)})",
    )
    p.add_argument(
        "--instructions",
        action="store_true",
        help="callgrind instructions per event of the controller and its baselines (= --only instructions)",
    )
    p.add_argument("--quick", action="store_true", help="one 2 s slice per server (numbers get noisier)")
    p.add_argument(
        "--profile", type=Path, default=None, metavar="DIR", help="py-spy the controller in 1, 2 and 5"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the whole selection N times, then print the spread (min-max) of every row",
    )
    p.add_argument(
        "--markdown", action="store_true", help="print the final table as Markdown too (README.md's table)"
    )
    p.add_argument("--results", type=Path, default=RESULTS, help="where the JSON results go")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (manifests, process logs)")
    p.add_argument(
        "--receiver-status-from-manifest",
        action="store_true",
        help="write the Receiver's status.webhookPath/Ready into its manifest instead of waiting for the "
        "Receiver reconciler (measures the receiver server before the reconciler is wired)",
    )
    return p


async def run(args: argparse.Namespace, work: Path) -> RunReport:
    report = RunReport()
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    timing = Timing()
    if args.quick:
        timing = Timing(warmup=1, slice=2, slices=1, rate_seconds=3.0, ab_processes=1, ab_slices=1)
    ctx = Context(
        work=work,
        logs=logs,
        report=report,
        timing=timing,
        profile_dir=args.profile,
        receiver_prefill=args.receiver_status_from_manifest,
    )
    only = args.only or (
        "instructions" if args.instructions else ",".join(b for b in BENCHMARKS if b not in OPT_IN)
    )
    selected = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in selected if name not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(unknown)}")
    started = time.perf_counter()
    for name in selected:
        t0 = time.perf_counter()
        print(f"== {name} ...", flush=True)
        try:
            async with asyncio.timeout(TIME_LIMITS.get(name, BENCH_TIME_LIMIT)):
                await BENCHMARKS[name](ctx)
        except Skip as exc:
            print(str(exc), flush=True)
            report.skipped[name] = str(exc)
            report.add(Row(name, "skipped", None, note=str(exc), outcome="SKIP"))
        except Exception as exc:
            text = traceback.format_exc()
            print(f"{name} benchmark CRASHED:\n{text}", file=sys.stderr, flush=True)
            report.crashed[name] = text
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            report.add(Row(name, "crashed", None, note=f"{type(exc).__name__}: {first}", outcome="CRASH"))
        print(f"   {name} done in {time.perf_counter() - t0:.1f}s", flush=True)
    report.duration = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    loop_name = install_fast_loop()
    try:
        wrk = wrk_binary()
    except WrkError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    reports: list[RunReport] = []
    crashed = False
    for attempt in range(1, args.repeat + 1):
        work = Path(tempfile.mkdtemp(prefix="nc-bench-"))
        label = f" (run {attempt} of {args.repeat})" if args.repeat > 1 else ""
        print(f"throughput: {wrk}; latency generator on {loop_name}; work dir {work}{label}", flush=True)
        report = asyncio.run(run(args, work))
        reports.append(report)
        print()
        print(render_table(report.rows))
        path = report.write(args.results)
        print(f"\nresults: {path} (and {path.with_name('latest.json')}); total {report.duration:.0f}s")
        if report.crashed or args.keep:
            print(f"process logs kept in {work / 'logs'}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        crashed = crashed or bool(report.crashed)
    if args.repeat > 1:
        runs = [r.rows for r in reports]
        print(f"\nspread over {args.repeat} runs (min–max; result: how many runs met the target):\n")
        print(render_spread(runs))
        if args.markdown:
            print("\n" + render_spread(runs, markdown=True))
    elif args.markdown:
        print("\n" + render_table(reports[0].rows, markdown=True))
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
