"""The cheaper ingest path (issue 17 part 2) keeps every behaviour it replaced.

* The body read skips its timer when the body came with the request head; a body that arrives later, in
  pieces, is still read (under the timer) and accepted, and one that comes too late is still a 400.
* Go-lenient key matching takes a shortcut for the canonical spelling: every spelling still decodes alike.
* ``Retry-After``/``X-RateLimit-Reset`` strings are cached per second: each second, and each zone, still
  gets its own correct text.
* ``store.local`` no longer imports PyJWT (→ cryptography, ~7.7 MB RSS) at import time; a JWT token file is
  still read for its expiry.
* The process raises the young-generation GC threshold.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import orjson

from notification_controller.api.event import Event
from notification_controller.app import GC_GEN0_THRESHOLD, tune_gc
from notification_controller.core.ratelimit import rfc1123_utc
from notification_controller.server.events import EventServerSettings

from .kit import event_body, parse_answer
from .test_ingest_fuzz import _event_runner


async def _post_in_pieces(port: int, pieces: list[bytes], pause: float) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause)
        async with asyncio.timeout(10):
            raw = await reader.read()
    finally:
        writer.close()
    return parse_answer(raw).status


async def test_a_body_after_the_head_is_read_and_a_late_one_is_refused() -> None:
    settings = EventServerSettings(header_timeout=5.0, body_read_timeout=1.0, lingering_time=0.5)
    server, port, http = await _event_runner(settings)
    try:

        def pieces(message: str) -> tuple[bytes, bytes, bytes]:
            body = event_body(message)  # a distinct event each time: no duplicate 429
            head = f"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
            half = len(body) // 2
            return head.encode(), body[:half], body[half:]

        head, first, rest = pieces("together")
        together = await _post_in_pieces(port, [head + first + rest], 0.0)
        split = await _post_in_pieces(port, list(pieces("split")), 0.2)
        late = await _post_in_pieces(port, list(pieces("late")), 0.7)  # the body's end after 1.4 s > 1 s
    finally:
        await server.stop()
        await http.close()
    assert (together, split, late) == (202, 202, 400)


def test_every_spelling_of_a_field_decodes_alike() -> None:
    spellings = [
        {"involvedObject": {"kind": "A", "apiVersion": "g/v1"}, "message": "m", "reportingController": "c"},
        {"involvedobject": {"KIND": "A", "apiversion": "g/v1"}, "MESSAGE": "m", "reportingcontroller": "c"},
        {"InvolvedObject": {"Kind": "A", "ApiVersion": "g/v1"}, "Message": "m", "ReportingController": "c"},
    ]
    events = [Event.decode(orjson.dumps(raw)) for raw in spellings]
    assert events[0] == events[1] == events[2]
    assert (events[0].involved_object.kind, events[0].object_group, events[0].message) == ("A", "g", "m")
    last_wins = Event.decode(b'{"message": "first", "Message": "second"}')
    assert last_wins.message == "second"  # Go: the last matching key wins


def test_reset_times_are_formatted_per_second_and_zone() -> None:
    base = datetime(2026, 11, 23, 10, 0, 0, 100, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    for offset in range(20):
        moment = base + timedelta(seconds=offset // 2, microseconds=offset * 1000)
        expected = moment.strftime("%a, %d %b %Y %H:%M:%S UTC")
        assert rfc1123_utc(moment) == expected
        assert rfc1123_utc(moment.astimezone(plus_two)) == expected
    assert (
        rfc1123_utc(datetime(2026, 11, 23, 12, 0, 0, 900, tzinfo=plus_two)) == "Mon, 23 Nov 2026 10:00:00 UTC"
    )


def test_store_local_does_not_import_jwt() -> None:
    code = "import sys, notification_controller.objects.local, notification_controller.app; print('jwt' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_tune_gc_raises_the_young_generation_threshold() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_gc()
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 10, 10)
    finally:
        gc.set_threshold(*saved)
