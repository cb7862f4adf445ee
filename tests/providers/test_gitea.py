"""Gitea commit statuses: its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.git.gitea import GiteaNotifier, duplicate_gitea_status
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


def expect_gitea(requests: list[CapturedRequest]) -> None:
    listing = only(requests, "GET")
    assert listing.path == f"/api/v1/repos/fluxcd/webapp/commits/{SAMPLE_SHA}/statuses"
    assert listing.query == {"page": "0", "limit": "50"}
    assert listing.headers["Authorization"] == "token gitea-canary-token"
    create = only(requests, "POST")
    assert create.path == f"/api/v1/repos/fluxcd/webapp/statuses/{SAMPLE_SHA}"
    body = {"state": "success", "target_url": "", "description": DESCRIPTION, "context": STATUS_ID}
    assert create.body == compact(body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="gitea",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "gitea-canary-token"},
        prelude={"GET /api/v1/repos/fluxcd/webapp/commits/.*/statuses": (200, [])},
        final="POST /api/v1/repos/fluxcd/webapp/statuses/",
        expect=expect_gitea,
        canaries=["gitea-canary-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://gitea.io/o/r"}, "gitea token cannot be empty"),
        ({"address": "https://gitea.io/o/r/x", "token": "t"}, 'invalid repository id "o/r/x"'),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITEA, **kw)


def test_gitea_posts_pending_for_progressing() -> None:
    notifier = GiteaNotifier(opts(ProviderType.GITEA, address="https://gitea.example.com/o/r", token="gt"))
    status = notifier.build_status(make_event(reason="Progressing"))
    assert status is not None and status.state == "pending"
    assert notifier.state(make_event(severity="error")) == "failure"
    create = notifier.create_request(status)
    assert create.url == f"https://gitea.example.com/api/v1/repos/o/r/statuses/{SHA}"
    assert create.headers["Authorization"] == "token gt"
    assert create.body == (
        b'{"state":"pending","target_url":"","description":"progressing","context":"kustomization/podinfo/0c9c2e41"}'
    )
    assert notifier.list_request(status).url.endswith(f"/commits/{SHA}/statuses?page=0&limit=50")
    assert duplicate_gitea_status(
        [{"context": status.id, "status": "pending", "description": "progressing"}], status
    )
    assert not duplicate_gitea_status(
        [{"context": status.id, "status": "success", "description": "progressing"}], status
    )
