"""The pipeline in dry run, for ``notification-controller explain``: the controller's own path, recorded.

``explain`` used to re-implement matching, noise control, templates and request building, and drifted
(issue 25: it forwarded the ``token`` metadata the dispatcher strips, so the generic-hmac signature at the
sink differed; it called an Alert with a broken template invalid where the controller sends the default
message). Now it builds the real pipeline with ``builder.build(..., dry_run=(DryRunQueue(), Recorder()))``
and runs ``Dispatcher.admit`` and ``Deliverer.deliver`` on it. Three pieces record instead of acting:

* ``DryRunQueue``: the queue between the two halves; it keeps the notifications the pre-queue stages let
  through (no lane, no task) so explain can deliver them one at a time, in order.
* ``Recorder``: the ``Reporter`` that also remembers, per Alert, each drop, Warning, failure and delivery
  (the Events go to a sink that discards them: explain changes no object and writes no state).
* ``RecordingHTTP``: the outbound client that records each request the notifier builds (the exact bytes,
  signature included) and, only with ``--send``, sends it through the real client.
* ``ReadThroughState`` (``explain --store``): the controller's store read, never written: what the stages
  write goes to memory in front of it (noise control's counts, a source failing for inhibition).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from ..api.alert import Alert
from ..core.redact import Redactor
from ..metrics import EventMetrics
from ..objects.base import ObjectRef
from ..outbound import OutboundHTTP, OutboundRequest
from ..outbound.request import OutboundResponse
from ..store.base import KVEntry, Store
from ..store.memory import MemoryStore
from .model import Draft, Drop, Notification, Result
from .report import Reporter


class DryRunQueue:
    """A ``model.Queue`` that keeps what it is given (memory semantics: ``admit`` answers synchronously)."""

    durable = False

    def __init__(self) -> None:
        self.notifications: list[Notification] = []

    @property
    def pending(self) -> int:
        return len(self.notifications)

    def enqueue(self, notifications: Sequence[Notification], /) -> Awaitable[None] | None:
        self.notifications.extend(notifications)
        return None

    def take(self) -> list[Notification]:
        taken, self.notifications = self.notifications, []
        return taken

    def close(self) -> None:
        pass

    async def wait_idle(self, timeout: float | None = None) -> bool:
        return True

    async def shutdown(self, grace: float) -> int:
        return 0


class _Discard:
    """An ``EventSink`` that records nothing: the ``Recorder`` keeps what explain needs."""

    async def event(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        return None


@dataclass
class Outcome:
    """What happened to one Alert's notification."""

    drops: list[Drop] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (reason, message), secrets masked
    delivered: bool = False
    failed: str = ""


def _key(alert: Alert) -> str:
    return f"{alert.metadata.namespace}/{alert.metadata.name}"


class Recorder(Reporter):
    """The ``Reporter`` (metrics on a private registry, Events discarded) that remembers per Alert."""

    def __init__(self) -> None:
        super().__init__(_Discard(), EventMetrics(CollectorRegistry()), Redactor())
        self.outcomes: dict[str, Outcome] = {}

    def of_alert(self, key: str) -> Outcome:
        return self.outcomes.setdefault(key, Outcome())

    def drop(
        self,
        drop: Drop,
        ptype: str,
        alert: Alert | None = None,
        *,
        draft: Draft | None = None,
        notification: Notification | None = None,
    ) -> None:
        if alert is not None:
            self.of_alert(_key(alert)).drops.append(drop)
        super().drop(drop, ptype, alert, draft=draft, notification=notification)

    def warn(
        self,
        alert: Alert,
        reason: str,
        message: str,
        annotations: dict[str, str] | None = None,
        *,
        logged: bool = False,
    ) -> None:
        self.of_alert(_key(alert)).warnings.append((reason, self.redactor(message)))
        super().warn(alert, reason, message, annotations, logged=logged)

    def delivered(self, notification: Notification, result: Result | None = None) -> None:
        self.of_alert(notification.alert.key).delivered = True
        super().delivered(notification, result)

    def failed(
        self,
        notification: Notification,
        alert: Alert,
        error: str,
        reason: str,
        masks: Sequence[str] = (),
    ) -> str:
        masked = super().failed(notification, alert, error, reason, masks)
        self.of_alert(_key(alert)).failed = masked
        return masked


@dataclass(frozen=True)
class Recorded:
    request: OutboundRequest
    masks: tuple[str, ...]


class RecordingHTTP(OutboundHTTP):
    """Records every request; sends it through the real client only when ``forward`` (``--send``),
    otherwise answers 200 with an empty body (what a notifier treats as delivered)."""

    def __init__(self, *, forward: bool) -> None:
        super().__init__()
        self.forward = forward
        self.requests: list[Recorded] = []

    def take(self) -> list[Recorded]:
        taken, self.requests = self.requests, []
        return taken

    async def send(
        self,
        request: OutboundRequest,
        *,
        timeout: float,
        proxy: str | None = None,
        tls: ssl.SSLContext | None = None,
        masks: Sequence[str] = (),
        check: Callable[[OutboundResponse], None] | None = None,
        retry: bool = True,
        body_limit: int | None = None,
    ) -> OutboundResponse:
        self.requests.append(Recorded(request, tuple(masks)))
        if not self.forward:
            return OutboundResponse(200, _NO_HEADERS, b"")
        return await super().send(
            request,
            timeout=timeout,
            proxy=proxy,
            tls=tls,
            masks=masks,
            check=check,
            retry=retry,
            body_limit=body_limit,
        )


_NO_HEADERS: Mapping[str, str] = {}


class ReadThroughState(MemoryStore):
    """The KV of the controller's store, read-only: a key this dry run wrote reads from memory, any other
    from ``real``; writes stay in memory (a compare-and-set on a key read from ``real`` succeeds: a dry
    run has no concurrent writer). Only the KV is read through; the outbox is never used by explain."""

    def __init__(self, real: Store) -> None:
        super().__init__()
        self.real = real

    async def kv_get(self, key: str) -> KVEntry | None:
        own = await super().kv_get(key)
        return own if own is not None else await self.real.kv_get(key)

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        if await super().kv_get(key) is None:
            return await self.kv_put(key, value, ttl=ttl)
        return await super().kv_cas(key, value, expected=expected, ttl=ttl)


__all__ = ["DryRunQueue", "Outcome", "ReadThroughState", "Recorded", "Recorder", "RecordingHTTP"]
