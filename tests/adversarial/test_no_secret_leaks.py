"""Canary secrets through the main scenarios; nothing we emit may contain them (checklist F1–F4, E9, E11).

Every credential the controller handles gets a unique canary value: provider tokens (GitHub, a generic
Provider whose endpoint echoes the token back in its error body), an HMAC key, a Slack webhook address whose
path is the credential, a proxy password (a working proxy and one that answers 407), receiver tokens
(github, gitlab, harbor, generic — the generic Receiver's webhook path digest is itself a credential), and
Secrets that are broken in ways whose error texts might quote them (headers that are not YAML, a proxy URL
with credentials and a bad scheme, an invalid address, a Receiver Secret without ``token``).

The real controller runs in local mode; events are delivered to local servers, receivers get valid and
invalid requests. Then EVERYTHING the controller emitted is scanned, raw and base64-encoded:
* every log record at DEBUG and above, message and traceback, without the production ``RedactingFilter``
  (that filter is the last line of defence; this test checks the lines behind it). The generic Receiver's
  webhook path may appear at DEBUG only (its Ready transition logs it for operators), so for that canary
  only records above DEBUG are scanned;
* every Kubernetes Event (``LocalCluster.events``);
* every status of every object in the store — except the generic Receiver's own ``status.webhookPath`` and
  Ready message, which carry its path as in Flux (``flux get receivers`` shows it; RBAC on Receivers
  protects it; see THREAT_MODEL.md);
* the full ``/metrics`` text (label values included) and every registry sample;
* every HTTP answer of our servers (events, receiver, metrics, health): status line, headers and body.

The one place a canary may appear is the outbound request that legitimately carries it (asserted too, so
the scenario is not vacuous).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from notification_controller.api.alert import Alert
from notification_controller.api.provider import Provider
from notification_controller.api.receiver import Receiver
from notification_controller.app import App
from notification_controller.core import conditions as cond
from notification_controller.core.webhook import webhook_path
from notification_controller.logsetup import RedactingFilter
from tests.adversarial.kit import KS, SHA, event_body, eventually, pair, secret
from tests.integration.appkit import local_cluster, metric, running_app
from tests.support.capture import CapturedRequest, CaptureServer, ForwardProxy, Reply

NS = "flux-system"
SLACK_PATH = "T0CANARY/B0CANARY/slack-path-canary-4f2e"
HMAC_KEY = "hmac-key-canary-8d1c"
GH_TOKEN = "ghp_canary_token_0a1b2c3d"
GH_ECHO_TOKEN = "ghp_canary_echoed_9f8e7d"
ECHO_TOKEN = "echo-token-canary-55aa"
PROXY_PASSWORD = "proxy-pw-canary-9e9e"
PROXY_BAD_PASSWORD = "proxy-pw-canary-407-77"
PROXY_SCHEME_PASSWORD = "proxy-pw-canary-ftp-31"
BROKEN_HEADER = "broken-header-canary-12"
BROKEN_TOKEN = "broken-token-canary-34"
ADDRESS_CANARY = "address-canary-56"
RECV_GH = "recv-github-canary-a1"
RECV_GL = "recv-gitlab-canary-b2"
RECV_HARBOR = "recv-harbor-canary-c3"
RECV_GENERIC = "recv-generic-canary-d4"
RECV_BROKEN = "recv-broken-canary-e5"
GENERIC_DIGEST = webhook_path(RECV_GENERIC.encode(), "generic", NS).removeprefix("/hook/")

CANARIES = {
    "slack webhook path": SLACK_PATH,
    "slack path tail": SLACK_PATH.rsplit("/", 1)[1],
    "HMAC key": HMAC_KEY,
    "github token": GH_TOKEN,
    "echoed github token": GH_ECHO_TOKEN,
    "echoed token": ECHO_TOKEN,
    "proxy password": PROXY_PASSWORD,
    "407 proxy password": PROXY_BAD_PASSWORD,
    "bad-scheme proxy password": PROXY_SCHEME_PASSWORD,
    "header in broken YAML": BROKEN_HEADER,
    "token of a broken Secret": BROKEN_TOKEN,
    "token in an invalid address": ADDRESS_CANARY,
    "github receiver token": RECV_GH,
    "gitlab receiver token": RECV_GL,
    "harbor receiver token": RECV_HARBOR,
    "generic receiver token": RECV_GENERIC,
    "broken receiver Secret": RECV_BROKEN,
    "generic receiver webhook path": GENERIC_DIGEST,
}
DEBUG_ALLOWED = {"generic receiver webhook path"}


def variants(value: str) -> list[str]:
    """The value, and its base64 forms (Basic auth, a Secret printed as data) at the three alignments."""
    out = [value]
    for prefix in ("", "x", "xy"):
        encoded = base64.b64encode((prefix + value).encode()).decode()
        out.append(encoded[len(prefix) * 2 : -4])  # the part that does not depend on the neighbours
    return [v for v in out if len(v) >= 8]


@dataclass
class Emitted:
    """Everything the controller emitted, by where it came from."""

    items: list[tuple[str, str]] = field(default_factory=list)  # (where, text)
    debug_only: list[tuple[str, str]] = field(default_factory=list)

    def add(self, where: str, text: str, *, debug: bool = False) -> None:
        (self.debug_only if debug else self.items).append((where, text))

    def leaks(self) -> list[str]:
        found = []
        for name, value in CANARIES.items():
            sources = self.items if name in DEBUG_ALLOWED else self.items + self.debug_only
            for where, text in sources:
                if any(v in text for v in variants(value)):
                    found.append(f"{name} in {where}: {text[:300]!r}")
        return found


def manifests(tmp: Path, sink: str, proxy: str, proxy_407: str) -> Path:
    docs = [
        # -- providers that work
        pair("slack", "slack", "", secret="slack"),
        secret("slack", address=f"{sink}/services/{SLACK_PATH}"),
        pair("hmac", "generic-hmac", f"{sink}/hmac", secret="hmac"),
        secret("hmac", token=HMAC_KEY),
        pair("github", "github", f"{sink}/owner/repo", secret="github"),
        secret("github", token=GH_TOKEN),
        pair("proxied", "generic", f"{sink}/proxied", extra="\n  proxySecretRef: {name: proxy}"),
        secret("proxy", address=proxy, username="proxyuser", password=PROXY_PASSWORD),
        # -- providers that fail at delivery, some echoing their credential back
        pair("echo", "generic", f"{sink}/echo", secret="echo"),
        secret("echo", headers=f"Authorization: Bearer {ECHO_TOKEN}"),
        pair("github-echo", "github", f"{sink}/echo/repo", secret="github-echo"),
        secret("github-echo", token=GH_ECHO_TOKEN),
        pair("proxied-407", "generic", f"{sink}/never", extra="\n  proxySecretRef: {name: proxy-407}"),
        secret("proxy-407", address=proxy_407, username="proxyuser", password=PROXY_BAD_PASSWORD),
        # -- providers whose Secrets are broken (reconciled to Ready=False)
        pair("broken-headers", "generic-hmac", f"{sink}/x", secret="broken"),
        secret("broken", token=BROKEN_TOKEN, headers=f"Authorization: [{BROKEN_HEADER}"),
        pair("broken-proxy", "generic", f"{sink}/x", extra="\n  proxySecretRef: {name: proxy-ftp}"),
        secret("proxy-ftp", address=f"ftp://user:{PROXY_SCHEME_PASSWORD}@127.0.0.1:21"),
        pair("broken-address", "generic", "", secret="bad-address"),
        secret("bad-address", address=f"http://[bad/{ADDRESS_CANARY}"),
        # -- receivers
        receiver("github", "github", RECV_GH),
        receiver("gitlab", "gitlab", RECV_GL),
        receiver("harbor", "harbor", RECV_HARBOR),
        receiver("generic", "generic", RECV_GENERIC),
        receiver("broken", "generic", None),
        secret("broken-token", password=RECV_BROKEN),
        f"""
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: webapp, namespace: {NS}}}
spec: {{url: 'https://example.com/webapp'}}
""",
    ]
    (tmp / "objects.yaml").write_text("".join(docs))
    return tmp


def receiver(name: str, type_: str, token: str | None) -> str:
    token_secret = secret(f"{name}-token", token=token) if token else ""
    return (
        f"""
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: {name}, namespace: {NS}}}
spec:
  type: {type_}
  secretRef: {{name: {name}-token}}
  resources: [{{kind: GitRepository, name: webapp}}]
