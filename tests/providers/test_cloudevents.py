"""``cloudevents`` (beyond Flux): its conformance cases, the CDEvents mapping table, and the requests parsed by
the CloudEvents SDK (``cloudevents`` 2.x: its current ``core.bindings.http`` parser and the 1.x-compatible
``cloudevents.v1.http.from_http``) in both content modes.

Expected values are written out by hand (types, sources, subjects, purls); the CDEvent bodies are checked
with our ``cdevents`` receiver's validator, the one Flux's receiver contract is written into.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any
from urllib.parse import unquote

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from cloudevents.v1.http import from_http as v1_from_http
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.errors import ProviderConfigError
from notification_controller.outbound import IDEMPOTENCY_KEY, OutboundHTTP, OutboundRequest, RetryPolicy
from notification_controller.providers.base import DeliveryContext, ProviderOptions
from notification_controller.providers.cloudevents import (
    CDEVENT_TYPES,
    MAX_ATTRIBUTE,
    CloudEventsNotifier,
    artifact_id,
    resource_of,
    source_of,
)
from notification_controller.providers.message import Message
from notification_controller.receivers.cdevents import validate_cdevent
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import SAMPLE_GO_JSON, one
from tests.support.capture import CapturedRequest, CaptureServer, Reply

SAMPLE_SOURCE = "/apis/source.toolkit.fluxcd.io/v1/namespaces/gitops-system/gitrepositories/webapp"
WHEN = "2026-03-01T10:20:30Z"

# ---- the SDK's view of a request ---------------------------------------------------------------------


def parsed(headers: Any, body: bytes) -> tuple[dict[str, Any], Any]:
    """(attributes, data) as the CloudEvents SDK reads the request; both of its parsers must agree."""
    plain = {str(k): str(v) for k, v in headers.items()}
    event = from_http_event(HTTPMessage(headers=plain, body=body))
    attributes = dict(event.get_attributes())
    old = v1_from_http(plain, body)
    binary = any(k.lower().startswith("ce-") for k in plain)
    # the 1.x parser predates the binding's percent-decoding of headers (spec v1.0.2 §3.1.3.2): decode here
    assert {k: unquote(v) if binary else v for k, v in old.get_attributes().items()} == {
        k: (v.isoformat().replace("+00:00", "Z") if k == "time" else v) for k, v in attributes.items()
    }
    assert old.get_data() == event.get_data()
    if "time" in attributes:
        attributes["time"] = attributes["time"].isoformat().replace("+00:00", "Z")
    return attributes, event.get_data()


# ---- conformance cases ---------------------------------------------------------------------------------


def expect_binary(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST" and req.path == "/events/CESECRET"
    assert req.headers["Content-Type"] == "application/json"
    assert req.headers["Authorization"] == "Bearer cloudevents-canary-token"
    assert req.body == SAMPLE_GO_JSON  # Flux's event, byte for byte, as the data
    attributes, data = parsed(req.headers, req.body)
    assert attributes.pop("id") == req.headers["ce-id"] and len(req.headers["ce-id"]) == 32
    assert attributes == {
        "specversion": "1.0",
        "type": "io.fluxcd.event.v1.info",
        "source": SAMPLE_SOURCE,
        "subject": SAMPLE_REVISION,
        "time": WHEN,
        "datacontenttype": "application/json",
        "cluster": "prod-eu",
    }
    assert data == json.loads(SAMPLE_GO_JSON)


def expect_structured(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.path == "/events/CESTRUCTURED"
    assert req.headers["Content-Type"] == "application/cloudevents+json; charset=utf-8"
    assert not [name for name in req.headers if name.lower().startswith("ce-")]
    attributes, data = parsed(req.headers, req.body)
    assert len(attributes.pop("id")) == 32
    assert attributes == {
        "specversion": "1.0",
        "type": "io.fluxcd.event.v1.info",
        "source": SAMPLE_SOURCE,
        "subject": SAMPLE_REVISION,
        "time": WHEN,
        "datacontenttype": "application/json",
        "cluster": "prod-eu",
    }
    assert data == json.loads(SAMPLE_GO_JSON)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="cloudevents",
        spec={},
        secret={
            "address": "{url}/events/CESECRET",
            "headers": "Authorization: Bearer cloudevents-canary-token\nce-cluster: prod-eu\n",
        },
        expect=expect_binary,
        canaries=["cloudevents-canary-token", "{url}/events/CESECRET"],
    ),
    ProviderCase(
        type="cloudevents",
        spec={"channel": "structured", "address": "{url}/events/CESTRUCTURED"},
        secret={"headers": "X-Api-Key: cloudevents-canary-key\nce-cluster: prod-eu\n"},
        expect=expect_structured,
        canaries=["cloudevents-canary-key"],
    ),
]

# ---- the builder -----------------------------------------------------------------------------------------


def options(**changes: Any) -> ProviderOptions:
    base = ProviderOptions(
        type=ProviderType.CLOUDEVENTS, name="ce", namespace="flux-system", address="https://sink.example/ce"
    )
    return dataclasses.replace(base, **changes)


def notifier(**changes: Any) -> CloudEventsNotifier:
    return CloudEventsNotifier(options(**changes))


def flux_event(
    kind: str = "HelmRelease",
    api_version: str = "helm.toolkit.fluxcd.io/v2",
    reason: str = "UpgradeSucceeded",
    metadata: dict[str, str] | None = None,
    severity: str = "info",
    timestamp: str | None = WHEN,
    name: str = "podinfo",
    namespace: str = "apps",
    message: str = "Helm upgrade succeeded for release apps/podinfo.v2 with chart podinfo@6.0.1",
) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": kind, "namespace": namespace, "name": name, "apiVersion": api_version},
            "severity": severity,
            "timestamp": timestamp,
            "message": message,
            "reason": reason,
            "metadata": {"revision": "6.0.1", "token": "5c1f2e"} if metadata is None else metadata,
            "reportingController": "helm-controller",
        }
    )


def attributes_of(request: OutboundRequest) -> dict[str, Any]:
    return parsed(request.headers, request.body)[0]


# The mapping table as the docs write it: (kind, apiVersion, reason) → CDEvents type, subject, content.
SERVICE = {"environment": {"id": "apps"}, "artifactId": "pkg:generic/apps/podinfo@6.0.1"}
TABLE = [
    ("HelmRelease", "InstallSucceeded", "dev.cdevents.service.deployed.0.2.0", "service", SERVICE),
    ("HelmRelease", "UpgradeSucceeded", "dev.cdevents.service.upgraded.0.2.0", "service", SERVICE),
    ("HelmRelease", "RollbackSucceeded", "dev.cdevents.service.rolledback.0.2.0", "service", SERVICE),
    ("HelmRelease", "UninstallSucceeded", "dev.cdevents.service.removed.0.2.0", "service", {"environment": {"id": "apps"}}),
    ("Kustomization", "ReconciliationSucceeded", "dev.cdevents.environment.modified.0.2.0", "environment", {"name": "apps"}),
]  # fmt: skip
API = {"HelmRelease": "helm.toolkit.fluxcd.io/v2", "Kustomization": "kustomize.toolkit.fluxcd.io/v1"}


def test_the_table_is_the_module_s_table() -> None:
    assert {(API[k].split("/")[0], k, reason): t for k, reason, t, _, _ in TABLE} == dict(CDEVENT_TYPES)


@pytest.mark.parametrize("mode", ["binary", "structured"])
@pytest.mark.parametrize(("kind", "reason", "ce_type", "subject_type", "content"), TABLE)
def test_each_mapped_outcome_is_a_valid_cdevent(
    mode: str, kind: str, reason: str, ce_type: str, subject_type: str, content: dict[str, Any]
) -> None:
    event = flux_event(kind=kind, api_version=API[kind], reason=reason)
    request = notifier(channel=mode).build_request(event)
    attributes, data = parsed(request.headers, request.body)
    resource = {"HelmRelease": "helmreleases", "Kustomization": "kustomizations"}[kind]
    source = f"/apis/{API[kind]}/namespaces/apps/{resource}/podinfo"
    subject_id = "apps" if subject_type == "environment" else f"{kind.lower()}/podinfo.apps"
    assert (attributes["type"], attributes["source"], attributes["subject"]) == (ce_type, source, subject_id)
    assert attributes["time"] == WHEN
    body = json.dumps(data).encode() if mode == "structured" else request.body
    cdevent = validate_cdevent(body)  # what our cdevents receiver (and Flux's) accepts
    assert cdevent["context"] == {
        "version": "0.4.1",
        "id": attributes["id"],
        "source": source,
        "type": ce_type,
        "timestamp": WHEN,
    }
    assert cdevent["subject"] == {"id": subject_id, "type": subject_type, "content": content}
    assert cdevent["customDataContentType"] == "application/json"
    assert Event.from_raw(cdevent["customData"]) == event  # Flux's event rides along, whole


def test_the_alert_names_the_environment() -> None:
    """``spec.eventMetadata.environment`` on the Alert (event metadata after combination) names it."""
    event = flux_event(metadata={"revision": "6.0.1", "environment": "prod-eu"})
    cdevent = json.loads(notifier().build_request(event).body)
    assert cdevent["subject"]["content"]["environment"] == {"id": "prod-eu"}
    kustomization = flux_event(
        kind="Kustomization",
        api_version=API["Kustomization"],
        reason="ReconciliationSucceeded",
        metadata={"revision": "main@sha1:0123", "environment": "prod-eu"},
    )
    request = notifier().build_request(kustomization)
    assert json.loads(request.body)["subject"] == {
        "id": "prod-eu",
        "type": "environment",
        "content": {"name": "prod-eu"},
    }
    assert request.headers["ce-subject"] == "prod-eu"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"metadata": {"token": "5c1f2e"}}, "no revision: no artifact to name"),
        ({"timestamp": None}, "no timestamp: a CDEvent needs one"),
        ({"reason": "UpgradeFailed", "severity": "error"}, "an outcome CDEvents v0.4 has no type for"),
        ({"api_version": "helm.cattle.io/v1"}, "another group's HelmRelease"),
        ({"kind": "GitRepository", "api_version": "source.toolkit.fluxcd.io/v1"}, "not in the table"),
    ],
)
def test_anything_else_is_the_flux_type_with_flux_s_event(change: dict[str, Any], why: str) -> None:
    event = flux_event(**change)
    request = notifier().build_request(event)
    assert request.headers["ce-type"] == f"io.fluxcd.event.v1.{event.severity}", why
    assert request.body == event.to_go_json()
    assert ("ce-time" in request.headers) == (event.timestamp is not None)


def test_flux_types_per_severity_and_no_other() -> None:
    for severity, suffix in [("info", "info"), ("error", "error"), ("trace", "trace"), ("x" * 300, "info")]:
        request = notifier().build_request(flux_event(reason="Progressing", severity=severity))
        assert request.headers["ce-type"] == f"io.fluxcd.event.v1.{suffix}"


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("HelmRelease", "helmreleases"),
        ("GitRepository", "gitrepositories"),
        ("ImagePolicy", "imagepolicies"),
        ("Bucket", "buckets"),
        ("Endpoints", "endpoints"),
        ("Ingress", "ingresses"),
        ("OCIRepository", "ocirepositories"),
    ],
)
def test_resource_is_kubernetes_guess(kind: str, resource: str) -> None:
    assert resource_of(kind) == resource


def test_source_is_the_object_s_api_path() -> None:
    event = flux_event(kind="ConfigMap", api_version="v1", name="settings", namespace="default")
    assert source_of(event.involved_object) == "/api/v1/namespaces/default/configmaps/settings"
    cluster_scoped = flux_event(kind="Namespace", api_version="v1", name="apps", namespace="")
    assert source_of(cluster_scoped.involved_object) == "/api/v1/namespaces/apps"
    bare = flux_event(kind="Kustomization", api_version="", name="apps", namespace="flux-system")
    assert source_of(bare.involved_object) == "/namespaces/flux-system/kustomizations/apps"


def test_purl_encodes_a_flux_revision() -> None:
    obj = flux_event().involved_object
    assert artifact_id(obj, "main@sha1:0a1b") == "pkg:generic/apps/podinfo@main%40sha1%3A0a1b"


def test_odd_characters_are_percent_encoded_in_headers_and_read_back_whole() -> None:
    """HTTP binding §3.1.3.2: space, '"', '%' and non-ASCII are percent-encoded; the SDK decodes them."""
    revision = 'v1 "ünïcødé" 100%'
    request = notifier().build_request(flux_event(reason="Progressing", metadata={"revision": revision}))
    assert request.headers["ce-subject"] == "v1%20%22%C3%BCn%C3%AFc%C3%B8d%C3%A9%22%20100%25"
    assert attributes_of(request)["subject"] == revision
    structured = notifier(channel="structured").build_request(
        flux_event(reason="Progressing", metadata={"revision": revision})
    )
    assert attributes_of(structured)["subject"] == revision


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_an_extension_attribute_reads_back_as_the_secret_wrote_it(mode: str) -> None:
    request = notifier(channel=mode, headers={"ce-note": 'a %41 "b"'}).build_request(flux_event())
    assert attributes_of(request)["note"] == 'a %41 "b"'  # not 'a A "b"'


def test_extensions_are_labels_not_masked_and_other_headers_are() -> None:
    from notification_controller.outbound import masked

    ce = notifier(headers={"ce-cluster": "apps", "Authorization": "Bearer s3cr3t-token"})
    text = "POST failed for HelmRelease/apps/podinfo with Bearer s3cr3t-token"
    shown = masked(text, ce.masks())
    assert shown.startswith("POST failed for HelmRelease/apps/podinfo with ") and "s3cr3t" not in shown


def test_attributes_are_bounded_and_stay_distinct() -> None:
    """A tenant's 100 kB revision or name cannot make a header a receiver refuses (8 KiB fields)."""
    a = notifier().build_request(flux_event(reason="Progressing", metadata={"revision": "r" * 100_000}))
    b = notifier().build_request(flux_event(reason="Progressing", metadata={"revision": "r" * 99_999}))
    assert len(a.headers["ce-subject"]) == MAX_ATTRIBUTE
    assert a.headers["ce-subject"] != b.headers["ce-subject"]
    long_name = notifier().build_request(flux_event(name="n" * 50_000))
    assert len(long_name.headers["ce-source"]) <= MAX_ATTRIBUTE
    assert len(long_name.headers["ce-subject"]) <= MAX_ATTRIBUTE
    validate_cdevent(long_name.body)
    assert max(len(v) for v in a.headers.values()) < 8190


