"""``python -m bench --instructions``: instructions per event (callgrind ``Ir``), deterministic whatever the
machine's load, for the controller and its baselines (issue 29).

Wall-clock CPU per event moves by ±20 % on a shared 2-core machine; the instructions a process executes for
the same requests move by about 1 %. Each server runs under ``valgrind --tool=callgrind
--instr-atstart=no``; after a warm-up (300 requests) instrumentation is switched on with
``callgrind_control -i on PID``, N distinct events (``NC_BENCH_IR_EVENTS``, 2,000) are sent one after the
other on one keep-alive connection, and once the work they caused is done (for deliveries: once the sink
counted them all) instrumentation is switched off and the counts dumped (``callgrind_control -d``).
``Ir`` per event = the totals of the process's callgrind files / N. The pattern is the one of the lead's
``/tmp/cg/run.py`` (history on vs off, reproduced within 1 %).

* ``ingest``: the controller on the 10-Alert no-match manifests, the bare server, the Go peer;
* ``dispatch``: the controller with one generic Provider, the forwarder, the Go peer; per notification
  counted at the sink (the sink runs without valgrind).

Instructions are not time: a cache miss costs more than an instruction, and the Go peer's runtime
threads (GC, scheduler) are counted as well. Use it for before/after of a change, next to the wall-clock
table. Starting the controller under valgrind takes tens of seconds.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import gopeer, workloads
from .procs import Controller, Helper
from .report import Row
from .suite import BARE, FORWARDER, GO, Context, sink_stats
from .wrk import MARKER

N = int(os.environ.get("NC_BENCH_IR_EVENTS", "2000"))
WARMUP = 300
NAME = "9 instructions (callgrind)"


def valgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def total_ir(out: Path) -> int:
    """The ``totals:`` of every file callgrind wrote for ``out`` (one per dump, one per thread if split)."""
    total = 0
    for path in out.parent.glob(out.name + "*"):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total


def send(port: int, path: str, body_for: Callable[[int], bytes], first: int, count: int) -> dict[int, int]:
    """``count`` distinct events, one after the other on one keep-alive connection; statuses counted."""
    statuses: dict[int, int] = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        for i in range(first, first + count):
            conn.request("POST", path, body=body_for(i), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            statuses[resp.status] = statuses.get(resp.status, 0) + 1
    finally:
        conn.close()
    return statuses


def filler(templates: Sequence[bytes]) -> Callable[[int], bytes]:
    marker = MARKER.encode()
    return lambda i: templates[i % len(templates)].replace(marker, str(i).encode())


async def callgrind(pid: int, *args: str) -> None:
    command = ["callgrind_control", *args, str(pid)]
    await asyncio.to_thread(subprocess.run, command, check=True, capture_output=True)


async def wait_count(sink: Helper, phase: str, count: int, timeout: float = 600) -> None:
    async with asyncio.timeout(timeout):
        while (await sink_stats(sink, phase))["received"] < count:
            await asyncio.sleep(0.2)


async def count_ir(
    ctx: Context,
    who: str,
    pid: int,
    port: int,
    path: str,
    out: Path,
    templates: Callable[[str], Sequence[bytes]],
    sink: Helper | None,
) -> tuple[float, dict[int, int]]:
    """Warm up, then Ir per event of ``N`` events (per notification when ``sink`` counts them)."""
    for phase, first, count in ((f"ir-warm-{who}", 0, WARMUP), (f"ir-{who}", 10 * N, N)):
        if phase == f"ir-{who}":
            await callgrind(pid, "-i", "on")
        statuses = await asyncio.to_thread(send, port, path, filler(templates(phase)), first, count)
        if sink is not None:
            await wait_count(sink, phase, count)
    await callgrind(pid, "-i", "off")
    await callgrind(pid, "-d")
    ir = total_ir(out) / N
    ctx.step(f"{who}: {ir:,.0f} Ir per event ({statuses})")
    return ir, statuses


async def in_controller(
    ctx: Context,
    who: str,
    manifests: Path,
    args: Sequence[str],
    templates: Callable[[str], Sequence[bytes]],
    sink: Helper | None,
) -> float:
    out = ctx.dir(f"callgrind-{who}") / "cg.out"
    controller = Controller(manifests, ctx.logs, args)
    controller.wrapper = valgrind(out)
    await controller.start()
    try:
        await controller.wait_ready(timeout=600, poll=0.5)
        ir, _ = await count_ir(
            ctx, who, controller.pid, controller.ports["events"], "/", out, templates, sink
        )
    except BaseException:
        await controller.kill()
        raise
    await controller.stop(timeout=120)
    return ir


async def in_helper(
    ctx: Context,
    who: str,
    module: str,
    args: Sequence[str],
    templates: Callable[[str], Sequence[bytes]],
    sink: Helper | None,
    program: Sequence[str] = (),
) -> float:
    out = ctx.dir(f"callgrind-{who}") / "cg.out"
    # Go's asynchronous preemption (SIGURG) trips an assertion in callgrind's signal handling
    prefix = ["env", "GODEBUG=asyncpreemptoff=1"] if program else []
    helper = Helper(
        module,
        args,
        ctx.logs,
        program=[*prefix, *valgrind(out), *(program or [sys.executable, "-m", module])],
    )
    await helper.start(timeout=600)
    try:
        ir, _ = await count_ir(ctx, who, helper.pid, helper.port, "/", out, templates, sink)
    finally:
        await helper.stop()
    return ir


async def bench_instructions(ctx: Context) -> None:
    binary = await gopeer.build()
    # ingest
    no_match = workloads.no_match_templates(200)
    manifests = workloads.no_match_manifests(ctx.dir("ir-ingest"))
    config = gopeer.write_config(manifests, ctx.work / "ir-ingest.json")
    ingest = {
        "controller": await in_controller(ctx, "ingest-controller", manifests, [], lambda _: no_match, None),
        "bare": await in_helper(ctx, "ingest-bare", "bench.baseline", [], lambda _: no_match, None),
        "go": await in_helper(
            ctx, "ingest-go", "gopeer", ["--config", str(config)], lambda _: no_match, None, [str(binary)]
        ),
    }
    name = f"{NAME}: ingest, 10 Alerts, no match"
    for vs, key in ((BARE, "bare"), (GO, "go")):
        ctx.report.add(Row(name, "Ir per event", ingest["controller"], "Ir", ingest[key], vs=vs))
    # dispatch
    pending = ["--max-pending-notifications=1000000"]

    def templates(phase: str) -> list[bytes]:
        return workloads.dispatch_templates(phase, 200)

    async with Helper("bench.sink", [], ctx.logs) as sink:
        manifests = workloads.dispatch_manifests(ctx.dir("ir-dispatch"), sink.url)
        config = gopeer.write_config(manifests, ctx.work / "ir-dispatch.json")
        dispatch = {
            "controller": await in_controller(
                ctx, "dispatch-controller", manifests, pending, templates, sink
            ),
            "forwarder": await in_helper(
                ctx, "dispatch-forwarder", "bench.forwarder", ["--to", f"{sink.url}/fwd"], templates, sink
            ),
            "go": await in_helper(
                ctx, "dispatch-go", "gopeer", ["--config", str(config)], templates, sink, [str(binary)]
            ),
        }
    name = f"{NAME}: delivery, 1 generic Provider"
    for vs, key in ((FORWARDER, "forwarder"), (GO, "go")):
        ctx.report.add(Row(name, "Ir per notification", dispatch["controller"], "Ir", dispatch[key], vs=vs))
    ctx.detail(NAME, ingest=ingest, dispatch=dispatch, events=N)
