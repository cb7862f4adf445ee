"""Google Cloud Pub/Sub (REST publish with a service-account token): its conformance case and the pure tests of
its request builder.

``tests/integration/test_git_providers.py`` delivers it for real, its API and token endpoints redirected
with ``NC_GOOGLE_PUBSUB_API_URL`` and the key's ``token_uri``.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qs

import jwt
import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.errors import PermanentDeliveryError
from notification_controller.providers.googlepubsub import GooglePubSubNotifier, ServiceAccountKey
from tests.providers.case import ProviderCase
from tests.providers.git_support import RSA_PEM, config_error, make_event, opts

# ---- conformance case ----------------------------------------------------------------------------

SERVICE_ACCOUNT = json.dumps(
    {
        "type": "service_account",
        "project_id": "my-project",
        "private_key_id": "kid-1",
        "private_key": "-----BEGIN PRIVATE KEY-----\nnot-used-by-the-kit\n-----END PRIVATE KEY-----\n",
        "client_email": "flux@my-project.iam.gserviceaccount.com",
        "token_uri": "{url}/token",
    }
)

CASES: list[ProviderCase] = [
    ProviderCase(
        type="googlepubsub",
        spec={"address": "my-project", "channel": "flux-events"},
        secret={"token": SERVICE_ACCOUNT},
        http=False,
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"channel": "t", "token": "{}"}, "GCP project ID cannot be empty"),
        ({"address": "p", "token": "{}"}, "GCP Pub/Sub topic ID cannot be empty"),
        ({"address": "p", "channel": "t", "token": "not json"}, "not valid JSON"),
        ({"address": "p", "channel": "t", "token": '{"type":"authorized_user"}'}, "only 'service_account'"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.GOOGLE_PUBSUB, **kw)


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
