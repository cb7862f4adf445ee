"""The front end: a lexer and a parser that builds a small AST (operator and selector chains are flat
lists, so long chains do not recurse). The Rust parser stays the authority on syntax."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn

from .values import _BOOL, _BYTES, _DOUBLE, _INT, _NULL, _STRING, _UINT, _Type

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
