"""Validation errors in the user's language, not the validation library's.

pydantic says "Extra inputs are not permitted" where a Kubernetes user expects "unknown field", and
"Input should be a valid integer, unable to parse string as an integer" where "must be an integer" is
enough. ``describe_error`` turns one pydantic error record into the short phrase the API server would
print, so local-mode load errors, hook configuration errors and status messages read like ``kubectl``'s.
Unknown error types keep pydantic's own message: it is still correct, only wordier.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

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


# ---- did you mean (issue 25 item 4) ----------------------------------------------------------------------


def suggestion(word: Any, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` (``difflib``), else ""."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def model_at(model: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The model holding the fields at ``path`` (names or aliases; list indexes skipped), or None."""
    current: type[BaseModel] | None = model
    for part in path:
        if isinstance(part, int):
            continue
        if current is None:
            return None
        annotation = next(
            (info.annotation for name, info in current.model_fields.items() if part in (name, info.alias)),
            None,
        )
        current = _inner_model(annotation) if annotation is not None else None
    return current


def describe_error_of(model: type[BaseModel], error: Mapping[str, Any]) -> str:
    """``describe_error`` with a "did you mean" for an unknown field (the names ``model`` accepts there)
    and for a value outside an enum (its values): ``eventSevirity``, ``slck``, ``Kustomisation``."""
    message = describe_error(error)
    loc = [p for p in error.get("loc", ()) if isinstance(p, str | int)]
    if error.get("type") == "extra_forbidden" and loc:
        holder = model_at(model, loc[:-1])
        if holder is not None:
            names = [info.alias or name for name, info in holder.model_fields.items()]
            message += suggestion(loc[-1], names)
    elif error.get("type") == "enum":
        expected = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        message += suggestion(error.get("input"), expected)
    return message


def field_path(loc: Sequence[Any]) -> str:
    """A pydantic ``loc`` as the user writes the field: ``spec.eventSources[0].kind``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
