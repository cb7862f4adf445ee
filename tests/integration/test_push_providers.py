"""ntfy, Pushover, Gotify and Mattermost against local servers that check each service's documented request
and answer as the service does, then through the real controller (local mode, a SQLite outbox).

Each ``*Service`` below is a route of a real local HTTP server (``tests.support.capture.CaptureServer``)
written from the service's API documentation: it refuses a malformed request with the status and body
the service documents (ntfy's ``{"code", "http", "error"}``, Pushover's 4xx with ``"status": 0``,
Gotify's ``{"error", "errorCode", "errorDescription"}``, Mattermost's 400) and accepts a good one with
the service's answer. The services are checked first with hand-made requests (a checker that accepts
anything proves nothing), then the notifiers are sent to them through the production path
(``resolve_options`` → ``create_notifier`` → ``OutboundHTTP``), then one Alert per type goes through a
running controller: a 503 on the first attempt (retried), an Alert template in the pushed text, and a
Pushover user key the service refuses (a permanent failure, a dead letter at once).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
import pytest
import yaml

from notification_controller.api.common import Secret
from notification_controller.api.provider import Provider
from notification_controller.app import App
from notification_controller.errors import PermanentDeliveryError
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.options import resolve_options
from notification_controller.providers.registry import create_notifier
from notification_controller.settings import StoreSettings
from tests.integration.appkit import metric, post_event, running_app, write
from tests.providers.build import SAMPLE_EVENT
from tests.support.capture import CapturedRequest, CaptureServer, Reply

ROOT = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_attempts=5, wait_min=0.01, wait_max=0.05)

NTFY_TOKEN = "tk_ntfyintegration0123456789ab"
PUSHOVER_APP = "azGDORePK8gMaC0QOYAMyEEuzJnyUi"
PUSHOVER_USER = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG"
PUSHOVER_UNKNOWN_USER = "uUNKNOWNUSERKEY0000000000000000"
GOTIFY_TOKEN = "AqK7zVgotifyapp"
MATTERMOST_HOOK = "xmattermostintegration0123"


# --------------------------------------------------------------------------------------------------
# the services, from their documentation
# --------------------------------------------------------------------------------------------------


@dataclass
class Service:
    """A documented endpoint: ``check`` returns the service's error reply, or None for a good request."""

    fail_first: int = 0  # answer the first N good requests with a 503 (a service having a bad moment)
    accepted: list[CapturedRequest] = field(default_factory=list)
    refused: list[CapturedRequest] = field(default_factory=list)

    def check(self, req: CapturedRequest) -> Reply | None:
        raise NotImplementedError

    def success(self, req: CapturedRequest) -> Reply:
        raise NotImplementedError

    def __call__(self, req: CapturedRequest) -> Reply:
        refusal = self.check(req)
        if refusal is not None:
            self.refused.append(req)
            return refusal
        if self.fail_first > 0:
            self.fail_first -= 1
            return Reply(503, "upstream unavailable")
        self.accepted.append(req)
        return self.success(req)


def _json(req: CapturedRequest) -> Any:
    try:
        return json.loads(req.body)
    except ValueError:
        return None


class NtfyService(Service):
    """ntfy's publish-as-JSON (``POST /`` with ``topic``…); a topic that needs a token (access control)."""

    TOPIC = re.compile(r"[-_A-Za-z0-9]{1,64}")

    @staticmethod
    def error(status: int, code: int, text: str) -> Reply:
        return Reply(status, {"code": code, "http": status, "error": text, "link": "https://ntfy.sh/docs/"})

    def check(self, req: CapturedRequest) -> Reply | None:
        data = _json(req)
        if req.path != "/" or not isinstance(data, dict):
            return self.error(400, 40017, "invalid request: request body must be message JSON")
        if not isinstance(data.get("topic"), str) or not self.TOPIC.fullmatch(data["topic"]):
            return self.error(400, 40009, "invalid request: topic invalid")
        priority = data.get("priority", 3)
        if not isinstance(priority, int) or not 1 <= priority <= 5:
            return self.error(400, 40007, "invalid priority")
        tags = data.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return self.error(400, 40017, "invalid request: request body must be message JSON")
        if not all(isinstance(data.get(k, ""), str) for k in ("title", "message")):
            return self.error(400, 40017, "invalid request: request body must be message JSON")
        auth = req.headers.get("Authorization")
        if auth is None:
            return self.error(403, 40301, "forbidden")
        if auth != f"Bearer {NTFY_TOKEN}":
            return self.error(401, 40101, "unauthorized")
        return None

    def success(self, req: CapturedRequest) -> Reply:
        data = req.json()
        return Reply(200, {"id": uuid.uuid4().hex[:12], "time": 1, "event": "message", **data})


