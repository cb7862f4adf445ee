"""``notification-controller dead-letters list|replay|drop``: act on what was given up on.

A durable store (``--store=sqlite:…`` or ``nats://…``) keeps every notification that was not delivered
within ``--delivery-max-age``, or that its provider refused for good, as a *dead letter* with its last
(masked) error. This command lists them, puts them back in the outbox (``replay``: a running controller
delivers them again, attempts counted afresh) or forgets them (``drop``). It talks to the store directly,
so it works while the controller runs (NATS, or SQLite's WAL allows a second connection) or is stopped.

Exit status: 0 done, 1 the store could not be used, 2 bad usage.

A reading command creates nothing: a SQLite file that does not exist is an error (exit 1), not a new empty
database (``--store sqlite:/typo.db`` said "nothing here" and left a file behind, issue 25 item 2). ``--alert``
and ``--provider`` take ``NAME`` (in ``-n``, default ``flux-system``) or ``NAMESPACE/NAME``; ``-o
text|json|yaml`` as every command; an empty list says so in words.

Everything it prints came from outside: event names, reasons and messages from whoever could POST an event,
errors from the provider's answer. The table escapes every control character (C0, DEL, C1, Unicode format
and line/paragraph separators: ``\x1b``, ``\u009b``, ``\u202e``) and the backslash itself, so no cell can
move the cursor, clear the screen, ring the bell or fake a line (issue 23 item 12); ``-o json`` escapes
them as JSON does (``ensure_ascii``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from .errors import ConfigError, StoreError
from .lib.output import add_output_flag, dump, escape_cell, table
from .settings import add_store_access_flags, store_access
from .store import DeadLetter, Store, store_from_settings

LIST_LIMIT = 100_000


def describe(letter: DeadLetter) -> dict[str, Any]:
    """What a person needs to recognise a dead letter: its Alert, object, reason and error."""
    alert = obj = reason = ""
    try:
        data = json.loads(letter.payload)
    except ValueError:
        data = None
    if isinstance(data, dict):
        ref = data.get("alert")
        if isinstance(ref, dict):
            alert = f"{ref.get('namespace', '')}/{ref.get('name', '')}"
        event = data.get("event")
        if isinstance(event, dict):
            involved = event.get("involvedObject")
            if isinstance(involved, dict):
                obj = f"{involved.get('kind', '')}/{involved.get('namespace', '')}/{involved.get('name', '')}"
            reason = str(event.get("reason", ""))
    return {
        "id": letter.id,
        "provider": letter.provider,
        "alert": alert,
        "object": obj,
        "eventReason": reason,
        "attempts": letter.attempts,
        "enqueuedAt": _time(letter.enqueued_at),
        "deadAt": _time(letter.dead_at),
        "reason": letter.reason,
        "error": letter.error,
    }


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="notification-controller dead-letters",
        description="List, replay or drop the notifications a durable store gave up on (docs/delivery.md).",
    )
    parser.add_argument("action", choices=("list", "replay", "drop"))
    parser.add_argument(
        "--store", required=True, help="the controller's --store URL (sqlite:PATH or nats://…)"
    )
    parser.add_argument("--alert", metavar="[NS/]NAME", help="only dead letters of this Alert")
    parser.add_argument("--provider", metavar="[NS/]NAME", help="only dead letters of this Provider")
    parser.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"of a bare --alert/--provider name (default {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--id", dest="ids", action="append", default=[], metavar="ID", help="only these (repeat)"
    )
    parser.add_argument("--all", action="store_true", help="replay/drop: every dead letter (when no filter)")
    add_output_flag(parser)
    add_store_access_flags(parser)
    return parser


DEFAULT_NAMESPACE = "flux-system"


def _namespaced(value: str | None, what: str, namespace: str = DEFAULT_NAMESPACE) -> str | None:
    if value is None:
        return None
    ns, sep, name = value.partition("/")
    if not sep:
        ns, name = namespace, value
    if not ns or not name or "/" in name:
        raise ConfigError(f"--{what} must be NAME or NAMESPACE/NAME, got {value!r}")
    return f"{ns}/{name}"


def _require_existing(store: Store) -> None:
    """A SQLite store must already exist: opening it would create an empty database."""
    path = getattr(store, "path", None)
    if isinstance(path, Path) and not path.is_file():
        raise StoreError(f"{path}: no such database file (is --store the controller's?)")


async def _select(store: Store, args: argparse.Namespace) -> list[DeadLetter]:
    letters = await store.dead_letters(provider=args.provider, limit=LIST_LIMIT)
    if args.alert is not None:
        letters = [d for d in letters if describe(d)["alert"] == args.alert]
    if args.ids:
        wanted = set(args.ids)
        letters = [d for d in letters if d.id in wanted]
    return letters


async def run(args: argparse.Namespace, out: TextIO) -> int:
    store = store_from_settings(
        store_access(args.store, args), retain=False
    )  # only the controller deletes, by its own limits
    if not store.durable:
        raise ConfigError(
            "the memory store keeps nothing outside the controller: use the controller's durable --store"
        )
    _require_existing(store)
    await store.start()
    try:
        letters = await _select(store, args)
        if args.action == "list":
            rows = [describe(d) for d in letters]
            if args.output != "text":
                dump(rows, args.output, out)
            elif not rows:
                out.write("no dead letters\n")
            else:
                _table(rows, out)
            return 0
        ids = [d.id for d in letters]
        done = await (store.replay(ids) if args.action == "replay" else store.drop(ids)) if ids else 0
        verb = "replayed" if args.action == "replay" else "dropped"
        if args.output != "text":
            dump({verb: done, "ids": ids}, args.output, out)
        else:
            out.write(f"{verb} {done} dead letter{'s' if done != 1 else ''}\n")
        return 0
    finally:
        await store.close()


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    columns = ("id", "alert", "provider", "object", "attempts", "deadAt", "reason", "error")
    table(columns, [[escape_cell(str(r[c]))[:120] for c in columns] for r in rows], out)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    out = out or sys.stdout
    try:
        args.alert = _namespaced(args.alert, "alert", args.namespace)
        args.provider = _namespaced(args.provider, "provider", args.namespace)
        if args.action != "list" and not (args.ids or args.alert or args.provider or args.all):
            raise ConfigError(f"{args.action} needs --id, --alert, --provider or --all")
        return asyncio.run(run(args, out))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"error: store unavailable: {exc}", file=sys.stderr)
        return 1
