"""The web UI (issue 27 item 3, docs/ui.md) against the real controller in local mode, over real HTTP.

Every page answers with the security headers (errors and static files too), escapes what came from outside,
shows no secret, refuses other hosts (DNS rebinding), other methods and, without the token and the CSRF
token, every action.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import re
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from yarl import URL

from notification_controller.app import App
from notification_controller.errors import ConfigError
from notification_controller.server.ui import CSP
from notification_controller.server.ui.actions import GUESS_BURST
from notification_controller.server.ui.context import MAX_STREAMS
from notification_controller.settings import ServerSettings, Settings, StoreSettings, UISettings
from notification_controller.silences import main as silences_main
from notification_controller.store import NewItem, open_store
from tests.integration.appkit import FAST_RETRY, post_event
from tests.support.capture import CaptureServer, Reply

MANIFESTS = """
apiVersion: v1
kind: Secret
metadata: {name: hook-token, namespace: flux-system}
stringData: {token: CANARY-TOKEN-4f1c, address: "http://127.0.0.1:1/CANARY-PATH-77ab"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: sink, namespace: flux-system}
spec:
  type: generic
  address: http://127.0.0.1:1/CANARY-ADDRESS-9d2e
  secretRef: {name: hook-token}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: all, namespace: flux-system}
spec:
  providerRef: {name: sink}
  eventSeverity: info
  eventSources: [{kind: Kustomization, name: '*'}]
