"""Commit statuses through a full event (issue 5; reference §3.6 steps 4–9, §4.2).

The real App in local mode; a capture server plays the GitHub API (enterprise layout, ``/api/v3/``).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.appkit import metric, post_event, running_app, write
from tests.support.capture import CaptureServer, Reply

SHA = "0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41"
UID = "0c9c2e41-d2f9-4f9b-9c41-bebc1984d67a"


def manifests(tmp: Path, api: str, expr: str = "") -> Path:
    expr_line = f"  commitStatusExpr: {json.dumps(expr)}\n" if expr else ""
    write(
        tmp,
        "github.yaml",
        f"""\
apiVersion: v1
kind: Secret
metadata: {{name: gh, namespace: flux-system}}
stringData: {{token: ghp-canary-token}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: github-status, namespace: flux-system, uid: {UID}}}
spec:
  type: github
  address: {api}/my-org/my-repo
  secretRef: {{name: gh}}
{expr_line}---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: status, namespace: flux-system}}
spec:
  providerRef: {{name: github-status}}
  eventSources: [{{kind: Kustomization, name: '*'}}]
  eventMetadata: {{foo: Bar}}
""",
    )
    return tmp


def event(message: str, *, commit: bool = True, severity: str = "info") -> bytes:
    metadata = {"kustomize.toolkit.fluxcd.io/revision": f"main@sha1:{SHA}"}
    if commit:
        metadata["event.toolkit.fluxcd.io/commit"] = SHA
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": "apps",
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": severity,
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": metadata,
            "reportingController": "kustomize-controller",
        }
    ).encode()


async def test_default_commit_status_id(tmp_path: Path) -> None:
    """Default id = lower(kind/name/<first segment of the Provider UID>); state success; description."""
    async with CaptureServer() as api:
        api.on("GET", r"/api/v3/repos/my-org/my-repo/commits/.*/statuses", Reply(200, body=[]))
        api.on("POST", r"/api/v3/repos/my-org/my-repo/statuses/.*", Reply(201, body={"id": 1}))
        async with running_app(manifests(tmp_path, api.url)) as app:
            assert (await post_event(app, event("applied"))).status == 202
            assert await app.dispatcher.wait_idle(10)
            posts = [r for r in api.requests if r.method == "POST"]
            assert len(posts) == 1
            assert posts[0].path == f"/api/v3/repos/my-org/my-repo/statuses/{SHA}"
            assert posts[0].headers["Authorization"] == "Bearer ghp-canary-token"
            assert posts[0].json() == {
                "state": "success",
                "description": "reconciliation succeeded",
                "context": "kustomization/apps/0c9c2e41",
            }
            assert metric(app, "notification_delivered_total", provider_type="github") == 1


async def test_commit_status_expr_id(tmp_path: Path) -> None:
    """§3.9 commitStatusExpr with event/alert/provider, the example of Flux's docs."""
    expr = (
        "(event.involvedObject.kind + '/' + event.involvedObject.name + '/' + event.metadata.foo + '/' "
        "+ provider.metadata.uid.split('-').first().value()).lowerAscii()"
    )
    async with CaptureServer() as api:
        api.on("GET", r".*/statuses", Reply(200, body=[]))
        api.on("POST", r".*/statuses/.*", Reply(201, body={"id": 1}))
        async with running_app(manifests(tmp_path, api.url, expr)) as app:
            assert (await post_event(app, event("applied", severity="error"))).status == 202
            assert await app.dispatcher.wait_idle(10)
            [post] = [r for r in api.requests if r.method == "POST"]
            assert post.json()["context"] == "kustomization/apps/bar/0c9c2e41"
            assert post.json()["state"] == "failure"


async def test_events_without_commit_metadata_are_dropped_and_counted(tmp_path: Path) -> None:
    """§3.6 step 5: no event.toolkit.fluxcd.io/commit, not an update, not an error → dropped."""
    async with CaptureServer() as api, running_app(manifests(tmp_path, api.url)) as app:
        assert (await post_event(app, event("no commit", commit=False))).status == 202
        assert await app.dispatcher.wait_idle(10)
        assert api.requests == []
        assert metric(app, "notification_dropped_total", provider_type="github", reason="commit_status") == 1
