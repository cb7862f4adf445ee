"""The github (X-Hub-Signature-256, ping, form encoding) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from notification_controller.errors import VerificationError
from notification_controller.lib.clock import ManualClock
from notification_controller.receivers import registry
from notification_controller.receivers.base import HookRequest, RawHeaders, VerifyContext
from tests.receivers.case import (
    Env,
    ReceiverCase,
    Request,
    signature_forgeries,
)
from tests.receivers.support import serve
from tests.support.receiver_kit import (
    GIT,
    TOKEN,
    Harness,
    github_signature,
    make_receiver,
)

# ---- conformance case ----------------------------------------------------------------------------


GITHUB_PUSH = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "org/webapp"}}).encode()


def _github(env: Env) -> Request:
    sig = github_signature(env.token.encode(), GITHUB_PUSH)
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": sig,
    }, GITHUB_PUSH


CASE = ReceiverCase(
    "github",
    _github,
    signature_forgeries(_github, "X-Hub-Signature-256"),
    events=("X-GitHub-Event", "push", "issues"),
)


# ---- the verifier --------------------------------------------------------------------------------


GITHUB_SECRET = "It's a Secret to Everybody"


GITHUB_PAYLOAD = b"Hello, World!"


GITHUB_EXPECTED = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


PUSH = json.dumps(
    {
        "ref": "refs/heads/main",
        "before": "6113728f",
        "after": "59b20b8d",
        "repository": {"full_name": "org/webapp"},
    },
    indent=2,
).encode()


async def test_github_documented_test_vector() -> None:
    """docs.github.com "Validating webhook deliveries": the signature our helper (and GitHub) compute."""
    assert github_signature(GITHUB_SECRET.encode(), GITHUB_PAYLOAD) == "sha256=" + GITHUB_EXPECTED


async def test_github_test_vector_delivery_is_accepted() -> None:
    """Checklist A1 with GitHub's vector: one annotation patch."""
    receiver, secret = make_receiver("github", token=GITHUB_SECRET)
    h, path = await serve(receiver, secret)
    async with h:
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "d1",
            "X-Hub-Signature-256": "sha256=" + GITHUB_EXPECTED,
        }
        assert (await h.post(path, GITHUB_PAYLOAD, headers))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "default", "webapp")]


async def test_github_ping_answers_200_without_patch() -> None:
    """Pinned: ``ping`` (hook creation) is acknowledged even when not in spec.events; nothing is triggered."""
    receiver, secret = make_receiver("github", events=["push"])
    h, path = await serve(receiver, secret)
    ping = json.dumps(
        {"zen": "Design for failure.", "hook_id": 12345678, "hook": {"type": "Repository"}}
    ).encode()
    async with h:
        assert (await h.post(path, ping, _gh(ping, event="ping")))[0] == 200
        assert h.cluster.annotate_calls == []
        assert h.metric("notification_receiver_requests_total", type="github", outcome="ping") == 1
        bad = _gh(ping, event="ping")
        bad["X-Hub-Signature-256"] = github_signature(b"wrong", ping)
        assert (await h.post(path, ping, bad))[0] == 400, "a ping must be signed too"


async def test_github_form_encoded_delivery() -> None:
    """reference §5.3: x-www-form-urlencoded, payload = form field, MAC over the raw form body."""
    receiver, secret = make_receiver("github")
    h, path = await serve(receiver, secret)
    form = urlencode({"payload": PUSH.decode()}).encode()
    async with h:
        headers = _gh(form, **{"Content-Type": "application/x-www-form-urlencoded"})
        assert (await h.post(path, form, headers))[0] == 200
        headers["X-Hub-Signature-256"] = github_signature(TOKEN.encode(), PUSH)  # MAC of the payload: wrong
        assert (await h.post(path, form, headers))[0] == 400
        assert len(h.cluster.annotate_calls) == 1


def _gh(body: bytes, *, event: str = "push", delivery: str = "d-1", **extra: str) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TOKEN.encode(), body),
    }
    headers.update(extra)
    return headers


