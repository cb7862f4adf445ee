"""The history of decisions (issue 27, docs/history.md): what the pipeline decided about every event.

``open_history(settings, store_url)`` picks the backend that ``--store`` selects, so the history lives where
the notifications do:

* ``memory`` — a ring of ``--history-max-records`` records in this process (``memory.py``);
* ``sqlite:PATH`` — a table in the same database file, kept ``--history-max-age`` and at most
  ``--history-max-bytes`` (``sqlite.py``): it survives a restart;
* ``nats://...`` — a JetStream stream ``NC_HISTORY`` with those limits (``nats.py``): shared by replicas.

``--history=false`` records nothing (``open_history`` answers ``None``). The vocabulary and the record are
in ``model.py``; the pipeline builds records in ``dispatch/`` and the event server.
"""

from __future__ import annotations

from ..metrics import HistoryMetrics
from ..settings import HistorySettings
from .memory import MemoryHistory
from .model import MAX_LIMIT, MAX_TEXT, OUTCOMES, History, Outcome, Query, Record, cut, new_record_id

__all__ = [
    "MAX_LIMIT",
    "MAX_TEXT",
    "OUTCOMES",
    "History",
    "MemoryHistory",
    "Outcome",
    "Query",
    "Record",
    "cut",
    "new_record_id",
    "open_history",
]


def open_history(
    settings: HistorySettings, store_url: str, *, metrics: HistoryMetrics | None = None
) -> History | None:
    """The history for ``--store`` (not started), or ``None`` with ``--history=false``."""
    if not settings.enabled:
        return None
    # The durable backends (sqlite, nats) follow; until then every store keeps the memory ring.
    del store_url
    return MemoryHistory(settings.max_records, metrics)
