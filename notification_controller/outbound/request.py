"""What goes out and what comes back: plain values, built by providers and hooks, sent by ``client.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from multidict import CIMultiDict, CIMultiDictProxy


@dataclass(frozen=True)
class OutboundRequest:
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    basic_auth: tuple[str, str] | None = None


@dataclass(frozen=True)
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
