"""Operations parity (issue 16): the metrics Flux's monitoring queries, and ``config/monitoring`` against them.

* Every metric name the shipped Grafana dashboard and PrometheusRule query must be in a real ``/metrics``
  scrape of the running controller (local mode ``App``, after reconciles, deliveries that succeed, fail and
  are dropped, a hook call, a rejected event and a receiver request, so that the series exist).
  ``rest_client_requests_total`` only exists in Kubernetes mode: tests/e2e/test_ops_metrics_e2e.py checks it.
* controller-runtime's ``controller_runtime_*`` and client-go's ``workqueue_*`` carry the same labels and
  result values as in a Flux controller; ``process_*`` is there.
* ``gotk_event_http_response_size_bytes`` observes the size of the body sent (it was always 0).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client import CollectorRegistry

from notification_controller.app import App
from notification_controller.controllers.metrics import WorkQueueMetrics
from notification_controller.controllers.queue import WorkQueue
from tests.integration.appkit import metric, post_event, running_app, write
from tests.support.capture import CaptureServer, Reply

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "config" / "monitoring"
DASHBOARD = MONITORING / "dashboards" / "notification-controller.json"
RULES = MONITORING / "prometheusrule.yaml"
KUBE_ONLY = frozenset({"rest_client_requests_total"})  # no API server in local mode
EVENT = (REPO / "examples" / "event.json").read_bytes()

# PromQL words that are not metric names: functions, aggregations, keywords.
_PROMQL_WORDS = frozenset(
    [
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "rate",
        "irate",
        "increase",
        "delta",
        "idelta",
        "deriv",
        "histogram_quantile",
        "clamp",
        "clamp_min",
        "clamp_max",
        "abs",
        "absent",
        "absent_over_time",
        "vector",
        "scalar",
        "time",
        "label_replace",
        "label_join",
        "label_values",
        "sort",
        "sort_desc",
        "round",
        "ceil",
        "floor",
        "predict_linear",
        "resets",
        "changes",
        "avg_over_time",
        "max_over_time",
        "min_over_time",
        "sum_over_time",
        "count_over_time",
        "last_over_time",
        "inf",
        "nan",
    ]
)


# --------------------------------------------------------------------------------------------------
# Queries and scrapes
# --------------------------------------------------------------------------------------------------


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or Grafana ``label_values(...)``) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values, regexes)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b", " ", text)  # numbers, 1e-9 included
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        if word.lower() in _PROMQL_WORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def _exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("type") == "datasource":  # the data source picker: its query is a plugin type
            return
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, str | dict):
                yield from ([value] if isinstance(value, str) else _exprs(value))
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def shipped_queries() -> dict[str, list[str]]:
    """{"dashboard": [every PromQL of the dashboard], "rules": [every alert expression]}."""
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(RULES.read_text())
    alerts = [rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]]
    return {"dashboard": [e for e in _exprs(dashboard) if e.strip()], "rules": alerts}


async def scrape(app: App) -> dict[str, list[tuple[str, float]]]:
    """``GET /metrics`` → {sample name: [(labels text, value)]}."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{app.ports['metrics']}/metrics") as resp,
    ):
        assert resp.status == 200
        text = await resp.text()
    samples: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        assert match is not None, line
        samples.setdefault(match.group(1), []).append((match.group(2) or "", float(match.group(3))))
    return samples


