"""Validation errors in the user's language, not the validation library's.

pydantic says "Extra inputs are not permitted" where a Kubernetes user expects "unknown field", and
"Input should be a valid integer, unable to parse string as an integer" where "must be an integer" is
enough. ``describe_error`` turns one pydantic error record into the short phrase the API server would
print, so local-mode load errors, hook configuration errors and status messages read like ``kubectl``'s.
Unknown error types keep pydantic's own message: it is still correct, only wordier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TYPE_NAMES = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "string": "a string",
    "dict": "an object",
    "list": "a list",
}


def describe_error(error: Mapping[str, Any]) -> str:
    """One pydantic ``ErrorDetails`` → a short user-facing phrase (no input value is echoed)."""
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error" or kind == "enum":
        return f"must be one of {ctx.get('expected', 'the allowed values')}"
    if kind == "string_pattern_mismatch":
        return f"does not match the pattern {ctx.get('pattern', '')}".rstrip()
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"must have at most {ctx.get('max_length')} {unit}"
    if kind in ("string_too_short", "too_short"):
        unit = "characters" if kind == "string_too_short" else "items"
        return f"must have at least {ctx.get('min_length')} {unit}"
    for prefix, name in _TYPE_NAMES.items():
        if kind in (f"{prefix}_type", f"{prefix}_parsing") or kind.startswith(f"{prefix}_from_"):
            return f"must be {name}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.values()), "")
        words = {
            "greater_than_equal": "at least",
            "greater_than": "greater than",
            "less_than_equal": "at most",
            "less_than": "less than",
        }[kind]
        return f"must be {words} {bound}"
    if kind == "value_error":
        message = str(error.get("msg", "invalid value"))
        return message.removeprefix("Value error, ")
    return str(error.get("msg", "invalid value"))
