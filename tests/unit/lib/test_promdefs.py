"""``lib.promdefs``: the HTTP server families are go-http-metrics' (names, labels, buckets), on the registry given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from notification_controller.lib.promdefs import DEFAULT_BUCKETS, SIZE_BUCKETS, http_server_metrics


def test_http_server_metrics_are_go_http_metrics_families() -> None:
    registry = CollectorRegistry()
    duration, size, inflight = http_server_metrics(registry, "gotk_event", "event server")
    assert size is not None
    duration.labels("", "/", "POST", "202").observe(0.2)
    size.labels("", "/", "POST", "202").observe(150)
    inflight.labels("", "/").inc()
    text = generate_latest(registry).decode()
    assert "# HELP gotk_event_http_request_duration_seconds Duration of event server HTTP requests." in text
    assert "# HELP gotk_event_http_requests_inflight Event server requests being served." in text
    assert (
        'gotk_event_http_request_duration_seconds_bucket{code="202",handler="/",le="0.25",method="POST",service=""} 1.0'
        in text
    )
    assert (
        'gotk_event_http_response_size_bytes_bucket{code="202",handler="/",le="1000.0",method="POST",service=""} 1.0'
        in text
    )
    assert 'gotk_event_http_requests_inflight{handler="/",service=""} 1.0' in text
    assert DEFAULT_BUCKETS == (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # client_golang
    assert SIZE_BUCKETS[0] == 100 and SIZE_BUCKETS[-1] == 1e9 and len(SIZE_BUCKETS) == 8


def test_without_response_size_there_is_no_size_family() -> None:
    registry = CollectorRegistry()
    _, size, _ = http_server_metrics(registry, "gotk_receiver", "receiver", response_size=False)
    assert size is None
    assert "gotk_receiver_http_response_size_bytes" not in generate_latest(registry).decode()
