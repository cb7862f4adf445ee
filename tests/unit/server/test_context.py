"""What the UI's overview computes (``server/ui/context.py``) from a real object cache: Silences that are not
expired, Provider rows without a durable store, and the live-stream slots."""

from __future__ import annotations

from notification_controller.api.objects import parse_object
from notification_controller.dispatch.providerhealth import ProviderHealth
from notification_controller.objects.base import ObjectStore
from notification_controller.server.ui import context
from notification_controller.server.ui.context import StreamSlots, UIContext

PROVIDER: dict[str, object] = {
    "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
    "kind": "Provider",
    "metadata": {"name": "sink", "namespace": "apps"},
    "spec": {"type": "generic", "address": "http://127.0.0.1:1/SECRET-PATH"},
}


def silence(name: str, state: str | None) -> dict[str, object]:
    raw: dict[str, object] = {
        "apiVersion": "notification-controller.io/v1alpha1",
        "kind": "Silence",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {
            "matchers": [{"name": "severity", "value": "error", "matchType": "!="}],
            "endsAt": "2030-01-01T00:00:00Z",
            "comment": "deploy",
            "createdBy": "ops",
        },
    }
    if state:
        raw["status"] = {"state": state, "held": 3}
    return raw


def store_with(*raws: dict[str, object]) -> ObjectStore:
    store = ObjectStore()
    for raw in raws:
        store.upsert(parse_object(raw))
    return store


async def test_provider_rows_without_a_durable_store() -> None:
    health = ProviderHealth(now=lambda: 100.0)
    health.failure("apps/sink", "HTTP 500: ***")
    ctx = UIContext(history=None, objects=store_with(PROVIDER), status=list, health=health)
    rows = await context.provider_health(ctx)
    assert rows == [
        {
            "provider": "apps/sink",
            "type": "generic",
            "lastSuccess": None,
            "lastFailure": 100.0,
            "lastError": "HTTP 500: ***",
            "breaker": None,
            "outboxDepth": None,
            "oldestAge": None,
        }
    ]
    assert "SECRET-PATH" not in repr(rows)
    assert await context.dead_letters(ctx) == []


def test_expired_silences_are_left_out() -> None:
    ctx = UIContext(
        history=None,
        objects=store_with(silence("on", "Active"), silence("off", "Expired"), silence("new", None)),
        status=list,
    )
    rows = context.silences(ctx)
    assert [r["name"] for r in rows] == ["new", "on"]
    assert rows[1]["matchers"] == ["severity!=error"] and rows[1]["held"] == 3
    assert rows[1]["ends"] == "2030-01-01T00:00:00Z" and rows[1]["createdBy"] == "ops"


def test_stream_slots_are_bounded() -> None:
    slots = StreamSlots(2)
    assert slots.acquire() and slots.acquire() and not slots.acquire()
    slots.release()
    assert slots.acquire()
    for _ in range(3):
        slots.release()
    assert slots.taken == 0