def test_metric_names_are_extracted_from_promql() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, provider_type) (rate(notification_delivery_duration_seconds_bucket"
        '{namespace=~"$namespace",reason!~"a|b"}[5m]))) / clamp_min(x_total + (y or vector(0)), 1e-9) > 0'
    )
    assert metric_names(expr) == {"notification_delivery_duration_seconds_bucket", "x_total", "y"}
    assert metric_names('label_values(controller_runtime_reconcile_total{pod=~"a"}, namespace)') == {
        "controller_runtime_reconcile_total",
        "namespace",  # label_values' second argument: a label, filtered by the caller
    }


# --------------------------------------------------------------------------------------------------
# The running controller
# --------------------------------------------------------------------------------------------------


def manifests(tmp: Path, ok: str, failing: str, hook: str) -> Path:
    write(
        tmp,
        "objects.yaml",
        f"""\
        apiVersion: v1
        kind: Secret
        metadata: {{name: token, namespace: flux-system}}
        stringData: {{token: ops-metrics-token}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: ok, namespace: flux-system}}
        spec: {{type: generic, address: '{ok}/ok'}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: failing, namespace: flux-system}}
        spec: {{type: generic, address: '{failing}/fail'}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: paused, namespace: flux-system}}
        spec: {{type: slack, address: '{ok}/paused', suspend: true}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: broken, namespace: flux-system}}
        spec: {{type: generic, address: '{ok}/broken', secretRef: {{name: missing}}}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: ok, namespace: flux-system}}
        spec:
          providerRef: {{name: ok}}
          eventSources: [{{kind: Kustomization, name: '*'}}]
          hooks:
            - name: enrich
              address: {{uri: '{hook}/hook'}}
              capabilities: [pre-dispatch]
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: failing, namespace: flux-system}}
        spec:
          providerRef: {{name: failing}}
          eventSources: [{{kind: Kustomization, name: '*'}}]
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: paused, namespace: flux-system}}
        spec:
          providerRef: {{name: paused}}
          eventSources: [{{kind: Kustomization, name: '*'}}]
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1
        kind: Receiver
        metadata: {{name: gh, namespace: flux-system}}
        spec:
          type: generic
          secretRef: {{name: token}}
          resources: [{{kind: GitRepository, name: app}}]
        """,
    )
    return tmp


def sample(app: App, metric_name: str, /, **labels: str) -> float:
    """``appkit.metric`` for label sets that include a ``name`` label."""
    return app.registry.get_sample_value(metric_name, labels) or 0.0


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


async def test_dashboard_and_alerts_query_only_metrics_the_controller_exports(tmp_path: Path) -> None:
    async with (
        CaptureServer() as ok,
        CaptureServer() as failing,
        CaptureServer() as hook,
        running_app(manifests(tmp_path, ok.url, failing.url, hook.url)) as app,
    ):
        failing.on("POST", "/fail", Reply(500, {"error": "down"}))
        hook.on("POST", "/hook", Reply(body={}))
        broken = {"kind": "Provider", "name": "broken", "namespace": "flux-system"}
        await eventually(
            lambda: sample(app, "notification_reconcile_errors_total", **broken) > 0,
            "a reconcile error",
        )
        await eventually(lambda: app.store.receiver("flux-system", "gh") is not None, "the Receiver")

        assert (await post_event(app, EVENT)).status == 202
        unmatched = EVENT.replace(b'"Kustomization"', b'"HelmRelease"')
        assert (await post_event(app, unmatched)).status == 202
        assert (await post_event(app, b"{not json")).status == 400
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{app.ports['receiver']}/hook/{'0' * 64}", data=b"{}") as resp,
        ):
            assert resp.status == 404
        await ok.wait_for(1)
        await eventually(
            lambda: (
                metric(app, "notification_delivery_failed_total", provider_type="generic", reason="http_500")
                == 1
            ),
            "the failed delivery",
        )

        samples = await scrape(app)
        queries = shipped_queries()
        used = {name for exprs in queries.values() for expr in exprs for name in metric_names(expr)}
        used -= {"namespace"}  # label_values(..., namespace)
        assert len(queries["dashboard"]) >= 40 and len(queries["rules"]) >= 5
        missing = sorted(used - set(samples) - KUBE_ONLY)
        assert missing == [], f"queried but not exported (or no series yet): {missing}"
        assert used >= KUBE_ONLY  # and tests/e2e/test_ops_metrics_e2e.py checks them in Kubernetes mode
        for name in ("notification_delivery_failed_total", "notification_delivered_total"):
            assert any(name in expr for expr in queries["rules"]), name

        # controller-runtime and client-go semantics, labels as in every Flux controller

        assert sample(app, "controller_runtime_reconcile_total", controller="provider", result="error") >= 1
        assert sample(app, "controller_runtime_reconcile_total", controller="provider", result="requeue") >= 1
        assert (
            sample(app, "controller_runtime_reconcile_total", controller="receiver", result="requeue_after")
            >= 1
        )
        assert sample(app, "controller_runtime_reconcile_total", controller="alert", result="success") >= 1
        assert sample(app, "controller_runtime_reconcile_errors_total", controller="provider") >= 1
        assert sample(app, "controller_runtime_reconcile_time_seconds_count", controller="alert") >= 3
        assert sample(app, "controller_runtime_max_concurrent_reconciles", controller="receiver") == 4
        assert sample(app, "controller_runtime_active_workers", controller="receiver") == 0
        queue = {"name": "provider", "controller": "provider"}
        assert sample(app, "workqueue_adds_total", **queue) >= 4
        assert sample(app, "workqueue_retries_total", **queue) >= 1
        assert sample(app, "workqueue_queue_duration_seconds_count", **queue) >= 4
        assert sample(app, "workqueue_work_duration_seconds_count", **queue) >= 4
        assert sample(app, "workqueue_longest_running_processor_seconds", **queue) == 0
        depth = [dict(re.findall(r'(\w+)="([^"]*)"', labels)) for labels, _ in samples["workqueue_depth"]]
        assert sorted(depth, key=str) == [
            {"controller": k, "name": k, "priority": ""} for k in ("alert", "provider", "receiver")
        ]
        assert sample(app, "process_resident_memory_bytes") > 0
        assert sample(app, "process_start_time_seconds") > 0


