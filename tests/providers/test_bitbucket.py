"""Bitbucket Cloud build statuses: its conformance case and the pure tests of its request builder.

``bitbucket`` talks to Bitbucket Cloud's API whatever the address; the case points it at the capture
server with ``BITBUCKET_API_BASE_URL``, the environment variable Flux's Bitbucket client honours.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.git.bitbucket import BitbucketNotifier, duplicate_bitbucket_status
from notification_controller.providers.git.forges import sha1_hex
from tests.providers.case import ProviderCase
from tests.providers.git_support import (
    DESCRIPTION,
    SAMPLE_SHA,
    SHA,
    STATUS_ID,
    config_error,
    make_event,
    only,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_bitbucket(requests: list[CapturedRequest]) -> None:
    key = hashlib.sha1(STATUS_ID.encode(), usedforsecurity=False).hexdigest()
    path = f"/2.0/repositories/fluxcd/webapp/commit/{SAMPLE_SHA}/statuses/build"
    basic = "Basic " + base64.b64encode(b"flux-bot:bitbucket-canary-app-password").decode()
    listing = only(requests, "GET")
    assert listing.path == f"{path}/{key}"
    create = only(requests, "POST")
    assert create.path == path
    for req in (listing, create):
        assert req.headers["Authorization"] == basic
    body = {
        "key": key,
        "url": "https://bitbucket.org",
        "state": "SUCCESSFUL",
        "name": "gitrepository/webapp",
        "description": DESCRIPTION,
    }
    assert create.json() == body, create.body


CASES: list[ProviderCase] = [
    ProviderCase(
        type="bitbucket",
        spec={"address": "https://bitbucket.org/fluxcd/webapp"},
        secret={"token": "flux-bot:bitbucket-canary-app-password"},
        env={"BITBUCKET_API_BASE_URL": "{url}/2.0"},
        prelude={"GET /2.0/repositories/fluxcd/webapp/commit/.*/statuses/build/": (404, {"type": "error"})},
        final="POST /2.0/repositories/fluxcd/webapp/commit/.*/statuses/build$",
        expect=expect_bitbucket,
        canaries=["bitbucket-canary-app-password"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://bitbucket.org/o/r"}, "bitbucket token cannot be empty"),
        (
            {"address": "https://bitbucket.org/o/r", "token": "nocolon"},
            "invalid token format, expected to be <user>:<password>",
        ),
        (
            {"address": "https://bitbucket.org/o/r", "token": "a:b:c"},
            "invalid token format, expected to be <user>:<password>",
        ),
        ({"address": "https://bitbucket.org/o", "token": "u:p"}, 'invalid repository id "o"'),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.BITBUCKET, **kw)


def test_bitbucket_requests() -> None:
    notifier = BitbucketNotifier(
        opts(ProviderType.BITBUCKET, address="git@bitbucket.org:team/repo.git", token="u:p")
    )
    assert notifier.api_base == "https://api.bitbucket.org/2.0"
    status = notifier.build_status(make_event())
    assert status is not None
    assert (
        status.id
        == hashlib.sha1(b"kustomization/podinfo/0c9c2e41", usedforsecurity=False).hexdigest()
        == sha1_hex("kustomization/podinfo/0c9c2e41")
    )
    get = notifier.list_request(status)
    assert (
        get.url
        == f"https://api.bitbucket.org/2.0/repositories/team/repo/commit/{SHA}/statuses/build/{status.id}"
    )
    assert get.headers["Authorization"] == "Basic " + base64.b64encode(b"u:p").decode()
    create = notifier.create_request(status)
    assert create.url == f"https://api.bitbucket.org/2.0/repositories/team/repo/commit/{SHA}/statuses/build"
    assert json.loads(create.body) == {
        "key": status.id,
        "url": "https://bitbucket.org",
        "state": "SUCCESSFUL",
        "name": "kustomization/podinfo",
        "description": "reconciliation succeeded",
    }
    assert list(json.loads(create.body)) == ["key", "url", "state", "name", "description"]
    assert duplicate_bitbucket_status(
        {"state": "SUCCESSFUL", "description": "reconciliation succeeded"}, status
    )
    assert not duplicate_bitbucket_status(None, status)


def test_bitbucket_api_url_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITBUCKET_API_BASE_URL", "http://127.0.0.1:1234/2.0/")
    notifier = BitbucketNotifier(
        opts(ProviderType.BITBUCKET, address="https://bitbucket.org/t/r", token="u:p")
    )
    assert notifier.api_base == "http://127.0.0.1:1234/2.0"
    monkeypatch.setenv("BITBUCKET_API_BASE_URL", "file:///etc/passwd")
    assert "BITBUCKET_API_BASE_URL" in config_error(
        ProviderType.BITBUCKET, address="https://bitbucket.org/t/r", token="u:p"
    )
