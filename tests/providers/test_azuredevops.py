"""Azure DevOps commit statuses: its conformance case and the pure tests of its request builder."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.git.azuredevops import (
    AzureDevOpsNotifier,
    duplicate_azure_devops_status,
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
from tests.providers.support import SUMMARY
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_azuredevops(requests: list[CapturedRequest]) -> None:
    path = f"/org/project/_apis/git/repositories/webapp/commits/{SAMPLE_SHA}/statuses"
    auth = "Basic " + base64.b64encode(b":ado-canary-pat").decode()
    listing = only(requests, "GET")
    assert listing.path == path
    assert listing.headers["Authorization"] == auth
    create = only(requests, "POST")
    assert create.path == path
    assert create.query == {"api-version": "6.0"}
    assert create.headers["Authorization"] == auth
    body = {
        "context": {"genre": f"fluxcd:{SUMMARY}", "name": STATUS_ID},
        "description": DESCRIPTION,
        "state": "succeeded",
    }
    assert create.body == compact(body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="azuredevops",
        spec={"address": "{url}/org/project/_git/webapp"},
        secret={"token": "ado-canary-pat"},
        prelude={
            "GET /org/project/_apis/git/repositories/webapp/commits/.*/statuses": (
                200,
                {"count": 0, "value": []},
            )
        },
        final="POST /org/project/_apis/git/repositories/webapp/commits/.*/statuses",
        expect=expect_azuredevops,
        canaries=["ado-canary-pat"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://dev.azure.com/o/p/r", "token": "t"}, 'invalid repository id "o/p/r"'),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.AZURE_DEVOPS, **kw)


def test_azure_devops_requests() -> None:
    notifier = AzureDevOpsNotifier(
        opts(ProviderType.AZURE_DEVOPS, address="https://dev.azure.com/org/proj/_git/repo", token="pat")
    )
    event = make_event(metadata={"revision": f"main@sha1:{SHA}", "summary": "prod"})
    status = notifier.build_status(event)
    assert status is not None
    assert status.genre == "fluxcd:prod"
    assert notifier.build_status(make_event()).genre == "fluxcd"  # type: ignore[union-attr]
    create = notifier.create_request(status)
    assert create.url == (
        f"https://dev.azure.com/org/proj/_apis/git/repositories/repo/commits/{SHA}/statuses?api-version=6.0"
    )
    assert create.headers["Authorization"] == "Basic " + base64.b64encode(b":pat").decode()
    assert create.body == (
        b'{"context":{"genre":"fluxcd:prod","name":"kustomization/podinfo/0c9c2e41"},'
        b'"description":"reconciliation succeeded","state":"succeeded"}'
    )
    same = {
        "context": {"name": status.id, "genre": "fluxcd:prod"},
        "state": "succeeded",
        "description": status.description,
    }
    assert duplicate_azure_devops_status([same], status)
    assert not duplicate_azure_devops_status(
        [{**same, "context": {"name": status.id, "genre": "fluxcd"}}], status
    )
    assert not duplicate_azure_devops_status([{**same, "state": "error"}, same], status)
