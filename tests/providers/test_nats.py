"""NATS (publish to a subject): its conformance case and the pure tests of its request builder.

NATS is not HTTP: ``tests/integration/test_git_providers.py`` delivers it to a real nats-server.
"""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.nats import NATSNotifier
from tests.providers.case import ProviderCase
from tests.providers.git_support import config_error, opts

# ---- conformance case ----------------------------------------------------------------------------

CASES: list[ProviderCase] = [
    ProviderCase(
        type="nats",
        spec={"address": "nats://127.0.0.1:4222", "channel": "flux.events"},
        secret={"username": "flux", "password": "nats-canary-password"},
        http=False,
        canaries=["nats-canary-password"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"channel": "s"}, "NATS server (address) cannot be empty"),
        ({"address": "nats://127.0.0.1:4222"}, "NATS subject (channel) cannot be empty"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1/§4.2: bad or missing configuration is a ProviderConfigError with Flux's message."""
    assert message in config_error(ProviderType.NATS, **kw)


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
