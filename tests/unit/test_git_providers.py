"""Pure tests of the git-forge and SDK-style providers: parsing, Flux's messages, exact request bytes.

Reference §4.0 (parseRevision, formatNameAndDescription, formatMarkdownPost), §4.1 (githubdispatch, nats,
googlepubsub, azureeventhub, otel rows), §4.2 (repository ids, states, duplicates, GitHub auth), §4.3
(comment markers), §4.4 (OTEL trace ids). No network: builders are called directly.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from typing import Any
from urllib.parse import parse_qs, quote_plus

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.api.provider import Provider, ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.errors import PermanentDeliveryError, ProviderConfigError
from notification_controller.providers.azureeventhub import (
    AzureEventHubNotifier,
    ConnectionString,
    namespace_base,
    sas_token,
)
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.common import go_quote
from notification_controller.providers.git.azuredevops import (
    AzureDevOpsNotifier,
    duplicate_azure_devops_status,
)
from notification_controller.providers.git.base import (
    change_request_number,
    commit_status_id,
    format_markdown_post,
    format_name_and_description,
    parse_git_address,
    parse_revision,
    split_camelcase,
)
from notification_controller.providers.git.bitbucket import BitbucketNotifier, duplicate_bitbucket_status
from notification_controller.providers.git.bitbucketserver import (
    BitbucketServerNotifier,
    duplicate_bitbucket_server_status,
    parse_bitbucket_server_address,
)
from notification_controller.providers.git.changerequest import comment_body, comment_marker
from notification_controller.providers.git.forges import sha1_hex
from notification_controller.providers.git.gitea import GiteaNotifier, duplicate_gitea_status, gitea_state
from notification_controller.providers.git.github import GitHubNotifier, GitHubStatus, duplicate_github_status
from notification_controller.providers.git.githubapp import GitHubApp, GitHubAuth, github_api_base
from notification_controller.providers.git.githubdispatch import GitHubDispatchNotifier
from notification_controller.providers.git.githubprcomment import GitHubPullRequestCommentNotifier
from notification_controller.providers.git.gitlab import GitLabNotifier, GitLabStatus, duplicate_gitlab_status
from notification_controller.providers.git.gitlabmrcomment import GitLabMergeRequestCommentNotifier
from notification_controller.providers.googlepubsub import GooglePubSubNotifier, ServiceAccountKey
from notification_controller.providers.nats import NATSNotifier
from notification_controller.providers.otel import OTELNotifier, build_trace, trace_id, trace_revision
from notification_controller.providers.registry import create_notifier
from notification_controller.providers.tokens import CachedToken, TokenCache, cache_key

SHA = "5394cb7f48332b2de7c17dd8b8384bbc84b7e738"
UID = "0c9c2e41-d2f9-4f9b-9c41-bebc1984d67a"


def make_event(**kw: Any) -> Event:
    raw: dict[str, Any] = {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "podinfo",
            "uid": "11111111-2222-3333-4444-555555555555",
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "info",
        "timestamp": "2026-01-02T03:04:05Z",
        "message": "Applied revision: main@sha1:" + SHA,
        "reason": "ReconciliationSucceeded",
        "metadata": {"revision": f"main@sha1:{SHA}"},
        "reportingController": "kustomize-controller",
    }
    raw.update(kw)
    return Event.from_raw(raw)


def opts(ptype: ProviderType, **kw: Any) -> ProviderOptions:
    kw.setdefault("uid", UID)
    for key in ("token", "password"):
        if isinstance(kw.get(key), str):
            kw[key] = SecretValue(kw[key])
    return ProviderOptions(type=ptype, name="p", namespace="flux-system", **kw)


def config_error(ptype: ProviderType, **kw: Any) -> str:
    with pytest.raises(ProviderConfigError) as info:
        create_notifier(opts(ptype, **kw))
    return str(info.value)


def rsa_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


RSA_PEM = rsa_pem()


# ----------------------------------------------------------------------------------------------------
# TokenCache (the async tests come first: pytest-asyncio 1.5 leaks a loop when a sync test precedes an
# async one in a module, pytest-asyncio#724)
# ----------------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_token_cache_reuses_until_80_percent_of_lifetime() -> None:
    clock = FakeClock()
    cache = TokenCache(clock=clock)
    minted: list[str] = []

    async def mint() -> CachedToken:
        minted.append(f"t{len(minted)}")
        return CachedToken(minted[-1], clock.now + 3600)

    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 0.79 * 3600
    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 0.02 * 3600
    assert (await cache.get_or_mint("k", mint)).value == "t1"
    assert (cache.hits, cache.misses) == (1, 2)


async def test_token_cache_max_duration_caps_reuse() -> None:
    """--token-cache-max-duration: a 2 h token is reused for at most the configured 10 minutes."""
    clock = FakeClock()
    cache = TokenCache(clock=clock, max_ttl=600)
    minted: list[str] = []

    async def mint() -> CachedToken:
        minted.append(f"t{len(minted)}")
        return CachedToken(minted[-1], clock.now + 7200)

    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 599
    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 2
    assert (await cache.get_or_mint("k", mint)).value == "t1"


async def test_token_cache_mints_once_for_concurrent_misses() -> None:
    cache = TokenCache()
    calls = 0
    gate = asyncio.Event()

    async def mint() -> CachedToken:
        nonlocal calls
        calls += 1
        await gate.wait()
        return CachedToken("tok", 4_102_444_800.0)

    tasks = [asyncio.create_task(cache.get_or_mint("k", mint)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1
    assert {t.value for t in results} == {"tok"}


async def test_token_cache_is_bounded_and_skips_nearly_expired_tokens() -> None:
    clock = FakeClock()
    cache = TokenCache(capacity=2, clock=clock)
    for key in ("a", "b", "c"):
        cache.put(key, CachedToken(key, clock.now + 3600))
    assert len(cache) == 2
    assert cache.get("a") is None
    cache.put("short", CachedToken("s", clock.now + 30))  # within the 60 s margin: not kept
    assert cache.get("short") is None
    assert "s-secret" not in repr(CachedToken("s-secret", 0.0))


def test_cache_key_is_a_digest_of_its_parts() -> None:
    assert cache_key("a", "bc") != cache_key("ab", "c")
    assert len(cache_key("x", b"y")) == 64


# ----------------------------------------------------------------------------------------------------
# §4.2 repository addresses
# ----------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------
# §4.0 revision, camel case, name/description, markdown
# ----------------------------------------------------------------------------------------------------


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


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", []),
        ("lowercase", ["lowercase"]),
        ("Class", ["Class"]),
        ("MyClass", ["My", "Class"]),
        ("MyC", ["My", "C"]),
        ("HTML", ["HTML"]),
        ("PDFLoader", ["PDF", "Loader"]),
        ("AString", ["A", "String"]),
        ("SimpleXMLParser", ["Simple", "XML", "Parser"]),
        ("vimRPCPlugin", ["vim", "RPC", "Plugin"]),
        ("GL11Version", ["GL", "11", "Version"]),
        ("99Bottles", ["99", "Bottles"]),
        ("May5", ["May", "5"]),
        ("BFG9000", ["BFG", "9000"]),
        ("BöseÜberraschung", ["Böse", "Überraschung"]),
        ("Two  spaces", ["Two", "  ", "spaces"]),
        ("ApplySucceeded", ["Apply", "Succeeded"]),
        ("HealthCheckFailed", ["Health", "Check", "Failed"]),
        ("BadUTF8\udce2\udce2\udca1", ["BadUTF8\udce2\udce2\udca1"]),
    ],
)
def test_split_camelcase(text: str, words: list[str]) -> None:
    """Reference §4.0: Go's camelcase.Split (fatih/camelcase test vectors), invalid UTF-8 kept whole."""
    assert split_camelcase(text) == words


