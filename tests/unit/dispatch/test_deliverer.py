"""The delivery hot path's shortcuts (issue 17, part 3) change no byte, metric or header.

Each shortcut is checked against the straightforward code it replaces: the Go-exact JSON encoder's
scalar fast path (``core/gojson.py``), metadata combination without source tracking unless a key
repeats (``core/metadata.py``), metric children resolved once per provider type (``dispatch``), and
request headers no longer copied per attempt (``providers/http.py``: the caller's mapping must stay
untouched, Basic auth still sent). Real local servers, the real ``Dispatcher``.
"""

from __future__ import annotations

import base64
import enum
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.core.metadata import _combine_with_sources, combine_metadata
from notification_controller.dispatch.builder import build
from notification_controller.lib.gojson import GoStruct, _dumps_stdlib, _sort_maps, dumps
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP, OutboundRequest, RetryPolicy
from tests.support.capture import CaptureServer
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink

NS = "flux-system"
KS = "kustomize.toolkit.fluxcd.io"
PREFIX = "event.toolkit.fluxcd.io/"


# ---- Go-exact JSON ------------------------------------------------------------------------------
def _reference_sort(value: Any) -> Any:
    """The encoder's map sorting before the fast path (isinstance checks on every value)."""
    if isinstance(value, GoStruct):
        return {k: _reference_sort(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {k: _reference_sort(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_reference_sort(v) for v in value]
    return value


class _Kind(enum.StrEnum):
    A = "a<b>"


scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text() | st.just(_Kind.A)
go_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
        | st.dictionaries(st.text(max_size=8), children, max_size=4).map(GoStruct)
        | st.dictionaries(st.text(max_size=8), children, max_size=4).map(OrderedDict)
        | st.dictionaries(st.text(max_size=8), children, max_size=4).map(MappingProxyType)
    ),
    max_leaves=24,
)


@given(go_values)
def test_scalar_fast_path_sorts_like_the_reference(value: object) -> None:
    """Same structure, same key order, for structs, maps, Mapping subclasses, enums and sequences."""
    fast, reference = _sort_maps(value), _reference_sort(value)
    assert fast == reference
    assert dumps(value) == _dumps_stdlib(reference)


def test_event_bytes_unchanged() -> None:
    """An Event as Flux marshals it: struct order kept, metadata keys sorted, ``<>&`` escaped."""
    event = Event.model_validate(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": NS, "name": "apps", "apiVersion": "v1"},
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": "a < b & c",
            "reason": "R",
            "metadata": {"z": "1", "a": "<2>"},
            "reportingController": "kc",
        }
    )
    assert event.to_go_json() == (
        b'{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps",'
        b'"apiVersion":"v1"},"severity":"info","timestamp":"2026-11-22T10:00:00Z",'
        b'"message":"a \\u003c b \\u0026 c","reason":"R","metadata":{"a":"\\u003c2\\u003e","z":"1"},'
        b'"reportingController":"kc"}'
    )


# ---- metadata combination -------------------------------------------------------------------------
keys = st.sampled_from(["env", "summary", "team", "revision", "a/b"])
raw_metadata = st.dictionaries(
    st.tuples(st.sampled_from([PREFIX, f"{KS}/", "other.io/", ""]), keys).map("".join),
    st.text(max_size=3),
    max_size=6,
)


@given(
    raw_metadata, st.none() | st.dictionaries(keys, st.text(max_size=3), max_size=3), st.none() | st.text()
)
def test_combination_equals_the_source_tracking_pass(
    md: dict[str, str], alert_md: dict[str, str] | None, summary: str | None
) -> None:
    """Values, key order and conflict sources are those of the pass that tracks every source."""
    fast = combine_metadata(md, KS, alert_md, summary)
    reference = _combine_with_sources(md, KS + "/", alert_md, summary)
    assert list(fast.metadata.items()) == list(reference.metadata.items())
    assert fast.conflicts == reference.conflicts


