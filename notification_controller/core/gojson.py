"""JSON encoded byte-for-byte like Go's ``encoding/json``.

Signatures (generic-hmac ``X-Signature``) and digests (Matrix transaction id) are computed over the
exact bytes Flux would send, so a receiver verifying them sees the same values whichever controller
sent them (reference §4.0, §9): compact separators, UTF-8 kept as is, ``<``, ``>``, ``&``, U+2028 and
U+2029 escaped as ``\\u003c`` ..., and map keys sorted (struct field order is the caller's dict order).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_NEEDS_ESCAPE = frozenset(_ESCAPES)


def _sort_maps(value: Any) -> Any:
    """Sort the keys of plain maps. Struct-like dicts are marked by being ``GoStruct`` instances."""
    if isinstance(value, GoStruct):
        return {k: _sort_maps(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {k: _sort_maps(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sort_maps(v) for v in value]
    return value


class GoStruct(dict[str, Any]):
    """A dict whose key order is a Go struct's field order (not sorted when encoded)."""


def dumps(value: Any) -> bytes:
    """Encode ``value`` as Go's ``json.Marshal`` would. Plain dicts are maps (keys sorted)."""
    text = json.dumps(_sort_maps(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if any(ch in _NEEDS_ESCAPE for ch in text):
        text = "".join(_ESCAPES.get(ch, ch) for ch in text)
    return text.encode("utf-8", errors="replace")
