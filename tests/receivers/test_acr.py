"""The acr (no authentication; the payload shape) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json

from tests.receivers.case import (
    ReceiverCase,
    plain,
)
from tests.receivers.support import assert_registry_payloads

# ---- conformance case ----------------------------------------------------------------------------


ACR_BODY = json.dumps(
    {
        "id": "cb8c3971-9adc-488b-bdd8-43cbb4974ff5",
        "timestamp": "2026-01-01T00:00:00Z",
        "action": "push",
        "target": {
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "size": 524,
            "digest": "sha256:80f0d5c8",
            "repository": "webapp",
            "tag": "v1",
        },
        "request": {"id": "3cbb6949", "host": "myregistry.azurecr.io", "method": "PUT"},
    }
).encode()


CASE = ReceiverCase("acr", plain(ACR_BODY), bad_payload=plain(b'{"target":[]}'))


# ---- the verifier --------------------------------------------------------------------------------


async def test_payload_shapes() -> None:
    """reference §5.3: the payload shape; Go leniency kept (unknown fields ignored, case-insensitive names)."""
    await assert_registry_payloads(
        "acr", ACR_BODY, [b"", b'{"action":1}', b'{"target":{"tag":true}}', b"NaN"]
    )