@given(st.text(max_size=80))
def test_split_camelcase_keeps_every_character(text: str) -> None:
    assert "".join(split_camelcase(text)) == text


def test_format_name_and_description() -> None:
    assert format_name_and_description(make_event()) == ("kustomization/podinfo", "reconciliation succeeded")
    event = make_event(reason="ApplySucceeded", involvedObject={"kind": "HelmRelease", "name": "PodInfo"})
    assert format_name_and_description(event) == ("helmrelease/podinfo", "apply succeeded")


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


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\x00é') == '"a\\"b\\\\c\\n\\x00é"'


# ----------------------------------------------------------------------------------------------------
# commit status id (§3.6 step 9)
# ----------------------------------------------------------------------------------------------------


def test_commit_status_id_prefers_the_dispatcher_value_then_the_default_formula() -> None:
    event = make_event()
    assert commit_status_id(opts(ProviderType.GITHUB, commit_status="custom/id"), event) == "custom/id"
    assert commit_status_id(opts(ProviderType.GITHUB), event) == "kustomization/podinfo/0c9c2e41"
    with pytest.raises(PermanentDeliveryError, match=r"^commit status cannot be empty$"):
        commit_status_id(opts(ProviderType.GITHUB, uid=""), event)


# ----------------------------------------------------------------------------------------------------
# constructors: Flux's messages (§4.1, §4.2)
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ptype", "kw", "message"),
    [
        (
            ProviderType.GITHUB,
            {"address": "https://github.com/o/r"},
            "github token or github app details must be specified",
        ),
        (
            ProviderType.GITHUB,
            {"address": "https://github.com/o/r/x", "token": "t"},
            "invalid repository id: 'o/r/x'",
        ),
        (ProviderType.GITHUB, {"address": "", "token": "t"}, "invalid repository id: ''"),
        (
            ProviderType.GITHUB_DISPATCH,
            {"address": "https://github.com/o", "token": "t"},
            "invalid repository id: 'o'",
        ),
        (
            ProviderType.GITHUB_PR_COMMENT,
            {"address": "https://github.com/o/r", "token": "t", "uid": ""},
            "provider UID cannot be empty",
        ),
        (ProviderType.GITLAB, {"address": "https://gitlab.com/g/p"}, "gitlab token cannot be empty"),
        (
            ProviderType.GITLAB_MR_COMMENT,
            {"address": "https://gitlab.com/g/p"},
            "gitlab token cannot be empty",
        ),
        (
            ProviderType.GITLAB_MR_COMMENT,
            {"address": "https://gitlab.com/g/p", "token": "t", "uid": ""},
            "provider UID cannot be empty",
        ),
        (ProviderType.GITEA, {"address": "https://gitea.io/o/r"}, "gitea token cannot be empty"),
        (
            ProviderType.GITEA,
            {"address": "https://gitea.io/o/r/x", "token": "t"},
            'invalid repository id "o/r/x"',
        ),
        (ProviderType.GITEA_PR_COMMENT, {"address": "https://gitea.io/o/r"}, "gitea token cannot be empty"),
        (ProviderType.BITBUCKET, {"address": "https://bitbucket.org/o/r"}, "bitbucket token cannot be empty"),
        (
            ProviderType.BITBUCKET,
            {"address": "https://bitbucket.org/o/r", "token": "nocolon"},
            "invalid token format, expected to be <user>:<password>",
        ),
        (
            ProviderType.BITBUCKET,
            {"address": "https://bitbucket.org/o/r", "token": "a:b:c"},
            "invalid token format, expected to be <user>:<password>",
        ),
        (
            ProviderType.BITBUCKET,
            {"address": "https://bitbucket.org/o", "token": "u:p"},
            'invalid repository id "o"',
        ),
        (
            ProviderType.BITBUCKET_SERVER,
            {"address": "ssh://git@bb.example.com:7999/proj/repo.git", "token": "t"},
            "could not parse git address: unsupported scheme type in address: ssh. Must be http or https",
        ),
        (
            ProviderType.BITBUCKET_SERVER,
            {"address": "https://bb.example.com/proj/repo.git", "token": "t"},
            "could not parse git address: supplied provider address is not http(s) git clone url",
        ),
        (
            ProviderType.BITBUCKET_SERVER,
            {"address": "https://bb.example.com/scm/proj/sub/repo.git", "token": "t"},
            'could not parse git address: invalid repository id "proj/sub/repo"',
        ),
        (
            ProviderType.BITBUCKET_SERVER,
            {"address": "https://bb.example.com/scm/proj/repo.git", "username": "u"},
            "invalid credentials, expected to be one of username/password or API Token",
        ),
        (
            ProviderType.AZURE_DEVOPS,
            {"address": "https://dev.azure.com/o/p/r", "token": "t"},
            'invalid repository id "o/p/r"',
        ),
        (ProviderType.NATS, {"channel": "s"}, "NATS server (address) cannot be empty"),
        (ProviderType.NATS, {"address": "nats://127.0.0.1:4222"}, "NATS subject (channel) cannot be empty"),
        (ProviderType.GOOGLE_PUBSUB, {"channel": "t", "token": "{}"}, "GCP project ID cannot be empty"),
        (ProviderType.GOOGLE_PUBSUB, {"address": "p", "token": "{}"}, "GCP Pub/Sub topic ID cannot be empty"),
        (ProviderType.GOOGLE_PUBSUB, {"address": "p", "channel": "t", "token": "not json"}, "not valid JSON"),
        (
            ProviderType.GOOGLE_PUBSUB,
            {"address": "p", "channel": "t", "token": '{"type":"authorized_user"}'},
            "only 'service_account'",
        ),
        (ProviderType.AZURE_EVENT_HUB, {}, "invalid authentication options: endpoint URL cannot be empty"),
        (
            ProviderType.AZURE_EVENT_HUB,
            {
                "address": "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=h",
                "token": "jwt",
            },
            "invalid authentication options: jwt token and SAS authentication cannot be set at the same time",
        ),
        (
            ProviderType.AZURE_EVENT_HUB,
            {"address": "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v"},
            "connection string does not contain an EntityPath",
        ),
        (
            ProviderType.AZURE_EVENT_HUB,
            {"address": "hub", "token": "jwt"},
            "namespace (spec.channel) cannot be empty",
        ),
        (ProviderType.OTEL, {}, "invalid address: empty"),
        (
            ProviderType.OTEL,
            {"address": "ftp://collector/v1/traces"},
            "invalid address: must be an absolute http or https URL",
        ),
    ],
)
def test_constructor_errors(ptype: ProviderType, kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ptype, **kw)


