"""``resolveInPlace``: a recovery edits the failure's chat message instead of posting a new one
(docs/silences.md, "Messages that resolve in place"; Alertmanager's Slack ``update_message``, Argo's
``PostAndUpdate``).

Two stages, like ``threadBy``'s (``dispatch/noise/threads.py``): a pre-send one decides, a post-send one
remembers. Both act only for an Alert with ``spec.resolveInPlace: true`` whose notifier ``edits`` (Slack's
Web API with a bot token, Discord webhooks); for every other delivery they cost one attribute check.

* An **error** for an object with no open message: the delivery gets an ``Edit`` without a target; the
  notifier posts as usual and reports the new message's id (Slack: ``ts`` and the channel ID from
  chat.postMessage's answer; Discord: the id ``?wait=true`` answers), and the post-send stage keeps it in
  the store's KV, ``quiet/message/<digest>``, with the time (the first failure). An error while a message
  is open posts as usual and is not kept: the first failure's message is the one that resolves.
* An **info** event for an object with an open message (its recovery, through the same Alert and
  Provider channel): the record is *claimed* for this notification (compare-and-set to ``resolving`` with
  the notification's id, so another replica's concurrent info posts as usual, and this notification's own
  retry from the outbox edits again), and the delivery gets an ``Edit`` with the target, its channel,
  thread and how long it failed (``recovered after 12m``). The notifier edits, or when the edit fails (an
  answer ``ok: false``, a 404, a timeout) posts the recovery as a new message: nothing is lost, and the
  fallback is counted. Either way the post-send stage marks the record ``resolved``; the next error
  starts a new message.

Grouped notifications (``groupBy``) are about several objects and go as usual. The record is a small JSON
object, read back bounded (``MAX_RECORD``) and checked (an id must look like one) so a value written by
anyone else with access to the store cannot make us edit an arbitrary path. A store that cannot be
reached lets the delivery post as usual (counted ``store_error``): a message too many, never one lost.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable

import orjson

from ...api.event import SEVERITY_ERROR, SEVERITY_INFO
from ...core.noise import digest, object_key
from ...errors import StoreError
from ...lib.clock import Clock
from ...metrics import NoiseMetrics
from ...providers.message import Edit
from ...store.base import KVEntry, Store
from ..model import Delivery
from ..stage import Stage, StageLike

log = logging.getLogger(__name__)

KEY_PREFIX = "quiet/message/"
MESSAGE_TTL = 7 * 24 * 3600.0
"""How long a failure's message is remembered: a recovery more than a week later posts a new message
(as ``threadBy`` follows a thread for a week)."""
MAX_RECORD = 1024
"""Bytes of a stored record read back: ours are ~150."""

OPEN, RESOLVING, RESOLVED = "open", "resolving", "resolved"
_ID = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?")
"""A Slack ``ts`` or a Discord snowflake."""
_CHANNEL = re.compile(r"[A-Za-z0-9_-]{0,64}")
_NOTIFICATION_ID = re.compile(r"[0-9a-zA-Z_-]{0,128}")


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """What the store keeps about one object's failure message (per Alert, Provider and channel)."""

    state: str
    id: str = ""
    channel: str = ""
    thread: str = ""
    since: float = 0.0
    by: str = ""
    """The notification resolving it (``resolving``): its retries edit again, other notifications post."""

    def to_bytes(self) -> bytes:
        return bytes(
            orjson.dumps(
                {
                    "s": self.state,
                    "id": self.id,
                    "ch": self.channel,
                    "th": self.thread,
                    "t": self.since,
                    "by": self.by,
                }
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Record | None:
        """The record, or None for anything that is not one of ours (too long, not JSON, bad ids)."""
        if len(data) > MAX_RECORD:
            return None
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(raw, dict):
            return None
        state, id_, channel, thread, since, by = (raw.get(k) for k in ("s", "id", "ch", "th", "t", "by"))
        if state not in (OPEN, RESOLVING, RESOLVED) or not isinstance(since, int | float):
            return None
        if not all(isinstance(v, str) for v in (id_, channel, thread, by)):
            return None
        assert isinstance(id_, str) and isinstance(channel, str) and isinstance(thread, str)
        assert isinstance(by, str)
        if state != RESOLVED and not _ID.fullmatch(id_):
            return None
        if not _CHANNEL.fullmatch(channel) or (thread and not _ID.fullmatch(thread)):
            return None
        if not _NOTIFICATION_ID.fullmatch(by):
            return None
        return cls(str(state), id_, channel, thread, float(since), by)


def humane(seconds: float) -> str:
    """How long a failure lasted, as people say it: ``45s``, ``12m``, ``1h5m``, ``2d3h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(s // 3600, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def message_key(delivery: Delivery) -> str:
    """Per Alert, per Provider and channel, per involved object (user text only as a digest)."""
    alert, provider = delivery.alert.metadata, delivery.provider.metadata
    return KEY_PREFIX + digest(
        f"{alert.namespace}/{alert.name}",
        f"{provider.namespace}/{provider.name}",
        delivery.options.channel,
        object_key(delivery.event),
    )


class ResolveInPlace:
    """The two stages over one ``Store`` (see the module docstring)."""

    name = "resolve-in-place"

    def __init__(self, state: Store, clock: Clock, metrics: NoiseMetrics) -> None:
        self.state = state
        self.clock = clock
        self.metrics = metrics

    def pre_send(self) -> list[StageLike[Delivery]]:
        return [self]

    def post_send(self) -> list[StageLike[Delivery]]:
        return [Stage("resolve-in-place-record", self.record)]

    def _count(self, delivery: Delivery, outcome: str) -> None:
        self.metrics.in_place.labels(type=delivery.provider_type, outcome=outcome).inc()

    def _store_failed(self, delivery: Delivery, exc: StoreError) -> None:
        self._count(delivery, "store_error")
        log.warning("resolveInPlace: state store unavailable, posting as usual: %s", exc)

    def __call__(self, delivery: Delivery) -> Delivery | Awaitable[Delivery]:
        if not delivery.alert.spec.resolve_in_place or not getattr(delivery.notifier, "edits", False):
            return delivery
        if delivery.notification.group or delivery.event.severity not in (SEVERITY_ERROR, SEVERITY_INFO):
            return delivery
        return self._decide(delivery)

    async def _read(self, key: str) -> tuple[KVEntry | None, Record | None]:
        entry = await self.state.kv_get(key)
        return entry, (Record.from_bytes(entry.value) if entry is not None else None)

    async def _decide(self, delivery: Delivery) -> Delivery:
        key = message_key(delivery)
        try:
            entry, record = await self._read(key)
        except StoreError as exc:
            self._store_failed(delivery, exc)
            return delivery
        if delivery.event.severity == SEVERITY_ERROR:
            if record is not None and record.state == OPEN:
                return delivery  # the first failure's message is the one that resolves
            return dataclasses.replace(delivery, edit=Edit(key))  # post, and report the message
        notification = delivery.notification.id
        if record is None or record.state == RESOLVED:
            return delivery
        if record.state == RESOLVING and record.by != notification:
            return delivery  # another notification resolves it (another replica's recovery)
        if record.state == OPEN:
            assert entry is not None
            claim = dataclasses.replace(record, state=RESOLVING, by=notification)
            try:
                won = await self.state.kv_cas(key, claim.to_bytes(), expected=entry.revision, ttl=MESSAGE_TTL)
            except StoreError as exc:
                self._store_failed(delivery, exc)
                return delivery
            if won is None:
                return delivery  # claimed meanwhile
        after = humane(self.clock.now().timestamp() - record.since)
        edit = Edit(key, target=record.id, channel=record.channel, thread=record.thread, after=after)
        return dataclasses.replace(delivery, edit=edit)

    async def record(self, delivery: Delivery) -> Delivery:
        """Post-send: keep the failure's new message, or mark the record resolved."""
        edit = delivery.edit
        if edit is None:
            return delivery
        if edit.rejected:
            self._count(delivery, "rejected")
        if edit.target:
            self._count(delivery, "edited" if edit.edited else "fallback")
            mine = delivery.notification.id
            await self._write(
                delivery, edit.key, Record(RESOLVED), lambda r: r.state == RESOLVING and r.by == mine
            )
            return delivery
        if not edit.posted:
            return delivery  # the answer named no message (counted as rejected): nothing to edit later
        thread = delivery.thread.ts or delivery.thread.started if delivery.thread is not None else ""
        opened = Record(
            OPEN,
            edit.posted,
            edit.posted_channel,
            thread if thread != edit.posted else "",
            self.clock.now().timestamp(),
        )
        if await self._write(delivery, edit.key, opened, lambda r: r.state != OPEN):
            self._count(delivery, "recorded")
        return delivery

    async def _write(
        self, delivery: Delivery, key: str, record: Record, over: Callable[[Record], bool]
    ) -> bool:
        """Write ``record`` where the key is absent, unreadable or holds a record ``over`` accepts
        (compare-and-set: a concurrent writer's record stays)."""
        try:
            entry, current = await self._read(key)
            if entry is not None and current is not None and not over(current):
                return False
            expected = entry.revision if entry is not None else None
            return (
                await self.state.kv_cas(key, record.to_bytes(), expected=expected, ttl=MESSAGE_TTL)
                is not None
            )
        except StoreError as exc:
            self._store_failed(delivery, exc)
            return False
