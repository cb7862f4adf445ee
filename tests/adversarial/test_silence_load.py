"""Silences as a denial of service (issue 26), against the real controller in local mode.

The attack: a tenant writes 1,000 active Silences in one namespace, each with 32 regular expressions that
all match an attacker's event but the last, and an unauthenticated client sends events whose 31 metadata
values are long runs the expressions must scan to the end. Evaluating every Silence would be 32,000 RE2 runs
over 16 KB per event, and compiling them all 32,000 programs (80 MB measured). The bounds
(``dispatch/quiet/silences.py``): the 32 Silences that end last are evaluated (the rest counted and warned
about), fields are cut at 4 KB (``core/quiet.py``), matchers are compiled on first evaluation and kept for the
256 Silences used last.

Measured here: each event's 202 (the pre-queue stages run before it in memory mode) and the process's
resident memory across the burst; every event is still delivered (no Silence matches it).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from notification_controller.dispatch.quiet.silences import MAX_COMPILED, MAX_EVALUATED
from tests.adversarial.kit import eventually
from tests.integration.appkit import metric, post_event, running_app
from tests.support.capture import CaptureServer

SILENCES = 1000
MATCHERS = 32
EVENTS = 20
VALUE = 16 * 1024  # per metadata value: cut to 4 KB before matching


def manifests(directory: Path, sink: str) -> None:
    now = datetime.now(UTC)
    items: list[dict[str, Any]] = [
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": {"name": "sink", "namespace": "flux-system"},
            "spec": {"type": "generic", "address": sink},
        },
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "all", "namespace": "flux-system"},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        },
    ]
    for i in range(SILENCES):
        matchers = [
            {"name": f"metadata.k{j}", "value": f"[a-z]*(?:{i}x{j})?", "matchType": "=~"}  # distinct programs
            for j in range(MATCHERS - 1)
        ]
        matchers.append({"name": "name", "value": f"never-{i}-.*", "matchType": "=~"})
        items.append(
            {
                "apiVersion": "notification-controller.io/v1alpha1",
                "kind": "Silence",
                "metadata": {"name": f"s{i:04}", "namespace": "flux-system"},
                "spec": {
                    "matchers": matchers,
                    "startsAt": (now - timedelta(minutes=5)).isoformat(),
                    "endsAt": (now + timedelta(hours=1, minutes=i)).isoformat(),
                },
            }
        )
    directory.mkdir()
    (directory / "objects.yaml").write_text("\n---\n".join(json.dumps(item) for item in items))


def hostile(i: int) -> bytes:
    return json.dumps(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": f"victim-{i}"},
            "severity": "error",
            "message": f"attack {i}",
            "reason": "HealthCheckFailed",
            "metadata": {f"kustomize.toolkit.fluxcd.io/k{j}": "a" * VALUE for j in range(MATCHERS - 1)},
            "reportingController": "kustomize-controller",
        }
    ).encode()


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


async def test_a_thousand_silences_of_32_expressions_cost_bounded_time_and_memory(tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        manifests(tmp_path / "m", sink.url + "/hook")
        async with running_app(tmp_path / "m") as app:
            assert len(app.store.silences_in("flux-system")) == SILENCES
            before = rss_mb()
            latencies = []
            for i in range(EVENTS):
                start = time.perf_counter()
                resp = await post_event(app, hostile(i))
                latencies.append(time.perf_counter() - start)
                assert resp.status == 202
            await eventually(lambda: len(sink.requests) == EVENTS, timeout=60, what="every event delivered")
            grown = rss_mb() - before
            print(f"202 in {min(latencies) * 1000:.1f}-{max(latencies) * 1000:.1f} ms; RSS +{grown:.1f} MB")
            # 32 Silences × 32 matchers × 4 KB per event: ~13 ms measured; 1,000 × 32 would be ~400 ms
            assert max(latencies) < 1.0, latencies
            assert sorted(latencies)[EVENTS // 2] < 0.25, latencies
            assert grown < 60, grown  # 1,024 programs compiled (~2.5 MB), not 32,000 (80 MB)
            index = app.quiet.silences.index
            assert len(index._predicates) <= MAX_COMPILED
            assert metric(
                app, "notification_noise_untracked_total", stage="silence", reason="silence_limit"
            ) == (EVENTS)
            assert metric(app, "notification_suppressed_total", reason="silenced") == 0
            assert MAX_EVALUATED == 32