# ---- dispatcher metrics ----------------------------------------------------------------------------
def _objects(url: str, ptype: str, name: str) -> list[dict[str, Any]]:
    v1 = "notification.toolkit.fluxcd.io/v1beta3"
    return [
        {
            "apiVersion": v1,
            "kind": "Provider",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"type": ptype, "address": url + "/" + name},
        },
        {
            "apiVersion": v1,
            "kind": "Alert",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"providerRef": {"name": name}, "eventSources": [{"kind": "Kustomization", "name": "*"}]},
        },
    ]


def _event(n: int) -> Event:
    return Event.model_validate(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": NS,
                "name": "apps",
                "apiVersion": f"{KS}/v1",
            },
            "severity": "info",
            "message": f"m{n}",
            "reason": "R",
            "metadata": {f"{KS}/revision": "r"},
            "reportingController": "kc",
        }
    )


async def test_metric_children_resolved_once_per_type_and_counts_exact() -> None:
    registry = CollectorRegistry()
    metrics = EventMetrics(registry)
    calls: list[str] = []
    for family in (metrics.notifications, metrics.delivered, metrics.delivery_duration):
        original = family.labels

        def counting(*args: str, _original: Any = original, **kwargs: str) -> Any:
            calls.append(kwargs.get("provider_type") or (args[0] if args else ""))
            return _original(*args, **kwargs)

        family.labels = counting  # type: ignore[method-assign,assignment]
    store = ObjectStore()
    http = OutboundHTTP(RetryPolicy(max_attempts=1))
    await http.start()
    dispatcher = build(store, MemoryCluster(), http, LogSink(), metrics).dispatcher
    try:
        async with CaptureServer() as server:
            for doc in [*_objects(server.url, "generic", "g"), *_objects(server.url, "generic-hmac", "h")]:
                if doc["spec"].get("type") == "generic-hmac":
                    doc["spec"]["secretRef"] = {"name": "key"}
                store.upsert(parse_object(doc))
            store.upsert(
                parse_object(
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "key", "namespace": NS},
                        "stringData": {"token": "hmac-key"},
                    }
                )
            )
            for n in range(5):
                assert dispatcher.admit(_event(n)) == 2
                assert await dispatcher.wait_idle(20)
            assert len(await server.wait_for(10)) == 10
    finally:
        await dispatcher.shutdown(1)
        await http.close()
    assert sorted(calls) == sorted(["generic", "generic-hmac"] * 3)  # one child per family and type
    for ptype, name in (("generic", "g"), ("generic-hmac", "h")):
        labels = {"provider_type": ptype}
        assert registry.get_sample_value("notification_notifications_total", labels) == 5
        by_provider = {**labels, "provider": f"{NS}/{name}"}
        assert registry.get_sample_value("notification_delivered_total", by_provider) == 5
        assert registry.get_sample_value("notification_delivery_duration_seconds_count", labels) == 5


# ---- outbound headers ------------------------------------------------------------------------------
@pytest.mark.parametrize("basic_auth", [None, ("user", "pa:ss")])
async def test_request_headers_are_sent_and_never_modified(basic_auth: tuple[str, str] | None) -> None:
    """Headers are handed to aiohttp without a copy: a mapping shared between deliveries stays as it was."""
    shared = MappingProxyType({"Content-Type": "application/json", "X-Custom": "v"})
    http = OutboundHTTP(RetryPolicy(max_attempts=1))
    await http.start()
    try:
        async with CaptureServer() as server:
            for _ in range(2):
                request = OutboundRequest("POST", server.url + "/x", shared, b"{}", basic_auth)
                await http.send(request, timeout=5)
            received = await server.wait_for(2)
    finally:
        await http.close()
    assert dict(shared) == {"Content-Type": "application/json", "X-Custom": "v"}
    for got in received:
        assert got.headers["X-Custom"] == "v"
        assert got.headers["Content-Type"] == "application/json"
        if basic_auth is None:
            assert "Authorization" not in got.headers
        else:
            assert got.headers["Authorization"] == "Basic " + base64.b64encode(b"user:pa:ss").decode()
