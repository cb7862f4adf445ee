"""``resolveInPlace`` through a real controller process on ``--store=sqlite:FILE``, SIGKILLed between an
object's failure and its recovery (issue 26 item 6).

Three chat endpoints, each a real local server:
* a Slack Web API behind a proxy path on another host, over HTTPS trusted through ``certSecretRef``
  (``https://127.0.0.1:PORT/slack-proxy/api/chat.postMessage``), with ``threadBy: object`` too;
* GovSlack's ``https://slack-gov.com/api/chat.postMessage``, reached through a forward proxy (CONNECT
  tunnel to a fake with a certificate for slack-gov.com);
* a Discord webhook (plain HTTP: Discord ignores ``certSecretRef``, as in Flux).

The failures are posted (the Slack answers name a channel ID and a ``ts``, Discord's ``?wait=true``
answer an id), the process is killed, a new one starts on the same SQLite file, and the recoveries edit
those messages: ``chat.update`` with the stored ``ts`` and channel and "recovered after", a thread reply
for the ``threadBy`` Alert, ``PATCH …/messages/<id>`` for Discord. No token in the log. Then two replicas
on NATS: the failure reaches one, the recovery the other, which edits the first one's message.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.capture import CapturedRequest, CaptureServer, ForwardProxy, Reply, mint_tls
from tests.support.controllers import ControllerProcess, post_event
from tests.support.nats_server import run_nats_server

TOKEN = "xoxb-canary-in-place-bot-token"
GOV_TOKEN = "xoxb-canary-gov-bot-token"
DISCORD_PATH = "/api/webhooks/77/CANARYDISCORDWEBHOOKTOKEN"

MANIFESTS = """\
apiVersion: v1
kind: Secret
metadata: {{name: proxied, namespace: flux-system}}
stringData:
  token: {token}
  ca.crt: |
{ca}
---
apiVersion: v1
kind: Secret
metadata: {{name: gov, namespace: flux-system}}
stringData:
  token: {gov_token}
  proxy: "{proxy}"
  ca.crt: |
{gov_ca}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: proxied, namespace: flux-system}}
spec:
  type: slack
  channel: deploys
  address: {slack}/slack-proxy/api/chat.postMessage
  secretRef: {{name: proxied}}
  certSecretRef: {{name: proxied}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: gov, namespace: flux-system}}
spec:
  type: slack
  channel: ops
  address: https://slack-gov.com/api/chat.postMessage
  secretRef: {{name: gov}}
  certSecretRef: {{name: gov}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: discord, namespace: flux-system}}
spec:
  type: discord
  address: {discord}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: proxied, namespace: flux-system}}
spec:
  providerRef: {{name: proxied}}
  eventSources: [{{kind: Kustomization, name: "*"}}]
  resolveInPlace: true
  threadBy: object
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: gov, namespace: flux-system}}
spec:
  providerRef: {{name: gov}}
  eventSources: [{{kind: GitRepository, name: "*"}}]
  resolveInPlace: true
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: discord, namespace: flux-system}}
spec:
  providerRef: {{name: discord}}
  eventSources: [{{kind: HelmRelease, name: "*"}}]
  resolveInPlace: true