def test_the_id_is_stable_per_notification_and_distinct_between_them() -> None:
    event = flux_event()
    ce = notifier()
    first = ce.build_request(event, alert="flux-system/a")
    assert ce.build_request(event, alert="flux-system/a").headers["ce-id"] == first.headers["ce-id"]
    assert notifier().build_request(event, alert="flux-system/a") == first  # another replica: the same
    others = {
        ce.build_request(event, alert="flux-system/b").headers["ce-id"],
        notifier(name="other").build_request(event, alert="flux-system/a").headers["ce-id"],
        ce.build_request(flux_event(timestamp="2026-03-01T10:20:31Z"), alert="flux-system/a").headers[
            "ce-id"
        ],
        ce.build_request(event, Message("t", "templated", "info"), alert="flux-system/a").headers["ce-id"],
        ce.build_request(event, body=b'{"x":1}', alert="flux-system/a").headers["ce-id"],
    }
    assert first.headers["ce-id"] not in others and len(others) == 5
    given_id = ce.build_request(event, event_id="0123456789abcdef0123456789abcdef")
    assert given_id.headers["ce-id"] == "0123456789abcdef0123456789abcdef"
    assert json.loads(given_id.body)["context"]["id"] == "0123456789abcdef0123456789abcdef"


async def test_post_uses_the_outbox_notification_id_on_every_attempt() -> None:
    """With a durable store the deliverer sets ``IDEMPOTENCY_KEY`` (the notification id): it is the ce-id,
    through the outbound retries too."""
    async with CaptureServer() as srv:
        srv.script(Reply(503), Reply(503))
        http = OutboundHTTP(RetryPolicy(max_attempts=5, wait_min=0.01, wait_max=0.02))
        await http.start()
        try:
            token = IDEMPOTENCY_KEY.set("fedcba9876543210fedcba9876543210")
            try:
                await notifier(address=f"{srv.url}/ce").post(flux_event(), DeliveryContext(http=http))
            finally:
                IDEMPOTENCY_KEY.reset(token)
            await notifier(address=f"{srv.url}/ce").post(flux_event(), DeliveryContext(http=http))
        finally:
            await http.close()
    ids = [r.headers["ce-id"] for r in srv.requests]
    assert ids[:3] == ["fedcba9876543210fedcba9876543210"] * 3
    assert [r.headers["Idempotency-Key"] for r in srv.requests[:3]] == ids[:3]
    assert ids[3] != ids[0] and len(ids[3]) == 32


