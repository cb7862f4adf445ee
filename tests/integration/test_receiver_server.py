"""The receiver HTTP server: order of checks and status codes (reference §5.2), targets (§5.4), CEL filters
(§5.5), and the hardening beyond Flux (405, replay, rate limit, caps, logs) — checklist sections A, B, F, G.

Everything runs over real sockets (``aiohttp.test_utils.TestServer``; raw ``asyncio`` streams where the client
library would refuse to send the malformed request) against a recording in-memory ``Cluster``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from notification_controller.api import RECONCILE_REQUEST_ANNOTATION
from notification_controller.server.receivers import MAX_BODY, ReceiverServerSettings
from tests.support.memory_cluster import MemoryCluster
from tests.support.receiver_kit import (
    GIT,
    IMAGE,
    TOKEN,
    Harness,
    github_signature,
    make_receiver,
    ready_status,
)

PUSH = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "org/webapp"}}).encode()
GO_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{9} \+0000 UTC m=\+\d+\.\d{9}$")


def github_headers(body: bytes = PUSH, delivery: str = "d-1", token: str = TOKEN) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(token.encode(), body),
    }


@pytest.fixture
async def github() -> AsyncIterator[tuple[Harness, str]]:
    h = Harness()
    receiver, secret = make_receiver("github")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        yield h, path


async def raw_request(port: int, data: bytes, *, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send raw bytes, return (status, whole answer). Status 0 when the server closed without answering."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return 0, b""
    finally:
        writer.close()
    match = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    assert match is not None, head
    return int(match.group(1)), head


# ---- §5.2 order and codes -------------------------------------------------------------------------


async def test_order_of_checks() -> None:
    """reference §5.2: 413 → 404 → 405 → 503 → 400 → 429 → 200, each check before the next."""
    h = Harness(ReceiverServerSettings(rate_limit=1.0, rate_burst=1))
    suspended, s_secret = make_receiver("github", name="suspended", suspend=True)
    s_path = h.add(suspended, s_secret)
    receiver, secret = make_receiver("github")
    path = h.add(receiver, secret)
    h.add_targets()
    big = b"x" * (MAX_BODY + 1)
    unknown = "/hook/" + "f" * 64
    async with h:
        assert (await h.post(unknown, big, method="GET"))[0] == 413, "413 before 404"
        assert (await h.post(unknown, PUSH, method="GET"))[0] == 404, "404 before 405"
        assert (await h.post(s_path, PUSH, github_headers(), method="GET"))[0] == 405, "405 before 503"
        assert (await h.post(s_path, PUSH, {"X-Hub-Signature-256": "bad"}))[0] == 503, "503 before 400"
        assert (await h.post(path, PUSH, {"X-Hub-Signature-256": "bad"}))[0] == 400
        assert (await h.post(path, PUSH, github_headers(delivery="a")))[0] == 200
        status, data, headers = await h.post(path, PUSH, github_headers(delivery="b"))
        assert (status, data) == (429, b""), "400 before 429: only authentic requests spend tokens"
        assert headers["Retry-After"] == "1"
        assert len(h.cluster.annotate_calls) == 1


async def test_not_ready_is_503() -> None:
    """reference §5.2 step 3: Ready=False, Stalled, or Reconciling without Stalled → 503 (checklist B4)."""
    h = Harness()
    receiver, secret = make_receiver("generic")
    path = str(receiver.status.webhook_path)
    cases = [
        [{"type": "Ready", "status": "False", "reason": "TokenNotFound"}],
        [
            {"type": "Ready", "status": "True", "reason": "Succeeded"},
            {"type": "Reconciling", "status": "True", "reason": "Progressing"},
        ],
        [],
    ]
    async with h:
        for conditions in cases:
            status = ready_status(path)
            status["conditions"] = [
                {**c, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in conditions
            ]
            h.add(receiver.model_validate({**receiver.model_dump(by_alias=True), "status": status}), secret)
            assert (await h.post(path, b"{}"))[0] == 503
        assert h.cluster.annotate_calls == []
        assert h.metric("notification_receiver_requests_total", type="generic", outcome="not_ready") == 3


async def test_store_not_synced_is_503() -> None:
    """Pinned: before the cache has synced every hook answers 503 (not 404, which senders count as failures)."""
    h = Harness()
    receiver, secret = make_receiver("generic")
    path = h.add(receiver, secret)
    h.store.mark_unsynced()
    async with h:
        status, _, headers = await h.post(path, b"{}")
        assert (status, headers["Retry-After"]) == (503, "5")


async def test_query_string_and_odd_paths_are_404(github: tuple[Harness, str]) -> None:
    """reference §5.1: the raw request-target must equal status.webhookPath (checklist B2)."""
    h, path = github
    for target in (
        path + "?x=1",
        path + "/",
        path.upper(),
        "/hook/",
        "/hook/zz",
        "/hook/..%2f" + path[6:],
        "/",
        "/other",
        "/hook/%0A",  # a percent-decoded line break: aiohttp's own 404 (a text body) without the route's [\s\S]
        path + "%0D%0A",
    ):
        status, data, _ = await h.post(target, PUSH, github_headers())
        assert (status, data) == (404, b""), target
    assert h.cluster.annotate_calls == []


async def test_suspended_receiver_is_503(github: tuple[Harness, str]) -> None:
    """reference §5.2 step 3 (checklist B4)."""
    h, path = github
    receiver, secret = make_receiver("github", suspend=True)
    h.add(receiver, secret)
    assert (await h.post(path, PUSH, github_headers()))[0] == 503
    assert h.cluster.annotate_calls == []
    assert h.metric("notification_receiver_requests_total", type="github", outcome="suspended") == 1


async def test_missing_secret_or_token_is_400() -> None:
    """reference §5.2 step 4: the Secret must exist and have ``token``."""
    h = Harness()
    receiver, _ = make_receiver("generic")
    path = h.add(receiver, None)
    other, other_secret = make_receiver("generic", name="other", secret_data={})
    assert other_secret is not None
    no_token = other_secret.model_copy(update={"data": {"tokn": b"x"}})
    other_path = h.add(other, no_token)
    async with h:
        assert (await h.post(path, b"{}"))[0] == 400
        assert (await h.post(other_path, b"{}"))[0] == 400
        assert h.cluster.annotate_calls == []


# ---- replay and rate limiting --------------------------------------------------------------------


async def test_replayed_delivery_is_acknowledged_without_second_patch(github: tuple[Harness, str]) -> None:
    """Checklist A18 (pinned): the same ``X-GitHub-Delivery`` within ``replay_ttl`` → 200, no second patch."""
    h, path = github
    assert (await h.post(path, PUSH, github_headers(delivery="abc")))[0] == 200
    assert (await h.post(path, PUSH, github_headers(delivery="abc")))[0] == 200
    assert len(h.cluster.annotate_calls) == 1
    assert h.metric("notification_receiver_requests_total", type="github", outcome="replayed") == 1
    assert (await h.post(path, PUSH, github_headers(delivery="def")))[0] == 200
    assert len(h.cluster.annotate_calls) == 2
    h.clock.advance(601)
    assert (await h.post(path, PUSH, github_headers(delivery="abc")))[0] == 200
    assert len(h.cluster.annotate_calls) == 3, "after the TTL the id is forgotten"


async def test_failed_delivery_can_be_retried_with_the_same_id(github: tuple[Harness, str]) -> None:
    """A delivery whose patch failed is not remembered: the sender's redelivery is processed."""
    h, path = github
    h.cluster.fail("annotate", status=500, times=1)
    assert (await h.post(path, PUSH, github_headers(delivery="x")))[0] == 500
    assert (await h.post(path, PUSH, github_headers(delivery="x")))[0] == 200
    assert len(h.cluster.annotate_calls) == 1


