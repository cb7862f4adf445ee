"""The browser tests' parts: Debian's headless Chromium, a real controller process with its web UI, real sinks.

Issue 27 item 4: the UI is tested the way a user meets it — a real browser (``/usr/bin/chromium`` driven by
``/usr/bin/chromedriver`` through Selenium) against a real controller process in local mode
(``python -m notification_controller --ui-addr …``) that delivers to real HTTP servers
(``tests/support/capture.py``): one that accepts, one that refuses with a provider's answer.

Nothing is downloaded at run time: Selenium is handed the driver's path (``Service(executable_path=…)``), so
Selenium Manager never runs (``SE_OFFLINE=true`` besides), and Chromium gets the flags this machine needs
(no sandbox as root, no GPU, no background networking, component updates, sync or QUIC) plus a host-resolver
rule that answers every name but 127.0.0.1 with NXDOMAIN: traced with ``strace -f -e connect,sendto``, the
browser then sends no DNS query at all (without the rule it looks up start.duckduckgo.com and
clients2.google.com at start).

Selenium is synchronous, the sinks are asyncio servers: they run on an event loop in a daemon thread
(``LoopThread``); the controller is a child process stopped with SIGTERM (SIGKILL after 30 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.capture import CaptureServer, Reply
from tests.support.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
LOCALHOST = "127.0.0.1"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1280, 800
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container: the setuid sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    f"--window-size={WIDTH},{HEIGHT}",
)
WAIT = 30.0
"""Seconds an explicit wait allows (a page, a live row, a delivery): generous, the machine is shared."""

T = TypeVar("T")

STREAM_PROBE = """
(() => {
  const Native = window.EventSource;
  if (!Native) return;
  window.__streamsOpen = 0;
  window.EventSource = function (url, init) {
    const source = new Native(url, init);
    source.addEventListener("open", () => { window.__streamsOpen += 1; });
    return source;
  };
  window.EventSource.prototype = Native.prototype;
})();
"""
"""Counts the page's EventSource connections that opened (run before the page's own scripts, by DevTools: the
page's CSP does not apply to it). ``wait_live`` reads it: posting before live.js listens would lose the row."""


def browser_missing() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        return (
            f"Debian's chromium/chromium-driver are not installed ({', '.join(missing)} missing): "
            "`make system-deps` (scripts/system-deps.sh) installs them"
        )
    return ""


def start_browser(profile: Path, *, javascript: bool = True) -> WebDriver:
    """A headless Chromium with a fresh profile in ``profile``; console messages kept for the CSP checks.
    ``javascript=False``: the pages as a browser without scripts sees them."""
    os.environ["SE_OFFLINE"] = (
        "true"  # belt and braces: the Service path below already skips Selenium Manager
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=subprocess.DEVNULL)
    driver = webdriver.Chrome(service=service, options=options)
    # the viewport itself is WIDTH x HEIGHT (--window-size counts the window, not the page: 1280x657 here)
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )
    # observe (not change) the page's live stream: a test waits for it to be open before posting
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": STREAM_PROBE})
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


def console(driver: WebDriver) -> list[dict[str, Any]]:
    """The browser console's messages since the last call (Chromium's ``browser`` log)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return entries


def wait_until(driver: WebDriver, check: Callable[[WebDriver], T], what: str, timeout: float = WAIT) -> T:
    """An explicit wait (no sleeps) whose failure says what it waited for."""
    waiting = WebDriverWait(
        driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    )
    result: T = waiting.until(check, message=f"timed out after {timeout}s waiting for {what}")
    return result


def wait_live(driver: WebDriver) -> None:
    """Wait until the page's live stream (/api/stream) is open."""
    wait_until(driver, lambda d: d.execute_script("return window.__streamsOpen > 0"), "the live stream open")


class LoopThread:
    """An asyncio loop in a daemon thread, for the asyncio servers a synchronous test needs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="browser-kit-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        with contextlib.suppress(Exception):
            self.run(drain(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


PROVIDER_ANSWER = '{"ok":false,"error":"channel_is_archived"}'
"""What the failing sink answers (400, a permanent failure): the UI must show it."""


@dataclass
class Canaries:
    """Secret values the Provider's Secret holds: none may reach a page or an API answer."""

    token: str = field(default_factory=lambda: "CANARYTOKEN" + secrets.token_hex(8))
    path: str = field(default_factory=lambda: "CANARYPATH" + secrets.token_hex(8))
    header: str = field(default_factory=lambda: "CANARYHEADER" + secrets.token_hex(8))

    def all(self) -> tuple[str, ...]:
        return (self.token, self.path, self.header)


def manifests(directory: Path, sink_url: str, canaries: Canaries) -> Path:
    """Two Providers and their Alerts, a Secret full of canaries and an active Silence.

    * ``flux-system/webhook`` (generic-hmac) signs with the Secret's token, posts to the Secret's ``address``
      (a URL whose path is a secret, as Slack's and Teams' are) with the Secret's ``Authorization`` header;
      Alert ``apps`` sends it the events of Kustomizations ``apps``, ``frozen`` and ``hostile``.
    * ``flux-system/archived`` (generic) answers 400 with ``PROVIDER_ANSWER``: Alert ``broken`` sends it the
      events of Kustomization ``broken``; the durable store dead-letters them (a permanent failure).
    * Silence ``flux-system/freeze`` holds every notification about Kustomization ``frozen``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    text = f"""
