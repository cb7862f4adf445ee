"""Templates through a real controller process in local mode (issue 15): an Alert's title/message template
reaches a Slack-compatible webhook, a Provider's bodyTemplate is the whole generic-hmac body (signed), and a
template that fails to render still delivers the default message, counted; a plain generic Provider forwards
Flux's event with the template's text as its message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from notification_controller.lib.signing import hmac_signature
from tests.support.capture import CaptureServer
from tests.support.controllers import ControllerProcess, post_event

MANIFESTS = """\
apiVersion: v1
kind: Secret
metadata: {name: hmac, namespace: flux-system}
stringData: {token: template-hmac-key}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: chat, namespace: flux-system}
spec: {type: slack, address: "URL/chat"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: hook, namespace: flux-system}
spec:
  type: generic-hmac
  address: "URL/hook"
  secretRef: {name: hmac}
  bodyTemplate: |
    {"text": {{ (event.involvedObject.name ~ ': ' ~ event.message) | to_json }},
     "revision": {{ event.metadata.revision | default('none') | shortsha | to_json }},
     "alert": {{ alert.metadata.name | to_json }}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: chat, namespace: flux-system}
spec:
  providerRef: {name: chat}
  eventSources: [{kind: Kustomization, name: "*"}]
  template:
    title: "{{ event.severity | upper }}: {{ event.involvedObject.name }} in {{ event.involvedObject.namespace }}"
    message: "{{ event.message }} ({{ event.metadata.revision | shortsha }})"
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: hook, namespace: flux-system}
spec:
  providerRef: {name: hook}
  eventSources: [{kind: GitRepository, name: "*"}]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: plain, namespace: flux-system}
spec: {type: generic, address: "URL/plain"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: plain, namespace: flux-system}
spec:
  providerRef: {name: plain}
  eventSources: [{kind: GitRepository, name: "*"}]
  template:
    message: "{{ event.involvedObject.name }} failed: {{ event.message }}"
"""


GROUPS = {"Kustomization": "kustomize.toolkit.fluxcd.io", "GitRepository": "source.toolkit.fluxcd.io"}


def event(kind: str, name: str, message: str, **metadata: str) -> dict[str, Any]:
    """A Flux event: metadata keys carry the object's API group (Flux keeps only those)."""
    group = GROUPS[kind]
    return {
        "involvedObject": {
            "kind": kind,
            "namespace": "flux-system",
            "name": name,
            "apiVersion": f"{group}/v1",
        },
        "severity": "error",
        "timestamp": "2026-11-22T10:00:00Z",
        "message": message,
        "reason": "HealthCheckFailed",
        "metadata": {f"{group}/{k}": v for k, v in metadata.items()},
        "reportingController": "kustomize-controller",
    }


async def test_templates_shape_messages_and_bodies(tmp_path: Path) -> None:
    async with CaptureServer() as srv:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(MANIFESTS.replace("URL", srv.url), encoding="utf-8")
        proc = ControllerProcess(tmp_path / "m", log_path=tmp_path / "log")
        await proc.start()
        revision = "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41"
        async with aiohttp.ClientSession() as session:
            for body in (
                event("Kustomization", "apps", "health check failed", revision=revision),
                event("GitRepository", "repo", "auth failed", revision=revision),
                event("Kustomization", "bare", "no revision here"),  # the message template fails: no revision
            ):
                assert await post_event(session, proc.events_url, body) == 202
        requests = await srv.wait_for(4, timeout=10)
        by_path: dict[str, list[Any]] = {}
        for r in requests:
            by_path.setdefault(r.path, []).append(r)
        chat = {
            r.json()["attachments"][0]["author_name"]: r.json()["attachments"][0] for r in by_path["/chat"]
        }
        assert chat["ERROR: apps in flux-system"]["text"] == "health check failed (main@0c9c2e4)"
        # the failed render: the default message went out, counted and evented
        assert chat["ERROR: bare in flux-system"]["text"] == "no revision here"  # the title rendered
        assert await proc.metric("notification_template_errors_total", template="message") == 1
        [hook] = by_path["/hook"]
        assert json.loads(hook.body) == {
            "text": "repo: auth failed",
            "revision": "main@0c9c2e4",
            "alert": "hook",
        }
        assert hook.headers["X-Signature"] == hmac_signature(b"template-hmac-key", hook.body)
        # generic without a bodyTemplate: Flux's event, the Alert template's text as its message
        [plain] = by_path["/plain"]
        sent = json.loads(plain.body)
        assert sent["message"] == "repo failed: auth failed"
        assert sent["involvedObject"]["name"] == "repo" and sent["reason"] == "HealthCheckFailed"
        assert await proc.stop() == 0
