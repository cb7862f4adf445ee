"""The web UI in a real browser (issue 27 item 4): Debian's headless Chromium against a real controller.

What a newcomer does after ``make run`` — post an event, open the UI — done by Chromium on a controller
process in local mode (tests/browser/kit.py): the README's example event is delivered to a real sink, an
event about ``frozen`` is held by a Silence, an event about ``broken`` goes to a Provider whose endpoint
answers 400 and is dead-lettered. The tests read what the pages show, click from an event to its
notification and from an object to its history, watch a new event appear without a reload, post a hostile
event (``<script>`` in the message, the metadata and a 64 KB reason) and check that nothing of it runs,
look for the Provider's secrets on every page and API answer, and check that the CSP blocks inline script.

Every wait is explicit (WebDriverWait or a poll of the API with a deadline); nothing sleeps and hopes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from tests.browser.kit import (
    PROVIDER_ANSWER,
    Site,
    console,
    event,
    http,
    running_site,
    start_browser,
    wait_live,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
README_EVENT = json.loads((ROOT / "examples" / "event.json").read_text(encoding="utf-8"))
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HOSTILE = (
    "<script>window.__pwned='script';alert('script')</script>"
    "<img src=x onerror=\"window.__pwned='img';alert('img')\">"
    "<svg onload=\"window.__pwned='svg'\"></svg>"
    "</td></tr></table><iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>"
    "{{ 7*7 }}"
)
INERT = """
const bad = document.querySelectorAll(
  'script:not([src="/static/live.js"]), iframe, img, svg, object, embed, [onerror], [onload]');
