"""The gitlab (X-Gitlab-Token) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

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
    TOKEN,
    make_receiver,
)

# ---- conformance case ----------------------------------------------------------------------------


GITLAB_PUSH = json.dumps({"object_kind": "push", "ref": "refs/heads/main"}).encode()


def _gitlab(env: Env) -> Request:
    return {
        "Content-Type": "application/json",
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Token": env.token,
        "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
    }, GITLAB_PUSH


CASE = ReceiverCase(
    "gitlab",
    _gitlab,
    {
        "wrong": mutate_header(_gitlab, "X-Gitlab-Token", flip_last),
        "missing": with_headers(_gitlab, X_Gitlab_Token=None),
        "truncated": mutate_header(_gitlab, "X-Gitlab-Token", lambda v: v[:-1]),
        "other-key": resign(_gitlab, "X-Gitlab-Token"),
    },
    events=("X-Gitlab-Event", "Push Hook", "Merge Request Hook"),
)


# ---- the verifier --------------------------------------------------------------------------------


GITLAB_REAL_PUSH = json.dumps(
    {
        "object_kind": "push",
        "event_name": "push",
        "ref": "refs/heads/main",
        "project": {"path_with_namespace": "org/webapp"},
    }
).encode()


async def test_gitlab_push_with_token() -> None:
    """reference §5.3 gitlab; checklist A10 (pinned: the Secret value is NOT trimmed)."""
    receiver, secret = make_receiver("gitlab", events=["Push Hook", "Tag Push Hook"])
    h, path = await serve(receiver, secret)
    headers = {
        "Content-Type": "application/json",
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Token": TOKEN,
        "X-Gitlab-Instance": "https://gitlab.com",
        "X-Gitlab-Event-UUID": "13792a34",
    }
    async with h:
        assert (await h.post(path, GITLAB_REAL_PUSH, headers))[0] == 200
        for bad in ("", "nope", TOKEN + "x", TOKEN.upper()):
            assert (
                await h.post(
                    path, GITLAB_REAL_PUSH, {**headers, "X-Gitlab-Token": bad, "X-Gitlab-Event-UUID": bad}
                )
            )[0] == 400
        assert len(h.cluster.annotate_calls) == 1

    newline, nsecret = make_receiver("gitlab", name="nl", token=TOKEN + "\n")
    h, path = await serve(newline, nsecret)
    async with h:
        assert (await h.post(path, GITLAB_REAL_PUSH, headers))[0] == 400, (
            "a trailing newline in the Secret never matches"
        )
        assert h.cluster.annotate_calls == []
