"""GitHub pull-request comments (reference §4.3), with the comment helpers it shares with GitLab: its
conformance case and the pure tests of its request builder.
"""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.git.githubprcomment import GitHubPullRequestCommentNotifier
from notification_controller.providers.git.gitlabmrcomment import GitLabMergeRequestCommentNotifier
from tests.providers.case import ProviderCase
from tests.providers.git_support import (
    CR_EVENT,
    MARKDOWN,
    PR_MARKER,
    by_method,
    compact,
    config_error,
    only,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_github_pr_comment(requests: list[CapturedRequest]) -> None:
    gets = by_method(requests, "GET")
    assert [r.path for r in gets] == ["/api/v3/user", "/api/v3/repos/fluxcd/webapp/issues/42/comments"]
    assert gets[1].query == {"sort": "created", "direction": "asc", "per_page": "100"}
    create = only(requests, "POST")
    assert create.path == "/api/v3/repos/fluxcd/webapp/issues/42/comments"
    assert create.headers["Authorization"] == "Bearer ghp-canary-comment-token"
    assert create.body == compact({"body": f"{PR_MARKER}\n\n{MARKDOWN}"}, newline=True, escape_html=False)
    assert b"<!-- flux-pr-comment-key:" in create.body


CASES: list[ProviderCase] = [
    ProviderCase(
        type="githubpullrequestcomment",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "ghp-canary-comment-token"},
        event=CR_EVENT,
        prelude={
            "GET /api/v3/user$": (200, {"login": "flux-bot"}),
            "GET /api/v3/repos/fluxcd/webapp/issues/42/comments": (200, []),
        },
        final="POST /api/v3/repos/fluxcd/webapp/issues/42/comments",
        expect=expect_github_pr_comment,
        canaries=["ghp-canary-comment-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://github.com/o/r", "token": "t", "uid": ""}, "provider UID cannot be empty"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITHUB_PR_COMMENT, **kw)


def test_comment_requests() -> None:
    github = GitHubPullRequestCommentNotifier(
        opts(ProviderType.GITHUB_PR_COMMENT, address="https://github.com/o/r", token="t")
    )
    assert github.list_request(7, "tok").url == (
        "https://api.github.com/repos/o/r/issues/7/comments?sort=created&direction=asc&per_page=100"
    )
    assert github.edit_request(7, 99, "b", "tok").url == "https://api.github.com/repos/o/r/issues/comments/99"
    assert github.edit_request(7, 99, "<b>", "tok").body == b'{"body":"<b>"}\n'
    gitlab = GitLabMergeRequestCommentNotifier(
        opts(ProviderType.GITLAB_MR_COMMENT, address="https://gitlab.com/g/p", token="t")
    )
    edit = gitlab.edit_request(7, 99, "<b>", "tok")
    assert (edit.method, edit.url) == (
        "PUT",
        "https://gitlab.com/api/v4/projects/g%2Fp/merge_requests/7/notes/99",
    )
    assert edit.body == b'{"body":"\\u003cb\\u003e"}'
    marker = "<!-- m -->"
    comments = [
        {"id": 1, "body": marker, "author": {"username": "someone"}},
        {"id": 2, "body": "x" + marker, "author": {"username": "bot"}},
        {"id": 3, "body": marker, "author": {"username": "bot"}},
    ]
    assert gitlab.find_comment(comments, "bot", marker) == 2
    assert github.find_comment([{"id": 5, "body": marker, "user": {"login": "bot"}}], "bot", marker) == 5
    assert (
        github.find_comment([{"id": True, "body": marker, "user": {"login": "bot"}}], "bot", marker) is None
    )
