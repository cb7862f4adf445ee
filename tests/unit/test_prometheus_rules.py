"""The delivery-latency objective in ``config/monitoring/prometheusrule.yaml`` (issue 28 item 3).

Two layers. ``promtool test rules`` (Debian's ``prometheus`` package) evaluates the recording rules and the
multi-window multi-burn-rate alert over synthetic series (``tests/data/monitoring/latency-objective.test.yaml``:
a fast burn pages, a slow burn pages, a burst stops paging when it ends, 0.5% slow never does): Prometheus's
own evaluator, not a model of it. Without ``promtool`` those tests skip; the structural checks below still run:
every series the rules read is one the controller declares (``EventMetrics``), the ``le`` they read is a
bucket bound of the histogram as ``prometheus_client`` writes it, and the burn-rate factors and windows are
the SRE workbook's (14.4x over 1h and 5m, 6x over 6h and 30m) for a 1% budget.
``tests/integration/test_ops_metrics.py`` checks every other alert and panel against a live controller.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.utils import floatToGoString as _float_to_go_string

from notification_controller.metrics import LATENCY_BUCKETS, EventMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "monitoring" / "prometheusrule.yaml"
PROMTOOL_TESTS = ROOT / "tests" / "data" / "monitoring" / "latency-objective.test.yaml"
GROUP = "notification-controller.latency-objective"
ALERT = "NotificationLatencyBudgetBurn"
OBJECTIVE_SECONDS = 30.0
BUDGET = 0.01  # 99% within 30 s
WINDOWS = ("5m", "30m", "1h", "6h")
RECORD = "namespace_provider_type:notification_delivery_slow:ratio_rate{}"
# (long window, short window) -> burn-rate factor (Google SRE workbook, "Multiwindow, multi-burn-rate alerts")
BURN_RATES = {("1h", "5m"): 14.4, ("6h", "30m"): 6.0}


def go_float(value: float) -> str:
    """How prometheus_client writes a bucket bound (its own function, untyped)."""
    text: str = _float_to_go_string(value)  # type: ignore[no-untyped-call]
    return text


def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    assert loaded["kind"] == "PrometheusRule"
    spec_: dict[str, Any] = loaded["spec"]
    return spec_


def group() -> list[dict[str, Any]]:
    groups = {g["name"]: g["rules"] for g in spec()["groups"]}
    rules: list[dict[str, Any]] = groups[GROUP]
    return rules


def series_read(expr: str) -> set[str]:
    """Metric (or recorded series) names an expression selects: ``name{`` or ``name[`` or a bare name."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    names = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{|\[)", text))
    names |= set(re.findall(r"\b([a-z_]+:[a-z_:0-9]+)\b", text))  # recorded series, level:metric:operation
    return names - {"by", "on", "rate", "sum"}


def declared() -> set[str]:
    """Sample names the controller's ``EventMetrics`` declare (histograms with their three series)."""
    registry = CollectorRegistry()
    EventMetrics(registry)
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
    return names


def test_recording_rules_read_the_latency_histogram_at_the_objective_bound() -> None:
    records = {r["record"]: r["expr"] for r in group() if "record" in r}
    assert set(records) == {RECORD.format(w) for w in WINDOWS}
    exported = declared()
    bound = go_float(OBJECTIVE_SECONDS)  # how prometheus_client writes the bucket's le label
    assert OBJECTIVE_SECONDS in LATENCY_BUCKETS and bound == "30.0"
    for window in WINDOWS:
        expr = records[RECORD.format(window)]
        read = series_read(expr)
        assert read == {
            "notification_delivery_latency_seconds_bucket",
            "notification_delivery_latency_seconds_count",
        }, expr
        assert read <= exported, f"{expr}: not declared by the controller: {sorted(read - exported)}"
        # every range in the expression is this rule's window, and the bucket read is the objective's
        assert set(re.findall(r"\[(\w+)\]", expr)) == {window}, expr
        (le,) = re.findall(r'le=~"([^"]*)"', expr)
        pattern = le.replace("\\\\", "\\")  # the PromQL string literal's escape
        assert re.fullmatch(pattern, bound) and re.fullmatch(pattern, "30"), le  # Prometheus 3 writes "30"
        assert not any(re.fullmatch(pattern, go_float(b)) for b in LATENCY_BUCKETS if b != 30.0)
        assert "by (namespace, provider_type)" in expr.replace("\n", " ")


def test_burn_rate_alert_pairs_the_workbook_windows_and_factors() -> None:
    alerts = {r["alert"]: r for r in group() if "alert" in r}
    assert set(alerts) == {ALERT}
    expr = alerts[ALERT]["expr"]
    recorded = {r["record"] for r in group() if "record" in r}
    assert series_read(expr) <= recorded, "the alert reads only the recording rules"
    # each side of `or` is one (long, short) pair, both compared with factor x budget
    sides = [side for side in re.split(r"\)\s*or\s*\(", expr) if side.strip()]
    assert len(sides) == 2, expr
    found: dict[tuple[str, str], float] = {}
    for side in sides:
        terms = re.findall(r"ratio_rate(\w+)\s*>\s*\(\s*([\d.]+)\s*\*\s*([\d.]+)\s*\)", side)
        assert len(terms) == 2 and re.search(r"\sand\s", side), side
        (long_w, factor_l, budget_l), (short_w, factor_s, budget_s) = terms
        assert factor_l == factor_s and float(budget_l) == float(budget_s) == BUDGET, side
        found[(long_w, short_w)] = float(factor_l)
    assert found == BURN_RATES
    assert alerts[ALERT]["labels"]["severity"] == "critical"
    assert "$labels.provider_type" in alerts[ALERT]["annotations"]["summary"]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None and os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
        pytest.fail(
            "promtool not installed on CI: scripts/system-deps.sh installs Debian's prometheus package"
        )
    if path is None:
        pytest.skip(
            "promtool not installed (Debian: apt-get install prometheus): the structural tests still run"
        )
    return path


def test_promtool_accepts_every_rule(tmp_path: Path) -> None:
    binary = promtool()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(spec()))
    done = subprocess.run(
        [binary, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def run_promtool_tests(tmp_path: Path, rules_spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules_spec))
    tests = tmp_path / PROMTOOL_TESTS.name
    tests.write_text(PROMTOOL_TESTS.read_text())
    return subprocess.run(
        [promtool(), "test", "rules", tests.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_latency_objective_alerts_as_the_promtool_scenarios_say(tmp_path: Path) -> None:
    done = run_promtool_tests(tmp_path, spec())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("> (14.4 * 0.01)", "> (1.44 * 0.01)"),  # a page for a burn the budget can afford
        ("> (6 * 0.01)", "> (60 * 0.01)"),  # the slow burn never pages
        ('le=~"30(\\\\.0)?"', 'le=~"60(\\\\.0)?"'),  # another objective than the tests' 30 s
    ],
)
def test_the_promtool_scenarios_catch_a_wrong_rule(tmp_path: Path, old: str, new: str) -> None:
    """The scenarios are not vacuous: each of these edits to the rules makes them fail."""
    promtool()
    text = RULES.read_text()
    assert old in text, old
    broken: dict[str, Any] = yaml.safe_load(text.replace(old, new))["spec"]
    done = run_promtool_tests(tmp_path, broken)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr, done.stdout
