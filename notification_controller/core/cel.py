"""A Flux-compatible CEL environment (``fluxcd/pkg/runtime/cel`` on cel-go).

Flux compiles user expressions with ``HomogeneousAggregateLiterals``, ``CrossTypeNumericComparisons``,
``OptionalTypes`` and the ``Strings``, ``Sets`` and ``Encoders`` extensions, declaring every variable as a
``google.protobuf.Struct`` (a ``map(string, dyn)``), and checks the output type at compile time.

Why this design
---------------
Evaluation is done by ``common-expression-language`` (import ``cel``, the Rust ``cel`` crate): it
implements the core language natively (macros, ``has()``, optionals with ``first()``-style results,
``optional.of/none/ofNonZeroValue``, ``hasValue/value/or/orValue``, timestamps, durations, heterogeneous
numeric comparison, a parser with a recursion limit) and, crucially, dispatches receiver-style calls such as
``'a-b'.split('-')`` to Python functions registered on a ``cel.Context`` (``x.f(a)`` is ``f(x, a)``), native
overloads first. So the missing cel-go extensions (strings, sets, encoders, ``list.first()/last()``, the
``bool()``/``string(bool)`` conversions) are small Python functions below: no source rewriting. ``cel-python``
(``celpy``) was not used: it is pure Python (slower), and has no receiver-style custom functions.

The Rust library has no type checker, so this module has its own front end (a lexer, a parser that builds a
small AST with flat operator/selector chains, and a type checker) used for the compile-time checks cel-go
performs: undeclared references (``undeclared reference to 'claims'``), unknown functions, literal aggregates
that are not homogeneous, operator overloads that cannot match (``'_==_' applied to '(map(string, dyn),
string)'``) and the output type (``CEL expression output type mismatch: expected bool, got string``). The
Rust parser stays the authority on syntax; should our parser ever reject what it accepts, a conservative
fallback (undeclared-variable check only) is used instead of refusing the expression.

Output types: cel-go types a field of a ``Struct`` as ``dyn`` and Flux rejects a ``dyn`` output when a type
is required. Here, by default, ``dyn`` outputs are accepted and checked at evaluation time;
``compile_expression(..., strict_types=True)`` reproduces Flux's compile-time rejection.

Safety: expressions are limited to ``MAX_EXPRESSION_LENGTH`` characters and ``MAX_NESTING_DEPTH`` levels of
brackets; inputs to ``MAX_INPUT_DEPTH`` levels and ``MAX_INPUT_NODES`` values (deeper values crash the Rust
converter); nested comprehensions over large inputs are refused (``MAX_COMPREHENSION_COST``). Error messages
never contain variable values: library messages are mapped to fixed texts and only the expression itself
(user-written, not secret) is quoted.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib.machinery
import importlib.util
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    import cel as _cel


def _load_extension() -> Any:
    """The ``cel`` package's compiled module alone.

    ``import cel`` runs the package's ``__init__``, which imports its command-line REPL and with it
    prompt_toolkit: ~100 ms and several MB for every process, CEL used or not. The extension module is all we
    need; it is registered as ``cel.cel`` so a later ``import cel`` (tests do) reuses it instead of
    initialising the Rust module twice, which panics.
    """
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("cel")  # finds the package without importing it
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(location, "cel" + suffix)
            if os.path.exists(path):
                ext_spec = importlib.util.spec_from_file_location("cel.cel", path)
                if ext_spec is None or ext_spec.loader is None:
                    continue
                module = importlib.util.module_from_spec(ext_spec)
                sys.modules["cel.cel"] = module
                ext_spec.loader.exec_module(module)
                return module
    import cel  # an unusual layout: the package as it is

    return cel


if not TYPE_CHECKING:
    _cel = _load_extension()

__all__ = [
    "MAX_COMPREHENSION_COST",
    "MAX_EXPRESSION_LENGTH",
    "MAX_INPUT_DEPTH",
    "MAX_INPUT_NODES",
    "MAX_NESTING_DEPTH",
    "CELCompileError",
    "CELError",
    "CELEvalError",
    "Expression",
    "OutputType",
    "compile_expression",
]

MAX_EXPRESSION_LENGTH: Final = 4096
MAX_NESTING_DEPTH: Final = 32
MAX_INPUT_DEPTH: Final = 256
MAX_INPUT_NODES: Final = 2_000_000
MAX_COMPREHENSION_COST: Final = 10_000_000
_MAX_FORMAT_PRECISION: Final = 100


class CELError(Exception):
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
# Lexer
# ---------------------------------------------------------------------------------------------------------


class _SyntaxFailure(Exception):
    def __init__(self, pos: int, message: str) -> None:
        super().__init__(message)
        self.pos = pos


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # ident, int, uint, double, string, bytes, bool, null, op, eof
    text: str
    pos: int
    value: str = ""  # decoded text of string literals


_OPERATORS: Final = ("==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":")
_PUNCTUATION: Final = frozenset(".,[](){}")
_NUMBER_RE: Final = re.compile(
    r"(?P<hex>0[xX][0-9a-fA-F]+)(?P<hexu>[uU])?"
    r"|(?P<float>[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|\.[0-9]+(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<int>[0-9]+)(?P<intu>[uU])?"
)
_IDENT_RE: Final = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_STRING_START_RE: Final = re.compile(r"([bB][rR]?|[rR])?('''|\"\"\"|'|\")")
_RESERVED: Final = frozenset(
    {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let", "loop"}
    | {"package", "namespace", "return", "var", "void", "while"}
)
_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    '"': '"',
    "'": "'",
    "\\": "\\",
    "?": "?",
    "`": "`",
}
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def _read_escape(src: str, i: int) -> tuple[str, int]:
    """Decode the escape sequence starting at ``src[i] == '\\'``; return (text, next index)."""
    if i + 1 >= len(src):
        raise _SyntaxFailure(i, "invalid escape sequence")
    c = src[i + 1]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], i + 2
    width = {"x": 2, "X": 2, "u": 4, "U": 8}.get(c)
    if width is not None:
        digits = src[i + 2 : i + 2 + width]
        if len(digits) != width or not set(digits) <= _HEX:
            raise _SyntaxFailure(i, "invalid escape sequence")
        code = int(digits, 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise _SyntaxFailure(i, "invalid escape sequence")
        return chr(code), i + 2 + width
    if c in "0123":
        digits = src[i + 1 : i + 4]
        if len(digits) != 3 or not set(digits) <= set("01234567"):
            raise _SyntaxFailure(i, "invalid escape sequence")
        return chr(int(digits, 8)), i + 4
    raise _SyntaxFailure(i, "invalid escape sequence")


def _read_string(src: str, start: int, body: int, quote: str, raw: bool) -> tuple[str, int]:
    """Scan a string literal whose content starts at ``body``; return (decoded value, end index)."""
    out: list[str] = []
    i = body
    triple = len(quote) == 3
    n = len(src)
    while True:
        if src.startswith(quote, i):
            return "".join(out), i + len(quote)
        if i >= n:
            raise _SyntaxFailure(start, "unterminated string literal")
        c = src[i]
        if not triple and c in "\r\n":
            raise _SyntaxFailure(start, "unterminated string literal")
        if c == "\\" and not raw:
            text, i = _read_escape(src, i)
            out.append(text)
            continue
        out.append(c)
        i += 1


def _tokenize(src: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    n = len(src)
    while i < n:
        c = src[i]
        if c in " \t\r\n\f":
            i += 1
            continue
        if src.startswith("//", i):
            end = src.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        string_start = _STRING_START_RE.match(src, i) if c in "'\"rRbB" else None
        if string_start is not None:
            prefix = (string_start.group(1) or "").lower()
            value, end = _read_string(src, i, string_start.end(), string_start.group(2), "r" in prefix)
            tokens.append(_Token("bytes" if "b" in prefix else "string", src[i:end], i, value))
            i = end
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            number = _NUMBER_RE.match(src, i)
            if number is None:  # pragma: no cover - the guard above guarantees a match
                raise _SyntaxFailure(i, "invalid number")
            if number.group("float"):
                kind = "double"
            elif number.group("hexu") or number.group("intu"):
                kind = "uint"
            else:
                kind = "int"
            tokens.append(_Token(kind, number.group(0), i))
            i = number.end()
            continue
        ident = _IDENT_RE.match(src, i)
        if ident is not None:
            word = ident.group(0)
            if word in ("true", "false"):
                tokens.append(_Token("bool", word, i))
            elif word == "null":
                tokens.append(_Token("null", word, i))
            elif word == "in":
                tokens.append(_Token("op", word, i))
            else:
                tokens.append(_Token("ident", word, i))
            i = ident.end()
            continue
        if c in _PUNCTUATION:
            tokens.append(_Token("op", c, i))
            i += 1
            continue
        for op in _OPERATORS:
            if src.startswith(op, i):
                tokens.append(_Token("op", op, i))
                i += len(op)
                break
        else:
            raise _SyntaxFailure(i, f"unexpected character {c!r}")
    tokens.append(_Token("eof", "", n))
    return tokens


def _bracket_depth(tokens: Sequence[_Token]) -> int:
    depth = deepest = 0
    for tok in tokens:
        if tok.kind == "op" and tok.text in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok.kind == "op" and tok.text in ")]}":
            depth -= 1
    return deepest


# ---------------------------------------------------------------------------------------------------------
# AST (operator and selector chains are flat lists, so that long chains do not recurse)
# ---------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Node:
    pos: int


@dataclass(slots=True)
class _Literal(_Node):
    type: _Type
    value: str = ""


@dataclass(slots=True)
class _Ident(_Node):
    name: str
    leading_dot: bool = False


@dataclass(slots=True)
class _Call(_Node):  # a global call: name(args)
    name: str
    args: list[_Node]
    leading_dot: bool = False


@dataclass(slots=True)
class _Step:
    kind: str  # select, index, call
    pos: int
    name: str = ""
    args: list[_Node] = field(default_factory=list)


@dataclass(slots=True)
class _Member(_Node):  # operand followed by .field, [index] and .method(args) steps
    operand: _Node
    steps: list[_Step]


@dataclass(slots=True)
class _ListLit(_Node):
    elements: list[_Node]


@dataclass(slots=True)
class _MapLit(_Node):
    entries: list[tuple[_Node, _Node]]


@dataclass(slots=True)
class _Message(_Node):
    name: str


@dataclass(slots=True)
class _Unary(_Node):  # op repeated count times (kept flat so that "!!!...x" does not recurse)
    op: str  # "!" or "-"
    operand: _Node
    count: int


@dataclass(slots=True)
class _Chain(_Node):  # left-associative operators of one precedence level
    first: _Node
    rest: list[tuple[str, int, _Node]]


@dataclass(slots=True)
class _Conditional(_Node):  # c1 ? t1 : c2 ? t2 : ... : otherwise
    branches: list[tuple[_Node, _Node, int]]
    otherwise: _Node


_RELATIONS: Final = ("<", "<=", ">=", ">", "==", "!=", "in")


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._i = 0

    def parse(self) -> _Node:
        node = self._expr()
        if self._peek().kind != "eof":
            self._fail("unexpected token")
        return node

    def _peek(self) -> _Token:
        return self._tokens[self._i]

    def _next(self) -> _Token:
        tok = self._tokens[self._i]
        if tok.kind != "eof":
            self._i += 1
        return tok

    def _at(self, *ops: str) -> bool:
        tok = self._peek()
        return tok.kind == "op" and tok.text in ops

    def _expect(self, op: str) -> _Token:
        if not self._at(op):
            self._fail(f"expected {op!r}")
        return self._next()

    def _fail(self, message: str) -> NoReturn:
        raise _SyntaxFailure(self._peek().pos, message)

    def _expr(self) -> _Node:
        branches: list[tuple[_Node, _Node, int]] = []
        while True:
            condition = self._level(0)
            if not self._at("?"):
                break
            question = self._next()
            then = self._level(0)
            self._expect(":")
            branches.append((condition, then, question.pos))
        if not branches:
            return condition
        return _Conditional(branches[0][0].pos, branches, condition)

    _LEVELS: Final = (("||",), ("&&",), _RELATIONS, ("+", "-"), ("*", "/", "%"))

    def _level(self, level: int) -> _Node:
        if level == len(self._LEVELS):
            return self._unary()
        first = self._level(level + 1)
        rest: list[tuple[str, int, _Node]] = []
        while self._at(*self._LEVELS[level]):
            op = self._next()
            rest.append((op.text, op.pos, self._level(level + 1)))
        return _Chain(first.pos, first, rest) if rest else first

    def _unary(self) -> _Node:
        for op in ("!", "-"):
            if self._at(op):
                start = self._peek().pos
                count = 0
                while self._at(op):
                    self._next()
                    count += 1
                return _Unary(start, op, self._member(), count)
        return self._member()

    def _member(self) -> _Node:
        operand = self._primary()
        steps: list[_Step] = []
        while True:
            if self._at("."):
                dot = self._next()
                name = self._next()
                if name.kind != "ident":
                    raise _SyntaxFailure(dot.pos, "expected a field name")
                if self._at("("):
                    self._next()
                    steps.append(_Step("call", name.pos, name.text, self._list_until(")")))
                elif self._at("{") and isinstance(operand, _Ident) and all(s.kind == "select" for s in steps):
                    qualified = ".".join([operand.name, *(s.name for s in steps), name.text])
                    return self._message(operand.pos, qualified)
                else:
                    steps.append(_Step("select", name.pos, name.text))
            elif self._at("["):
                bracket = self._next()
                index = self._expr()
                self._expect("]")
                steps.append(_Step("index", bracket.pos, args=[index]))
            else:
                break
        return _Member(operand.pos, operand, steps) if steps else operand

    def _list_until(self, close: str) -> list[_Node]:
        items: list[_Node] = []
        while not self._at(close):
            items.append(self._expr())
            if not self._at(","):
                break
            self._next()
        self._expect(close)
        return items

    def _message(self, pos: int, name: str) -> _Node:
        self._expect("{")
        while not self._at("}"):
            if self._next().kind != "ident":
                self._fail("expected a field name")
            self._expect(":")
            self._expr()
            if not self._at(","):
                break
            self._next()
        self._expect("}")
        return _Message(pos, name)

    def _primary(self) -> _Node:
        tok = self._next()
        if tok.kind == "op" and tok.text == ".":
            name = self._next()
            if name.kind != "ident":
                raise _SyntaxFailure(tok.pos, "expected an identifier")
            if self._at("("):
                self._next()
                return _Call(tok.pos, name.text, self._list_until(")"), leading_dot=True)
            return _Ident(tok.pos, name.text, leading_dot=True)
        if tok.kind == "ident":
            if self._at("("):
                self._next()
                return _Call(tok.pos, tok.text, self._list_until(")"))
            if self._at("{"):
                return self._message(tok.pos, tok.text)
            return _Ident(tok.pos, tok.text)
        if tok.kind == "op" and tok.text == "(":
            inner = self._expr()
            self._expect(")")
            return inner
        if tok.kind == "op" and tok.text == "[":
            return _ListLit(tok.pos, self._list_until("]"))
        if tok.kind == "op" and tok.text == "{":
            entries: list[tuple[_Node, _Node]] = []
            while not self._at("}"):
                key = self._expr()
                self._expect(":")
                entries.append((key, self._expr()))
                if not self._at(","):
                    break
                self._next()
            self._expect("}")
            return _MapLit(tok.pos, entries)
        literal_types = {
            "int": _INT,
            "uint": _UINT,
            "double": _DOUBLE,
            "string": _STRING,
            "bytes": _BYTES,
            "bool": _BOOL,
            "null": _NULL,
        }
        if tok.kind in literal_types:
            return _Literal(tok.pos, literal_types[tok.kind], tok.value)
        if (
            tok.kind == "op" and tok.text == "-" and self._peek().kind in ("int", "double")
        ):  # a signed literal
            return _Literal(tok.pos, literal_types[self._next().kind])
        raise _SyntaxFailure(tok.pos, "unexpected token")


# ---------------------------------------------------------------------------------------------------------
# Type checker
# ---------------------------------------------------------------------------------------------------------

# member functions: name -> (arities, receiver kinds (None: any), result(receiver, args))
_ResultFn = Callable[[_Type, list[_Type]], _Type]


def _const(t: _Type) -> _ResultFn:
    return lambda _recv, _args: t


def _param(recv: _Type, _args: list[_Type]) -> _Type:
    if recv.kind in ("list", "optional_type"):
        return recv.params[0]
    return _DYN if recv.kind == "dyn" else _UNKNOWN


def _optional_elem(recv: _Type, args: list[_Type]) -> _Type:
    return _optional_of(_param(recv, args))


def _or_value(recv: _Type, args: list[_Type]) -> _Type:
    inner = _param(recv, args)
    return inner if not _is_any(inner) and inner == args[0] else _UNKNOWN


_TIME_ACCESSORS: Final = (
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
)
_STR: Final = frozenset({"string"})
_MEMBER_FUNCTIONS: Final[dict[str, tuple[frozenset[int], frozenset[str] | None, _ResultFn]]] = {
    "size": (frozenset({0}), frozenset({"string", "bytes", "list", "map"}), _const(_INT)),
    "contains": (frozenset({1}), _STR, _const(_BOOL)),
    "startsWith": (frozenset({1}), _STR, _const(_BOOL)),
    "endsWith": (frozenset({1}), _STR, _const(_BOOL)),
    "matches": (frozenset({1}), _STR, _const(_BOOL)),
    "charAt": (frozenset({1}), _STR, _const(_STRING)),
    "indexOf": (frozenset({1, 2}), _STR, _const(_INT)),
    "lastIndexOf": (frozenset({1, 2}), _STR, _const(_INT)),
    "lowerAscii": (frozenset({0}), _STR, _const(_STRING)),
    "upperAscii": (frozenset({0}), _STR, _const(_STRING)),
    "trim": (frozenset({0}), _STR, _const(_STRING)),
    "reverse": (frozenset({0}), _STR, _const(_STRING)),
    "replace": (frozenset({2, 3}), _STR, _const(_STRING)),
    "split": (frozenset({1, 2}), _STR, _const(_list_of(_STRING))),
    "substring": (frozenset({1, 2}), _STR, _const(_STRING)),
    "format": (frozenset({1}), _STR, _const(_STRING)),
    "join": (frozenset({0, 1}), frozenset({"list"}), _const(_STRING)),
    "first": (frozenset({0}), frozenset({"list"}), _optional_elem),
    "last": (frozenset({0}), frozenset({"list"}), _optional_elem),
    "hasValue": (frozenset({0}), frozenset({"optional_type"}), _const(_BOOL)),
    "value": (frozenset({0}), frozenset({"optional_type"}), _param),
    "or": (frozenset({1}), frozenset({"optional_type"}), lambda recv, _args: recv),
    "orValue": (frozenset({1}), frozenset({"optional_type"}), _or_value),
    **{
        name: (frozenset({0, 1}), frozenset({"timestamp", "duration"}), _const(_INT))
        for name in _TIME_ACCESSORS
    },
}
# global functions: name -> (arities, kinds accepted by the first argument (None: any), result(args))
_GLOBAL_FUNCTIONS: Final[
    dict[str, tuple[frozenset[int], frozenset[str] | None, Callable[[list[_Type]], _Type]]]
] = {
    "size": (frozenset({1}), frozenset({"string", "bytes", "list", "map"}), lambda _a: _INT),
    "matches": (frozenset({2}), _STR, lambda _a: _BOOL),
    "int": (frozenset({1}), None, lambda _a: _INT),
    "uint": (frozenset({1}), None, lambda _a: _UINT),
    "double": (frozenset({1}), None, lambda _a: _DOUBLE),
    "string": (frozenset({1}), None, lambda _a: _STRING),
    "bytes": (frozenset({1}), None, lambda _a: _BYTES),
    "bool": (frozenset({1}), None, lambda _a: _BOOL),
    "dyn": (frozenset({1}), None, lambda _a: _DYN),
    "type": (frozenset({1}), None, lambda _a: _TYPE),
    "timestamp": (frozenset({1}), None, lambda _a: _TIMESTAMP),
    "duration": (frozenset({1}), None, lambda _a: _DURATION),
    "sets.contains": (frozenset({2}), frozenset({"list"}), lambda _a: _BOOL),
    "sets.equivalent": (frozenset({2}), frozenset({"list"}), lambda _a: _BOOL),
    "sets.intersects": (frozenset({2}), frozenset({"list"}), lambda _a: _BOOL),
    "base64.encode": (frozenset({1}), frozenset({"bytes"}), lambda _a: _STRING),
    "base64.decode": (frozenset({1}), _STR, lambda _a: _BYTES),
    "optional.of": (frozenset({1}), None, lambda a: _optional_of(a[0])),
    "optional.ofNonZeroValue": (frozenset({1}), None, lambda a: _optional_of(a[0])),
    "optional.none": (frozenset({0}), None, lambda _a: _optional_of(_DYN)),
    "strings.quote": (frozenset({1}), _STR, lambda _a: _STRING),
}
_NAMESPACES: Final = frozenset(name.split(".")[0] for name in _GLOBAL_FUNCTIONS if "." in name)
_TYPE_NAMES: Final = frozenset(
    {"bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"}
)
_MACROS: Final = {"all": (2,), "exists": (2,), "exists_one": (2,), "map": (2, 3), "filter": (2,)}
_UNSUPPORTED: Final = frozenset({"optMap", "optFlatMap"})
# the kinds each argument (after the receiver, for member functions) may have; absent: not checked
_S: Final = frozenset({"string"})
_I: Final = frozenset({"int"})
_L: Final = frozenset({"list"})
_ARGUMENT_KINDS: Final[dict[str, tuple[frozenset[str], ...]]] = {
    "contains": (_S,),
    "startsWith": (_S,),
    "endsWith": (_S,),
    "matches": (_S,),
    "charAt": (_I,),
    "indexOf": (_S, _I),
    "lastIndexOf": (_S, _I),
    "replace": (_S, _S, _I),
    "split": (_S, _I),
    "substring": (_I, _I),
    "join": (_S,),
    "format": (_L,),
    "global:matches": (_S, _S),
    "global:sets.contains": (_L, _L),
    "global:sets.equivalent": (_L, _L),
    "global:sets.intersects": (_L, _L),
}


def _arguments_fit(key: str, args: Sequence[_Type]) -> bool:
    kinds = _ARGUMENT_KINDS.get(key, ())
    return all(_is_any(t) or t.kind in allowed for t, allowed in zip(args, kinds, strict=False))


_OPERATOR_NAMES: Final = {
    "||": "_||_",
    "&&": "_&&_",
    "in": "@in",
    "==": "_==_",
    "!=": "_!=_",
    "<": "_<_",
    "<=": "_<=_",
    ">": "_>_",
    ">=": "_>=_",
    "+": "_+_",
    "-": "_-_",
    "*": "_*_",
    "/": "_/_",
    "%": "_%_",
}


@dataclass(slots=True)
class _Analysis:
    output: _Type = _UNKNOWN
    comprehension_depth: int = 0
    dynamic_index: bool = False
    literal_keys: set[str] = field(default_factory=set)
    literal_list_size: int = 0


class _Checker:
    def __init__(self, source: str, declared: frozenset[str]) -> None:
        self._source = source
        self._declared = declared
        self.analysis = _Analysis()

    # -- errors --
    def _error(self, pos: int, message: str) -> NoReturn:
        raise CELCompileError(_compile_message(self._source, pos, message))

    def _no_overload(
        self, pos: int, name: str, types: Sequence[_Type], receiver: _Type | None = None
    ) -> NoReturn:
        args = ", ".join(str(t) for t in types)
        applied = f"{receiver}.({args})" if receiver is not None else f"({args})"
        self._error(pos, f"found no matching overload for '{name}' applied to '{applied}'")

    # -- entry point --
    def check(self, node: _Node) -> _Analysis:
        self.analysis.output = self._check(node, {}, 0)
        return self.analysis

    def _check(self, node: _Node, scope: Mapping[str, _Type], depth: int) -> _Type:
        if isinstance(node, _Literal):
            if node.type == _STRING:
                self.analysis.literal_keys.add(node.value)
            return node.type
        if isinstance(node, _Ident):
            return self._ident(node, scope)
        if isinstance(node, _Call):
            return self._global_call(node, scope, depth)
        if isinstance(node, _Member):
            return self._member(node, scope, depth, test_only=False)
        if isinstance(node, _ListLit):
            return self._list(node, scope, depth, homogeneous=True)
        if isinstance(node, _MapLit):
            self.analysis.literal_list_size = max(self.analysis.literal_list_size, len(node.entries))
            keys = [self._check(k, scope, depth) for k, _ in node.entries]
            values = [self._check(v, scope, depth) for _, v in node.entries]
            self._homogeneous([k for k, _ in node.entries], keys)
            self._homogeneous([v for _, v in node.entries], values)
            if not node.entries:
                return _Type("map", (_DYN, _DYN))
            return _Type("map", (_join_types(keys), _join_types(values)))
        if isinstance(node, _Message):
            self._error(node.pos, f"undeclared reference to '{node.name}' (in container '')")
        if isinstance(node, _Unary):
            return self._unary(node, scope, depth)
        if isinstance(node, _Chain):
            return self._chain(node, scope, depth)
        if isinstance(node, _Conditional):
            return self._conditional(node, scope, depth)
        raise AssertionError(f"unexpected node {type(node).__name__}")  # pragma: no cover

    def _list(self, node: _ListLit, scope: Mapping[str, _Type], depth: int, *, homogeneous: bool) -> _Type:
        self.analysis.literal_list_size = max(self.analysis.literal_list_size, len(node.elements))
        elements = [self._check(e, scope, depth) for e in node.elements]
        if homogeneous:
            self._homogeneous(node.elements, elements)
            return _list_of(_join_types(elements))
        if elements and all(t == elements[0] for t in elements):
            return _list_of(elements[0])
        return _list_of(_DYN)

    def _homogeneous(self, nodes: Sequence[_Node], types: Sequence[_Type]) -> None:
        expected: _Type | None = None
        for node, t in zip(nodes, types, strict=True):
            if _is_any(t) or t == _NULL:
                continue
            if expected is None:
                expected = t
            elif not _compatible(expected, t, numeric=False):
                self._error(node.pos, f"expected type '{expected}' but found '{t}'")

    def _ident(self, node: _Ident, scope: Mapping[str, _Type]) -> _Type:
        if node.leading_dot:
            self._error(node.pos, "leading '.' (root-scoped) identifiers are not supported")
        if node.name in _RESERVED:
            self._error(node.pos, f"reserved identifier: {node.name}")
        if node.name in scope:
            return scope[node.name]
        if node.name in self._declared:
            return _STRUCT
        if node.name in _TYPE_NAMES:
            return _TYPE
        self._error(node.pos, f"undeclared reference to '{node.name}' (in container '')")

    def _global_call(self, node: _Call, scope: Mapping[str, _Type], depth: int) -> _Type:
        if node.leading_dot:
            self._error(node.pos, "leading '.' (root-scoped) identifiers are not supported")
        if node.name == "has":
            arg = node.args[0] if len(node.args) == 1 else None
            if not isinstance(arg, _Member) or arg.steps[-1].kind != "select":
                self._error(node.pos, "invalid argument to has() macro")
            self._member(arg, scope, depth, test_only=True)
            return _BOOL
        args = [self._check(a, scope, depth) for a in node.args]
        return self._apply_global(node.pos, node.name, args)

    def _apply_global(self, pos: int, name: str, args: list[_Type]) -> _Type:
        spec = _GLOBAL_FUNCTIONS.get(name)
        if spec is None:
            if name in _MEMBER_FUNCTIONS or name in _MACROS:
                self._no_overload(pos, name, args)
            self._error(pos, f"undeclared reference to '{name}' (in container '')")
        arities, kinds, result = spec
        if len(args) not in arities:
            self._no_overload(pos, name, args)
        if kinds is not None and not _is_any(args[0]) and args[0].kind not in kinds:
            self._no_overload(pos, name, args)
        if not _arguments_fit(f"global:{name}", args):
            self._no_overload(pos, name, args)
        return result(args)

    def _member(self, node: _Member, scope: Mapping[str, _Type], depth: int, *, test_only: bool) -> _Type:
        steps = node.steps
        operand = node.operand
        first = steps[0]
        if (
            isinstance(operand, _Ident)
            and not operand.leading_dot
            and operand.name not in scope
            and operand.name not in self._declared
            and first.kind == "call"
            and (f"{operand.name}.{first.name}" in _GLOBAL_FUNCTIONS or operand.name in _NAMESPACES)
        ):
            qualified = f"{operand.name}.{first.name}"
            args = [self._check(a, scope, depth) for a in first.args]
            current = self._apply_global(first.pos, qualified, args)
            steps = steps[1:]
        else:
            current = self._check(operand, scope, depth)
        for index, step in enumerate(steps):
            last = index == len(steps) - 1
            if step.kind == "select":
                if last and test_only:
                    self._selectable(step, current)
                    return _BOOL
                self.analysis.literal_keys.add(step.name)
                current = self._selectable(step, current)
            elif step.kind == "index":
                current = self._index(step, current, scope, depth)
            else:
                current = self._method(step, current, scope, depth)
        return current

    def _selectable(self, step: _Step, operand: _Type) -> _Type:
        if operand.kind == "map":
            return operand.params[1]
        if operand.kind == "dyn":
            return _DYN
        if operand.kind in ("unknown", "optional_type"):
            return _UNKNOWN
        self._error(step.pos, f"type '{operand}' does not support field selection")

    def _index(self, step: _Step, operand: _Type, scope: Mapping[str, _Type], depth: int) -> _Type:
        key_node = step.args[0]
        key = self._check(key_node, scope, depth)
        if isinstance(key_node, _Literal):
            if key_node.type == _STRING:
                self.analysis.literal_keys.add(key_node.value)
        else:
            self.analysis.dynamic_index = True
        if operand.kind == "list":
            if not _is_any(key) and key.kind not in ("int", "uint", "double"):
                self._no_overload(step.pos, "_[_]", [operand, key])
            return operand.params[0]
        if operand.kind == "map":
            return operand.params[1]
        if operand.kind == "dyn":
            return _DYN
        if operand.kind in ("unknown", "optional_type"):
            return _UNKNOWN
        self._no_overload(step.pos, "_[_]", [operand, key])

    def _method(self, step: _Step, receiver: _Type, scope: Mapping[str, _Type], depth: int) -> _Type:
        if step.name in _MACROS and len(step.args) in _MACROS[step.name]:
            return self._macro(step, receiver, scope, depth)
        if step.name in _UNSUPPORTED:
            self._error(step.pos, f"the '{step.name}' macro is not supported by this implementation")
        args = [
            # cel-go exempts the argument list of format() from the homogeneous-literal rule
            self._list(a, scope, depth, homogeneous=False)
            if step.name == "format" and isinstance(a, _ListLit)
            else self._check(a, scope, depth)
            for a in step.args
        ]
        spec = _MEMBER_FUNCTIONS.get(step.name)
        if spec is None:
            if step.name in _GLOBAL_FUNCTIONS:
                self._no_overload(step.pos, step.name, args, receiver)
            self._error(step.pos, f"undeclared reference to '{step.name}' (in container '')")
        arities, kinds, result = spec
        if (
            len(args) not in arities
            or (kinds is not None and not _is_any(receiver) and receiver.kind not in kinds)
            or not _arguments_fit(step.name, args)
        ):
            self._no_overload(step.pos, step.name, args, receiver)
        if (
            step.name == "join"
            and receiver.kind == "list"
            and not _compatible(receiver.params[0], _STRING, numeric=False)
        ):
            self._no_overload(step.pos, step.name, args, receiver)
        return result(receiver, args)

    def _macro(self, step: _Step, receiver: _Type, scope: Mapping[str, _Type], depth: int) -> _Type:
        variable = step.args[0]
        if not isinstance(variable, _Ident) or variable.leading_dot:
            self._error(variable.pos, "argument must be a simple name")
        if receiver.kind in ("list", "map"):
            element = receiver.params[0]
        elif _is_any(receiver):
            element = receiver
        else:
            self._error(
                step.pos,
                f"expression of type '{receiver}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
            )
        inner = {**scope, variable.name: element}
        self.analysis.comprehension_depth = max(self.analysis.comprehension_depth, depth + 1)
        bodies = [self._check(a, inner, depth + 1) for a in step.args[1:]]
        predicates = bodies if step.name != "map" else bodies[:-1]
        for node, t in zip(step.args[1:], predicates, strict=False):
            if not _is_any(t) and t != _BOOL:
                self._error(node.pos, f"expected type 'bool' but found '{t}'")
        if step.name == "map":
            return _list_of(bodies[-1])
        if step.name == "filter":
            return _list_of(element)
        return _BOOL

    def _unary(self, node: _Unary, scope: Mapping[str, _Type], depth: int) -> _Type:
        operand = self._check(node.operand, scope, depth)
        if node.op == "!":
            if not _is_any(operand) and operand != _BOOL:
                self._no_overload(node.pos, "!_", [operand])
            return _BOOL
        if _is_any(operand):
            return operand
        if operand.kind not in ("int", "double", "duration"):
            self._no_overload(node.pos, "-_", [operand])
        return operand

    def _chain(self, node: _Chain, scope: Mapping[str, _Type], depth: int) -> _Type:
        left = self._check(node.first, scope, depth)
        for op, pos, right_node in node.rest:
            right = self._check(right_node, scope, depth)
            left = self._binary(op, pos, left, right)
        return left

    def _binary(self, op: str, pos: int, left: _Type, right: _Type) -> _Type:
        name = _OPERATOR_NAMES[op]
        if op in ("&&", "||"):
            for t in (left, right):
                if not _is_any(t) and t != _BOOL:
                    self._no_overload(pos, name, [left, right])
            return _BOOL
        if op in ("==", "!="):
            if left != _NULL and right != _NULL and not _compatible(left, right, numeric=True):
                self._no_overload(pos, name, [left, right])
            return _BOOL
        if op == "in":
            if right.kind in ("list", "map"):
                element = right.params[0]
            elif _is_any(right):
                return _BOOL
            else:
                self._no_overload(pos, name, [left, right])
            if left != _NULL and element != _NULL and not _compatible(left, element, numeric=True):
                self._no_overload(pos, name, [left, right])
            return _BOOL
        if op in ("<", "<=", ">", ">="):
            for t in (left, right):
                if not _is_any(t) and t.kind not in _ORDERED:
                    self._no_overload(pos, name, [left, right])
            if not _compatible(left, right, numeric=True):
                self._no_overload(pos, name, [left, right])
            return _BOOL
        # arithmetic
        if _is_any(left) and _is_any(right):
            return _DYN if left.kind == right.kind == "dyn" else _UNKNOWN
        if _is_any(left) or _is_any(right):
            known = right if _is_any(left) else left
            allowed = {
                "+": {"int", "uint", "double", "string", "bytes", "list", "timestamp", "duration"},
                "-": {"int", "uint", "double", "timestamp", "duration"},
                "*": _NUMERIC,
                "/": _NUMERIC,
                "%": {"int", "uint"},
            }[op]
            if known.kind not in allowed:
                self._no_overload(pos, name, [left, right])
            if known.kind in ("timestamp", "duration"):
                return _UNKNOWN
            return known
        if op == "+" and {left.kind, right.kind} == {"timestamp", "duration"}:
            return _TIMESTAMP
        if op == "-" and left.kind == "timestamp" and right.kind in ("timestamp", "duration"):
            return _DURATION if right.kind == "timestamp" else _TIMESTAMP
        same = {
            "+": {"int", "uint", "double", "string", "bytes", "list", "duration"},
            "-": {"int", "uint", "double", "duration"},
            "*": _NUMERIC,
            "/": _NUMERIC,
            "%": {"int", "uint"},
        }[op]
        if left.kind != right.kind or left.kind not in same or not _compatible(left, right, numeric=False):
            self._no_overload(pos, name, [left, right])
        if left.kind == "list":
            return _list_of(_join_types([left.params[0], right.params[0]]))
        return left

    def _conditional(self, node: _Conditional, scope: Mapping[str, _Type], depth: int) -> _Type:
        results: list[_Type] = []
        for condition_node, then_node, pos in node.branches:
            condition = self._check(condition_node, scope, depth)
            results.append(self._check(then_node, scope, depth))
            if not _is_any(condition) and condition != _BOOL:
                self._no_overload(pos, "_?_:_", [condition, results[-1], _UNKNOWN])
        results.append(self._check(node.otherwise, scope, depth))
        concrete = [t for t in results if not _is_any(t) and t != _NULL]
        for t in concrete[1:]:
            if not _compatible(concrete[0], t, numeric=False):
                self._no_overload(node.branches[0][2], "_?_:_", [_BOOL, concrete[0], t])
        if len(concrete) == len(results) and all(t == concrete[0] for t in concrete):
            return concrete[0]
        if all(t.kind == "dyn" for t in results):
            return _DYN
        return _UNKNOWN


def _position(source: str, pos: int) -> tuple[int, int]:
    line = source.count("\n", 0, pos) + 1
    column = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return line, column


def _compile_message(source: str, pos: int, message: str) -> str:
    line, column = _position(source, pos)
    return f"failed to parse the CEL expression '{source}': ERROR: <input>:{line}:{column}: {message}"


_MACRO_VARIABLE_RE: Final = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([_a-zA-Z][_a-zA-Z0-9]*)\s*,"
)


def _fallback_analysis(source: str, program: _cel.Program, declared: frozenset[str]) -> _Analysis:
    """Undeclared-variable check from the Rust library's references (used if our parser disagrees)."""
    bound = set(_MACRO_VARIABLE_RE.findall(source))
    for name in sorted(program.variables()):
        if name not in declared and name not in bound and name not in _NAMESPACES and name not in _TYPE_NAMES:
            raise CELCompileError(
                f"failed to parse the CEL expression '{source}': undeclared reference to '{name}'"
            )
    return _Analysis(comprehension_depth=len(_MACRO_VARIABLE_RE.findall(source)), dynamic_index=True)


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


