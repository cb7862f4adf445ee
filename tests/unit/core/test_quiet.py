"""Matchers at run time: Alertmanager's semantics (anchored RE2, absent metadata is ""), bounded work."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.api.silence import MAX_MATCHER_VALUE, MAX_MATCHERS, Matcher
from notification_controller.core import quiet
from notification_controller.core.quiet import MAX_FIELD, EventFields, compiled

GROUP = "notification.toolkit.fluxcd.io"


def event(**overrides: Any) -> Event:
    raw: dict[str, Any] = {
        "involvedObject": {"kind": "Kustomization", "namespace": "apps", "name": "apps-web"},
        "severity": "error",
        "timestamp": "2026-11-27T10:00:00Z",
        "message": "health check failed",
        "reason": "HealthCheckFailed",
        "reportingController": "kustomize-controller",
        "metadata": {"env": "prod"},
    }
    raw.update(overrides)
    return Event.from_raw(raw)


def matches(*texts: str, ev: Event | None = None) -> bool:
    fields = EventFields(ev or event(), alert="on-call", provider="slack")
    return compiled([Matcher.parse(t) for t in texts])(fields)


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (("kind=Kustomization",), True),
        (("kind=Kustomization", "name=~apps-.*"), True),
        (("name=~apps",), False),  # anchored at both ends, as Alertmanager's
        (("name=~web",), False),
        (("name=~.*web",), True),
        (("namespace!=apps",), False),
        (("reason!~Progressing|ReconciliationSucceeded",), True),
        (("severity=error", "alert=on-call", "provider=slack"), True),
        (("metadata.env=prod",), True),
        (("metadata.region=",), True),  # absent reads as ""
        (("metadata.region!=eu",), True),
        (("metadata.region=~.+",), False),
        ((), True),
    ],
)
def test_alertmanager_semantics(texts: tuple[str, ...], expected: bool) -> None:
    assert matches(*texts) is expected


def test_fields_list_what_a_matcher_may_name() -> None:
    fields = EventFields(event(), alert="a", provider="p")
    assert dict(fields) == {
        "kind": "Kustomization",
        "name": "apps-web",
        "namespace": "apps",
        "reason": "HealthCheckFailed",
        "severity": "error",
        "alert": "a",
        "provider": "p",
        "metadata.env": "prod",
    }


def test_a_hostile_silence_against_a_hostile_event_is_bounded() -> None:
    """32 matchers of 1,024 characters built to make a DFA thrash, against a 1 MB metadata value: the value
    is cut at MAX_FIELD and RE2 is linear, so one evaluation stays far below a second."""
    value = "ab" * 500_000
    ev = event(metadata={"k": value})
    pattern = ("(a|b)*a(a|b){20}" + "x?" * 400)[:MAX_MATCHER_VALUE]
    predicate = compiled([Matcher.parse(f"metadata.k=~{pattern}")] * MAX_MATCHERS)
    start = time.process_time()
    predicate(EventFields(ev))
    assert time.process_time() - start < 1.0
    assert len(EventFields(ev)["metadata.k"]) == MAX_FIELD


@given(
    st.lists(
        st.sampled_from(["apps-web", "apps-", "web", "apps-web-2", "x" * 300, "", "apps-\u00e9"]), max_size=30
    )
)
def test_remembered_answers_are_the_answers_and_stay_bounded(names: list[str]) -> None:
    """The memo of a regex's answers (module docstring) answers as RE2 does, for a matcher and its negation,
    texts over ``SEEN_TEXT`` (never remembered) included; it never holds more than ``SEEN_SIZE``."""
    positive = compiled([Matcher.parse("name=~apps-.*")])
    negative = compiled([Matcher.parse("name!~apps-.*")])
    for name in names * 2:  # the second time from the memo
        fields = EventFields(
            event(involvedObject={"kind": "Kustomization", "namespace": "apps", "name": name})
        )
        expected = name.startswith("apps-")
        assert positive(fields) is expected
        assert negative(fields) is not expected
    assert len(quiet._SEEN) <= quiet.SEEN_SIZE
    assert all(len(text) <= quiet.SEEN_TEXT for _, text in quiet._SEEN)


def test_the_memo_is_cleared_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quiet, "SEEN_SIZE", 8)
    monkeypatch.setattr(quiet, "_SEEN", {})
    predicate = compiled([Matcher.parse("name=~app-[0-9]+-memo")])  # a program of its own
    for i in range(50):
        fields = EventFields(
            event(involvedObject={"kind": "Kustomization", "namespace": "apps", "name": f"app-{i}-memo"})
        )
        assert predicate(fields)
        assert len(quiet._SEEN) <= 8


def test_fields_of_an_alert_read_its_names_when_asked() -> None:
    """``EventFields(..., of=alert)`` (what the silence stage passes) reads the Alert's and its Provider's
    names from the Alert, as the given strings would say them."""
    spec = {"providerRef": {"name": "slack"}, "eventSources": [{"kind": "Kustomization", "name": "*"}]}
    meta = {"name": "on-call", "namespace": "apps"}
    on_call = parse_object(
        {"apiVersion": f"{GROUP}/v1beta3", "kind": "Alert", "metadata": meta, "spec": spec}
    )
    assert isinstance(on_call, Alert)
    fields = EventFields(event(), of=on_call)
    assert fields["alert"] == "on-call" and fields["provider"] == "slack" and fields["name"] == "apps-web"
    for texts in (("alert=on-call", "provider=slack"), ("alert=~on-.*",), ("provider!=teams",)):
        given_names = EventFields(event(), alert="on-call", provider="slack")
        rule = compiled([Matcher.parse(t) for t in texts])
        assert rule(fields) is rule(given_names) is True
