"""The recorder (pure): every text masked as logs are and cut, the event's fields reused across its records,
refusals within a budget, and a failing history that never fails the caller."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.core.redact import Redactor
from notification_controller.history.memory import MemoryHistory
from notification_controller.history.model import Outcome, Query, Row, new_record_id, next_ns
from notification_controller.history.recorder import MEMO_SIZE, MEMO_TEXT, REFUSED_BURST, Recorder
from notification_controller.metrics import HistoryMetrics

SECRET = "s3cr3t-T0KEN-value-4b7d"


def event(message: str) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": "ns", "name": "app"},
            "severity": "error",
            "message": message,
            "reason": "Failed",
            "reportingController": "kustomize-controller",
        }
    )


def recorder(history: MemoryHistory | None = None, registry: CollectorRegistry | None = None) -> Recorder:
    redactor = Redactor()
    redactor.set_source("canary", [SECRET])
    history = MemoryHistory() if history is None else history
    return Recorder(history, redactor, HistoryMetrics(registry or CollectorRegistry()))


async def test_secrets_and_long_texts_are_masked_and_cut() -> None:
    history = MemoryHistory()
    rec = recorder(history)
    rec.record(
        Outcome.DROPPED,
        event(f"token {SECRET} " + "x" * 65536),
        "e",
        detail=f"why {SECRET} " + "y" * 65536,
        request=f"POST https://h/{SECRET}",
    )
    (r,) = await history.query(Query())
    assert SECRET not in r.message + r.detail + r.request and "*****" in r.message
    assert len(r.message) == 1024 and len(r.detail) == 1024 and r.message.endswith("...")
    assert r.object == "Kustomization/ns/app" and r.severity == "error" and r.reason == "Failed"


async def test_one_events_records_share_its_masked_fields() -> None:
    history = MemoryHistory()
    rec = recorder(history)
    e = event(f"x {SECRET}")
    rec.record(Outcome.DELIVERED, e, "e1", alert="ns/a")
    rec.record(Outcome.SUPPRESSED, e, "e1", alert="ns/b", stage="silence")
    second, first = await history.query(Query())
    assert first.message is second.message  # masked once
    rec.record(Outcome.DELIVERED, event("other"), "e2")
    assert (await history.query(Query(limit=1)))[0].message == "other"


def test_refusals_are_recorded_within_a_budget() -> None:
    history = MemoryHistory()
    registry = CollectorRegistry()
    now = [0.0]
    rec = Recorder(history, Redactor(), HistoryMetrics(registry), monotonic=lambda: now[0])
    for _ in range(REFUSED_BURST * 10):
        rec.refused(None, "e", 400, "bad_request", "invalid JSON")
    assert len(history) == REFUSED_BURST
    assert registry.get_sample_value("notification_history_dropped_total") == REFUSED_BURST * 9
    now[0] += 1.0  # refills at REFUSED_RATE a second
    rec.refused(None, "e", 413, "too_large")
    assert len(history) == REFUSED_BURST + 1


class Broken(MemoryHistory):
    def record_row(self, row: Row, /) -> None:  # what the Recorder calls
        raise RuntimeError("disk on fire")


def test_a_failing_history_never_fails_the_caller() -> None:
    registry = CollectorRegistry()
    rec = Recorder(Broken(), Redactor(), HistoryMetrics(registry))
    rec.record(Outcome.DELIVERED, event("m"), "e")
    assert registry.get_sample_value("notification_history_dropped_total") == 1


def test_a_masked_text_is_kept_only_while_the_secrets_stay_the_same() -> None:
    """The memo of masked texts (module docstring) never shows a value a Secret added since has made secret,
    and stays bounded."""
    redactor = Redactor()
    rec = Recorder(MemoryHistory(), redactor)
    text = "token rotated-value-123 was used"
    assert rec.mask(text) == text  # not a secret yet: kept as is
    redactor.set_source(("Secret", "s"), ["rotated-value-123"])
    assert rec.mask(text) == "token ***** was used"  # the Secret arrived: masked, not the memo's copy
    redactor.set_source(("Secret", "s"), [])
    assert rec.mask(text) == text
    for n in range(MEMO_SIZE + 10):
        rec.mask(f"a text that is long enough {n}")
    assert len(rec._memo) <= MEMO_SIZE
    assert rec.mask("x" * (MEMO_TEXT + 1)) == "x" * (MEMO_TEXT + 1)  # longer texts are not kept
    assert "x" * (MEMO_TEXT + 1) not in rec._memo


async def test_with_no_secret_held_texts_are_only_cut_until_one_arrives() -> None:
    """``Redactor.empty``: nothing to mask, so no memo either; a Secret that arrives is masked from the next
    event on (the fields of the last event are not reused across the change)."""
    history = MemoryHistory()
    redactor = Redactor()
    rec = Recorder(history, redactor)
    rec.record(Outcome.UNMATCHED, event("z" * 5000), "e1", detail="no Alert matches")
    (r,) = await history.query(Query())
    assert len(r.message) == 1024 and r.message.endswith("...") and r.object == "Kustomization/ns/app"
    assert not rec._memo
    redactor.set_source(("Secret", "s"), [SECRET])
    rec.record(Outcome.UNMATCHED, event(f"token {SECRET}"), "e2")
    assert (await history.query(Query(limit=1)))[0].message == "token *****"


async def test_with_no_secret_held_a_long_detail_and_request_are_cut() -> None:
    history = MemoryHistory()
    rec = Recorder(history, Redactor())
    rec.record(Outcome.FAILED, event("m"), "e1", detail="d" * 3000, request="POST " + "r" * 3000)
    (r,) = await history.query(Query())
    assert len(r.detail) == len(r.request) == 1024
    assert r.detail.endswith("...") and r.request.startswith("POST rrr") and r.request.endswith("...")
    rec.record(Outcome.DELIVERED, event("m"), "e2", detail="short", request="POST https://x (1 B)")
    assert (await history.query(Query(limit=1)))[0].request == "POST https://x (1 B)"


async def test_record_ids_keep_increasing_when_the_clock_does_not() -> None:
    """The Recorder and ``new_record_id`` share the process's last id time (``next_ns``): ids made by
    either, in any order, never repeat and sort in the order they were made."""
    history = MemoryHistory()
    rec = Recorder(history, Redactor())
    ahead = next_ns(time.time_ns() + 1_000_000_000)  # the last id: a second ahead of the clock
    rec.record(Outcome.UNMATCHED, event("a"), "e1")
    between = new_record_id()
    rec.record(Outcome.UNMATCHED, event("b"), "e2")
    second, first = await history.query(Query())
    assert first.id < between < second.id
    assert int(first.id[:20]) == ahead + 1 and int(second.id[:20]) == ahead + 3


async def test_unmatched_records_what_record_would() -> None:
    """``Recorder.unmatched`` (the no-match event's record, with its arguments in place) makes the record
    ``record(Outcome.UNMATCHED, ...)`` makes: the same fields, masked and cut alike, with or without a
    Secret held; only the id and time differ."""
    for secret_held in (False, True):
        history = MemoryHistory()
        redactor = Redactor()
        if secret_held:
            redactor.set_source("canary", [SECRET])
        rec = Recorder(history, redactor)
        detail = f"no Alert for {SECRET} " + "d" * 3000
        rec.record(Outcome.UNMATCHED, event(f"token {SECRET} " + "m" * 3000), "e1", detail=detail)
        rec.unmatched(event(f"token {SECRET} " + "m" * 3000), "e1", detail)
        second, first = await history.query(Query())
        assert second.id > first.id and second.time >= first.time
        assert {**second.to_json(), "id": "", "time": ""} == {**first.to_json(), "id": "", "time": ""}
        assert second.outcome is Outcome.UNMATCHED and len(second.detail) == len(second.message) == 1024
        assert (SECRET in second.message + second.detail) is not secret_held


def test_a_failing_history_never_fails_the_unmatched_caller() -> None:
    registry = CollectorRegistry()
    rec = Recorder(Broken(), Redactor(), HistoryMetrics(registry))
    rec.unmatched(event("m"), "e", "no Alert")
    assert registry.get_sample_value("notification_history_dropped_total") == 1


async def test_a_recorders_row_leaves_its_time_to_its_id() -> None:
    """The recorder's rows carry no float time (``Row``): it is the id's nanoseconds, as a Record, in a
    query's time range, and in the JSON."""
    history = MemoryHistory()
    rec = Recorder(history, Redactor())
    before = time.time()
    rec.unmatched(event("m"), "e1", "no Alert")
    rec.record(Outcome.DELIVERED, event("m"), "e2")
    rows = list(history._ring)
    assert [row[1] for row in rows] == [None, None]
    delivered, unmatched = await history.query(Query())
    for r, row in ((unmatched, rows[0]), (delivered, rows[1])):
        assert r.time == int(row[0]) / 1e9 and before - 1 <= r.time <= time.time() + 1
        assert int(r.id[:20]) == row[0]
    assert unmatched in await history.query(Query(since=unmatched.time, until=unmatched.time))
    assert await history.query(Query(since=delivered.time + 0.001)) == []
    assert await history.query(Query(until=unmatched.time - 0.001)) == []


async def test_put_records_what_record_would() -> None:
    """``Recorder.put`` (every field in place, the delivery path's) and ``record`` (keywords) make the same
    record, masked and cut alike."""
    history = MemoryHistory()
    rec = recorder(history)
    fields = dict(
        notification_id="n1", alert="ns/a", provider="ns/p", provider_type="generic", stage="sent",
        detail=f"why {SECRET} " + "d" * 3000, attempt=2, latency_ms=1.5, status_code=200,
        request=f"POST https://h/{SECRET}",
    )  # fmt: skip
    rec.record(Outcome.DELIVERED, event(f"m {SECRET}"), "e1", **fields)  # type: ignore[arg-type]
    rec.put(Outcome.DELIVERED, event(f"m {SECRET}"), "e1", *fields.values())  # type: ignore[arg-type]
    second, first = await history.query(Query())
    assert second.id > first.id
    assert {**second.to_json(), "id": "", "time": ""} == {**first.to_json(), "id": "", "time": ""}
    assert first.latency_ms == 1.5 and first.status_code == 200 and first.attempt == 2
    assert SECRET not in first.detail + first.request + first.message and len(first.detail) == 1024
