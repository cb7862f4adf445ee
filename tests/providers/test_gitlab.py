"""GitLab commit statuses: its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.git.base import CommitStatus
from notification_controller.providers.git.gitlab import GitLabNotifier, duplicate_gitlab_status
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


def expect_gitlab(requests: list[CapturedRequest]) -> None:
    listing = only(requests, "GET")
    assert listing.raw_path.startswith(
        f"/api/v4/projects/group%2Fsub%2Fwebapp/repository/commits/{SAMPLE_SHA}/statuses?"
    )
    assert listing.query == {"name": STATUS_ID}
    assert listing.headers["PRIVATE-TOKEN"] == "glpat-canary-gitlab-token"
    create = only(requests, "POST")
    assert create.raw_path == f"/api/v4/projects/group%2Fsub%2Fwebapp/statuses/{SAMPLE_SHA}"
    assert create.headers["PRIVATE-TOKEN"] == "glpat-canary-gitlab-token"
    assert create.body == compact({"state": "success", "name": STATUS_ID, "description": DESCRIPTION})


CASES: list[ProviderCase] = [
    ProviderCase(
        type="gitlab",
        spec={"address": "{url}/group/sub/webapp.git"},
        secret={"token": "glpat-canary-gitlab-token"},
        prelude={"GET /repository/commits/.*/statuses": (200, [])},
        final="POST /api/v4/projects/.*/statuses/",
        expect=expect_gitlab,
        canaries=["glpat-canary-gitlab-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://gitlab.com/g/p"}, "gitlab token cannot be empty"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITLAB, **kw)


def test_git_addresses_must_be_reachable_over_http() -> None:
    assert "invalid repository address" in config_error(
        ProviderType.GITLAB, address="/local/group/proj", token="t"
    )


def test_gitlab_requests_and_duplicates() -> None:
    notifier = GitLabNotifier(
        opts(ProviderType.GITLAB, address="https://gitlab.com/group/sub/proj.git", token="glpat")
    )
    status = notifier.build_status(make_event(severity="error", reason="HealthCheckFailed"))
    assert status == CommitStatus(
        SHA, "failed", "health check failed", "kustomization/podinfo/0c9c2e41", "kustomization/podinfo"
    )
    listing = notifier.list_request(status)
    assert listing.url == (
        f"https://gitlab.com/api/v4/projects/group%2Fsub%2Fproj/repository/commits/{SHA}/statuses"
        "?name=kustomization%2Fpodinfo%2F0c9c2e41"
    )
    assert listing.headers["PRIVATE-TOKEN"] == "glpat"
    create = notifier.create_request(status)
    assert create.url == f"https://gitlab.com/api/v4/projects/group%2Fsub%2Fproj/statuses/{SHA}"
    assert create.body == (
        b'{"state":"failed","name":"kustomization/podinfo/0c9c2e41","description":"health check failed"}'
    )
    same = {"sha": SHA, "status": "failed", "description": "health check failed", "name": status.id}
    assert duplicate_gitlab_status([{"sha": "x"}, same], status)
    assert not duplicate_gitlab_status([{**same, "status": "success"}], status)
