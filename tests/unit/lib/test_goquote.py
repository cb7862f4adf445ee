"""``lib.goquote.quote`` is Go's ``strconv.Quote``: checked against Go's own test table (kept verbatim in
``tests/data/go_strconv_quote_test.txt``), against a decoder of Go string literals (what it writes reads
back as the input, for any input), and through both callers (providers' and receivers' ``go_quote``, which
used to disagree on ``\\a \\b \\f \\v``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.lib.goquote import quote

GO_TABLE = Path(__file__).resolve().parents[2] / "data" / "go_strconv_quote_test.txt"

_SIMPLE = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39}
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`|\'(?:[^\'\\]|\\.)*\'|0x[0-9a-fA-F]+(?:\s*\+\s*\d+)?')


def go_literal(token: str) -> bytes | int:
    """A Go string or rune literal as the bytes of the string (rune literals: the rune), or an int."""
    if token.startswith("0x"):
        return sum(int(part, 0) for part in token.split("+"))
    body = token[1:-1]
    if token[0] == "`":
        return body.encode()
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        kind = body[i + 1]
        if kind in _SIMPLE:
            out.append(_SIMPLE[kind])
            i += 2
        elif kind == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif kind in "uU":
            width = 4 if kind == "u" else 8
            out += chr(int(body[i + 2 : i + 2 + width], 16)).encode()
            i += 2 + width
        else:  # octal \NNN
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
    if token[0] == "'":
        return ord(out.decode())
    return bytes(out)


def go_table(name: str) -> list[list[bytes | int]]:
    text = GO_TABLE.read_text("utf-8")
    block = text[text.index(f"var {name} ") :]
    block = block[: block.index("\n}\n")]
    rows = [line.strip() for line in block.splitlines()[1:]]
    return [[go_literal(t) for t in _LITERAL.findall(row)] for row in rows if row.startswith("{")]


QUOTE_TESTS = go_table("quotetests")
RUNE_TESTS = go_table("quoterunetests")


def test_the_go_tables_were_read_whole() -> None:
    assert len(QUOTE_TESTS) == 7 and all(len(row) == 4 for row in QUOTE_TESTS)
    assert len(RUNE_TESTS) == 12 and all(len(row) == 4 for row in RUNE_TESTS)


@pytest.mark.parametrize("row", QUOTE_TESTS, ids=lambda row: repr(row[0]))
def test_quote_gives_go_strconv_quote(row: list[bytes | int]) -> None:
    given_in, expected = row[0], row[1]
    assert isinstance(given_in, bytes) and isinstance(expected, bytes)
    assert quote(given_in).encode() == expected
    # the same string as Python carries it: invalid UTF-8 as surrogate escapes
    assert quote(given_in.decode("utf-8", "surrogateescape")).encode() == expected


@pytest.mark.parametrize("row", [r for r in RUNE_TESTS if isinstance(r[0], int) and r[0] <= 0x10FFFF])
def test_a_one_rune_string_is_quoted_as_go_quotes_the_rune(row: list[bytes | int]) -> None:
    # QuoteRune(r) and Quote(string(r)) escape alike; only the quote character differs (none of these is a
    # quote). 0x10ffff + 1 is not a rune a string can hold: its row is left out.
    rune, expected = row[0], row[1]
    assert isinstance(rune, int) and isinstance(expected, bytes)
    assert quote(chr(rune)).encode() == b'"' + expected[1:-1] + b'"'


@pytest.mark.parametrize(
    "module",
    [
        "notification_controller.receivers.base",
        "notification_controller.receivers.signatures",
        "notification_controller.providers.git.base",
        "notification_controller.providers.git.azuredevops",
        "notification_controller.providers.git.bitbucket",
        "notification_controller.providers.git.bitbucketserver",
        "notification_controller.providers.git.forges",
    ],
)
def test_every_caller_uses_the_one_function(module: str) -> None:
    assert importlib.import_module(module).go_quote is quote


def test_control_characters_get_go_escapes() -> None:
    # the receivers' copy wrote \x07 \x08 \x0c \x0b where Go writes \a \b \f \v
    assert quote("\a\b\f\v\x00\x7f") == '"\\a\\b\\f\\v\\x00\\x7f"'
    assert quote('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert quote("é\u200b\U0001f600\U000e0001") == '"é\\u200b\U0001f600\\U000e0001"'


def test_lone_surrogates_are_the_bytes_go_would_see() -> None:
    assert quote("a\udcffb") == '"a\\xffb"'  # surrogateescape of the byte 0xff
    assert quote("\ud800") == '"\\xed\\xa0\\x80"'  # Go: three bytes that are not UTF-8
    assert quote(b"\xed\xa0\x80") == '"\\xed\\xa0\\x80"'


@given(st.binary(max_size=64))
def test_go_reads_back_what_quote_writes(data: bytes) -> None:
    quoted = quote(data)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert go_literal(quoted) == data


@given(st.text(max_size=64))
def test_text_round_trips_through_go_literals(text: str) -> None:
    assert go_literal(quote(text)) == text.encode("utf-8", "surrogatepass")