def test_git_addresses_must_be_reachable_over_http() -> None:
    assert "invalid repository address" in config_error(
        ProviderType.GITLAB, address="/local/group/proj", token="t"
    )


def test_errors_never_echo_address_credentials() -> None:
    message = config_error(ProviderType.GITHUB, address="https://bob:hunter22@github.com/o/r/x", token="t")
    assert "hunter22" not in message


def test_token_or_password_fallback() -> None:
    """Reference §4.1: GitHub, GitLab and Gitea use the password when there is no token."""
    github = GitHubNotifier(opts(ProviderType.GITHUB, address="https://github.com/o/r", password="pw-token"))
    assert github.auth.static == "pw-token"
    gitlab = GitLabNotifier(opts(ProviderType.GITLAB, address="https://gitlab.com/g/p", password="pw-token"))
    assert gitlab.token == "pw-token"


def test_azureeventhub_service_account_name_conflicts() -> None:
    provider = Provider.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"type": "azureeventhub", "serviceAccountName": "sa"},
        }
    )
    sas = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=h"
    assert "serviceAccountName and SAS authentication" in config_error(
        ProviderType.AZURE_EVENT_HUB, address=sas, provider=provider
    )
    assert "serviceAccountName and jwt token authentication" in config_error(
        ProviderType.AZURE_EVENT_HUB, address="hub", channel="ns", token="jwt", provider=provider
    )


