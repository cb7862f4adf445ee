"""The Silence model: its window and state, the matcher syntax of ``--match``, and its checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from notification_controller.api.objects import parse_object
from notification_controller.api.silence import (
    MAX_MATCHER_VALUE,
    MAX_MATCHERS,
    Matcher,
    MatchType,
    Silence,
    SilenceState,
)
from notification_controller.errors import ManifestError

T0 = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)


def silence(**spec: Any) -> Silence:
    raw = {
        "apiVersion": "notification-controller.io/v1alpha1",
        "kind": "Silence",
        "metadata": {"name": "s", "namespace": "apps", "creationTimestamp": T0.isoformat()},
        "spec": {"matchers": [{"name": "kind", "value": "Kustomization"}], **spec},
    }
    obj = parse_object(raw)
    assert isinstance(obj, Silence)
    return obj


def test_duration_counts_from_creation_and_the_state_follows_the_clock() -> None:
    s = silence(duration="2h")
    assert s.window() == (T0, T0 + timedelta(hours=2))
    assert s.state(T0 - timedelta(seconds=1)) is SilenceState.PENDING
    assert s.state(T0) is SilenceState.ACTIVE
    assert s.state(T0 + timedelta(hours=2)) is SilenceState.EXPIRED


def test_starts_at_and_ends_at_are_taken_as_given() -> None:
    starts = T0 + timedelta(days=1)
    s = silence(startsAt=starts.isoformat(), endsAt=(starts + timedelta(minutes=30)).isoformat())
    assert s.window() == (starts, starts + timedelta(minutes=30))
    assert s.state(T0) is SilenceState.PENDING


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, "spec.endsAt or spec.duration is required"),
        ({"duration": "2h", "endsAt": T0.isoformat()}, "exclusive"),
        ({"duration": "0s"}, "longer than 0s"),
        ({"duration": "2h", "matchers": [{"name": "colour", "value": "x"}]}, "is not one of kind, name"),
        ({"duration": "2h", "matchers": [{"name": "name", "matchType": "=~", "value": "("}]}, "not an RE2"),
        (
            {"duration": "2h", "matchers": [{"name": "name", "value": "x" * (MAX_MATCHER_VALUE + 1)}]},
            "longer",
        ),
        ({"duration": "2h", "matchers": [{"name": "name", "value": "x"}] * (MAX_MATCHERS + 1)}, "limit"),
    ],
)
def test_an_invalid_silence_is_refused_with_its_field(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(ManifestError, match=error):
        silence(**spec)


@pytest.mark.parametrize(
    ("text", "name", "op", "value"),
    [
        ("kind=Kustomization", "kind", MatchType.EQUAL, "Kustomization"),
        ("name=~apps-.*", "name", MatchType.REGEX, "apps-.*"),
        ("reason!=Progressing", "reason", MatchType.NOT_EQUAL, "Progressing"),
        ("metadata.env!~'prod|staging'", "metadata.env", MatchType.NOT_REGEX, "prod|staging"),
        ("severity=", "severity", MatchType.EQUAL, ""),
    ],
)
def test_the_cli_matcher_syntax(text: str, name: str, op: MatchType, value: str) -> None:
    matcher = Matcher.parse(text)
    assert (matcher.name, matcher.match_type, matcher.value) == (name, op, value)
    assert Matcher.parse(str(matcher)) == matcher


@pytest.mark.parametrize("text", ["kind", "=x", "colour=red", "name=~("])
def test_a_bad_matcher_says_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError, match=r"matcher|not one of|RE2"):
        Matcher.parse(text)


def test_a_bad_regex_is_reported_quietly_and_decoded(capfd: pytest.CaptureFixture[str]) -> None:
    """RE2's default options log "Error parsing ..." on stderr for every bad expression a tenant writes."""
    errors = Matcher(name="name", value="apps-(", match_type=MatchType.REGEX).validation_errors("m.")
    assert errors == ["m.value is not an RE2 expression: missing ): apps-("]
    assert capfd.readouterr().err == ""