return {pwned: window.__pwned === undefined ? null : String(window.__pwned), injected: bad.length};
"""


@dataclass
class Posted:
    delivered: dict[str, Any]  # the README's event: its delivered record
    suppressed: dict[str, Any]  # frozen: held by the Silence
    dead: dict[str, Any]  # broken: dead-lettered after the provider's 400


@pytest.fixture(scope="module")
def posted(site: Site) -> Posted:
    assert site.post(README_EVENT) == 202
    assert site.post(event("frozen", "Reconciliation finished in 3.1s, next run in 10m0s")) == 202
    assert site.post(event("broken", "Health check failed after 5m0s", reason="HealthCheckFailed")) == 202
    delivered = site.records(
        lambda r: r["outcome"] == "delivered" and r["object"] == "Kustomization/flux-system/apps",
        "the README's event delivered",
    )
    suppressed = site.records(
        lambda r: r["outcome"] == "suppressed" and r["object"] == "Kustomization/flux-system/frozen",
        "the frozen event held by the Silence",
    )
    dead = site.records(
        lambda r: r["outcome"] == "dead_lettered" and r["object"] == "Kustomization/flux-system/broken",
        "the broken event dead-lettered",
    )
    return Posted(delivered[0], suppressed[0], dead[0])


@pytest.fixture
def page(browser: WebDriver, site: Site) -> Iterator[WebDriver]:
    """The browser, its console emptied before the test and checked for script errors after."""
    console(browser)
    yield browser
    browser.get("about:blank")  # ends the page's live stream (test_stop_with_a_live_page_open is about it)
    errors = [
        e
        for e in console(browser)
        if e["level"] == "SEVERE" and e.get("source") in ("javascript", "security")
    ]
    assert not errors, errors


def load(driver: WebDriver, site: Site, path: str) -> None:
    driver.get(site.ui + path)
    wait_until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "main h1"), f"{path} rendered")


def event_group(driver: WebDriver, event_id: str) -> WebElement:
    return wait_until(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tbody.event[data-event="{event_id}"]'),
        f"event {event_id} listed",
    )[0]


def outcomes(group: WebElement) -> list[str]:
    return [e.text for e in group.find_elements(By.CSS_SELECTOR, "tr.decision .outcome")]


def assert_inert(driver: WebDriver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.accept()  # an alert() that ran would be open now
    state = driver.execute_script(INERT)
    assert state == {"pwned": None, "injected": 0}, state


def test_events_page_shows_delivered_suppressed_and_dead_lettered(
    page: WebDriver, site: Site, posted: Posted
) -> None:
    load(page, site, "/events")
    delivered = event_group(page, posted.delivered["eventId"])
    assert "Kustomization/flux-system/apps" in delivered.text
    assert README_EVENT["message"] in delivered.text
    assert outcomes(delivered) == ["delivered"]
    assert "flux-system/webhook" in delivered.text

    held = event_group(page, posted.suppressed["eventId"])
    assert outcomes(held) == ["suppressed"]
    assert posted.suppressed["stage"].startswith(
        "silence"
    )  # the recorder says "silenced" (the metric's reason)
    assert "silence" in held.text and "freeze" in held.text  # which stage, which Silence

    dead = event_group(page, posted.dead["eventId"])
    assert "dead_lettered" in outcomes(dead)
    assert "flux-system/archived" in dead.text
    assert "400" in dead.text

    # readable without JavaScript: the server-rendered page holds all three already
    raw = http("GET", site.ui + "/events").text
    for record in (posted.delivered, posted.suppressed, posted.dead):
        assert f'data-event="{record["eventId"]}"' in raw

    # the filters are plain query parameters: the page shows only the dead letter's event
    load(page, site, "/events?outcome=dead_lettered")
    listed = {e.get_attribute("data-event") for e in page.find_elements(By.CSS_SELECTOR, "tbody.event")}
    assert posted.dead["eventId"] in listed
    assert not listed & {posted.delivered["eventId"], posted.suppressed["eventId"]}


def test_click_from_an_event_to_its_notification(page: WebDriver, site: Site, posted: Posted) -> None:
    load(page, site, "/events")
    group = event_group(page, posted.delivered["eventId"])
    group.find_element(By.CSS_SELECTOR, "tr.event-head a[href^='/events/']").click()
    wait_until(
        page,
        lambda d: "/events/" in d.current_url and d.find_elements(By.CSS_SELECTOR, "section.notification"),
        "the event page",
    )
    assert posted.delivered["eventId"] in page.find_element(By.TAG_NAME, "h1").text
    assert README_EVENT["message"] in page.find_element(By.CSS_SELECTOR, "table.facts").text
    section = page.find_element(By.CSS_SELECTOR, "section.notification")
    assert "flux-system/apps" in section.text and "flux-system/webhook" in section.text
    section.find_element(By.LINK_TEXT, "notification").click()
    wait_until(page, lambda d: "/notifications/" in d.current_url, "the notification page")
    facts = wait_until(page, lambda d: d.find_elements(By.CSS_SELECTOR, "table.facts"), "its facts")[0].text
    assert posted.delivered["notificationId"] in page.find_element(By.TAG_NAME, "h1").text
    assert "flux-system/webhook" in facts and "generic-hmac" in facts and "delivered" in facts
    sent = page.find_element(By.XPATH, "//table[@class='facts']//tr[th='Sent']/td/code").text
    assert sent.startswith("POST http://127.0.0.1:"), sent
    assert site.canaries.path not in sent
    attempts = page.find_elements(By.XPATH, "//h2[.='Attempts']/following-sibling::table[1]/tbody/tr")
    assert attempts and "200" in attempts[-1].text


def test_failed_notification_shows_the_provider_answer(page: WebDriver, site: Site, posted: Posted) -> None:
    load(page, site, f"/notifications/{quote(posted.dead['notificationId'])}")
    facts = page.find_element(By.CSS_SELECTOR, "table.facts").text
    assert "flux-system/archived" in facts and "dead_lettered" in facts
    answers = page.find_elements(By.XPATH, "//h2[.='Attempts']/following-sibling::table[1]/tbody/tr")
    text = "\n".join(a.text for a in answers)
    assert "400" in text
    assert "channel_is_archived" in text, text  # the provider's own words, without reading a log
    assert json.loads(PROVIDER_ANSWER)["error"] == "channel_is_archived"


def test_click_from_an_object_to_its_history(page: WebDriver, site: Site, posted: Posted) -> None:
    load(page, site, "/events")
    group = event_group(page, posted.delivered["eventId"])
    group.find_element(By.LINK_TEXT, "Kustomization/flux-system/apps").click()
    wait_until(
        page, lambda d: d.current_url.endswith("/objects/Kustomization/flux-system/apps"), "the object page"
    )
    assert page.find_element(By.TAG_NAME, "h1").text == "Kustomization/flux-system/apps"
    listed = {e.get_attribute("data-event") for e in page.find_elements(By.CSS_SELECTOR, "tbody.event")}
    assert posted.delivered["eventId"] in listed
    assert posted.dead["eventId"] not in listed  # only this object's events

    # and from the overview's objects to an Alert's decisions
    load(page, site, "/")
    page.find_element(By.CSS_SELECTOR, "#objects a[href='/objects/Alert/flux-system/broken']").click()
    wait_until(
        page, lambda d: d.current_url.endswith("/objects/Alert/flux-system/broken"), "the Alert's page"
    )
    assert "True" in page.find_element(By.CSS_SELECTOR, "table.facts").text  # READY
    listed = {e.get_attribute("data-event") for e in page.find_elements(By.CSS_SELECTOR, "tbody.event")}
    assert posted.dead["eventId"] in listed  # this Alert's decisions only
    assert not listed & {posted.delivered["eventId"], posted.suppressed["eventId"]}


def test_overview_shows_status_provider_health_dead_letters_and_silences(
    page: WebDriver, site: Site, posted: Posted
) -> None:
    load(page, site, "/")
    objects = page.find_element(By.ID, "objects").text
    for name in ("apps", "broken", "webhook", "archived"):
        assert name in objects
    health = page.find_element(By.ID, "provider-health")
    rows = {
        r.find_element(By.TAG_NAME, "td").text: r.text
        for r in health.find_elements(By.CSS_SELECTOR, "tbody tr")
    }
    assert set(rows) >= {"flux-system/webhook", "flux-system/archived"}
    assert "400" in rows["flux-system/archived"]
    dead = page.find_element(By.ID, "dead-letters").text
    assert "flux-system/archived" in dead and "permanent" in dead
    silences = page.find_element(By.ID, "silences").text
    assert "freeze" in silences and "Active" in silences and "deploy freeze for the browser tests" in silences


def test_pages_work_without_javascript(site: Site, posted: Posted, tmp_path: Path) -> None:
    """Readable without JavaScript: the rows are on the server-rendered page, the filter form and the links
    work, and the "refresh" link brings what happened since."""
    driver = start_browser(tmp_path / "profile", javascript=False)
    try:
        load(driver, site, "/events")
        event_group(driver, posted.delivered["eventId"])
        Select(driver.find_element(By.NAME, "outcome")).select_by_value("suppressed")
        driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        wait_until(driver, lambda d: "outcome=suppressed" in d.current_url, "the filtered page")
        listed = {e.get_attribute("data-event") for e in driver.find_elements(By.CSS_SELECTOR, "tbody.event")}
        assert posted.suppressed["eventId"] in listed
        assert posted.delivered["eventId"] not in listed
        message = "Seen after a refresh, without JavaScript"
        assert site.post(event("frozen", message)) == 202
        site.records(lambda r: r["message"] == message, "the new event recorded")
        assert message not in driver.find_element(By.ID, "events").text  # nothing live without scripts
        assert driver.execute_script("return window.__streamsOpen") == 0  # live.js never ran
        driver.find_element(By.ID, "refresh").click()
        wait_until(driver, lambda d: message in d.find_element(By.ID, "events").text, "the refreshed page")
    finally:
        driver.quit()


def test_a_new_event_appears_without_reload(page: WebDriver, site: Site, posted: Posted) -> None:
    load(page, site, "/events")
    wait_live(page)
    page.execute_script("window.__sameDocument = 'yes'")  # a reload would forget it
    message = "Live: reconciliation finished in 0.4s"
    assert site.post(event("apps", message)) == 202
    row = wait_until(
        page,
        lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, "#events tbody.event") if message in e.text],
        "the new event on the open page",
    )[0]
    assert page.execute_script("return window.__sameDocument") == "yes"
    first = page.find_elements(By.CSS_SELECTOR, "#events tbody.event")[0]
    assert first == row  # newest first
    wait_until(page, lambda _: "delivered" in outcomes(row), "its delivery shown live")


def test_live_updates_keep_the_page_filter(page: WebDriver, site: Site, posted: Posted) -> None:
    load(page, site, "/events?outcome=dead_lettered")
    wait_live(page)
    page.execute_script("window.__sameDocument = 'yes'")
    other = "Live, but delivered: not for this page"
    assert site.post(event("apps", other)) == 202
    site.records(lambda r: r["message"] == other and r["outcome"] == "delivered", "the delivered event")
    wanted = "Live and dead-lettered: health check failed"
    assert site.post(event("broken", wanted, reason="HealthCheckFailed")) == 202
    wait_until(
        page,
        lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, "#events tbody.event") if wanted in e.text],
        "the dead-lettered event on the filtered page",
    )
    # the stream is in order: the delivered record went by before this one, and was left out
    assert other not in page.find_element(By.ID, "events").text
    assert page.execute_script("return window.__sameDocument") == "yes"


def test_hostile_event_renders_inert(page: WebDriver, site: Site, posted: Posted) -> None:
    load(page, site, "/events")
    wait_live(page)
    page.execute_script("window.__sameDocument = 'yes'")
    reason = ("<script>alert('reason')</script>" * 2048)[: 64 * 1024]
    body = event("hostile", HOSTILE, reason=reason, **{"<script>alert('key')</script>": HOSTILE})
    body["metadata"]["summary"] = HOSTILE
    assert site.post(body) == 202
    # the live path first: the row arrives through live.js while the page is open
    row = wait_until(
        page,
        lambda d: [
            e for e in d.find_elements(By.CSS_SELECTOR, "#events tbody.event") if "window.__pwned" in e.text
        ],
        "the hostile event on the open page",
    )[0]
    assert "<script>window.__pwned='script'" in row.text  # shown as text, not run
    assert_inert(page)
    assert page.execute_script("return window.__sameDocument") == "yes"

    record = site.records(lambda r: r["object"] == "Kustomization/flux-system/hostile", "the hostile event")[
        0
    ]
    paths = [
        "/events",
        f"/events/{quote(record['eventId'])}",
        "/objects/Kustomization/flux-system/hostile",
        "/",
    ]
    if record["notificationId"]:
        paths.append(f"/notifications/{quote(record['notificationId'])}")
    for path in paths:
        load(page, site, path)
        assert_inert(page)
        # still usable: the navigation works and the page is not one endless line
        width = page.execute_script("return document.documentElement.scrollWidth")
        assert width <= 1280 * 2, (path, width)
    page.find_element(By.LINK_TEXT, "Events").click()
    wait_until(page, lambda d: d.current_url.endswith("/events"), "the navigation after the hostile pages")
    event_group(page, record["eventId"])


def test_canary_secrets_on_no_page_and_no_api_answer(page: WebDriver, site: Site, posted: Posted) -> None:
    # the secrets were used: the sink got the secret path, the header and a signature made with the token
    captured = [r for r in site.sink.requests if r.path.startswith("/hooks/")]
    assert captured, "the webhook Provider never posted"
    assert site.canaries.path in captured[0].path
    assert captured[0].headers["Authorization"] == f"Bearer {site.canaries.header}"
    assert captured[0].headers["X-Signature"].startswith("sha256=")

    delivered, dead = posted.delivered, posted.dead
    pages = [
        "/",
        "/events",
        "/events?provider=flux-system/webhook",
        f"/events/{quote(delivered['eventId'])}",
        f"/notifications/{quote(delivered['notificationId'])}",
        f"/notifications/{quote(dead['notificationId'])}",
        "/objects/Provider/flux-system/webhook",
        "/objects/Alert/flux-system/apps",
        "/objects/Kustomization/flux-system/apps",
    ]
    apis = [
        "/api/overview",
        "/api/history?limit=1000",
        f"/api/events/{quote(delivered['eventId'])}",
        f"/api/notifications/{quote(delivered['notificationId'])}",
        f"/api/notifications/{quote(dead['notificationId'])}",
    ]
    for path in pages:
        load(page, site, path)
        source = page.page_source
        raw = http("GET", site.ui + path)
        assert raw.status == 200, path
        for canary in site.canaries.all():
            assert canary not in source, (path, canary)
            assert canary not in raw.text, (path, canary)
    for path in apis:
        answer = http("GET", site.ui + path)
        assert answer.status == 200, (path, answer.status)
        for canary in site.canaries.all():
            assert canary not in answer.text, (path, canary)


def test_csp_headers_and_inline_script_blocked(page: WebDriver, site: Site, posted: Posted) -> None:
    for path in ("/", "/events", "/static/live.js", "/api/overview", "/no-such-page"):
        headers = {k.lower(): v for k, v in http("GET", site.ui + path).headers.items()}
        assert headers["content-security-policy"] == CSP, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"] in ("no-referrer", "same-origin"), (
            path
        )  # no id leaves for another site
    load(page, site, "/events")
    console(page)
    page.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.__inline = 1';"
        "document.body.appendChild(s);"
    )
    violations = wait_until(
        page,
        lambda d: [
            e
            for e in console(d)
            if e.get("source") == "security" and "Content Security Policy" in e["message"]
        ],
        "the browser to report the CSP violation",
    )
    assert "script-src" in violations[0]["message"]
    assert page.execute_script("return window.__inline === undefined")
    # the page's own script (served from 'self') did run: live updates are wired
    assert page.execute_script("return document.querySelector('script[src=\"/static/live.js\"]') !== null")


def test_stop_with_a_live_page_open(browser: WebDriver, tmp_path: Path) -> None:
    """A browser tab left open on /events must not delay a rollout: SIGTERM drains deliveries within
    --shutdown-grace, and a UI stream that holds the listener eats Kubernetes' 30 s before the drain starts."""
    with running_site(tmp_path) as other:
        load(browser, other, "/events")
        wait_live(browser)
        message = "Live before the stop"
        assert other.post(event("apps", message)) == 202
        wait_until(
            browser,
            lambda d: [
                e for e in d.find_elements(By.CSS_SELECTOR, "#events tbody.event") if message in e.text
            ],
            "the stream connected (a live row)",
        )
        started = time.monotonic()
        other.stop()
        took = time.monotonic() - started
    browser.get("about:blank")
    assert took < 5.0, f"the controller took {took:.1f}s to stop with a live page open"
