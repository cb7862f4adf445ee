"""The cel-go extensions the Rust library lacks (ext.Strings, ext.Sets, ext.Encoders, OptionalTypes
``list.first()/last()``, ``bool()``/``string(bool)``), as small Python functions registered on a context.
Each is wrapped so that an error never quotes a value.

Every function that can build a value larger than its receiver (``replace``, ``join``, ``split``,
``format``, ``strings.quote``, ``base64.encode``) refuses, *before* building it, a string over
``MAX_STRING_RESULT`` characters or a list over ``MAX_LIST_RESULT`` items (issue 23: ten chained
``s.replace('', s)`` reached 2.9 GB). cel-go bounds the same growth with its runtime cost limit."""

from __future__ import annotations

import base64
import binascii
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from .values import _MAX_FORMAT_PRECISION, MAX_LIST_RESULT, MAX_STRING_RESULT

if TYPE_CHECKING:
    import cel as _cel
else:
    from ._loader import _cel


# ---------------------------------------------------------------------------------------------------------
# Extension functions (cel-go ext.Strings, ext.Sets, ext.Encoders, OptionalTypes list.first/last, ...)
# ---------------------------------------------------------------------------------------------------------


class _FunctionError(Exception):
    """Raised by an extension function. Messages are fixed texts: they never include argument values."""


_NO_OVERLOAD: Final = "no such overload"
_FUNCTION_STATE: Final = threading.local()


def _safe(name: str, impl: Callable[..., object]) -> Callable[..., object]:
    """Wrap ``impl`` so that any failure surfaces as a value-free ``_FunctionError``, recorded per thread.

    The Rust library prints the exception of a failing Python function to stderr; the wrapper guarantees that
    what it prints (and what we report) never contains an argument value.
    """

    def call(*args: object) -> object:
        try:
            return impl(*args)
        except _FunctionError as exc:
            message = str(exc)
        except Exception:
            message = _NO_OVERLOAD
        _FUNCTION_STATE.error = f"{name}: {message}"
        raise _FunctionError(message)

    call.__name__ = f"cel_{name.replace('.', '_')}"
    return call


def _as_str(value: object) -> str:
    if not isinstance(value, str):
        raise _FunctionError(_NO_OVERLOAD)
    return value


def _as_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _FunctionError(_NO_OVERLOAD)
    return value


def _as_list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise _FunctionError(_NO_OVERLOAD)
    return value


def _char_at(s: object, index: object) -> str:
    text, i = _as_str(s), _as_int(index)
    if i == len(text):
        return ""
    if not 0 <= i < len(text):
        raise _FunctionError("index out of range")
    return text[i]


def _index_of(s: object, sub: object, offset: object = 0) -> int:
    text, needle, start = _as_str(s), _as_str(sub), _as_int(offset)
    if not 0 <= start <= len(text):
        raise _FunctionError("index out of range")
    return text.find(needle, start)


def _last_index_of(s: object, sub: object, offset: object = None) -> int:
    text, needle = _as_str(s), _as_str(sub)
    if offset is None:
        return text.rfind(needle)
    end = _as_int(offset)
    if not 0 <= end <= len(text):
        raise _FunctionError("index out of range")
    return text.rfind(needle, 0, end + len(needle))


_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Go's unicode.IsSpace (strings.TrimSpace); Python's str.strip() also strips \x1c-\x1f.
_GO_SPACE: Final = "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)


def _lower_ascii(s: object) -> str:
    return _as_str(s).translate(_LOWER)


def _upper_ascii(s: object) -> str:
    return _as_str(s).translate(_UPPER)


def _trim(s: object) -> str:
    return _as_str(s).strip(_GO_SPACE)


def _reverse(s: object) -> str:
    return _as_str(s)[::-1]


def _too_long(size: int, limit: int = MAX_STRING_RESULT) -> None:
    if size > limit:
        raise _FunctionError(f"result larger than {limit} characters or items")


