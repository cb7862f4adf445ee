"""Azure Event Hubs (REST with a SAS or a JWT instead of AMQP): its conformance case and the pure tests of its
request builder.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any
from urllib.parse import parse_qs, quote_plus

import pytest

from notification_controller.api.provider import Provider, ProviderType
from notification_controller.errors import FailureReason, PermanentDeliveryError
from notification_controller.outbound.identity import (
    AZURE_HOSTS,
    AZURE_SCOPE_DEVOPS,
    AZURE_SCOPE_EVENT_HUBS,
    WorkloadIdentity,
    cloud_endpoint,
)
from notification_controller.providers.azureeventhub import (
    AzureEventHubNotifier,
    ConnectionString,
    namespace_base,
    sas_token,
)
from tests.providers.case import ProviderCase
from tests.providers.git_support import config_error, make_event, only, opts
from tests.providers.support import SAMPLE_GO_JSON
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_azureeventhub(requests: list[CapturedRequest]) -> None:
    req = only(requests, "POST")
    assert req.path == "/flux-events/messages"
    assert req.headers["Content-Type"] == "application/atom+xml;type=entry;charset=utf-8"
    assert req.body == SAMPLE_GO_JSON
    scheme, _, fields = req.headers["Authorization"].partition(" ")
    assert scheme == "SharedAccessSignature"
    parts = {k: v[0] for k, v in parse_qs(fields, keep_blank_values=True).items()}
    resource = quote_plus(f"https://{req.headers['Host']}/flux-events")
    assert quote_plus(parts["sr"]) == resource
    assert parts["skn"] == "flux-sender"
    string_to_sign = f"{resource}\n{parts['se']}".encode()
    digest = hmac.new(b"eventhub-canary-key", string_to_sign, hashlib.sha256).digest()
    assert parts["sig"] == base64.b64encode(digest).decode()


CASES: list[ProviderCase] = [
    ProviderCase(
        type="azureeventhub",
        spec={},
        secret={
            "address": "Endpoint={url}/;SharedAccessKeyName=flux-sender;SharedAccessKey=eventhub-canary-key;"
            "EntityPath=flux-events"
        },
        final="POST /flux-events/messages",
        expect=expect_azureeventhub,
        canaries=["eventhub-canary-key"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "invalid authentication options: endpoint URL cannot be empty"),
        (
            {
                "address": "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=h",
                "token": "jwt",
            },
            "invalid authentication options: jwt token and SAS authentication cannot be set at the same time",
        ),
        (
            {"address": "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v"},
            "connection string does not contain an EntityPath",
        ),
        ({"address": "hub", "token": "jwt"}, "namespace (spec.channel) cannot be empty"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.AZURE_EVENT_HUB, **kw)


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


# ---- where the controller's workload identity token may go (issue 23 item 6) -----------------------


@pytest.mark.parametrize(
    ("channel", "base"),
    [
        ("mynamespace", "https://mynamespace.servicebus.windows.net"),
        ("MyNamespace-01", "https://MyNamespace-01.servicebus.windows.net"),
        ("mynamespace.servicebus.windows.net", "https://mynamespace.servicebus.windows.net"),
        ("mynamespace.servicebus.chinacloudapi.cn", "https://mynamespace.servicebus.chinacloudapi.cn"),
        ("mynamespace.SERVICEBUS.usgovcloudapi.net", "https://mynamespace.SERVICEBUS.usgovcloudapi.net"),
    ],
)
def test_workload_identity_namespace_forms(channel: str, base: str) -> None:
    """The legitimate forms build Azure's own URL (``channel: mynamespace`` → ``*.servicebus.windows.net``)."""
    notifier = AzureEventHubNotifier(opts(ProviderType.AZURE_EVENT_HUB, address="hub", channel=channel))
    assert notifier.uses_workload_identity
    request = notifier.build_request(make_event(), now=0, bearer="minted")
    assert request.url == f"{base}/hub/messages?timeout=60&api-version=2014-01"
    assert cloud_endpoint(notifier.base, AZURE_HOSTS[AZURE_SCOPE_EVENT_HUBS])


