"""Values that flow through the pipeline, and the queue protocol between its two halves.

* ``Draft``: one event × one matched Alert while the *pre-queue* stages run (Flux's per-Alert rules in
  ``rules.py``, then any stage added at composition time). It holds the live Alert and Provider.
* ``Notification``: what a pre-queue pass makes and a lane (or the durable outbox) holds, as plain data: the
  event, the Alert and Provider (with generations), commit-status id, attempts, a stable id (the
  ``Idempotency-Key``), its event's, when it was made (``received_at``): ``to_json`` keeps all for the store.
* ``Delivery``: a Notification resolved at send time against the *current* Alert and Provider (and the
  Provider's cached notifier), which the *pre-send* stages (hooks, templates) see and may change.

The three are never mutated (a stage makes a new one), not ``frozen`` (issue 29: ~4.7% of a delivery's CPU).
Every reason a notification is not sent is a ``DropReason``: it labels ``notification_dropped_total{reason}``.
"""

from __future__ import annotations

import enum
import itertools
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import orjson

from ..api.alert import Alert
from ..api.event import Event
from ..api.provider import Provider
from ..errors import ControllerError
from ..objects.base import ObjectRef
from ..providers.base import Notifier, ProviderOptions
from ..providers.message import Edit, Message, Thread

FORMAT_VERSION = 1


class DropReason(enum.StrEnum):
    OVERLOAD = "overload"  # --max-pending-notifications reached, or the message-filter backlog is full
    SHUTDOWN = "shutdown"  # still queued or in flight when the shutdown grace period ended
    SUSPENDED = "suspended"  # the Provider is suspended
    COMMIT_STATUS = "commit_status"  # commit-status Provider, event without commit metadata (Flux's rule)
    COMMIT_STATUS_UPDATE = "commit_status_update"  # a commit-status update for a non-git Provider
    CHANGE_REQUEST = "change_request"  # change-request Provider, event without the change request key
    CONFIG = "config"  # the Alert or Provider cannot be used (missing Provider, refused Alert, bad CEL)
    INTERNAL = "internal"  # a bug: logged with its type
    STAGE_ERROR = "stage_error"  # a stage raised
    HOOK = "hook"  # a pre-dispatch hook dropped it
    GONE = "gone"  # the Alert or Provider was deleted before the notification was sent
    LABEL_LOOKUP = "label_lookup"  # the involved object's labels could not be read
    LABEL_LOOKUP_OVERLOAD = "label_lookup_overload"
    LABEL_LOOKUP_REJECTED = "label_lookup_rejected"


