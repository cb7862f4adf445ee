"""Operations parity (issue 16): the metrics Flux's monitoring queries, and ``config/monitoring`` against them.

* Every metric name the shipped Grafana dashboard and PrometheusRule query must be in a real ``/metrics``
  scrape of the running controller (local mode ``App``, after reconciles, deliveries that succeed, fail and
  are dropped, a hook call, a rejected event and a receiver request, so that the series exist).
  ``rest_client_requests_total`` only exists in Kubernetes mode: tests/e2e/test_ops_metrics_e2e.py checks it.
* controller-runtime's ``controller_runtime_*`` and client-go's ``workqueue_*`` carry the same labels and
  result values as in a Flux controller; ``process_*`` is there.
* ``gotk_event_http_response_size_bytes`` observes the size of the body sent (it was always 0).
* Issue 25 item 5: the durable-delivery alerts and panels (dead letters, outbox age, circuit breaker, store
  errors), template errors, sandbox failures and untracked noise state query a controller running on SQLite
  with a Provider that refuses for good (a dead letter) and one that is down (an open circuit breaker, a waiting notification): every name they read is exported
  (a series, or — for failures this run cannot cause — the family's ``# TYPE`` line), and every label they
  group or match by is a label of one of the metrics they read (or a label Prometheus adds to the target).
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
from notification_controller.settings import StoreSettings
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


def recorded_names() -> set[str]:
    """The series the PrometheusRule's recording rules make (alerts read them; the controller does not
    export them: tests/unit/test_prometheus_rules.py checks what they read)."""
    rules = yaml.safe_load(RULES.read_text())
    return {
        rule["record"] for group in rules["spec"]["groups"] for rule in group["rules"] if "record" in rule
    }


def shipped_queries() -> dict[str, list[str]]:
    """{"dashboard": [every PromQL of the dashboard], "rules": [every alert expression]}."""
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(RULES.read_text())
    alerts = [rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]]
    return {"dashboard": [e for e in _exprs(dashboard) if e.strip()], "rules": alerts}


async def scrape_text(app: App) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{app.ports['metrics']}/metrics") as resp,
    ):
        assert resp.status == 200
        return await resp.text()


def declared_families(text: str) -> set[str]:
    """Names of the ``# TYPE`` lines of a scrape, with each histogram's sample names."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


# Labels Prometheus adds to every scraped series (PodMonitor target labels), and the metric's own
# ``namespace`` renamed when it collides with the target's (docs/metrics.md).
TARGET_LABELS = frozenset({"namespace", "pod", "job", "instance", "container", "service", "endpoint"})


def used_labels(expr: str) -> set[str]:
    """Labels a PromQL expression groups by or matches on."""
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', matchers)
        labels |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", text))
    return labels


def metric_labels(app: App, name: str) -> set[str]:
    """Label names of the metric a sample name belongs to (``le`` for histogram buckets)."""
    collector = app.registry._names_to_collectors.get(name)  # no public API for a family's label names
    assert collector is not None, name
    names = set(getattr(collector, "_labelnames", ()))
    return names | ({"le"} if name.endswith("_bucket") else set())


async def scrape(app: App) -> dict[str, list[tuple[str, float]]]:
    """``GET /metrics`` → {sample name: [(labels text, value)]}."""
    text = await scrape_text(app)
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
        used -= recorded_names()  # made by the recording rules from what is exported (checked with them)
        assert len(queries["dashboard"]) >= 40 and len(queries["rules"]) >= 5
        used -= {name for expr in durable_queries() for name in metric_names(expr)}  # the next test
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
            {"controller": k, "name": k, "priority": ""} for k in ("alert", "provider", "receiver", "silence")
        ]
        assert sample(app, "process_resident_memory_bytes") > 0
        assert sample(app, "process_start_time_seconds") > 0