# ----------------------------------------------------------------------------------------------------
# GitHub App (§4.2 "GitHub auth")
# ----------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------
# request builders (§4.2)
# ----------------------------------------------------------------------------------------------------


def test_github_requests() -> None:
    notifier = GitHubNotifier(
        opts(ProviderType.GITHUB, address="git@github.com:fluxcd/podinfo.git", token="t")
    )
    status = notifier.build_status(make_event())
    assert status == GitHubStatus(
        SHA, "success", "reconciliation succeeded", "kustomization/podinfo/0c9c2e41"
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
    status = GitHubStatus(SHA, "success", "d", "ctx")
    assert duplicate_github_status([{"context": "ctx", "state": "success", "description": "d"}], status)
    assert not duplicate_github_status([{"context": "ctx", "state": "failure", "description": "d"}], status)
    listing = [
        {"context": "ctx", "state": "failure", "description": "d"},
        {"context": "ctx", "state": "success", "description": "d"},
    ]
    assert not duplicate_github_status(listing, status)
    assert duplicate_github_status([{"context": "ctx", "state": None}, *listing[1:]], status)
    assert not duplicate_github_status([], status)


def test_gitlab_requests_and_duplicates() -> None:
    notifier = GitLabNotifier(
        opts(ProviderType.GITLAB, address="https://gitlab.com/group/sub/proj.git", token="glpat")
    )
    status = notifier.build_status(make_event(severity="error", reason="HealthCheckFailed"))
    assert status == GitLabStatus(SHA, "failed", "health check failed", "kustomization/podinfo/0c9c2e41")
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
    same = {"sha": SHA, "status": "failed", "description": "health check failed", "name": status.name}
    assert duplicate_gitlab_status([{"sha": "x"}, same], status)
    assert not duplicate_gitlab_status([{**same, "status": "success"}], status)


def test_gitea_posts_pending_for_progressing() -> None:
    notifier = GiteaNotifier(opts(ProviderType.GITEA, address="https://gitea.example.com/o/r", token="gt"))
    status = notifier.build_status(make_event(reason="Progressing"))
    assert status.state == "pending"
    assert gitea_state(make_event(severity="error")) == "failure"
    create = notifier.create_request(status)
    assert create.url == f"https://gitea.example.com/api/v1/repos/o/r/statuses/{SHA}"
    assert create.headers["Authorization"] == "token gt"
    assert create.body == (
        b'{"state":"pending","target_url":"","description":"progressing","context":"kustomization/podinfo/0c9c2e41"}'
    )
    assert notifier.list_request(status).url.endswith(f"/commits/{SHA}/statuses?page=0&limit=50")
    assert duplicate_gitea_status(
        [{"context": status.context, "status": "pending", "description": "progressing"}], status
    )
    assert not duplicate_gitea_status(
        [{"context": status.context, "status": "success", "description": "progressing"}], status
    )


def test_bitbucket_requests() -> None:
    notifier = BitbucketNotifier(
        opts(ProviderType.BITBUCKET, address="git@bitbucket.org:team/repo.git", token="u:p")
    )
    assert notifier.api_base == "https://api.bitbucket.org/2.0"
    status = notifier.build_status(make_event())
    assert status is not None
    assert (
        status.key
        == hashlib.sha1(b"kustomization/podinfo/0c9c2e41", usedforsecurity=False).hexdigest()
        == sha1_hex("kustomization/podinfo/0c9c2e41")
    )
    get = notifier.list_request(status)
    assert (
        get.url
        == f"https://api.bitbucket.org/2.0/repositories/team/repo/commit/{SHA}/statuses/build/{status.key}"
    )
    assert get.headers["Authorization"] == "Basic " + base64.b64encode(b"u:p").decode()
    create = notifier.create_request(status)
    assert create.url == f"https://api.bitbucket.org/2.0/repositories/team/repo/commit/{SHA}/statuses/build"
    assert json.loads(create.body) == {
        "key": status.key,
        "url": "https://bitbucket.org",
        "state": "SUCCESSFUL",
        "name": "kustomization/podinfo",
        "description": "reconciliation succeeded",
    }
    assert list(json.loads(create.body)) == ["key", "url", "state", "name", "description"]
    assert duplicate_bitbucket_status(
        {"state": "SUCCESSFUL", "description": "reconciliation succeeded"}, status
    )
    assert not duplicate_bitbucket_status(None, status)


def test_bitbucket_api_url_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITBUCKET_API_BASE_URL", "http://127.0.0.1:1234/2.0/")
    notifier = BitbucketNotifier(
        opts(ProviderType.BITBUCKET, address="https://bitbucket.org/t/r", token="u:p")
    )
    assert notifier.api_base == "http://127.0.0.1:1234/2.0"
    monkeypatch.setenv("BITBUCKET_API_BASE_URL", "file:///etc/passwd")
    assert "BITBUCKET_API_BASE_URL" in config_error(
        ProviderType.BITBUCKET, address="https://bitbucket.org/t/r", token="u:p"
    )


def test_bitbucket_server_requests() -> None:
    address = "https://bob:pw1234@bb.example.com/context/scm/PROJ/repo.git"
    assert parse_bitbucket_server_address(address) == (
        "https://bb.example.com/context/rest/api/latest/projects/PROJ/repos/repo/commits"
    )
    notifier = BitbucketServerNotifier(
        opts(ProviderType.BITBUCKET_SERVER, address=address, username="u", password="p")
    )
    status = notifier.build_status(make_event())
    assert status is not None
    assert status.name == "kustomization/podinfo [reconciliation succeeded]"
    get = notifier.list_request(status)
    assert get.url == (
        f"https://bb.example.com/context/rest/api/latest/projects/PROJ/repos/repo/commits/{SHA}/builds?key={status.key}"
    )
    assert get.headers["Authorization"] == "Basic " + base64.b64encode(b"u:p").decode()
    create = notifier.create_request(status)
    assert create.body == (
        b'{"description":"reconciliation succeeded","key":"' + status.key.encode() + b'",'
        b'"name":"kustomization/podinfo [reconciliation succeeded]","state":"SUCCESSFUL",'
        b'"url":"https://bb.example.com/context/scm/PROJ/repo.git"}\n'
    )
    assert create.headers["x-atlassian-token"] == "no-check"
    existing = {
        "key": status.key,
        "state": "SUCCESSFUL",
        "description": status.description,
        "name": status.name,
    }
    assert duplicate_bitbucket_server_status(existing, status)
    assert not duplicate_bitbucket_server_status({**existing, "name": "other"}, status)
    token = BitbucketServerNotifier(opts(ProviderType.BITBUCKET_SERVER, address=address, token="bbtok"))
    assert token.list_request(status).headers["Authorization"] == "Bearer bbtok"
    with pytest.raises(
        PermanentDeliveryError, match=r"^couldn't convert to bitbucket server state: bitbucket server"
    ):
        notifier.build_status(make_event(severity="trace"))
    with pytest.raises(
        PermanentDeliveryError, match=r"^could not parse revision: failed to extract commit hash"
    ):
        notifier.build_status(make_event(metadata={"revision": "main/abc"}))


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
        "context": {"name": status.name, "genre": "fluxcd:prod"},
        "state": "succeeded",
        "description": status.description,
    }
    assert duplicate_azure_devops_status([same], status)
    assert not duplicate_azure_devops_status(
        [{**same, "context": {"name": status.name, "genre": "fluxcd"}}], status
    )
    assert not duplicate_azure_devops_status([{**same, "state": "error"}, same], status)


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


