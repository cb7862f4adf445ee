"""OpenTelemetry traces (OTLP/HTTP, reference §4.4): its conformance case and the pure tests of its request
builder.

The notifier needs the matching Alert in the delivery context, which the kit does not pass;
``tests/integration/test_git_providers.py`` delivers it for real.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from notification_controller.api.alert import Alert
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.providers.otel import OTELNotifier, build_trace, trace_id, trace_revision
from tests.providers.case import ProviderCase
from tests.providers.git_support import config_error, make_event, opts

# ---- conformance case ----------------------------------------------------------------------------

CASES: list[ProviderCase] = [
    ProviderCase(
        type="otel",
        spec={"address": "{url}/v1/traces"},
        secret={"headers": "X-Scope: flux\n", "token": "otel-canary-token"},
        http=False,
        canaries=["otel-canary-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "invalid address: empty"),
        ({"address": "ftp://collector/v1/traces"}, "invalid address: must be an absolute http or https URL"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.OTEL, **kw)


def alert(uid: str = "alert-uid-1") -> Alert:
    return Alert.model_validate(
        {
            "metadata": {"name": "webapp", "namespace": "apps", "uid": uid},
            "spec": {
                "providerRef": {"name": "otel"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        }
    )


def test_otel_trace_id_and_revision() -> None:
    """Reference §4.4: trace id = first 16 bytes of SHA-256('<alertUID>:<revision>')."""
    assert trace_id("u", "r") == hashlib.sha256(b"u:r").digest()[:16].hex()
    assert (
        trace_revision({"app-version": "1.2.3", "oci-digest": "sha256:abc", "revision": "x"})
        == "1.2.3@sha256:abc"
    )
    assert trace_revision({"revision": "main@sha1:1"}) == "main@sha1:1"
    assert trace_revision({"app-version": "1"}) == "unknown"


def test_otel_payload() -> None:
    event = make_event(
        severity="error", message="health check failed", metadata={"revision": "r1", "zone": "eu"}
    )
    trace = build_trace(
        event, alert(), span_id=bytes.fromhex("0102030405060708"), end_ns=1_767_323_046 * 10**9
    )
    [resource_spans] = trace.resource_spans
    assert [(a.key, a.value.string_value) for a in resource_spans.resource.attributes] == [
        ("service.instance.id", "alert-uid-1"),
        ("service.name", "apps/webapp"),
        ("service.namespace", "apps"),
    ]
    [scope_spans] = resource_spans.scope_spans
    assert scope_spans.scope.name == "flux:notification-controller"
    [span] = scope_spans.spans
    assert span.trace_id == hashlib.sha256(b"alert-uid-1:r1").digest()[:16]
    assert span.span_id.hex() == "0102030405060708"
    assert span.name == "Kustomization: flux-system/podinfo"
    assert span.start_time_unix_nano == 1_767_323_045 * 10**9
    assert (span.status.code, span.status.message) == (2, "health check failed")
    keys = [a.key for a in span.attributes]
    assert keys == ["object.uid", "object.kind", "object.name", "object.namespace", "revision", "zone"]
    ok = build_trace(make_event(), alert(), span_id=b"\x01" * 8, end_ns=0)
    status = ok.resource_spans[0].scope_spans[0].spans[0].status
    assert (status.code, status.message) == (1, "")


def test_otel_auth_headers_follow_flux_quirks() -> None:
    """Reference §4.1: an Authorization header only when the Secret has headers (and none is set)."""
    url = "https://otel.example.com/v1/traces"
    plain = OTELNotifier(opts(ProviderType.OTEL, address=url, token="tok"))
    assert "Authorization" not in plain.headers
    bearer = OTELNotifier(opts(ProviderType.OTEL, address=url, token="tok", headers={"X-A": "1"}))
    assert bearer.headers["Authorization"] == "Bearer tok"
    basic = OTELNotifier(
        opts(ProviderType.OTEL, address=url, username="u", password="pw", headers={"X-A": "1"})
    )
    assert basic.headers["Authorization"] == "Basic " + base64.b64encode(b"u:pw").decode()
    kept = OTELNotifier(
        opts(ProviderType.OTEL, address=url, token="tok", headers={"Authorization": "Custom x"})
    )
    assert kept.headers["Authorization"] == "Custom x"
    proxied = OTELNotifier(
        opts(
            ProviderType.OTEL, address=url, username="u", token="t/k", proxy=SecretValue("http://proxy:3128")
        )
    )
    assert proxied.proxy == "http://u:t%2Fk@proxy:3128"
    assert not plain.should_send(
        make_event(involvedObject={"kind": "HelmRepository", "name": "n", "namespace": "ns"})
    )
