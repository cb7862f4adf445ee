"""The delivery path's per-notification shortcuts (issue 17, "a cheaper delivery path") change nothing
observable.

Each is checked against what it replaced: the budget timer of ``OutboundHTTP.send`` (one ``call_at``
instead of ``asyncio.timeout_at``) times out with the same error and leaves the task as it found it;
headers prepared once per Provider (``shared_headers``) put the same lines on the wire as a plain
mapping; the rules copy a draft without ``dataclasses.replace``; ``notification_pending`` is read
from the lanes when scraped; the notifier cache still rebuilds when a referenced Secret is replaced.
Real local servers, the real lanes and cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import MappingProxyType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.core.redact import Redactor
from notification_controller.dispatch.lanes import LaneSettings, MemoryLanes
from notification_controller.dispatch.model import Draft, Notification, Ref, new_id
from notification_controller.dispatch.notifiers import NotifierCache
from notification_controller.dispatch.report import Reporter
from notification_controller.errors import DeliveryError, FailureReason
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import (
    IDEMPOTENCY_KEY,
    OutboundHTTP,
    OutboundRequest,
    RetryPolicy,
    shared_headers,
)
from notification_controller.providers.message import Message
from tests.support.capture import CaptureServer, Reply
from tests.support.sinks import LogSink

NS = "flux-system"
V1B3 = "notification.toolkit.fluxcd.io/v1beta3"


def _event(message: str = "m") -> Event:
    return Event.model_validate(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": NS, "name": "apps"},
            "severity": "info",
            "message": message,
            "reason": "R",
            "reportingController": "kc",
        }
    )


def _provider(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1B3,
        "kind": "Provider",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "generic", "address": "http://127.0.0.1:9/x", **spec},
    }


def _alert(name: str) -> dict[str, Any]:
    return {
        "apiVersion": V1B3,
        "kind": "Alert",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"providerRef": {"name": "p"}, "eventSources": [{"kind": "Kustomization", "name": "*"}]},
    }


def _secret(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "stringData": data,
    }


@pytest.fixture
async def http() -> Any:
    client = OutboundHTTP(RetryPolicy(max_attempts=1))
    await client.start()
    yield client
    await client.close()


# ---- the budget timer -------------------------------------------------------------------------------
async def test_a_spent_budget_is_the_same_timeout_error_and_leaves_no_cancellation_behind(
    http: OutboundHTTP,
) -> None:
    task = asyncio.current_task()
    assert task is not None
    async with CaptureServer() as server:
        server.script(Reply(delay=2.0))
        with pytest.raises(DeliveryError) as info:
            await http.send(OutboundRequest("GET", server.url + "/slow"), timeout=0.2)
        assert str(info.value) == f"request to {server.url}/*** timed out after 0.2s"  # path redacted
        assert (info.value.reason, info.value.failure) == ("timeout", FailureReason.TIMEOUT)
        assert task.cancelling() == 0  # the expiry's cancellation was withdrawn
        await asyncio.sleep(0.01)  # and nothing is left pending: this sleep is not interrupted
        # after a success the timer is gone: nothing fires once its deadline has passed
        response = await http.send(OutboundRequest("GET", server.url + "/fast"), timeout=0.2)
        assert response.status == 200
        await asyncio.sleep(0.3)
        assert task.cancelling() == 0


async def test_a_cancellation_from_outside_stays_a_cancellation(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        server.script(Reply(delay=2.0))
        sending = asyncio.create_task(http.send(OutboundRequest("GET", server.url + "/slow"), timeout=5))
        await asyncio.sleep(0.2)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending


async def test_an_outer_timeout_that_ends_first_is_the_callers(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        server.script(Reply(delay=2.0))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await http.send(OutboundRequest("GET", server.url + "/slow"), timeout=5)


async def test_the_budget_covers_the_wait_before_a_retry() -> None:
    """A 503 asks for a retry after 0.3 s; the budget ends during that wait: the timeout error."""
    http = OutboundHTTP(RetryPolicy(max_attempts=3, wait_min=0.3, wait_max=0.3))
    await http.start()
    try:
        async with CaptureServer() as server:
            server.script(Reply(503), Reply(503), Reply(503))
            with pytest.raises(DeliveryError) as info:
                await http.send(OutboundRequest("GET", server.url + "/busy"), timeout=0.45)
            assert info.value.failure is FailureReason.SERVER_ERROR  # gave up before a wait it cannot finish
            server.script(Reply(503), Reply(200))
            response = await http.send(OutboundRequest("GET", server.url + "/busy"), timeout=2)
            assert response.status == 200
    finally:
        await http.close()


# ---- headers prepared once ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "application/json", "gotk-component": "kc", "X-Api-Key": "k"},
        {"Content-Type": "application/json", "content-type": "text/plain", "X-A": "1"},  # a Secret's override
    ],
)
@pytest.mark.parametrize("key", ["", "id-1"])
async def test_shared_headers_put_the_same_lines_on_the_wire(
    http: OutboundHTTP, headers: dict[str, str], key: str
) -> None:
    """Also when the client copies them (an idempotency key, Basic auth): the copy is the mapping's."""
    shared = shared_headers(headers)
    assert {**shared} == headers and list(shared.items()) == list(headers.items())
    token = IDEMPOTENCY_KEY.set(key)
    try:
        async with CaptureServer() as server:
            for mapping in (MappingProxyType(dict(headers)), shared):
                await http.send(
                    OutboundRequest("POST", server.url + "/x", mapping, b"{}", ("u", "p")), timeout=5
                )
            plain, prepared = await server.wait_for(2)
    finally:
        IDEMPOTENCY_KEY.reset(token)
    assert list(prepared.headers.items()) == list(plain.headers.items())
    assert plain.headers.get("Idempotency-Key") == (key or None)


