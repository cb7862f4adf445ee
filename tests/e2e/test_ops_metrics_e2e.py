"""Kubernetes-mode metrics against the real kube-apiserver (issue 16, "Operations parity").

``rest_client_requests_total{code,host,method}`` is what client-go counts in every Flux controller and what
Flux's dashboards chart as "Kubernetes API Requests"; it only exists with an API server, so the local-mode
check of ``config/monitoring`` (tests/integration/test_ops_metrics.py) leaves it to this test. The controller
runs in-process with the ServiceAccount kubeconfig of ``config/rbac``.
"""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.test_hooks_e2e import controller, kubectl
from tests.integration.test_ops_metrics import KUBE_ONLY, metric_names, scrape, shipped_queries

pytestmark = pytest.mark.e2e


async def test_kubernetes_api_requests_are_counted_as_client_go_does(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    host = urlsplit(installed.url).netloc
    async with controller(sa_kubeconfig, namespace) as app:
        await kubectl(
            installed,
            "apply",
            "--validate=false",
            "-f",
            "-",
            stdin=textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: 'http://127.0.0.1:9/hook'}}
                """
            ),
        )

        def requests(code: str, method: str) -> float:
            labels = {"code": code, "method": method, "host": host}
            return app.registry.get_sample_value("rest_client_requests_total", labels) or 0.0

        async with asyncio.timeout(30):
            while requests("200", "PATCH") == 0:  # finalizer and status writes of the Provider
                await asyncio.sleep(0.2)
        assert requests("200", "GET") > 0  # lists and watches

        samples = await scrape(app)
        used = {name for exprs in shipped_queries().values() for expr in exprs for name in metric_names(expr)}
        kube_only = sorted(KUBE_ONLY & used)
        assert kube_only == ["rest_client_requests_total"]
        for name in kube_only:
            labels = [dict(re.findall(r'(\w+)="([^"]*)"', text)) for text, _ in samples.get(name, [])]
            assert labels and all(set(label) == {"code", "method", "host"} for label in labels), name
