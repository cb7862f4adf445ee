"""What several receiver types share, in the formats real senders use (reference §5.3, checklist A9).

An empty token never authenticates (gitlab, harbor, github, generic-hmac); every signature and token type
compares with ``hmac.compare_digest`` on bytes. Each type's own formats (test vectors, pings, encodings,
refusals) are in its module, ``tests/receivers/test_<type>.py``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from notification_controller.lib.clock import ManualClock
from notification_controller.receivers import registry
from notification_controller.receivers.base import HookRequest, RawHeaders, VerifyContext
from tests.receivers.support import serve
from tests.receivers.test_gitlab import GITLAB_REAL_PUSH
from tests.receivers.test_nexus import NEXUS_BODY
from tests.support.receiver_kit import (
    TOKEN,
    github_signature,
    make_receiver,
)


async def test_empty_token_never_authenticates() -> None:
    """Pinned: with an empty ``token`` Flux matched a missing header (gitlab/harbor) or skipped the MAC (github)."""
    for type_, headers in (
        ("gitlab", {"X-Gitlab-Event": "Push Hook"}),
        ("harbor", {}),
        ("github", {"X-GitHub-Event": "push"}),
        ("generic-hmac", {"X-Signature": github_signature(b"", GITLAB_REAL_PUSH)}),
    ):
        receiver, secret = make_receiver(type_, token="")
        h, path = await serve(receiver, secret)
        async with h:
            status, _, _ = await h.post(
                path, GITLAB_REAL_PUSH, {"Content-Type": "application/json", **headers}
            )
            assert status == 400, type_
            assert h.cluster.annotate_calls == []


# ---- compare_digest everywhere --------------------------------------------------------------------------


async def test_every_comparison_uses_compare_digest_on_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checklist A9: github, bitbucket, nexus, generic-hmac AND the plain-token types use ``compare_digest``."""
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    body = NEXUS_BODY
    requests: dict[str, list[tuple[bytes, bytes]]] = {
        "github": [
            (b"Content-Type", b"application/json"),
            (b"X-GitHub-Event", b"push"),
            (b"X-Hub-Signature-256", github_signature(TOKEN.encode(), body).encode()),
        ],
        "bitbucket": [
            (b"Content-Type", b"application/json"),
            (b"X-Event-Key", b"repo:refs_changed"),
            (b"X-Hub-Signature", github_signature(TOKEN.encode(), body).encode()),
        ],
        "generic-hmac": [(b"X-Signature", github_signature(TOKEN.encode(), body, "sha512").encode())],
        "nexus": [
            (b"X-Nexus-Webhook-Signature", hmac.new(TOKEN.encode(), body, hashlib.sha1).hexdigest().encode())
        ],
        "gitlab": [(b"X-Gitlab-Token", TOKEN.encode()), (b"X-Gitlab-Event", b"Push Hook")],
        "harbor": [(b"Authorization", TOKEN.encode())],
    }
    for type_, headers in requests.items():
        calls.clear()
        receiver, secret = make_receiver(type_)
        req = HookRequest("POST", "/hook/x", RawHeaders(headers), body)
        await registry.verify(req, VerifyContext(receiver, secret, ManualClock()))
        assert len(calls) == 1, type_
        assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in calls), type_
