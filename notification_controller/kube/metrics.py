"""``rest_client_requests_total{code,host,method}``: client-go's count of Kubernetes API requests.

Flux's dashboards chart it ("Kubernetes API Requests", errors = ``code!~"2.."``). ``KubeClient`` reports one
call per HTTP attempt (``on_request``); the series live on the app's registry, next to the controller-runtime
ones. ``host`` is the API server's ``host:port``, ``code`` the status or ``<error>`` (no answer), as in client-go.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ..lib.promdefs import counter


class RestClientMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = counter(
            registry,
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
        )

    def observe(self, code: str, method: str, host: str) -> None:
        self.requests.labels(code, method, host).inc()
