"""The sandbox worker pool (``notification_controller/sandbox``) with real worker processes: a job over
its wall timeout gets its worker killed and replaced, a job over the memory limit fails as ``memory``
without touching this process, a crashed worker is replaced, an overrunning expression is quarantined,
namespaces are served round-robin, and a bad frame never reaches a caller as anything but a typed error.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time

import pytest

from notification_controller.core.cel import CELEvalError, OutputType, compile_expression
from notification_controller.core.templates import TemplateError
from notification_controller.sandbox import (
    SandboxFailure,
    SandboxPool,
    SandboxReason,
    SandboxSettings,
    protocol,
)

SLOW = "event.message.split('').all(a, event.message.split('').all(b, a == b))"
SLOW_EVENT = {"event": {"message": "x" * 60000}}
GROW = "event.message.split('').map(a, event.message.split('')).size() > 0"  # 3.6e9 values


def program(source: str) -> object:
    return compile_expression(source, variables=("event",), output=OutputType.BOOL)


def settings(**overrides: object) -> SandboxSettings:
    values: dict[str, object] = {"workers": 1, "timeout": 0.5, "memory": 256 * 1024 * 1024}
    values.update(overrides)
    return SandboxSettings(**values)  # type: ignore[arg-type]


@pytest.mark.timeout(60)
async def test_a_job_over_its_timeout_kills_the_worker_and_the_next_job_gets_a_new_one() -> None:
    async with SandboxPool(settings()) as pool:
        assert await pool.render("{{ n }}", {"n": 1}, namespace="a", limit=100) == "1"
        started = time.monotonic()
        with pytest.raises(SandboxFailure) as caught:
            await pool.cel(program(SLOW), SLOW_EVENT, namespace="a", kind="filter")
        assert caught.value.reason is SandboxReason.TIMEOUT
        assert time.monotonic() - started < 10  # 0.5 s and a kill; forever before issue 23
        assert await pool.render("{{ n }}", {"n": 2}, namespace="a", limit=100) == "2"
        assert pool.starts == 2  # the killed worker was replaced
        assert pool.failures.labels(kind="filter", reason="timeout")._value.get() == 1


@pytest.mark.timeout(60)
async def test_quarantine_fails_fast_without_a_worker_then_expires() -> None:
    async with SandboxPool(settings(quarantine=2.0)) as pool:
        with pytest.raises(SandboxFailure):
            await pool.cel(program(SLOW), SLOW_EVENT, namespace="a", kind="filter")
        starts = pool.starts
        started = time.monotonic()
        with pytest.raises(SandboxFailure) as caught:
            await pool.cel(program(SLOW), SLOW_EVENT, namespace="a", kind="filter")
        assert caught.value.reason is SandboxReason.QUARANTINED
        assert time.monotonic() - started < 0.1 and pool.starts == starts
        # nor is the same expression of another namespace
        with pytest.raises(SandboxFailure) as other:
            await pool.cel(program(SLOW), SLOW_EVENT, namespace="b", kind="filter")
        assert other.value.reason is SandboxReason.TIMEOUT
        # another expression is not quarantined
        assert (
            await pool.cel(program("[1].exists(x, x == 1)"), {"event": {}}, namespace="a", kind="f") is True
        )
        await asyncio.sleep(2.1)
        with pytest.raises(SandboxFailure) as again:
            await pool.cel(program(SLOW), SLOW_EVENT, namespace="a", kind="filter")
        assert again.value.reason is SandboxReason.TIMEOUT  # it ran again: the quarantine expired


@pytest.mark.timeout(60)
async def test_the_memory_limit_holds_in_the_worker_not_here() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with SandboxPool(settings(memory=192 * 1024 * 1024, timeout=20.0)) as pool:
        with pytest.raises(SandboxFailure) as caught:
            await pool.cel(program(GROW), SLOW_EVENT, namespace="a", kind="filter")
        assert caught.value.reason is SandboxReason.MEMORY
        assert await pool.render("ok", {}, namespace="a", limit=10) == "ok"  # replaced
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: not 3.6 GB here


@pytest.mark.timeout(60)
async def test_a_crashed_worker_is_replaced_and_the_job_fails_typed() -> None:
    async with SandboxPool(settings()) as pool:
        assert await pool.render("{{ 1 }}", {}, namespace="a", limit=10) == "1"
        (proc,) = [p for p in _workers(pool)]
        os.kill(proc, 9)
        await asyncio.sleep(0.2)
        # the slot notices at its next job: a typed failure or a fresh worker, never a hang
        outcome = await asyncio.gather(
            pool.render("{{ 2 }}", {}, namespace="a", limit=10), return_exceptions=True
        )
        assert outcome[0] == "2" or (
            isinstance(outcome[0], SandboxFailure)
            and outcome[0].reason in (SandboxReason.CRASHED, SandboxReason.MEMORY)
        ), outcome
        assert await pool.render("{{ 3 }}", {}, namespace="a", limit=10) == "3"
        assert pool.starts >= 2


def _workers(pool: SandboxPool) -> list[int]:
    """PIDs of the pool's worker processes (children of this process running the worker module)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"notification_controller.sandbox.worker" in cmd:
            pids.append(int(entry))
    return pids