def _replace(s: object, old: object, new: object, limit: object = -1) -> str:
    text, before, after, count = _as_str(s), _as_str(old), _as_str(new), _as_int(limit)
    return text.replace(before, after) if count < 0 else text.replace(before, after, count)


def _split(s: object, sep: object, limit: object = -1) -> list[str]:
    text, separator, count = _as_str(s), _as_str(sep), _as_int(limit)
    if count == 0:
        return []
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
    return _as_str(sep).join(_as_str(item) for item in _as_list(items))


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
    return '"' + "".join(_QUOTE_ESCAPES.get(c, c) for c in _as_str(s)) + '"'


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
    i = used = 0
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
_KNOWN_FUNCTIONS: Final = frozenset(_MEMBER_FUNCTIONS) | frozenset(_GLOBAL_FUNCTIONS) | frozenset(_MACROS)


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


# ---------------------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expression:
    """A compiled expression; immutable, safe to share between threads and tasks."""

    source: str
    variables: frozenset[str]
    output: OutputType
    _program: _cel.Program = field(repr=False, compare=False)
    _analysis: _Analysis = field(repr=False, compare=False)

    @property
    def static_type(self) -> str:
        """The output type as inferred at compile time, as cel-go prints it (``dyn`` when unknown)."""
        return str(self._analysis.output)

    def evaluate(self, activation: Mapping[str, object]) -> object:
        """Evaluate with the given variables; check the result against ``output``."""
        return self._evaluate(activation, self.output)

    def evaluate_bool(self, activation: Mapping[str, object]) -> bool:
        result = self._evaluate(activation, OutputType.BOOL)
        assert isinstance(result, bool)
        return result

    def evaluate_string(self, activation: Mapping[str, object]) -> str:
        result = self._evaluate(activation, OutputType.STRING)
        assert isinstance(result, str)
        return result

    def _evaluate(self, activation: Mapping[str, object], output: OutputType) -> object:
        budget = [MAX_INPUT_NODES]
        variables: dict[str, object] = {}
        largest = self._analysis.literal_list_size
        for name in self.variables:
            if name in activation:
                variables[name], size = _convert_input(name, activation[name], budget)
                largest = max(largest, size)
        depth = self._analysis.comprehension_depth
        if depth >= 2 and max(largest, 1) ** depth > MAX_COMPREHENSION_COST:
            raise CELEvalError(
                f"failed to evaluate the CEL expression '{self.source}': evaluation cost limit exceeded "
                f"({depth} nested comprehensions over {largest} elements)"
            )
        failure: str | None = None
        result: object = None
        _FUNCTION_STATE.error = None
        try:
            result = self._program.execute(_cel.Context(variables, _FUNCTIONS))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            failure = self._describe(exc, getattr(_FUNCTION_STATE, "error", None))
        finally:
            _FUNCTION_STATE.error = None
        if failure is not None:  # raised outside the except block: no chained library exception
            raise CELEvalError(f"failed to evaluate the CEL expression '{self.source}': {failure}")
        static = self._analysis.output
        if (static == _BOOL and not isinstance(result, bool)) or (
            static == _STRING and not isinstance(result, str)
        ):  # the Rust evaluator folds ``!!x`` to ``x``; cel-go fails at run time
            raise CELEvalError(f"failed to evaluate the CEL expression '{self.source}': {_NO_OVERLOAD}")
        if output is OutputType.BOOL and not isinstance(result, bool):
            raise CELEvalError(f"failed to evaluate CEL expression as boolean: '{self.source}'")
        if output is OutputType.STRING and not isinstance(result, str):
            raise CELEvalError(f"failed to evaluate CEL expression as string: '{self.source}'")
        return result

    def _describe(self, exc: BaseException, function_error: str | None) -> str:
        """A value-free description of a library failure (library messages may quote values)."""
        if function_error is not None:
            return function_error
        text = str(exc)
        if isinstance(exc, KeyError):
            key = exc.args[0] if exc.args else None
            if (
                not self._analysis.dynamic_index
                and isinstance(key, str)
                and key in self._analysis.literal_keys
            ):
                return f"no such key: {key}"
            return "no such key"
        if isinstance(exc, IndexError):
            return "index out of range"
        if isinstance(exc, ZeroDivisionError):
            return "modulus by zero" if "modulo" in text else "division by zero"
        if isinstance(exc, OverflowError):
            return "integer overflow"
        if "optional.none() dereference" in text:
            return "optional.none() dereference"
        function = re.match(r"Function '([A-Za-z_][A-Za-z0-9_.]*)' error", text)
        if function is not None and function.group(1) in _KNOWN_FUNCTIONS:
            return f"function '{function.group(1)}' failed: invalid argument"
        undefined = re.match(r"Undefined variable or function: '([^']*)'", text)
        if undefined is not None:
            if undefined.group(1) in self.variables:
                return f"no such attribute(s): {undefined.group(1)}"
            return _NO_OVERLOAD
        if isinstance(exc, TypeError):
            return _NO_OVERLOAD
        if isinstance(exc, ValueError) and "Conversion" in text:
            return "unsupported value type"
        return "evaluation failed"


