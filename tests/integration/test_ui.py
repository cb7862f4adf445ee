"""The web UI (issue 27 item 3, docs/ui.md) against the real controller in local mode, over real HTTP.

Every page answers with the security headers (errors and static files too), escapes what came from outside,
shows no secret, refuses other hosts (DNS rebinding), other methods and, without the token and the CSRF
token, every action.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from notification_controller.app import App
from notification_controller.server.ui import CSP
from notification_controller.settings import ServerSettings, Settings, UISettings
from tests.integration.appkit import FAST_RETRY

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
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@asynccontextmanager
async def ui_app(
    tmp_path: Path, manifests: str = MANIFESTS, ui: UISettings | None = None
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
        manifests=directory,
        manifests_poll_interval=0.1,
    )
    app = App(settings, retry=FAST_RETRY)
    await app.start()
    try:
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
