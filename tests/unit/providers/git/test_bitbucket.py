"""``bitbucket`` honours ``BITBUCKET_API_BASE_URL`` as Flux's Bitbucket client does (issue 16).

``ktrysmt/go-bitbucket`` reads the variable when the client is created (``NewBitbucket``): empty or unset
means ``https://api.bitbucket.org/2.0``; otherwise only the scheme, host and path of the value are used
(``GetApiBaseURL``). A value that is not an http(s) URL fails the Provider with the client's wording.
"""

from __future__ import annotations

import pytest

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.git.bitbucket import BitbucketNotifier

ENV = "BITBUCKET_API_BASE_URL"
SHA = "5394cb7f48332b2de7c17dd8b8384bbc84b7e738"


def make_event() -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "podinfo"},
            "severity": "info",
            "message": "Applied revision",
            "reason": "ReconciliationSucceeded",
            "metadata": {"revision": f"main@sha1:{SHA}"},
        }
    )


def notifier() -> BitbucketNotifier:
    return BitbucketNotifier(
        ProviderOptions(
            type=ProviderType.BITBUCKET,
            name="p",
            namespace="ns",
            uid="puid",
            address="https://bitbucket.org/team/repo",
            token=SecretValue("u:app-password"),
            commit_status="kustomization/podinfo/puid",
        )
    )


@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_means_bitbucket_cloud(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    assert notifier().api_base == "https://api.bitbucket.org/2.0"


def test_the_variable_replaces_the_api_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "https://bitbucket.isolated.example.com/api/2.0")
    n = notifier()
    status = n.build_status(make_event())
    assert status is not None
    assert n.create_request(status).url == (
        f"https://bitbucket.isolated.example.com/api/2.0/repositories/team/repo/commit/{SHA}/statuses/build"
    )
    assert n.list_request(status).url.startswith(
        "https://bitbucket.isolated.example.com/api/2.0/repositories/"
    )


def test_only_scheme_host_and_path_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """``GetApiBaseURL`` is ``scheme://host`` + path: userinfo and query never reach a request."""
    monkeypatch.setenv(ENV, "http://mirror-user:pw@127.0.0.1:8443/bb/2.0?x=1#frag")
    assert notifier().api_base == "http://127.0.0.1:8443/bb/2.0"


def test_the_variable_is_read_when_the_notifier_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "http://first.example.com/2.0")
    first = notifier()
    monkeypatch.setenv(ENV, "http://second.example.com/2.0")
    assert (first.api_base, notifier().api_base) == (
        "http://first.example.com/2.0",
        "http://second.example.com/2.0",
    )


def test_a_bad_value_fails_the_provider_with_the_clients_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "ftp://user:secret@files.example.com/")
    with pytest.raises(ProviderConfigError) as info:
        notifier()
    message = str(info.value)
    assert message.startswith("failed to create bitbucket client: unable to parse Bitbucket base Url")
    assert ENV in message
    assert "secret" not in message
