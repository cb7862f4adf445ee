"""The record and the query (pure): the JSON round trip, the vocabulary, ids that sort by time, matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.history.model import (
    MAX_LIMIT,
    MAX_TEXT,
    Outcome,
    Query,
    Record,
    cut,
    new_record_id,
    parse_rfc3339,
    rfc3339_ms,
    row_time,
)


def record(**over: object) -> Record:
    base: dict[str, object] = dict(
        id=new_record_id(),
        time=1_795_000_000.125,
        event_id="e1",
        notification_id="n1",
        object="Kustomization/flux-system/apps",
        severity="error",
        reason="ReconciliationFailed",
        message="apply failed",
        alert="flux-system/slack",
        provider="flux-system/slack",
        provider_type="slack",
        outcome=Outcome.DELIVERED,
    )
    base.update(over)
    return Record(**base)  # type: ignore[arg-type]


def test_json_uses_the_documented_keys_and_round_trips() -> None:
    r = record(
        outcome=Outcome.RETRYING,
        stage="",
        detail="503",
        attempt=2,
        latency_ms=12.5,
        status_code=503,
        request="POST https://hooks.slack.com/*** (120 B)",
    )
    data = r.to_json()
    assert list(data) == [
        "id",
        "time",
        "eventId",
        "notificationId",
        "object",
        "severity",
        "reason",
        "message",
        "alert",
        "provider",
        "providerType",
        "outcome",
        "stage",
        "detail",
        "attempt",
        "latencyMs",
        "statusCode",
        "request",
    ]
    assert data["time"] == "2026-11-18T11:06:40.125Z"
    assert data["outcome"] == "retrying"
    back = Record.from_json(data)
    assert back == r


@given(
    st.sampled_from(list(Outcome)),
    st.text(max_size=50),
    st.integers(min_value=0, max_value=100),
    st.one_of(st.none(), st.integers(min_value=100, max_value=599)),
)
def test_round_trip_any_texts(outcome: Outcome, text: str, attempt: int, status: int | None) -> None:
    r = record(
        outcome=outcome, message=text, detail=text, attempt=attempt, status_code=status, time=1_795_000_000.5
    )
    assert Record.from_json(r.to_json()) == r


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("outcome", "exploded", "outcome"),
        ("time", "yesterday", "time"),
        ("attempt", "2", "attempt"),
        ("statusCode", "200", "statusCode"),
        ("message", 5, "message"),
    ],
)
def test_from_json_names_the_bad_field(field: str, value: object, named: str) -> None:
    data = record().to_json()
    data[field] = value
    with pytest.raises(ValueError, match=named):
        Record.from_json(data)


def test_ids_are_unique_and_sort_by_time() -> None:
    ids = [new_record_id() for _ in range(1000)]
    assert len(set(ids)) == 1000 and ids == sorted(ids)
    assert new_record_id(5) < new_record_id()  # an id of an older time sorts first...
    assert len(new_record_id()) == 24


def test_cut_marks_what_it_cut() -> None:
    assert cut("short") == "short"
    long = cut("x" * 65536)
    assert len(long) == MAX_TEXT and long.endswith("...")


def test_rfc3339_both_ways() -> None:
    assert parse_rfc3339(rfc3339_ms(1_795_000_000.5)) == 1_795_000_000.5
    assert parse_rfc3339("2026-11-18T12:06:40+01:00") == 1_795_000_000.0


def test_query_matches_exact_fields_and_a_time_range() -> None:
    r = record(time=100.0)
    assert Query().matches(r)
    assert Query(alert="flux-system/slack", outcome="delivered", since=100, until=100).matches(r)
    assert not Query(alert="flux-system/slac").matches(r)  # exact, not a prefix
    assert not Query(object="Kustomization/flux-system/app").matches(r)
    assert not Query(outcome="failed").matches(r)
    assert not Query(since=100.5).matches(r) and not Query(until=99.9).matches(r)
    assert not Query(event_id="e2").matches(r) and Query(notification_id="n1").matches(r)


def test_query_refuses_what_it_cannot_mean_and_bounds_the_limit() -> None:
    with pytest.raises(ValueError, match="outcome"):
        Query(outcome="boom")
    with pytest.raises(ValueError, match="limit"):
        Query(limit=0)
    assert Query(limit=10**9).bounded_limit == MAX_LIMIT


def test_a_rows_time_is_its_own_or_its_ids() -> None:
    """``Row``: a row made from a Record keeps its float time; a recorder's row (the id as its ``next_ns``)
    leaves the time ``None``, and it reads as those nanoseconds in seconds, in a Record and in a query."""
    r = record(time=1_795_000_000.125)
    assert row_time(r.row()) == 1_795_000_000.125 and Record.from_row(r.row()) == r
    ns = 1_795_000_000_250_000_000
    row = (ns, None, *r.row()[2:])
    seconds = ns / 1e9
    assert (
        row_time(row) == seconds
        and Record.from_row(row).time == seconds
        and abs(seconds - 1_795_000_000.25) < 1e-6
    )
    assert Query(since=seconds, until=seconds).matches_row(row)
    assert not Query(since=seconds + 0.01).matches_row(row) and not Query(until=seconds - 0.01).matches_row(
        row
    )