def test_a_body_template_replaces_the_data_and_keeps_the_attributes() -> None:
    event = flux_event()
    plain = notifier().build_request(event)
    templated = notifier().build_request(event, body=b'{"release":"podinfo"}')
    assert templated.body == b'{"release":"podinfo"}'
    same = {k: v for k, v in templated.headers.items() if k != "ce-id"}
    assert same == {k: v for k, v in plain.headers.items() if k != "ce-id"}
    structured = notifier(channel="structured").build_request(event, body=b'{"release":"podinfo"}')
    assert json.loads(structured.body)["data"] == {"release": "podinfo"}


def test_a_template_s_text_is_the_message_of_flux_s_event() -> None:
    event = flux_event()
    request = notifier().build_request(event, Message("title", "podinfo is out", "info"))
    assert json.loads(request.body)["customData"]["message"] == "podinfo is out"


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"channel": "avian"}, "invalid spec.channel 'avian': the cloudevents content mode is 'binary'"),
        ({"headers": {"ce-type": "x"}}, "invalid header 'ce-type' in the Secret's headers: the cloudevents"),
        ({"headers": {"Ce-Id": "x"}}, "the cloudevents provider sets 'id'"),
        ({"headers": {"content-type": "text/plain"}}, "invalid header 'Content-Type'"),
        ({"headers": {"ce-Not_Valid": "x"}}, "a CloudEvents extension name is 1 to 20 lower-case letters"),
        ({"headers": {"ce-" + "a" * 21: "x"}}, "a CloudEvents extension name"),
        ({"address": ""}, "invalid address: empty"),
    ],
)
def test_bad_options_name_the_field(changes: dict[str, Any], error: str) -> None:
    with pytest.raises(ProviderConfigError, match=error.replace("(", r"\(")):
        notifier(**changes)


