"""GitHub commit statuses, and the GitHub App authentication the GitHub types share: its conformance case and
the pure tests of its request builder.
"""

from __future__ import annotations

from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notification_controller.api.provider import ProviderType
from notification_controller.errors import PermanentDeliveryError
from notification_controller.providers.git.base import CommitStatus, parse_git_address
from notification_controller.providers.git.github import GitHubNotifier, duplicate_github_status
from notification_controller.providers.git.githubapp import GitHubApp, GitHubAuth, github_api_base
from tests.providers.case import ProviderCase
from tests.providers.git_support import (
    DESCRIPTION,
    RSA_PEM,
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


def expect_github(requests: list[CapturedRequest]) -> None:
    listing = only(requests, "GET")
    assert listing.path == f"/api/v3/repos/fluxcd/webapp/commits/{SAMPLE_SHA}/statuses"
    assert listing.query == {"per_page": "50"}
    assert listing.headers["Authorization"] == "Bearer ghp-canary-github-token"
    create = only(requests, "POST")
    assert create.path == f"/api/v3/repos/fluxcd/webapp/statuses/{SAMPLE_SHA}"
    assert create.headers["Authorization"] == "Bearer ghp-canary-github-token"
    assert create.headers["Content-Type"] == "application/json"
    body = {"state": "success", "description": DESCRIPTION, "context": STATUS_ID}
    assert create.body == compact(body, newline=True, escape_html=False), create.body


CASES: list[ProviderCase] = [
    ProviderCase(
        type="github",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "ghp-canary-github-token"},
        prelude={"GET /api/v3/repos/fluxcd/webapp/commits/.*/statuses": (200, [])},
        final="POST /api/v3/repos/fluxcd/webapp/statuses/",
        expect=expect_github,
        canaries=["ghp-canary-github-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://github.com/o/r"}, "github token or github app details must be specified"),
        ({"address": "https://github.com/o/r/x", "token": "t"}, "invalid repository id: 'o/r/x'"),
        ({"address": "", "token": "t"}, "invalid repository id: ''"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GITHUB, **kw)


@pytest.mark.parametrize(
    ("address", "base"),
    [
        ("https://github.com/o/r", "https://api.github.com/"),
        ("git@github.com:o/r.git", "https://api.github.com/"),
        ("https://ghe.example.com/o/r", "https://ghe.example.com/api/v3/"),
        ("http://127.0.0.1:9999/o/r", "http://127.0.0.1:9999/api/v3/"),
        ("https://api.tenant.ghe.com/o/r", "https://api.tenant.ghe.com/"),
        ("https://x.api.example.com/o/r", "https://x.api.example.com/"),
    ],
)
def test_github_api_base(address: str, base: str) -> None:
    """Reference §4.2: github.com → api.github.com; other hosts → <host>/api/v3/ (go-github rules)."""
    assert github_api_base(parse_git_address(address)) == base


def test_errors_never_echo_address_credentials() -> None:
    message = config_error(ProviderType.GITHUB, address="https://bob:hunter22@github.com/o/r/x", token="t")
    assert "hunter22" not in message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"githubAppID": b"x", "githubAppInstallationID": b"1", "githubAppPrivateKey": RSA_PEM},
            "app ID must be provided",
        ),
        (
            {"githubAppID": b"1", "githubAppPrivateKey": RSA_PEM},
            "app installation owner or ID must be provided",
        ),
        (
            {
                "githubAppID": b"1",
                "githubAppInstallationID": b"2",
                "githubAppInstallationOwner": b"o",
                "githubAppPrivateKey": RSA_PEM,
            },
            "only one of app installation owner or ID must be provided",
        ),
        (
            {"githubAppID": b"1", "githubAppInstallationID": b"2"},
            "private key must be provided to use github app authentication",
        ),
        (
            {"githubAppID": b"1", "githubAppInstallationID": b"2", "githubAppPrivateKey": b"junk"},
            "could not parse private key",
        ),
    ],
)
def test_github_app_config_errors(data: dict[str, bytes], message: str) -> None:
    assert message in config_error(ProviderType.GITHUB, address="https://github.com/o/r", secret_data=data)


