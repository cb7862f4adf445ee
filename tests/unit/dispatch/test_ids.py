"""Notification and event ids (``dispatch/model.new_id``): 32 lowercase hex characters, this process's random
prefix then a counter, so ids never repeat and sort in the order they were made within a process."""

from __future__ import annotations

import re
import subprocess
import sys

from notification_controller.dispatch.model import new_id


def test_ids_are_32_hex_characters_a_prefix_then_a_counter() -> None:
    ids = [new_id() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == 1000
    assert len({i[:16] for i in ids}) == 1  # this process's prefix
    counters = [int(i[16:], 16) for i in ids]
    assert counters == list(range(counters[0], counters[0] + 1000))


def test_another_process_has_another_prefix() -> None:
    code = "from notification_controller.dispatch.model import new_id; print(new_id())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert re.fullmatch(r"[0-9a-f]{32}\n", other)
    assert other[:16] != new_id()[:16]