def _replace(s: object, old: object, new: object, limit: object = -1) -> str:
    text, before, after, count = _as_str(s), _as_str(old), _as_str(new), _as_int(limit)
    occurrences = text.count(before) if before else len(text) + 1
    if count >= 0:
        occurrences = min(occurrences, count)
    _too_long(len(text) + occurrences * (len(after) - len(before)))
    return text.replace(before, after) if count < 0 else text.replace(before, after, count)


def _split(s: object, sep: object, limit: object = -1) -> list[str]:
    text, separator, count = _as_str(s), _as_str(sep), _as_int(limit)
    if count == 0:
        return []
    pieces = (len(text) if separator == "" else text.count(separator) + 1) if count < 0 else count
    _too_long(pieces, MAX_LIST_RESULT)
    if separator == "":
        chars = list(text)
        if count < 0 or count >= len(chars):
            return chars
        return [*chars[: count - 1], "".join(chars[count - 1 :])]
    return text.split(separator) if count < 0 else text.split(separator, count - 1)


def _substring(s: object, start: object, end: object = None) -> str:
    text, begin = _as_str(s), _as_int(start)
    stop = len(text) if end is None else _as_int(end)
    if not 0 <= begin <= stop <= len(text):
        raise _FunctionError("index out of range")
    return text[begin:stop]


def _join(items: object, sep: object = "") -> str:
    separator, values = _as_str(sep), [_as_str(item) for item in _as_list(items)]
    _too_long(sum(map(len, values)) + len(separator) * max(len(values) - 1, 0))
    return separator.join(values)


_QUOTE_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _quote(s: object) -> str:
    text = _as_str(s)
    _too_long(2 * len(text) + 2)
    return '"' + "".join(_QUOTE_ESCAPES.get(c, c) for c in text) + '"'


