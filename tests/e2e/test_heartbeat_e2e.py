"""Alert ``spec.heartbeat`` on a real kube-apiserver: the CRD stores it and refuses a bad interval, the
reconciler reports one under the minimum, and with two replicas under leader election on the memory store
only the leader beats (the replicas share no state: two beaters would halve the gaps).
"""

from __future__ import annotations

import itertools
import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import Controller, ThreadedSink, apply, get, ready, wait_for

pytestmark = pytest.mark.e2e
ENV = "NOTIFICATION_CONTROLLER_HEARTBEAT_MIN_INTERVAL"
ELECTION = (
    "--enable-leader-election",
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=500ms",
)


def alert(name: str, namespace: str, heartbeat: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
                "heartbeat": heartbeat,
            },
        }
    )


def test_the_crd_stores_the_heartbeat_and_refuses_a_bad_interval(
    installed: KubeTestServer, namespace: str
) -> None:
    created = installed.kubectl(
        "create", "-f", "-", input=alert("ok", namespace, {"interval": "1h", "message": "up"})
    )
    assert created.returncode == 0, created.stderr
    stored = get(installed, "alert", namespace, "ok")
    assert stored is not None and stored["spec"]["heartbeat"] == {"interval": "1h", "message": "up"}
    refused = installed.kubectl("create", "-f", "-", input=alert("bad", namespace, {"interval": "hourly"}))
    assert refused.returncode != 0 and "spec.heartbeat.interval" in refused.stderr, refused.stderr
    missing = installed.kubectl("create", "-f", "-", input=alert("none", namespace, {"message": "up"}))
    assert missing.returncode != 0 and "interval" in missing.stderr, missing.stderr


def test_only_the_leader_beats_and_a_short_interval_is_not_ready(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "1s")  # the Controller subprocesses inherit it (docs/monitoring.md)
    sink = ThreadedSink()
    replicas = [Controller(installed, sa_kubeconfig, *ELECTION, name=f"beat-{i}") for i in range(2)]
    try:
        for replica in replicas:
            replica.wait_ready()
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: "{sink.url}/beat"}}
                """
            ),
        )
        apply(installed, alert("beat", namespace, {"interval": "2s"}))
        apply(installed, alert("fast", namespace, {"interval": "500ms"}))
        wait_for(
            lambda: (
                (ready(get(installed, "alert", namespace, "fast")) or ("",) * 3)[:2]
                == ("False", "ValidationFailed")
            ),
            what="Ready=False for a 500ms heartbeat",
        )
        message = (ready(get(installed, "alert", namespace, "fast")) or ("",) * 3)[2]
        assert "spec.heartbeat.interval '500ms' is shorter than the minimum of 1s" in message, message
        arrived: list[float] = []
        deadline = time.monotonic() + 60
        while len(arrived) < 4:
            assert time.monotonic() < deadline, f"{len(arrived)} beats: {[r.log()[-1500:] for r in replicas]}"
            arrived.extend([time.monotonic()] * (len(sink.requests()) - len(arrived)))
            time.sleep(0.01)
        gaps = [b - a for a, b in itertools.pairwise(arrived)]
        assert all(gap >= 1.8 for gap in gaps), gaps  # one beater: the leader
        beats = [r.json() for r in sink.requests()]
        assert {b["involvedObject"]["name"] for b in beats} == {"beat"}  # the invalid Alert never beats
        assert all(b["reason"] == "Heartbeat" for b in beats)
    finally:
        for replica in replicas:
            if replica.proc.poll() is None:
                assert replica.stop() == 0, replica.log()[-2000:]
        sink.close()
