"""Result rows, the printed table and the JSON files of a benchmark run.

A row is one number with, where there is one, the reference it is compared to in the same run (``vs``
names it: the bare aiohttp server, the bare forwarder, the 10-Alert configuration) and the issue's
target for it. ``ratio`` is always ``value / reference``: for rates, higher is better; for CPU per
event, latencies and memory, lower is better. A memory row shows ``VmRSS / VmHWM`` (now / peak); its
ratio is of the VmRSS. The verdict of a row with a target is PASS or MISS.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass
class Row:
    bench: str
    metric: str
    value: float | None
    unit: str = ""
    baseline: float | None = None
    target: str = ""
    passed: bool | None = None  # None: no target, or not measured
    note: str = ""
    outcome: str = ""  # overrides the verdict: "SKIP", "CRASH"
    vs: str = ""  # what the baseline is
    peak: float | None = None  # memory rows: VmHWM next to the VmRSS value
    baseline_peak: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def verdict(self) -> str:
        if self.outcome:
            return self.outcome
        if self.value is None:
            return "n/a"
        if self.passed is None:
            return "-"
        return "PASS" if self.passed else "MISS"

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ratio"] = self.ratio
        out["verdict"] = self.verdict
        return out


def fmt_number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "not measured"
    if unit == "%":
        text = f"{value:.1f}"
    elif abs(value) >= 100 or value == int(value):
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def fmt_pair(value: float | None, peak: float | None, unit: str) -> str:
    """``62 / 64 MB`` (VmRSS / VmHWM) when there is a peak, else the plain number."""
    if value is None or peak is None:
        return fmt_number(value, unit)
    return f"{fmt_number(value)} / {fmt_number(peak, unit)}"


def _layout(
    header: Sequence[str], lines: Sequence[Sequence[str]], left: set[int], markdown: bool
) -> list[str]:
    """Aligned plain-text columns, or a Markdown table (what README.md shows)."""
    if markdown:

        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        out = ["| " + " | ".join(header) + " |"]
        out.append("|" + "|".join("---" if i in left else "---:" for i in range(len(header))) + "|")
        out.extend("| " + " | ".join(cell(c) for c in line) + " |" for line in lines)
        return out
    widths = [
        max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)
    ]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(cells)
        ).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths]), *(fmt(line) for line in lines)]


def render_table(rows: Sequence[Row], *, markdown: bool = False) -> str:
    header = ("benchmark", "metric", "value", "vs", "baseline", "ratio", "target", "result")
    lines = [
        (
            row.bench,
            row.metric,
            fmt_pair(row.value, row.peak, row.unit),
            row.vs or "-",
            fmt_pair(row.baseline, row.baseline_peak, row.unit) if row.baseline is not None else "-",
            f"{row.ratio:.2f}" if row.ratio is not None else "-",
            row.target or "-",
            row.verdict,
        )
        for row in rows
    ]
    out = _layout(header, lines, {0, 1, 3, 6, 7}, markdown)
    verdicts = [row.verdict for row in rows]
    out.append("")
    out.append(
        f"targets: {verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS"
        + "".join(f", {verdicts.count(v)} {v}" for v in ("n/a", "SKIP", "CRASH") if v in verdicts)
    )
    notes = [f"  [{row.bench} / {row.metric}] {row.note}" for row in rows if row.note]
    if notes:
        out.append("")
        out.append("notes:")
        out.extend(notes)
    return "\n".join(out)


def _span(values: Sequence[float | None], fmt: Any, unit: str = "") -> str:
    """``min–max unit`` of the measured values (one value when they agree, "not measured" when none)."""
    got = [v for v in values if v is not None]
    if not got:
        return "not measured"
    low, high = fmt(min(got)), fmt(max(got))
    text = (low if low == high else f"{low}–{high}") + (f" {unit}" if unit and unit != "%" else unit)
    missing = len(values) - len(got)
    return text + (f" ({missing} not measured)" if missing else "")


def render_spread(runs: Sequence[Sequence[Row]], *, markdown: bool = False) -> str:
    """One line per row of the runs (``bench``, ``metric``, ``vs``): the spread (min–max) of the value,
    the baseline and the ratio over the runs, and how many runs met the target (``--repeat N``)."""
    keyed: dict[tuple[str, str, str], list[Row]] = {}
    for rows in runs:
        for row in rows:
            keyed.setdefault((row.bench, row.metric, row.vs), []).append(row)
    header = (
        "benchmark",
        "metric",
        "value",
        "vs",
        "baseline",
        "ratio",
        "target",
        f"result ({len(runs)} runs)",
    )
    lines = []
    for (bench, metric, vs), rows in keyed.items():
        unit = rows[0].unit

        def number(v: float, unit: str = unit) -> str:
            return fmt_number(v, "%" if unit == "%" else "")

        verdicts = [r.verdict for r in rows]
        counted = ", ".join(f"{v} {verdicts.count(v)}" for v in dict.fromkeys(verdicts) if v not in ("-",))
        lines.append(
            (
                bench,
                metric,
                _span([r.value for r in rows], number, unit),
                vs or "-",
                _span([r.baseline for r in rows], number, unit)
                if any(r.baseline is not None for r in rows)
                else "-",
                _span([r.ratio for r in rows], lambda v: f"{v:.2f}") if any(r.ratio for r in rows) else "-",
                rows[0].target or "-",
                counted or "-",
            )
        )
    out = _layout(header, lines, {0, 1, 3, 6, 7}, markdown)
    return "\n".join(out)


@dataclass
class RunReport:
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    crashed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    duration: float = 0.0

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def as_json(self) -> dict[str, Any]:
        return {
            "started": self.started.isoformat(),
            "duration_s": round(self.duration, 2),
            "machine": {
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
            "rows": [row.as_json() for row in self.rows],
            "crashed": self.crashed,
            "skipped": self.skipped,
            "details": self.details,
        }

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.as_json(), indent=2, default=str) + "\n"
        stamp = self.started.strftime("%Y%m%dT%H%M%SZ")
        path = directory / f"{stamp}.json"
        path.write_text(text)
        (directory / "latest.json").write_text(text)
        return path