# Families whose series only exist after a failure this run does not cause (a store that fails, a template
# that breaks at send time, a sandbox worker killed, an Alert at its noise cap): their declaration must be in
# the scrape. Each has its own test with the failure: tests/adversarial/test_sqlite_store.py,
# tests/integration/test_templates*.py, tests/adversarial/test_tenant_expressions.py,
# tests/adversarial/test_noise_state.py.
DECLARED_ONLY = frozenset(
    {
        "notification_store_errors_total",
        "notification_template_errors_total",
        "notification_sandbox_failures_total",
        "notification_noise_untracked_total",
        "notification_suppressed_total",
    }
)
# Series of a durable store (``--store=sqlite:…|nats://…``) only: queried against one by the next test.
DURABLE_WORDS = ("outbox", "dead_letters", "circuit_breaker", "delivery_attempts", "redeliveries", "store_")
DURABLE_ALERTS = (
    "NotificationDeadLetters",
    "NotificationOutboxStuck",
    "NotificationCircuitBreakerOpen",
    "NotificationStoreErrors",
    "NotificationTemplateErrors",
    "NotificationSandboxFailures",
    "NotificationNoiseStateUntracked",
)


def durable_queries() -> list[str]:
    """The alert and panel queries the durable-store test checks (those that read DURABLE_ONLY or
    DECLARED_ONLY families)."""
    rules = yaml.safe_load(RULES.read_text())
    by_name = {
        rule.get("alert"): rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]
    }
    words = (*DECLARED_ONLY, *DURABLE_WORDS)
    return [by_name[alert] for alert in DURABLE_ALERTS] + [
        e for e in shipped_queries()["dashboard"] if any(word in e for word in words)
    ]


async def test_durable_delivery_alerts_and_panels_query_what_a_durable_controller_exports(
    tmp_path: Path,
) -> None:
    rules = yaml.safe_load(RULES.read_text())
    by_name = {
        rule.get("alert"): rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]
    }
    assert "NotificationDeliveriesDead" not in by_name  # renamed: it meant "every delivery failed"
    assert "NotificationDeliveriesAllFailing" in by_name
    assert set(DURABLE_ALERTS) <= set(by_name)
    (tmp_path / "manifests").mkdir()
    objects = write(
        tmp_path / "manifests",
        "objects.yaml",
        """\
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {name: refusing, namespace: flux-system}
        spec: {type: generic, address: '{url}/refuse'}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {name: refusing, namespace: flux-system}
        spec:
          providerRef: {name: refusing}
          eventSources: [{kind: Kustomization, name: '*'}]
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {name: down, namespace: flux-system}
        spec: {type: generic, address: '{url}/down'}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {name: down, namespace: flux-system}
        spec:
          providerRef: {name: down}
          eventSources: [{kind: Kustomization, name: '*'}]
        """,
    )
    store = StoreSettings(
        url=f"sqlite:{tmp_path / 'state.db'}", breaker_threshold=1, breaker_cooldown=0.2, retry_base=0.1
    )
    async with CaptureServer() as sink:
        sink.on("POST", "/refuse", Reply(400, {"error": "bad request"}))  # permanent: a dead letter
        sink.on("POST", "/down", Reply(503, {"error": "maintenance"}))  # retried: waits, opens the breaker
        objects.write_text(objects.read_text().replace("{url}", sink.url))
        async with running_app(tmp_path / "manifests", store=store) as app:
            async with asyncio.timeout(20):  # 503 + Retry-After until the store and the objects are ready
                while (await post_event(app, EVENT)).status != 202:
                    await asyncio.sleep(0.1)
            dead = {"provider_type": "generic", "reason": "permanent"}
            await eventually(
                lambda: metric(app, "notification_dead_letters_total", **dead) == 1, "the dead letter", 20
            )
            down = {"provider": "flux-system/down"}
            await eventually(
                lambda: metric(app, "notification_circuit_breaker_open", **down) == 1, "the open breaker", 20
            )
            await eventually(
                lambda: metric(app, "notification_outbox_oldest_age_seconds", **down) > 0,
                "the outbox age",
                20,
            )
            await eventually(
                lambda: metric(app, "notification_redeliveries_total", provider_type="generic") > 0,
                "a redelivery (the breaker's probe)",
                20,
            )
            text = await scrape_text(app)
            samples = await scrape(app)
            exported = set(samples) | (declared_families(text) & DECLARED_ONLY)
            exprs = durable_queries()
            assert len(exprs) >= len(DURABLE_ALERTS) + 10
            for expr in exprs:
                names = metric_names(expr)
                missing = sorted(names - exported)
                assert missing == [], f"{expr}: queried but not exported: {missing}"
                known = set().union(*(metric_labels(app, n) for n in names)) | TARGET_LABELS
                unknown = sorted(used_labels(expr) - known)
                assert unknown == [], f"{expr}: no such label on {sorted(names)}: {unknown}"
            dead_letter = {"provider": "flux-system/refusing", "reason": "permanent"}
            assert metric(app, "notification_dead_letters_total", **dead_letter) == 1  # by Provider
            lanes = ("notification_outbox_oldest_age_seconds", "notification_outbox_depth")
            for name in (*lanes, "notification_circuit_breaker_open"):
                assert any('provider="flux-system/down"' in labels for labels, _ in samples[name]), name


