"""An example ``pre-dispatch`` hook (Hooks API v1, docs/hooks.md): runbook links and office hours.

For every notification the controller is about to send, this service

* **adds a runbook link** to the event metadata (``runbook``): ``<base>/<page>`` where ``<base>`` is the
  Alert's ``eventMetadata.runbook_base`` (else ``--runbook-base``) and ``<page>`` the Alert's label
  ``runbooks.example.com/page`` (else ``<kind>/<namespace>/<name>`` of the object the event is about);
  the ``runbook_base`` key itself is removed from the metadata (it is configuration, not news);
* **vetoes** (``{"drop": true}``) ``info`` notifications outside office hours. ``error`` notifications always
  go through: silencing failures at night is how incidents start. Hours, days and time zone come from
  ``OFFICE_HOURS`` (``09:00-18:00``), ``OFFICE_DAYS`` (``mon-fri``) and ``OFFICE_TZ`` (``UTC``);
  ``--always-open`` disables the veto (demos).

With ``HOOK_HMAC_KEY`` set, requests must carry ``X-Signature: sha256=<hex HMAC-SHA256(key, body)>`` (the
hook's ``secretRef`` token); anything else is refused with a permanent error. Other phases are answered
with ``{}`` (no change).

Run: ``python examples/hooks/enricher.py --port 9595 [--always-open]``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web

PAGE_LABEL = "runbooks.example.com/page"
RUNBOOK_BASE_KEY = "runbook_base"
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def parse_days(text: str) -> frozenset[int]:
    """``mon-fri`` or ``mon,wed,sat`` → weekday numbers (Monday = 0)."""
    out: set[int] = set()
    for part in text.lower().replace(" ", "").split(","):
        first, _, last = part.partition("-")
        start = DAYS.index(first)
        end = DAYS.index(last) if last else start
        out.update(range(start, end + 1))
    return frozenset(out)


def parse_hours(text: str) -> tuple[time, time]:
    """``09:00-18:00`` → (09:00, 18:00)."""
    start, _, end = text.partition("-")
    return time.fromisoformat(start.strip()), time.fromisoformat(end.strip())


@dataclass(frozen=True)
class Settings:
    runbook_base: str = "https://runbooks.example.com"
    opens: time = time(9)
    closes: time = time(18)
    days: frozenset[int] = frozenset(range(5))
    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    always_open: bool = False
    hmac_key: bytes | None = None
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def is_open(self) -> bool:
        if self.always_open:
            return True
        local = self.now().astimezone(self.tz)
        return local.weekday() in self.days and self.opens <= local.time() < self.closes


def answer(request: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The Hooks API v1 answer to one request (pure: the HTTP layer is below)."""
    if request.get("phase") != "pre-dispatch":
        return {}
    event = request["event"]
    alert = request.get("alert") or {}
    if event.get("severity") != "error" and not settings.is_open():
        hours = f"{settings.opens:%H:%M}-{settings.closes:%H:%M} {settings.tz.key}"
        return {"drop": True, "message": f"outside office hours ({hours})"}
    metadata = dict(event.get("metadata") or {})
    event_metadata = (alert.get("spec") or {}).get("eventMetadata") or {}
    base = (event_metadata.get(RUNBOOK_BASE_KEY) or settings.runbook_base).rstrip("/")
    metadata.pop(RUNBOOK_BASE_KEY, None)
    labels = (alert.get("metadata") or {}).get("labels") or {}
    obj = event.get("involvedObject") or {}
    page = (
        labels.get(PAGE_LABEL)
        or f"{str(obj.get('kind', '')).lower()}/{obj.get('namespace')}/{obj.get('name')}"
    )
    metadata["runbook"] = f"{base}/{page}"
    return {"event": {"metadata": metadata}}


def create_app(settings: Settings) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        if settings.hmac_key is not None:
            expected = "sha256=" + hmac.new(settings.hmac_key, body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(request.headers.get("X-Signature", "").encode(), expected.encode()):
                return web.json_response({"message": "invalid X-Signature", "permanent": True}, status=401)
        try:
            payload = json.loads(body)
        except ValueError:
            return web.json_response({"message": "request body is not JSON", "permanent": True}, status=400)
        if not isinstance(payload, dict) or payload.get("version") != "v1":
            return web.json_response(
                {"message": "only Hooks API v1 is implemented", "permanent": True}, status=400
            )
        return web.json_response(answer(payload, settings))

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_post("/hook", hook)
    return app


def settings_from(args: argparse.Namespace, env: dict[str, str]) -> Settings:
    opens, closes = parse_hours(env.get("OFFICE_HOURS", "09:00-18:00"))
    key = env.get("HOOK_HMAC_KEY")
    return Settings(
        runbook_base=args.runbook_base,
        opens=opens,
        closes=closes,
        days=parse_days(env.get("OFFICE_DAYS", "mon-fri")),
        tz=ZoneInfo(env.get("OFFICE_TZ", "UTC")),
        always_open=args.always_open,
        hmac_key=key.encode() if key else None,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9595)
    parser.add_argument("--runbook-base", default="https://runbooks.example.com")
    parser.add_argument("--always-open", action="store_true", help="never veto (office hours ignored)")
    args = parser.parse_args(argv)
    settings = settings_from(args, dict(os.environ))
    print(f"enricher hook listening on http://{args.host}:{args.port}/hook", flush=True)
    web.run_app(create_app(settings), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main(sys.argv[1:])
