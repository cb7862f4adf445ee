"""Fixtures of the browser tests: one headless Chromium per session, one controller with its UI per module.

Where Debian's Chromium is not installed the tests skip with one line saying how to install it — except on
CI (``CI`` set), where a missing browser fails them: ``make test`` installs it (scripts/system-deps.sh).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from tests.browser.kit import Site, browser_missing, running_site, start_browser


def _require_browser() -> None:
    why = browser_missing()
    if not why:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI is set and the browser tests cannot run: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    _require_browser()
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and every Chromium process it started


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    _require_browser()
    with running_site(Path(tmp_path_factory.mktemp("ui-site"))) as running:
        yield running