async def test_concurrent_copies_of_one_delivery_patch_once(github: tuple[Harness, str]) -> None:
    h, path = github
    h.cluster.fail("annotate", delay=0.05, times=1)
    results = await asyncio.gather(*(h.post(path, PUSH, github_headers(delivery="same")) for _ in range(5)))
    assert [r[0] for r in results] == [200] * 5
    assert len(h.cluster.annotate_calls) == 1


async def test_rate_limit_429_with_retry_after() -> None:
    """Hardening (checklist G2): token bucket per Receiver; refills with time; other receivers unaffected."""
    h = Harness(ReceiverServerSettings(rate_limit=2.0, rate_burst=3))
    receiver, secret = make_receiver("generic")
    path = h.add(receiver, secret)
    other, other_secret = make_receiver("generic", name="other")
    other_path = h.add(other, other_secret)
    h.add_targets()
    async with h:
        assert [(await h.post(path, b"{}"))[0] for _ in range(3)] == [200, 200, 200]
        status, data, headers = await h.post(path, b"{}")
        assert (status, data, headers["Retry-After"]) == (429, b"", "1")
        assert (await h.post(other_path, b"{}"))[0] == 200
        h.clock.advance(0.5)
        assert (await h.post(path, b"{}"))[0] == 200
        assert (await h.post(path, b"{}"))[0] == 429
        assert h.metric("notification_receiver_requests_total", type="generic", outcome="rate_limited") == 2
        assert len(h.cluster.annotate_calls) == 5


