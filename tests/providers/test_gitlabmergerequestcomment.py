"""GitLab merge-request comments (reference §4.3): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from tests.providers.case import ProviderCase
from tests.providers.git_support import CR_EVENT, MARKDOWN, MR_MARKER, by_method, compact, config_error, only
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_gitlab_mr_comment(requests: list[CapturedRequest]) -> None:
    gets = by_method(requests, "GET")
    assert [r.raw_path.split("?")[0] for r in gets] == [
        "/api/v4/user",
        "/api/v4/projects/group%2Fwebapp/merge_requests/42/notes",
    ]
    assert gets[1].query == {"sort": "asc", "order_by": "created_at", "per_page": "100"}
    create = only(requests, "POST")
    assert create.raw_path == "/api/v4/projects/group%2Fwebapp/merge_requests/42/notes"
    assert create.headers["PRIVATE-TOKEN"] == "glpat-canary-mr-token"
    assert create.body == compact({"body": f"{MR_MARKER}\n\n{MARKDOWN}"})
    assert b"\\u003c!-- flux-mr-comment-key:" in create.body


CASES: list[ProviderCase] = [
    ProviderCase(
        type="gitlabmergerequestcomment",
        spec={"address": "{url}/group/webapp"},
        secret={"token": "glpat-canary-mr-token"},
        event=CR_EVENT,
        prelude={
            "GET /api/v4/user$": (200, {"username": "flux-bot"}),
            "GET /merge_requests/42/notes": (200, []),
        },
        final="POST /merge_requests/42/notes",
        expect=expect_gitlab_mr_comment,
        canaries=["glpat-canary-mr-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://gitlab.com/g/p"}, "gitlab token cannot be empty"),
        ({"address": "https://gitlab.com/g/p", "token": "t", "uid": ""}, "provider UID cannot be empty"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITLAB_MR_COMMENT, **kw)
