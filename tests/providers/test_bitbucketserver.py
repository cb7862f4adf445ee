"""Bitbucket Server / Data Center build statuses: its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.errors import PermanentDeliveryError
from notification_controller.providers.git.bitbucketserver import (
    BitbucketServerNotifier,
    duplicate_bitbucket_server_status,
    parse_bitbucket_server_address,
)
from tests.providers.case import ProviderCase
from tests.providers.git_support import (
    DESCRIPTION,
    SAMPLE_SHA,
    SHA,
    STATUS_ID,
    compact,
    config_error,
    make_event,
    only,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_bitbucketserver(requests: list[CapturedRequest]) -> None:
    key = hashlib.sha1(STATUS_ID.encode(), usedforsecurity=False).hexdigest()
    path = f"/rest/api/latest/projects/PROJ/repos/webapp/commits/{SAMPLE_SHA}/builds"
    listing = only(requests, "GET")
    assert listing.path == path
    assert listing.query == {"key": key}
    create = only(requests, "POST")
    assert create.path == path
    for req in (listing, create):
        assert req.headers["Authorization"] == "Bearer bbs-canary-token"
        assert req.headers["x-atlassian-token"] == "no-check"
        assert req.headers["x-requested-with"] == "XMLHttpRequest"
    body = {
        "description": DESCRIPTION,
        "key": key,
        "name": f"gitrepository/webapp [{DESCRIPTION}]",
        "state": "SUCCESSFUL",
        "url": f"http://{create.headers['Host']}/scm/PROJ/webapp.git",
    }
    assert create.body == compact(body, newline=True), create.body


CASES: list[ProviderCase] = [
    ProviderCase(
        type="bitbucketserver",
        spec={"address": "{url}/scm/PROJ/webapp.git"},
        secret={"token": "bbs-canary-token"},
        prelude={"GET /rest/api/latest/projects/PROJ/repos/webapp/commits/.*/builds": (404, {"errors": []})},
        final="POST /rest/api/latest/projects/PROJ/repos/webapp/commits/.*/builds",
        expect=expect_bitbucketserver,
        canaries=["bbs-canary-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"address": "ssh://git@bb.example.com:7999/proj/repo.git", "token": "t"},
            "could not parse git address: unsupported scheme type in address: ssh. Must be http or https",
        ),
        (
            {"address": "https://bb.example.com/proj/repo.git", "token": "t"},
            "could not parse git address: supplied provider address is not http(s) git clone url",
        ),
        (
            {"address": "https://bb.example.com/scm/proj/sub/repo.git", "token": "t"},
            'could not parse git address: invalid repository id "proj/sub/repo"',
        ),
        (
            {"address": "https://bb.example.com/scm/proj/repo.git", "username": "u"},
            "invalid credentials, expected to be one of username/password or API Token",
        ),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.BITBUCKET_SERVER, **kw)


def test_bitbucket_server_requests() -> None:
    address = "https://bob:pw1234@bb.example.com/context/scm/PROJ/repo.git"
    assert parse_bitbucket_server_address(address) == (
        "https://bb.example.com/context/rest/api/latest/projects/PROJ/repos/repo/commits"
    )
    notifier = BitbucketServerNotifier(
        opts(ProviderType.BITBUCKET_SERVER, address=address, username="u", password="p")
    )
    status = notifier.build_status(make_event())
    assert status is not None
    assert status.name == "kustomization/podinfo [reconciliation succeeded]"
    get = notifier.list_request(status)
    assert get.url == (
        f"https://bb.example.com/context/rest/api/latest/projects/PROJ/repos/repo/commits/{SHA}/builds?key={status.id}"
    )
    assert get.headers["Authorization"] == "Basic " + base64.b64encode(b"u:p").decode()
    create = notifier.create_request(status)
    assert create.body == (
        b'{"description":"reconciliation succeeded","key":"' + status.id.encode() + b'",'
        b'"name":"kustomization/podinfo [reconciliation succeeded]","state":"SUCCESSFUL",'
        b'"url":"https://bb.example.com/context/scm/PROJ/repo.git"}\n'
    )
    assert create.headers["x-atlassian-token"] == "no-check"
    existing = {
        "key": status.id,
        "state": "SUCCESSFUL",
        "description": status.description,
        "name": status.name,
    }
    assert duplicate_bitbucket_server_status(existing, status)
    assert not duplicate_bitbucket_server_status({**existing, "name": "other"}, status)
    token = BitbucketServerNotifier(opts(ProviderType.BITBUCKET_SERVER, address=address, token="bbtok"))
    assert token.list_request(status).headers["Authorization"] == "Bearer bbtok"
    with pytest.raises(
        PermanentDeliveryError, match=r"^couldn't convert to bitbucket server state: bitbucket server"
    ):
        notifier.build_status(make_event(severity="trace"))
    with pytest.raises(
        PermanentDeliveryError, match=r"^could not parse revision: failed to extract commit hash"
    ):
        notifier.build_status(make_event(metadata={"revision": "main/abc"}))