class PushoverService(Service):
    """``POST /1/messages.json``, form-encoded: ``token``, ``user``, ``message`` required; limits checked."""

    def error(self, key: str, text: str) -> Reply:
        return Reply(400, {key: "invalid", "errors": [text], "status": 0, "request": str(uuid.uuid4())})

    def check(self, req: CapturedRequest) -> Reply | None:
        if req.path != "/1/messages.json" or req.method != "POST":
            return Reply(404, {"errors": ["not found"], "status": 0})
        if not req.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            return self.error("message", "message cannot be blank")
        form = dict(parse_qsl(req.body.decode("utf-8", "replace"), keep_blank_values=True))
        if form.get("token") != PUSHOVER_APP:
            return self.error("token", "application token is invalid, see https://pushover.net/api")
        if form.get("user") != PUSHOVER_USER:
            return self.error(
                "user",
                "user identifier is not a valid user, group, or subscribed user key, see https://pushover.net/api#identifiers",
            )
        if not form.get("message"):
            return self.error("message", "message cannot be blank")
        if len(form["message"]) > 1024:
            return self.error("message", "message is too long")
        if len(form.get("title", "")) > 250:
            return self.error("title", "title is too long")
        if form.get("priority", "0") not in ("-2", "-1", "0", "1", "2"):
            return self.error("priority", "priority is invalid")
        if form.get("priority") == "2" and not ("retry" in form and "expire" in form):
            return self.error("retry", "retry and expire are required for emergency priority")
        if form.get("html", "0") not in ("0", "1") or not form.get("timestamp", "0").isdigit():
            return self.error("html", "html is invalid")
        return None

    def success(self, req: CapturedRequest) -> Reply:
        return Reply(200, {"status": 1, "request": str(uuid.uuid4())})


class GotifyService(Service):
    """``POST /message`` with an application token; JSON ``message`` required, ``priority`` an integer."""

    @staticmethod
    def error(status: int, text: str, description: str) -> Reply:
        return Reply(status, {"error": text, "errorCode": status, "errorDescription": description})

    def check(self, req: CapturedRequest) -> Reply | None:
        if req.path != "/message":
            return self.error(404, "Not Found", "page not found")
        token = req.headers.get("X-Gotify-Key") or req.query.get("token")
        if token != GOTIFY_TOKEN:
            return self.error(
                401,
                "Unauthorized",
                "you need to provide a valid access token or user credentials to access this api",
            )
        data = _json(req)
        if not isinstance(data, dict) or not isinstance(data.get("message"), str) or not data["message"]:
            return self.error(400, "Bad Request", "Field 'message' is required")
        if not isinstance(data.get("priority", 0), int) or not isinstance(data.get("title", ""), str):
            return self.error(400, "Bad Request", "Field 'priority' must be a number")
        extras = data.get("extras", {})
        if not isinstance(extras, dict) or not all(re.fullmatch(r"\w+::\w+", k) for k in extras):
            return self.error(400, "Bad Request", "extras keys must be namespaced")
        return None

    def success(self, req: CapturedRequest) -> Reply:
        data = req.json()
        return Reply(200, {"id": 1, "appid": 1, "date": "2026-11-27T10:00:00Z", **data})


