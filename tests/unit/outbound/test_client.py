"""``OutboundHTTP``'s one retry loop (tenacity) on looptime's virtual clock (issue 24 item 2): the backoff
sequence, a ``Retry-After`` honoured inside the budget, the budget stopping the loop before a wait that cannot
fit, and each attempt made (and counted) once, the first one included (it runs outside tenacity and is
replayed as tenacity's attempt 1).

The receiver is a real local server (``CaptureServer``); every instant is the loop's, asserted exactly: the
waits cost no real time and no wall-clock window is involved.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from notification_controller.errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    RetryableDeliveryError,
)
from notification_controller.lib.backoff import backoff
from notification_controller.outbound import OutboundHTTP, OutboundRequest, RetryPolicy
from tests.support.capture import CapturedRequest, CaptureServer, Reply

pytestmark = pytest.mark.looptime

POLICY = RetryPolicy(max_attempts=5, wait_min=1.0, wait_max=4.0)


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(POLICY)
    await client.start()
    yield client
    await client.close()


class Timed:
    """A server whose replies come in order (the last one repeats) and which notes the loop time of each
    request, relative to the moment ``start`` was called."""

    def __init__(self, server: CaptureServer, *replies: Reply) -> None:
        self.replies = replies
        self.times: list[float] = []
        self.origin = 0.0
        server.on("POST", "/x", self._answer)

    def start(self) -> None:
        self.origin = asyncio.get_running_loop().time()

    def _answer(self, _: CapturedRequest) -> Reply:
        self.times.append(round(asyncio.get_running_loop().time() - self.origin, 3))
        return self.replies[min(len(self.times), len(self.replies)) - 1]


async def send(http: OutboundHTTP, server: CaptureServer, timeout: float) -> DeliveryError | None:
    try:
        await http.send(OutboundRequest("POST", server.url + "/x", {}, b"{}"), timeout=timeout)
    except DeliveryError as exc:
        return exc
    return None


async def test_the_backoff_sequence_is_lib_backoff_and_every_attempt_is_made_once(
    http: OutboundHTTP,
) -> None:
    async with CaptureServer() as server:
        timed = Timed(server, Reply(500))
        timed.start()
        error = await send(http, server, timeout=60)
    # waits 1, 2, 4, 4 (capped): the attempts at 0, 1, 3, 7, 11
    waits = [backoff(n, POLICY.wait_min, POLICY.wait_max) for n in range(POLICY.max_attempts - 1)]
    assert waits == [1.0, 2.0, 4.0, 4.0]
    assert timed.times == [0.0, 1.0, 3.0, 7.0, 11.0]
    assert http.attempts == len(server.requests) == POLICY.max_attempts  # the replayed first one: once
    assert isinstance(error, RetryableDeliveryError)
    assert (error.failure, error.reason, error.status) == (FailureReason.SERVER_ERROR, "http_500", 500)


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_honoured_inside_the_budget(http: OutboundHTTP, status: int) -> None:
    async with CaptureServer() as server:
        timed = Timed(server, Reply(status, headers={"Retry-After": "7"}), Reply(200))
        timed.start()
        error = await send(http, server, timeout=10)
    assert error is None
    assert timed.times == [0.0, 7.0]  # the receiver's 7 s, not the backoff's 1 s


async def test_a_retry_after_past_the_budget_is_not_waited_for(http: OutboundHTTP) -> None:
    loop = asyncio.get_running_loop()
    async with CaptureServer() as server:
        timed = Timed(server, Reply(429, headers={"Retry-After": "60"}))
        timed.start()
        start = loop.time()
        error = await send(http, server, timeout=10)
        assert loop.time() - start == pytest.approx(0.0, abs=1e-3)  # given up at once, not at the deadline
    assert timed.times == [0.0]
    assert isinstance(error, RetryableDeliveryError)
    assert (error.failure, error.reason, error.retry_after) == (FailureReason.RATE_LIMITED, "http_429", 60)


async def test_the_budget_stops_the_loop_before_a_wait_that_cannot_fit(http: OutboundHTTP) -> None:
    loop = asyncio.get_running_loop()
    async with CaptureServer() as server:
        timed = Timed(server, Reply(502))
        timed.start()
        start = loop.time()
        error = await send(http, server, timeout=5)
        stopped = loop.time() - start
    # attempts at 0, 1, 3; the next wait (4 s) would end at 7 > 5: the last answer is the error, at 3 s
    assert timed.times == [0.0, 1.0, 3.0]
    assert stopped == pytest.approx(3.0, abs=1e-3)
    assert isinstance(error, RetryableDeliveryError) and error.status == 502


async def test_a_budget_that_ends_during_an_attempt_is_a_timeout(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        timed = Timed(server, Reply(503), Reply(body={}, delay=30))
        timed.start()
        error = await send(http, server, timeout=5)
    assert timed.times == [0.0, 1.0]
    assert error is not None and type(error) is DeliveryError  # neither retryable nor permanent: the budget
    assert (error.failure, error.reason) == (FailureReason.TIMEOUT, "timeout")


async def test_a_permanent_answer_is_not_retried(http: OutboundHTTP) -> None:
    async with CaptureServer() as server:
        timed = Timed(server, Reply(404))
        timed.start()
        error = await send(http, server, timeout=60)
    assert timed.times == [0.0]
    assert isinstance(error, PermanentDeliveryError)
    assert (error.failure, error.reason) == (FailureReason.CLIENT_ERROR, "http_404")


@pytest.mark.parametrize(
    ("location", "reason"),
    [("http://elsewhere.example/x", "redirect_refused"), ("/x", "redirect_loop")],
    ids=["another-host", "loop"],
)
async def test_redirects_to_another_host_or_in_a_loop_fail_as_redirect(
    http: OutboundHTTP, location: str, reason: str
) -> None:
    async with CaptureServer() as server:
        server.on("POST", "/x", Reply(307, headers={"Location": location}))
        error = await send(http, server, timeout=60)
        assert 1 <= len(server.requests) <= 11  # same-origin redirects followed, bounded
    assert isinstance(error, PermanentDeliveryError)
    assert (error.failure, error.reason) == (FailureReason.REDIRECT, reason)


@pytest.mark.parametrize(
    ("url", "headers", "reason"),
    [
        ("http://[::1/x", {}, "invalid_url"),
        ("http://127.0.0.1:9/x", {"X-Token": "a\r\nInjected: 1"}, "invalid_header"),
    ],
    ids=["url", "header"],
)
async def test_a_request_that_cannot_be_sent_is_invalid_request(
    http: OutboundHTTP, url: str, headers: dict[str, str], reason: str
) -> None:
    with pytest.raises(PermanentDeliveryError) as info:
        await http.send(OutboundRequest("POST", url, headers, b"{}"), timeout=60)
    assert (info.value.failure, info.value.reason) == (FailureReason.INVALID_REQUEST, reason)
    assert http.attempts == 1  # refused before anything reaches a transport, and never retried


def test_every_failure_reason_is_asserted_by_some_test() -> None:
    """Each ``FailureReason`` is what some test asserts (``FailureReason.X`` written in a test file; this
    function names none): a new reason, or a raise site moved to another, comes with its test."""
    tests = Path(__file__).resolve().parents[2]
    text = "\n".join(path.read_text(encoding="utf-8") for path in tests.rglob("test_*.py"))
    unasserted = [r.name for r in FailureReason if not re.search(rf"FailureReason\.{r.name}\b", text)]
    assert unasserted == []
