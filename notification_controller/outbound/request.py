"""What goes out and what comes back: plain values, built by providers and hooks, sent by ``client.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