class MattermostService(Service):
    """``POST /hooks/<id>``, JSON: ``text`` or ``attachments`` required; attachments and props objects."""

    @staticmethod
    def error(where: str, text: str) -> Reply:
        return Reply(400, {"id": where, "message": text, "detailed_error": "", "status_code": 400})

    def check(self, req: CapturedRequest) -> Reply | None:
        if req.path != f"/hooks/{MATTERMOST_HOOK}":
            return self.error("web.incoming_webhook.invalid.app_error", "Invalid webhook.")
        if req.headers.get("Content-Type", "").split(";")[0] != "application/json":
            return self.error("web.incoming_webhook.parse.app_error", "Unable to parse incoming data.")
        data = _json(req)
        if not isinstance(data, dict):
            return self.error("web.incoming_webhook.parse.app_error", "Unable to parse incoming data.")
        attachments = data.get("attachments", [])
        if not data.get("text") and not attachments:
            return self.error("web.incoming_webhook.text.app_error", "No text specified.")
        for key in ("text", "channel", "username", "icon_url"):
            if not isinstance(data.get(key, ""), str):
                return self.error("web.incoming_webhook.parse.app_error", "Unable to parse incoming data.")
        if not isinstance(attachments, list) or not isinstance(data.get("props", {}), dict):
            return self.error("web.incoming_webhook.parse.app_error", "Unable to parse incoming data.")
        for attachment in attachments:
            fields = attachment.get("fields", []) if isinstance(attachment, dict) else None
            if not isinstance(fields, list) or not all(
                isinstance(f, dict)
                and isinstance(f.get("title", ""), str)
                and isinstance(f.get("short", False), bool)
                for f in fields
            ):
                return self.error("web.incoming_webhook.parse.app_error", "Unable to parse incoming data.")
        return None

    def success(self, req: CapturedRequest) -> Reply:
        return Reply(200, b"ok", headers={"Content-Type": "text/plain"})


@dataclass
class Services:
    ntfy_url: str
    pushover_url: str
    gotify_url: str
    mattermost_url: str
    ntfy: NtfyService
    pushover: PushoverService
    gotify: GotifyService
    mattermost: MattermostService

    def all(self) -> tuple[Service, ...]:
        return (self.ntfy, self.pushover, self.gotify, self.mattermost)


@asynccontextmanager
async def services() -> AsyncIterator[Services]:
    """The four services, each on its own real local server."""
    ntfy, pushover, gotify, mattermost = (
        NtfyService(),
        PushoverService(),
        GotifyService(),
        MattermostService(),
    )
    async with CaptureServer() as a, CaptureServer() as b, CaptureServer() as c, CaptureServer() as d:
        for srv, svc in ((a, ntfy), (b, pushover), (c, gotify), (d, mattermost)):
            srv.on("*", ".*", svc)
        yield Services(a.url, b.url, c.url, d.url, ntfy, pushover, gotify, mattermost)


# --------------------------------------------------------------------------------------------------
# the services refuse what their documentation refuses
# --------------------------------------------------------------------------------------------------


async def test_the_services_refuse_malformed_requests_as_documented() -> None:
    async with services() as svc, aiohttp.ClientSession() as http:

        async def post(url: str, **kw: Any) -> tuple[int, Any]:
            async with http.post(url, **kw) as resp:
                text = await resp.text()
                return resp.status, (json.loads(text) if text.startswith("{") else text)

        bearer = {"Authorization": f"Bearer {NTFY_TOKEN}"}
        status, body = await post(svc.ntfy_url + "/", json={"topic": "ok", "priority": 7}, headers=bearer)
        assert (status, body["code"]) == (400, 40007)
        status, body = await post(svc.ntfy_url + "/", json={"topic": "a/b"}, headers=bearer)
        assert (status, body["code"]) == (400, 40009)
        assert (await post(svc.ntfy_url + "/", json={"topic": "ok"}))[0] == 403
        assert (await post(svc.ntfy_url + "/", json={"topic": "ok"}, headers=bearer))[0] == 200

        form = {"token": PUSHOVER_APP, "user": PUSHOVER_USER, "message": "hi"}
        url = svc.pushover_url + "/1/messages.json"
        status, body = await post(url, data={**form, "priority": "2"})
        assert (status, body["status"]) == (400, 0)
        status, body = await post(url, data={**form, "message": "x" * 1025})
        assert (status, body["status"]) == (400, 0)
        status, body = await post(url, data={**form, "token": "nope"})
        assert (status, body["token"]) == (400, "invalid")
        assert (await post(url, data=form))[1]["status"] == 1

        key = {"X-Gotify-Key": GOTIFY_TOKEN}
        assert (await post(svc.gotify_url + "/message", json={"message": "hi"}))[0] == 401
        assert (await post(svc.gotify_url + "/message", json={"title": "t"}, headers=key))[0] == 400
        assert (await post(svc.gotify_url + "/message", json={"message": "m", "priority": "5"}, headers=key))[
            0
        ] == 400
        assert (await post(svc.gotify_url + "/message", json={"message": "m", "priority": 5}, headers=key))[
            0
        ] == 200

        hook = f"{svc.mattermost_url}/hooks/{MATTERMOST_HOOK}"
        assert (await post(hook, json={"channel": "x"}))[0] == 400
        assert (await post(hook, json={"attachments": [{"fields": [{"short": "yes"}]}]}))[0] == 400
        assert (await post(svc.mattermost_url + "/hooks/other", json={"text": "hi"}))[0] == 400
        assert await post(hook, json={"text": "hi"}) == (200, "ok")