# ----------------------------------------------------------------------------------------------------
# nats, googlepubsub, azureeventhub, otel
# ----------------------------------------------------------------------------------------------------


def test_nats_auth_precedence() -> None:
    """Reference §4.1: creds > nkey > username/password."""
    import nkeys

    seed = bytes(nkeys.encode_seed(bytes(32), nkeys.PREFIX_BYTE_USER))
    creds = b"-----BEGIN NATS USER JWT-----\nx.y.z\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\n"
    creds += seed + b"\n------END USER NKEY SEED------\n"
    base = {"address": "nats://127.0.0.1:4222", "channel": "s", "username": "u", "password": "p"}
    both = NATSNotifier(opts(ProviderType.NATS, **base, secret_data={"creds": creds, "nkey": seed}))
    assert both.auth_method == "creds"
    assert NATSNotifier(opts(ProviderType.NATS, **base, secret_data={"nkey": seed})).auth_method == "nkey"
    assert NATSNotifier(opts(ProviderType.NATS, **base)).auth_method == "userpass"
    base.pop("password")
    assert NATSNotifier(opts(ProviderType.NATS, **base)).auth_method == "none"
    assert "error parsing nkey seed" in config_error(
        ProviderType.NATS, **base, secret_data={"nkey": b"SUBAD"}
    )
    assert "invalid NATS user credentials" in config_error(
        ProviderType.NATS, **base, secret_data={"creds": b"junk"}
    )


GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


def service_account(token_uri: str = GOOGLE_TOKEN_URI) -> str:
    return json.dumps(
        {
            "type": "service_account",
            "private_key_id": "kid-1",
            "private_key": RSA_PEM.decode(),
            "client_email": "flux@proj.iam.gserviceaccount.com",
            "token_uri": token_uri,
        }
    )


def test_google_service_account_assertion() -> None:
    key = ServiceAccountKey.parse(service_account())
    request = key.token_request(1_700_000_000)
    form = parse_qs(request.body.decode())
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assertion = form["assertion"][0]
    assert jwt.get_unverified_header(assertion)["kid"] == "kid-1"
    claims = jwt.decode(
        assertion,
        key.signing_key().public_key(),
        algorithms=["RS256"],
        audience="https://oauth2.googleapis.com/token",
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iss"] == "flux@proj.iam.gserviceaccount.com"
    assert claims["exp"] - claims["iat"] == 3600
    assert "https://www.googleapis.com/auth/pubsub" in claims["scope"].split()
    assert "PRIVATE KEY" not in repr(key)


def test_google_service_account_bad_key_fails_at_delivery() -> None:
    """Like Google's libraries, the key is loaded at the first token request: a clear permanent error."""
    broken = json.loads(service_account())
    broken["private_key"] = "-----BEGIN PRIVATE KEY-----\nnot-a-key\n-----END PRIVATE KEY-----\n"
    key = ServiceAccountKey.parse(json.dumps(broken))
    with pytest.raises(PermanentDeliveryError, match="'private_key' is not an RSA private key"):
        key.token_request(0)


def test_google_pubsub_publish_request() -> None:
    notifier = GooglePubSubNotifier(
        opts(
            ProviderType.GOOGLE_PUBSUB,
            address="proj",
            channel="topic",
            token=service_account(),
            headers={"b": "2", "a": "1"},
        )
    )
    event = make_event()
    request = notifier.publish_request(event, "ya29.token")
    assert request.url == "https://pubsub.googleapis.com/v1/projects/proj/topics/topic:publish"
    assert request.headers["Authorization"] == "Bearer ya29.token"
    body = json.loads(request.body)
    assert body == {
        "messages": [
            {"data": base64.b64encode(event.to_go_json()).decode(), "attributes": {"a": "1", "b": "2"}}
        ]
    }
    no_attrs = GooglePubSubNotifier(
        opts(ProviderType.GOOGLE_PUBSUB, address="proj", channel="topic", token=service_account())
    )
    assert "attributes" not in json.loads(no_attrs.publish_request(event, "t").body)["messages"][0]


def test_google_pubsub_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
    notifier = GooglePubSubNotifier(opts(ProviderType.GOOGLE_PUBSUB, address="proj", channel="topic"))
    request = notifier.publish_request(make_event(), None)
    assert request.url == "http://127.0.0.1:8085/v1/projects/proj/topics/topic:publish"
    assert "Authorization" not in request.headers


def test_eventhub_sas_token_matches_azure_algorithm() -> None:
    """The Service Bus SAS: HMAC-SHA256(key, quote_plus(uri) + '\\n' + expiry), base64, URL-encoded."""
    token = sas_token("https://ns.servicebus.windows.net/hub", "send", "c2VjcmV0", now=1000)
    uri = quote_plus("https://ns.servicebus.windows.net/hub")
    digest = hmac.new(b"c2VjcmV0", f"{uri}\n4600".encode(), hashlib.sha256).digest()
    signature = quote_plus(base64.b64encode(digest).decode())
    assert token == f"SharedAccessSignature sr={uri}&sig={signature}&se=4600&skn=send"


def test_eventhub_connection_string_and_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    cs = ConnectionString.parse(
        "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=abc=;EntityPath=hub"
    )
    assert (cs.base, cs.key_name, cs.key, cs.entity) == (
        "https://myns.servicebus.windows.net",
        "send",
        "abc=",
        "hub",
    )
    assert "abc=" not in repr(cs)
    assert namespace_base("myns") == "https://myns.servicebus.windows.net"
    assert namespace_base("myns.servicebus.windows.net") == "https://myns.servicebus.windows.net"
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "https://login.chinacloudapi.cn/")
    assert namespace_base("myns") == "https://myns.servicebus.chinacloudapi.cn"
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.us/")
    assert namespace_base("myns") == "https://myns.servicebus.usgovcloudapi.net"


