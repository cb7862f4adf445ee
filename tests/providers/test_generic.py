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