def test_channel_is_case_insensitive_and_binary_by_name() -> None:
    assert notifier(channel=" Structured ").mode == "structured"
    assert notifier(channel="binary").mode == "binary"


@given(
    name=st.text(min_size=1, max_size=300),
    namespace=st.text(min_size=0, max_size=80),
    revision=st.text(max_size=700),
    structured=st.booleans(),
)
def test_any_event_parses_back_through_the_sdk(
    name: str, namespace: str, revision: str, structured: bool
) -> None:
    """Whatever a tenant puts in names and revisions, the SDK reads the attributes we meant (property)."""
    event = Event.model_validate(
        {
            "involvedObject": {"kind": "HelmRelease", "namespace": namespace, "name": name,
                               "apiVersion": "helm.toolkit.fluxcd.io/v2"},
            "severity": "info", "timestamp": WHEN, "reason": "UpgradeSucceeded",
            "metadata": {"revision": revision} if revision else {},
        }
    )  # fmt: skip
    ce = notifier(channel="structured" if structured else "")
    request = ce.build_request(event)
    attributes = attributes_of(request)
    assert attributes["source"] == source_of(event.involved_object)
    if not structured:
        assert all(v.isascii() and len(v) < 8190 for v in request.headers.values())
    if revision:
        data = json.loads(request.body)["data"] if structured else json.loads(request.body)
        validate_cdevent(json.dumps(data).encode())
        assert attributes["subject"] == data["subject"]["id"]


def test_body_template_is_allowed_for_cloudevents_only_among_the_new_types() -> None:
    from notification_controller.api.provider import ProviderSpec

    def errors(ptype: str) -> list[str]:
        return ProviderSpec.model_validate({"type": ptype, "bodyTemplate": "{}"}).validation_errors()

    assert errors("cloudevents") == errors("generic") == []
    assert errors("slack") == [
        "spec.bodyTemplate is only supported for the 'generic', 'generic-hmac' and 'cloudevents' types"
    ]
