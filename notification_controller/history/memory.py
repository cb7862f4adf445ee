"""The history with ``--store=memory``: a ring of the last ``--history-max-records`` decisions in this process.

Like the memory store itself (Flux's at-most-once), the history goes with the process. ``record`` appends
to a ``deque`` with a ``maxlen`` (O(1), the oldest record goes), so there is no buffer to fill and nothing
is ever dropped for lack of room; The ring holds ``Record.row`` tuples, which the garbage collector stops tracking (model.py). ``query`` walks
the ring newest first and stops at the limit, which is
at most ``--history-max-records`` comparisons (10,000 by default: well under a millisecond).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator

from ..metrics import HistoryMetrics
from .live import Fanout
from .model import _OUTCOME, Query, Record, Row


class MemoryHistory:
    def __init__(self, max_records: int = 10_000, metrics: HistoryMetrics | None = None) -> None:
        if max_records < 1:
            raise ValueError("--history-max-records: must be at least 1")
        self._ring: deque[Row] = deque(maxlen=max_records)  # rows: untracked by the collector (model.py)
        self._live = Fanout()
        self._metrics = metrics
        self._counts = metrics.counts if metrics is not None else None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._live.close()

    def __len__(self) -> int:
        return len(self._ring)

    def __bool__(self) -> bool:  # a history is there even while empty (``if history:`` must not say no)
        return True

    def record(self, r: Record, /) -> None:
        self.record_row(r.row())

    def record_row(self, row: Row, /) -> None:
        self._ring.append(row)
        counts = self._counts
        if counts is not None:  # HistoryMetrics.recorded, inline (the pipeline's path)
            outcome = row[_OUTCOME]
            counts[outcome] = counts.get(outcome, 0) + 1
        if self._live.subscribers:
            self._live.publish(Record.from_row(row))

    async def query(self, q: Query, /) -> list[Record]:
        out: list[Record] = []
        limit = q.bounded_limit
        for row in reversed(self._ring):
            if q.matches_row(row):
                out.append(Record.from_row(row))
                if len(out) >= limit:
                    break
        return out

    def subscribe(self) -> AsyncIterator[Record]:
        return self._live.subscribe()