@pytest.mark.parametrize(
    "channel",
    [
        "localhost:8080/",  # was https://localhost:8080/.servicebus.windows.net
        "127.0.0.1:9",
        "attacker.example",
        "evil.com/x.servicebus.windows.net",
        "a.b.servicebus.windows.net",  # two labels: not one namespace
        "ns.servicebus.attacker.example",
        "ns.servicebus.windows.net.attacker.example",
        "ns.servicebus.windows.net:444",
        "user@ns.servicebus.windows.net",
        "-ns",
        "",
    ],
)
def test_workload_identity_refuses_other_hosts_at_construction(channel: str) -> None:
    """With workload identity, anything but a namespace of Azure's domains makes the Provider not Ready."""
    message = config_error(ProviderType.AZURE_EVENT_HUB, address="hub", channel=channel)
    assert "spec.channel" in message
    if channel:
        assert "--workload-identity-custom-endpoints" in message


def test_tenant_credentials_go_where_the_tenant_says() -> None:
    """A static JWT from the tenant's own Secret may go to the URL the tenant names (Flux's behaviour)."""
    notifier = AzureEventHubNotifier(
        opts(ProviderType.AZURE_EVENT_HUB, address="hub", channel="http://127.0.0.1:9", token="eyJ.jwt")
    )
    assert not notifier.uses_workload_identity
    assert notifier.build_request(make_event(), now=0).url.startswith("http://127.0.0.1:9/hub/messages")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://ns.servicebus.windows.net", True),
        ("https://ns.servicebus.windows.net:443/hub", True),
        ("https://NS.ServiceBus.Windows.Net", True),
        ("http://ns.servicebus.windows.net", False),  # never in clear text
        ("https://ns.servicebus.windows.net:8443", False),
        ("https://u:p@ns.servicebus.windows.net", False),
        ("https://servicebus.windows.net", False),  # no namespace label
        ("https://a.b.servicebus.windows.net", False),
        ("https://ns.servicebus.windows.net.evil.example", False),
        ("https://127.0.0.1:8080", False),
        ("https://[::1]:8080", False),
        ("https://ns.servicebus.windows.net:99999", False),  # invalid port
    ],
)
def test_cloud_endpoint(url: str, allowed: bool) -> None:
    assert cloud_endpoint(url, AZURE_HOSTS[AZURE_SCOPE_EVENT_HUBS]) is allowed


def test_devops_hosts() -> None:
    hosts = AZURE_HOSTS[AZURE_SCOPE_DEVOPS]
    assert cloud_endpoint("https://dev.azure.com/org", hosts)
    assert cloud_endpoint("https://myorg.visualstudio.com/DefaultCollection", hosts)
    assert not cloud_endpoint("https://dev.azure.com.evil.example/org", hosts)
    assert not cloud_endpoint("https://x.dev.azure.com/org", hosts)  # an exact host, not a suffix
    assert not cloud_endpoint("https://devops.example.com/org", hosts)  # Azure DevOps Server: the flag


async def test_refused_destination_mints_nothing() -> None:
    """The destination is checked before the token endpoint is asked: no token exists to leak, and the
    error names the rule and the flag (never a token)."""
    identity = WorkloadIdentity(environ={"AZURE_AUTHORITY_HOST": "http://127.0.0.1:9/"})
    with pytest.raises(PermanentDeliveryError) as info:
        identity.require_destination(
            "http://u:p@127.0.0.1:8080/x?y", AZURE_HOSTS[AZURE_SCOPE_EVENT_HUBS], "spec.channel"
        )
    message = str(info.value)
    assert message.startswith("refusing to send a workload identity token to http://127.0.0.1:8080 ")
    assert "u:p" not in message and "--workload-identity-custom-endpoints" in message
    assert info.value.reason == "workload_identity" and info.value.failure is FailureReason.AUTH
    WorkloadIdentity(custom_endpoints=True).require_destination(
        "http://127.0.0.1:8080", AZURE_HOSTS[AZURE_SCOPE_EVENT_HUBS], "spec.channel"
    )
