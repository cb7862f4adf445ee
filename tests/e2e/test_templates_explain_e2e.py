"""Templates and ``explain`` against a real kube-apiserver (issue 15): the CRDs store the template fields, an
invalid template is ``Ready=False InvalidTemplate`` with its line, a valid one shapes what is delivered, and
``explain --kubeconfig`` reads the cluster's Alerts, Providers and Secrets and says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    ROOT,
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


def test_templates_status_delivery_and_explain(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    sink = ThreadedSink()
    controller = Controller(installed, sa_kubeconfig, name="templates")
    try:
        controller.wait_ready()
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: v1
                kind: Secret
                metadata: {{name: hmac, namespace: {namespace}}}
                stringData: {{token: e2e-template-hmac-key}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec:
                  type: generic-hmac
                  address: "{sink.url}/templated"
                  secretRef: {{name: hmac}}
                  bodyTemplate: '{{"text": {{{{ (event.involvedObject.name ~ ": " ~ event.message) | to_json }}}}}}'
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: good, namespace: {namespace}}}
                spec:
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: Kustomization, name: "*"}}]
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: broken, namespace: {namespace}}}
                spec:
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: Kustomization, name: "*"}}]
                  template:
                    message: "line one\\n{{{{ event.message "
                """
            ),
        )
        stored = get(installed, "provider", namespace, "sink")
        assert stored is not None and "to_json" in stored["spec"]["bodyTemplate"]
        wait_for(
            lambda: (
                (condition(get(installed, "alert", namespace, "broken"), "Ready") or ("",) * 3)[:2]
                == ("False", "InvalidTemplate")
            ),
            what="Ready=False InvalidTemplate",
        )
        ready = condition(get(installed, "alert", namespace, "broken"), "Ready")
        assert ready is not None and "spec.template.message: line 2: unexpected end of template" in ready[2]
        wait_for(
            lambda: (condition(get(installed, "alert", namespace, "good"), "Ready") or ("",))[0] == "True"
        )

        assert post_event(controller, flux_event(namespace, "web", "deployed")) == 202
        # both Alerts deliver: a template that cannot compile never loses a notification (default message)
        wait_for(lambda: len(sink.requests()) == 2, what="the templated deliveries")
        assert [r.json() for r in sink.requests()] == [{"text": "web: deployed"}] * 2

        event_file = Path(installed.workdir) / "explain-event.json"
        event_file.write_text(json.dumps(flux_event(namespace, "web", "deployed again")), encoding="utf-8")
        run = subprocess.run(
            [sys.executable, "-m", "notification_controller", "explain", "--event", str(event_file),
             "--kubeconfig", str(installed.kubeconfig), "-o", "json"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        verdicts = {
            v["alert"]: v for v in json.loads(run.stdout)["alerts"] if v["alert"].startswith(namespace)
        }
        assert verdicts[f"{namespace}/good"]["matched"] is True
        assert json.loads(verdicts[f"{namespace}/good"]["request"]["body"]) == {"text": "web: deployed again"}
        assert verdicts[f"{namespace}/good"]["request"]["headers"]["X-Signature"] == "***"
        # as the controller did above: the broken template costs its own message, never the notification
        broken = verdicts[f"{namespace}/broken"]
        assert broken["verdict"] == "would send" and "TemplateRenderFailed" in broken["line"], broken
        assert json.loads(broken["request"]["body"]) == {"text": "web: deployed again"}
        assert "e2e-template-hmac-key" not in run.stdout + run.stderr
        assert len(sink.requests()) == 2  # explain sent nothing
    finally:
        code = controller.stop()
        sink.close()
    assert code == 0, controller.log()[-3000:]
