"""Kubernetes Events from the reconcilers, with client-side spam control and masking.

Every Event goes through ``EventRecorder`` before reaching ``Cluster.emit_event``:

* **masking**: message and annotation values pass through the ``Redactor`` (secret values known to the
  process are replaced by ``*****``); reconcilers must not put secrets in messages, this is the last line
  of defence;
* **repeats**: an Event identical to one already recorded — same object, type, reason and message — is
  sent again and the cluster adapter turns it into a PATCH of ``count``/``lastTimestamp`` of the first
  one, as client-go's ``EventCorrelator`` does. So ``kubectl get events`` shows that a reconcile ran
  again (what ``flux reconcile`` users look for), without a new Event object per repeat;
* **spam filter**: a token bucket per object (burst 25, one token back every 5 min, client-go's
  ``EventSourceObjectSpamFilter`` defaults) caps what a flapping object can write, repeats included.

Emitting is best effort: an API error is logged, never raised into a reconcile.
The state is bounded (LRU of ``max_tracked`` entries) so a churn of objects cannot grow memory.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping

from ..core.redact import Redactor
from ..lib.clock import Clock
from ..lib.tokenbucket import KeyedBuckets
from ..objects.base import Cluster, ObjectRef

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

DEFAULT_BURST = 25
DEFAULT_REFILL_SECONDS = 300.0
DEFAULT_MAX_TRACKED = 4096

_ObjKey = tuple[str, str, str, str]  # kind, namespace, name, uid
_EventKey = tuple[_ObjKey, str, str, str]  # object, type, reason, message


class EventRecorder:
    """Send Kubernetes Events about our objects (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        clock: Clock,
        redactor: Redactor | None = None,
        *,
        burst: int = DEFAULT_BURST,
        refill_seconds: float = DEFAULT_REFILL_SECONDS,
        max_tracked: int = DEFAULT_MAX_TRACKED,
    ) -> None:
        self._cluster = cluster
        self._clock = clock
        self._redact = redactor if redactor is not None else Redactor()
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.max_tracked = max_tracked
        self._repeats: OrderedDict[_EventKey, int] = OrderedDict()
        # client-go's spam filter on the one token bucket: one token back every ``refill_seconds``
        rate = 1.0 / refill_seconds if refill_seconds > 0 else 0.0
        self._buckets: KeyedBuckets[_ObjKey] = KeyedBuckets(rate, burst, max_keys=max_tracked)
        self.dropped = 0  # events refused by the spam filter
        self.failed = 0  # events the API refused

    async def event(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        """Record an Event; returns True if it was sent to the cluster."""
        message = self._redact(message)
        masked_annotations = {k: self._redact(v) for k, v in annotations.items()} if annotations else None
        obj: _ObjKey = (ref.kind, ref.namespace, ref.name, ref.uid)
        key: _EventKey = (obj, type_, reason, message)
        now = self._clock.monotonic()

        if self._buckets.take(obj, now) is not None:
            self.dropped += 1
            log.debug(
                "event for %s/%s/%s dropped by the spam filter: %s", ref.kind, ref.namespace, ref.name, reason
            )
            return False

        repeats = self._repeats.get(key)
        self._repeats[key] = 0 if repeats is None else repeats + 1
        self._repeats.move_to_end(key)
        while len(self._repeats) > self.max_tracked:
            self._repeats.popitem(last=False)
        try:
            await self._cluster.emit_event(ref, type_, reason, message, masked_annotations)
        except Exception as exc:  # best effort: an Event must never fail a reconcile
            self.failed += 1
            log.warning(
                "failed to record event %s for %s/%s/%s: %s",
                reason,
                ref.kind,
                ref.namespace,
                ref.name,
                self._redact(str(exc)),
            )
            return False
        return True

    def repeats(self, ref: ObjectRef, type_: str, reason: str, message: str) -> int:
        """How many times this exact Event was recorded again after the first (each one a count bump)."""
        key: _EventKey = ((ref.kind, ref.namespace, ref.name, ref.uid), type_, reason, self._redact(message))
        return self._repeats.get(key, 0)

    def forget(self, ref: ObjectRef) -> None:
        """Drop the state of a deleted object."""
        obj: _ObjKey = (ref.kind, ref.namespace, ref.name, ref.uid)
        self._buckets.forget(obj)
        for key in [k for k in self._repeats if k[0] == obj]:
            del self._repeats[key]