def _three_of_a_type(url: str, names: tuple[str, ...]) -> str:
    docs = []
    for name in names:
        docs.append(
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: {name}, namespace: flux-system}}
            spec: {{type: slack, address: '{url}/{name}'}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: {name}, namespace: flux-system}}
            spec:
              providerRef: {{name: {name}}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            """
        )
    return "---\n".join(docs)


async def test_provider_label_tells_providers_apart_and_goes_with_the_provider(tmp_path: Path) -> None:
    """Issue 25 item 5: three Slack Providers, one failing: the delivery and failure metrics say which
    (``provider="namespace/name"`` beside ``provider_type``); deleting the Provider removes its series, so
    the label is bounded by the Providers that exist."""
    async with CaptureServer() as server:
        server.on("POST", "/team-b", Reply(500, {"error": "down"}))
        server.on("POST", "/team-", Reply(200, "ok"))
        manifests = tmp_path / "manifests"
        manifests.mkdir()
        write(manifests, "objects.yaml", _three_of_a_type(server.url, ("team-a", "team-b", "team-c")))
        async with running_app(manifests) as app:
            await eventually(lambda: app.store.alert("flux-system", "team-c") is not None, "the Alerts")
            assert (await post_event(app, EVENT)).status == 202
            failed = {"provider_type": "slack", "provider": "flux-system/team-b"}
            await eventually(
                lambda: metric(app, "notification_delivery_failed_total", **failed) == 1, "failure"
            )
            for name in ("team-a", "team-c"):

                def delivered(name: str = name) -> bool:
                    labels = {"provider_type": "slack", "provider": f"flux-system/{name}"}
                    return metric(app, "notification_delivered_total", **labels) == 1

                await eventually(delivered, name)
            assert metric(app, "notification_delivered_total", provider="flux-system/team-b") == 0
            assert metric(app, "notification_delivery_failed_total", provider="flux-system/team-a") == 0

            write(manifests, "objects.yaml", _three_of_a_type(server.url, ("team-a", "team-c")))
            await eventually(lambda: app.store.provider("flux-system", "team-b") is None, "the deletion")
            text = await scrape_text(app)
            assert 'provider="flux-system/team-b"' not in text  # gone with the Provider
            assert 'provider="flux-system/team-a"' in text


def test_used_labels_are_extracted_from_promql() -> None:
    expr = (
        'sum by (namespace, provider) (rate(x_total{pod=~"a-.*",reason!="b,c"}[5m])) '
        "/ on (namespace) group_left y"
    )
    assert used_labels(expr) == {"namespace", "provider", "pod", "reason"}


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