# --------------------------------------------------------------------------------------------------
# the notifiers, through the production path, against the services
# --------------------------------------------------------------------------------------------------


def provider_manifests(s: Services, *, pushover_user: str = PUSHOVER_USER) -> str:
    return f"""\
apiVersion: v1
kind: Secret
metadata: {{name: ntfy, namespace: flux-system}}
stringData: {{token: {NTFY_TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: ntfy, namespace: flux-system}}
spec: {{type: ntfy, address: "{s.ntfy_url}/flux-deployments", secretRef: {{name: ntfy}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: pushover, namespace: flux-system}}
stringData: {{token: {PUSHOVER_APP}, user: {pushover_user}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: pushover, namespace: flux-system}}
spec: {{type: pushover, address: "{s.pushover_url}/1/messages.json", secretRef: {{name: pushover}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: gotify, namespace: flux-system}}
stringData: {{token: {GOTIFY_TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: gotify, namespace: flux-system}}
spec: {{type: gotify, address: "{s.gotify_url}", secretRef: {{name: gotify}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: mattermost, namespace: flux-system}}
stringData: {{address: "{s.mattermost_url}/hooks/{MATTERMOST_HOOK}"}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: mattermost, namespace: flux-system}}
spec: {{type: mattermost, channel: deployments, username: flux, secretRef: {{name: mattermost}}}}
"""


def load(text: str) -> tuple[list[Provider], dict[tuple[str, str], Secret]]:
    providers: list[Provider] = []
    secrets: dict[tuple[str, str], Secret] = {}
    for doc in yaml.safe_load_all(text):
        if doc["kind"] == "Provider":
            doc["metadata"].setdefault("uid", "00000000-0000-4000-8000-000000000001")
            providers.append(Provider.model_validate(doc))
        elif doc["kind"] == "Secret":
            item = Secret.from_manifest(doc)
            secrets[(item.metadata.namespace, item.metadata.name)] = item
    return providers, secrets


async def test_each_notifier_is_accepted_by_its_service() -> None:
    client = OutboundHTTP(FAST)
    await client.start()
    try:
        async with services() as s:
            providers, secrets = load(provider_manifests(s))
            for provider in providers:
                notifier = create_notifier(resolve_options(provider, lambda ns, n: secrets.get((ns, n))))
                await notifier.post(SAMPLE_EVENT, DeliveryContext(http=client))
            for svc in s.all():
                assert len(svc.accepted) == 1, (type(svc).__name__, svc.refused)
    finally:
        await client.close()


async def test_a_refused_credential_is_permanent_and_masked() -> None:
    """Pushover's 4xx with ``"status": 0`` (an unknown user key): one attempt, no key in the error."""
    client = OutboundHTTP(FAST)
    await client.start()
    try:
        async with services() as s:
            providers, secrets = load(provider_manifests(s, pushover_user=PUSHOVER_UNKNOWN_USER))
            [pushover] = [p for p in providers if p.spec.type.value == "pushover"]
            notifier = create_notifier(resolve_options(pushover, lambda ns, n: secrets.get((ns, n))))
            before = client.attempts
            with pytest.raises(PermanentDeliveryError) as info:
                await notifier.post(SAMPLE_EVENT, DeliveryContext(http=client))
            assert client.attempts - before == 1
            assert info.value.status == 400 and '"status": 0' in (info.value.body or "")
            assert PUSHOVER_UNKNOWN_USER not in str(info.value) and PUSHOVER_APP not in str(info.value)
    finally:
        await client.close()


@pytest.mark.parametrize("ptype", ["ntfy", "pushover", "gotify", "mattermost"])
def test_the_docs_example_builds_a_notifier(ptype: str) -> None:
    """The page's YAML example (a Provider, its Secret, an Alert) resolves into a notifier of its type."""
    text = (ROOT / "docs" / "providers" / f"{ptype}.md").read_text(encoding="utf-8")
    assert "**beyond flux**" in text.split("\n\n", 2)[1].lower()  # the first thing the page says
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, f"docs/providers/{ptype}.md has no YAML example"
    providers, secrets = load(match.group(1))
    assert [p.spec.type.value for p in providers] == [ptype]
    notifier = create_notifier(resolve_options(providers[0], lambda ns, n: secrets.get((ns, n))))
    assert notifier.type.value == ptype


