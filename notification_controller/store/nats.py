"""The ``nats://HOST:PORT[,HOST:PORT]`` store: several replicas sharing one NATS JetStream.

An existing, replicated engine rather than a home-made one: JetStream gives the shared outbox, the
lease (a consumer's AckWait), the delayed retry (``NAK`` with a delay) and atomic compare-and-set.

What it creates (idempotently, at ``start``; names shown with the default ``prefix="nc"``):

``NC_OUTBOX`` stream, subjects ``nc.outbox.<lane>``, **work-queue** retention, file storage.
    The outbox. ``<lane>`` is the provider key in unpadded base64url (a subject token cannot hold every
    character of a key). Each lane has one durable pull consumer ``nc_lane_<sha256[:32]>`` shared by every
    replica: JetStream hands each message to one fetcher, and gives it again to a fetcher only when the
    lease (``AckWait`` = ``ack_wait``) runs out or the holder NAKs it (with a delay for backoff). ``ack``
    removes the message (work-queue). Appends carry ``Nats-Msg-Id`` = the notification id, so an append
    repeated within the stream's ``duplicate_window`` (2 min) is stored once.
``NC_DEAD`` stream, subjects ``nc.dead.<lane>``, limits retention, ``max_age`` and ``max_bytes`` from
``Retention`` (``--store-dead-letter-max-age`` / ``-max-bytes``; JetStream discards the oldest first).
    Dead letters, one JSON document each (payload base64, last error masked by the caller, reason,
    attempts, times). ``replay`` publishes them back to the outbox and deletes them here.
``KV nc_state`` bucket, history 1, TTL ``kv_max_age``.
    Other shared state (receiver replay ids, noise control). Each value carries its own expiry (the
    writer's clock, so replicas' clocks should agree within the TTLs used); the bucket TTL bounds the
    life of every key since its last write, so the bucket cannot grow without bound.
``KV nc_seen_<ttl-ms>`` bucket per duplicate-window length (``--rate-limit-interval`` and
``--receiver-replay-ttl``, created at start: a replicated bucket created on the first event refused the
first events of a fresh cluster while JetStream placed it).
    The duplicate window: ``seen`` is a KV ``create`` of sha256(key) — a server-side compare-and-set on
    "no revision yet", so exactly one replica wins — and the bucket TTL expires the key on the server.
    Chosen over ``Nats-Msg-Id`` de-duplication because the answer is per key and persisted (the server
    rebuilds the window after a restart), the window is a bucket property visible with ``nats kv ls``,
    and it needs no throw-away stream of dummy messages.

**Sizing.** ``NC_OUTBOX`` holds the backlog: (events/s × notifications per event × longest provider
outage) × (payload size ≈ 1–2 KiB + ~100 B of headers). One hour of a 50 notifications/s backlog is
180 000 messages ≈ 300 MiB. Set ``max_bytes`` on the account or the stream (``outbox_max_bytes``): when
full, appends fail and the event server answers 503 (the emitter retries) — nothing is dropped silently.
``NC_DEAD``: dead letters/s × ``dead_letter_max_age``. ``nc_seen_*``: distinct events within the window
× ~150 B.

**Replicas (issue 23 item 10).** Every stream and bucket gets ``?replicas=N`` copies; without it, as many
as the cluster has servers (the server's INFO on connect; at most 5; 1 on a single server), so the URL
``config/ha`` ships gives R3 on a three-node cluster. R1 on a cluster put everything on one node: its loss
refused every event until it came back, and its return with an empty disk lost what it held. A stream or
bucket found with another count (an earlier version made R1) is updated at start (JetStream adds or
removes the copies) with a warning; if JetStream refuses, ``start`` fails with an error saying so.
With R3 a node's loss loses nothing accepted; while the new stream leader is elected (4–12 s measured with
nats-server 2.9.10) appends and duplicate-window claims are retried for ``election_grace`` seconds (the
retried append carries the same ``Nats-Msg-Id``, so it is stored once), and a failure is answered 503 for
that event only: the next one asks JetStream again. ``ping`` (readiness) asks the outbox stream's leader.

**Durability.** An append returns after the PubAck: the message is in the stream (with R3, on a quorum).
nats-server writes to the OS at once and fsyncs every ``sync_interval`` (2 min by default): a process
crash loses nothing; losing power on every replica at once can lose the last interval's messages.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import ssl
import struct
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.kv import KeyValue

from ..errors import StoreError
from ..lib.clock import Clock, SystemClock
from ..lib.natsconn import MAX_REPLICAS, NATSAuth, replicas_for
from .base import DEFAULT_ACK_WAIT, DeadLetter, KVEntry, LaneStats, Lease, NewItem, Retention

log = logging.getLogger(__name__)

DEFAULT_KV_MAX_AGE = 7 * 24 * 3600.0
H_ID = "Nc-Id"
H_ENQUEUED = "Nc-Enqueued"
_EXPIRY = struct.Struct(">d")
DEFAULT_ELECTION_GRACE = 4.0
"""Seconds an append or a duplicate-window claim is retried through a stream leader election (clustered
JetStream only). nats-server 2.9.10 elected a new stream leader 4–12 s after the old one was SIGKILLed in
``tests/integration/test_nats_cluster.py`` (2 loaded cores): each client is then refused about once per
grace instead of at once, and the request never waits longer than this plus one attempt; past it the
caller answers 503 and the emitter retries."""
ATTEMPT_TIMEOUT = 1.0
"""Seconds one attempt waits for its answer inside that grace: a request sent to a leader that has just died
is never answered, and waiting the whole ``timeout`` for it would use up the grace."""
T = TypeVar("T")

_RETRYABLE: tuple[type[BaseException], ...] = (
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,  # no stream leader to answer (election under way)
    nats.js.errors.ServiceUnavailableError,  # 503 "JetStream system temporarily unavailable"
    nats.errors.TimeoutError,
    TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.StaleConnectionError,
    nats.errors.ConnectionReconnectingError,
)


def lane_token(provider: str) -> str:
    return base64.urlsafe_b64encode(provider.encode()).rstrip(b"=").decode()


def lane_key(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


class NATSStore:
    kind = "nats"
    durable = True

    def __init__(
        self,
        servers: Sequence[str],
        *,
        auth: NATSAuth | None = None,
        prefix: str = "nc",
        ack_wait: float = DEFAULT_ACK_WAIT,
        replicas: int | None = None,
        windows: Sequence[float] = (),
        election_grace: float = DEFAULT_ELECTION_GRACE,
        retention: Retention | None = None,
        kv_max_age: float = DEFAULT_KV_MAX_AGE,
        outbox_max_bytes: int = -1,
        fetch_wait: float = 0.05,
        timeout: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        if not servers:
            raise ValueError("at least one NATS server is needed")
        if replicas is not None and not 1 <= replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be 1 to {MAX_REPLICAS}")
        self.servers = list(servers)
        self.auth = auth or NATSAuth()
        self.ack_wait = ack_wait
        self.requested_replicas = replicas
        self.replicas = replicas or 1
        """The replicas of every stream and bucket: as requested, else (after ``start``) the cluster's size."""
        self.windows = tuple(windows)
        self.election_grace = election_grace
        self.clustered = False
        self.retention = retention
        """Dead-letter limits; ``None`` (the ``dead-letters`` command): an existing stream's limits are kept."""
        self.kv_max_age = kv_max_age
        self.outbox_max_bytes = outbox_max_bytes
        self.fetch_wait = fetch_wait
        self.timeout = timeout
        self._clock = clock or SystemClock()
        self.outbox_stream = f"{prefix.upper()}_OUTBOX"
        self.dead_stream = f"{prefix.upper()}_DEAD"
        self.outbox_subject = f"{prefix}.outbox"
        self.dead_subject = f"{prefix}.dead"
        self.state_bucket = f"{prefix}_state"
        self.seen_bucket_prefix = f"{prefix}_seen_"
        self._prefix = prefix
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._state: KeyValue | None = None
        self._seen: dict[int, KeyValue] = {}
        self._subs: dict[str, JetStreamContext.PullSubscription] = {}
        self._inflight: dict[str, Msg] = {}
        self._setup = asyncio.Lock()

    def _now(self) -> float:
        return self._clock.now().timestamp()

    @asynccontextmanager
    async def _guard(self, what: str) -> AsyncIterator[JetStreamContext]:
        if self._js is None or self._nc is None:
            raise StoreError("nats store is not started")
        if not self._nc.is_connected:
            # Fail fast rather than let nats-py buffer the request until it reconnects: the caller
            # answers 503 now instead of timing out on something that may be stored later.
            raise StoreError("nats store: not connected (reconnecting)")
        try:
            yield self._js
        except StoreError:
            raise
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise StoreError(f"nats store: {what} failed: {type(exc).__name__}: {exc}") from exc

    # ---- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._nc is not None:
            return
        try:
            nc = await nats.connect(
                servers=self.servers,
                user_credentials=self.auth.creds_file,
                user=self.auth.user,
                password=self.auth.password,
                tls=self.auth.ssl_context(),
                connect_timeout=max(1, int(self.timeout)),
                allow_reconnect=True,
                # Bounded at start (nats-py would retry an unreachable server for ever: the App must
                # see a StoreError and not become ready); unbounded once connected, below.
                max_reconnect_attempts=1,
                reconnect_time_wait=0.5,
                name="notification-controller",
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
            )
        except (nats.errors.Error, OSError, TimeoutError, ssl.SSLError) as exc:
            raise StoreError(f"nats store: cannot connect: {type(exc).__name__}: {exc}") from exc
        nc.options["max_reconnect_attempts"] = -1  # from now on, ride out server restarts
        self._nc = nc
        self._js = nc.jetstream(timeout=self.timeout)
        info = dict(nc._server_info or {})  # the INFO the server sent on connect (nats-py keeps it there)
        self.clustered = bool(info.get("cluster"))
        if self.requested_replicas is None:
            self.replicas = replicas_for(info)
        try:
            async with self._guard("creating streams") as js:
                await self._ensure_stream(
                    js,
                    StreamConfig(
                        name=self.outbox_stream,
                        subjects=[f"{self.outbox_subject}.>"],
                        retention=RetentionPolicy.WORK_QUEUE,
                        storage=StorageType.FILE,
                        num_replicas=self.replicas,
                        max_bytes=self.outbox_max_bytes,
                        duplicate_window=120.0,
                    ),
                )
                await self._ensure_stream(
                    js,
                    StreamConfig(
                        name=self.dead_stream,
                        subjects=[f"{self.dead_subject}.>"],
                        retention=RetentionPolicy.LIMITS,
                        storage=StorageType.FILE,
                        num_replicas=self.replicas,
                        max_age=self.retention.dead_letter_max_age if self.retention else None,
                        max_bytes=self.retention.dead_letter_max_bytes if self.retention else None,
                    ),
                )
                self._state = await self._bucket(js, self.state_bucket, self.kv_max_age)
                # Every duplicate window known at start is created now, not on the first event: creating a
                # replicated bucket takes a placement round in the cluster, and the first events of a fresh
                # cluster were refused while it ran.
                for ttl in self.windows:
                    if ttl > 0:
                        await self._seen_bucket(js, ttl)
        except BaseException:
            await self.close()
            raise
        log.info(
            "nats store: streams and buckets ready with %d replica(s)%s",
            self.replicas,
            " (the cluster's size)" if self.requested_replicas is None and self.clustered else "",
        )

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats store: %s: %s", type(exc).__name__, exc)  # one line, no traceback

    async def _on_disconnected(self) -> None:
        if self._nc is None:  # our own close(): nothing to report
            return
        log.warning("nats store: disconnected; reconnecting")

    async def _on_reconnected(self) -> None:
        log.info("nats store: reconnected")

    async def _ensure_stream(self, js: JetStreamContext, config: StreamConfig) -> None:
        """Create the stream, or bring an existing one to ``self.replicas``."""
        assert config.name is not None
        try:
            info = await js.stream_info(config.name)
        except nats.js.errors.NotFoundError:
            try:
                await js.add_stream(config)
            except nats.js.errors.BadRequestError as exc:  # e.g. more replicas than JetStream servers
                raise StoreError(
                    f"nats store: cannot create stream {config.name} with {self.replicas} replica(s): "
                    f"{exc.description or exc}"
                ) from exc
            return
        await self._limit(js, config, info)
        await self._scale(js, config.name, info)

    async def _limit(self, js: JetStreamContext, wanted: StreamConfig, info: StreamInfo) -> None:
        """Bring an existing stream's age and size limits to ``wanted`` (a changed ``--store-dead-letter-*``
        takes effect on the next start). Limits not given (``None``) are left as they are."""
        config = info.config
        changes = {
            field: value
            for field in ("max_age", "max_bytes")
            if (value := getattr(wanted, field)) is not None and getattr(config, field) != value
        }
        if not changes:
            return
        for field, value in changes.items():
            setattr(config, field, value)
        try:
            await js.update_stream(config)
        except nats.js.errors.BadRequestError as exc:
            raise StoreError(
                f"nats store: stream {wanted.name}: JetStream refused the limits {changes}: "
                f"{exc.description or exc}"
            ) from exc
        log.info("nats store: stream %s limits updated: %s", wanted.name, changes)

    async def _scale(self, js: JetStreamContext, name: str, info: StreamInfo) -> None:
        """Bring an existing stream to ``self.replicas``: JetStream adds or removes the copies itself (a
        stream left at R1 by an earlier version would otherwise stay on one node for ever). A stream
        JetStream will not scale stops the start with an error that says how to fix it."""
        have = info.config.num_replicas or 1
        if have == self.replicas:
            return
        config = info.config
        config.num_replicas = self.replicas
        try:
            await js.update_stream(config)
        except nats.js.errors.BadRequestError as exc:
            raise StoreError(
                f"nats store: stream {name} has {have} replica(s), {self.replicas} wanted, and JetStream "
                f"refused to change it: {exc.description or exc}; give the cluster enough JetStream "
                f"servers, or put ?replicas={have} in --store to keep it as it is"
            ) from exc
        log.warning("nats store: stream %s had %d replica(s); updated to %d", name, have, self.replicas)

    async def _bucket(self, js: JetStreamContext, name: str, ttl: float) -> KeyValue:
        try:
            info = await js.stream_info(f"KV_{name}")  # a bucket is the stream KV_<name>
        except nats.js.errors.NotFoundError:
            try:
                return await js.create_key_value(
                    KeyValueConfig(
                        bucket=name, history=1, ttl=ttl, storage=StorageType.FILE, replicas=self.replicas
                    )
                )
            except nats.js.errors.BadRequestError as exc:
                # another replica created it between our look and our create ("subjects overlap with an
                # existing stream"): use theirs
                with suppress(nats.js.errors.NotFoundError):
                    await js.stream_info(f"KV_{name}")
                    return await js.key_value(name)
                raise StoreError(
                    f"nats store: cannot create bucket {name} with {self.replicas} replica(s): "
                    f"{exc.description or exc}"
                ) from exc
        await self._scale(js, f"KV_{name}", info)
        return await js.key_value(name)

    async def close(self) -> None:
        nc, self._nc, self._js, self._state = self._nc, None, None, None
        self._subs.clear()
        self._seen.clear()
        self._inflight.clear()
        if nc is not None:
            with suppress(nats.errors.Error, OSError):
                await nc.close()

    async def ping(self) -> None:
        """Readiness: the outbox stream answers its info request, which only its leader does in a
        cluster, so this fails while the stream has no leader (the appends would fail too). One small
        request; the stream's per-subject state is not asked for."""
        async with self._guard("ping") as js:
            info = await js.stream_info(self.outbox_stream)
            if self.clustered and (info.cluster is None or not info.cluster.leader):
                raise StoreError(f"nats store: stream {self.outbox_stream} has no leader")

    def _retryable(self, exc: StoreError) -> bool:
        cause = exc.__cause__
        if cause is None:  # _guard's "not connected": nats-py is moving to another node
            return self._nc is not None and not self._nc.is_closed
        return isinstance(cause, _RETRYABLE)

    async def _retrying(self, what: str, attempt: Callable[[JetStreamContext], Awaitable[T]]) -> T:
        """``attempt`` once on a single server. On a cluster, again after a leader election or a move to
        another node, for up to ``election_grace`` seconds, each try bounded by ``ATTEMPT_TIMEOUT``; the
        event is then answered 202 instead of 503 when the cluster recovers within the grace. ``attempt``
        must be safe to repeat: an append carries ``Nats-Msg-Id`` (the stream keeps one copy within its
        duplicate window, leader changes included), ``seen`` recognises its own earlier claim."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.election_grace if self.clustered else 0.0)
        delay = 0.05
        while True:
            remaining = deadline - loop.time()
            try:
                async with self._guard(what) as js:
                    if remaining <= 0:
                        return await attempt(js)
                    async with asyncio.timeout(min(self.timeout, max(ATTEMPT_TIMEOUT, remaining / 4))):
                        return await attempt(js)
            except StoreError as exc:
                if loop.time() + delay >= deadline or not self._retryable(exc):
                    raise
                log.debug("nats store: %s: retrying: %s", what, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    # ---- outbox ------------------------------------------------------------------------------------
    async def append(self, items: Sequence[NewItem]) -> None:
        now = repr(self._now())

        def publish(item: NewItem) -> Callable[[JetStreamContext], Awaitable[object]]:
            return lambda js: js.publish(
                f"{self.outbox_subject}.{lane_token(item.provider)}",
                item.payload,
                stream=self.outbox_stream,
                headers={"Nats-Msg-Id": item.id, H_ID: item.id, H_ENQUEUED: now},
            )

        if len(items) == 1:  # the common event: no task for a gather of one
            await self._retrying("append", publish(items[0]))
            return
        # the event's publishes pipelined on the connection: one round trip, whatever their number
        await asyncio.gather(*(self._retrying("append", publish(i)) for i in items))

    async def _lane(self, js: JetStreamContext, provider: str) -> JetStreamContext.PullSubscription:
        sub = self._subs.get(provider)
        if sub is not None:
            return sub
        async with self._setup:
            sub = self._subs.get(provider)
            if sub is None:
                digest = hashlib.sha256(provider.encode()).hexdigest()[:32]
                sub = await js.pull_subscribe(
                    f"{self.outbox_subject}.{lane_token(provider)}",
                    durable=f"{self._prefix}_lane_{digest}",
                    stream=self.outbox_stream,
                    config=ConsumerConfig(
                        ack_policy=AckPolicy.EXPLICIT,
                        deliver_policy=DeliverPolicy.ALL,
                        ack_wait=self.ack_wait,
                        max_deliver=-1,
                        max_ack_pending=-1,
                    ),
                )
                self._subs[provider] = sub
            return sub

    async def lease(self, provider: str) -> Lease | None:
        # One message per fetch: a message fetched is invisible to every other replica until it is acked
        # or its ack wait runs out, so fetching ahead would hide work from replicas that could do it. Not a
        # ``BatchOutbox``: one pull request for the workers waiting (``fetch(n)``) cost 8 % more instructions
        # per notification than one each (callgrind, 2.62 M against 2.43 M: nats-py's batch fetch adds a
        # no-wait probe and a "no messages" status per short batch).
        async with self._guard("lease") as js:
            sub = await self._lane(js, provider)
            try:
                msgs = await sub.fetch(1, timeout=self.fetch_wait)
            except nats.errors.TimeoutError:
                return None
        return self._leased(provider, msgs[0])

    def _leased(self, provider: str, msg: Msg) -> Lease:
        headers = msg.headers or {}
        token = uuid.uuid4().hex
        self._inflight[token] = msg
        return Lease(
            headers.get(H_ID, ""),
            provider,
            msg.data,
            msg.metadata.num_delivered or 1,
            float(headers.get(H_ENQUEUED, "0")),
            token,
        )

    async def ack(self, lease: Lease) -> None:
        msg = self._inflight.pop(lease.token, None)
        if msg is not None:
            async with self._guard("ack"):
                # Not ack_sync: waiting for the server's confirmation doubled the round trips per
                # notification. An ack lost on the way means one redelivery (at-least-once), never a loss.
                await msg.ack()

    async def nack(self, lease: Lease, *, delay: float) -> None:
        msg = self._inflight.pop(lease.token, None)
        if msg is not None:
            async with self._guard("nack"):
                await msg.nak(delay=max(0.0, delay))

    async def dead_letter(self, lease: Lease, *, reason: str, error: str) -> None:
        msg = self._inflight.get(lease.token)
        if msg is None:
            return
        document = {
            "id": lease.id,
            "provider": lease.provider,
            "payload": base64.b64encode(lease.payload).decode(),
            "attempts": lease.attempts,
            "enqueued_at": lease.enqueued_at,
            "dead_at": self._now(),
            "reason": reason,
            "error": error,
        }
        async with self._guard("dead-letter") as js:
            await js.publish(
                f"{self.dead_subject}.{lane_token(lease.provider)}",
                json.dumps(document).encode(),
                stream=self.dead_stream,
                headers={"Nats-Msg-Id": f"{lease.id}:{msg.metadata.sequence.stream}"},
            )
            await msg.ack_sync(timeout=self.timeout)  # stored as dead first: a crash in between duplicates
        self._inflight.pop(lease.token, None)

    async def stats(self) -> dict[str, LaneStats]:
        now = self._now()
        result: dict[str, LaneStats] = {}
        async with self._guard("stats") as js:
            info = await js.stream_info(self.outbox_stream, subjects_filter=f"{self.outbox_subject}.>")
            for subject, count in (info.state.subjects or {}).items():
                if not count:
                    continue
                try:
                    first = await js.get_msg(
                        self.outbox_stream, seq=info.state.first_seq, subject=subject, next=True
                    )
                except nats.js.errors.NotFoundError:  # acknowledged since stream_info: the lane just emptied
                    continue
                enqueued = float((first.headers or {}).get(H_ENQUEUED, now))
                key = lane_key(subject.rsplit(".", 1)[1])
                result[key] = LaneStats(int(count), max(0.0, now - enqueued))
        return result

    # ---- dead letters --------------------------------------------------------------------------------
    async def _dead(
        self, js: JetStreamContext, provider: str | None, limit: int
    ) -> list[tuple[int, DeadLetter]]:
        subject = f"{self.dead_subject}.{lane_token(provider) if provider is not None else '>'}"
        found: list[tuple[int, DeadLetter]] = []
        info = await js.stream_info(self.dead_stream)
        seq = info.state.first_seq
        while len(found) < limit and info.state.messages and seq <= info.state.last_seq:
            try:
                raw = await js.get_msg(self.dead_stream, seq=seq, subject=subject, next=True)
            except nats.js.errors.NotFoundError:
                break
            assert raw.seq is not None and raw.data is not None
            doc = json.loads(raw.data)
            found.append(
                (
                    raw.seq,
                    DeadLetter(
                        doc["id"],
                        doc["provider"],
                        base64.b64decode(doc["payload"]),
                        int(doc["attempts"]),
                        float(doc["enqueued_at"]),
                        float(doc["dead_at"]),
                        doc["reason"],
                        doc["error"],
                    ),
                )
            )
            seq = raw.seq + 1
        return found

    async def dead_letters(self, *, provider: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        async with self._guard("listing dead letters") as js:
            return [d for _, d in await self._dead(js, provider, limit)]

    async def replay(self, ids: Sequence[str]) -> int:
        wanted = set(ids)
        count = 0
        now = repr(self._now())
        async with self._guard("replaying dead letters") as js:
            for seq, dead in await self._dead(js, None, 1 << 30):
                if dead.id not in wanted:
                    continue
                await js.publish(
                    f"{self.outbox_subject}.{lane_token(dead.provider)}",
                    dead.payload,
                    stream=self.outbox_stream,
                    headers={"Nats-Msg-Id": f"{dead.id}:replay:{seq}", H_ID: dead.id, H_ENQUEUED: now},
                )
                await js.delete_msg(self.dead_stream, seq)
                count += 1
        return count

    async def drop(self, ids: Sequence[str]) -> int:
        wanted = set(ids)
        count = 0
        async with self._guard("dropping dead letters") as js:
            for seq, dead in await self._dead(js, None, 1 << 30):
                if dead.id in wanted:
                    await js.delete_msg(self.dead_stream, seq)
                    count += 1
        return count

    # ---- duplicate window and KV ---------------------------------------------------------------------
    async def _seen_bucket(self, js: JetStreamContext, ttl: float) -> KeyValue:
        window = max(1, round(ttl * 1000))
        bucket = self._seen.get(window)
        if bucket is None:
            async with self._setup:
                bucket = self._seen.get(window) or await self._bucket(
                    js, f"{self.seen_bucket_prefix}{window}", window / 1000
                )
                self._seen[window] = bucket
        return bucket

    async def forget(self, key: str, ttl: float) -> None:
        digest = hashlib.sha256(key.encode()).hexdigest()

        async def attempt(js: JetStreamContext) -> None:
            await (await self._seen_bucket(js, ttl)).delete(digest)

        await self._retrying("duplicate window", attempt)

    async def seen(self, key: str, ttl: float) -> bool:
        digest = hashlib.sha256(key.encode()).hexdigest()
        claim = uuid.uuid4().hex.encode()  # ours: a retry that finds it knows its earlier try won

        async def attempt(js: JetStreamContext) -> bool:
            bucket = await self._seen_bucket(js, ttl)
            for _ in range(2):
                try:
                    await self._settled(lambda: bucket.create(digest, claim))
                except nats.js.errors.KeyWrongLastSequenceError:
                    try:
                        return (await bucket.get(digest)).value != claim
                    except nats.js.errors.KeyNotFoundError:
                        continue  # expired or forgotten since: claim it again
                return False
            return True

        return await self._retrying("duplicate window", attempt)

    @staticmethod
    async def _settled(call: Callable[[], Awaitable[T]]) -> T:
        """``call``, again (up to 4 times in ~0.3 s) while JetStream has no responder for a stream another
        replica created a moment ago (seen on one server: "no responders", then "no response from
        stream"). A repeated create finds its own claim (``seen``), so repeating is safe."""
        delay = 0.02
        for _ in range(4):
            try:
                return await call()
            except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
                await asyncio.sleep(delay)
                delay *= 2
        return await call()

    @staticmethod
    def _key(key: str) -> str:
        return base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode() or "_"

    def _envelope(self, value: bytes, ttl: float | None) -> bytes:
        return _EXPIRY.pack(0.0 if ttl is None else self._now() + ttl) + value

    async def _live(self, kv: KeyValue, key: str) -> tuple[KVEntry | None, int]:
        """(the live entry or None, the stored revision or 0)."""
        try:
            entry = await kv.get(self._key(key))
        except nats.js.errors.KeyNotFoundError:
            return None, 0
        assert entry.revision is not None
        raw = entry.value or b""
        if len(raw) < _EXPIRY.size:
            return None, entry.revision
        (expires,) = _EXPIRY.unpack_from(raw)
        if expires and expires <= self._now():
            return None, entry.revision
        return KVEntry(raw[_EXPIRY.size :], entry.revision), entry.revision

    async def kv_get(self, key: str) -> KVEntry | None:
        async with self._guard("kv get"):
            assert self._state is not None
            return (await self._live(self._state, key))[0]

    async def kv_put(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        async with self._guard("kv put"):
            assert self._state is not None
            return await self._state.put(self._key(key), self._envelope(value, ttl))

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        async with self._guard("kv cas"):
            kv = self._state
            assert kv is not None
            current, stored = await self._live(kv, key)
            if (current.revision if current is not None else None) != expected:
                return None
            try:
                # Conditional on the revision we read (0: no key at all), so a concurrent writer loses.
                return await kv.update(self._key(key), self._envelope(value, ttl), last=stored)
            except nats.js.errors.KeyWrongLastSequenceError:
                return None
