"""The ``history`` command's reader: what the controller wrote, read only; the memory store has nothing to read."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from notification_controller.errors import ConfigError, StoreError
from notification_controller.history.model import Outcome, Query, Record, new_record_id
from notification_controller.history.reader import open_reader
from notification_controller.history.sqlite import SQLiteHistory
from notification_controller.settings import StoreSettings


def test_the_memory_store_has_no_history_to_read() -> None:
    with pytest.raises(ConfigError, match="--server"):
        open_reader(StoreSettings(url="memory"))
    with pytest.raises(ConfigError, match="unknown scheme"):
        open_reader(StoreSettings(url="redis://x"))


async def test_reads_what_the_controller_wrote_and_creates_nothing(tmp_path: Path) -> None:
    missing = open_reader(StoreSettings(url=f"sqlite:{tmp_path}/missing.db"))
    with pytest.raises(StoreError):
        await missing.start()
    assert not (tmp_path / "missing.db").exists()
    writer = SQLiteHistory(tmp_path / "s.db")
    await writer.start()
    r = Record(new_record_id(), time.time(), "e", "", "", "", "", "", "", "", "", Outcome.UNMATCHED)
    writer.record(r)
    async with asyncio.timeout(30):
        while writer.written < 1:
            await asyncio.sleep(0.02)
    reader = open_reader(StoreSettings(url=f"sqlite:{tmp_path}/s.db"))
    await reader.start()
    try:
        assert [x.id for x in await reader.query(Query())] == [r.id]
    finally:
        await reader.close()
        await writer.close()
