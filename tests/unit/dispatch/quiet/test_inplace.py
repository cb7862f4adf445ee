"""``resolveInPlace`` (dispatch/quiet/inplace.py + the Slack and Discord notifiers) through the real
pipeline (``builder.build``), a real local HTTP server answering as Slack's Web API (behind a proxy
path) and as a Discord webhook, the in-memory store and a manual clock (how long a failure lasted).

The process-level proof (HTTPS, SQLite, SIGKILL between the failure and the recovery) is
tests/integration/test_resolve_in_place.py; the attacks on answers are there and here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.dispatch.builder import Pipeline, build
from notification_controller.dispatch.model import Delivery, Notification, Ref
from notification_controller.dispatch.quiet.inplace import (
    MAX_RECORD,
    OPEN,
    RESOLVING,
    Record,
    ResolveInPlace,
    humane,
    message_key,
)
from notification_controller.lib.clock import ManualClock
from notification_controller.metrics import EventMetrics, NoiseMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.store.memory import MemoryStore
from tests.support.capture import CapturedRequest, CaptureServer, Reply
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink

NS = "flux-system"
V1 = "notification.toolkit.fluxcd.io/v1beta3"
TOKEN = "xoxb-canary-in-place-token"


def test_humane_durations() -> None:
    assert [humane(s) for s in (-3, 0, 45, 60, 719, 720, 3600, 3900, 86400, 93600, 90000)] == [
        "0s",
        "0s",
        "45s",
        "1m",
        "11m",
        "12m",
        "1h",
        "1h5m",
        "1d",
        "1d2h",
        "1d1h",
    ]


@pytest.mark.parametrize(
    "value",
    [
        b"x" * (MAX_RECORD + 1),
        b"not json",
        b"[1, 2]",
        b'{"s": "open", "id": 17, "ch": "C1", "th": "", "t": 0, "by": ""}',  # not a string
        b'{"s": "open", "id": "../../x", "ch": "C1", "th": "", "t": 0, "by": ""}',  # a path, not an id
        b'{"s": "open", "id": "1.2", "ch": "C 1", "th": "", "t": 0, "by": ""}',
        b'{"s": "open", "id": "1.2", "ch": "C1", "th": "", "t": "0", "by": ""}',
        b'{"s": "maybe", "id": "1.2", "ch": "C1", "th": "", "t": 0, "by": ""}',
        b'{"s": "open", "id": "' + b"1" * 100 + b'", "ch": "C1", "th": "", "t": 0, "by": ""}',
    ],
)
def test_a_record_that_is_not_ours_reads_as_none(value: bytes) -> None:
    assert Record.from_bytes(value) is None


def test_a_record_round_trips() -> None:
    record = Record(OPEN, "1700000000.000100", "C0123", "1700000000.000001", 1234.5)
    assert Record.from_bytes(record.to_bytes()) == record


# ---- the rig -------------------------------------------------------------------------------------------


def objects(server: str, *, slack_path: str = "/slack-proxy/api/chat.postMessage", **alert: Any) -> list[Any]:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bot", "namespace": NS}}
    return [
        {**secret, "stringData": {"token": TOKEN}},
        {
            "apiVersion": V1,
            "kind": "Provider",
            "metadata": {"name": "slack", "namespace": NS},
            "spec": {
                "type": "slack",
                "channel": "deploys",
                "address": server + slack_path,
                "secretRef": {"name": "bot"},
            },
        },
        {
            "apiVersion": V1,
            "kind": "Provider",
            "metadata": {"name": "discord", "namespace": NS},
            "spec": {"type": "discord", "address": server + "/api/webhooks/42/DISCORDWEBHOOKTOKEN"},
        },
        *(
            {
                "apiVersion": V1,
                "kind": "Alert",
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "providerRef": {"name": name},
                    "eventSources": [{"kind": kind, "name": "*"}],
                    "resolveInPlace": True,
                    **alert,
                },
            }
            for name, kind in (("slack", "Kustomization"), ("discord", "HelmRelease"))
        ),
    ]


def event(kind: str, name: str, severity: str, message: str) -> Event:
    return Event.model_validate(
        {
            "involvedObject": {"kind": kind, "namespace": NS, "name": name},
            "severity": severity,
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "Progressing" if severity == "info" else "HealthCheckFailed",
            "reportingController": "kustomize-controller",
        }
    )


@dataclass
class Rig:
    pipeline: Pipeline
    server: CaptureServer
    clock: ManualClock
    state: MemoryStore
    registry: CollectorRegistry
    objects: ObjectStore
    answers: list[str] = field(default_factory=list)
    """The ts of every chat.postMessage answer, in order."""
    slack: dict[str, Any] = field(default_factory=dict)
    """Overrides of the chat.postMessage answer (hostile values)."""
    update: Reply = field(default_factory=lambda: Reply(body={"ok": True}))
    discord: Reply = field(default_factory=lambda: Reply(body={"id": "1170000000000000001"}))
    edit: Reply = field(default_factory=lambda: Reply(body={"id": "1170000000000000001"}))

    async def send(self, *events: Event) -> None:
        for e in events:
            assert self.pipeline.dispatcher.admit(e) == 1
            assert await self.pipeline.dispatcher.wait_idle(20)

    def count(self, ptype: str, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "notification_resolve_in_place_total", {"type": ptype, "outcome": outcome}
        )
        return value or 0.0

    def since(self, n: int) -> list[CapturedRequest]:
        return self.server.requests[n:]

    def post_message(self, request: CapturedRequest) -> Reply:
        ts = f"1700000000.{len(self.answers) + 1:06d}"
        self.answers.append(ts)
        return Reply(body={"ok": True, "channel": "C0DEPLOYS", "ts": ts, **self.slack})


@pytest.fixture
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    alert: dict[str, Any] = getattr(request, "param", {})
    registry = CollectorRegistry()
    state = MemoryStore()
    clock = ManualClock()
    store = ObjectStore()
    http = OutboundHTTP(RetryPolicy(max_attempts=1))
    await http.start()
    async with CaptureServer() as server:
        for doc in objects(server.url, **alert):
            store.upsert(parse_object(doc))
        pipeline = build(
            store,
            MemoryCluster(),
            http,
            LogSink(),
            EventMetrics(registry),
            clock=clock,
            noise=(state, NoiseMetrics(registry)),
        )
        rig = Rig(pipeline, server, clock, state, registry, store)
        server.on("POST", r"/chat\.postMessage$", rig.post_message)
        server.on("POST", r"/chat\.update$", lambda r: rig.update)
        server.on("POST", r"/slack$", lambda r: rig.discord)
        server.on("PATCH", r"/messages/", lambda r: rig.edit)
        try:
            yield rig
        finally:
            await pipeline.dispatcher.shutdown(1)
            await http.close()


# ---- Slack ----------------------------------------------------------------------------------------------


async def test_slack_recovery_edits_the_failure_message_behind_a_proxy_path(rig: Rig) -> None:
    await rig.send(event("Kustomization", "apps", "error", "health check failed"))
    (first,) = rig.since(0)
    assert first.path == "/slack-proxy/api/chat.postMessage"
    failure = first.json()
    assert failure["attachments"][0]["color"] == "danger" and "ts" not in failure
    rig.clock.advance(12 * 60 + 5)
    await rig.send(event("Kustomization", "apps", "info", "applied revision main@sha1:1234"))
    (update,) = rig.since(1)
    assert update.path == "/slack-proxy/api/chat.update"  # the same base address, method chat.update
    assert update.headers["Authorization"] == f"Bearer {TOKEN}"
    body = update.json()
    assert (body["channel"], body["ts"]) == ("C0DEPLOYS", rig.answers[0])  # the channel ID answered
    (attachment,) = body["attachments"]
    assert attachment["color"] == "good"
    assert attachment["fields"][:2] == [
        {"title": "state", "value": "resolved", "short": True},
        {"title": "recovered after", "value": "12m", "short": True},
    ]
    assert attachment["text"] == "applied revision main@sha1:1234"
    assert attachment["fallback"] == "kustomization/apps.flux-system: resolved, recovered after 12m"
    assert rig.count("slack", "recorded") == rig.count("slack", "edited") == 1
    # the next recovery has nothing open: it posts; a later error starts a new message, which resolves
    await rig.send(event("Kustomization", "apps", "info", "reconciliation finished"))
    await rig.send(event("Kustomization", "apps", "error", "failed again"))
    await rig.send(event("Kustomization", "apps", "info", "fixed again"))
    posted, failed, edited = rig.since(2)
    assert posted.path.endswith("/chat.postMessage") and failed.path.endswith("/chat.postMessage")
    assert edited.path.endswith("/chat.update") and edited.json()["ts"] == rig.answers[2]


async def test_an_error_while_the_message_is_open_posts_as_usual_and_the_first_one_resolves(rig: Rig) -> None:
    await rig.send(
        event("Kustomization", "apps", "error", "first"), event("Kustomization", "apps", "error", "second")
    )
    await rig.send(event("Kustomization", "other", "info", "healthy"))  # nothing open for it: posted
    await rig.send(event("Kustomization", "apps", "info", "ok"))
    first, second, other, update = rig.since(0)
    assert [r.path.rsplit("/", 1)[1] for r in (first, second, other)] == ["chat.postMessage"] * 3
    assert update.path.endswith("/chat.update") and update.json()["ts"] == rig.answers[0]
    assert rig.count("slack", "recorded") == 1  # the second failure's message was not kept


@pytest.mark.parametrize("rig", [{"threadBy": "object"}], indirect=True)
async def test_thread_by_and_resolve_in_place_edit_and_reply_in_the_thread(rig: Rig) -> None:
    await rig.send(event("Kustomization", "apps", "error", "broken"))
    rig.clock.advance(90)
    await rig.send(event("Kustomization", "apps", "info", "fixed"))
    post, update, reply = rig.since(0)
    ts = rig.answers[0]
    assert "thread_ts" not in post.json()
    assert update.json()["ts"] == ts and update.json()["attachments"][0]["fields"][1]["value"] == "1m"
    assert reply.path.endswith("/chat.postMessage") and reply.json()["thread_ts"] == ts
    assert reply.json()["attachments"][0]["color"] == "good"
    # the thread goes on under the failure's message
    await rig.send(event("Kustomization", "apps", "error", "broken again"))
    (again,) = rig.since(3)
    assert again.json()["thread_ts"] == ts


@pytest.mark.parametrize(
    "answer",
    [
        Reply(body={"ok": False, "error": "message_not_found"}),
        Reply(status=404, body={"ok": False}),
        Reply(body=b"<html>proxy error</html>"),
    ],
)
async def test_a_failed_update_posts_the_recovery_as_a_new_message(rig: Rig, answer: Reply) -> None:
    await rig.send(event("Kustomization", "apps", "error", "broken"))
    rig.update = answer
    await rig.send(event("Kustomization", "apps", "info", "fixed"))
    _, update, fallback = rig.since(0)
    assert update.path.endswith("/chat.update")
    assert fallback.path.endswith("/chat.postMessage")  # nothing lost
    assert fallback.json()["attachments"][0]["text"] == "fixed"
    assert "thread_ts" not in fallback.json()
    assert rig.count("slack", "fallback") == 1 and rig.count("slack", "edited") == 0
    await rig.send(event("Kustomization", "apps", "error", "broken again"))  # a new message, kept
    assert rig.count("slack", "recorded") == 2


@pytest.mark.parametrize(
    "hostile",
    [
        {"ts": 1700000000.5},  # not a string
        {"ts": "1" * 50_000},  # huge (the answer itself is capped at 64 KiB by the outbound path)
        {"ts": '1700000000.000001"}]'},
        {"channel": ["C1"]},
        {"channel": "C1/../../x" * 10},
    ],
)
async def test_hostile_ids_in_the_answer_are_refused_and_the_recovery_posts(
    rig: Rig, hostile: dict[str, Any]
) -> None:
    rig.slack = hostile
    await rig.send(event("Kustomization", "apps", "error", "broken"))
    rig.slack = {}
    await rig.send(event("Kustomization", "apps", "info", "fixed"))
    _, recovery = rig.since(0)
    assert recovery.path.endswith("/chat.postMessage")  # nothing was kept: nothing to edit
    assert rig.count("slack", "rejected") == 1 and rig.count("slack", "recorded") == 0
    assert b"1" * 1000 not in recovery.body


async def test_a_record_claimed_by_another_notification_is_left_to_it(rig: Rig) -> None:
    """Two replicas' recoveries of one object: the first claims the message, the other posts."""
    await rig.send(event("Kustomization", "apps", "error", "broken"))
    stage = ResolveInPlace(rig.state, rig.clock, NoiseMetrics(CollectorRegistry()))
    deliverer = rig.pipeline.deliverer
    drafts = []
    for n in range(2):
        notification = Notification(
            f"id-{n}",
            event("Kustomization", "apps", "info", f"fixed {n}"),
            Ref(NS, "slack"),
            Ref(NS, "slack"),
            "slack",
        )
        resolved = deliverer.resolve(notification)
        assert isinstance(resolved, Delivery)
        drafts.append(resolved)
    first = await stage._decide(drafts[0])
    second = await stage._decide(drafts[1])
    assert first.edit is not None and first.edit.target == rig.answers[0]
    assert second.edit is None
    again = await stage._decide(drafts[0])  # the claimer's retry edits again
    assert again.edit is not None and again.edit.target == rig.answers[0]
    entry = await rig.state.kv_get(message_key(drafts[0]))
    assert entry is not None
    record = Record.from_bytes(entry.value)
    assert record is not None and (record.state, record.by) == (RESOLVING, "id-0")


