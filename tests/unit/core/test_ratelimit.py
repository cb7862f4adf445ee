"""``core.ratelimit``: the duplicate key of an event and the fixed-window limiter (reference §3.3)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from unittest.mock import ANY

import pytest

from notification_controller.api.event import Event
from notification_controller.core.ratelimit import FixedWindowLimiter, event_key
from notification_controller.lib.clock import ManualClock

KS = "kustomize.toolkit.fluxcd.io"


def _event(**kw: object) -> Event:
    obj = {"kind": "Kustomization", "namespace": "flux-system", "name": "apps", "apiVersion": f"{KS}/v1"}
    obj.update(kw.pop("obj", {}))  # type: ignore[call-overload]
    return Event.model_validate({"involvedObject": obj, "severity": "info", "message": "m", **kw})


def test_event_key_formula() -> None:
    event = _event(metadata={f"{KS}/revision": "main@sha1:1", f"{KS}/token": "t", f"{KS}/other": "x"})
    expected = hashlib.sha256(
        b"event/name=apps/namespace=flux-system/kind=Kustomization/message=m/revision=main@sha1:1/token=t"
    ).hexdigest()
    assert event_key(event) == expected


def test_event_key_ignores_severity_reason_timestamp_controller() -> None:
    a = _event(severity="info", reason="A", reportingController="x")
    b = _event(severity="error", reason="B", reportingController="y", timestamp="2022-01-01T00:00:00Z")
    assert event_key(a) == event_key(b)


def test_event_key_changes_with_revision_origin_revision_token_message() -> None:
    base = event_key(_event())
    assert event_key(_event(metadata={f"{KS}/revision": "r"})) != base
    assert event_key(_event(metadata={f"{KS}/originRevision": "r"})) != base
    assert event_key(_event(metadata={f"{KS}/token": "r"})) != base
    assert event_key(_event(message="other")) != base
    # a key of another group does not count
    assert event_key(_event(metadata={"helm.toolkit.fluxcd.io/revision": "r"})) == base


def test_limiter_one_per_fixed_window_aligned_to_first_request() -> None:
    clock = ManualClock()
    limiter = FixedWindowLimiter(300, clock)
    first = limiter.take("k")
    assert first.allowed and first.remaining == 0
    clock.advance(100)
    second = limiter.take("k")
    assert not second.allowed
    assert second.headers()["Retry-After"] == second.headers()["X-RateLimit-Reset"]
    assert (second.reset - clock.now()).total_seconds() == pytest.approx(200)
    clock.advance(200)  # exactly the next window
    assert limiter.take("k").allowed
    assert limiter.take("other").allowed


def test_limiter_headers_format() -> None:
    clock = ManualClock(datetime(2006, 1, 2, 15, 4, 5, tzinfo=UTC))
    headers = FixedWindowLimiter(60, clock).take("k").headers()
    assert headers == {
        "X-RateLimit-Limit": "1",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "Mon, 02 Jan 2006 15:05:05 UTC",
    }


def test_limiter_memory_is_bounded_by_sweeping_idle_keys() -> None:
    """Checklist C5: 100 000 distinct keys do not stay in memory after 2× the interval."""
    clock = ManualClock()
    limiter = FixedWindowLimiter(10, clock)
    for i in range(100_000):
        limiter.take(f"k{i}")
    assert len(limiter) == 100_000
    clock.advance(21)
    limiter.take("fresh")  # triggers the periodic sweep
    assert len(limiter) == 1


def test_rfc1123_matches_strftime_in_the_c_locale() -> None:
    from notification_controller.core.ratelimit import rfc1123_utc

    for moment in (
        datetime(2006, 1, 2, 15, 4, 5, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC),
    ):
        assert rfc1123_utc(moment) == moment.strftime("%a, %d %b %Y %H:%M:%S UTC")


def test_an_admitted_event_s_headers_are_shared_and_read_only() -> None:
    """Every event admitted in the same second answers with one read-only header map (issue 29: the 202's
    ``X-RateLimit-*`` built and encoded once); a refused one gets its own, with ``Retry-After``."""
    clock = ManualClock()
    limiter = FixedWindowLimiter(10.0, clock)
    first, second = limiter.take("a").headers(), limiter.take("b").headers()
    assert first is second
    assert dict(first) == {"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": ANY}
    with pytest.raises(TypeError):
        first["X-RateLimit-Remaining"] = "5"  # type: ignore[index]
    refused = limiter.take("a").headers()
    assert refused is not first and refused["Retry-After"] == refused["X-RateLimit-Reset"]
