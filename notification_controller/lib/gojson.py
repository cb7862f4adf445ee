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

import orjson

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_NEEDS_ESCAPE = frozenset(_ESCAPES)


# Exact types that encode as themselves: most values of an Event are these, so they skip the
# isinstance checks (the Mapping one goes through the ABC machinery) that cost most of ``dumps``.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _sort_maps(value: Any) -> Any:
    """Sort the keys of plain maps. Struct-like dicts are marked by being ``GoStruct`` instances."""
    cls = value.__class__
    if cls in _SCALARS:
        return value
    if cls is GoStruct:
        return {k: v if v.__class__ in _SCALARS else _sort_maps(v) for k, v in value.items()}
    if cls is dict:
        return {k: v if (v := value[k]).__class__ in _SCALARS else _sort_maps(v) for k in sorted(value)}
    if isinstance(value, GoStruct):
        return {k: _sort_maps(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {k: _sort_maps(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sort_maps(v) for v in value]
    return value


class GoStruct(dict[str, Any]):
    """A dict whose key order is a Go struct's field order (not sorted when encoded)."""


_BYTE_ESCAPES = tuple((ch.encode(), esc.encode()) for ch, esc in _ESCAPES.items())


def dumps(value: Any) -> bytes:
    """Encode ``value`` as Go's ``json.Marshal`` would. Plain dicts are maps (keys sorted).

    orjson keeps dict order and writes compact UTF-8; the characters Go escapes can only occur inside
    JSON strings, so replacing them in the bytes is exact. Values orjson refuses (lone surrogates) take
    the slower standard-library path, which replaces them like Go does with invalid UTF-8.
    """
    ordered = _sort_maps(value)
    try:
        raw = orjson.dumps(ordered)
    except TypeError:
        return _dumps_stdlib(ordered)
    for plain, escaped in _BYTE_ESCAPES:
        if plain in raw:
            raw = raw.replace(plain, escaped)
    return raw


def _dumps_stdlib(ordered: Any) -> bytes:
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if any(ch in _NEEDS_ESCAPE for ch in text):
        text = "".join(_ESCAPES.get(ch, ch) for ch in text)
    return text.encode("utf-8", errors="replace")
