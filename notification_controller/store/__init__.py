"""The store selected by ``--store`` (issue 13): outbox, dead letters, duplicate window and shared KV behind one ``Store``.

``open_store(url)`` maps ``--store`` to a backend:

* ``memory`` — in this process only (Flux's at-most-once; the default);
* ``sqlite:PATH[?synchronous=full|normal]`` — one replica, a durable file;
* ``nats://HOST:PORT[,HOST:PORT...][?prefix=nc&replicas=N]`` — several replicas on NATS JetStream;
  streams and buckets get N copies, by default as many as the cluster has servers (at most 5).
  Credentials never go in the URL (``--store`` is logged): pass them as ``NATSAuth`` (files mounted
  from a Secret).

The store is returned unstarted: ``await store.start()`` connects/creates, ``close()`` releases.
See ``docs/delivery.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qs

from ..errors import ConfigError
from ..lib.clock import Clock
from ..lib.natsconn import NATSAuth
from ..settings import StoreSettings
from .base import DEFAULT_ACK_WAIT, DeadLetter, KVEntry, LaneStats, Lease, NewItem, Retention, Store

__all__ = [
    "STORE_URL_HELP",
    "DeadLetter",
    "KVEntry",
    "LaneStats",
    "Lease",
    "NewItem",
    "Retention",
    "Store",
    "open_store",
    "store_from_settings",
]

STORE_URL_HELP = (
    "memory, sqlite:PATH[?synchronous=full|normal] or nats://HOST:PORT[,HOST:PORT][?prefix=nc&replicas=N]"
)


def _bad(url: str, why: str) -> ConfigError:
    shown = url if "@" not in url else "<url with credentials>"
    return ConfigError(f"invalid --store {shown!r}: {why} (expected {STORE_URL_HELP})", reason="InvalidStore")


def _query(url: str, rest: str, allowed: set[str]) -> tuple[str, dict[str, str]]:
    base, _, query = rest.partition("?")
    params: dict[str, str] = {}
    for name, values in parse_qs(query, keep_blank_values=True, strict_parsing=False).items():
        if name not in allowed:
            raise _bad(url, f"unknown option {name!r}")
        params[name] = values[-1]
    return base, params


def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    ack_wait: float = DEFAULT_ACK_WAIT,
    nats_auth: NATSAuth | None = None,
    retention: Retention | None = None,
    windows: Sequence[float] = (),
) -> Store:
    """The ``Store`` for ``url``, not started. Raises ``ConfigError`` for a URL it cannot use.
    ``windows``: the ``seen`` TTLs the caller will use, so a backend can create them at start."""
    url = url.strip()
    if url == "memory":
        from .memory import MemoryStore

        return MemoryStore(clock=clock, ack_wait=ack_wait)
    if url.startswith("sqlite:"):
        path, params = _query(url, url[len("sqlite:") :], {"synchronous"})
        if path.startswith("//"):  # sqlite:///abs/path → /abs/path
            path = path[2:]
        if not path:
            raise _bad(url, "no file path")
        synchronous = params.get("synchronous", "full").lower()
        from .sqlite import SYNCHRONOUS, SQLiteStore

        if synchronous not in SYNCHRONOUS:
            raise _bad(url, f"synchronous must be one of {', '.join(SYNCHRONOUS)}")
        return SQLiteStore(path, synchronous=synchronous, clock=clock, ack_wait=ack_wait, retention=retention)
    if url.startswith("nats://"):
        hosts, params = _query(url, url[len("nats://") :], {"prefix", "replicas"})
        if "@" in hosts:
            raise _bad(url, "credentials do not belong in the URL (it is logged); use the credential options")
        servers: list[str] = []
        for part in hosts.split(","):
            host, sep, port = part.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
                raise _bad(url, f"{part.strip()!r} is not HOST:PORT")
            servers.append(f"nats://{host}:{port}")
        prefix = params.get("prefix", "nc")
        if not prefix.isidentifier() or not prefix.isascii():
            raise _bad(url, "prefix must be letters, digits and underscores")
        replicas = params.get("replicas")  # default: the cluster's size, asked at start (store/nats.py)
        if replicas is not None and (not replicas.isdigit() or not 1 <= int(replicas) <= 5):
            raise _bad(url, "replicas must be 1 to 5")
        from .nats import NATSStore

        return NATSStore(
            servers,
            auth=nats_auth,
            prefix=prefix,
            replicas=int(replicas) if replicas is not None else None,
            windows=windows,
            retention=retention,
            ack_wait=ack_wait,
            clock=clock,
        )
    raise _bad(url, "unknown scheme")


def store_from_settings(
    settings: StoreSettings,
    *,
    clock: Clock | None = None,
    windows: Sequence[float] = (),
    retain: bool = True,
) -> Store:
    """``open_store`` for the ``--store*`` flags; NATS credentials are read from their files here, once.
    ``retain=False`` (the ``dead-letters`` command): no retention sweep, whatever the defaults say."""
    retention = Retention(settings.dead_letter_max_age, settings.dead_letter_max_bytes) if retain else None
    nats_auth = settings.nats_auth() if settings.url.strip().startswith("nats://") else None
    return open_store(
        settings.url,
        clock=clock,
        ack_wait=settings.ack_wait,
        nats_auth=nats_auth,
        windows=windows,
        retention=retention,
    )
