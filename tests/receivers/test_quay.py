"""The quay (no authentication; the payload shape) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json

from tests.receivers.case import (
    ReceiverCase,
    plain,
)
from tests.receivers.support import assert_registry_payloads

# ---- conformance case ----------------------------------------------------------------------------


QUAY_BODY = json.dumps(
    {
        "name": "webapp",
        "repository": "org/webapp",
        "namespace": "org",
        "docker_url": "quay.io/org/webapp",
        "homepage": "https://quay.io/repository/org/webapp",
        "updated_tags": ["latest", "v1.0.0"],
    }
).encode()


CASE = ReceiverCase("quay", plain(QUAY_BODY), bad_payload=plain(b'{"updated_tags":"latest"}'))


# ---- the verifier --------------------------------------------------------------------------------


async def test_payload_shapes() -> None:
    """reference §5.3: the payload shape; Go leniency kept (unknown fields ignored, case-insensitive names)."""
    await assert_registry_payloads("quay", QUAY_BODY, [b"", b'{"docker_url":["x"]}', b'{"updated_tags":[1]}'])
