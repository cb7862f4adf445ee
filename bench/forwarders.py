"""Benchmark ``forwarders`` (not in the default selection): every way ``bench/forwarder.py`` can forward,
side by side, to keep the delivery baseline the cheapest one (issue 29: a baseline that costs more than
it must flatters the controller).

Each variant runs in its own process against the same sink, measured in alternating slices like every
other comparison; the row of each says its CPU per notification counted at the sink and its ratio to the
default variant (``bench.forwarder.DEFAULT_VARIANT``). The sink's own CPU share while it served each
variant is in the note: a sink near one full CPU would throttle the baseline.
"""

from __future__ import annotations

from pathlib import Path

from . import workloads
from .forwarder import DEFAULT_VARIANT, VARIANTS
from .procs import Helper
from .suite import Context, Target, cpu_row, interleaved

NAME = "0 forwarder variants"


async def bench_forwarders(ctx: Context) -> None:
    def templates(phase: str) -> Path:
        return ctx.templates(phase, workloads.dispatch_templates(phase))

    async with Helper("bench.sink", [], ctx.logs) as sink:
        helpers = {
            v: Helper("bench.forwarder", ["--to", f"{sink.url}/fwd", "--variant", v], ctx.logs)
            for v in VARIANTS
        }
        for helper in helpers.values():
            await helper.start()
        try:
            targets = [
                Target(v, h.pid, h.url + "/", templates, sink=sink, per_notification=True)
                for v, h in helpers.items()
            ]
            measured = dict(zip(VARIANTS, await interleaved(ctx, "forwarders", targets), strict=True))
        finally:
            for helper in helpers.values():
                await helper.stop()
    ctx.detail(NAME, **{v: m.summary() for v, m in measured.items()})
    base = measured[DEFAULT_VARIANT].cpu_us(per_notification=True)
    for variant, m in measured.items():
        busy = m.sink_busy
        note = f"{m.notifications} delivered of {m.events} accepted"
        if busy is not None:
            note += f"; sink busy {busy:.0%} of a CPU"
        ctx.report.add(
            cpu_row(
                NAME,
                f"notification, {variant}",
                m.cpu_us(per_notification=True),
                base,
                f"forwarder {DEFAULT_VARIANT}",
                note=note,
            )
        )