@dataclass(frozen=True, slots=True)
class Ref:
    """A namespaced object and the generation it had when the notification was made."""

    namespace: str
    name: str
    generation: int = 0
    _refs: ClassVar[dict[int, tuple[object, Ref]]] = {}  # one per object version (the store swaps objects)

    @classmethod
    def of(cls, obj: Alert | Provider) -> Ref:
        refs = cls._refs
        if (hit := refs.get(id(obj))) is None or hit[0] is not obj:
            if len(refs) >= 4096:
                refs.clear()  # replaced objects must not accumulate
            meta = obj.metadata
            hit = refs[id(obj)] = (obj, cls(meta.namespace, meta.name, meta.generation or 0))
        return hit[1]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class Notification:
    """One event on its way to one Alert's Provider, as plain data (see the module docstring)."""

    id: str
    event: Event
    alert: Ref
    provider: Ref
    provider_type: str
    commit_status: str = ""
    attempt: int = 0
    message: Message | None = None
    """What a pre-queue stage chose to say instead of ``Message.of(event)`` (a group, a recovery)."""
    group: tuple[tuple[str, str, str], ...] = ()
    """A grouped notification's quoted events: (object, severity, message); templates see them."""
    event_id: str = ""  # the received event's id (``new_id``): its records in the history share it
    received_at: float = field(default_factory=time.time)  # made (epoch s): the delivery latency's start
    traceparent: str = ""  # W3C, of the queue's span (--otlp-endpoint, tracing/): its deliveries continue it

    @property
    def lane(self) -> str:
        """The delivery lane (and outbox key): one per Provider."""
        return self.provider.key

    def to_json(self) -> bytes:
        a = self.alert
        return orjson.dumps(
            {
                "v": FORMAT_VERSION,
                "id": self.id,
                "alert": {"namespace": a.namespace, "name": a.name, "generation": a.generation},
                "provider": {
                    "namespace": self.provider.namespace,
                    "name": self.provider.name,
                    "generation": self.provider.generation,
                    "type": self.provider_type,
                },
                "commitStatus": self.commit_status,
                "attempt": self.attempt,
                "event": orjson.Fragment(self.event.to_go_json()),
                **({"message": orjson.Fragment(self.message.to_json())} if self.message is not None else {}),
                **({"group": [list(g) for g in self.group]} if self.group else {}),
                **({"eventId": self.event_id} if self.event_id else {}),
                **({"receivedAt": self.received_at} if self.received_at else {}),
                **({"traceparent": self.traceparent} if self.traceparent else {}),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Notification:
        """Raises ``ControllerError`` for bytes this version cannot read."""
        try:
            raw = orjson.loads(data)
            if raw.get("v") != FORMAT_VERSION:
                raise ValueError(f"format version {raw.get('v')!r}")
            alert, provider = raw["alert"], raw["provider"]
            return cls(
                id=str(raw["id"]),
                event=Event.from_raw(raw["event"]),
                alert=Ref(str(alert["namespace"]), str(alert["name"]), int(alert["generation"])),
                provider=Ref(str(provider["namespace"]), str(provider["name"]), int(provider["generation"])),
                provider_type=str(provider["type"]),
                commit_status=str(raw.get("commitStatus", "")),
                attempt=int(raw.get("attempt", 0)),
                message=Message.from_raw(raw["message"]) if raw.get("message") is not None else None,
                group=tuple((str(o), str(s), str(m)) for o, s, m in raw.get("group", ())),
                event_id=str(raw.get("eventId", "")),
                received_at=float(raw.get("receivedAt", 0.0)),
                traceparent=str(raw.get("traceparent", ""))[:55],  # we write version 00; parsed when used
            )
        except (ValueError, KeyError, TypeError, AttributeError, ControllerError) as exc:
            raise ControllerError(f"unreadable stored notification: {type(exc).__name__}: {exc}") from None


_ID_COUNTER = itertools.count((int.from_bytes(os.urandom(8), "big") << 64) + 1)  # 64 random bits, a count


def new_id() -> str:
    """Unique across processes and restarts: this process's random prefix then a counter, 32 hex characters:
    one 128-bit count formatted by ``bytes.hex`` (215 ns; the prefix joined to 8 bytes' hex 260, ``:016x`` more)."""
    return next(_ID_COUNTER).to_bytes(16, "big").hex()


@dataclass(slots=True)
class Draft:
    """An event matched by an Alert, while the pre-queue stages decide (``provider`` is set by the rule
    that looks it up: the first Flux rule but one)."""

    event: Event
    alert: Alert
    provider: Provider | None = None
    commit_status: str = ""
    message: Message | None = None
    event_id: str = ""  # the received event's id ("" in ``explain``)

    # ``dataclasses.replace`` costs a field walk and a keyword call per use; the rules change one field
    # of every draft (issue 17). Each copies all the others: a field added above must be added here.
    def with_provider(self, provider: Provider) -> Draft:
        return Draft(self.event, self.alert, provider, self.commit_status, self.message, self.event_id)

    def with_event(self, event: Event) -> Draft:
        return Draft(event, self.alert, self.provider, self.commit_status, self.message, self.event_id)

    def with_commit_status(self, commit_status: str) -> Draft:
        return Draft(self.event, self.alert, self.provider, commit_status, self.message, self.event_id)

    def notification(self) -> Notification:
        p = self.provider
        assert p is not None, "the provider rule runs before the draft is queued"
        return Notification(new_id(), self.event, Ref.of(self.alert), Ref.of(p), str(p.spec.type),
                            self.commit_status, message=self.message, event_id=self.event_id)  # fmt: skip


@dataclass(slots=True)
class Delivery:
    """A Notification resolved at send time; what the pre-send stages see."""

    notification: Notification
    event: Event
    alert: Alert
    provider: Provider
    options: ProviderOptions
    notifier: Notifier
    message: Message | None = None
    """Set by a pre-send stage (a template, a group) to replace the default ``Message.of(event)``."""
    thread: Thread | None = None
    """Set by the thread stage (``threadBy``): the conversation this delivery belongs to."""
    body: bytes | None = None
    """Set by the template stage (a Provider's ``bodyTemplate``): the whole request body."""
    templated: bool = False
    """``message`` was rendered from the Alert's ``spec.template`` (``DeliveryContext.template``)."""
    edit: Edit | None = None
    """Set by the resolve-in-place stage (``resolveInPlace``): the message to edit, or to report."""

    @property
    def provider_type(self) -> str:
        return self.notification.provider_type

    @property
    def alert_ref(self) -> ObjectRef:
        return ObjectRef.of(self.alert)


@dataclass(frozen=True)
class Drop:
    """A stage decided this notification must not be sent. ``reason`` labels the drop metric."""

    reason: DropReason | str
    message: str = ""
    warn: bool = False  # emit a Warning Kubernetes Event on the Alert
    provider_type: str = ""  # metric label when the drop happens before a Notification exists
    suppressed: bool = False  # noise control: counted in notification_suppressed_total, logged at debug
    failure: bool = False  # something failed (a hook down): logged at error; a decision is logged at info


class DeliveryOutcome(enum.Enum):
    """What one delivery attempt came to (the outbox acts on it; not ``hooks.metrics.Outcome``)."""

    DELIVERED = "delivered"
    RETRY = "retry"  # a transient failure: try again later
    PERMANENT = "permanent"  # the provider refused it for good (e.g. 400): dead-letter now
    DROPPED = "dropped"  # nothing to send any more (Provider deleted, a stage dropped it): forget


@dataclass(slots=True)  # never mutated (DELIVERED, GONE are shared); not frozen, as Notification
class Result:
    """What ``Deliverer.deliver`` made of one attempt."""

    outcome: DeliveryOutcome
    error: str = ""
    """Masked error text (it is stored with a dead letter and shown by the CLI)."""
    retry_after: float | None = None
    """Seconds the provider asked us to wait (``Retry-After`` on 429/503)."""
    # what the history shows of the attempt (set when it records): the failure reason, the provider's status,
    # the attempt's duration and the masked request summary (``outbound.AttemptLog.summary``)
    reason: str = ""
    status_code: int | None = None
    latency_ms: float | None = None
    request: str = ""


DELIVERED = Result(DeliveryOutcome.DELIVERED)
GONE = Result(DeliveryOutcome.DROPPED)


class Queue(Protocol):
    """Where prepared notifications wait for delivery: the memory lanes (``lanes.py``) or the durable
    outbox (``outbox/``). ``durable``: the event's answer waits until ``enqueue`` returned (at least
    once); otherwise it does not, and work that needs I/O continues on tasks (Flux's at most once)."""

    @property
    def durable(self) -> bool: ...

    @property
    def pending(self) -> int:
        """Notifications waiting in this process (a durable queue's wait in the store: 0)."""

    def enqueue(self, notifications: Sequence[Notification], /) -> Awaitable[None] | None:
        """Queue one event's notifications (a durable queue: in one store call; ``StoreError`` propagates)."""

    def close(self) -> None:
        """Refuse what comes from now on (shutdown)."""

    async def wait_idle(self, timeout: float | None = None) -> bool: ...

    async def shutdown(self, grace: float) -> int:
        """Stop taking work; finish what is in flight within ``grace`` seconds; return what was abandoned."""


class EventSink(Protocol):
    """Where Kubernetes Events about our objects go: the app's spam-controlled ``EventRecorder``
    (``controllers/events.py``), whose ``event`` answers whether the Event was recorded."""

    async def event(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> object: ...