async def test_no_cookie_is_kept_between_requests(http: OutboundHTTP) -> None:
    """As Flux's client (no cookie jar): what one endpoint sets never goes out with a later request."""
    async with CaptureServer() as server:
        url = server.url.replace(
            "127.0.0.1", "localhost"
        )  # a jar would keep a host name's cookies, not an IP's
        server.script(Reply(200, headers={"Set-Cookie": "session=tenant-a; Path=/"}))
        await http.send(OutboundRequest("POST", url + "/a", {}, b"{}"), timeout=5)
        await http.send(OutboundRequest("POST", url + "/b", {}, b"{}"), timeout=5)
        first, second = await server.wait_for(2)
    assert "Cookie" not in first.headers and "Cookie" not in second.headers


# ---- draft copies -------------------------------------------------------------------------------------
def test_draft_copies_change_one_field_and_keep_every_other() -> None:
    # a field added to Draft must be added to its with_* copies too (they list the fields by hand)
    assert [f.name for f in dataclasses.fields(Draft)] == [
        "event",
        "alert",
        "provider",
        "commit_status",
        "message",
        "event_id",
    ]
    alert = parse_object(_alert("a"))
    first, second = parse_object(_provider("p")), parse_object(_provider("q"))
    draft = Draft(_event(), alert, first, "status-id", Message("t", "x", "info"), "event-1")  # type: ignore[arg-type]
    other = _event("other")
    assert draft.with_provider(second) == dataclasses.replace(draft, provider=second)  # type: ignore[arg-type]
    assert draft.with_event(other) == dataclasses.replace(draft, event=other)
    assert draft.with_commit_status("x") == dataclasses.replace(draft, commit_status="x")


# ---- notification_pending ------------------------------------------------------------------------------
async def test_pending_gauge_is_read_from_the_lanes_when_scraped() -> None:
    registry = CollectorRegistry()
    report = Reporter(LogSink(), EventMetrics(registry), Redactor())
    gate = asyncio.Event()

    async def send(notification: Notification, queued_at: float) -> None:
        await gate.wait()

    lanes = MemoryLanes(LaneSettings(max_pending=4, concurrency=2), report, send)
    for n in range(5):
        lanes.put(Notification(new_id(), _event(), Ref(NS, "a"), Ref(NS, f"p{n % 2}"), "generic"))
    assert registry.get_sample_value("notification_pending") == 4 == lanes.pending  # the fifth: overload
    gate.set()
    assert await lanes.wait_idle(5)
    assert registry.get_sample_value("notification_pending") == 0


# ---- notifier cache --------------------------------------------------------------------------------------
def test_the_notifier_is_rebuilt_only_when_its_provider_or_a_referenced_secret_is_replaced() -> None:
    store = ObjectStore()
    store.upsert(parse_object(_provider("plain")))
    store.upsert(parse_object(_provider("signed", type="generic-hmac", secretRef={"name": "s"})))
    store.upsert(parse_object(_secret("s", token="one")))
    cache = NotifierCache(store)

    def get(name: str) -> object:
        provider = store.provider(NS, name)
        assert provider is not None
        return cache.get(provider)[1]

    plain, signed = get("plain"), get("signed")
    assert (get("plain"), get("signed"), cache.builds) == (plain, signed, 2)
    store.upsert(parse_object(_secret("s", token="two")))  # a new Secret object: the signing key changed
    rebuilt = get("signed")
    assert rebuilt is not signed and cache.builds == 3
    assert rebuilt.opts.token_text == "two"  # type: ignore[attr-defined]
    assert get("plain") is plain and cache.builds == 3
    store.upsert(parse_object(_provider("plain", address="http://127.0.0.1:9/y")))
    assert get("plain") is not plain and cache.builds == 4


async def test_overload_drops_are_logged_once_per_provider_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 25 item 5: a flood refused as overload was one error line per drop (20,000 lines for 20,000
    events). Now: one line per Provider per interval with the count, and the rest once nothing is pending;
    the metric still counts every drop."""
    registry = CollectorRegistry()
    report = Reporter(LogSink(), EventMetrics(registry), Redactor())
    gate = asyncio.Event()

    async def send(notification: Notification, queued_at: float) -> None:
        await gate.wait()

    lanes = MemoryLanes(LaneSettings(max_pending=2, concurrency=1), report, send)
    lanes.overload_log_interval = 3600.0  # the whole flood fits in one interval, however slow the machine
    flood = 2000
    with caplog.at_level("DEBUG", logger="notification_controller.dispatch.lanes"):
        for n in range(flood):
            lanes.put(Notification(new_id(), _event(), Ref(NS, "a"), Ref(NS, f"p{n % 2}"), "generic"))
        during = [r for r in caplog.records if r.name == "notification_controller.dispatch.lanes"]
        # one line for each of the two Providers (the first drop of each), at error
        assert [(r.levelname, r.__dict__["fields"]["provider"]) for r in during] == [
            ("ERROR", f"{NS}/p0"),
            ("ERROR", f"{NS}/p1"),
        ]
        gate.set()
        assert await lanes.wait_idle(5)
    lines = [r for r in caplog.records if r.name == "notification_controller.dispatch.lanes"]
    assert len(lines) == 4  # and one closing line per Provider with what the first lines did not count
    assert sum(r.__dict__["fields"]["dropped"] for r in lines) == flood - 2
    dropped = registry.get_sample_value(
        "notification_dropped_total", {"provider_type": "generic", "reason": "overload"}
    )
    assert dropped == flood - 2
    assert (
        lanes._overload == {}
    )  # forgotten once the overload is over: bounded by the Providers of one overload