@pytest.mark.timeout(60)
async def test_expression_errors_come_back_as_the_usual_errors() -> None:
    async with SandboxPool(settings()) as pool:
        with pytest.raises(TemplateError, match="has no attribute"):
            await pool.render("{{ event.nope }}", {"event": {}}, namespace="a", limit=100)
        source = "event.message.replace('', event.message).size() > 0 && [1].all(x, x > 0)"
        with pytest.raises(CELEvalError, match="replace: result larger"):
            await pool.cel(program(source), SLOW_EVENT, namespace="a", kind="filter")
        assert pool.starts == 1  # an expression's own error does not cost a worker


@pytest.mark.timeout(60)
async def test_namespaces_are_served_round_robin_and_capped() -> None:
    async with SandboxPool(settings(per_namespace=3, timeout=5.0)) as pool:
        await pool.render("warm", {}, namespace="x", limit=10)
        order: list[str] = []

        async def job(namespace: str, i: int) -> None:
            await pool.render("{{ i }}", {"i": i}, namespace=namespace, limit=10)
            order.append(namespace)

        # a blocks the only worker, then a and b queue: b must not wait behind all of a's
        slow = asyncio.create_task(
            pool.render("{% for i in range(90000) %}{% endfor %}", {}, namespace="a", limit=10)
        )
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(job("a", i)) for i in range(3)]
        tasks += [asyncio.create_task(job("b", i)) for i in range(3)]
        await asyncio.sleep(0)
        with pytest.raises(SandboxFailure) as caught:  # a's fourth waiting job: over its share
            await pool.render("{{ 9 }}", {}, namespace="a", limit=10)
        assert caught.value.reason is SandboxReason.OVERLOAD
        await asyncio.gather(slow, *tasks)
        assert order == ["a", "b", "a", "b", "a", "b"], order


async def test_a_closed_pool_refuses_and_frames_are_checked() -> None:
    pool = SandboxPool(settings())
    with pytest.raises(SandboxFailure) as caught:
        await pool.render("x", {}, namespace="a", limit=10)
    assert caught.value.reason is SandboxReason.CLOSED
    with pytest.raises(protocol.FrameError):
        protocol.length(protocol.HEADER.pack(protocol.MAX_REPLY + 1), protocol.MAX_REPLY)
    with pytest.raises(protocol.FrameError):
        protocol.length(b"\x00\x01", protocol.MAX_REPLY)
    with pytest.raises(protocol.FrameError):
        protocol.decode(b"[1, 2]")
    with pytest.raises(protocol.FrameError):
        protocol.decode(b"\x80not json")
    frame = protocol.encode({"id": 1, "ok": True})
    assert protocol.decode(frame[protocol.HEADER.size :]) == {"id": 1, "ok": True}


@pytest.mark.timeout(60)
async def test_inline_safe_expressions_never_reach_a_worker() -> None:
    async with SandboxPool(settings()) as pool:
        cheap = program("event.severity == 'error' && event.message.startsWith('x')")
        assert await pool.cel(
            cheap, {"event": {"severity": "error", "message": "x"}}, namespace="a", kind="f"
        )
        assert pool.starts == 0