def test_github_app_config_rejects_non_rsa_keys() -> None:
    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    data = {"githubAppID": b"1", "githubAppInstallationID": b"2", "githubAppPrivateKey": ec_pem}
    assert "key is not a valid RSA private key" in config_error(
        ProviderType.GITHUB, address="https://github.com/o/r", secret_data=data
    )


def test_github_app_jwt_claims() -> None:
    """RS256, iss = app id, iat 60 s in the past, exp 10 minutes after iat."""
    app = GitHubApp.from_secret(
        {"githubAppID": b"123", "githubAppInstallationID": b"456", "githubAppPrivateKey": RSA_PEM}
    )
    token = app.mint_jwt(now=1_700_000_000)
    public = app.private_key.public_key()
    claims = jwt.decode(
        token, public, algorithms=["RS256"], options={"verify_exp": False, "verify_iat": False}
    )
    assert claims == {"iat": 1_700_000_000 - 60, "exp": 1_700_000_000 - 60 + 600, "iss": "123"}
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert app.base_url == "https://api.github.com/"
    assert (
        app.access_token_request(token, 456).url
        == "https://api.github.com/app/installations/456/access_tokens"
    )
    assert app.access_token_request(token, 456).headers["Authorization"] == f"Bearer {token}"


def test_github_app_base_url_and_owner_lookup() -> None:
    app = GitHubApp.from_secret(
        {
            "githubAppID": b"1",
            "githubAppInstallationOwner": b"my-org",
            "githubAppPrivateKey": RSA_PEM,
            "githubAppBaseURL": b"https://ghe.example.com/api/v3",
        }
    )
    assert [r.url for r in app.installation_requests("j")] == [
        "https://ghe.example.com/api/v3/orgs/my-org/installation",
        "https://ghe.example.com/api/v3/users/my-org/installation",
    ]
    assert app.app_request("j").url == "https://ghe.example.com/api/v3/app"
    assert "-----BEGIN" not in repr(app)


def test_github_auth_prefers_token_over_app() -> None:
    data = {"githubAppID": b"1", "githubAppInstallationID": b"2", "githubAppPrivateKey": RSA_PEM}
    auth = GitHubAuth(opts(ProviderType.GITHUB, token="tok", secret_data=data))
    assert auth.app is None
    assert GitHubAuth(opts(ProviderType.GITHUB, secret_data=data)).app is not None


def test_github_requests() -> None:
    notifier = GitHubNotifier(
        opts(ProviderType.GITHUB, address="git@github.com:fluxcd/podinfo.git", token="t")
    )
    status = notifier.build_status(make_event())
    assert status == CommitStatus(
        SHA, "success", "reconciliation succeeded", "kustomization/podinfo/0c9c2e41", "kustomization/podinfo"
    )
    listing = notifier.list_request(status, "tok")
    assert listing.url == f"https://api.github.com/repos/fluxcd/podinfo/commits/{SHA}/statuses?per_page=50"
    assert listing.headers["Authorization"] == "Bearer tok"
    create = notifier.create_request(status, "tok")
    assert (create.method, create.url) == (
        "POST",
        f"https://api.github.com/repos/fluxcd/podinfo/statuses/{SHA}",
    )
    assert create.body == (
        b'{"state":"success","description":"reconciliation succeeded","context":"kustomization/podinfo/0c9c2e41"}\n'
    )
    assert notifier.build_status(make_event(reason="Progressing")) is None
    assert notifier.build_status(make_event(severity="error")).state == "failure"  # type: ignore[union-attr]
    with pytest.raises(PermanentDeliveryError, match=r"^can't convert to github state$"):
        notifier.build_status(make_event(severity="trace"))
    with pytest.raises(PermanentDeliveryError, match=r"^missing revision metadata$"):
        notifier.build_status(make_event(metadata={}))


