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
