"""The bitbucket (Bitbucket Server, X-Hub-Signature) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json

from tests.receivers.case import (
    Env,
    ReceiverCase,
    Request,
    signature_forgeries,
)
from tests.receivers.support import serve
from tests.support.receiver_kit import (
    TOKEN,
    github_signature,
    make_receiver,
)

# ---- conformance case ----------------------------------------------------------------------------


BITBUCKET_PUSH = json.dumps(
    {"eventKey": "repo:refs_changed", "changes": [{"refId": "refs/heads/main"}]}
).encode()


def _bitbucket(env: Env) -> Request:
    return {
        "Content-Type": "application/json; charset=utf-8",
        "X-Event-Key": "repo:refs_changed",
        "X-Request-Id": "d5b1a5a8-6a3c-4ac0-a4a6-5c3fd5bb52f1",
        "X-Hub-Signature": github_signature(env.token.encode(), BITBUCKET_PUSH),
    }, BITBUCKET_PUSH


CASE = ReceiverCase(
    "bitbucket",
    _bitbucket,
    signature_forgeries(_bitbucket, "X-Hub-Signature"),
    events=("X-Event-Key", "repo:refs_changed", "pr:opened"),
)


# ---- the verifier --------------------------------------------------------------------------------


BITBUCKET_REAL_PUSH = json.dumps(
    {
        "eventKey": "repo:refs_changed",
        "date": "2026-01-01T00:00:00+0000",
        "actor": {"name": "admin"},
        "repository": {"slug": "webapp", "project": {"key": "ORG"}},
        "changes": [
            {"ref": {"id": "refs/heads/main"}, "fromHash": "0" * 40, "toHash": "1" * 40, "type": "UPDATE"}
        ],
    }
).encode()


async def test_bitbucket_server_hmac_and_ping() -> None:
    """Checklist A12: valid / invalid ``X-Hub-Signature: sha256=``; ``diagnostics:ping`` → 200 without patch."""
    receiver, secret = make_receiver("bitbucket", events=["repo:refs_changed"])
    h, path = await serve(receiver, secret)
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Event-Key": "repo:refs_changed",
        "X-Request-Id": "7b0f2ff3",
        "X-Hub-Signature": github_signature(TOKEN.encode(), BITBUCKET_REAL_PUSH),
    }
    async with h:
        assert (await h.post(path, BITBUCKET_REAL_PUSH, headers))[0] == 200
        wrong = {
            **headers,
            "X-Request-Id": "x2",
            "X-Hub-Signature": github_signature(b"other", BITBUCKET_REAL_PUSH),
        }
        assert (await h.post(path, BITBUCKET_REAL_PUSH, wrong))[0] == 400
        ping = b'{"test": true}'
        ping_headers = {
            **headers,
            "X-Event-Key": "diagnostics:ping",
            "X-Request-Id": "p1",
            "X-Hub-Signature": github_signature(TOKEN.encode(), ping),
        }
        assert (await h.post(path, ping, ping_headers))[0] == 200
        assert len(h.cluster.annotate_calls) == 1
        assert h.metric("notification_receiver_requests_total", type="bitbucket", outcome="ping") == 1
