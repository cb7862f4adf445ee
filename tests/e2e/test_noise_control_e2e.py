"""Noise control on a real kube-apiserver (issue 14): the CRD accepts the fields and refuses bad values, the
Alert's status says what takes effect (or why it cannot), and the state survives a controller restart
with ``--store=sqlite:``.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    Controller,
    ThreadedSink,
    apply,
    condition,
    flux_event,
    get,
    post_event,
    wait_for,
)

pytestmark = pytest.mark.e2e

FULL_SPEC: dict[str, Any] = {
    "filter": "event.reason in ['HealthCheckFailed', 'ReconciliationSucceeded']",
    "repeatInterval": "1h",
    "threshold": {"count": 2, "within": "10m"},
    "notifyOn": "StateChange",
    "groupBy": ["reason", "metadata.revision"],
    "groupWait": "30s",
    "groupInterval": "5m",
    "threadBy": "object",
}


def alert(name: str, namespace: str, **spec: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
                **spec,
            },
        }
    )


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("notifyOn", "Sometimes", "spec.notifyOn"),
        ("threadBy", "channel", "spec.threadBy"),
        ("groupBy", ["involvedObject.uid"], "spec.groupBy"),
        ("repeatInterval", "1 hour", "spec.repeatInterval"),
        ("threshold", {"count": 0, "within": "1m"}, "spec.threshold.count"),
        ("threshold", {"count": 2}, "within"),
    ],
)
def test_the_crd_refuses_bad_noise_values(
    installed: KubeTestServer, namespace: str, field: str, value: Any, complaint: str
) -> None:
    refused = installed.kubectl("create", "-f", "-", input=alert("bad", namespace, **{field: value}))
    assert refused.returncode != 0 and complaint in refused.stderr, refused.stderr


def test_the_crd_stores_every_noise_field(installed: KubeTestServer, namespace: str) -> None:
    created = installed.kubectl("create", "-f", "-", input=alert("full", namespace, **FULL_SPEC))
    assert created.returncode == 0, created.stderr
    stored = get(installed, "alert", namespace, "full")
    assert stored is not None
    assert {k: stored["spec"][k] for k in FULL_SPEC} == FULL_SPEC


def test_status_and_state_across_a_restart(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    sink = ThreadedSink()
    store = f"--store=sqlite:{tmp_path / 'state.db'}"
    controller = Controller(installed, sa_kubeconfig, store, name="noise-1")
    try:
        controller.wait_ready()
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: "{sink.url}/noise"}}
                """
            ),
        )
        apply(installed, alert("flaky", namespace, notifyOn="StateChange", repeatInterval="1h"))
        apply(
            installed,
            alert(
                "broken", namespace, filter="event.reason ==", eventSources=[{"kind": "Bucket", "name": "*"}]
            ),
        )
        controller.wait_for(
            lambda: (
                condition(get(installed, "alert", namespace, "flaky"), "NoiseControl")
                == ("True", "Active", "state changes only; repeat at most every 1h")
            ),
            what="NoiseControl condition",
        )
        controller.wait_for(
            lambda: (
                (condition(get(installed, "alert", namespace, "broken"), "Ready") or ("",) * 3)[:2]
                == ("False", "InvalidCELExpression")
            ),
            what="Ready=False InvalidCELExpression",
        )
        controller.wait_for(
            lambda: (condition(get(installed, "alert", namespace, "flaky"), "Ready") or ("",))[0] == "True",
            what="the Alert Ready",
        )

        def failing(message: str) -> dict[str, Any]:
            return {
                **flux_event(namespace, "app", message),
                "severity": "error",
                "reason": "HealthCheckFailed",
            }

        assert post_event(controller, failing("health check failed after 2.1s")) == 202
        wait_for(lambda: len(sink.messages()) == 1, what="the first error")
        controller.kill()

        controller = Controller(installed, sa_kubeconfig, store, name="noise-2")
        controller.wait_ready()
        assert post_event(controller, failing("health check failed after 3.3s")) == 202
        assert post_event(controller, flux_event(namespace, "app", "applied revision 2")) == 202
        wait_for(lambda: len(sink.messages()) >= 2, what="the recovery")
        time.sleep(1)  # anything else would have arrived by now
        messages = sink.messages()
        assert messages == ["health check failed after 2.1s", "applied revision 2"], messages
        recovery = sink.requests()[-1].json()
        assert recovery["metadata"]["recoveredFrom"].startswith(
            "HealthCheckFailed: health check failed after 2.1s"
        )
    finally:
        code = controller.stop()
        sink.close()
    assert code == 0, controller.log()[-3000:]
