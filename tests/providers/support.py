"""Helpers the provider test modules share: the kit's sample event as the reference writes it, Go's JSON
encoding, and the unit tests' event and options (the chat, incident and generic types).

Two events, never mixed up: the conformance kit delivers ``tests.providers.build.SAMPLE_EVENT`` (a
GitRepository info event; its values here are ``SAMPLE_*``, ``MSG``, ``SUMMARY``, ``WHEN``), and the
builders' unit tests use ``event()`` (a Kustomization error event, ``OBJ``). Expected bodies are written out
by hand and encoded with ``go_json``, a small Go-compatible encoder local to the tests, never with the code
under test.
"""

from __future__ import annotations

import calendar
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.base import ProviderOptions
from tests.providers.build import SAMPLE_REVISION
from tests.support.capture import CapturedRequest

# --------------------------------------------------------------------------------------------------
# the kit's sample event (reference §2), as the conformance cases expect it
# --------------------------------------------------------------------------------------------------

SAMPLE_OBJ = "gitrepository/webapp.gitops-system"
MSG = "stored artifact for revision 'main@sha1:0123456'\nfetched 3 files"
FIRST_LINE = "stored artifact for revision 'main@sha1:0123456'"
SAMPLE_UID = "a1b2c3d4-0000-4000-8000-00000000beef"
SUMMARY = "Cluster prod-eu"
WHEN = "2026-03-01T10:20:30Z"
WHEN_UNIX = calendar.timegm(datetime(2026, 3, 1, 10, 20, 30, tzinfo=UTC).utctimetuple())

# The sample event as Go's json.Marshal writes it (reference §2), by hand.
SAMPLE_GO_JSON = (
    b'{"involvedObject":{"kind":"GitRepository","namespace":"gitops-system","name":"webapp",'
    b'"uid":"a1b2c3d4-0000-4000-8000-00000000beef","apiVersion":"source.toolkit.fluxcd.io/v1"},'
    b'"severity":"info","timestamp":"2026-03-01T10:20:30Z",'
    b'"message":"stored artifact for revision \'main@sha1:0123456\'\\nfetched 3 files",'
    b'"reason":"ReconciliationSucceeded",'
    b'"metadata":{"revision":"main@sha1:0123456789abcdef0123456789abcdef01234567","summary":"Cluster prod-eu"},'
    b'"reportingController":"source-controller","reportingInstance":"source-controller-7f9c"}'
)


def go_json(value: Any) -> bytes:
    """Compact JSON, UTF-8 kept, ``<>&`` escaped as Go does; dict order is the literal's order."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, esc)
    return text.encode()


def one(requests: list[CapturedRequest]) -> CapturedRequest:
    assert len(requests) == 1, [r.raw_path for r in requests]
    return requests[0]


def assert_json_post(req: CapturedRequest, path: str, body: Any, method: str = "POST") -> None:
    assert req.method == method
    assert req.path == path
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == go_json(body), req.body.decode()


SLACK_FIELDS = [
    {"title": "revision", "value": SAMPLE_REVISION, "short": False},
    {"title": "summary", "value": SUMMARY, "short": False},
]


def slack_body(channel: str, username: str, fallback: str, color: str) -> dict[str, Any]:
    return {
        "channel": channel,
        "username": username,
        "icon_url": "",
        "icon_emoji": "",
        "attachments": [
            {
                "fallback": fallback,
                "color": color,
                "author_name": SAMPLE_OBJ,
                "text": MSG,
                "mrkdwn_in": ["text"],
                "fields": SLACK_FIELDS,
            }
        ],
    }


# --------------------------------------------------------------------------------------------------
# the builders' unit tests
# --------------------------------------------------------------------------------------------------

OBJ = "kustomization/apps.flux-system"


def event(
    severity: str = "error",
    message: str = "Health check failed after 30s",
    metadata: dict[str, str] | None = None,
    reason: str = "HealthCheckFailed",
    timestamp: str | None = "2026-01-02T03:04:05Z",
    controller: str = "kustomize-controller",
) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": "apps",
                "uid": "uid-1",
            },
            "severity": severity,
            "timestamp": timestamp,
            "message": message,
            "reason": reason,
            "metadata": {"revision": "main@sha1:abc", "env": "prod"} if metadata is None else metadata,
            "reportingController": controller,
        }
    )


def opts(ptype: ProviderType, **kw: Any) -> ProviderOptions:
    for key in ("token", "password"):
        if isinstance(kw.get(key), str):
            kw[key] = SecretValue(kw[key])
    return ProviderOptions(type=ptype, name="p", namespace="ns", uid="puid", **kw)


go = go_json  # Go's compact encoding of a literal whose dict order is the expected field order

INVALID_ADDRESSES = ["", "ftp://host/x", "not a url", "https://user:s3cretpw@host:99999/p"]


def construction_error(cls: Any, ptype: ProviderType, **kw: Any) -> str:
    """The message of the ``ProviderConfigError`` that building ``cls`` with these options raises."""
    with pytest.raises(ProviderConfigError) as info:
        cls(opts(ptype, **kw))
    return str(info.value)
