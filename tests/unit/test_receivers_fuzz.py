"""Property tests of the receiver app over HTTP: random paths, methods, headers and bodies never produce a 5xx
and never a patch without a valid signature; with a valid signature, 200 ⇔ exactly one patch (reference §5.2).

Hypothesis drives requests from a worker thread while the app runs on the test's event loop (so the test stays
an ``async def`` and the server is started once).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import string
from collections.abc import Coroutine
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notification_controller.server.receivers import ReceiverServerSettings
from tests.support.receiver_kit import TOKEN, Harness, github_signature, make_receiver

T = TypeVar("T")
AUTH_HEADERS = [
    "X-Hub-Signature-256",
    "X-Hub-Signature",
    "X-Signature",
    "X-Gitlab-Token",
    "Authorization",
    "X-Nexus-Webhook-Signature",
    "Content-Type",
    "X-GitHub-Event",
    "X-Gitlab-Event",
    "X-Event-Key",
    "X-GitHub-Delivery",
    "Content-Encoding",
]
HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)
SIGNATURE_LIKE = st.one_of(
    HEADER_TEXT,
    st.builds(
        lambda a, h: f"{a}={h}",
        st.sampled_from(["sha1", "sha256", "sha512", "md5", ""]),
        st.text(alphabet="0123456789abcdefABCDEF", max_size=130),
    ),
    st.just(TOKEN[:-1]),
    st.just(TOKEN + "x"),
    st.just("Bearer " + TOKEN),
)
FRAMING = frozenset({"transfer-encoding", "content-length", "expect", "connection", "host", "upgrade"})
"""Headers the client library frames itself: random values there test aiohttp's parser (its own 400 with a
text body, or 417), not the receiver; the raw-socket suites in tests/adversarial/ cover them."""
HEADERS = st.dictionaries(
    st.one_of(
        st.sampled_from(AUTH_HEADERS),
        st.text(alphabet=string.ascii_letters + "-", min_size=1, max_size=20).filter(
            lambda name: name.lower() not in FRAMING
        ),
    ),
    st.one_of(
        SIGNATURE_LIKE,
        st.sampled_from(["application/json", "application/x-www-form-urlencoded", "gzip", "push"]),
    ),
    max_size=8,
)
BODIES = st.one_of(
    st.binary(max_size=2048),
    st.sampled_from(
        [b"", b"{}", b"null", b"[]", b'{"push_data":{"tag":"x"}}', b"payload=%7B%7D", b"\xff\xfe"]
    ),
)


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)


async def test_random_requests_never_5xx_and_never_patch_without_signature() -> None:
    h = Harness(ReceiverServerSettings(rate_limit=0))
    paths = []
    for type_ in ("github", "gitlab", "bitbucket", "generic-hmac", "harbor", "nexus"):
        receiver, secret = make_receiver(type_, name=f"fuzz-{type_}")
        paths.append(h.add(receiver, secret))
    h.add_targets()
    random_paths = st.one_of(
        st.sampled_from(paths),
        st.builds(
            lambda p, q: p + "?" + q,
            st.sampled_from(paths),
            st.text(alphabet=string.ascii_letters + "=&", max_size=10),
        ),
        st.builds(lambda t: "/hook/" + t, st.text(alphabet=string.hexdigits + "./%-_", max_size=80)),
        st.builds(
            lambda t: "/" + t, st.text(alphabet=string.ascii_letters + string.digits + "/._-~", max_size=40)
        ).filter(
            lambda p: not p.startswith("//")  # a network-path reference, not a path
        ),
    )
    seen: set[int] = set()

    async with h:
        loop = asyncio.get_running_loop()

        @settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(
            path=random_paths,
            method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE"]),
            headers=HEADERS,
            body=BODIES,
        )
        def check(path: str, method: str, headers: dict[str, str], body: bytes) -> None:
            before = len(h.cluster.annotate_calls)
            status, data, _ = run(loop, h.post(path, body, headers, method=method))
            seen.add(status)
            assert status in (400, 404, 405, 413), (status, path, headers)
            assert data == b""
            assert len(h.cluster.annotate_calls) == before, "a patch without a valid signature"

        await asyncio.to_thread(check)
    assert 404 in seen and 400 in seen and 405 in seen


async def test_valid_signature_random_payloads_200_iff_one_patch() -> None:
    h = Harness(ReceiverServerSettings(rate_limit=0))
    github, g_secret = make_receiver("github")
    gh_path = h.add(github, g_secret)
    nexus, n_secret = make_receiver("nexus", name="nexus")
    nx_path = h.add(nexus, n_secret)
    h.add_targets()
    deliveries = itertools.count()
    outcomes: set[tuple[str, int]] = set()

    async with h:
        loop = asyncio.get_running_loop()

        @settings(max_examples=250, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(
            target=st.sampled_from(["github", "nexus"]),
            event=st.one_of(st.sampled_from(["push", "ping", "issues"]), HEADER_TEXT),
            content_type=st.one_of(
                st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/plain", ""]),
                HEADER_TEXT,
            ),
            body=BODIES,
        )
        def check(target: str, event: str, content_type: str, body: bytes) -> None:
            before = len(h.cluster.annotate_calls)
            if target == "github":
                headers = {
                    "X-GitHub-Event": event,
                    "X-GitHub-Delivery": f"d-{next(deliveries)}",
                    "Content-Type": content_type,
                    "X-Hub-Signature-256": github_signature(TOKEN.encode(), body),
                }
                path = gh_path
            else:
                headers = {
                    "X-Nexus-Webhook-Signature": hmac.new(TOKEN.encode(), body, hashlib.sha1).hexdigest()
                }
                path = nx_path
            status, _, _ = run(loop, h.post(path, body, headers))
            outcomes.add((target, status))
            assert status in (200, 400), status
            patched = len(h.cluster.annotate_calls) - before
            expected = 1 if status == 200 and not (target == "github" and event == "ping") else 0
            assert patched == expected, (status, event, content_type, body[:40])

        await asyncio.to_thread(check)
    assert ("github", 200) in outcomes and ("github", 400) in outcomes