"""

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@asynccontextmanager
async def ui_app(
    tmp_path: Path,
    manifests: str = MANIFESTS,
    ui: UISettings | None = None,
    store: StoreSettings | None = None,
) -> AsyncIterator[App]:
    directory = tmp_path / "manifests"
    directory.mkdir(exist_ok=True)
    (directory / "objects.yaml").write_text(textwrap.dedent(manifests))
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            shutdown_grace=2.0,
        ),
        ui=ui or UISettings(addr="127.0.0.1:0"),
        store=store or StoreSettings(),
        manifests=directory,
        manifests_poll_interval=0.1,
    )
    app = App(settings, retry=FAST_RETRY)
    await app.start()
    try:
        deadline = time.monotonic() + 30  # a durable store opens in the background
        while not app.ready():
            assert time.monotonic() < deadline, "not ready"
            await asyncio.sleep(0.02)
        yield app
    finally:
        await app.stop()


def base(app: App) -> str:
    return f"http://127.0.0.1:{app.ports['ui']}"


def assert_secure(resp: aiohttp.ClientResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert resp.headers.get(name) == value, (resp.url, name, resp.headers.get(name))


async def test_every_page_answers_with_the_security_headers(tmp_path: Path) -> None:
    async with ui_app(tmp_path) as app, aiohttp.ClientSession() as http:
        for path, status, ctype in [
            ("/", 200, "text/html"),
            ("/events", 200, "text/html"),
            ("/events?outcome=failed&alert=flux-system/all", 200, "text/html"),
            ("/objects/Alert/flux-system/all", 200, "text/html"),
            ("/objects/Kustomization/flux-system/apps", 200, "text/html"),
            ("/static/live.js", 200, "text/javascript"),
            ("/static/ui.css", 200, "text/css"),
            ("/static/nope.js", 404, "text/plain"),
            ("/events/no-such-event", 404, "text/plain"),
            ("/notifications/no-such-notification", 404, "text/plain"),
            ("/no/such/page", 404, "text/plain"),
            ("/events?outcome=bogus", 400, "text/plain"),
            ("/events?limit=100000", 400, "text/plain"),
        ]:
            async with http.get(base(app) + path) as resp:
                body = await resp.text()
                assert resp.status == status, (path, resp.status, body[:300])
                assert resp.content_type == ctype, (path, resp.content_type)
                assert_secure(resp)
                assert "Traceback" not in body
            async with http.head(base(app) + path) as resp:
                assert resp.status == status, (path, "HEAD")
                assert_secure(resp)


async def test_overview_shows_the_status_rows(tmp_path: Path) -> None:
    async with ui_app(tmp_path) as app, aiohttp.ClientSession() as http:
        async with http.get(base(app) + "/") as resp:
            page = await resp.text()
        assert "flux-system" in page and ">all<" in page and ">sink<" in page
        assert "Provider health" in page and "Dead letters" in page and "Active Silences" in page


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
async def test_other_methods_are_405(tmp_path: Path, method: str) -> None:
    async with ui_app(tmp_path) as app, aiohttp.ClientSession() as http:
        for path in ("/", "/events", "/static/live.js"):
            async with http.request(method, base(app) + path) as resp:
                assert resp.status == 405, (method, path, resp.status)
                assert_secure(resp)


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("attacker.example", 403),
        ("attacker.example:{port}", 403),
        ("127.0.0.1.attacker.example", 403),
        ("localhost.", 200),
        ("localhost:{port}", 200),
        ("127.0.0.1:{port}", 200),
        ("[::1]:{port}", 200),
        ("ui.example.internal:{port}", 200),  # --ui-allowed-hosts
    ],
)
async def test_only_the_listeners_own_host_names_are_answered(tmp_path: Path, host: str, status: int) -> None:
    ui = UISettings(addr="127.0.0.1:0", allowed_hosts="ui.example.internal, other.example")
    async with ui_app(tmp_path, ui=ui) as app, aiohttp.ClientSession() as http:
        async with http.get(base(app) + "/", headers={"Host": host.format(port=app.ports["ui"])}) as resp:
            assert resp.status == status
            assert_secure(resp)


async def test_no_ui_listener_without_the_flag(tmp_path: Path) -> None:
    async with ui_app(tmp_path, ui=UISettings()) as app:
        assert "ui" not in app.ports


# ---- actions --------------------------------------------------------------------------------------------

TOKEN = "ui-actions-CANARY-TOKEN-5b7e"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def silence_file(directory: Path, name: str) -> Path:
    """A Silence as ``notification-controller silence add`` writes it (the only kind the UI may expire)."""
    code = silences_main(
        [
            "add",
            "--manifests",
            str(directory),
            "--match",
            "kind=Kustomization",
            "--for",
            "2h",
            "--name",
            name,
            "--comment",
            "deploy <b>window</b>",
        ],
        out=io.StringIO(),
    )
    assert code == 0
    return directory / f"silence-{name}.yaml"


def actions_ui(tmp_path: Path) -> UISettings:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return UISettings(addr="127.0.0.1:0", actions_token_file=token)


async def wait_for_silence(app: App, name: str) -> None:
    deadline = time.monotonic() + 30
    while app.store.get("Silence", "flux-system", name) is None:
        assert time.monotonic() < deadline, "the Silence file was not loaded"
        await asyncio.sleep(0.05)


async def test_read_only_by_default_every_action_is_403(tmp_path: Path) -> None:
    async with ui_app(tmp_path) as app, aiohttp.ClientSession() as http:
        page = await (await http.get(base(app) + "/")).text()
        assert "read-only" in page and '<form method="post"' not in page
        async with http.get(base(app) + "/login") as resp:
            assert resp.status == 404
        for path, form in [
            ("/actions/silences/expire", {"namespace": "flux-system", "name": "x"}),
            ("/actions/dead-letters/replay", {"id": "1"}),
            ("/login", {"token": TOKEN}),
        ]:
            async with http.post(
                base(app) + path, data=form, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as resp:
                assert resp.status == 403, path
                assert "read-only" in await resp.text()
                assert_secure(resp)


async def test_expire_needs_the_token_and_the_csrf_token(tmp_path: Path) -> None:
    async with ui_app(tmp_path, ui=actions_ui(tmp_path)) as app:
        path = silence_file(tmp_path / "manifests", "deploy")
        await wait_for_silence(app, "deploy")
        form = {"namespace": "flux-system", "name": "deploy"}
        url = base(app) + "/actions/silences/expire"
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1, as a browser keeps them
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            # nobody signed in, a wrong bearer token, a wrong login: refused, the file untouched
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
                async with http.post(url, data=form, headers=headers) as resp:
                    assert resp.status == 403, headers
            async with http.post(base(app) + "/login", data={"token": "wrong"}) as resp:
                assert resp.status == 403 and "not the token" in await resp.text()
            assert "endsAt" in path.read_text() and not jar.filter_cookies(URL(base(app)))

            # signed in: the cookie alone is not enough, the form must carry the CSRF token
            async with http.post(base(app) + "/login", data={"token": TOKEN}, allow_redirects=False) as resp:
                assert resp.status == 303
                cookie = resp.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
            page = await (await http.get(base(app) + "/")).text()
            assert "Expire" in page and "deploy &lt;b&gt;window&lt;/b&gt;" in page
            csrf = CSRF.search(page)
            assert csrf is not None
            before = path.read_text()
            for bad in ({}, {"csrf": "0" * 64}):
                async with http.post(url, data={**form, **bad}) as resp:
                    assert resp.status == 403 and "CSRF" in await resp.text()
            # a cross-site page posting with the victim's cookie and a stolen CSRF token: Origin refuses it
            for origin in ("http://attacker.example", "null", f"http://localhost:{app.ports['ui']}"):
                async with http.post(
                    url, data={**form, "csrf": csrf.group(1)}, headers={"Origin": origin}
                ) as resp:
                    assert resp.status == 403, origin
            assert path.read_text() == before

            async with (
                http.post(  # as a browser sends it: Origin is the UI itself (Referrer-Policy same-origin)
                    url, data={**form, "csrf": csrf.group(1)}, headers={"Origin": base(app)}
                ) as resp
            ):
                text = await resp.text()
                assert resp.status == 200, text
                assert_secure(resp)
                assert "expired" in text
            # signing out removes the cookie: the page shows the sign-in link again, no form, no CSRF token
            async with http.post(
                base(app) + "/logout", data={"csrf": csrf.group(1)}, allow_redirects=False
            ) as resp:
                assert resp.status == 303
            page = await (await http.get(base(app) + "/")).text()
            assert "Sign in for actions" in page and CSRF.search(page) is None
        assert path.read_text() != before  # the file the silence command wrote, rewritten as its expire does

        # a bearer token works without a session (curl); the Silence has ended already: nothing changes
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=form, headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
                assert resp.status == 200 and "already ended" in await resp.text()


async def test_a_silence_the_command_did_not_write_is_not_expired(tmp_path: Path) -> None:
    silence = """
    ---
    apiVersion: notification-controller.io/v1alpha1
    kind: Silence
    metadata: {name: from-git, namespace: flux-system}
    spec:
      matchers: [{name: kind, value: Kustomization}]
      startsAt: "2020-01-01T00:00:00Z"
      endsAt: "2099-01-01T00:00:00Z"
    """
    async with ui_app(tmp_path, MANIFESTS + textwrap.dedent(silence), ui=actions_ui(tmp_path)) as app:
        await wait_for_silence(app, "from-git")
        async with aiohttp.ClientSession() as http:
            async with http.post(
                base(app) + "/actions/silences/expire",
                data={"namespace": "flux-system", "name": "from-git"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as resp:
                text = await resp.text()
                assert resp.status == 409 and "did not write" in text, text


async def test_replay_a_dead_letter(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = open_store(f"sqlite:{db}")
    await store.start()
    await store.append([NewItem("n-1", "flux-system/sink", b'{"CANARY-PAYLOAD": 1}')])
    lease = await store.lease("flux-system/sink")
    assert lease is not None
    await store.dead_letter(lease, reason="permanent", error="400 Bad Request <script>x</script>")
    await store.close()
    async with (
        ui_app(tmp_path, ui=actions_ui(tmp_path), store=StoreSettings(url=f"sqlite:{db}")) as app,
        aiohttp.ClientSession() as http,
    ):
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        page = await (await http.get(base(app) + "/")).text()
        assert "400 Bad Request &lt;script&gt;x&lt;/script&gt;" in page and "CANARY-PAYLOAD" not in page
        assert "<th>Outbox</th><th>Oldest</th>" in page  # a durable store: the lanes' depth and age
        async with http.post(base(app) + "/actions/dead-letters/replay", data={"id": "n-1"}) as resp:
            assert resp.status == 403
        async with http.post(
            base(app) + "/actions/dead-letters/replay", data={"id": "n-1"}, headers=bearer
        ) as resp:
            assert resp.status == 200, await resp.text()
        async with http.post(
            base(app) + "/actions/dead-letters/replay", data={"id": "n-1"}, headers=bearer
        ) as resp:
            assert resp.status == 404
        assert app.state is not None
        assert await app.state.dead_letters() == []


async def test_an_unreadable_token_file_stops_the_start(tmp_path: Path) -> None:
    ui = UISettings(addr="127.0.0.1:0", actions_token_file=tmp_path / "missing")
    with pytest.raises(ConfigError, match="ui-actions-token-file"):
        async with ui_app(tmp_path, ui=ui):
            pass


# ---- what the pages show: escaped, masked -------------------------------------------------------------

WEBHOOK_PATH = hashlib.sha256(b"CANARY-RECEIVER-5e1agithub-pushflux-system").hexdigest()
CANARIES = (
    "CANARY-PATH-31f0",
    "CANARY-HEADER-8c2d",
    "CANARY-TOKEN-77aa",
    "CANARY-RECEIVER-5e1a",
    WEBHOOK_PATH,
)
HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>"


def delivering_manifests(sink: CaptureServer) -> str:
    return f"""
    apiVersion: v1
    kind: Secret
    metadata: {{name: good-secret, namespace: flux-system}}
    stringData:
      address: {sink.url}/good/CANARY-PATH-31f0
      headers: |
        Authorization: Bearer CANARY-HEADER-8c2d
    ---
    apiVersion: v1
    kind: Secret
    metadata: {{name: bad-secret, namespace: flux-system}}
    stringData:
      token: CANARY-TOKEN-77aa
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1beta3
    kind: Provider
    metadata: {{name: good, namespace: flux-system}}
    spec: {{type: generic, address: "{sink.url}/placeholder", secretRef: {{name: good-secret}}}}
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1beta3
    kind: Provider
    metadata: {{name: bad, namespace: flux-system}}
    spec: {{type: generic, address: "{sink.url}/bad", secretRef: {{name: bad-secret}}}}
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1beta3
    kind: Alert
    metadata: {{name: all, namespace: flux-system}}
    spec:
      providerRef: {{name: good}}
      eventSeverity: info
      eventSources: [{{kind: Kustomization, name: '*'}}]
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1beta3
    kind: Alert
    metadata: {{name: broken, namespace: flux-system}}
    spec:
      providerRef: {{name: bad}}
      eventSeverity: info
      eventSources: [{{kind: Kustomization, name: '*'}}]
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1beta3
    kind: Alert
    metadata: {{name: to-paused, namespace: flux-system}}
    spec:
      providerRef: {{name: paused}}
      eventSeverity: info
      eventSources: [{{kind: Kustomization, name: '*'}}]
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1beta3
    kind: Provider
    metadata: {{name: paused, namespace: flux-system}}
    spec: {{type: generic, address: "{sink.url}/paused", suspend: true}}
    ---
    apiVersion: v1
    kind: Secret
    metadata: {{name: receiver-token, namespace: flux-system}}
    stringData: {{token: CANARY-RECEIVER-5e1a}}
    ---
    apiVersion: notification.toolkit.fluxcd.io/v1
    kind: Receiver
    metadata: {{name: github-push, namespace: flux-system}}
    spec:
      type: github
      secretRef: {{name: receiver-token}}
      resources: [{{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: podinfo}}]
    """


def event(name: str, message: str, reason: str = "ReconciliationSucceeded") -> bytes:
    return json.dumps(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": name},
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": reason,
            "metadata": {"kustomize.toolkit.fluxcd.io/revision": HOSTILE, "note": HOSTILE},
            "reportingController": "kustomize-controller",
        }
    ).encode()


async def history_items(http: aiohttp.ClientSession, app: App, query: str) -> list[dict[str, Any]]:
    async with http.get(base(app) + "/api/history?" + query) as resp:
        assert resp.status == 200, await resp.text()
        items: list[dict[str, Any]] = (await resp.json())["items"]
        return items


async def wait_for_outcomes(http: aiohttp.ClientSession, app: App, *wanted: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        items = await history_items(http, app, "limit=1000")
        if set(wanted) <= {i["outcome"] for i in items}:
            return items
        assert time.monotonic() < deadline, f"never saw {wanted}: {[i['outcome'] for i in items]}"
        await asyncio.sleep(0.05)


async def test_pages_show_the_decisions_escaped_and_masked(tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        sink.on("POST", r"^/bad", Reply(500, f"upstream broke: {HOSTILE}"))
        async with ui_app(tmp_path, delivering_manifests(sink)) as app, aiohttp.ClientSession() as http:
            for body in (
                event("apps", f"deployed {HOSTILE}"),
                event("x<script>y</script>", "a hostile object name"),
                event("big", "a long reason", reason="R" * 65536),
            ):
                resp = await post_event(app, body)
                assert resp.status in (202, 400), resp.status
            unmatched = json.loads(event("src", "no Alert for a GitRepository"))
            unmatched["involvedObject"]["kind"] = "GitRepository"
            assert (await post_event(app, json.dumps(unmatched).encode())).status == 202
            assert (await post_event(app, b'{"message": "<script>not json')).status == 400
            outcomes = ("delivered", "failed", "dropped", "unmatched", "refused")
            items = await wait_for_outcomes(http, app, *outcomes)
            event_ids = {i["eventId"] for i in items if i["eventId"]}
            notification_ids = {i["notificationId"] for i in items if i["notificationId"]}
            assert event_ids and notification_ids
            pages = [
                "/",
                "/events",
                "/events?outcome=failed",
                "/events?alert=flux-system/broken",
                "/objects/Kustomization/flux-system/apps",
                "/objects/Alert/flux-system/all",
                "/objects/Provider/flux-system/bad",
                *(f"/events/{quote(e, safe='')}" for e in event_ids),
                *(f"/notifications/{quote(n, safe='')}" for n in notification_ids),
            ]
            pages.append("/objects/Receiver/flux-system/github-push")
            seen = ""
            for path in pages:
                async with http.get(base(app) + path) as resp:
                    page = await resp.text()
                    assert resp.status == 200, (path, page[:500])
                    assert_secure(resp)
                assert len(page) < 2_000_000, path  # 64 KiB reasons are cut, the page is bounded
                assert "<script>" not in page and "<img" not in page, path
                for canary in CANARIES:
                    assert canary not in page, (path, canary)
                seen += page
        # what the pages say, escaped: the message, the provider's answer, the outcomes, the stages
        assert "deployed &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in seen
        assert "upstream broke: &lt;script&gt;" in seen
        for outcome in outcomes:
            assert f">{outcome}<" in seen, outcome
        assert "R" * 1500 not in seen
        assert "Receiver initialized for path: /hook/***" in seen  # the Receiver's Ready message, masked


async def test_live_stream_through_the_perimeter_and_its_cap(tmp_path: Path) -> None:
    """``live.js`` reads ``/api/stream``: through the Host check and the headers it streams a new decision at
    once; past ``MAX_STREAMS`` subscribers the next one is a 503 (with the headers), and a closed one frees
    its slot."""
    async with CaptureServer() as sink, ui_app(tmp_path, delivering_manifests(sink)) as app:
        async with aiohttp.ClientSession() as http:
            first = await http.get(base(app) + "/api/stream")
            assert first.status == 200 and first.content_type == "text/event-stream"
            assert_secure(first)
            assert (await post_event(app, event("live", "live one"))).status == 202
            received = b""
            async with asyncio.timeout(30):
                while b'"live one"' not in received:
                    received += await first.content.readany()
            assert b"event: record" in received
            others = [await http.get(base(app) + "/api/stream") for _ in range(MAX_STREAMS - 1)]
            assert {o.status for o in others} == {200}
            async with http.get(base(app) + "/api/stream") as refused:
                assert refused.status == 503
                assert_secure(refused)
            first.close()
            deadline = time.monotonic() + 30
            while True:  # the slot is freed when the server sees the connection go
                async with http.get(base(app) + "/api/stream") as again:
                    if again.status == 200:
                        break
                assert time.monotonic() < deadline, "a closed stream kept its slot"
                await asyncio.sleep(0.05)
            for other in others:
                other.close()


async def test_open_live_streams_do_not_hold_the_shutdown(tmp_path: Path) -> None:
    """A live stream never ends by itself: the UI ends them at shutdown (they held SIGTERM 10 s each before)."""
    async with aiohttp.ClientSession() as http:
        context = ui_app(tmp_path)
        app = await context.__aenter__()
        streams = [await http.get(base(app) + "/api/stream") for _ in range(3)]
        assert {s.status for s in streams} == {200}
        started = time.monotonic()
        await context.__aexit__(None, None, None)
        assert time.monotonic() - started < 3.0
        for stream in streams:
            stream.close()


async def test_guessing_the_token_is_throttled(tmp_path: Path) -> None:
    """Ten wrong tokens at once, then ten a minute: past that every attempt, even the right token, is a 429
    with Retry-After until a guess is allowed again; reading is never affected."""
    async with ui_app(tmp_path, ui=actions_ui(tmp_path)) as app, aiohttp.ClientSession() as http:
        url = base(app) + "/actions/dead-letters/replay"
        answers = []
        for i in range(GUESS_BURST + 5):
            guess = {"Authorization": f"Bearer guess-{i}"} if i % 2 else {}
            if guess:
                async with http.post(url, data={"id": "x"}, headers=guess) as resp:
                    answers.append(resp.status)
            else:
                async with http.post(base(app) + "/login", data={"token": f"guess-{i}"}) as resp:
                    answers.append(resp.status)
        assert answers[:GUESS_BURST] == [403] * GUESS_BURST
        assert set(answers[GUESS_BURST:]) == {429}
        async with http.post(base(app) + "/login", data={"token": TOKEN}, allow_redirects=False) as resp:
            assert resp.status == 429
            assert 1 <= int(resp.headers["Retry-After"]) <= 7
            assert_secure(resp)
        async with http.get(base(app) + "/") as resp:
            assert resp.status == 200


async def test_oversized_requests_are_refused_before_any_work(tmp_path: Path) -> None:
    async with ui_app(tmp_path, ui=actions_ui(tmp_path)) as app, aiohttp.ClientSession() as http:
        for path in ("/events?object=" + "k" * 600, "/objects/Kustomization/ns/" + "n" * 600):
            async with http.get(base(app) + path) as resp:
                assert resp.status == 400 and "512" in await resp.text(), path
                assert_secure(resp)
        async with http.post(base(app) + "/login", data={"token": "t" * (64 * 1024)}) as resp:
            assert resp.status == 413
            assert_secure(resp)
        async with http.post(
            base(app) + "/login", data=b'{"token": "x"}', headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 400
