"""Generic webhook (the event's Go JSON, optional headers from the Secret): its conformance case.

``CASES`` is run by the conformance kit (``tests/conformance/test_provider_conformance.py``) against a real
local server; its ``expect`` checks the request against the reference, the expected bytes written out by
hand. The builder has no other unit test: the event's Go JSON is pinned by ``test_event_model.py``.
"""

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
