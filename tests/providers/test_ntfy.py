"""ntfy (beyond Flux: JSON publish to the server root): its conformance cases and the pure tests of its
request builder."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.provider import ProviderType
from notification_controller.outbound import masked
from notification_controller.providers.message import Message
from notification_controller.providers.ntfy import MESSAGE_LIMIT, NtfyNotifier, cut_bytes, ntfy_target
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    SAMPLE_OBJ,
    SUMMARY,
    assert_json_post,
    construction_error,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance cases ---------------------------------------------------------------------------

TOPIC = "flux-alerts-NTFYCANARY"


def sample_body(topic: str) -> dict[str, Any]:
    return {
        "topic": topic,
        "title": SAMPLE_OBJ,
        "message": f"{MSG}\n\nrevision: {SAMPLE_REVISION}\nsummary: {SUMMARY}",
        "priority": 3,
        "tags": ["information_source"],
    }


def expect_ntfy_token(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer tk_ntfycanarytoken0123456789"
    assert_json_post(req, "/", sample_body(TOPIC))


def expect_ntfy_basic(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    creds = base64.b64encode(b"flux:ntfy-canary-password").decode()
    assert req.headers["Authorization"] == f"Basic {creds}"
    assert_json_post(req, "/ntfy/", sample_body("deployments"))


CASES: list[ProviderCase] = [
    ProviderCase(  # the topic in the address (a Secret: on ntfy.sh the topic is the password)
        type="ntfy",
        spec={},
        secret={"address": "{url}/" + TOPIC, "token": "tk_ntfycanarytoken0123456789"},
        expect=expect_ntfy_token,
        canaries=["tk_ntfycanarytoken0123456789", TOPIC],
    ),
    ProviderCase(  # a server under a path prefix, the topic in spec.channel, basic auth
        type="ntfy",
        spec={"address": "{url}/ntfy", "channel": "deployments"},
        secret={"username": "flux", "password": "ntfy-canary-password"},
        expect=expect_ntfy_basic,
        canaries=["ntfy-canary-password"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "channel", "url", "topic"),
    [
        ("https://ntfy.sh/flux", "", "https://ntfy.sh/", "flux"),
        ("https://ntfy.sh/flux/", "", "https://ntfy.sh/", "flux"),
        ("https://ntfy.sh", "flux", "https://ntfy.sh/", "flux"),
        ("https://h.example/ntfy/", "a_b-9", "https://h.example/ntfy/", "a_b-9"),
        ("https://h.example/ntfy/flux?x=1#f", "", "https://h.example/ntfy/", "flux"),
    ],
)
def test_the_topic_is_the_last_path_segment_or_the_channel(
    address: str, channel: str, url: str, topic: str
) -> None:
    assert ntfy_target(address, channel) == (url, topic)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://ntfy.sh"}, "empty ntfy topic"),
        ({"address": "https://ntfy.sh/"}, "empty ntfy topic"),
        ({"address": "https://ntfy.sh/a.b"}, "invalid ntfy topic"),
        ({"address": "https://ntfy.sh", "channel": "x" * 65}, "invalid ntfy topic"),
        ({"address": "https://ntfy.sh", "channel": "../admin"}, "invalid ntfy topic"),
        ({"address": "ftp://ntfy.sh/x"}, "invalid ntfy server URL"),
    ],
)
def test_bad_settings_name_the_field(kw: dict[str, Any], message: str) -> None:
    assert construction_error(NtfyNotifier, ProviderType.NTFY, **kw).startswith(message)


@pytest.mark.parametrize(
    ("severity", "priority", "tags"), [("error", 4, ["rotating_light"]), ("trace", 2, None)]
)
def test_priority_and_tags_follow_severity(severity: str, priority: int, tags: list[str] | None) -> None:
    n = NtfyNotifier(opts(ProviderType.NTFY, address="https://ntfy.sh/flux"))
    req = n.build_request(event(severity=severity, metadata={}))
    body = json.loads(req.body)
    assert (body["priority"], body.get("tags")) == (priority, tags)
    assert "Authorization" not in req.headers  # an open topic: no credential sent
    assert req.url == "https://ntfy.sh/"


def test_a_template_message_is_what_is_sent() -> None:
    n = NtfyNotifier(opts(ProviderType.NTFY, address="https://ntfy.sh/flux", token="tk_x"))
    message = Message("Déploiement 🚀", "apps failed", "error", (("cluster", "prod"),))
    req = n.build_request(event(), message)
    assert req.body == go(
        {
            "topic": "flux",
            "title": "Déploiement 🚀",
            "message": "apps failed\n\ncluster: prod",
            "priority": 4,
            "tags": ["rotating_light"],
        }
    )
    assert req.headers["Authorization"] == "Bearer tk_x"


def test_a_long_message_is_cut_to_ntfys_limit_in_bytes() -> None:
    n = NtfyNotifier(opts(ProviderType.NTFY, address="https://ntfy.sh/flux"))
    body = json.loads(n.build_request(event(message="é" * 5000, metadata={})).body)
    assert len(body["message"].encode()) <= MESSAGE_LIMIT
    assert body["message"].endswith("…")


@given(st.text(max_size=300), st.integers(min_value=4, max_value=200))
def test_cut_bytes_never_splits_a_character(text: str, limit: int) -> None:
    out = cut_bytes(text, limit)
    if len(text.encode()) <= limit:
        assert out == text
    else:
        assert len(out.encode()) <= limit
        assert out.endswith("…") and text.startswith(out[:-1])


def test_a_long_topic_is_masked_a_short_one_is_a_word() -> None:
    long = NtfyNotifier(opts(ProviderType.NTFY, address="https://ntfy.sh", channel="secret-topic-4f9a2c"))
    assert "secret-topic-4f9a2c" not in masked("POST failed: topic secret-topic-4f9a2c", long.masks())
    short = NtfyNotifier(opts(ProviderType.NTFY, address="https://ntfy.sh", channel="alerts"))
    assert masked("alerts refused", short.masks()) == "alerts refused"