async def test_event_server_response_size_is_the_body_sent(tmp_path: Path) -> None:
    """``gotk_event_http_response_size_bytes`` was observed before aiohttp wrote the body: always 0."""
    write(tmp_path, "empty.yaml", "")
    async with running_app(tmp_path) as app:
        resp = await post_event(app, b'{"involvedObject": 1}')
        assert resp.status == 400
        body = await resp.read()
        assert body
        labels = {"service": "", "handler": "/", "method": "POST", "code": "400"}
        assert metric(app, "gotk_event_http_response_size_bytes_count", **labels) == 1
        assert metric(app, "gotk_event_http_response_size_bytes_sum", **labels) == len(body)
        accepted = await post_event(app, EVENT)
        assert accepted.status == 202 and await accepted.read() == b""
        labels["code"] = "202"
        assert metric(app, "gotk_event_http_response_size_bytes_sum", **labels) == 0


# --------------------------------------------------------------------------------------------------
# client-go's workqueue accounting
# --------------------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_workqueue_metrics_follow_client_go() -> None:
    """Adds of a waiting key are not counted again, an add during processing is; depth counts waiting
    keys; every ``add_after`` is a retry; the in-progress gauges see a running worker."""
    registry = CollectorRegistry()
    now = [100.0]
    family = WorkQueueMetrics(registry, clock=lambda: now[0])
    queue: WorkQueue[str] = WorkQueue("q", metrics=family.for_queue("q"))
    labels = {"name": "q", "controller": "q"}

    def sample(name: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert sample("workqueue_adds_total") == 2
    assert registry.get_sample_value("workqueue_depth", {**labels, "priority": ""}) == 2
    now[0] += 3
    assert await queue.get() == "a"
    assert registry.get_sample_value("workqueue_queue_duration_seconds_sum", labels) == 3
    queue.add("a")  # changed while processing: processed once more after ``done``
    assert sample("workqueue_adds_total") == 3
    now[0] += 2
    assert sample("workqueue_longest_running_processor_seconds") == 2
    assert sample("workqueue_unfinished_work_seconds") == 2
    queue.done("a")
    assert registry.get_sample_value("workqueue_work_duration_seconds_sum", labels) == 2
    assert sample("workqueue_longest_running_processor_seconds") == 0
    assert registry.get_sample_value("workqueue_depth", {**labels, "priority": ""}) == 2  # b, and a again
    queue.add_rate_limited("c")
    queue.add_after("d", 0)
    assert sample("workqueue_retries_total") == 2
    await queue.shutdown(1)
    assert registry.get_sample_value("workqueue_depth", {**labels, "priority": ""}) == 0