# ---- Discord --------------------------------------------------------------------------------------------


async def test_discord_recovery_patches_the_message_it_posted(rig: Rig) -> None:
    await rig.send(event("HelmRelease", "web", "error", "install failed"))
    rig.clock.advance(3 * 3600 + 600)
    await rig.send(event("HelmRelease", "web", "info", "installed"))
    post, patch = rig.since(0)
    assert post.path == "/api/webhooks/42/DISCORDWEBHOOKTOKEN/slack" and post.query == {"wait": "true"}
    assert post.json()["attachments"][0]["color"] == "danger"  # the Slack-compatible payload, unchanged
    assert patch.method == "PATCH"
    assert patch.raw_path == "/api/webhooks/42/DISCORDWEBHOOKTOKEN/messages/1170000000000000001"
    (embed,) = patch.json()["embeds"]
    assert embed["color"] == 0x2EB886 and embed["description"] == "installed"
    assert embed["fields"][:2] == [
        {"name": "state", "value": "resolved", "inline": True},
        {"name": "recovered after", "value": "3h10m", "inline": True},
    ]
    assert rig.count("discord", "edited") == 1


@pytest.mark.parametrize("hostile", ["../../../webhooks/1/other", 1170000000000000001, "9" * 5000, ""])
async def test_discord_hostile_ids_are_refused(rig: Rig, hostile: object) -> None:
    rig.discord = Reply(body={"id": hostile})
    await rig.send(event("HelmRelease", "web", "error", "install failed"))
    await rig.send(event("HelmRelease", "web", "info", "installed"))
    _, recovery = rig.since(0)
    assert recovery.method == "POST" and recovery.path.endswith("/slack")  # no PATCH anywhere
    assert rig.count("discord", "rejected") == 1


