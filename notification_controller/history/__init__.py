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

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from ..errors import ConfigError
from ..metrics import HistoryMetrics
from ..settings import HistorySettings, StoreSettings
from .memory import MemoryHistory
from .model import MAX_LIMIT, MAX_TEXT, OUTCOMES, History, Outcome, Query, Record, cut, new_record_id

if TYPE_CHECKING:  # nats-py is imported only when a nats:// history is opened
    from .nats import NATSConnection

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


def _bad(url: str, why: str) -> ConfigError:
    shown = url if "@" not in url else "<url with credentials>"
    return ConfigError(f"invalid --store {shown!r} for the history: {why}", reason="InvalidStore")


def open_history(
    settings: HistorySettings,
    store: StoreSettings | str,
    *,
    metrics: HistoryMetrics | None = None,
    read_only: bool = False,
) -> History | None:
    """The history for ``--store`` (not started), or ``None`` with ``--history=false``. ``read_only``: the
    ``history`` command (``reader.py``). Raises ``ConfigError`` for a URL it cannot use (the store's own
    parsing has refused it already in the controller)."""
    if not settings.enabled:
        return None
    if isinstance(store, str):
        store = StoreSettings(url=store)
    url = store.url.strip()
    if url.startswith("sqlite:"):
        from .sqlite import SQLiteHistory

        path = url[len("sqlite:") :].partition("?")[0]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise _bad(url, "no file path")
        return SQLiteHistory(
            Path(path),
            max_age=settings.max_age,
            max_bytes=settings.max_bytes,
            metrics=metrics,
            read_only=read_only,
        )
    if url.startswith("nats://"):
        from .nats import NATSHistory

        return NATSHistory(
            _nats_connection(url, store),
            max_age=settings.max_age,
            max_bytes=settings.max_bytes,
            metrics=metrics,
            read_only=read_only,
        )
    if url != "memory":
        raise _bad(url, "unknown scheme")
    if settings.max_records < 1:
        raise ConfigError("--history-max-records: must be at least 1")
    return MemoryHistory(settings.max_records, metrics)


def _nats_connection(url: str, store: StoreSettings) -> NATSConnection:
    """The servers, prefix and replicas of a ``nats://`` URL, and the credentials from their files."""
    from .nats import NATSConnection

    hosts, _, query = url[len("nats://") :].partition("?")
    if "@" in hosts:
        raise _bad(url, "credentials do not belong in the URL")
    params = {name: values[-1] for name, values in parse_qs(query).items()}
    servers = []
    for part in hosts.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise _bad(url, f"{part.strip()!r} is not HOST:PORT")
        servers.append(f"nats://{host}:{port}")
    prefix = params.get("prefix", "nc")
    if not prefix.isidentifier() or not prefix.isascii():
        raise _bad(url, "prefix must be letters, digits and underscores")
    replicas = params.get("replicas")
    if replicas is not None and (not replicas.isdigit() or not 1 <= int(replicas) <= 5):
        raise _bad(url, "replicas must be 1 to 5")
    return NATSConnection(
        servers,
        prefix=prefix,
        replicas=int(replicas) if replicas is not None else None,
        auth=store.nats_auth(),
    )
