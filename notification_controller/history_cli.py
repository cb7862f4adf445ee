"""``notification-controller history``: what the pipeline decided about past events, from the command line.

"Nothing arrived and I cannot tell why" (issue 27): ``explain`` answers for an event you have; this answers
for the events that already went by. It reads the history of decisions (``history/``, docs/history.md)
either from a running controller — ``--server http://HOST:PORT``, its UI listener's read-only JSON API
(``/api/history``, server/ui/api.py) — or from the store the controller keeps it in — ``--store
sqlite:PATH`` (the controller may be running or stopped) or ``--store nats://…`` (every replica's history).
Both ways take the same filters, checked by the same code (``server.ui.api.query_from_params``), so a
command answers the same from either.

Filters (all optional, exact matches): ``--object KIND/NAMESPACE/NAME``, ``--alert [NAMESPACE/]NAME``,
``--provider [NAMESPACE/]NAME`` (a bare name is in ``-n``, default ``flux-system``), ``--outcome`` (one word
of the vocabulary: delivered, retrying, failed, dead_lettered, suppressed, dropped, unmatched, duplicate,
refused), ``--event ID``, ``--notification ID``, ``--since``/``--until`` (a duration back from now, ``1h``,
or an RFC 3339 time), ``--limit N`` (1 to 1000, default 100). Newest first.

``-o json|yaml`` prints each record as the API does (``Record.to_json``: the Alert as ``namespace/name``,
the outcome, the stage, the reason text as ``detail``...); ``-o text`` (the default) a table whose cells
are escaped (``lib.output.escape_cell``: a record's message and detail came from outside).

Exit status: 0 shown (no record is said in words), 1 the controller or the store could not be read, 2 bad
usage (a bad filter, named). A reading command creates nothing: a SQLite file that does not exist is an
error, not a new empty database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from .history.model import OUTCOMES, Query, Record
from .lib.output import add_output_flag, dump, escape_cell, table
from .settings import add_store_access_flags

DEFAULT_NAMESPACE = "flux-system"
TIMEOUT = 15.0
"""Seconds to wait for the controller's answer or the store."""
MAX_ANSWER = 32 << 20
"""Bytes of a controller's answer read at most (1,000 records of a few KiB each fit many times)."""
DETAIL_WIDTH = 120
"""Characters of a record's detail in the text table (``-o json`` has it whole)."""
COLUMNS = ("time", "object", "alert", "provider", "outcome", "stage", "attempt", "status", "detail")


class UsageError(Exception):
    """Bad usage: exit 2."""


class SourceError(Exception):
    """The controller or the store could not be read: exit 1."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake said in one line (the usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see 'notification-controller history --help')\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="notification-controller history",
        description="Show what the controller decided about past events: delivered, failed, suppressed, "
        "dropped... newest first (docs/history.md).",
    )
    parser.add_argument("--object", metavar="KIND/NAMESPACE/NAME", help="only events about this object")
    parser.add_argument("--alert", metavar="[NAMESPACE/]NAME", help="only decisions for this Alert")
    parser.add_argument("--provider", metavar="[NAMESPACE/]NAME", help="only decisions for this Provider")
    parser.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"of a bare --alert/--provider name (default {DEFAULT_NAMESPACE})",
    )
    parser.add_argument("--outcome", metavar="OUTCOME", help=f"one of {', '.join(sorted(OUTCOMES))}")
    parser.add_argument(
        "--since", metavar="DURATION|TIME", help="newer than this: 1h (back from now) or RFC 3339"
    )
    parser.add_argument("--until", metavar="DURATION|TIME", help="older than this: 10m or RFC 3339")
    parser.add_argument(
        "--limit", metavar="N", default="100", help="at most N records, 1 to 1000 (default 100)"
    )
    parser.add_argument("--event", metavar="ID", help="only the records of this event (eventId)")
    parser.add_argument("--notification", metavar="ID", help="only the records of this notification")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--server", metavar="http://HOST:PORT", help="a running controller's --ui-addr")
    source.add_argument("--store", metavar="sqlite:PATH|nats://…", help="the controller's --store")
    add_store_access_flags(parser)
    add_output_flag(parser)
    return parser


def _namespaced(value: str | None, flag: str, namespace: str) -> str:
    if not value:
        return ""
    ns, sep, name = value.partition("/")
    if not sep:
        ns, name = namespace, value
    if not ns or not name or "/" in name:
        raise UsageError(f"--{flag}: must be NAME or NAMESPACE/NAME, got {value[:64]!r}")
    return f"{ns}/{name}"


def params_of(args: argparse.Namespace) -> dict[str, str]:
    """The API's query parameters for the flags (empty ones left out)."""
    params = {
        "object": args.object or "",
        "alert": _namespaced(args.alert, "alert", args.namespace),
        "provider": _namespaced(args.provider, "provider", args.namespace),
        "outcome": args.outcome or "",
        "event": args.event or "",
        "notification": args.notification or "",
        "since": args.since or "",
        "until": args.until or "",
        "limit": args.limit,
    }
    return {k: v for k, v in params.items() if v}


