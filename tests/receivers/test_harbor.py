"""The harbor (the Authorization header) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json

from tests.receivers.case import (
    Env,
    ReceiverCase,
    Request,
    flip_last,
    mutate_header,
    resign,
    with_headers,
)
from tests.receivers.support import serve
from tests.support.receiver_kit import (
    IMAGE,
    TOKEN,
    make_receiver,
)

# ---- conformance case ----------------------------------------------------------------------------


HARBOR_PUSH = json.dumps(
    {
        "type": "PUSH_ARTIFACT",
        "event_data": {"resources": [{"tag": "v1.0.0"}], "repository": {"name": "webapp"}},
    }
).encode()


def _harbor(env: Env) -> Request:
    return {"Content-Type": "application/json", "Authorization": env.token}, HARBOR_PUSH


CASE = ReceiverCase(
    "harbor",
    _harbor,
    {
        "wrong": mutate_header(_harbor, "Authorization", flip_last),
        "missing": with_headers(_harbor, Authorization=None),
        "truncated": mutate_header(_harbor, "Authorization", lambda v: v[:-1]),
        "other-key": resign(_harbor, "Authorization"),
    },
)


# ---- the verifier --------------------------------------------------------------------------------


async def test_harbor_authorization_header() -> None:
    """Checklist A13: matches / differs / missing (no scheme added or stripped)."""
    receiver, secret = make_receiver(
        "harbor", resources=[{"apiVersion": IMAGE, "kind": "ImageRepository", "name": "webapp"}]
    )
    h, path = await serve(receiver, secret)
    body = json.dumps(
        {
            "type": "PUSH_ARTIFACT",
            "occur_at": 1767225600,
            "operator": "admin",
            "event_data": {
                "resources": [
                    {
                        "digest": "sha256:7d1e",
                        "tag": "v1.0.0",
                        "resource_url": "harbor.example.com/library/webapp:v1.0.0",
                    }
                ],
                "repository": {"name": "webapp", "namespace": "library"},
            },
        }
    ).encode()
    async with h:
        assert (await h.post(path, body, {"Content-Type": "application/json", "Authorization": TOKEN}))[
            0
        ] == 200
        assert (await h.post(path, body, {"Authorization": f"Bearer {TOKEN}"}))[0] == 400
        assert (await h.post(path, body, {}))[0] == 400
        assert h.cluster.annotated() == [("ImageRepository", "default", "webapp")]
