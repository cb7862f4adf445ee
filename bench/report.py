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


def render_table(rows: Sequence[Row]) -> str:
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
    widths = [
        max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)
    ]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(widths[i]) if i in (0, 1, 3, 6, 7) else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ).rstrip()

    out = [fmt(header), fmt(["-" * w for w in widths])]
    out.extend(fmt(line) for line in lines)
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