def checked_query(params: dict[str, str]) -> Query:
    """The flags checked by the API's own parser; a bad one is a ``UsageError`` naming the flag."""
    from .server.ui.api import ParamError, query_from_params

    try:
        return query_from_params(params, time.time())
    except ParamError as exc:
        raise UsageError(f"--{exc}") from None


def server_url(server: str) -> str:
    url = server if "://" in server else f"http://{server}"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--server: {server[:64]!r} is not http://HOST:PORT")
    return url.rstrip("/")


def from_server(server: str, params: dict[str, str]) -> list[Record]:
    """``/api/history`` of the running controller (its ``--ui-addr``)."""
    url = f"{server_url(server)}/api/history?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310 (http(s) only, checked)
            data = json.loads(response.read(MAX_ANSWER))
    except urllib.error.HTTPError as exc:
        message = _api_error(exc)
        if exc.code == 400:
            raise UsageError(message) from None
        raise SourceError(f"the controller at {server} answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise SourceError(f"the controller at {server} did not answer /api/history: {reason}") from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise SourceError(f"the controller at {server} answered /api/history without items")
    try:
        return [Record.from_json(item) for item in items]
    except (ValueError, TypeError) as exc:
        raise SourceError(
            f"the controller at {server} answered a record this version cannot read: {exc}"
        ) from None


def _api_error(exc: urllib.error.HTTPError) -> str:
    try:
        data = json.loads(exc.read(64 << 10))
        return escape_cell(str(data["error"]))[:300]
    except (ValueError, KeyError, TypeError, OSError):
        return str(exc.reason)[:300]


def from_store(args: argparse.Namespace, q: Query) -> list[Record]:
    """The history kept next to ``--store`` (read-only: nothing is created, nothing deleted)."""
    url = args.store.strip()
    if url == "memory":
        raise UsageError(
            "the memory store keeps the history inside the controller: read it with --server "
            "http://HOST:PORT (the controller's --ui-addr)"
        )
    if url.startswith("sqlite:"):
        path = Path(url[len("sqlite:") :].partition("?")[0])
        if not path.is_file():  # opening it would create an empty database
            raise SourceError(
                f"store unavailable: {path}: no such database file (is --store the controller's?)"
            )
    return asyncio.run(_read_store(args, q))


async def _read_store(args: argparse.Namespace, q: Query) -> list[Record]:
    from .errors import ConfigError, StoreError
    from .history.reader import open_reader
    from .settings import store_access

    try:
        history = open_reader(store_access(args.store, args))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        async with asyncio.timeout(TIMEOUT):
            await history.start()
            try:
                return await history.query(q)
            finally:
                await history.close()
    except (StoreError, TimeoutError, OSError) as exc:
        raise SourceError(f"store unavailable: {exc or 'no answer in time'}") from None


def render(records: list[Record], output: str, out: TextIO) -> None:
    if output != "text":
        dump([r.to_json() for r in records], output, out)
        return
    if not records:
        out.write("no records match\n")
        return
    rows = []
    for r in records:
        cells = {
            "time": r.to_json()["time"],
            "object": r.object,
            "alert": r.alert,
            "provider": r.provider,
            "outcome": r.outcome.value,
            "stage": r.stage,
            "attempt": str(r.attempt) if r.attempt else "",
            "status": str(r.status_code) if r.status_code is not None else "",
            "detail": r.detail,
        }
        rows.append([escape_cell(cells[c])[: DETAIL_WIDTH if c == "detail" else 200] for c in COLUMNS])
    table(COLUMNS, rows, out)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    out = out or sys.stdout
    # The store clients log their retries (a NATS server that does not answer): the one line that says why
    # is ours. Without a handler Python's last resort would print each warning on stderr.
    logging.getLogger("notification_controller").addHandler(logging.NullHandler())
    try:
        params = params_of(args)
        q = checked_query(params)
        records = from_server(args.server, params) if args.server else from_store(args, q)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    render(records, args.output, out)
    return 0
