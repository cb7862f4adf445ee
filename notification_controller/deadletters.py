"""``python -m notification_controller dead-letters list|replay|drop``: act on what was given up on.

A durable store (``--store=sqlite:…`` or ``nats://…``) keeps every notification that was not delivered
within ``--delivery-max-age``, or that its provider refused for good, as a *dead letter* with its last
(masked) error. This command lists them, puts them back in the outbox (``replay``: a running controller
delivers them again, attempts counted afresh) or forgets them (``drop``). It talks to the store directly,
so it works while the controller runs (NATS, or SQLite's WAL allows a second connection) or is stopped.

Exit status: 0 done, 1 the store could not be used, 2 bad usage.

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
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from .errors import ConfigError, StoreError
from .settings import StoreSettings
from .state import DeadLetter, Store, store_from_settings

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
        prog="python -m notification_controller dead-letters",
        description="List, replay or drop the notifications a durable store gave up on (docs/delivery.md).",
    )
    parser.add_argument("action", choices=("list", "replay", "drop"))
    parser.add_argument(
        "--store", required=True, help="the controller's --store URL (sqlite:PATH or nats://…)"
    )
    parser.add_argument("--alert", metavar="NS/NAME", help="only dead letters of this Alert")
    parser.add_argument("--provider", metavar="NS/NAME", help="only dead letters of this Provider")
    parser.add_argument(
        "--id", dest="ids", action="append", default=[], metavar="ID", help="only these (repeat)"
    )
    parser.add_argument("--all", action="store_true", help="replay/drop: every dead letter (when no filter)")
    parser.add_argument("--output", "-o", choices=("table", "json"), default="table")
    for name in ("nats_creds", "nats_password_file", "nats_tls_ca", "nats_tls_cert", "nats_tls_key"):
        parser.add_argument("--store-" + name.replace("_", "-"), dest=name, type=Path)
    parser.add_argument("--store-nats-user", dest="nats_user", default="")
    return parser


def _namespaced(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    ns, sep, name = value.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise ConfigError(f"--{what} must be NAMESPACE/NAME, got {value!r}")
    return value


async def _select(store: Store, args: argparse.Namespace) -> list[DeadLetter]:
    letters = await store.dead_letters(provider=args.provider, limit=LIST_LIMIT)
    if args.alert is not None:
        letters = [d for d in letters if describe(d)["alert"] == args.alert]
    if args.ids:
        wanted = set(args.ids)
        letters = [d for d in letters if d.id in wanted]
    return letters


async def run(args: argparse.Namespace, out: TextIO) -> int:
    settings = StoreSettings(
        url=args.store,
        nats_creds=args.nats_creds,
        nats_user=args.nats_user,
        nats_password_file=args.nats_password_file,
        nats_tls_ca=args.nats_tls_ca,
        nats_tls_cert=args.nats_tls_cert,
        nats_tls_key=args.nats_tls_key,
    )
    store = store_from_settings(settings, retain=False)  # only the controller deletes, by its own limits
    if not store.durable:
        raise ConfigError(
            "the memory store keeps nothing outside the controller: use the controller's durable --store"
        )
    await store.start()
    try:
        letters = await _select(store, args)
        if args.action == "list":
            rows = [describe(d) for d in letters]
            if args.output == "json":
                json.dump(rows, out, indent=2)
                out.write("\n")
            else:
                _table(rows, out)
            return 0
        ids = [d.id for d in letters]
        done = await (store.replay(ids) if args.action == "replay" else store.drop(ids)) if ids else 0
        verb = "replayed" if args.action == "replay" else "dropped"
        if args.output == "json":
            json.dump({verb: done, "ids": ids}, out)
            out.write("\n")
        else:
            out.write(f"{verb} {done} dead letter{'s' if done != 1 else ''}\n")
        return 0
    finally:
        await store.close()


_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Control (C0, DEL, C1), format (bidi overrides, zero-width), lone surrogates, line/paragraph separators."""


def escape_cell(text: str) -> str:
    """``text`` with nothing a terminal would act on: each unsafe character as a Python-style escape."""
    if text.isprintable() and "\\" not in text:  # the common case, in C
        return text
    out = []
    for ch in text:
        short = _SHORT_ESCAPES.get(ch)
        if short is not None:
            out.append(short)
        elif unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            code = ord(ch)
            out.append(
                f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
            )
        else:
            out.append(ch)
    return "".join(out)


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    columns = ("id", "alert", "provider", "object", "attempts", "deadAt", "reason", "error")
    cells = [[escape_cell(str(r[c]))[:120] for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    out = out or sys.stdout
    try:
        _namespaced(args.alert, "alert")
        _namespaced(args.provider, "provider")
        if args.action != "list" and not (args.ids or args.alert or args.provider or args.all):
            raise ConfigError(f"{args.action} needs --id, --alert, --provider or --all")
        return asyncio.run(run(args, out))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"error: store unavailable: {exc}", file=sys.stderr)
        return 1
