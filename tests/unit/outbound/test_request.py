"""The pure rules of the outbound path's wire (issue 23 items 3, 13, 15): which headers a request may carry
(``request.wire_headers``), how an unreadable answer is named (``transport.InvalidResponse``)
and which forms of a sent address an echo is masked for (``core.redact.address_forms``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.core.redact import address_forms
from notification_controller.errors import FailureReason
from notification_controller.outbound.request import InvalidHeader, shared_headers, wire_headers
from notification_controller.outbound.retry import classify_transport
from notification_controller.outbound.transport import InvalidResponse


def test_framing_headers_are_dropped_and_the_rest_kept_in_order() -> None:
    headers = {"Content-Type": "a/b", "host": "evil", "Content-Length": "9", "TRANSFER-ENCODING": "chunked"}
    headers |= {"Trailer": "X", "X-Token": "t"}
    assert list(wire_headers(headers).items()) == [("Content-Type", "a/b"), ("X-Token", "t")]


def test_a_mapping_without_anything_to_drop_is_not_copied() -> None:
    shared = shared_headers({"Content-Type": "application/json", "Authorization": "Bearer x"})
    assert wire_headers(shared) is shared


@pytest.mark.parametrize(
    "value", ["a\x00b", "a\rb", "a\nb", "a\x7f", "\x1b[2J", "caf\u00e9", "\u20ac", "\ud800"]
)
def test_control_and_non_ascii_values_are_refused_without_quoting_them(value: str) -> None:
    with pytest.raises(InvalidHeader) as caught:
        wire_headers({"X-Ok": "fine", "X-Bad": value})
    assert caught.value.name == "X-Bad"
    assert value not in str(caught.value)


@pytest.mark.parametrize("name", ["", "X Bad", "X:Bad", "X\x00", "Ünicode", "X\r\nInjected"])
def test_a_name_that_is_not_a_token_is_refused_and_not_quoted(name: str) -> None:
    with pytest.raises(InvalidHeader) as caught:
        wire_headers({name: "v"})
    assert caught.value.name is None
    assert "a header name" in str(caught.value)


@given(st.text(max_size=40))
def test_a_value_is_accepted_exactly_when_it_is_printable_ascii_or_tab(value: str) -> None:
    valid = all(c == "\t" or " " <= c <= "~" for c in value)
    try:
        wire_headers({"X-V": value})
    except InvalidHeader:
        assert not valid
    else:
        assert valid


def test_unreadable_answers_have_one_reason_and_one_text() -> None:
    """An answer the client cannot read: one reason, one failure, one text, and never the server's bytes
    (the hostile servers themselves: ``tests/adversarial/test_transport_parity.py``)."""
    for problem in ("too many header fields", "header field too long"):
        exc = InvalidResponse(problem)
        verdict = classify_transport(exc)
        assert (verdict.retry, verdict.reason, verdict.failure) == (
            True,
            "invalid_response",
            FailureReason.SERVER_ERROR,
        )
        assert exc.detail == f"invalid response: {problem}"


def test_address_forms_cover_a_rewritten_query_and_leave_short_parts_readable() -> None:
    sent = "https://zoom.example/v1/im/chat/webhooks/PathTok3n9f2c71ab?format=full&lang=en&token=QueryTok3n5d8e04"
    forms = address_forms(sent)
    assert {"/v1/im/chat/webhooks/PathTok3n9f2c71ab", "PathTok3n9f2c71ab", "QueryTok3n5d8e04"} <= forms
    assert "v1/im/chat/webhooks/PathTok3n9f2c71ab?format=full&lang=en&token=QueryTok3n5d8e04" in forms
    assert not {"full", "en", "v1", "webhooks", "format=full", "lang"} & forms
    assert "a/b c" in address_forms("http://h/a%2Fb%20c")  # percent-decoded too
    assert address_forms("http://h/") == set() and address_forms("http://[::1/x") == set()


def test_a_shared_mapping_is_checked_once_and_a_bad_one_refused_every_time() -> None:
    """``wire_headers`` remembers a read-only mapping it checked (issue 29: once per Provider, not per
    request): the same answer each time, framing headers still dropped, and a refused one never remembered."""
    good = shared_headers({"Content-Type": "application/json", "Content-Length": "9"})
    first = wire_headers(good)
    assert dict(first) == {"Content-Type": "application/json"}
    assert wire_headers(good) is first
    bad = shared_headers({"X-Bad": "a\r\nInjected: 1"})
    for _ in range(2):
        with pytest.raises(InvalidHeader):
            wire_headers(bad)
