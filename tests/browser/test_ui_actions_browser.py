"""The UI's actions in a real browser: signing in, expiring a Silence, replaying a dead letter, and a
cross-site page that tries to do the same with the signed-in browser (issue 27 item 3, CSRF).

The controller runs with ``--ui-actions-token-file``. The attack page is served by the sink, a different
origin (another port of 127.0.0.1) but the *same site* for the browser, so the session cookie
(``SameSite=Strict``) is sent with its forged POST: only the server's ``Origin`` check and the CSRF token
stand in the way, which is what this test proves in Chromium rather than with a hand-made request.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from tests.browser.kit import ROOT, Site, console, event, running_site, wait_until
from tests.support.capture import Reply

TOKEN = "ui-actions-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def actions_site(tmp_path_factory: pytest.TempPathFactory, browser: WebDriver) -> Iterator[Site]:
    workdir = Path(tmp_path_factory.mktemp("ui-actions"))
    token_file = workdir / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    with running_site(workdir, (f"--ui-actions-token-file={token_file}",)) as site:
        # a Silence the UI may expire: in local mode only those the silence command wrote (a file of yours
        # is yours to edit); it holds the notifications about Kustomization "hostile"
        command = [sys.executable, "-m", "notification_controller", "silence", "add"]
        command += ["--manifests", str(workdir / "manifests"), "--match", "name=hostile", "--for", "2h"]
        command += [
            "--comment",
            "from the command line",
            "--name",
            "cli-freeze",
            "--created-by",
            "browser-tests",
        ]
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True, timeout=60)
        wait_until(
            browser, lambda _: silence_state(site, "cli-freeze") == "Active", "the CLI's Silence active"
        )
        yield site
        browser.get("about:blank")  # end the live stream before the controller stops
        browser.delete_all_cookies()


def silence_state(site: Site, name: str = "freeze") -> str:
    rows = [s for s in site.api("/api/overview")["silences"] if s["name"] == name]
    return str(rows[0]["state"]) if rows else "gone"


def test_read_only_without_signing_in(browser: WebDriver, actions_site: Site) -> None:
    browser.get(actions_site.ui + "/")
    wait_until(browser, lambda d: d.find_elements(By.ID, "silences"), "the overview")
    assert not browser.find_elements(By.CSS_SELECTOR, "form[action^='/actions/']")
    assert browser.find_element(By.LINK_TEXT, "Sign in for actions")


def test_cross_site_page_cannot_act_with_the_signed_in_browser(
    browser: WebDriver, actions_site: Site
) -> None:
    sign_in(browser, actions_site)
    assert silence_state(actions_site) == "Active"
    ui = actions_site.ui
    attack = f"""<!doctype html><title>cute cats</title>
<form method="post" action="{ui}/actions/silences/expire">
<input name="namespace" value="flux-system"><input name="name" value="freeze"><input name="csrf" value="guess">
</form><script>document.forms[0].submit()</script>"""
    actions_site.sink.on("GET", r"^/cats$", Reply(200, attack, {"Content-Type": "text/html"}))
    browser.get(actions_site.sink.url + "/cats")
    wait_until(browser, lambda d: d.current_url.startswith(ui + "/actions/"), "the forged form submitted")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Forbidden" in body and "cross-origin" in body, body
    assert silence_state(actions_site) == "Active"  # the Silence survived the forged POST
    console(browser)  # the refused navigation's 403 is logged: not this test's concern


def sign_in(browser: WebDriver, site: Site) -> None:
    browser.get(site.ui + "/login")
    field = wait_until(browser, lambda d: d.find_elements(By.NAME, "token"), "the sign-in form")[0]
    field.send_keys(TOKEN)
    field.submit()
    wait_until(
        browser,
        lambda d: (
            d.find_elements(By.ID, "silences") or "Forbidden" in d.find_element(By.TAG_NAME, "body").text
        ),
        "the answer to signing in",
    )
    assert browser.find_elements(By.ID, "silences"), browser.find_element(By.TAG_NAME, "body").text
    assert "Sign out" in browser.find_element(By.TAG_NAME, "nav").text


def test_sign_in_expire_a_silence_and_replay_a_dead_letter(browser: WebDriver, actions_site: Site) -> None:
    assert actions_site.post(event("broken", "Health check failed", reason="HealthCheckFailed")) == 202
    actions_site.records(lambda r: r["outcome"] == "dead_lettered", "a dead letter")
    sign_in(browser, actions_site)
    browser.get(actions_site.ui + "/")
    replay = wait_until(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#dead-letters form[action$='/replay'] button"),
        "the Replay button",
    )[0]
    replay.click()
    title = wait_until(
        browser,
        lambda d: d.current_url.endswith("/replay") and d.find_element(By.TAG_NAME, "h1").text,
        "replay",
    )
    assert title == "Replayed", browser.find_element(By.TAG_NAME, "main").text
    # the replayed notification is sent again: a second request reaches the refusing endpoint
    wait_until(
        browser,
        lambda _: len([r for r in actions_site.sink.requests if r.path == "/archived"]) >= 2,
        "the replayed notification sent again",
    )

    assert actions_site.post(event("hostile", "Held by the CLI's Silence")) == 202
    actions_site.records(lambda r: r["message"] == "Held by the CLI's Silence", "held first")
    browser.get(actions_site.ui + "/")
    row = wait_until(
        browser,
        lambda d: [
            r for r in d.find_elements(By.CSS_SELECTOR, "#silences tbody tr") if "cli-freeze" in r.text
        ],
        "the CLI's Silence listed",
    )[0]
    row.find_element(By.CSS_SELECTOR, "form[action$='/expire'] button").click()
    title = wait_until(
        browser,
        lambda d: d.current_url.endswith("/expire") and d.find_element(By.TAG_NAME, "h1").text,
        "expiry",
    )
    assert title == "Expired", browser.find_element(By.TAG_NAME, "main").text
    wait_until(browser, lambda _: silence_state(actions_site, "cli-freeze") != "Active", "the Silence ended")
    # what it held is delivered now
    assert actions_site.post(event("hostile", "Delivered after the expiry")) == 202
    actions_site.records(
        lambda r: r["message"] == "Delivered after the expiry" and r["outcome"] == "delivered", "delivered"
    )
