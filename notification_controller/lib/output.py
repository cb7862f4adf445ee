"""One ``-o text|json|yaml`` vocabulary for every command, and one way to print rows.

Every subcommand (``explain``, ``send``, ``dead-letters``, ``get``, ``check``) takes the same ``-o`` values
(issue 25 item 2: two said ``text|json``, the third ``table|json``). ``json`` and ``yaml`` print the same
data; ``text`` is for people. Cells that carry input from outside (event fields, a provider's answer, a
status message) go through ``escape_cell`` first: every control character (C0, DEL, C1, Unicode format and
line/paragraph separators: ``\x1b``, ``\u009b``, ``\u202e``) and the backslash itself become escapes, so no
cell can move the cursor, clear the screen, ring the bell or fake a line (issue 23 item 12); JSON escapes
them as JSON does (``ensure_ascii``), YAML quotes them (``allow_unicode=False``).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

FORMATS = ("text", "json", "yaml")


def add_output_flag(parser: Any) -> None:
    """``-o/--output`` with the one vocabulary (``parser`` is an argparse parser or subparser)."""
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default="text", help="text (default), json or yaml"
    )


def dump(data: Any, output: str, out: TextIO) -> None:
    """``data`` as JSON (indented, ASCII: control characters escaped) or YAML (block style)."""
    if output == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=False))
    else:
        out.write(json.dumps(data, indent=2) + "\n")


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Left-aligned columns separated by two spaces, upper-case headers (as ``flux get`` and kubectl)."""
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for row in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")


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