def test_eventhub_jwt_request() -> None:
    notifier = AzureEventHubNotifier(
        opts(ProviderType.AZURE_EVENT_HUB, address="hub", channel="myns", token="eyJ.jwt")
    )
    request = notifier.build_request(make_event(), now=0)
    assert request.url == "https://myns.servicebus.windows.net/hub/messages?timeout=60&api-version=2014-01"
    assert request.headers["Authorization"] == "Bearer eyJ.jwt"
    assert request.body == make_event().to_go_json()


def alert(uid: str = "alert-uid-1") -> Alert:
    return Alert.model_validate(
        {
            "metadata": {"name": "webapp", "namespace": "apps", "uid": uid},
            "spec": {
                "providerRef": {"name": "otel"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        }
    )


def test_otel_trace_id_and_revision() -> None:
    """Reference §4.4: trace id = first 16 bytes of SHA-256('<alertUID>:<revision>')."""
    assert trace_id("u", "r") == hashlib.sha256(b"u:r").digest()[:16].hex()
    assert (
        trace_revision({"app-version": "1.2.3", "oci-digest": "sha256:abc", "revision": "x"})
        == "1.2.3@sha256:abc"
    )
    assert trace_revision({"revision": "main@sha1:1"}) == "main@sha1:1"
    assert trace_revision({"app-version": "1"}) == "unknown"


def test_otel_payload() -> None:
    event = make_event(
        severity="error", message="health check failed", metadata={"revision": "r1", "zone": "eu"}
    )
    trace = build_trace(
        event, alert(), span_id=bytes.fromhex("0102030405060708"), end_ns=1_767_323_046 * 10**9
    )
    [resource_spans] = trace.resource_spans
    assert [(a.key, a.value.string_value) for a in resource_spans.resource.attributes] == [
        ("service.instance.id", "alert-uid-1"),
        ("service.name", "apps/webapp"),
        ("service.namespace", "apps"),
    ]
    [scope_spans] = resource_spans.scope_spans
    assert scope_spans.scope.name == "flux:notification-controller"
    [span] = scope_spans.spans
    assert span.trace_id == hashlib.sha256(b"alert-uid-1:r1").digest()[:16]
    assert span.span_id.hex() == "0102030405060708"
    assert span.name == "Kustomization: flux-system/podinfo"
    assert span.start_time_unix_nano == 1_767_323_045 * 10**9
    assert (span.status.code, span.status.message) == (2, "health check failed")
    keys = [a.key for a in span.attributes]
    assert keys == ["object.uid", "object.kind", "object.name", "object.namespace", "revision", "zone"]
    ok = build_trace(make_event(), alert(), span_id=b"\x01" * 8, end_ns=0)
    status = ok.resource_spans[0].scope_spans[0].spans[0].status
    assert (status.code, status.message) == (1, "")


def test_otel_auth_headers_follow_flux_quirks() -> None:
    """Reference §4.1: an Authorization header only when the Secret has headers (and none is set)."""
    url = "https://otel.example.com/v1/traces"
    plain = OTELNotifier(opts(ProviderType.OTEL, address=url, token="tok"))
    assert "Authorization" not in plain.headers
    bearer = OTELNotifier(opts(ProviderType.OTEL, address=url, token="tok", headers={"X-A": "1"}))
    assert bearer.headers["Authorization"] == "Bearer tok"
    basic = OTELNotifier(
        opts(ProviderType.OTEL, address=url, username="u", password="pw", headers={"X-A": "1"})
    )
    assert basic.headers["Authorization"] == "Basic " + base64.b64encode(b"u:pw").decode()
    kept = OTELNotifier(
        opts(ProviderType.OTEL, address=url, token="tok", headers={"Authorization": "Custom x"})
    )
    assert kept.headers["Authorization"] == "Custom x"
    proxied = OTELNotifier(
        opts(
            ProviderType.OTEL, address=url, username="u", token="t/k", proxy=SecretValue("http://proxy:3128")
        )
    )
    assert proxied.proxy == "http://u:t%2Fk@proxy:3128"
    assert not plain.should_send(
        make_event(involvedObject={"kind": "HelmRepository", "name": "n", "namespace": "ns"})
    )


# ----------------------------------------------------------------------------------------------------
# never crash on any configuration (checklist: bad input never escapes as a library exception)
# ----------------------------------------------------------------------------------------------------

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