async def test_rate_limit_zero_disables() -> None:
    h = Harness(ReceiverServerSettings(rate_limit=0))
    receiver, secret = make_receiver("generic")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        statuses = await asyncio.gather(*(h.post(path, b"{}") for _ in range(120)))
        assert {s[0] for s in statuses} == {200}
        assert len(h.cluster.annotate_calls) == 120


# ---- targets -------------------------------------------------------------------------------------


async def test_patch_failure_is_500_and_other_targets_are_still_attempted() -> None:
    """reference §5.2 step 6, §5.4 (checklist B13): 403/404/500/timeout → 500 without Kubernetes text."""
    h = Harness(ReceiverServerSettings(kube_timeout=0.2))
    resources = [
        {"apiVersion": GIT, "kind": "GitRepository", "name": "a"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "forbidden"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "missing"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "broken"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "slow"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "b"},
    ]
    receiver, secret = make_receiver("generic", resources=resources)
    path = h.add(receiver, secret)
    for name in ("a", "forbidden", "broken", "slow", "b"):
        h.cluster.add(GIT, "GitRepository", "default", name)
    h.cluster.fail("annotate", status=403, name="forbidden")
    h.cluster.fail("get", status=500, name="broken")
    h.cluster.fail("annotate", delay=5.0, name="slow")
    async with h:
        status, data, _ = await h.post(path, b"{}")
        assert (status, data) == (500, b"")
        assert h.cluster.annotated() == [("GitRepository", "default", "a"), ("GitRepository", "default", "b")]
        assert h.metric("notification_receiver_requests_total", type="generic", outcome="patch_failed") == 1


async def test_annotation_value_and_default_api_versions() -> None:
    """reference §5.4: default apiVersion per kind; the value is Go's ``time.Now().String()``."""
    h = Harness()
    resources = [
        {"kind": "GitRepository", "name": "webapp"},
        {"kind": "ImageRepository", "name": "webapp"},
        {"kind": "OCIRepository", "name": "oci"},
    ]
    receiver, secret = make_receiver("generic", resources=resources)
    path = h.add(receiver, secret)
    h.add_targets()
    h.cluster.add("source.toolkit.fluxcd.io/v1", "OCIRepository", "default", "oci")
    async with h:
        assert (await h.post(path, b"{}"))[0] == 200
    assert [(c.api_version, c.kind) for c in h.cluster.annotate_calls] == [
        (GIT, "GitRepository"),
        (IMAGE, "ImageRepository"),
        ("source.toolkit.fluxcd.io/v1", "OCIRepository"),
    ]
    value = h.cluster.annotation("GitRepository", "default", "webapp", RECONCILE_REQUEST_ANNOTATION)
    assert value is not None and GO_TIME.match(value), value


@pytest.mark.parametrize(
    "resource",
    [
        {"kind": "Kustomization", "name": "apps"},  # no default apiVersion
        {"apiVersion": GIT, "kind": "GitRepository", "name": "*"},  # wildcard without matchLabels
        {"apiVersion": GIT, "kind": "GitRepository", "name": "webapp", "namespace": "other"},  # no-cross-ns
    ],
)
async def test_invalid_references_are_500(resource: dict[str, Any]) -> None:
    """reference §5.4 errors (``apiVersion must be specified``, ``matchLabels field not set``, cross-namespace)."""
    h = Harness(ReceiverServerSettings(no_cross_namespace_refs=True))
    receiver, secret = make_receiver(
        "generic", resources=[resource, {"apiVersion": GIT, "kind": "GitRepository", "name": "webapp"}]
    )
    path = h.add(receiver, secret)
    h.add_targets()
    h.add_targets("other")
    async with h:
        assert (await h.post(path, b"{}"))[0] == 500
        assert h.cluster.annotated() == [("GitRepository", "default", "webapp")]


async def test_cross_namespace_allowed_by_default_and_wildcard_without_match() -> None:
    h = Harness()
    resources: list[dict[str, Any]] = [
        {"apiVersion": GIT, "kind": "GitRepository", "name": "webapp", "namespace": "other"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "*", "matchLabels": {"nothing": "matches"}},
    ]
    receiver, secret = make_receiver("generic", resources=resources)
    path = h.add(receiver, secret)
    h.add_targets("other")
    async with h:
        assert (await h.post(path, b"{}"))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "other", "webapp")]