"""


def event(kind: str, name: str, severity: str, message: str) -> dict[str, Any]:
    return {
        "involvedObject": {"kind": kind, "namespace": "flux-system", "name": name},
        "severity": severity,
        "timestamp": "2026-11-22T10:00:00Z",
        "message": message,
        "reason": "Progressing" if severity == "info" else "ReconciliationFailed",
        "reportingController": "kustomize-controller",
    }


async def post(proc: ControllerProcess, *bodies: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            assert await post_event(session, proc.events_url, body) == 202


def indent(pem: bytes) -> str:
    return "\n".join("    " + line for line in pem.decode().splitlines())


class SlackFake:
    """Answers chat.postMessage as Slack does (``ok``, the channel ID, a fresh ``ts``); chat.update ``ok``."""

    def __init__(self, server: CaptureServer, channel: str, base: int) -> None:
        self.channel = channel
        self.answers: list[str] = []
        self._ts = itertools.count(1)
        self.base = base
        server.on("POST", r"/chat\.postMessage$", self.post_message)
        server.on("POST", r"/chat\.update$", Reply(body={"ok": True, "channel": channel}))

    def post_message(self, request: CapturedRequest) -> Reply:
        ts = f"{self.base}.{next(self._ts):06d}"
        self.answers.append(ts)
        return Reply(body={"ok": True, "channel": self.channel, "ts": ts})


async def test_recovery_after_a_sigkill_edits_the_failure_messages(tmp_path: Path) -> None:
    tls, gov_tls = mint_tls(), mint_tls("slack-gov.com")
    async with (
        CaptureServer(tls=tls) as slack,
        CaptureServer(tls=gov_tls) as gov,
        CaptureServer() as discord,
        ForwardProxy(routes={"slack-gov.com:443": ("127.0.0.1", gov.port)}) as proxy,
    ):
        proxied_fake, gov_fake = (
            SlackFake(slack, "C0PROXIED", 1700000000),
            SlackFake(gov, "G0GOV", 1710000000),
        )
        discord.on("POST", r"/slack$", Reply(body={"id": "1180000000000000042", "channel_id": "9"}))
        discord.on("PATCH", r"/messages/", Reply(body={"id": "1180000000000000042"}))
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(
            MANIFESTS.format(
                token=TOKEN,
                gov_token=GOV_TOKEN,
                ca=indent(tls.ca_pem),
                gov_ca=indent(gov_tls.ca_pem),
                proxy=proxy.url,
                slack=slack.url,
                discord=discord.url + DISCORD_PATH,
            ),
            encoding="utf-8",
        )
        proc = ControllerProcess(
            tmp_path / "m", [f"--store=sqlite:{tmp_path / 'state.db'}"], log_path=tmp_path / "log"
        )
        await proc.start()
        try:
            await post(
                proc,
                event("Kustomization", "apps", "error", "health check failed"),
                event("GitRepository", "src", "error", "auth failed"),
                event("HelmRelease", "web", "error", "install failed"),
            )
            await slack.wait_for(1, timeout=30)
            await gov.wait_for(1, timeout=30)
            await discord.wait_for(1, timeout=30)
            await asyncio.sleep(0)
            await wait_metric(proc, "notification_resolve_in_place_total", 3, outcome="recorded")
            await proc.kill()  # SIGKILL: the message ids are in the SQLite file, nowhere else
            await proc.start()
            await post(
                proc,
                event("Kustomization", "apps", "info", "applied revision main@sha1:1234"),
                event("GitRepository", "src", "info", "stored artifact"),
                event("HelmRelease", "web", "info", "upgrade succeeded"),
            )
            slack_requests = await slack.wait_for(3, timeout=30)
            gov_requests = await gov.wait_for(2, timeout=30)
            discord_requests = await discord.wait_for(2, timeout=30)
            await wait_metric(proc, "notification_resolve_in_place_total", 3, outcome="edited")
            assert await proc.stop() == 0
        finally:
            await proc.kill()
    failure, update, reply = slack_requests
    assert failure.path == "/slack-proxy/api/chat.postMessage" and "thread_ts" not in failure.json()
    assert update.path == "/slack-proxy/api/chat.update"
    body = update.json()
    assert (body["channel"], body["ts"]) == ("C0PROXIED", proxied_fake.answers[0])
    (attachment,) = body["attachments"]
    assert attachment["color"] == "good" and attachment["fields"][0] == {
        "title": "state",
        "value": "resolved",
        "short": True,
    }
    assert attachment["fields"][1]["title"] == "recovered after"
    assert "recovered after" in attachment["fallback"]
    assert reply.path == "/slack-proxy/api/chat.postMessage"
    assert reply.json()["thread_ts"] == proxied_fake.answers[0]  # threadBy: a reply under it too
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in slack_requests)

    gov_failure, gov_update = gov_requests
    assert gov_failure.path == "/api/chat.postMessage" and gov_update.path == "/api/chat.update"
    assert (gov_update.json()["channel"], gov_update.json()["ts"]) == ("G0GOV", gov_fake.answers[0])
    assert proxy.seen == ["slack-gov.com:443"] * len(proxy.seen)

    discord_post, discord_patch = discord_requests
    assert discord_post.path == DISCORD_PATH + "/slack" and discord_post.query == {"wait": "true"}
    assert discord_patch.method == "PATCH"
    assert discord_patch.path == DISCORD_PATH + "/messages/1180000000000000042"
    assert discord_patch.json()["embeds"][0]["fields"][0] == {
        "name": "state",
        "value": "resolved",
        "inline": True,
    }

    log = (tmp_path / "log").read_text(errors="replace")
    for secret in (TOKEN, GOV_TOKEN, "CANARYDISCORDWEBHOOKTOKEN"):
        assert secret not in log


async def wait_metric(proc: ControllerProcess, name: str, value: float, **labels: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while await proc.metric(name, **labels) < value:
        assert loop.time() < deadline, f"{name}{labels} never reached {value}: {proc.log()}"
        await asyncio.sleep(0.1)


REPLICAS = """\
apiVersion: v1
kind: Secret
metadata: {{name: bot, namespace: flux-system}}
stringData:
  token: {token}
  ca.crt: |
{ca}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: slack, namespace: flux-system}}
spec:
  type: slack
  channel: deploys
  address: {slack}/api/chat.postMessage
  secretRef: {{name: bot}}
  certSecretRef: {{name: bot}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: slack, namespace: flux-system}}
spec:
  providerRef: {{name: slack}}
  eventSources: [{{kind: Kustomization, name: "*"}}]
  resolveInPlace: true
"""


async def test_two_replicas_on_nats_share_the_message_ids(tmp_path: Path) -> None:
    """The failure reaches replica A, the recovery replica B (A is gone by then): B edits A's message."""
    tls = mint_tls()
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats,
        CaptureServer(tls=tls) as slack,
    ):
        fake = SlackFake(slack, "C0REPLICAS", 1720000000)
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "objects.yaml").write_text(
            REPLICAS.format(token=TOKEN, ca=indent(tls.ca_pem), slack=slack.url), encoding="utf-8"
        )
        a, b = (
            ControllerProcess(tmp_path / "m", [f"--store={nats.url}"], log_path=tmp_path / f"replica-{i}.log")
            for i in range(2)
        )
        await asyncio.gather(a.start(), b.start())
        try:
            await post(a, event("Kustomization", "apps", "error", "health check failed"))
            await slack.wait_for(1, timeout=30)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (
                await a.metric("notification_resolve_in_place_total", outcome="recorded")
                + await b.metric("notification_resolve_in_place_total", outcome="recorded")
                < 1
            ):
                assert loop.time() < deadline, a.log() + b.log()
                await asyncio.sleep(0.1)
            await a.kill()
            await post(b, event("Kustomization", "apps", "info", "applied"))
            requests = await slack.wait_for(2, timeout=30)
            assert await b.stop() == 0
        finally:
            await a.kill()
            await b.kill()
    failure, update = requests
    assert failure.path == "/api/chat.postMessage" and update.path == "/api/chat.update"
    assert (update.json()["channel"], update.json()["ts"]) == ("C0REPLICAS", fake.answers[0])
