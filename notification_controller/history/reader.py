"""The history as the ``history`` command reads it from ``--store`` (``history_cli.py``): read only.

Nothing is created (a SQLite file that does not exist is an error, not a new empty database; the NATS
stream is not created) and nothing is deleted (no retention sweep): reading the history of a running or a
stopped controller changes nothing. The records are those ``open_history`` wrote.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..settings import HistorySettings, StoreSettings
from . import open_history
from .model import History


def open_reader(store: StoreSettings) -> History:
    """The history kept next to ``store.url``, read only. ``ConfigError`` for ``memory`` (the history is
    inside the controller: ask its UI listener) or a URL it cannot use."""
    history = open_history(HistorySettings(), store, read_only=True)
    if history is None or store.url.strip() == "memory":
        raise ConfigError(
            "the memory store keeps the history inside the controller: read it with --server",
            reason="InvalidStore",
        )
    return history
