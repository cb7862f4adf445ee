"""``explain`` and ``send`` (issue 15), run as users run them: ``python -m notification_controller ...`` in a
subprocess, on a directory of manifests, against a real local capture server when something is sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.support.capture import CaptureServer, Reply
from tests.support.controllers import ROOT

SLACK_TOKEN = "xoxb-explain-canary-0123456789"

MANIFESTS = """\
apiVersion: v1
kind: Secret
metadata: {name: slack, namespace: apps}
stringData: {token: TOKEN}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: slack, namespace: apps}
spec: {type: slack, channel: deploys, address: "URL/services/T000/B000/XXXXXXXX", secretRef: {name: slack}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: paused, namespace: apps}
spec: {type: generic, address: "URL/paused", suspend: true}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: forge, namespace: apps}
spec: {type: github, address: "https://github.com/org/repo", secretRef: {name: slack}}
"""

ALERTS: dict[str, dict[str, Any]] = {
    "a-matched": {"template": {"title": "{{ event.reason }} on {{ event.involvedObject.name }}"}},
    "b-suspended": {"suspend": True},
    "c-kind": {"eventSources": [{"kind": "HelmRelease", "name": "*"}]},
    "d-namespace": {"eventSources": [{"kind": "Kustomization", "name": "*", "namespace": "other"}]},
    "e-name": {"eventSources": [{"kind": "Kustomization", "name": "db"}]},
    "f-severity": {"eventSeverity": "error"},
    "g-inclusion": {"inclusionList": ["^nothing"]},
    "h-exclusion": {"exclusionList": ["applied"]},
    "i-filter": {"filter": "event.reason == 'HealthCheckFailed'"},
    "j-no-provider": {"providerRef": {"name": "missing"}},
    "k-provider-suspended": {"providerRef": {"name": "paused"}},
    "l-commit-status": {"providerRef": {"name": "forge"}},
}

EVENT = {
    "involvedObject": {
        "kind": "Kustomization",
        "namespace": "apps",
        "name": "web",
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
    },
    "severity": "info",
    "message": "applied revision main@sha1:0c9c2e41",
    "reason": "ReconciliationSucceeded",
    "reportingController": "kustomize-controller",
}


def write(tmp: Path, url: str) -> Path:
    docs = [MANIFESTS.replace("URL", url).replace("TOKEN", SLACK_TOKEN)]
    for name, spec in ALERTS.items():
        full = {
            "providerRef": {"name": "slack"},
            "eventSources": [{"kind": "Kustomization", "name": "*"}],
            **spec,
        }
        alert = {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": full,
        }
        docs.append(json.dumps(alert))
    (tmp / "m").mkdir(exist_ok=True)
    (tmp / "m" / "objects.yaml").write_text("\n---\n".join(docs), encoding="utf-8")
    (tmp / "event.json").write_text(json.dumps(EVENT), encoding="utf-8")
    return tmp / "m"


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "notification_controller",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_explain_says_why_for_every_alert_and_sends_nothing(tmp_path: Path) -> None:
    async with CaptureServer() as srv:
        manifests = write(tmp_path, srv.url)
        code, out, err = await cli(
            "explain", "--event", str(tmp_path / "event.json"), "--manifests", str(manifests), "-o", "json"
        )
        assert code == 0, err
        verdicts = {v["alert"].split("/")[1]: v for v in json.loads(out)["alerts"]}
        reasons = {
            name: (v["stage"], v["reason"].split(":")[0])
            for name, v in verdicts.items()
            if v["verdict"] != "would send"
        }
        assert reasons == {  # the stage that dropped it (the matcher's, Flux's rules, noise control)
            "b-suspended": ("matcher", "suspended"),
            "c-kind": ("matcher", "kind"),
            "d-namespace": ("matcher", "namespace"),
            "e-name": ("matcher", "name"),
            "f-severity": ("matcher", "severity"),
            "g-inclusion": ("matcher", "inclusionList"),
            "h-exclusion": ("matcher", "exclusionList"),
            "i-filter": ("noise-filter", "Kustomization/apps/web"),
            "j-no-provider": ("rules", "failed to read provider"),
            "k-provider-suspended": ("provider-suspended", "the Provider's spec.suspend is true"),
            "l-commit-status": ("commit-status-metadata", "event dropped for commit status providers due to missing commit metadata key"),
        }  # fmt: skip
        matched = verdicts["a-matched"]
        request = matched["request"]
        assert (
            request["method"] == "POST" and "/services/" not in request["url"]
        )  # the webhook path is a secret
        body = json.loads(request["body"])
        assert body["attachments"][0]["author_name"] == "ReconciliationSucceeded on web"  # after the template
        assert srv.requests == []  # nothing sent without --send
        assert SLACK_TOKEN not in out and SLACK_TOKEN not in err

        # the text form, and --send
        code, out, _ = await cli(
            "explain", "--event", str(tmp_path / "event.json"), "--manifests", str(manifests), "--send"
        )
        assert code == 0
        assert "apps/a-matched" in out and "would send -> Provider apps/slack (slack)" in out
        assert "would not send: matcher: severity: the Alert wants error events, this one is info" in out
        assert "sent: delivered" in out
        [sent] = await srv.wait_for(1)
        assert sent.json()["attachments"][0]["author_name"] == "ReconciliationSucceeded on web"
        assert sent.headers["Authorization"] == f"Bearer {SLACK_TOKEN}"
        assert SLACK_TOKEN not in out


async def test_explain_exit_codes(tmp_path: Path) -> None:
    manifests = write(tmp_path, "http://127.0.0.1:9")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**EVENT, "involvedObject": {**EVENT["involvedObject"], "kind": "Bucket"}}))  # type: ignore[dict-item]
    assert (await cli("explain", "--event", str(other), "--manifests", str(manifests)))[0] == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = await cli("explain", "--event", str(bad), "--manifests", str(manifests))
    assert code == 2 and "the event is not Flux's event JSON" in err and "Traceback" not in err
    assert (await cli("explain", "--event", str(bad)))[0] == 2  # neither --manifests nor --kubeconfig


async def test_send_reports_the_outcome_with_the_error_masked(tmp_path: Path) -> None:
    async with CaptureServer() as srv:
        manifests = write(tmp_path, srv.url)
        code, out, _ = await cli("send", "--provider", "apps/slack", "--manifests", str(manifests))
        assert code == 0 and out.strip() == "apps/slack (slack): delivered"
        [request] = await srv.wait_for(1)
        assert "test notification" in request.json()["attachments"][0]["text"]
        srv.script(Reply(401, {"error": f"invalid token {SLACK_TOKEN}"}))
        code, out, _ = await cli(
            "send", "--provider", "apps/slack", "--manifests", str(manifests), "-o", "json"
        )
        result = json.loads(out)
        assert code == 1 and result["delivered"] is False and "401" in result["error"]
        assert SLACK_TOKEN not in out
        code, _, err = await cli("send", "--provider", "apps/nope", "--manifests", str(manifests))
        assert code == 2 and "Provider 'nope' not found in namespace 'apps'" in err
        code, out, _ = await cli("send", "--provider", "slack", "-n", "apps", "--manifests", str(manifests))
        assert code == 0 and out == "apps/slack (slack): delivered\n"  # a bare name, looked up in -n
