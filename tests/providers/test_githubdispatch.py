"""GitHub repository_dispatch: its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.git.githubdispatch import GitHubDispatchNotifier
from tests.providers.case import ProviderCase
from tests.providers.git_support import config_error, make_event, only, opts
from tests.providers.support import SAMPLE_GO_JSON
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_githubdispatch(requests: list[CapturedRequest]) -> None:
    req = only(requests, "POST")
    assert len(requests) == 1
    assert req.path == "/api/v3/repos/fluxcd/webapp/dispatches"
    assert req.headers["Authorization"] == "Bearer ghp-canary-dispatch-token"
    expected = (
        b'{"event_type":"GitRepository/webapp.gitops-system","client_payload":' + SAMPLE_GO_JSON + b"}\n"
    )
    assert req.body == expected, req.body


CASES: list[ProviderCase] = [
    ProviderCase(
        type="githubdispatch",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "ghp-canary-dispatch-token"},
        final="POST /api/v3/repos/fluxcd/webapp/dispatches",
        expect=expect_githubdispatch,
        canaries=["ghp-canary-dispatch-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://github.com/o", "token": "t"}, "invalid repository id: 'o'"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITHUB_DISPATCH, **kw)


def test_githubdispatch_body() -> None:
    """Reference §4.1: event_type '<Kind>/<name>.<namespace>', client_payload = the event JSON."""
    notifier = GitHubDispatchNotifier(
        opts(ProviderType.GITHUB_DISPATCH, address="https://github.com/o/r", token="t")
    )
    event = make_event(message="a <b> & c")
    request = notifier.build_request(event, "tok")
    assert request.url == "https://api.github.com/repos/o/r/dispatches"
    assert request.body == (
        b'{"event_type":"Kustomization/podinfo.flux-system","client_payload":' + event.to_go_json() + b"}\n"
    )
    assert b"\\u003cb\\u003e" in request.body  # the payload is json.Marshal(event): HTML-escaped
