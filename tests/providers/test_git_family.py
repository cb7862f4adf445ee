"""What the git-forge family shares (reference §4.0, §4.2, §4.3): repository addresses, revisions,
the markdown post and comment markers, ``change_request``, the commit-status id and the token/password
fallback (``providers/git/base.py``, ``changerequest.py``); and a property over every git and SDK-style
type: any configuration builds or fails with a ``ProviderConfigError``, never a library exception.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.provider import ProviderType
from notification_controller.errors import FailureReason, PermanentDeliveryError, ProviderConfigError
from notification_controller.providers.git.base import (
    MAX_DESCRIPTION,
    change_request_number,
    commit_status_id,
    format_markdown_post,
    parse_git_address,
    parse_revision,
    status_description,
)
from notification_controller.providers.git.changerequest import comment_body, comment_marker
from notification_controller.providers.git.github import GitHubNotifier
from notification_controller.providers.git.gitlab import GitLabNotifier
from notification_controller.providers.message import Message
from notification_controller.providers.registry import create_notifier
from tests.providers.git_support import SHA, UID, make_event, opts


@pytest.mark.parametrize(
    ("address", "host", "repo_id"),
    [
        ("https://github.com/fluxcd/flux2", "https://github.com", "fluxcd/flux2"),
        ("https://github.com/fluxcd/flux2.git", "https://github.com", "fluxcd/flux2"),
        ("http://127.0.0.1:8080/owner/repo", "http://127.0.0.1:8080", "owner/repo"),
        ("ssh://git@github.com/fluxcd/flux2", "https://github.com", "fluxcd/flux2"),
        ("ssh://git@gitlab.example.com:2222/a/b/c.git", "https://gitlab.example.com:2222", "a/b/c"),
        ("git@github.com:fluxcd/flux2.git", "https://github.com", "fluxcd/flux2"),
        ("github.com:fluxcd/flux2", "https://github.com", "fluxcd/flux2"),
        ("https://user:s3cret@gitlab.com/group/sub/proj", "https://gitlab.com", "group/sub/proj"),
        ("https://dev.azure.com/org/proj/_git/repo", "https://dev.azure.com", "org/proj/_git/repo"),
    ],
)
def test_parse_git_address(address: str, host: str, repo_id: str) -> None:
    """Reference §4.2: https, ssh:// and scp-like addresses; ssh maps to https; userinfo dropped."""
    parsed = parse_git_address(address)
    assert (parsed.host, parsed.id) == (host, repo_id)
    assert "s3cret" not in parsed.host


def test_parse_git_address_local_path_is_not_a_web_host() -> None:
    parsed = parse_git_address("/var/repos/app")
    assert parsed.scheme == "file"
    assert parsed.netloc == ""


@given(st.text(max_size=200))
def test_parse_git_address_never_raises(text: str) -> None:
    parsed = parse_git_address(text)
    assert not parsed.id.startswith("/")


@pytest.mark.parametrize(
    "rev",
    [
        f"main@sha1:{SHA}",
        f"sha1:{SHA}",
        f"main/{SHA}",
        SHA,
        f"refs/heads/feat/x@sha1:{SHA}",
        f"v1.0.0@sha1:{SHA}",
    ],
)
def test_parse_revision(rev: str) -> None:
    """Reference §4.0 parseRevision: hash after the last ':', legacy <branch>/<sha>, or the whole string."""
    assert parse_revision(rev) == SHA


@pytest.mark.parametrize(
    "rev", ["main/abc", "main@sha1:abc", "sha256:" + "a" * 64, "", "main@sha1:" + SHA + "0"]
)
def test_parse_revision_rejects_non_sha1(rev: str) -> None:
    with pytest.raises(PermanentDeliveryError) as info:
        parse_revision(rev)
    assert str(info.value) == f"failed to extract commit hash from '{rev}' revision"


@given(st.text(max_size=120))
def test_parse_revision_only_returns_40_chars_or_raises(rev: str) -> None:
    try:
        sha = parse_revision(rev)
    except PermanentDeliveryError:
        return
    assert len(sha) == 40
    assert rev.endswith(sha)


def test_format_markdown_post_sorts_metadata_and_hides_change_request() -> None:
    """Reference §4.0 formatMarkdownPost: emoji by severity, sorted metadata lines, no change_request."""
    event = make_event(
        severity="error", message="boom", metadata={"zeta": "1", "alpha": "2", "change_request": "7"}
    )
    assert format_markdown_post(event) == (
        "## Flux Status\n\n⚠️ Kustomization/flux-system/podinfo\n\nboom\n\nMetadata:\n* `alpha`: 2\n* `zeta`: 1\n"
    )
    assert format_markdown_post(make_event(metadata={})).startswith("## Flux Status\n\nℹ️ Kustomization/")


def test_comment_marker_and_body() -> None:
    """Reference §4.3: '<!-- <prefix>:<uid>/<Kind>/<ns>/<name> -->' then the markdown post."""
    event = make_event()
    marker = comment_marker("flux-pr-comment-key", UID, event)
    assert marker == f"<!-- flux-pr-comment-key:{UID}/Kustomization/flux-system/podinfo -->"
    assert comment_body("flux-pr-comment-key", UID, event) == marker + "\n\n" + format_markdown_post(event)


