"""Matrix (m.room.message PUT with a Go-exact transaction id): its conformance case and the pure tests of its
request builder.
"""

from __future__ import annotations

import hashlib

from notification_controller.api.provider import ProviderType
from notification_controller.providers.matrix import MatrixNotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    OBJ,
    SAMPLE_GO_JSON,
    SAMPLE_OBJ,
    SUMMARY,
    assert_json_post,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_matrix(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    txn = hashlib.sha1(SAMPLE_GO_JSON, usedforsecurity=False).hexdigest()
    assert req.headers["Authorization"] == "Bearer matrix-canary-token"
    body = {
        "body": f"💫 {SAMPLE_OBJ}\n{MSG}\n- revision: {SAMPLE_REVISION}\n- summary: {SUMMARY}\n",
        "msgtype": "m.text",
    }
    assert_json_post(
        req, f"/_matrix/client/r0/rooms/!room:example.org/send/m.room.message/{txn}", body, "PUT"
    )


CASES: list[ProviderCase] = [
    ProviderCase(
        type="matrix",
        spec={"address": "{url}", "channel": "!room:example.org"},
        secret={"token": "matrix-canary-token"},
        expect=expect_matrix,
        canaries=["matrix-canary-token"],
        final="PUT",
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


def test_matrix_put_with_go_exact_txn_id() -> None:
    """Reference §4.1/§9: txn id = SHA-1 of the event's Go JSON, including Go's HTML escaping."""
    ev = event(message="a <b> & c", metadata={})
    go_event = (
        b'{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps","uid":"uid-1"},'
        b'"severity":"error","timestamp":"2026-01-02T03:04:05Z","message":"a \\u003cb\\u003e \\u0026 c",'
        b'"reason":"HealthCheckFailed","reportingController":"kustomize-controller"}'
    )
    txn = hashlib.sha1(go_event, usedforsecurity=False).hexdigest()
    n = MatrixNotifier(opts(ProviderType.MATRIX, address="https://m.org", channel="!r:m.org", token="mt"))
    req = n.build_request(ev)
    assert req.method == "PUT"
    assert req.url == f"https://m.org/_matrix/client/r0/rooms/!r:m.org/send/m.room.message/{txn}"
    assert req.headers["Authorization"] == "Bearer mt"
    assert req.body == go({"body": f"🚨 {OBJ}\na \u003cb\u003e \u0026 c\n", "msgtype": "m.text"})