"""
        + token_secret
    )


def sink_routes(sink: CaptureServer) -> None:
    sink.on("GET", r"^/api/v3/repos/owner/repo/commits/.*/statuses", Reply(200, body=[]))
    sink.on("POST", r"^/api/v3/repos/owner/repo/statuses/", Reply(201, body={}))
    sink.on("GET", r"^/api/v3/repos/echo/repo/commits/.*/statuses", Reply(200, body=[]))
    sink.on(
        "POST",
        r"^/api/v3/repos/echo/repo/statuses/",
        lambda r: Reply(403, body=f"token {r.headers.get('Authorization')} lacks the repo:status scope"),
    )
    sink.on("POST", r"^/echo$", echo_auth)


def echo_auth(request: CapturedRequest) -> Reply:
    return Reply(401, body={"error": "invalid credentials", "got": request.headers.get("Authorization")})


async def answer(
    session: aiohttp.ClientSession, method: str, url: str, emitted: Emitted, **kw: object
) -> int:
    async with session.request(method, url, **kw) as resp:  # type: ignore[arg-type]
        body = await resp.text(errors="replace")
        headers = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
        emitted.add(
            f"HTTP answer to {method} {url.split('/hook/')[0]}",
            f"{resp.status} {resp.reason}\n{headers}\n{body}",
        )
        return resp.status


async def test_no_canary_secret_escapes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    emitted = Emitted()
    async with (
        CaptureServer() as sink,
        ForwardProxy(require_auth=("proxyuser", PROXY_PASSWORD)) as proxy,
        ForwardProxy(require_auth=("someone", "else")) as proxy_407,
    ):
        sink_routes(sink)
        async with running_app(manifests(tmp_path, sink.url, proxy.url, proxy_407.url)) as app:
            await _ready(app)
            async with aiohttp.ClientSession() as session:
                await _events(app, session, emitted)
                await _webhooks(app, session, emitted)
                assert await app.dispatcher.wait_idle(10)
                await _failures_recorded(app)
                for path in ("/metrics",):
                    await answer(session, "GET", f"http://127.0.0.1:{app.ports['metrics']}{path}", emitted)
                for path in ("/healthz", "/readyz"):
                    await answer(session, "GET", f"http://127.0.0.1:{app.ports['health']}{path}", emitted)
            _collect_state(app, emitted)
        _assert_legitimate_use(sink, proxy)
    for record in caplog.records:
        text = record.getMessage() + ("\n" + record.exc_text if record.exc_text else "")
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        emitted.add(f"log {record.levelname} {record.name}", text, debug=record.levelno <= logging.DEBUG)
    assert len(emitted.items) > 100  # the scan covers a real volume of output
    assert emitted.leaks() == []


async def _ready(app: App) -> None:
    def receivers_ready() -> bool:
        receivers = [app.store.receiver(NS, n) for n in ("github", "gitlab", "harbor", "generic")]
        return all(r is not None and r.status.webhook_path for r in receivers)

    def providers_reconciled() -> bool:
        return all(p.status.conditions for p in app.store.providers())

    await eventually(receivers_ready, what="receivers to get their webhook paths")
    await eventually(providers_reconciled, what="providers to be reconciled")


async def _events(app: App, session: aiohttp.ClientSession, emitted: Emitted) -> None:
    url = f"http://127.0.0.1:{app.ports['events']}/"
    for severity in ("info", "error"):
        body = event_body(f"deployed {severity}", **{f"{KS}/revision": f"main@sha1:{SHA}"})
        body = body.replace(b'"severity":"info"', f'"severity":"{severity}"'.encode())
        assert await answer(session, "POST", url, emitted, data=body) == 202
    assert await answer(session, "POST", url, emitted, data=body) == 429  # duplicate
    assert await answer(session, "POST", url, emitted, data=b'{"message": NaN}') == 400
    assert await answer(session, "GET", url, emitted) == 405


async def _webhooks(app: App, session: aiohttp.ClientSession, emitted: Emitted) -> None:
    base = f"http://127.0.0.1:{app.ports['receiver']}"

    def path(name: str, token: str) -> str:
        return base + webhook_path(token.encode(), name, NS)

    push = b'{"ref": "refs/heads/main"}'
    good_sig = "sha256=" + hmac.new(RECV_GH.encode(), push, hashlib.sha256).hexdigest()
    bad_sig = "sha256=" + hmac.new(b"wrong", push, hashlib.sha256).hexdigest()
    cases: list[tuple[str, dict[str, str], int]] = [
        (path("github", RECV_GH), {"X-Hub-Signature-256": good_sig, "X-GitHub-Event": "push"}, 200),
        (path("github", RECV_GH), {"X-Hub-Signature-256": bad_sig, "X-GitHub-Event": "push"}, 400),
        (path("gitlab", RECV_GL), {"X-Gitlab-Token": RECV_GL, "X-Gitlab-Event": "Push Hook"}, 200),
        (path("gitlab", RECV_GL), {"X-Gitlab-Token": RECV_GL + "x", "X-Gitlab-Event": "Push Hook"}, 400),
        (path("harbor", RECV_HARBOR), {"Authorization": RECV_HARBOR}, 200),
        (path("harbor", RECV_HARBOR), {"Authorization": "Bearer " + RECV_HARBOR}, 400),
        (path("generic", RECV_GENERIC), {}, 200),
        (path("generic", RECV_GENERIC) + "?x=1", {}, 404),
        (path("generic", RECV_GENERIC + "x"), {}, 404),
        (path("broken", ""), {}, 404),  # never Ready: no webhook path
    ]
    for url, headers, status in cases:
        got = await answer(
            session, "POST", url, emitted, data=push, headers={"Content-Type": "application/json", **headers}
        )
        assert got == status, (url.split("/hook/")[0], headers, got)
    got = await answer(session, "GET", path("generic", RECV_GENERIC), emitted)
    assert got == 405


async def _failures_recorded(app: App) -> None:
    """The scenario is not vacuous: the failing Providers failed, the broken ones are not Ready."""
    cluster = local_cluster(app)

    def failed() -> set[str]:
        return {e[0].name for e in cluster.events if e[2] == "NotificationDispatchFailed"}

    await eventually(lambda: failed() >= {"echo", "github-echo", "proxied-407"}, what="delivery failures")
    for name in ("broken-headers", "broken-proxy", "broken-address"):
        provider = app.store.provider(NS, name)
        assert provider is not None
        ready = cond.find(provider.status.conditions, cond.READY)
        assert ready is not None and (ready.status, ready.reason) == ("False", "InvalidConfig"), name
    broken = app.store.receiver(NS, "broken")
    assert broken is not None
    ready = cond.find(broken.status.conditions, cond.READY)
    assert ready is not None and ready.reason == "TokenNotFound"
    assert metric(app, "notification_delivered_total", provider_type="slack") == 2


def _collect_state(app: App, emitted: Emitted) -> None:
    cluster = local_cluster(app)
    for ref, type_, reason, message in cluster.events:
        emitted.add(f"Kubernetes Event {type_} {reason} on {ref.kind}/{ref.name}", message)
    objects: list[Alert | Provider | Receiver] = [
        *app.store.alerts(),
        *app.store.providers(),
        *app.store.receivers(),
    ]
    for obj in objects:
        status = obj.status.model_dump(mode="json", by_alias=True)
        if isinstance(obj, Receiver) and obj.metadata.name == "generic":
            # Flux compatibility: the path is published in the Receiver's own status (see module docstring)
            assert status["webhookPath"] == f"/hook/{GENERIC_DIGEST}"
            status["webhookPath"] = None
            for condition in status["conditions"]:
                if condition["type"] == "Ready":
                    assert condition["message"] == f"Receiver initialized for path: /hook/{GENERIC_DIGEST}"
                    condition["message"] = ""
        emitted.add(f"status of {obj.KIND}/{obj.metadata.name}", str(status))
    for family in app.registry.collect():
        for sample in family.samples:
            emitted.add(f"metric {sample.name}", f"{sample.labels} {sample.value}")


def _assert_legitimate_use(sink: CaptureServer, proxy: ForwardProxy) -> None:
    """Each credential did reach its destination: the scan above is meaningful."""
    paths = [r.path for r in sink.requests]
    assert f"/services/{SLACK_PATH}" in paths
    [hmac_request, *_] = [r for r in sink.requests if r.path == "/hmac"]
    expected = "sha256=" + hmac.new(HMAC_KEY.encode(), hmac_request.body, hashlib.sha256).hexdigest()
    assert hmac_request.headers["X-Signature"] == expected
    assert any(r.headers.get("Authorization") == f"Bearer {GH_TOKEN}" for r in sink.requests)
    assert any(r.headers.get("Authorization") == f"Bearer {ECHO_TOKEN}" for r in sink.requests)
    expected_auth = "Basic " + base64.b64encode(f"proxyuser:{PROXY_PASSWORD}".encode()).decode()
    assert expected_auth in proxy.auth
    assert "/proxied" in paths


# ---- a sender that puts the raw token in the signature header ------------------------------------------


async def _token_as_signature(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> tuple[App, list[logging.LogRecord]]:
    caplog.set_level(logging.DEBUG)
    (tmp_path / "objects.yaml").write_text(receiver("github", "github", RECV_GH))
    async with running_app(tmp_path) as app:
        await eventually(
            lambda: (r := app.store.receiver(NS, "github")) is not None and bool(r.status.webhook_path),
            what="the Receiver's webhook path",
        )
        url = f"http://127.0.0.1:{app.ports['receiver']}" + webhook_path(RECV_GH.encode(), "github", NS)
        headers = {
            "X-Hub-Signature-256": RECV_GH,
            "X-GitHub-Event": "push",
            "Content-Type": "application/json",
        }
        async with aiohttp.ClientSession() as session, session.post(url, data=b"{}", headers=headers) as resp:
            assert resp.status == 400
            assert RECV_GH not in await resp.text()
    return app, [r for r in caplog.records if r.name.startswith("notification_controller.server")]


async def test_token_sent_as_signature_is_masked_by_the_production_log_filter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A misconfigured sender puts the token itself in ``X-Hub-Signature-256``. The rejection is logged;
    the production handler's ``RedactingFilter`` (fed with every Secret value) masks the token."""
    app, records = await _token_as_signature(tmp_path, caplog)
    rejection = [r for r in records if "unable to validate payload" in r.getMessage()]
    assert rejection
    redacting = RedactingFilter(app.redactor)
    for record in rejection:
        copy = logging.makeLogRecord(record.__dict__)
        assert redacting.filter(copy)
        assert RECV_GH not in copy.getMessage()


async def test_token_sent_as_signature_is_not_quoted_in_the_log_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind the filter: the record itself must not quote a client-supplied credential header."""
    _, records = await _token_as_signature(tmp_path, caplog)
    assert records
    assert all(RECV_GH not in r.getMessage() for r in records)