# --------------------------------------------------------------------------------------------------
# through the real controller
# --------------------------------------------------------------------------------------------------


def alerts() -> str:
    names = ("ntfy", "pushover", "gotify", "mattermost")
    docs = [
        f"""\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: flux-system}}
spec:
  providerRef: {{name: {name}}}
  eventSources: [{{kind: Kustomization, name: '*'}}]
  template:
    title: "{{{{ event.involvedObject.name }}}} {{{{ event.severity }}}}"
    message: "{{{{ event.message }}}} (templated)"
"""
        for name in names
    ]
    return "---\n".join(docs)


def flux_event(name: str, message: str) -> bytes:
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": name,
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": "error",
            "timestamp": "2026-11-27T10:00:00Z",
            "message": message,
            "reason": "HealthCheckFailed",
            "metadata": {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:0c9c2e41"},
            "reportingController": "kustomize-controller",
        }
    ).encode()


async def post_when_ready(app: App, body: bytes, timeout: float = 30) -> None:
    """Post the event once the controller is ready (a 503 ``Retry-After`` until its store has started)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (status := (await post_event(app, body)).status) == 503:
        assert loop.time() < deadline, "the controller never became ready"
        await asyncio.sleep(0.05)
    assert status == 202


async def wait_until(predicate: Any, what: str, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.05)


async def test_one_event_through_the_controller_reaches_all_four_with_a_retry(tmp_path: Path) -> None:
    async with services() as s:
        for svc in s.all():
            svc.fail_first = 1  # each service answers 503 once: the delivery is retried
        (tmp_path / "m").mkdir()
        write(tmp_path / "m", "objects.yaml", provider_manifests(s) + "---\n" + alerts())
        store = StoreSettings(url=f"sqlite:{tmp_path / 'state.db'}")
        async with running_app(tmp_path / "m", store=store) as app:
            await post_when_ready(app, flux_event("apps", "Health check failed"))
            await wait_until(
                lambda: all(svc.accepted for svc in s.all()),
                "every service received the notification",
            )
            for ptype in ("ntfy", "pushover", "gotify", "mattermost"):
                await wait_until(
                    lambda ptype=ptype: metric(app, "notification_delivered_total", provider_type=ptype) == 1,
                    f"{ptype} counted as delivered",
                )
        ntfy = s.ntfy.accepted[0].json()
        assert (ntfy["title"], ntfy["priority"], ntfy["topic"]) == ("apps error", 4, "flux-deployments")
        assert ntfy["message"].startswith("Health check failed (templated)")
        pushover = dict(parse_qsl(s.pushover.accepted[0].text()))
        assert (pushover["title"], pushover["priority"]) == ("apps error", "1")
        assert pushover["message"].startswith("Health check failed (templated)")
        gotify = s.gotify.accepted[0].json()
        assert (gotify["title"], gotify["priority"]) == ("apps error", 8)
        mattermost = s.mattermost.accepted[0].json()
        assert mattermost["channel"] == "deployments"
        assert mattermost["attachments"][0]["author_name"] == "apps error"
        assert mattermost["attachments"][0]["text"] == "Health check failed (templated)"


async def test_a_refused_user_key_is_a_dead_letter_at_once(tmp_path: Path) -> None:
    async with services() as s:
        (tmp_path / "m").mkdir()
        text = provider_manifests(s, pushover_user=PUSHOVER_UNKNOWN_USER) + "---\n" + alerts()
        write(tmp_path / "m", "objects.yaml", text)
        store = StoreSettings(url=f"sqlite:{tmp_path / 'state.db'}")
        async with running_app(tmp_path / "m", store=store) as app:
            await post_when_ready(app, flux_event("apps", "Health check failed"))
            await wait_until(
                lambda: metric(app, "notification_dead_letters_total", reason="permanent") >= 1,
                "the refused notification is a dead letter",
            )
            await wait_until(lambda: bool(s.gotify.accepted), "the other types still deliver")
            assert metric(app, "notification_dead_letters_total", reason="permanent") == 1
        assert s.pushover.accepted == []
        assert len(s.pushover.refused) == 1  # a 4xx with "status": 0 is not retried
