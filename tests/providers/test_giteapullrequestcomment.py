"""Gitea pull-request comments (reference §4.3): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from tests.providers.case import ProviderCase
from tests.providers.git_support import CR_EVENT, MARKDOWN, PR_MARKER, by_method, compact, config_error, only
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_gitea_pr_comment(requests: list[CapturedRequest]) -> None:
    gets = by_method(requests, "GET")
    assert [r.path for r in gets] == ["/api/v1/user", "/api/v1/repos/fluxcd/webapp/issues/42/comments"]
    assert gets[1].query == {"page": "1", "limit": "100"}
    create = only(requests, "POST")
    assert create.path == "/api/v1/repos/fluxcd/webapp/issues/42/comments"
    assert create.headers["Authorization"] == "token gitea-canary-comment-token"
    assert create.body == compact({"body": f"{PR_MARKER}\n\n{MARKDOWN}"})


CASES: list[ProviderCase] = [
    ProviderCase(
        type="giteapullrequestcomment",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "gitea-canary-comment-token"},
        event=CR_EVENT,
        prelude={
            "GET /api/v1/user$": (200, {"login": "flux-bot"}),
            "GET /api/v1/repos/fluxcd/webapp/issues/42/comments": (200, []),
        },
        final="POST /api/v1/repos/fluxcd/webapp/issues/42/comments",
        expect=expect_gitea_pr_comment,
        canaries=["gitea-canary-comment-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://gitea.io/o/r"}, "gitea token cannot be empty"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITEA_PR_COMMENT, **kw)
