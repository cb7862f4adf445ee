"""What goes out and what comes back: plain values, built by providers and hooks, sent by ``client.py``.

``wire_headers`` is the one rule for the headers a request may carry, whichever transport sends it (issue 23
item 13: the direct and the proxied path used to differ): the framing headers (``Host``, ``Content-Length``,
``Transfer-Encoding``, ``Trailer``) are the transport's, as in Go's ``Request.Write`` (Flux sets a Secret's
headers with ``Header.Set`` and Go never writes those from ``Header``), so a Secret's are dropped; and a name
that is not an RFC 9110 token or a value with a control character (NUL, CR, LF...) or a non-ASCII character
is refused. Non-ASCII is refused rather than encoded: aiohttp writes UTF-8 and the direct client Latin-1, and
a receiver cannot tell which charset a field is in (RFC 9110 §5.5: obs-text is opaque).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import quote

from multidict import CIMultiDict, CIMultiDictProxy


def path_segment(text: str) -> str:
    """Escape one URL path segment (``owner``, ``repo``, a SHA, a tenant...) as Go's ``url.PathEscape``."""
    return quote(text, safe="-._~!$&'()*+,;=:@")


# Plain slot dataclasses, never mutated: one of each per delivery, and a frozen dataclass's ``__init__`` stores
# every field through ``object.__setattr__`` (issue 29, py-spy: ~1% of a delivery's CPU for these two)
@dataclass(slots=True)
class OutboundRequest:
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    basic_auth: tuple[str, str] | None = None


@dataclass(slots=True)
class OutboundResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes  # capped at the client's body limit

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def shared_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """Headers that many requests share (a Provider's), built once: read-only, and in the form the client
    merges without converting it first (a case-insensitive multidict: ~2 µs a request, issue 17). The
    same entries in the same order as ``headers``, so the same bytes go out.

    A name given twice in two spellings (``Content-Type`` and a Secret's ``content-type``) keeps a plain
    mapping: a multidict would answer both names with the first value when copied (``{**headers}``)."""
    if len({name.lower() for name in headers}) != len(headers):
        return MappingProxyType(dict(headers))
    return CIMultiDictProxy(CIMultiDict(headers))


FRAMING = frozenset({"host", "content-length", "transfer-encoding", "trailer"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[^\t\x20-\x7e]")


class InvalidHeader(ValueError):
    """A header the request must not carry; ``name`` is None when the name itself is not a token."""

    def __init__(self, name: str | None) -> None:
        what = f"header {name!r}" if name is not None else "a header name"
        super().__init__(
            f"{what} has a character HTTP does not allow in a request "
            "(control characters and non-ASCII are refused)"
        )
        self.name = name


def wire_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` as they may go out: checked, without framing headers (``headers`` itself when nothing is
    dropped, so a Provider's shared mapping is not copied). Raises ``InvalidHeader``. A shared mapping
    (read-only, ``shared_headers``) is checked once, not per request (issue 29)."""
    if type(headers) in _SHARED:
        hit = _checked.get(id(headers))
        if hit is not None and hit[0] is headers:
            return hit[1]
        checked = _wire_headers(headers)
        if len(_checked) >= 256:
            _checked.clear()  # replaced Providers' mappings must not accumulate
        _checked[id(headers)] = (headers, checked)
        return checked
    return _wire_headers(headers)


_SHARED = (CIMultiDictProxy, MappingProxyType)
_checked: dict[int, tuple[Mapping[str, str], Mapping[str, str]]] = {}  # id -> (a shared mapping, checked)


def _wire_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    drop = False
    for name, value in headers.items():
        if _TOKEN.fullmatch(name) is None:
            raise InvalidHeader(None)
        if _BAD_VALUE.search(value) is not None:
            raise InvalidHeader(name)
        if name.lower() in FRAMING:
            drop = True
    if not drop:
        return headers
    return {name: value for name, value in headers.items() if name.lower() not in FRAMING}
