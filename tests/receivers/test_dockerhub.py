"""The dockerhub (no authentication; the payload shape) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json

from tests.receivers.case import (
    ReceiverCase,
    plain,
)
from tests.receivers.support import assert_registry_payloads

# ---- conformance case ----------------------------------------------------------------------------


DOCKERHUB_BODY = json.dumps(
    {
        "push_data": {"pushed_at": 1417566161, "pusher": "trustedbuilder", "tag": "latest"},
        "repository": {"repo_url": "https://registry.hub.docker.com/u/org/webapp/", "name": "webapp"},
    }
).encode()


CASE = ReceiverCase("dockerhub", plain(DOCKERHUB_BODY), bad_payload=plain(b'{"push_data":{"tag":42}}'))


# ---- the verifier --------------------------------------------------------------------------------


async def test_payload_shapes() -> None:
    """reference §5.3: the payload shape; Go leniency kept (unknown fields ignored, case-insensitive names)."""
    await assert_registry_payloads(
        "dockerhub", DOCKERHUB_BODY, [b"", b"[]", b'{"repository":{"repo_url":1}}', b"{nope"]
    )
