"""Go's ``%q`` for a string: ``strconv.Quote``, byte for byte.

Flux's messages quote user input with ``%q`` (``invalid repository id "a\\tb"``, ``unsupported event
"push"``), and its tests compare those messages, so ours must quote as Go does. Two copies of this function
used to live in ``providers/common.py`` and ``receivers/base.py`` and disagreed on ``\\a \\b \\f \\v`` (the
receivers' wrote ``\\x07``); this is the one both use (issue 24 item 3).

Go's rules (``strconv.appendQuotedWith`` with ``ASCIIonly=false, graphicOnly=false``), per rune of the
string:

* ``"`` and ``\\`` are escaped with a backslash;
* a printable rune (``unicode.IsPrint``: categories L, M, N, P, S and the ASCII space) is kept as it is —
  Python's ``str.isprintable`` is the same set (everything but categories C and Z, space excepted);
* ``\\a \\b \\f \\n \\r \\t \\v`` get their short escapes;
* other runes below U+0020 and DEL → ``\\xNN``; other runes below U+10000 → ``\\uNNNN``; above →
  ``\\UNNNNNNNN`` (lower-case hex, as Go);
* a byte that is not valid UTF-8 → ``\\xNN``. Python strings carry such bytes as surrogate escapes
  (U+DC80–U+DCFF, ``errors="surrogateescape"``, as aiohttp decodes raw headers), and those are written as
  the byte they stand for; any other lone surrogate is written as the bytes of its UTF-8-like encoding
  (``\\xed\\xa0\\x80`` for U+D800), which is what Go prints for that byte sequence. ``bytes`` are quoted as
  Go quotes a ``string`` holding them.

The one known difference: the Unicode version of the printable set is Python's (3.11: Unicode 14), Go's is
its own (Go 1.21+: Unicode 15); a rune assigned in between is escaped here and kept by Go.

Tested against Go's own table (``src/strconv/quote_test.go``'s ``quotetests`` and ``quoterunetests``, kept
verbatim in ``tests/data/go_strconv_quote_test.txt``) by ``tests/unit/lib/test_goquote.py``.
"""

from __future__ import annotations

_SHORT = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x22: '\\"',
    0x5C: "\\\\",
}


def quote(text: str | bytes) -> str:
    """``strconv.Quote(text)``: ``text`` double-quoted with Go's escapes (see the module docstring)."""
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8", "surrogateescape")
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'  # the common case: nothing to escape
    out = ['"']
    for ch in text:
        code = ord(ch)
        short = _SHORT.get(code)
        if short is not None:
            out.append(short)
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:  # another lone surrogate: Go sees its three invalid bytes
            out.extend(f"\\x{byte:02x}" for byte in ch.encode("utf-8", "surrogatepass"))
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
