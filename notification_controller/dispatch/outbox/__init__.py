"""The durable outbox, in one place (``--store=sqlite:…`` or ``nats://…``; docs/delivery.md): at-least-once
delivery of what the memory lanes deliver at most once.

* ``queue.py``: ``DurableOutbox``, the dispatcher's ``Queue`` for a durable store: appends, wakes lanes,
  turns dead letters and breaker changes into metrics and Kubernetes Events;
* ``runner.py``: ``OutboxRunner`` leases items back, lane by lane, and acks, NAKs or dead-letters them;
* ``policy.py``: when to redeliver (``RedeliveryPolicy``) and the runner's settings;
* ``breaker.py``: the circuit breaker of one lane.

The items themselves live in the store (``store/``, the ``--store`` flag: ``append``, ``lease``, ``ack``…); the
``deadletters`` command lists and replays what was given up.
"""

from .breaker import BreakerState, CircuitBreaker
from .policy import DurableSettings, RedeliveryPolicy
from .queue import DurableOutbox
from .runner import OutboxRunner

__all__ = [
    "BreakerState",
    "CircuitBreaker",
    "DurableOutbox",
    "DurableSettings",
    "OutboxRunner",
    "RedeliveryPolicy",
]
