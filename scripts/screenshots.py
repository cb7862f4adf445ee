"""Screenshots of the web UI for docs/ui.md and the README: ``.venv/bin/python scripts/screenshots.py``.

Why a script and not hand-made pictures: the images must show what the UI serves today, so they are taken
the way the browser tests see it (tests/browser/kit.py): a real controller process in local mode with its UI,
a sink that accepts and one that refuses (400 with a provider's answer), a Silence, and Debian's headless
Chromium at a 1280×800 viewport. It posts the README's example event (examples/event.json), one event the
Silence holds and one the refusing Provider dead-letters, then saves each page as ``docs/images/ui-*.png``.
When Pillow happens to be installed the PNGs are re-encoded with ``optimize``; it is not a dependency.

Needs ``make venv`` and ``make system-deps`` (Chromium). ``--out DIR`` writes elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser.kit: the same harness as the browser tests

from selenium.webdriver.common.by import By  # noqa: E402

from tests.browser.kit import browser_missing, event, running_site, start_browser, wait_until  # noqa: E402


def optimise(path: Path) -> None:
    try:
        from PIL import Image  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return
    with Image.open(path) as image:
        image.load()
    image.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args(argv)
    why = browser_missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 1
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ui-screenshots-") as tmp:
        workdir = Path(tmp)
        with running_site(workdir / "site") as site:
            readme_event = json.loads((ROOT / "examples" / "event.json").read_text())
            assert site.post(readme_event) == 202
            assert site.post(event("frozen", "Reconciliation finished in 3.1s, next run in 10m0s")) == 202
            assert (
                site.post(
                    event(
                        "broken",
                        "Health check failed after 5m0s: timeout waiting for: [Deployment/apps/backend status: 'InProgress']",
                        reason="HealthCheckFailed",
                    )
                )
                == 202
            )
            delivered = site.records(lambda r: r["outcome"] == "delivered", "the README's event delivered")
            site.records(lambda r: r["outcome"] == "suppressed", "the frozen event held by the Silence")
            dead = site.records(lambda r: r["outcome"] == "dead_lettered", "the broken event dead-lettered")
            driver = start_browser(workdir / "profile")
            try:
                pages = {
                    "overview": "/",
                    "events": "/events",
                    "event": f"/events/{quote(delivered[0]['eventId'])}",
                    "notification": f"/notifications/{quote(delivered[0]['notificationId'])}",
                    "notification-failed": f"/notifications/{quote(dead[0]['notificationId'])}",
                    "object": "/objects/Kustomization/flux-system/apps",
                }
                for name, path in pages.items():
                    driver.get(site.ui + path)
                    wait_until(driver, lambda d: d.find_elements(By.TAG_NAME, "main"), f"{path} rendered")
                    target = out / f"ui-{name}.png"
                    driver.save_screenshot(str(target))
                    optimise(target)
                    print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
            finally:
                driver.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