def compile_expression(
    source: str, *, variables: Iterable[str], output: OutputType, strict_types: bool = False
) -> Expression:
    """Compile ``source`` for an environment declaring ``variables`` (each a ``map(string, dyn)``).

    Raises ``CELCompileError`` for syntax errors, undeclared references, impossible overloads, literal results
    of the wrong type and oversized or too deeply nested expressions. With ``strict_types`` a ``dyn`` result
    is also rejected when ``output`` is not ``ANY`` (exactly Flux's behaviour); otherwise it is checked at
    evaluation time.
    """
    if not isinstance(source, str):
        raise CELCompileError("CEL expression must be a string")
    return _compile_cached(source, frozenset(variables), OutputType(output), strict_types)


@functools.lru_cache(maxsize=1024)
def _compile_cached(
    source: str, variables: frozenset[str], output: OutputType, strict_types: bool
) -> Expression:
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise CELCompileError(
            f"CEL expression is too long: {len(source)} characters (the limit is {MAX_EXPRESSION_LENGTH})"
        )
    if not source.strip():
        raise CELCompileError("CEL expression is empty")
    tokens: list[_Token] | None
    try:
        tokens = _tokenize(source)
    except _SyntaxFailure:
        tokens = None
    if tokens is not None and _bracket_depth(tokens) > MAX_NESTING_DEPTH:
        raise CELCompileError(
            f"failed to parse the CEL expression '{source}': expression is nested too deeply "
            f"(the limit is {MAX_NESTING_DEPTH} levels of brackets)"
        )
    program = _library_compile(source)
    analysis: _Analysis | None = None
    if tokens is not None:
        try:
            tree = _Parser(tokens).parse()
        except _SyntaxFailure:
            tree = None
        if tree is not None:
            analysis = _Checker(source, variables).check(tree)
    if analysis is None:
        analysis = _fallback_analysis(source, program, variables)
    _check_output(analysis.output, output, strict_types)
    return Expression(source, variables, output, program, analysis)


def _library_compile(source: str) -> _cel.Program:
    failure: str | None = None
    try:
        return _cel.compile(source)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        text = str(exc)
        failure = text[text.index("ERROR:") :] if "ERROR:" in text else "syntax error"
    raise CELCompileError(f"failed to parse the CEL expression '{source}': {failure}")


def _check_output(inferred: _Type, output: OutputType, strict_types: bool) -> None:
    if output is OutputType.ANY or inferred.kind == "unknown":
        return
    if inferred.kind == "dyn" and not strict_types:
        return
    if inferred.kind != output.value:
        raise CELCompileError(f"CEL expression output type mismatch: expected {output.value}, got {inferred}")