apiVersion: v1
kind: Secret
metadata: {{name: webhook-secret, namespace: flux-system}}
stringData:
  token: {canaries.token}
  address: {sink_url}/hooks/{canaries.path}
  headers: |
    Authorization: Bearer {canaries.header}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: webhook, namespace: flux-system}}
spec:
  type: generic-hmac
  timeout: 5s
  secretRef: {{name: webhook-secret}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: apps, namespace: flux-system}}
spec:
  providerRef: {{name: webhook}}
  eventSeverity: info
  eventSources:
    - {{kind: Kustomization, name: apps}}
    - {{kind: Kustomization, name: frozen}}
    - {{kind: Kustomization, name: hostile}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: archived, namespace: flux-system}}
spec: {{type: generic, address: "{sink_url}/archived", timeout: 5s}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: broken, namespace: flux-system}}
spec:
  providerRef: {{name: archived}}
  eventSeverity: info
  eventSources: [{{kind: Kustomization, name: broken}}]
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata: {{name: freeze, namespace: flux-system}}
spec:
  matchers: [{{name: name, value: frozen}}]
  startsAt: "2020-01-01T00:00:00Z"
  endsAt: "2099-01-01T00:00:00Z"
  createdBy: browser-tests
  comment: deploy freeze for the browser tests
"""
    (directory / "ui.yaml").write_text(text, encoding="utf-8")
    return directory


def event(
    name: str, message: str, *, reason: str = "ReconciliationSucceeded", **metadata: str
) -> dict[str, Any]:
    """A Flux event as kustomize-controller POSTs it (examples/event.json's shape)."""
    return {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": name,
            "uid": "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9",
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "info",
        "timestamp": "2026-11-22T10:00:00Z",
        "message": message,
        "reason": reason,
        "metadata": {
            "kustomize.toolkit.fluxcd.io/revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41",
            **metadata,
        },
        "reportingController": "kustomize-controller",
    }


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, body: bytes | None = None, timeout: float = WAIT) -> Answer:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return Answer(resp.status, dict(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, dict(exc.headers.items()), exc.read())


class Site:
    """A controller process in local mode with its web UI, a sqlite store, and the sinks it delivers to."""

    def __init__(self, workdir: Path, args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.args = args  # more controller flags (--ui-actions-token-file=…)
        self.canaries = Canaries()
        self.loop = LoopThread()
        self.sink = CaptureServer()
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.log_path = workdir / "controller.log"

    @property
    def ui(self) -> str:
        return f"http://{LOCALHOST}:{self.ports['ui']}"

    @property
    def events_url(self) -> str:
        return f"http://{LOCALHOST}:{self.ports['events']}/"

    def start(self) -> None:
        self.loop.run(self.sink.__aenter__())
        self.sink.on("POST", r"^/archived", Reply(400, PROVIDER_ANSWER, {"Content-Type": "application/json"}))
        directory = manifests(self.workdir / "manifests", self.sink.url, self.canaries)
        names = ("events", "receiver", "metrics", "health", "ui")
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        args = [
            sys.executable,
            "-m",
            "notification_controller",
            "--manifests",
            str(directory),
            f"--events-addr={LOCALHOST}:{self.ports['events']}",
            f"--receiverAddr={LOCALHOST}:{self.ports['receiver']}",
            f"--metrics-addr={LOCALHOST}:{self.ports['metrics']}",
            f"--health-addr={LOCALHOST}:{self.ports['health']}",
            f"--ui-addr={LOCALHOST}:{self.ports['ui']}",
            f"--store=sqlite:{self.workdir / 'store.db'}",
            "--log-encoding=json",
            *self.args,
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(  # stopped in stop(), also when a test fails
                args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log
            )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        ready = f"http://{LOCALHOST}:{self.ports['health']}/readyz"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the controller exited ({self.proc.returncode}): {self.log()}")
            with contextlib.suppress(OSError):
                if (
                    http("GET", ready, timeout=2).status == 200
                    and http("GET", self.ui + "/", timeout=5).status == 200
                ):
                    return
            time.sleep(0.1)  # polling a process that is starting: no event to wait on
        raise AssertionError(f"the controller never became ready: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def post(self, body: dict[str, Any]) -> int:
        return http("POST", self.events_url, json.dumps(body).encode()).status

    def api(self, path: str) -> Any:
        answer = http("GET", self.ui + path)
        assert answer.status == 200, (path, answer.status, answer.text[:500])
        return answer.json()

    def records(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT
    ) -> list[dict[str, Any]]:
        """Poll ``/api/history`` until a record matches; return the matching records."""
        deadline = time.monotonic() + timeout
        while True:
            items = [r for r in self.api("/api/history?limit=1000")["items"] if predicate(r)]
            if items:
                return items
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; log: {self.log()}")
            time.sleep(0.1)  # polling the API: the test runs outside the controller's event loop

    def stop(self) -> None:
        """Stop the controller (SIGTERM) and the sinks; a second call does nothing."""
        if self.loop.loop.is_closed():
            return
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        with contextlib.suppress(Exception):
            self.loop.run(self.sink.__aexit__(None, None, None), timeout=10)
        self.loop.close()


@contextlib.contextmanager
def running_site(workdir: Path, args: tuple[str, ...] = ()) -> Iterator[Site]:
    site = Site(workdir, args)
    try:
        site.start()
        yield site
    finally:
        site.stop()