# ---- CEL filters ---------------------------------------------------------------------------------


async def test_flux_doc_cel_filter_examples() -> None:
    """reference §5.5 with Flux's doc examples: ``req.tag.contains(res.metadata.name)`` AND
    ``res.metadata.labels['environment'] == 'production'``."""
    h = Harness()
    resources = [
        {
            "apiVersion": IMAGE,
            "kind": "ImageRepository",
            "name": "*",
            "matchLabels": {"registry": "gar"},
            "filter": "res.metadata.labels['environment'] == 'production'",
        }
    ]
    receiver, secret = make_receiver(
        "generic", resources=resources, resource_filter="req.tag.contains(res.metadata.name)"
    )
    path = h.add(receiver, secret)
    for name, env in (("webapp", "production"), ("api", "production"), ("webapp-canary", "staging")):
        h.cluster.add(
            IMAGE, "ImageRepository", "default", name, labels={"registry": "gar", "environment": env}
        )
    h.cluster.add(IMAGE, "ImageRepository", "default", "webapp-x", labels={"environment": "production"})
    body = json.dumps({"action": "INSERT", "tag": "europe-docker.pkg.dev/p/r/webapp-canary:v1"}).encode()
    async with h:
        assert (await h.post(path, body, {"Content-Type": "application/json; charset=utf-8"}))[0] == 200
        assert h.cluster.annotated() == [("ImageRepository", "default", "webapp")]
        # without a JSON Content-Type ``req`` is {}: ``req.tag`` fails to evaluate → 500
        assert (await h.post(path, body, {"Content-Type": "text/plain"}))[0] == 500
        # a JSON Content-Type with a body that is not a JSON object: pinned 400 (Flux 500)
        for bad in (b"not json", b"[1,2]", b"[" * 5000 + b"]" * 5000, b'{"tag": NaN}'):
            assert (await h.post(path, bad, {"Content-Type": "application/json"}))[0] == 400, bad[:20]
        assert len(h.cluster.annotate_calls) == 1


async def test_invalid_cel_expression_is_500() -> None:
    h = Harness()
    receiver, secret = make_receiver("generic", resource_filter="req.tag.contains(")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        assert (await h.post(path, b"{}", {"Content-Type": "application/json"}))[0] == 500
        assert h.cluster.annotate_calls == []
        assert h.metric("notification_receiver_requests_total", type="generic", outcome="error") == 1


# ---- size, protocol and slow clients ------------------------------------------------------------


async def test_body_exactly_at_the_cap_is_accepted_one_more_is_413() -> None:
    """Checklist B5: 3 MiB → 200; 3 MiB + 1 → 413; 10× with Content-Length → 413."""
    h = Harness()
    receiver, secret = make_receiver("generic")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        assert (await h.post(path, b" " * MAX_BODY))[0] == 200
        assert (await h.post(path, b" " * (MAX_BODY + 1)))[0] == 413
        assert (await h.post(path, b" " * (10 * MAX_BODY)))[0] == 413
        assert len(h.cluster.annotate_calls) == 1


