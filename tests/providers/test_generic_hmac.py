"""Generic webhook signed with HMAC-SHA256 (``X-Signature``): its conformance case."""

from __future__ import annotations

import hashlib
import hmac

from tests.providers.case import ProviderCase
from tests.providers.support import SAMPLE_GO_JSON, one
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_generic_hmac(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.path == "/hook/HMACSECRET"
    assert req.body == SAMPLE_GO_JSON
    digest = hmac.new(b"hmac-canary-key", SAMPLE_GO_JSON, hashlib.sha256).hexdigest()
    assert req.headers["X-Signature"] == f"sha256={digest}"


CASES: list[ProviderCase] = [
    ProviderCase(
        type="generic-hmac",
        spec={"address": "{url}/hook/HMACSECRET"},
        secret={"token": "hmac-canary-key"},
        expect=expect_generic_hmac,
        canaries=["hmac-canary-key"],
    ),
]
