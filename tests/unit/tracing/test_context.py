"""W3C ``traceparent`` parsing (Trace Context Level 1, §3.2): the examples of the Recommendation, what it
says a receiver must refuse, and hostile values from an unauthenticated client."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from notification_controller.tracing.context import MAX_HEADER, TraceParent, parse

EXAMPLE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # the Recommendation's example


def test_the_recommendations_examples() -> None:
    parsed = parse(EXAMPLE)
    assert parsed == TraceParent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, sampled=True)
    assert parsed.header() == EXAMPLE
    unsampled = parse("00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00")
    assert unsampled is not None and not unsampled.sampled
    assert unsampled.header().endswith("-00")


def test_what_a_receiver_must_refuse() -> None:
    refused = [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero parent id
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # uppercase
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # version 00 is exactly 55
        "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
        "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",  # not hex
        "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",  # later version: a dash must follow
        "0" * (MAX_HEADER + 1),
    ]
    assert [parse(v) for v in refused] == [None] * len(refused)
    assert parse(None) is None


def test_a_later_version_is_read_by_its_first_four_fields() -> None:
    later = parse("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-holds")
    assert later is not None and later.header() == EXAMPLE  # we answer in the version we speak


@given(st.text(max_size=600))
def test_any_text_parses_or_is_refused_never_raises(text: str) -> None:
    parsed = parse(text)
    if parsed is not None:
        assert parse(parsed.header()) == parsed


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.booleans())
def test_round_trip(trace_id: int, span_id: int, sampled: bool) -> None:
    tp = TraceParent(trace_id, span_id, sampled)
    assert parse(tp.header()) == tp
