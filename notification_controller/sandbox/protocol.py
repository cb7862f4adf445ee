"""The pipe protocol between the controller and a sandbox worker: length-prefixed orjson frames.

A frame is a 4-byte big-endian length and that many bytes of one JSON object. JSON, not pickle: the worker
runs hostile expressions, so nothing it sends back may be able to build arbitrary Python objects in the
controller, and the controller decodes at most ``MAX_REPLY`` bytes per answer.

Requests: ``{"id", "kind": "template" | "cel" | "oidc", ...}`` (fields per kind in ``worker.py``). Answers:
``{"id", "ok": true, "value": ...}`` or ``{"id", "ok": false, "error": "...", "reason": "error" | "memory"}``.
The worker's first frame is ``{"ready": true}`` once Jinja2 and the CEL extension are imported.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

HEADER = struct.Struct(">I")
MAX_REQUEST = 64 * 1024 * 1024
"""Largest request the worker reads (an event's variables: the event body is capped well below)."""
MAX_REPLY = 4 * 1024 * 1024
"""Largest answer the controller reads (a rendered body is at most 256 Ki characters)."""


class FrameError(Exception):
    """A frame that is too large, truncated or not a JSON object."""


def encode(message: dict[str, Any]) -> bytes:
    payload = orjson.dumps(message)
    return HEADER.pack(len(payload)) + payload


def length(header: bytes, limit: int) -> int:
    if len(header) != HEADER.size:
        raise FrameError("truncated frame header")
    (size,) = HEADER.unpack(header)
    if size > limit:
        raise FrameError(f"frame of {size} bytes, more than {limit}")
    return int(size)


def decode(payload: bytes) -> dict[str, Any]:
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError("frame is not a JSON object")
    return message
