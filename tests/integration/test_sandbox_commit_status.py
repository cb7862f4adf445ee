"""``commitStatusExpr`` outside the inline-safe subset (issue 23): evaluated in the sandbox, with the memory
store on the pre-queue path and with a durable store at send time (``rules.CommitStatusAtSend``), so the
event POST is answered before any tenant expression runs. A hostile expression is killed at the sandbox's
timeout and its notification dropped with a Warning, never sent under another status id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from notification_controller.settings import StoreSettings
from tests.adversarial.kit import eventually
from tests.integration.appkit import metric, post_event, running_app
from tests.integration.test_commit_status_event import SHA, event, manifests
from tests.support.capture import CaptureServer, Reply

GOOD = "'status/' + [event.involvedObject.name, event.metadata.foo].join('-')"  # join: not inline-safe
M = "event.message.split('')"
HOSTILE = f"'s/' + {M}.filter(a, {M}.all(b, {M}.all(c, a == c))).join('')"  # 3000³ steps


def store(kind: str, tmp: Path) -> StoreSettings:
    return StoreSettings(url=f"sqlite:{tmp / 'state.db'}") if kind == "sqlite" else StoreSettings()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_sandboxed_commit_status_expr_names_the_status(tmp_path: Path, kind: str) -> None:
    (tmp_path / "m").mkdir()
    async with CaptureServer() as api:
        api.on("GET", r".*/statuses", Reply(200, body=[]))
        api.on("POST", r".*/statuses/.*", Reply(201, body={"id": 1}))
        async with running_app(manifests(tmp_path / "m", api.url, GOOD), store=store(kind, tmp_path)) as app:
            await eventually(app.ready, timeout=20, what="the store to open")
            assert (await post_event(app, event("applied"))).status == 202
            await eventually(
                lambda: any(r.method == "POST" for r in api.requests), timeout=30, what="a status"
            )
            [post] = [r for r in api.requests if r.method == "POST"]
            assert post.path.endswith(f"/statuses/{SHA}")
            assert post.json()["context"] == "status/apps-Bar"
            assert app.sandbox.starts == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_hostile_commit_status_expr_is_killed_and_the_post_does_not_wait(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "m").mkdir()
    body = json.loads(event("applied"))
    body["message"] = "x" * 3000
    async with CaptureServer() as api:
        api.on("*", r".*", Reply(201, body={"id": 1}))
        objects = manifests(tmp_path / "m", api.url, HOSTILE)
        async with running_app(objects, store=store(kind, tmp_path)) as app:
            await eventually(app.ready, timeout=20, what="the store to open")
            assert (await post_event(app, json.dumps(body).encode())).status == 202
            timeouts = {"kind": "commit_status", "reason": "timeout"}
            # answered before the sandbox gave up on the expression: the POST never waited for it
            assert metric(app, "notification_sandbox_failures_total", **timeouts) == 0

            def killed() -> bool:
                return metric(app, "notification_sandbox_failures_total", **timeouts) == 1

            await eventually(killed, timeout=30, what="the expression's worker to be killed")

            def dropped() -> float:  # before the Provider is known (memory) or at send time (durable)
                return sum(
                    metric(app, "notification_dropped_total", provider_type=ptype, reason="config")
                    for ptype in ("", "github")
                )

            await eventually(lambda: dropped() == 1, timeout=10, what="the notification to be dropped")
            assert [r for r in api.requests if r.method == "POST"] == []  # never under another status id
