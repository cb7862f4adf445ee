"""Helpers the git-forge and SDK-style provider test modules share (reference §4.1-§4.5).

Conformance side: the sample event's commit (``SAMPLE_SHA``), status id and comment markers, and Go's JSON
encoders (``compact``: ``json.Marshal`` or go-github's ``json.Encoder``). Unit side: ``make_event()`` (a
Kustomization event at commit ``SHA``), ``opts()`` for a Provider with uid ``UID``, ``config_error()`` (the
message of a ``ProviderConfigError`` raised by ``create_notifier``) and an RSA key for GitHub App and
Google service-account tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.registry import create_notifier
from tests.providers.build import PROVIDER_UID, SAMPLE_EVENT, SAMPLE_REVISION
from tests.providers.support import MSG, SUMMARY
from tests.support.capture import CapturedRequest

# --------------------------------------------------------------------------------------------------
# the kit's sample event, as the conformance cases expect it
# --------------------------------------------------------------------------------------------------

SAMPLE_SHA = SAMPLE_REVISION.rsplit(":", 1)[1]
STATUS_ID = "gitrepository/webapp/" + PROVIDER_UID.split("-", 1)[0]  # reference §3.6 step 9 default
DESCRIPTION = "reconciliation succeeded"  # split_camelcase("ReconciliationSucceeded"), lower-cased

CR_EVENT = SAMPLE_EVENT.model_copy(update={"metadata": {**SAMPLE_EVENT.metadata, "change_request": "42"}})
PR_MARKER = f"<!-- flux-pr-comment-key:{PROVIDER_UID}/GitRepository/gitops-system/webapp -->"
MR_MARKER = f"<!-- flux-mr-comment-key:{PROVIDER_UID}/GitRepository/gitops-system/webapp -->"
MARKDOWN = (
    "## Flux Status\n\nℹ️ GitRepository/gitops-system/webapp\n\n"
    f"{MSG}\n\nMetadata:\n* `revision`: {SAMPLE_REVISION}\n* `summary`: {SUMMARY}\n"
)


def compact(value: Any, *, newline: bool = False, escape_html: bool = True) -> bytes:
    """Compact JSON in the literal's key order, ``<>&`` escaped as Go's ``json.Marshal`` does
    (``escape_html=False``: go-github's encoder); ``newline`` for Go's ``json.Encoder`` output."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if escape_html:
        for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
            text = text.replace(ch, esc)
    body = text.encode()
    return body + b"\n" if newline else body


def by_method(requests: list[CapturedRequest], method: str) -> list[CapturedRequest]:
    return [r for r in requests if r.method == method]


def only(requests: list[CapturedRequest], method: str) -> CapturedRequest:
    found = by_method(requests, method)
    assert len(found) == 1, [f"{r.method} {r.raw_path}" for r in requests]
    return found[0]


# --------------------------------------------------------------------------------------------------
# the builders' unit tests
# --------------------------------------------------------------------------------------------------

SHA = "5394cb7f48332b2de7c17dd8b8384bbc84b7e738"
UID = "0c9c2e41-d2f9-4f9b-9c41-bebc1984d67a"


def make_event(**kw: Any) -> Event:
    raw: dict[str, Any] = {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "podinfo",
            "uid": "11111111-2222-3333-4444-555555555555",
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "info",
        "timestamp": "2026-01-02T03:04:05Z",
        "message": "Applied revision: main@sha1:" + SHA,
        "reason": "ReconciliationSucceeded",
        "metadata": {"revision": f"main@sha1:{SHA}"},
        "reportingController": "kustomize-controller",
    }
    raw.update(kw)
    return Event.from_raw(raw)


def opts(ptype: ProviderType, **kw: Any) -> ProviderOptions:
    kw.setdefault("uid", UID)
    for key in ("token", "password"):
        if isinstance(kw.get(key), str):
            kw[key] = SecretValue(kw[key])
    return ProviderOptions(type=ptype, name="p", namespace="flux-system", **kw)


def config_error(ptype: ProviderType, **kw: Any) -> str:
    with pytest.raises(ProviderConfigError) as info:
        create_notifier(opts(ptype, **kw))
    return str(info.value)


def rsa_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


RSA_PEM = rsa_pem()