def _go_float(value: float) -> str:
    """``strconv.FormatFloat(v, 'f', -1, 64)``: the shortest digits, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return format(Decimal(repr(value)).normalize(), "f")


def _format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        entries = sorted((_format_value(k), _format_value(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in entries) + "}"
    if isinstance(value, timedelta):
        return _go_float(value.total_seconds()) + "s"
    if isinstance(value, datetime):
        moment = value.astimezone(UTC) if value.tzinfo else value
        fraction = f".{moment.microsecond:06d}".rstrip("0").rstrip(".")
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
    raise _FunctionError("unsupported type for string formatting")


def _format_clause(verb: str, precision: int | None, arg: object) -> str:
    numeric = isinstance(arg, int | float) and not isinstance(arg, bool)
    if verb == "s":
        return _format_value(arg)
    if verb == "d":
        if not numeric:
            raise _FunctionError("decimal clause can only be used on numbers")
        return str(arg) if isinstance(arg, int) else _go_float(float(arg))  # type: ignore[arg-type]
    if verb in "fe":
        if not numeric:
            raise _FunctionError("fixed-point and scientific clauses can only be used on numbers")
        number = float(arg)  # type: ignore[arg-type]
        if math.isnan(number) or math.isinf(number):
            return _go_float(number)
        return format(number, f".{6 if precision is None else precision}{verb}")
    if verb == "b":
        if isinstance(arg, bool):
            return "1" if arg else "0"
        return format(_as_int(arg), "b")
    if verb == "o":
        return format(_as_int(arg), "o")
    if verb in "xX":
        if isinstance(arg, str):
            text = arg.encode().hex()
        elif isinstance(arg, bytes):
            text = arg.hex()
        else:
            text = format(_as_int(arg), "x")
        return text.upper() if verb == "X" else text
    raise _FunctionError("unrecognized formatting clause")


def _format(template: object, arguments: object) -> str:
    text, args = _as_str(template), _as_list(arguments)
    out: list[str] = []
    i = used = size = 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "%":
            out.append(c)
            continue
        if i < len(text) and text[i] == "%":
            out.append("%")
            i += 1
            continue
        precision: int | None = None
        if i < len(text) and text[i] == ".":
            j = i + 1
            while j < len(text) and text[j] in "0123456789":
                j += 1
            if j == i + 1 or j - i > 4 or int(text[i + 1 : j]) > _MAX_FORMAT_PRECISION:
                raise _FunctionError("invalid formatting precision")
            precision = int(text[i + 1 : j])
            i = j
        if i >= len(text):
            raise _FunctionError("unexpected end of format string")
        if used >= len(args):
            raise _FunctionError("index out of range in format arguments")
        out.append(_format_clause(text[i], precision, args[used]))
        size += len(out[-1])
        _too_long(size + len(text))
        used += 1
        i += 1
    return "".join(out)


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = _as_str(value)
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise _FunctionError("type conversion error from 'string' to 'bool'")


def _to_string(value: object) -> str:  # the Rust library lacks string(bool)
    if isinstance(value, bool):
        return "true" if value else "false"
    raise _FunctionError(_NO_OVERLOAD)


def _to_int(value: object) -> int:  # the Rust library lacks int(timestamp)
    if isinstance(value, datetime):
        return int(value.timestamp())
    raise _FunctionError(_NO_OVERLOAD)


_MATCHES: Final = _cel.compile("s.matches(p)")


def _matches(s: object, pattern: object) -> bool:  # global matches(s, re): reuse the native (RE2-like) one
    try:
        return bool(_MATCHES.execute({"s": _as_str(s), "p": _as_str(pattern)}))
    except _FunctionError:
        raise
    except Exception:
        raise _FunctionError("invalid regular expression") from None


def _first(items: object) -> _cel.OptionalValue:
    values = _as_list(items)
    return _cel.OptionalValue.of(values[0]) if values else _cel.OptionalValue.none()


def _last(items: object) -> _cel.OptionalValue:
    values = _as_list(items)
    return _cel.OptionalValue.of(values[-1]) if values else _cel.OptionalValue.none()


def _cel_equal(a: object, b: object) -> bool:
    """CEL equality: bool is not a number, numbers compare across int/uint/double, aggregates deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_cel_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _contains_all(container: list[object], items: list[object]) -> bool:
    return all(any(_cel_equal(x, y) for y in container) for x in items)


def _sets_contains(a: object, b: object) -> bool:
    return _contains_all(_as_list(a), _as_list(b))


def _sets_equivalent(a: object, b: object) -> bool:
    left, right = _as_list(a), _as_list(b)
    return _contains_all(left, right) and _contains_all(right, left)


def _sets_intersects(a: object, b: object) -> bool:
    right = _as_list(b)
    return any(any(_cel_equal(x, y) for y in right) for x in _as_list(a))


def _base64_encode(data: object) -> str:
    if not isinstance(data, bytes):
        raise _FunctionError(_NO_OVERLOAD)
    _too_long(4 * (len(data) + 2) // 3)
    return base64.b64encode(data).decode("ascii")


def _base64_decode(data: object) -> bytes:
    text = _as_str(data)
    try:  # StdEncoding, then RawStdEncoding (no padding), like cel-go
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    try:
        if len(text) % 4 == 1 or text.endswith("="):
            raise ValueError
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _FunctionError("illegal base64 data") from None


_IMPLEMENTATIONS: Final[dict[str, Callable[..., object]]] = {
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": _trim,
    "reverse": _reverse,
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "join": _join,
    "format": _format,
    "strings.quote": _quote,
    "bool": _to_bool,
    "string": _to_string,
    "int": _to_int,
    "matches": _matches,
    "first": _first,
    "last": _last,
    "sets.contains": _sets_contains,
    "sets.equivalent": _sets_equivalent,
    "sets.intersects": _sets_intersects,
    "base64.encode": _base64_encode,
    "base64.decode": _base64_decode,
}
_FUNCTIONS: Final = {name: _safe(name, impl) for name, impl in _IMPLEMENTATIONS.items()}
