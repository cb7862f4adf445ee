"""The history with ``--store=nats://…``: a JetStream stream every replica writes to and reads from.

**The stream** ``NC_HISTORY`` (``<PREFIX>_HISTORY``), subject ``nc.history``, limits retention, file
storage, ``max_age`` = ``--history-max-age`` and ``max_bytes`` = ``--history-max-bytes`` (JetStream deletes
the oldest messages first), as many replicas as the store's streams (``?replicas=N``, else the cluster's
size). One JSON record per message. Two replicas write to the same stream, so either answers for both.

**Never on the pipeline's path.** ``record`` appends to a bounded buffer (``BUFFER``; full: dropped and
counted) and a task publishes what accumulated every ``FLUSH_INTERVAL`` seconds as plain NATS messages on
the stream's subject (the stream stores them; no acknowledgement round trip per record: a history is
worth less than the notifications, and a PubAck per record cost more CPU than the rest of the recording).
While the connection is down the records are dropped and counted.

**Queries** read the stream backwards in windows of ``WINDOW`` messages: each window through an ephemeral
pull consumer from its first sequence (acknowledgement none, deleted after the read), filters applied while
reading, stopping once the limit is reached or ``since`` passed (with ``SKEW`` seconds of slack: replicas
publish in batches, so the stream's order trails the records' times a little), or after ``MAX_SCAN``
messages (bounded reads: a query never reads the whole stream of a busy cluster). A query for a rare
outcome over a long history therefore answers with what the last ``MAX_SCAN`` records hold.

**Live tail** (``subscribe``): a core NATS subscription to the subject, opened with the first subscriber,
so a replica's UI shows what every replica records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig

from ..errors import StoreError
from ..lib.natsconn import NATSAuth, replicas_for
from ..metrics import HistoryMetrics
from .live import Fanout
from .model import _OUTCOME, Query, Record, Row

log = logging.getLogger(__name__)

BUFFER = 10_000
FLUSH_INTERVAL = 0.25
WINDOW = 1000
"""Messages one backward read asks for."""
MAX_SCAN = 100_000
"""Messages one query reads at most."""
READ_TIMEOUT = 5.0
SKEW = 10.0
"""Seconds a record may be published after a newer one (flush intervals, clocks of replicas)."""


@dataclass(frozen=True)
class NATSConnection:
    """Where the stream is (the ``--store`` URL) and how to log in (the ``--store-nats-*`` files, as the state
    store does)."""

    servers: Sequence[str]
    prefix: str = "nc"
    replicas: int | None = None
    auth: NATSAuth = field(default_factory=NATSAuth)


class NATSHistory:
    """See the module docstring. ``read_only``: the ``history`` command — the stream is not created."""

    def __init__(
        self,
        connection: NATSConnection,
        *,
        max_age: float = 7 * 24 * 3600.0,
        max_bytes: int = 64 << 20,
        metrics: HistoryMetrics | None = None,
        read_only: bool = False,
    ) -> None:
        self.connection = connection
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.read_only = read_only
        self.stream = f"{connection.prefix.upper()}_HISTORY"
        self.subject = f"{connection.prefix}.history"
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._buffer: deque[Row] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._live = Fanout()
        self._tail: Any = None  # the core subscription feeding the live tail
        self.dropped = 0

    # ---- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._nc is not None:
            return
        c = self.connection
        try:
            nc = await nats.connect(
                servers=list(c.servers),
                user_credentials=c.auth.creds_file,
                user=c.auth.user,
                password=c.auth.password,
                tls=c.auth.ssl_context(),
                connect_timeout=5,
                allow_reconnect=True,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.5,
                name="notification-controller-history",
                error_cb=self._on_error,
            )
        except (nats.errors.Error, OSError, TimeoutError, ssl.SSLError) as exc:
            raise StoreError(f"nats history: cannot connect: {type(exc).__name__}: {exc}") from exc
        nc.options["max_reconnect_attempts"] = -1
        self._nc, self._js = nc, nc.jetstream(timeout=READ_TIMEOUT)
        if not self.read_only:
            try:
                await self._ensure_stream(dict(nc._server_info or {}))
            except BaseException:
                await self.close()
                raise
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(), name="history-nats")

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats history: %s: %s", type(exc).__name__, exc)

    async def _ensure_stream(self, info: dict[str, Any]) -> None:
        assert self._js is not None
        replicas = self.connection.replicas or replicas_for(info)
        config = StreamConfig(
            name=self.stream,
            subjects=[self.subject],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=replicas,
            max_age=self.max_age,
            max_bytes=self.max_bytes,
        )
        try:
            try:
                current = await self._js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                await self._js.add_stream(config)
                return
            old = current.config
            if (old.max_age, old.max_bytes, old.num_replicas) != (config.max_age, config.max_bytes, replicas):
                await self._js.update_stream(config)  # the flags changed: the limits follow
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise StoreError(f"nats history: stream {self.stream}: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        self._live.close()
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            await self._flush()  # what is buffered goes out before the connection closes
        nc, self._nc, self._js, self._tail = self._nc, None, None, None
        if nc is not None:
            with contextlib.suppress(nats.errors.Error, OSError):
                await nc.drain()

    # ---- recording --------------------------------------------------------------------------------------
    def record(self, r: Record, /) -> None:
        self.record_row(r.row())

    def record_row(self, row: Row, /) -> None:
        if len(self._buffer) >= BUFFER:
            self._drop(1)
            return
        self._buffer.append(row)
        if self.metrics is not None:
            self.metrics.recorded(row[_OUTCOME])
        if self._tail is None and self._live.subscribers:  # no NATS tail yet: this process's records
            self._live.publish(Record.from_row(row))

    def _drop(self, n: int) -> None:
        self.dropped += n
        if self.metrics is not None:
            self.metrics.dropped.inc(n)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL)
            await self._flush()

    async def _flush(self) -> None:
        nc, buffer = self._nc, self._buffer
        if not buffer or nc is None:
            return
        if not nc.is_connected:
            n = len(buffer)
            buffer.clear()
            self._drop(n)
            return
        while buffer:
            r = Record.from_row(buffer.popleft())
            try:
                await nc.publish(self.subject, orjson.dumps(r.to_json()))
            except (nats.errors.Error, OSError) as exc:
                self._drop(1 + len(buffer))
                buffer.clear()
                log.warning("nats history: publishing failed: %s", type(exc).__name__)
                return

    # ---- live tail --------------------------------------------------------------------------------------
    def subscribe(self) -> AsyncIterator[Record]:
        if self._tail is None and self._nc is not None and self._nc.is_connected:
            self._tail = "opening"
            asyncio.get_running_loop().create_task(self._open_tail())
        return self._live.subscribe()

    async def _open_tail(self) -> None:
        assert self._nc is not None
        try:
            self._tail = await self._nc.subscribe(self.subject, cb=self._on_tail)
        except (nats.errors.Error, OSError) as exc:
            self._tail = None
            log.warning("nats history: live tail unavailable: %s", type(exc).__name__)

    async def _on_tail(self, msg: Msg) -> None:
        try:
            self._live.publish(Record.from_json(orjson.loads(msg.data)))
        except ValueError:
            return

    # ---- queries ----------------------------------------------------------------------------------------
    async def query(self, q: Query, /) -> list[Record]:
        if self._js is None:
            raise StoreError("nats history is not started")
        pending = [
            Record.from_row(row) for row in self._buffer.copy() if q.matches_row(row)
        ]  # not published yet
        try:
            stored = await self._read_backwards(self._js, q)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise StoreError(f"nats history: reading {self.stream}: {type(exc).__name__}: {exc}") from exc
        by_id = {r.id: r for r in [*stored, *pending]}
        return sorted(by_id.values(), key=lambda r: r.id, reverse=True)[: q.bounded_limit]

    async def _read_backwards(self, js: JetStreamContext, q: Query) -> list[Record]:
        try:
            info = await js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            return []  # nothing recorded yet
        first, last = info.state.first_seq, info.state.last_seq
        if not info.state.messages:
            return []
        limit = q.bounded_limit
        found: list[Record] = []
        scanned = 0
        end = last
        while end >= first and scanned < MAX_SCAN:
            start = max(first, end - WINDOW + 1)
            window = await self._read(js, start, end)
            scanned += end - start + 1
            found += (r for r in window if q.matches(r))
            end = start - 1
            if not window:
                continue
            # The stream is in publishing order, which trails time by up to a flush per replica (SKEW):
            # stop once this window is older than what is kept by more than that.
            oldest = min(r.time for r in window)
            if q.since is not None and oldest < q.since - SKEW:
                break
            if len(found) >= limit:
                found.sort(key=lambda r: r.id, reverse=True)
                del found[limit:]
                if oldest < found[-1].time - SKEW:
                    break
        return found

    async def _read(self, js: JetStreamContext, start: int, end: int) -> list[Record]:
        """The records with sequence ``start``..``end`` (those the limits have not deleted yet)."""
        name = f"history_{uuid.uuid4().hex}"
        config = ConsumerConfig(
            name=name,
            filter_subject=self.subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,  # deleted by the server if this process dies mid-read
            mem_storage=True,
            num_replicas=1,
        )
        await js.add_consumer(self.stream, config=config)
        sub = await js.pull_subscribe_bind(consumer=name, stream=self.stream)
        out: list[Record] = []
        try:
            seq = start
            while seq <= end:
                try:
                    msgs = await sub.fetch(batch=min(end - seq + 1, WINDOW), timeout=READ_TIMEOUT)
                except nats.errors.TimeoutError:
                    break  # nothing more (deleted meanwhile)
                for msg in msgs:
                    meta = msg.metadata
                    seq = meta.sequence.stream + 1
                    if meta.sequence.stream > end:
                        seq = end + 1
                        break
                    try:
                        out.append(Record.from_json(orjson.loads(msg.data)))
                    except ValueError:
                        continue  # another version's record: skipped
        finally:
            with contextlib.suppress(nats.errors.Error, OSError):
                await sub.unsubscribe()
            with contextlib.suppress(nats.errors.Error, OSError):
                await js.delete_consumer(self.stream, name)
        return out
