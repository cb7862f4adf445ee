"""``core.matching``: an Alert's sources, severity, labels and inclusion/exclusion regexes (reference §3.5)."""

from __future__ import annotations

import pytest

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.core.matching import SourceMatch, compile_alert

KS = "kustomize.toolkit.fluxcd.io"


def _event(**kw: object) -> Event:
    obj = {"kind": "Kustomization", "namespace": "flux-system", "name": "apps", "apiVersion": f"{KS}/v1"}
    obj.update(kw.pop("obj", {}))  # type: ignore[call-overload]
    return Event.model_validate({"involvedObject": obj, "severity": "info", "message": "m", **kw})


def _alert(spec: dict[str, object], ns: str = "flux-system") -> Alert:
    return Alert.model_validate(
        {"metadata": {"name": "a", "namespace": ns}, "spec": {"providerRef": {"name": "p"}, **spec}}
    )


def test_source_namespace_defaults_to_alert_namespace_and_kind_is_exact() -> None:
    compiled = compile_alert(_alert({"eventSources": [{"kind": "Kustomization", "name": "*"}]}))
    assert compiled.match_sources(_event()) is SourceMatch.YES
    assert compiled.match_sources(_event(obj={"namespace": "other"})) is SourceMatch.NO
    assert compiled.match_sources(_event(obj={"kind": "kustomization"})) is SourceMatch.NO


def test_named_source_and_cross_namespace_source() -> None:
    compiled = compile_alert(
        _alert(
            {"eventSources": [{"kind": "Kustomization", "name": "apps", "namespace": "prod"}]}, ns="alerts"
        )
    )
    assert compiled.match_sources(_event(obj={"namespace": "prod"})) is SourceMatch.YES
    assert compiled.match_sources(_event(obj={"namespace": "prod", "name": "other"})) is SourceMatch.NO
    assert compiled.index_keys() == {("prod", "Kustomization", "apps")}


@pytest.mark.parametrize(
    ("alert_severity", "event_severity", "matches"),
    [
        ("info", "info", True),
        ("info", "error", True),
        ("info", "trace", True),
        ("error", "info", False),
        ("error", "error", True),
    ],
)
def test_severity(alert_severity: str, event_severity: str, matches: bool) -> None:
    compiled = compile_alert(
        _alert({"eventSeverity": alert_severity, "eventSources": [{"kind": "Kustomization", "name": "*"}]})
    )
    assert (compiled.match_sources(_event(severity=event_severity)) is SourceMatch.YES) is matches


def test_match_labels_need_the_object_labels_even_for_named_sources() -> None:
    compiled = compile_alert(
        _alert({"eventSources": [{"kind": "Kustomization", "name": "apps", "matchLabels": {"team": "a"}}]})
    )
    event = _event()
    assert compiled.match_sources(event) is SourceMatch.NEEDS_LABELS
    assert compiled.match_labels(event, {"team": "a", "x": "y"})
    assert not compiled.match_labels(event, {"team": "b"})


def test_inclusion_exclusion_with_re2_and_invalid_regexes() -> None:
    compiled = compile_alert(
        _alert(
            {
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
                "inclusionList": [".*succeeded.*", "(unclosed"],
                "exclusionList": ["^skip", "(?<=lookbehind)"],
            }
        )
    )
    assert compiled.invalid_inclusion == ("(unclosed",)
    assert compiled.invalid_exclusion == ("(?<=lookbehind)",)
    assert compiled.message_allowed("apply succeeded")
    assert not compiled.message_allowed("apply failed")
    assert not compiled.message_allowed("skip: apply succeeded")


def test_catastrophic_regex_is_linear_time() -> None:
    """Checklist C9: (a+)+$ against a long non-matching message returns (RE2 has no backtracking)."""
    compiled = compile_alert(
        _alert({"eventSources": [{"kind": "Kustomization", "name": "*"}], "inclusionList": ["(a+)+$"]})
    )
    assert not compiled.message_allowed("a" * 50_000 + "!")