SIG = github_signature(TOKEN.encode(), PUSH)


SHA1 = github_signature(TOKEN.encode(), PUSH, "sha1")


HEX = SIG.removeprefix("sha256=")


@pytest.mark.parametrize(
    ("case", "headers", "expected"),
    [
        ("A1 valid", {"X-Hub-Signature-256": SIG}, 200),
        ("A2 empty", {"X-Hub-Signature-256": ""}, 400),
        ("A2 only prefix", {"X-Hub-Signature-256": "sha256="}, 400),
        ("A2 not hex", {"X-Hub-Signature-256": "sha256=" + "zz" * 32}, 400),
        ("A2 odd length", {"X-Hub-Signature-256": SIG[:-1]}, 400),
        ("A2 uppercase hex (pinned)", {"X-Hub-Signature-256": "sha256=" + HEX.upper()}, 400),
        ("A2 inner whitespace", {"X-Hub-Signature-256": "sha256= " + HEX}, 400),
        ("A2 outer whitespace (stripped by HTTP, as in Go)", {"X-Hub-Signature-256": " " + SIG + " "}, 200),
        ("A2 no '='", {"X-Hub-Signature-256": "sha256" + HEX}, 400),
        ("A2 unknown algo", {"X-Hub-Signature-256": "md5=" + HEX}, 400),
        ("A6 legacy sha1 only (pinned: accepted, as go-github)", {"X-Hub-Signature": SHA1}, 200),
        ("A6 sha1 inside the -256 header", {"X-Hub-Signature-256": SHA1}, 400),
        (
            "A7 -256 valid, legacy wrong",
            {"X-Hub-Signature-256": SIG, "X-Hub-Signature": "sha1=" + "0" * 40},
            200,
        ),
        (
            "A7 -256 wrong, legacy valid",
            {"X-Hub-Signature-256": "sha256=" + "0" * 64, "X-Hub-Signature": SHA1},
            400,
        ),
        ("A2 missing", {}, 400),
        ("B10 text/plain", {"X-Hub-Signature-256": SIG, "Content-Type": "text/plain"}, 400),
        (
            "B10 multipart",
            {"X-Hub-Signature-256": SIG, "Content-Type": "multipart/form-data; boundary=x"},
            400,
        ),
        (
            "B10 charset param ok",
            {"X-Hub-Signature-256": SIG, "Content-Type": "application/json; charset=utf-8"},
            200,
        ),
    ],
)
async def test_github_signature_header_rules(case: str, headers: dict[str, str], expected: int) -> None:
    """Checklist A2, A6, A7, B10 — each choice pinned (docs/receivers/README.md)."""
    receiver, secret = make_receiver("github")
    h, path = await serve(receiver, secret)
    base = {"Content-Type": "application/json", "X-GitHub-Event": "push"}
    async with h:
        status, _, _ = await h.post(path, PUSH, {**base, **headers})
        assert status == expected, case
        assert len(h.cluster.annotate_calls) == (1 if expected == 200 else 0)


async def test_github_body_changes_are_detected() -> None:
    """Checklist A3 (one byte changed) and A4 (re-serialised JSON): the MAC is over the raw bytes."""
    receiver, secret = make_receiver("github")
    h, path = await serve(receiver, secret)
    async with h:
        changed = PUSH.replace(b"main", b"mait")
        assert (await h.post(path, changed, _gh(PUSH)))[0] == 400
        compact = json.dumps(json.loads(PUSH), separators=(",", ":")).encode()
        assert compact != PUSH
        assert (await h.post(path, compact, _gh(PUSH)))[0] == 400
        assert h.cluster.annotate_calls == []