async def test_discord_failed_edit_posts_the_recovery(rig: Rig) -> None:
    await rig.send(event("HelmRelease", "web", "error", "install failed"))
    rig.edit = Reply(status=404, body={"message": "Unknown Message", "code": 10008})
    await rig.send(event("HelmRelease", "web", "info", "installed"))
    _, patch, fallback = rig.since(0)
    assert patch.method == "PATCH" and fallback.method == "POST" and fallback.path.endswith("/slack")
    assert rig.count("discord", "fallback") == 1


# ---- the option off, and types that cannot edit: Flux's bytes --------------------------------------------


@pytest.mark.parametrize("rig", [{"resolveInPlace": False}], indirect=True)
async def test_without_the_option_nothing_changes(rig: Rig) -> None:
    await rig.send(
        event("Kustomization", "apps", "error", "broken"), event("HelmRelease", "web", "error", "x")
    )
    await rig.send(event("Kustomization", "apps", "info", "ok"), event("HelmRelease", "web", "info", "y"))
    requests = rig.since(0)
    assert [r.path.rsplit("/", 1)[1] for r in requests] == ["chat.postMessage", "slack"] * 2
    assert all(r.query == {} for r in requests)
    assert rig.count("slack", "recorded") == rig.count("discord", "recorded") == 0