async def test_chunked_oversize_is_413(github: tuple[Harness, str]) -> None:
    """Checklist B5: 10× the cap, chunked, no Content-Length → 413 while streaming."""
    h, path = github
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        block = b"x" * 65536
        for _ in range(10 * MAX_BODY // len(block)):
            sent += len(block)
            yield block

    assert h.client is not None
    try:
        resp = await h.client.post(path, data=chunks(), headers=github_headers())
        status = resp.status
        await resp.read()
    except OSError:  # the server may close before the client finished sending
        status = 413
    assert status == 413
    assert h.cluster.annotate_calls == []
    assert h.metric("notification_receiver_requests_total", type="unknown", outcome="too_large") == 1


async def test_gzip_bomb_is_413_and_never_buffered(github: tuple[Harness, str]) -> None:
    """Checklist B6: 50 MiB of zeros gzipped (~50 KB) with ``Content-Encoding: gzip`` → 413."""
    h, path = github
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 100_000
    headers = {**github_headers(bomb), "Content-Encoding": "gzip"}
    status, _, _ = await h.post(path, bomb, headers)
    assert status == 413
    assert h.cluster.annotate_calls == []
    # the same in 1 MiB members, each small enough alone: the cap counts them together
    member = gzip.compress(b"\0" * (1 << 20), compresslevel=9)
    members = member * 4
    status, _, _ = await h.post(path, members, {**github_headers(members), "Content-Encoding": "gzip"})
    assert status == 413
    assert h.metric("notification_receiver_requests_total", type="unknown", outcome="too_large") == 2
    assert h.cluster.annotate_calls == []


async def test_compressed_push_is_verified_over_its_decompressed_body(github: tuple[Harness, str]) -> None:
    """As aiohttp's server did: ``gzip`` (also in several members) and ``deflate`` (zlib-wrapped or raw) bodies are
    decompressed, the signature is checked over what they decompress to; an unknown coding is left alone."""
    h, path = github
    wrapped = zlib.compress(PUSH)
    for delivery, (body, encoding) in enumerate(
        (
            (gzip.compress(PUSH), "gzip"),
            (gzip.compress(PUSH[:10]) + gzip.compress(PUSH[10:]), "GZIP"),
            (wrapped, "deflate"),
            (wrapped[2:-4], "deflate"),  # raw deflate, as some clients send it
            (PUSH, "identity"),
        )
    ):
        headers = {**github_headers(PUSH, delivery=f"z-{delivery}"), "Content-Encoding": encoding}
        assert (await h.post(path, body, headers))[0] == 200, encoding
    assert len(h.cluster.annotate_calls) == 5


async def test_header_limits_are_400(github: tuple[Harness, str]) -> None:
    """Checklist B8: a header line over 8 KB, more than 128 headers → 400 from the parser; no 500."""
    h, path = github
    long_header = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 10000}\r\nContent-Length: 0\r\n\r\n".encode()
    )
    assert (await raw_request(h.port, long_header))[0] in (400, 431)
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    request = f"POST {path} HTTP/1.1\r\nHost: x\r\n{many}Content-Length: 0\r\n\r\n".encode()
    assert (await raw_request(h.port, request))[0] in (400, 431)
    assert h.cluster.annotate_calls == []


async def test_non_ascii_signature_bytes_are_400(github: tuple[Harness, str]) -> None:
    """Checklist A5: ``\\xc3\\xa9\\xff`` in the signature header → 400, not 500."""
    h, path = github
    for value in (b"\xc3\xa9\xff", b"sha256=\xc3\xa9\xff", b"sha256=" + b"\xff" * 64):
        request = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n".encode()
            + b"X-Hub-Signature-256: "
            + value
            + b"\r\n"
            + f"Content-Length: {len(PUSH)}\r\nConnection: close\r\n\r\n".encode()
            + PUSH
        )
        assert (await raw_request(h.port, request))[0] == 400, value
    assert h.cluster.annotate_calls == []