async def test_github_duplicate_signature_header_is_refused() -> None:
    """Checklist A8 (pinned): two values of an authentication header are ambiguous → 400, no 500."""
    receiver, secret = make_receiver("github")
    _, path = await serve(receiver, secret)
    req = HookRequest(
        "POST",
        path,
        RawHeaders(
            [
                (b"Content-Type", b"application/json"),
                (b"X-Hub-Signature-256", SIG.encode()),
                (b"X-Hub-Signature-256", SIG.encode()),
                (b"X-GitHub-Event", b"push"),
            ]
        ),
        PUSH,
    )
    with pytest.raises(VerificationError, match="repeated"):
        await registry.verify(req, VerifyContext(receiver, secret, ManualClock()))


@pytest.mark.parametrize(
    "value", [SIG.encode() + b" ", b"\xc3\xa9\xff", b"sha256=\xc3\xa9\xff", SIG.encode() + b"\x00"]
)
async def test_github_malformed_signature_bytes_are_400_not_500(value: bytes) -> None:
    """Checklist A2/A5 at the verifier: raw non-ASCII / invalid UTF-8 / padded bytes → VerificationError."""
    receiver, secret = make_receiver("github")
    headers = RawHeaders(
        [
            (b"Content-Type", b"application/json"),
            (b"X-Hub-Signature-256", value),
            (b"X-GitHub-Event", b"push"),
        ]
    )
    with pytest.raises(VerificationError):
        await registry.verify(
            HookRequest("POST", "/hook/x", headers, PUSH), VerifyContext(receiver, secret, ManualClock())
        )


async def test_cel_filters_see_the_github_payload() -> None:
    """reference §5.5: github exposes the ``payload`` as ``req``; the Flux doc per-resource filter example."""
    resources = [
        {
            "apiVersion": GIT,
            "kind": "GitRepository",
            "name": "*",
            "matchLabels": {"team": "a"},
            "filter": "res.metadata.labels['environment'] == 'production'",
        },
    ]
    receiver, secret = make_receiver(
        "github", resources=resources, resource_filter="req.ref == 'refs/heads/main'"
    )
    h = Harness()
    path = h.add(receiver, secret)
    h.cluster.add(GIT, "GitRepository", "default", "prod", labels={"team": "a", "environment": "production"})
    h.cluster.add(GIT, "GitRepository", "default", "stage", labels={"team": "a", "environment": "staging"})
    async with h:
        assert (await h.post(path, PUSH, _gh(PUSH)))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "default", "prod")]
        dev = PUSH.replace(b"refs/heads/main", b"refs/heads/dev")
        assert (await h.post(path, dev, _gh(dev, delivery="d-2")))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "default", "prod")]


@pytest.mark.parametrize(
    ("events", "sent", "allowed"),
    [
        (["Push", "ISSUES"], "push", True),
        (["Push", "ISSUES"], "Issues", True),
        (["Push", "ISSUES"], "PUSH", True),
        (["Push", "ISSUES"], "pull_request", False),
        (["Push", "ISSUES"], "push ", False),
        ([], "anything", True),
    ],
)
async def test_github_events_compare_case_insensitively(events: list[str], sent: str, allowed: bool) -> None:
    """Go's ``strings.EqualFold`` against each of ``spec.events`` (an empty list allows every event), with the
    list folded once per context (issue 29): the same context answers every request alike, in any order."""
    receiver, secret = make_receiver("github", events=events)
    ctx = VerifyContext(receiver, secret, ManualClock())

    def request(event: str) -> HookRequest:
        headers = RawHeaders(
            [
                (b"Content-Type", b"application/json"),
                (b"X-Hub-Signature-256", SIG.encode()),
                (b"X-GitHub-Event", event.encode()),
            ]
        )
        return HookRequest("POST", "/hook/x", headers, PUSH)

    for _ in range(2):
        if allowed:
            assert (await registry.verify(request(sent), ctx)).event == sent
        else:
            with pytest.raises(VerificationError, match="is not authorised"):
                await registry.verify(request(sent), ctx)
        if events:  # a listed event is still allowed after a refusal, and the other way round
            assert (await registry.verify(request(events[0].swapcase()), ctx)).event == events[0].swapcase()