def test_commit_revision_lookup_order() -> None:
    """``GetRevision``: commit, then originRevision, then revision."""
    notifier = GitHubNotifier(opts(ProviderType.GITHUB, address="https://github.com/o/r", token="t"))
    other = "f" * 40
    event = make_event(metadata={"revision": f"main@sha1:{SHA}", "originRevision": f"main@sha1:{other}"})
    assert notifier.build_status(event).sha == other  # type: ignore[union-attr]
    event = make_event(metadata={"revision": f"main@sha1:{SHA}", "commit": other})
    assert notifier.build_status(event).sha == other  # type: ignore[union-attr]


def test_duplicate_github_status_first_matching_context_decides() -> None:
    status = CommitStatus(SHA, "success", "d", "ctx")
    assert duplicate_github_status([{"context": "ctx", "state": "success", "description": "d"}], status)
    assert not duplicate_github_status([{"context": "ctx", "state": "failure", "description": "d"}], status)
    listing = [
        {"context": "ctx", "state": "failure", "description": "d"},
        {"context": "ctx", "state": "success", "description": "d"},
    ]
    assert not duplicate_github_status(listing, status)
    assert duplicate_github_status([{"context": "ctx", "state": None}, *listing[1:]], status)
    assert not duplicate_github_status([], status)


# ---- an installation token goes only to the API that minted it (issue 23 item 6) -------------------


@pytest.mark.parametrize(
    ("base_url", "address"),
    [
        (None, "https://github.com/org/repo"),  # api.github.com mints, api.github.com is called
        (b"https://api.github.com", "git@github.com:org/repo.git"),
        (b"https://ghe.example.com/api/v3", "https://ghe.example.com/org/repo"),
        (b"https://api.octo.ghe.com", "https://octo.ghe.com/org/repo"),  # data residency: api.<host>
        (b"http://127.0.0.1:8080/api/v3", "http://127.0.0.1:8080/org/repo"),  # a test server
    ],
)
def test_github_app_token_stays_with_its_api(base_url: bytes | None, address: str) -> None:
    data = {"githubAppID": b"1", "githubAppInstallationID": b"2", "githubAppPrivateKey": RSA_PEM}
    if base_url is not None:
        data["githubAppBaseURL"] = base_url
    for ptype in (ProviderType.GITHUB, ProviderType.GITHUB_DISPATCH, ProviderType.GITHUB_PR_COMMENT):
        assert GitHubAuth(opts(ptype, address=address, secret_data=data)).app is not None


@pytest.mark.parametrize(
    ("base_url", "address"),
    [
        (None, "https://attacker.example/org/repo"),  # a github.com token to another host
        (None, "http://127.0.0.1:8080/org/repo"),
        (b"https://ghe.example.com/api/v3", "https://github.com/org/repo"),
        (b"https://ghe.example.com/api/v3", "http://ghe.example.com/org/repo"),  # not in clear text
        (b"https://ghe.example.com/api/v3", "https://ghe.example.com:8443/org/repo"),
        (b"https://api.github.com", "https://github.com.attacker.example/org/repo"),
    ],
)
def test_github_app_token_never_sent_to_another_host(base_url: bytes | None, address: str) -> None:
    data = {"githubAppID": b"1", "githubAppInstallationID": b"2", "githubAppPrivateKey": RSA_PEM}
    if base_url is not None:
        data["githubAppBaseURL"] = base_url
    for ptype in (ProviderType.GITHUB, ProviderType.GITHUB_DISPATCH, ProviderType.GITHUB_PR_COMMENT):
        message = config_error(ptype, address=address, secret_data=data)
        assert "installation token is only sent to the API that minted it" in message
        assert "githubAppBaseURL" in message
    # A token of the tenant's own (not minted) goes to the address, as in Flux.
    assert GitHubAuth(opts(ProviderType.GITHUB, address=address, token="t", secret_data=data)).app is None