async def test_an_incoming_webhook_ignores_the_option() -> None:
    """``hooks.slack.com/services/…`` cannot edit: the notifier does not say it ``edits``."""
    registry = CollectorRegistry()
    store = ObjectStore()
    http = OutboundHTTP(RetryPolicy(max_attempts=1))
    await http.start()
    async with CaptureServer() as server:
        for doc in objects(server.url, slack_path="/services/T0/B0/SECRET"):
            store.upsert(parse_object(doc))
        pipeline = build(
            store,
            MemoryCluster(),
            http,
            LogSink(),
            EventMetrics(registry),
            noise=(MemoryStore(), NoiseMetrics(registry)),
        )
        try:
            for severity in ("error", "info"):
                assert pipeline.dispatcher.admit(event("Kustomization", "apps", severity, severity)) == 1
                assert await pipeline.dispatcher.wait_idle(20)
        finally:
            await pipeline.dispatcher.shutdown(1)
            await http.close()
    assert [r.path for r in server.requests] == ["/services/T0/B0/SECRET"] * 2


async def test_a_failure_slack_refused_leaves_nothing_to_edit(rig: Rig) -> None:
    """``ok: false`` on chat.postMessage is a failed delivery (Flux's check): nothing is kept, and the
    recovery is posted as a new message."""
    rig.slack = {"ok": False, "error": "channel_not_found"}
    await rig.send(event("Kustomization", "apps", "error", "broken"))
    rig.slack = {}
    await rig.send(event("Kustomization", "apps", "info", "fixed"))
    refused, recovery = rig.since(0)
    assert refused.path.endswith("/chat.postMessage") and recovery.path.endswith("/chat.postMessage")
    assert recovery.json()["attachments"][0]["text"] == "fixed"
    assert rig.count("slack", "recorded") == rig.count("slack", "rejected") == 0
    failed = rig.registry.get_sample_value(
        "notification_delivery_failed_total",
        {"provider_type": "slack", "provider": f"{NS}/slack", "reason": "slack_error"},
    )
    assert failed == 1
