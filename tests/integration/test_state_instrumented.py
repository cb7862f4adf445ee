"""Every store operation is timed and every failure counted; ``healthy`` follows the last operation."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.errors import StoreError
from notification_controller.metrics import DeliveryMetrics
from notification_controller.store import NewItem, open_store
from notification_controller.store.instrumented import InstrumentedStore


def _healthy(store: InstrumentedStore) -> bool:
    return store.healthy  # read through a call: mypy would narrow the attribute between the asserts


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, {"store": "sqlite", **labels})
    return 0.0 if value is None else value


async def test_operations_are_timed_and_failures_make_it_unhealthy(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    store = InstrumentedStore(open_store(f"sqlite:{tmp_path / 's.db'}"), DeliveryMetrics(registry))
    await store.start()
    await store.append([NewItem("n1", "ns/p", b"{}")])
    lease = await store.lease("ns/p")
    assert lease is not None
    await store.ack(lease)
    assert _healthy(store)
    for op in ("append", "lease", "ack"):
        assert _sample(registry, "notification_store_operation_duration_seconds_count", operation=op) == 1
    await store.close()  # the store goes away under the controller
    with pytest.raises(StoreError):
        await store.append([NewItem("n2", "ns/p", b"{}")])
    assert not _healthy(store) and "not started" in store.last_error
    assert _sample(registry, "notification_store_errors_total", operation="append") == 1
    assert _sample(registry, "notification_store_operation_duration_seconds_count", operation="append") == 2
    await store.start()  # back: the next successful operation (the readiness ping) makes it healthy
    await store.ping()
    assert _healthy(store)
    assert await store.stats() == {}
    await store.close()