def test_comment_body_with_a_template() -> None:
    """Issue 15: a template's message replaces the event's; its title replaces the object line only when
    the template set one (a default title keeps Flux's ``Kind/namespace/name``); the marker never changes."""
    event = make_event(message="boom", metadata={})
    marker = comment_marker("flux-pr-comment-key", UID, event)
    untitled = Message.of(event)
    untitled = Message(untitled.title, "rendered text", "info")
    assert comment_body("flux-pr-comment-key", UID, event, untitled) == (
        marker + "\n\n## Flux Status\n\nℹ️ Kustomization/flux-system/podinfo\n\nrendered text\n\nMetadata:\n"
    )
    titled = Message("Deployed podinfo", "rendered text", "info")
    assert comment_body("flux-pr-comment-key", UID, event, titled) == (
        marker + "\n\n## Flux Status\n\nℹ️ Deployed podinfo\n\nrendered text\n\nMetadata:\n"
    )


@pytest.mark.parametrize(
    ("text", "description"),
    [
        ("short", "short"),
        ("two\n  lines\tand tabs ", "two lines and tabs"),
        ("x" * 140, "x" * 140),
        ("x" * 141, "x" * 139 + "…"),
        ("", ""),
    ],
)
def test_status_description_is_one_bounded_line(text: str, description: str) -> None:
    """Issue 15: a template's message as a commit-status description fits GitHub's 140 characters."""
    assert status_description(text) == description
    assert len(status_description(text)) <= MAX_DESCRIPTION


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", 'invalid "change_request" metadata value "abc": strconv.Atoi: parsing "abc": invalid syntax'),
        (" 1", 'invalid "change_request" metadata value " 1": strconv.Atoi: parsing " 1": invalid syntax'),
        ("1_0", 'invalid "change_request" metadata value "1_0": strconv.Atoi: parsing "1_0": invalid syntax'),
        (
            "99999999999999999999",
            'invalid "change_request" metadata value "99999999999999999999": '
            'strconv.Atoi: parsing "99999999999999999999": value out of range',
        ),
    ],
)
def test_change_request_number_errors(value: str, message: str) -> None:
    with pytest.raises(PermanentDeliveryError) as info:
        change_request_number(make_event(metadata={"change_request": value}))
    assert str(info.value) == message


def test_change_request_number() -> None:
    assert change_request_number(make_event(metadata={"change_request": "+42"})) == 42
    with pytest.raises(PermanentDeliveryError, match=r'missing "change_request" metadata key'):
        change_request_number(make_event(metadata={}))


def test_commit_status_id_prefers_the_dispatcher_value_then_the_default_formula() -> None:
    event = make_event()
    assert commit_status_id(opts(ProviderType.GITHUB, commit_status="custom/id"), event) == "custom/id"
    assert commit_status_id(opts(ProviderType.GITHUB), event) == "kustomization/podinfo/0c9c2e41"
    with pytest.raises(PermanentDeliveryError, match=r"^commit status cannot be empty$") as info:
        commit_status_id(opts(ProviderType.GITHUB, uid=""), event)
    assert info.value.failure is FailureReason.INVALID_CONFIG


def test_token_or_password_fallback() -> None:
    """Reference §4.1: GitHub, GitLab and Gitea use the password when there is no token."""
    github = GitHubNotifier(opts(ProviderType.GITHUB, address="https://github.com/o/r", password="pw-token"))
    assert github.auth.static == "pw-token"
    gitlab = GitLabNotifier(opts(ProviderType.GITLAB, address="https://gitlab.com/g/p", password="pw-token"))
    assert gitlab.token == "pw-token"


MY_TYPES = [
    ProviderType.GITHUB,
    ProviderType.GITHUB_DISPATCH,
    ProviderType.GITHUB_PR_COMMENT,
    ProviderType.GITLAB,
    ProviderType.GITLAB_MR_COMMENT,
    ProviderType.GITEA,
    ProviderType.GITEA_PR_COMMENT,
    ProviderType.BITBUCKET,
    ProviderType.BITBUCKET_SERVER,
    ProviderType.AZURE_DEVOPS,
    ProviderType.NATS,
    ProviderType.GOOGLE_PUBSUB,
    ProviderType.AZURE_EVENT_HUB,
    ProviderType.OTEL,
]

ADDRESSES = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        [
            "https://github.com/o/r",
            "http://[::1",
            "https://h:99999/o/r",
            "git@h:o/r.git",
            "https://h/scm/P/r.git",
            "Endpoint=sb://;SharedAccessKey=",
            "Endpoint=http://[x;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=c",
        ]
    ),
)

SECRET_DATA = st.dictionaries(
    st.sampled_from(
        [
            "githubAppID",
            "githubAppInstallationID",
            "githubAppInstallationOwner",
            "githubAppPrivateKey",
            "githubAppBaseURL",
            "creds",
            "nkey",
        ]
    ),
    st.binary(max_size=40),
    max_size=4,
)


@given(
    st.sampled_from(MY_TYPES),
    ADDRESSES,
    st.text(max_size=20),
    st.one_of(st.none(), st.text(max_size=30)),
    SECRET_DATA,
)
def test_any_configuration_builds_or_fails_cleanly(
    ptype: ProviderType, address: str, channel: str, token: str | None, data: dict[str, bytes]
) -> None:
    kw: dict[str, Any] = {"address": address, "channel": channel, "secret_data": data}
    if token is not None:
        kw["token"] = token
    message = "built"
    try:
        create_notifier(opts(ptype, **kw))
    except ProviderConfigError as exc:
        message = str(exc)
    assert message