async def test_undecodable_body_is_400_without_error_traceback(
    github: tuple[Harness, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Checklist B8/B11: a client fault (``Content-Encoding: gzip`` on a body that is not gzip, a truncated
    gzip, ``br`` which the server cannot decode) is a 400, logged at debug without traceback or path."""
    caplog.set_level(logging.DEBUG)
    h, path = github
    truncated = gzip.compress(PUSH)[:-9]
    for body, encoding in ((PUSH, "gzip"), (truncated, "gzip"), (PUSH, "deflate"), (PUSH, "br")):
        headers = {**github_headers(body), "Content-Encoding": encoding}
        assert (await h.post(path, body, headers))[0] == 400, encoding
    unread = [r for r in caplog.records if "cannot read the body" in r.getMessage()]
    assert [r.levelno for r in unread] == [logging.DEBUG] * 4
    assert h.metric("notification_receiver_requests_total", type="unknown", outcome="bad_request") == 4
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    assert all(path not in r.getMessage() for r in caplog.records)
    assert h.cluster.annotate_calls == []


async def test_request_smuggling_is_refused(github: tuple[Harness, str]) -> None:
    """Checklist B12: Transfer-Encoding and Content-Length together → 400 from the parser."""
    h, path = github
    request = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ).encode()
    assert (await raw_request(h.port, request))[0] == 400
    assert h.cluster.annotate_calls == []


async def test_slow_and_vanishing_clients() -> None:
    """Checklist B7/B9: a trickling body times out (400); a client closing mid-body patches nothing; the
    server keeps serving."""
    h = Harness(ReceiverServerSettings(body_read_timeout=0.3))
    receiver, secret = make_receiver("generic")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        partial = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n".encode() + b"{" * 10
        assert (await raw_request(h.port, partial))[0] == 400

        _reader, writer = await asyncio.open_connection("127.0.0.1", h.port)
        writer.write(partial)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        async with asyncio.timeout(5):
            while h.metric("gotk_receiver_http_requests_inflight", service="", handler="/hook/") != 0:
                await asyncio.sleep(0.01)
        assert h.cluster.annotate_calls == []
        assert (await h.post(path, b"{}"))[0] == 200
        assert len(h.cluster.annotate_calls) == 1


# ---- secret hygiene, metrics, load ---------------------------------------------------------------


async def test_webhook_path_and_token_never_logged_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Checklist F1/F2: the digest appears only as an 8-character prefix; the token never appears."""
    caplog.set_level(logging.DEBUG)
    h = Harness()
    receiver, secret = make_receiver("gitlab")
    path = h.add(receiver, secret)
    h.add_targets()
    h.cluster.fail("annotate", status=500, times=1)
    async with h:
        headers = {"X-Gitlab-Token": TOKEN, "X-Gitlab-Event": "Push Hook", "Content-Type": "application/json"}
        for extra in (
            {},
            {"X-Gitlab-Token": "wrong"},
            {"X-Gitlab-Event-UUID": "u1"},
            {"X-Gitlab-Event-UUID": "u1"},
        ):
            await h.post(path, b"{}", {**headers, **extra})
        await h.post(path + "?q=1", b"{}", headers)
        await h.post(path, b"{}", headers, method="GET")
        bad_method = f"BREW {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        assert (await raw_request(h.port, bad_method))[0] == 400  # refused by the parser, logged without path
    digest = path.removeprefix("/hook/")
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any(digest[:8] in m for level, m in messages if level >= logging.INFO), "the prefix names the hook"
    for level, message in messages:
        assert TOKEN not in message
        if level >= logging.INFO:
            assert digest not in message and digest[8:24] not in message
    metrics = h.registry.collect()
    assert all(digest not in str(sample) for family in metrics for sample in family.samples)


async def test_http_metrics(github: tuple[Harness, str]) -> None:
    """reference §7: ``gotk_receiver_http_*`` with handler ``/hook/``; inflight back to 0."""
    h, path = github
    await h.post(path, PUSH, github_headers())
    await h.post(path, PUSH, github_headers(), method="PURGE")
    count = "gotk_receiver_http_request_duration_seconds_count"
    assert h.metric(count, service="", handler="/hook/", method="POST", code="200") == 1
    assert h.metric(count, service="", handler="/hook/", method="OTHER", code="405") == 1, (
        "no free-form labels"
    )
    assert h.metric("gotk_receiver_http_requests_inflight", service="", handler="/hook/") == 0
    assert h.metric("notification_receiver_patch_duration_seconds_count", type="github") == 1


async def test_many_concurrent_valid_posts() -> None:
    """Checklist G1: 300 concurrent valid deliveries are all answered, one patch each."""
    h = Harness(ReceiverServerSettings(rate_limit=0))
    receiver, secret = make_receiver("github")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        results = await asyncio.gather(
            *(h.post(path, PUSH, github_headers(delivery=f"d-{i}")) for i in range(300))
        )
        assert {r[0] for r in results} == {200}
        assert len(h.cluster.annotate_calls) == 300


async def test_large_valid_json_body_with_filter() -> None:
    """Checklist B11: 1 MiB of valid JSON is parsed once for the filters and accepted."""
    h = Harness()
    receiver, secret = make_receiver("generic", resource_filter="size(req.items) > 0")
    path = h.add(receiver, secret)
    h.add_targets()
    body = json.dumps({"items": ["x" * 100] * 10000}).encode()
    assert len(body) > 1_000_000
    async with h:
        assert (await h.post(path, body, {"Content-Type": "application/json"}))[0] == 200
        assert len(h.cluster.annotate_calls) == 1


async def test_rejection_logs_are_budgeted(caplog: pytest.LogCaptureFixture) -> None:
    """Checklist G2: a flood of forged requests does not flood the log (30 per Receiver per minute)."""
    caplog.set_level(logging.INFO, logger="notification_controller")
    h = Harness(ReceiverServerSettings(rate_limit=0))
    receiver, secret = make_receiver("harbor")
    path = h.add(receiver, secret)
    async with h:
        for _ in range(100):
            assert (await h.post(path, b"{}", {"Authorization": "wrong"}))[0] == 400
        rejected = [r for r in caplog.records if "unable to validate payload" in r.getMessage()]
        assert len(rejected) == 30
        h.clock.advance(60)
        assert (await h.post(path, b"{}", {"Authorization": "wrong"}))[0] == 400
        last = [r.getMessage() for r in caplog.records if "unable to validate payload" in r.getMessage()][-1]
        assert "(70 similar rejections not logged)" in last
        assert (
            h.metric("notification_receiver_requests_total", type="harbor", outcome="rejected_signature")
            == 101
        )


async def test_replay_cache_and_token_bucket_are_bounded() -> None:
    """The replay store keeps digests (an 8 KB id costs 32 bytes) and evicts the oldest beyond its size."""
    from notification_controller.lib.clock import ManualClock
    from notification_controller.receivers.guards import ReceiverRateLimit, ReplayCache

    clock = ManualClock()
    cache = ReplayCache(600, clock, max_entries=100)
    for i in range(1000):
        assert cache.claim(f"{i}-" + "x" * 8000)
    assert len(cache) == 100
    assert not cache.claim("999-" + "x" * 8000), "recent ids are kept"
    assert cache.claim("0-" + "x" * 8000), "the oldest were evicted"
    clock.advance(600)
    assert cache.claim("999-" + "x" * 8000), "expired after the TTL"
    assert len(cache) == 1

    bucket = ReceiverRateLimit(1.0, 2, clock, max_keys=10)
    for i in range(50):
        assert bucket.take(f"r{i}") is None
    assert len(bucket) == 10
    assert bucket.take("r49") is None
    wait = bucket.take("r49")
    assert wait == pytest.approx(1.0)
    assert ReceiverRateLimit.retry_after_header(0.01) == "1"


def test_a_full_replay_cache_claims_as_cheaply_as_an_empty_one() -> None:
    """Issue 29: once the cache is full (or ids expire one by one) every claim evicts the oldest. In a plain
    dict that walked the slots earlier evictions left at its front (56 µs a claim at 100,000 ids, against
    ~1 µs): a sender with the token, or just many Receivers, made every valid push cost that. The bound is a
    ratio of CPU times in the same process (what a loaded machine slows, it slows for both): 5×, where the
    cache measures 1.1-1.3× and a plain dict alone 16×; the eviction order and the expiry are checked on the
    way (expiring 100,000 ids one by one from the front: 3 s of CPU in a plain dict)."""
    from notification_controller.lib.clock import ManualClock
    from notification_controller.receivers.guards import ReplayCache

    size, claims = 100_000, 100_000

    def cpu_for_claims(cache: ReplayCache, first: int) -> float:
        start = time.process_time()
        for i in range(first, first + claims):
            assert cache.claim(f"id-{i}")
        return time.process_time() - start

    clock = ManualClock()
    full = ReplayCache(600, clock, max_entries=size)
    cpu_for_claims(full, 0)  # fills it
    assert len(full) == size
    evicting = cpu_for_claims(full, size)
    assert len(full) == size
    assert full.claim("id-0") and not full.claim(f"id-{size + claims - 1}"), "the oldest went, not the newest"
    roomy = ReplayCache(600, clock, max_entries=10 * size)
    cpu_for_claims(roomy, 0)
    growing = cpu_for_claims(roomy, size)
    assert evicting < 5 * max(growing, 0.01), (evicting, growing)

    clock.advance(300)
    full.claim("late")
    clock.advance(301)  # every id but "late" expired: expiry also starts from the oldest, one by one
    start = time.process_time()
    assert full.claim("after")
    assert len(full) == 2 and not full.claim("late")
    assert time.process_time() - start < 5 * max(growing, 0.01)


def test_a_released_delivery_is_claimed_again_at_the_end_of_the_replay_window() -> None:
    """``release`` (the targets could not be patched) forgets an id; claimed again, it is as new: its first
    claim neither evicts nor expires it, and the order the cache keeps for its claims stays bounded however
    often one id is claimed and released (issue 29's deques beside the dict)."""
    from notification_controller.lib.clock import ManualClock
    from notification_controller.receivers.guards import ReplayCache

    clock = ManualClock()
    cache = ReplayCache(600, clock, max_entries=3)
    for key in ("a", "b", "c"):
        assert cache.claim(key)
        clock.advance(1)
    cache.release("b")
    assert cache.claim("b"), "released: the retry goes through"
    clock.advance(1)
    assert cache.claim("d") and cache.claim("e")  # full: the two oldest claims go, a then c (not b)
    assert len(cache) == 3
    assert not cache.claim("b") and not cache.claim("d") and not cache.claim("e")
    assert cache.claim("a") and cache.claim("c")

    clock = ManualClock()
    cache = ReplayCache(600, clock, max_entries=100)
    assert cache.claim("x")
    clock.advance(300)
    cache.release("x")
    assert cache.claim("x")  # claimed again at 300: remembered until 900
    clock.advance(301)  # 601: the first claim's time is over, not the second's
    assert not cache.claim("x")
    assert cache.claim("y")
    clock.advance(300)  # 901
    assert cache.claim("x") and not cache.claim("y")

    for _ in range(10_000):  # a failing target: the same id claimed and released again and again
        clock.advance(0.001)
        assert cache.claim("retried")
        cache.release("retried")
    assert len(cache._order) == len(cache._times) <= 2 * len(cache) + 1024
    assert not cache.claim("y") and cache.claim("retried") and not cache.claim("retried")


async def test_json_null_body_with_a_filter_is_an_empty_request() -> None:
    """Issue 16: Flux decodes the body into a Go map, which ``null`` leaves empty: the filter runs with
    ``req`` = {} and the answer is 200 (it was 400). Other non-objects still cannot be a map."""
    h = Harness()
    receiver, secret = make_receiver("generic", resource_filter="size(req) == 0")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        for body in (b"null", b" null\n"):
            assert (await h.post(path, body, {"Content-Type": "application/json"}))[0] == 200, body
        assert len(h.cluster.annotate_calls) == 2
        for bad in (b"[]", b"42", b'"null"', b""):
            assert (await h.post(path, bad, {"Content-Type": "application/json"}))[0] == 400, bad
        assert len(h.cluster.annotate_calls) == 2


# ---- a cluster that answers at once (local mode): no task per webhook ---------------------------------


class _TaskRecordingCluster(MemoryCluster):
    """Records whether each annotation ran on a task."""

    def __init__(self) -> None:
        super().__init__()
        self.on_task: list[bool] = []

    async def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        self.on_task.append(asyncio.current_task() is not None)
        await super().annotate(api_version, kind, namespace, name, annotations)


@pytest.mark.parametrize("waits", [True, False])
async def test_a_cluster_that_answers_at_once_costs_no_task(waits: bool) -> None:
    """Issue 29 item 5: with local mode's cluster (``cluster_waits=False``) a valid push is answered where the
    request was parsed, without a task; an API server's calls (``True``) start on one (its client's timers
    need it). Both annotate once and answer 200."""
    h = Harness(cluster_waits=waits)
    h.cluster = _TaskRecordingCluster()
    receiver, secret = make_receiver("github")
    path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        assert (await h.post(path, PUSH, github_headers(delivery="t-1")))[0] == 200
        assert (await h.post(path, PUSH, github_headers(delivery="t-1")))[0] == 200  # replayed
    assert isinstance(h.cluster, _TaskRecordingCluster)
    assert h.cluster.on_task == [waits]
    assert h.metric("notification_receiver_requests_total", type="github", outcome="accepted") == 1
    assert h.metric("notification_receiver_requests_total", type="github", outcome="replayed") == 1


async def test_a_cluster_said_to_answer_at_once_that_waits_is_still_bounded() -> None:
    """If a call of a cluster said to answer at once waits after all, it goes on a task and ``kube_timeout``
    bounds it as any other (500, the other targets still attempted, the delivery can be retried)."""
    h = Harness(ReceiverServerSettings(kube_timeout=0.2), cluster_waits=False)
    resources = [
        {"apiVersion": GIT, "kind": "GitRepository", "name": "slow"},
        {"apiVersion": GIT, "kind": "GitRepository", "name": "webapp"},
    ]
    receiver, secret = make_receiver("github", resources=resources)
    path = h.add(receiver, secret)
    h.add_targets()
    h.cluster.add(GIT, "GitRepository", "default", "slow")
    h.cluster.fail("annotate", delay=5.0, name="slow", times=1)
    async with h:
        assert (await h.post(path, PUSH, github_headers(delivery="s-1")))[0] == 500
        assert h.cluster.annotated() == [("GitRepository", "default", "webapp")]
        assert h.metric("notification_receiver_requests_total", type="github", outcome="patch_failed") == 1
        assert (await h.post(path, PUSH, github_headers(delivery="s-1")))[0] == 200, "released: retried"
        assert h.metric("gotk_receiver_http_requests_inflight", service="", handler="/hook/") == 0
