"""What the receiver type modules share: a receiver served by the real app, the registries' payload checks."""

from __future__ import annotations

from typing import Any

import jwt

from notification_controller.api.receiver import Receiver
from notification_controller.server.receivers import ReceiverServerSettings
from tests.support.receiver_kit import IMAGE, Harness, make_receiver


async def serve(
    receiver: Receiver, secret: Any, settings: ReceiverServerSettings | None = None
) -> tuple[Harness, str]:
    harness = Harness(settings)
    path = harness.add(receiver, secret)
    harness.add_targets()
    harness.cluster.add(IMAGE, "ImageRepository", "default", "other-app", labels={"registry": "gar"})
    return harness, path


async def assert_registry_payloads(type_: str, body: bytes, bad: list[bytes]) -> None:
    """A registry type without authentication: ``body`` and ``null`` (Go accepts it) patch; each of ``bad`` is 400."""
    receiver, secret = make_receiver(
        type_, resources=[{"apiVersion": IMAGE, "kind": "ImageRepository", "name": "webapp"}]
    )
    h, path = await serve(receiver, secret)
    async with h:
        assert (await h.post(path, body, {"Content-Type": "application/json"}))[0] == 200
        assert (await h.post(path, b"null", {"Content-Type": "application/json"}))[0] == 200, (
            "Go accepts null"
        )
        for payload in bad:
            assert (await h.post(path, payload, {"Content-Type": "application/json"}))[0] == 400, payload
        assert len(h.cluster.annotate_calls) == 2


def hs256_token(claims: dict[str, Any]) -> str:
    """A token signed with a shared secret (HS256, with an RSA key's ``kid``): the OIDC types must refuse it."""
    return jwt.encode(
        claims, "a-shared-secret-that-is-long-enough-for-hs256", algorithm="HS256", headers={"kid": "rsa-1"}
    )
