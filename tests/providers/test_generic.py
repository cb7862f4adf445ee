"""Generic webhook (the event's Go JSON, optional headers from the Secret): its conformance case."""

from __future__ import annotations

from tests.providers.case import ProviderCase
from tests.providers.support import SAMPLE_GO_JSON, one
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_generic(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/hook/GENERICSECRET"
    assert req.headers["gotk-component"] == "source-controller"
    assert req.headers["X-Api-Key"] == "generic-canary-header"
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == SAMPLE_GO_JSON
    assert "X-Signature" not in req.headers


CASES: list[ProviderCase] = [
    ProviderCase(
        type="generic",
        spec={},
        secret={"address": "{url}/hook/GENERICSECRET", "headers": "X-Api-Key: generic-canary-header\n"},
        expect=expect_generic,
        canaries=["generic-canary-header", "{url}/hook/GENERICSECRET"],
    ),
]


def test_a_short_address_path_is_a_word_not_a_mask_and_a_webhook_path_is() -> None:
    """The address tail is masked as a credential only from ``ADDRESS_PART_MIN`` characters: a Provider at
    ``…/fail`` made every error read ``request *****ed with status code 500``."""
    from notification_controller.api.provider import ProviderType
    from notification_controller.outbound.client import masked
    from tests.providers.support import opts

    short = opts(ProviderType.GENERIC, address="http://sink.local/fail")
    assert (
        masked("request failed with status code 500", short.masks()) == "request failed with status code 500"
    )
    hook = "services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX"
    webhook = opts(ProviderType.GENERIC, address=f"https://hooks.example.com/{hook}")
    assert hook not in masked(f"POST https://hooks.example.com/{hook}: 500 echo {hook}", webhook.masks())
