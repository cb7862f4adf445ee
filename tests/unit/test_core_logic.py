"""Pure domain logic: duplicate key and limiter (§3.3), metadata (§3.2, §3.6), matching (§3.5),
webhook path (§5.1), durations, redaction (§3.6 step 11, §9), Go JSON."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.alert import Alert
from notification_controller.api.common import ConditionStatus
from notification_controller.api.event import Event, ObjectReference
from notification_controller.core import conditions
from notification_controller.core.clock import ManualClock, go_time_string
from notification_controller.core.duration import format_duration, parse_duration, parse_iso_or_go_duration
from notification_controller.core.gojson import GoStruct, dumps
from notification_controller.core.matching import SourceMatch, compile_alert
from notification_controller.core.metadata import (
    cleanup_metadata,
    combine_metadata,
    exclude_internal_metadata,
)
from notification_controller.core.ratelimit import FixedWindowLimiter, event_key
from notification_controller.core.redact import Redactor, SecretValue, mask_token, redact_url, redact_urls_in
from notification_controller.core.webhook import webhook_path

KS = "kustomize.toolkit.fluxcd.io"


def _event(**kw: object) -> Event:
    obj = {"kind": "Kustomization", "namespace": "flux-system", "name": "apps", "apiVersion": f"{KS}/v1"}
    obj.update(kw.pop("obj", {}))  # type: ignore[call-overload]
    return Event.model_validate({"involvedObject": obj, "severity": "info", "message": "m", **kw})


# ---- §3.3 duplicate key -------------------------------------------------------------------------
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


# ---- §3.2 / §3.4 / §3.6 metadata --------------------------------------------------------------
def test_cleanup_keeps_group_and_event_prefixes_and_drops_checksum_digest() -> None:
    md = {
        f"{KS}/revision": "r",
        f"{KS}/Checksum": "c",
        f"{KS}/digest": "d",
        "event.toolkit.fluxcd.io/deploy": "x",
        "helm.toolkit.fluxcd.io/revision": "other-group",
        "plain": "p",
    }
    assert cleanup_metadata(md, KS) == {f"{KS}/revision": "r", "event.toolkit.fluxcd.io/deploy": "x"}


def test_token_is_excluded_before_forwarding() -> None:
    assert exclude_internal_metadata({f"{KS}/token": "t", f"{KS}/revision": "r"}, KS) == {
        f"{KS}/revision": "r"
    }


def test_combine_precedence_and_conflicts() -> None:
    md = {
        "event.toolkit.fluxcd.io/env": "annot",
        "event.toolkit.fluxcd.io/summary": "annot-sum",
        f"{KS}/env": "ctrl",
    }
    combined = combine_metadata(md, KS, {"env": "alert", "team": "a"}, "alert summary")
    assert combined.metadata == {"env": "ctrl", "summary": "alert summary", "team": "a"}
    assert combined.conflicts == {
        "env": [
            "involved object annotations",
            "Alert object .spec.eventMetadata",
            "involved object controller metadata",
        ],
        "summary": ["involved object annotations", "Alert object .spec.summary"],
    }


# ---- §3.5 matching --------------------------------------------------------------------------------
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


# ---- §5.1 webhook path, durations, Go time string ----------------------------------------------
def test_webhook_path_reference_vectors() -> None:
    assert (
        webhook_path(b"test-token", "test-receiver", "default")
        == "/hook/b5870897382949f6a6c2012394737b779ec2e77e0f01692279430f864810dc1a"
    )
    assert (
        webhook_path(b"", "ci-receiver", "flux-system")
        == "/hook/c00de5d7c1fb8d62ace458f760971809a10ce47493a273a38a860290f411d907"
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("1h30m", 5400), ("750ms", 0.75), ("1.5s", 1.5), ("0", 0), ("10m0s", 600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5d", "m5", "-1s", "1 h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_duration_like_go_and_iso_durations() -> None:
    assert format_duration(600) == "10m0s"
    assert format_duration(3600) == "1h0m0s"
    assert format_duration(0.75) == "750ms"
    assert format_duration(90) == "1m30s"
    assert parse_iso_or_go_duration("PT5S") == 5
    assert parse_iso_or_go_duration("PT1M30S") == 90
    assert parse_iso_or_go_duration("5s") == 5


def test_go_time_string_shape() -> None:
    text = go_time_string(datetime(2026, 8, 7, 16, 12, 44, 123456, tzinfo=UTC), 42.000000001)
    assert text == "2026-08-07 16:12:44.123456000 +0000 UTC m=+42.000000001"


# ---- redaction ------------------------------------------------------------------------------------
def test_mask_token_reproduces_flux_quirk() -> None:
    # §9: the regexp is QuoteMeta(token)+"*", so the last character may repeat or be absent ("ab" too)
    assert mask_token("token abc and abcc and ab and a", "abc") == "token ***** and ***** and ***** and a"
    assert mask_token("nothing", "  ") == "nothing"


def test_secret_value_never_prints() -> None:
    secret = SecretValue("hunter2-canary")
    assert "hunter2" not in str(secret) + repr(secret) + f"{secret}" + str([secret])
    assert secret.reveal() == "hunter2-canary"


def test_redact_url_and_urls_in_text() -> None:
    assert redact_url("https://hooks.slack.com/services/T0/B0/XXXX") == "https://hooks.slack.com/***"
    assert redact_url("https://user:pass@example.com:8443/") == "https://example.com:8443"
    text = redact_urls_in("Cannot connect to host https://u:p@h.example/secret-path?token=1 ssl:default")
    assert "secret-path" not in text and "u:p" not in text and "h.example" in text


@given(st.text(min_size=8, max_size=30).filter(lambda s: s.strip() == s and s), st.text(max_size=60))
def test_redactor_never_leaks_a_known_secret(secret: str, noise: str) -> None:
    # Whole values of 8+ characters (issue 16: "flux" must not wreck "flux-system"); tests/unit/test_redaction.py
    redactor = Redactor([secret])
    if secret not in noise:
        assert secret not in redactor(noise + " " + secret + "\n" + noise)


# ---- conditions, Go JSON ----------------------------------------------------------------------------
def test_condition_transition_time_changes_only_on_change() -> None:
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    conds = conditions.set_condition(
        [], "Ready", ConditionStatus.TRUE, "Succeeded", "ok", generation=1, now=t0
    )
    same = conditions.set_condition(
        conds, "Ready", ConditionStatus.TRUE, "Succeeded", "ok", generation=2, now=t1
    )
    assert same[0].last_transition_time == t0 and same[0].observed_generation == 2
    changed = conditions.set_condition(
        same, "Ready", ConditionStatus.FALSE, "Failed", "no", generation=2, now=t1
    )
    assert changed[0].last_transition_time == t1
    ordered = conditions.set_condition(
        changed, "Reconciling", ConditionStatus.TRUE, "Progressing", "", generation=2, now=t1
    )
    assert [c.type for c in ordered] == ["Reconciling", "Ready"]


def test_is_ready_like_flux_runtime() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ready = conditions.set_condition(
        [], "Ready", ConditionStatus.TRUE, "Succeeded", "", generation=1, now=now
    )
    assert conditions.is_ready(ready)
    reconciling = conditions.set_condition(
        ready, "Reconciling", ConditionStatus.TRUE, "Progressing", "", generation=1, now=now
    )
    assert not conditions.is_ready(reconciling)


def test_go_json_sorts_maps_but_keeps_struct_order() -> None:
    assert dumps(GoStruct(b=1, a={"z": 1, "y": 2})) == b'{"b":1,"a":{"y":2,"z":1}}'


def test_object_reference_group() -> None:
    assert ObjectReference(apiVersion="v1").group == ""
    assert ObjectReference(apiVersion=f"{KS}/v1").group == KS


def test_rfc1123_matches_strftime_in_the_c_locale() -> None:
    from notification_controller.core.ratelimit import rfc1123_utc

    for moment in (
        datetime(2006, 1, 2, 15, 4, 5, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC),
    ):
        assert rfc1123_utc(moment) == moment.strftime("%a, %d %b %Y %H:%M:%S UTC")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_fast_go_json_equals_the_reference_encoder(value: object) -> None:
    """orjson + byte escapes produce exactly the bytes of the straightforward encoder (§9)."""
    from notification_controller.core.gojson import _dumps_stdlib, _sort_maps

    assert dumps(value) == _dumps_stdlib(_sort_maps(value))


def test_transport_errors_in_user_words() -> None:
    """Issue 16: Events say "connection refused", not "ClientConnectorError ... ssl:default"."""
    import errno
    import ssl

    import aiohttp
    from aiohttp.client_reqrep import ConnectionKey

    from notification_controller.outbound.retry import describe_exception

    key = ConnectionKey("h.example", 443, True, True, None, None, None)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert describe_exception(refused) == "connection refused"
    reset = aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer")
    assert describe_exception(reset) == "connection reset by peer"
    assert describe_exception(TimeoutError()) == "timed out"
    assert describe_exception(aiohttp.ServerDisconnectedError()) == "server closed the connection"
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cert.verify_message = "self-signed certificate"
    assert describe_exception(cert) == "TLS certificate verification failed: self-signed certificate"
    for exc in (refused, reset, cert):
        assert type(exc).__name__ not in describe_exception(exc)
        assert "ssl:default" not in describe_exception(exc)
