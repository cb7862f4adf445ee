"""Prometheus metrics of hook calls, on the registry the app owns (never the global default).

One sample per *call* (all retries of a pre-dispatch call count once). Labels are the phase, the hook's
``name`` (a DNS label the user chose: bounded by the number of hooks declared) and the outcome; URLs
never appear in labels.
"""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry

from ..lib.promdefs import counter, histogram

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Outcome(StrEnum):
    OK = "ok"  # 2xx, no change
    CHANGED = "changed"  # 2xx that changed the event or the object's conditions
    DROPPED = "dropped"  # 2xx {"drop": true} (pre-dispatch)
    ERROR = "error"  # error answer, connection error, invalid response
    TIMEOUT = "timeout"  # the hook's time budget ran out
    CONTINUED = "continued"  # error answer with "continue": true: went on unchanged
    IGNORED = "ignored"  # failed call of a hook with failurePolicy: Ignore: went on unchanged


class HookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = counter(
            registry,
            "notification_hook_calls_total",
            "Hook calls by phase, hook name and outcome (ok, changed, dropped, error, timeout, continued, ignored).",
            ["phase", "hook", "outcome"],
        )
        self.duration = histogram(
            registry,
            "notification_hook_duration_seconds",
            "Duration of a hook call, retries included.",
            ["phase", "hook"],
            buckets=BUCKETS,
        )

    def observe(self, phase: str, hook: str, outcome: Outcome, seconds: float) -> None:
        self.calls.labels(phase=phase, hook=hook, outcome=outcome.value).inc()
        self.duration.labels(phase=phase, hook=hook).observe(seconds)
