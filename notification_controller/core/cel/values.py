"""What goes in and comes out: limits, the error classes, output types, the cel-go type model
(as cel-go prints types) and the conversion of Python inputs into bounded plain values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from ...errors import ControllerError

if TYPE_CHECKING:
    import cel as _cel
else:
    from ._loader import _cel


MAX_EXPRESSION_LENGTH: Final = 4096
MAX_NESTING_DEPTH: Final = 32
MAX_INPUT_DEPTH: Final = 256
MAX_INPUT_NODES: Final = 2_000_000
MAX_COMPREHENSION_COST: Final = 10_000_000
_MAX_FORMAT_PRECISION: Final = 100
MAX_STRING_RESULT: Final = 256 * 1024
"""Longest string an extension function (``replace``, ``join``, ``format``, ``strings.quote``,
``base64.encode``) may build, in characters."""
MAX_LIST_RESULT: Final = 100_000
"""Longest list ``split`` may build."""


class CELError(ControllerError):
    """A CEL expression failed to compile or evaluate. The message quotes only the expression."""


class CELCompileError(CELError):
    """The expression is invalid for its environment (syntax, references, types, limits)."""


class CELEvalError(CELError):
    """The expression failed on a given input, or produced a value of the wrong type."""


class OutputType(StrEnum):
    BOOL = "bool"
    STRING = "string"
    ANY = "any"


# ---------------------------------------------------------------------------------------------------------
# Types (as printed by cel-go)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Type:
    kind: str
    params: tuple[_Type, ...] = ()

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.params[0]})"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})"
        if self.kind == "optional_type":
            return f"optional_type({self.params[0]})"
        if self.kind == "timestamp":
            return "google.protobuf.Timestamp"
        if self.kind == "duration":
            return "google.protobuf.Duration"
        if self.kind == "unknown":
            return "dyn"
        return self.kind


_BOOL: Final = _Type("bool")
_INT: Final = _Type("int")
_UINT: Final = _Type("uint")
_DOUBLE: Final = _Type("double")
_STRING: Final = _Type("string")
_BYTES: Final = _Type("bytes")
_NULL: Final = _Type("null_type")
_TYPE: Final = _Type("type")
_TIMESTAMP: Final = _Type("timestamp")
_DURATION: Final = _Type("duration")
_DYN: Final = _Type("dyn")  # certainly dynamic, as cel-go would infer
_UNKNOWN: Final = _Type("unknown")  # this checker is not sure (cel-go may know better)
_STRUCT: Final = _Type("map", (_STRING, _DYN))  # google.protobuf.Struct, as cel-go prints it

_NUMERIC: Final = frozenset({"int", "uint", "double"})
_ORDERED: Final = frozenset({"int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"})


def _list_of(t: _Type) -> _Type:
    return _Type("list", (t,))


def _optional_of(t: _Type) -> _Type:
    return _Type("optional_type", (t,))


def _is_any(t: _Type) -> bool:
    return t.kind in ("dyn", "unknown")


def _compatible(a: _Type, b: _Type, *, numeric: bool) -> bool:
    """Whether values of ``a`` and ``b`` may be the same kind (dyn/unknown are wildcards)."""
    if _is_any(a) or _is_any(b):
        return True
    if a.kind != b.kind:
        return numeric and a.kind in _NUMERIC and b.kind in _NUMERIC
    return all(_compatible(x, y, numeric=numeric) for x, y in zip(a.params, b.params, strict=True))


def _join_types(types: Sequence[_Type]) -> _Type:
    """The element type cel-go gives a homogeneous literal: ``dyn`` as soon as one element is ``dyn``."""
    if any(t.kind == "dyn" for t in types):
        return _DYN
    if any(t.kind == "unknown" for t in types):
        return _UNKNOWN
    concrete = [t for t in types if t != _NULL]
    return concrete[0] if concrete else (_NULL if types else _DYN)


# ---------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------

_SCALARS: Final = (str, bytes, bool, int, float, datetime, timedelta, _cel.OptionalValue)


def _convert_input(name: str, value: object, budget: list[int]) -> tuple[object, int]:
    """Copy ``value`` into plain dict/list/scalars; return it and the largest container size.

    Iterative, so that hostile nesting cannot exhaust the Python stack; the depth limit also protects the Rust
    converter (which recurses) and breaks reference cycles.
    """
    holder: list[object] = [None]
    largest = 0
    stack: list[tuple[object, list[object] | dict[object, object], object, int]] = [(value, holder, 0, 0)]
    while stack:
        item, parent, slot, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise CELEvalError(f"input too large: more than {MAX_INPUT_NODES} values")
        if depth > MAX_INPUT_DEPTH:
            raise CELEvalError(f"input of variable '{name}' is nested deeper than {MAX_INPUT_DEPTH} levels")
        converted: object
        if item is None or isinstance(item, _SCALARS):
            converted = item
        elif isinstance(item, bytearray | memoryview):
            converted = bytes(item)
        elif isinstance(item, Mapping):
            mapping: dict[object, object] = {}
            for key, child in item.items():
                if not isinstance(key, str | int):
                    raise CELEvalError(
                        f"unsupported map key type '{type(key).__name__}' in variable '{name}'"
                    )
                mapping[key] = None
                stack.append((child, mapping, key, depth + 1))
            largest = max(largest, len(mapping))
            converted = mapping
        elif isinstance(item, list | tuple):
            sequence: list[object] = [None] * len(item)
            stack.extend((child, sequence, index, depth + 1) for index, child in enumerate(item))
            largest = max(largest, len(sequence))
            converted = sequence
        else:
            raise CELEvalError(f"unsupported value type '{type(item).__name__}' in variable '{name}'")
        if isinstance(parent, list):
            assert isinstance(slot, int)
            parent[slot] = converted
        else:
            parent[slot] = converted
    return holder[0], largest
