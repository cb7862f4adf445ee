"""The worker pool: tenant expressions evaluated in separate processes, bounded in time and memory.

Why processes (issue 23): a Jinja2 loop is Python code and a CEL evaluation is native code; nothing
running on the event loop can interrupt either, and one ``{% for a in s %}{% for b in s %}`` or one
``split('')`` comprehension froze the controller for every tenant. A worker is a fresh interpreter
(``worker.py``, never a fork of the threaded controller) with its own address-space limit; a job that
overruns its wall timeout gets the worker SIGKILLed and replaced, so the bound holds whatever the job
does.

* **Lazy**: no process exists until the first job that needs one (an installation whose expressions are
  all inline-safe, or that has none, never starts a worker).
* **Fair**: jobs wait in one queue per tenant namespace, served round-robin, at most
  ``per_namespace`` waiting per namespace and ``max_queue`` in all (beyond: ``overload`` at once). One
  tenant's slow expressions cost the others at most one job's timeout of waiting per worker.
* **Quarantine**: an expression (by the digest of its namespace, kind and source) that timed out, ran
  out of memory or crashed its worker fails fast for ``quarantine`` seconds without using a worker
  (bounded LRU).
* **Typed failures**: ``SandboxFailure(reason)``: ``timeout``, ``memory``, ``crashed``, ``quarantined``,
  ``overload``, ``protocol``, ``closed``, each counted in
  ``notification_sandbox_failures_total{kind,reason}``. An expression's own error (a typo, a bound of
  ``core/templates.py`` or ``core/cel``) comes back as the usual ``TemplateError``/``CELEvalError``.

Cost, measured on this 2-core machine under the other test load (1,000 sequential jobs, one worker,
``tests/unit/sandbox/test_pool.py``'s shapes): a round trip is 0.12–0.19 ms for a one-line template or a
CEL filter with a comprehension (orjson both ways, two pipe writes, two context switches), against
~15 µs for the same render and ~35–60 µs for a CEL evaluation in process; a worker costs ~27 MB RSS and
~0.2 s to start (Jinja2 and the CEL extension imported before its first job). That is why an inline-safe
CEL expression (``Expression.inline_safe``: no comprehension, no growing call) never comes here:
``event.severity == 'error'`` costs no IPC.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import itertools
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from ..errors import ControllerError
from ..settings import SandboxSettings
from . import protocol

log = logging.getLogger(__name__)

MIB = 1024 * 1024


class SandboxReason(StrEnum):
    TIMEOUT = "timeout"  # over the job's wall timeout: the worker was killed and replaced
    MEMORY = "memory"  # over the worker's address-space limit (MemoryError, or an abort in native code)
    CRASHED = "crashed"  # the worker died otherwise
    QUARANTINED = "quarantined"  # this expression overran recently: refused without a worker
    OVERLOAD = "overload"  # the queue (or this namespace's share of it) is full
    PROTOCOL = "protocol"  # an answer that is not a frame we sent for (a bug): the worker was replaced
    CLOSED = "closed"  # the pool is shut down (or was never started)


class SandboxFailure(ControllerError):
    """The sandbox could not evaluate the expression; ``reason`` says why (not the expression's fault
    alone: see ``SandboxReason``)."""

    def __init__(self, reason: SandboxReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(eq=False)
class _Job:
    namespace: str
    kind: str
    key: str
    frame: bytes
    ident: int
    future: asyncio.Future[Any]


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    @classmethod
    async def start(cls, settings: SandboxSettings) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "notification_controller.sandbox.worker",
            str(settings.memory),
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        worker = cls(proc)
        try:
            async with asyncio.timeout(settings.start_timeout):
                hello = await worker.read()
        except BaseException:
            await worker.kill()
            raise
        if hello.get("ready") is not True:
            await worker.kill()
            raise protocol.FrameError("the worker did not say ready")
        return worker

    async def read(self) -> dict[str, Any]:
        header = await self.stdout.readexactly(protocol.HEADER.size)
        size = protocol.length(header, protocol.MAX_REPLY)
        return protocol.decode(await self.stdout.readexactly(size))

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(Exception):
            self.stdin.close()
        await self.proc.wait()

    async def exit_reason(self) -> SandboxReason:
        """Why the worker ended (it closed its pipe): memory (MemoryError, exit 3; or an abort: the Rust
        allocator aborts when the address-space limit refuses it memory) or a crash."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await self.proc.wait()
        code = self.proc.returncode
        if code in (3, -signal.SIGABRT, -signal.SIGSEGV):
            return SandboxReason.MEMORY  # SIGSEGV: a stack/heap overflow under the limit
        return SandboxReason.CRASHED


class SandboxPool:
    """See the module docstring. ``run()`` (owned by the App's tasks) serves jobs until cancelled;
    ``async with SandboxPool(...)`` does the same for tests and commands."""

    def __init__(self, settings: SandboxSettings | None = None, *, registry: CollectorRegistry | None = None):
        self.settings = settings or SandboxSettings()
        self._queues: dict[str, collections.deque[_Job]] = {}
        self._ring: collections.deque[str] = collections.deque()
        self._waiting = 0
        self._wakeup = asyncio.Semaphore(0)
        self._quarantine: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._ids = itertools.count(1)
        self._running = False
        self._runner: asyncio.Task[None] | None = None
        self.starts = 0  # workers started (tests, the metric)
        registry = registry if registry is not None else CollectorRegistry()
        self.failures = Counter(
            "notification_sandbox_failures_total",
            "Tenant expressions (templates, CEL) the sandbox could not evaluate, by kind and reason "
            "(timeout, memory, crashed, quarantined, overload, protocol, closed)",
            ["kind", "reason"],
            registry=registry,
        )
        self.worker_starts = Counter(
            "notification_sandbox_worker_starts_total",
            "Sandbox worker processes started (the first ones, and replacements after a kill or crash)",
            registry=registry,
        )

    # ---- lifecycle -------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve jobs with ``settings.workers`` slots until cancelled; every worker is killed on the way
        out and every waiting job fails with ``closed``."""
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(max(1, self.settings.workers)):
                    group.create_task(self._slot(), name=f"sandbox-worker-{index}")
        finally:
            self._running = False
            self._fail_waiting()

    async def __aenter__(self) -> SandboxPool:
        self._runner = asyncio.create_task(self.run(), name="sandbox")
        await asyncio.sleep(0)  # run() marks the pool running
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None

    # ---- evaluation --------------------------------------------------------------------------------------
    async def evaluate(self, job: dict[str, Any], *, namespace: str, kind: str, source: str) -> Any:
        """Run ``job`` (a ``worker.py`` job without ``id``) for a tenant ``namespace``; ``kind`` labels
        the metric, ``source`` (every expression the job runs) keys the quarantine. Returns the value;
        raises ``SandboxFailure``, or ``_ExpressionFailed`` with the expression's own error text."""
        # per namespace: another tenant's copy of an expression that overran on this tenant's events
        # (data it controls) keeps working
        key = hashlib.blake2b(f"{namespace}\0{job['kind']}\0{source}".encode(), digest_size=16).hexdigest()
        if self._quarantined(key):
            raise self._failure(kind, SandboxReason.QUARANTINED, "the expression overran recently")
        if not self._running:
            raise self._failure(kind, SandboxReason.CLOSED, "the sandbox is not running")
        queue = self._queues.get(namespace)
        if self._waiting >= self.settings.max_queue or (
            queue is not None and len(queue) >= self.settings.per_namespace
        ):
            raise self._failure(kind, SandboxReason.OVERLOAD, "too many expressions wait for the sandbox")
        ident = next(self._ids)
        try:
            frame = protocol.encode({**job, "id": ident})
        except TypeError as exc:  # a variable JSON cannot carry: the expression's input, not the sandbox
            raise ExpressionFailed(f"variables cannot be passed to the sandbox: {exc}") from None
        loop = asyncio.get_running_loop()
        entry = _Job(namespace, kind, key, frame, ident, loop.create_future())
        if queue is None:
            queue = self._queues[namespace] = collections.deque()
            self._ring.append(namespace)
        queue.append(entry)
        self._waiting += 1
        self._wakeup.release()
        answer: dict[str, Any] = await entry.future
        if answer.get("ok") is True:
            return answer.get("value")
        raise ExpressionFailed(str(answer.get("error", "evaluation failed")))

    def _quarantined(self, key: str) -> bool:
        until = self._quarantine.get(key)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._quarantine[key]
        return False

    def _quarantine_add(self, key: str) -> None:
        self._quarantine[key] = time.monotonic() + self.settings.quarantine
        self._quarantine.move_to_end(key)
        while len(self._quarantine) > self.settings.quarantine_size:
            self._quarantine.popitem(last=False)

    def _failure(self, kind: str, reason: SandboxReason, message: str) -> SandboxFailure:
        self.failures.labels(kind=kind, reason=reason.value).inc()
        return SandboxFailure(reason, f"sandbox: {message} ({reason.value})")

    def _take(self) -> _Job | None:
        """The next job, round-robin over namespaces (one per ``_wakeup`` permit); None when its caller
        gave up (cancelled) meanwhile."""
        if not self._ring:
            return None
        namespace = self._ring.popleft()
        queue = self._queues[namespace]
        job = queue.popleft()
        self._waiting -= 1
        if queue:
            self._ring.append(namespace)
        else:
            del self._queues[namespace]
        return None if job.future.done() else job

    def _fail_waiting(self) -> None:
        while self._ring:
            job = self._take()
            if job is not None:
                job.future.set_exception(self._failure(job.kind, SandboxReason.CLOSED, "shutting down"))

    # ---- the worker slots ----------------------------------------------------------------------------------
    async def _slot(self) -> None:
        worker: _Worker | None = None
        try:
            while True:
                await self._wakeup.acquire()
                job = self._take()
                if job is None:
                    continue
                if worker is None or not worker.alive:
                    try:
                        worker = await self._start_worker()
                    except (OSError, protocol.FrameError, asyncio.IncompleteReadError, TimeoutError) as exc:
                        log.error("sandbox: cannot start a worker process: %s", type(exc).__name__)
                        self._settle(job, SandboxReason.CRASHED, "no worker process")
                        worker = None
                        await asyncio.sleep(1.0)  # do not spin on a broken installation
                        continue
                worker = await self._serve(worker, job)
        finally:
            if worker is not None:
                await worker.kill()

    async def _start_worker(self) -> _Worker:
        worker = await _Worker.start(self.settings)
        self.starts += 1
        self.worker_starts.inc()
        return worker

    async def _serve(self, worker: _Worker, job: _Job) -> _Worker | None:
        """Run one job on ``worker``; the worker to keep (None: it was killed or died)."""
        started = time.monotonic()
        try:
            worker.stdin.write(job.frame)
            async with asyncio.timeout(self.settings.timeout):
                await worker.stdin.drain()
                answer = await worker.read()
        except TimeoutError:
            await worker.kill()
            self._overran(job, SandboxReason.TIMEOUT, f"over {self.settings.timeout * 1000:g} ms", started)
            return None
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
            reason = await worker.exit_reason()
            await worker.kill()
            self._overran(job, reason, f"worker ended ({worker.proc.returncode})", started)
            return None
        except protocol.FrameError as exc:
            await worker.kill()
            self._settle(job, SandboxReason.PROTOCOL, str(exc))
            return None
        if answer.get("id") != job.ident:
            await worker.kill()
            self._settle(job, SandboxReason.PROTOCOL, "an answer to another job")
            return None
        if answer.get("reason") == "memory":
            await worker.kill()  # it exits by itself after a MemoryError; do not wait for it
            self._overran(job, SandboxReason.MEMORY, f"over {self.settings.memory // MIB} MiB", started)
            return None
        if not job.future.done():
            job.future.set_result(answer)
        return worker

    def _overran(self, job: _Job, reason: SandboxReason, why: str, started: float) -> None:
        self._quarantine_add(job.key)
        log.info(
            "sandbox: a %s expression of namespace %s %s after %.0f ms; worker replaced, expression "
            "%s quarantined for %gs",
            job.kind,
            job.namespace,
            reason.value,
            (time.monotonic() - started) * 1000,
            job.key[:12],
            self.settings.quarantine,
        )
        self._settle(job, reason, why)

    def _settle(self, job: _Job, reason: SandboxReason, why: str) -> None:
        failure = self._failure(job.kind, reason, why)
        if not job.future.done():
            job.future.set_exception(failure)

    # ---- typed entry points ----------------------------------------------------------------------------------
    async def render(
        self, source: str, variables: Mapping[str, Any], *, namespace: str, limit: int, kind: str = "template"
    ) -> str:
        """``core.templates.render`` in a worker; raises ``TemplateError`` or ``SandboxFailure``."""
        from ..core.templates import TemplateError

        budget = self.settings.timeout * 0.8  # the render's own clock gives a clean error before the kill
        job = {"kind": "template", "source": source, "vars": variables, "limit": limit, "budget": budget}
        try:
            value = await self.evaluate(job, namespace=namespace, kind=kind, source=source)
        except ExpressionFailed as exc:
            raise TemplateError(str(exc)) from None
        if not isinstance(value, str):
            raise self._failure(kind, SandboxReason.PROTOCOL, "a template answer that is not text")
        return value

    async def cel(
        self,
        expression: Any,
        activation: Mapping[str, Any],
        *,
        namespace: str,
        kind: str,
        strict_types: bool = False,
    ) -> Any:
        """Evaluate a compiled ``core.cel.Expression``: on the loop when it is ``inline_safe``, else in a
        worker. Raises ``CELError`` or ``SandboxFailure``."""
        from ..core.cel import CELEvalError

        if expression.inline_safe:
            return expression.evaluate(activation)
        job = {
            "kind": "cel",
            "source": expression.source,
            "declared": sorted(expression.variables),
            "output": str(expression.output),
            "strict": strict_types,
            "vars": activation,
        }
        try:
            return await self.evaluate(job, namespace=namespace, kind=kind, source=expression.source)
        except ExpressionFailed as exc:
            raise CELEvalError(str(exc)) from None

    async def oidc(
        self,
        claims: Mapping[str, Any],
        variables: Sequence[tuple[str, str]],
        validations: Sequence[str],
        *,
        namespace: str,
    ) -> dict[str, Any]:
        """generic-oidc's chain in a worker (``worker.oidc_chain``); raises ``SandboxFailure``."""
        job = {
            "kind": "oidc",
            "claims": claims,
            "variables": [list(v) for v in variables],
            "validations": list(validations),
        }
        source = "\0".join([*(f"{n}={e}" for n, e in variables), *validations])
        try:
            value = await self.evaluate(job, namespace=namespace, kind="oidc", source=source)
        except ExpressionFailed as exc:
            raise self._failure("oidc", SandboxReason.PROTOCOL, str(exc)) from None
        if not isinstance(value, dict):
            raise self._failure("oidc", SandboxReason.PROTOCOL, "an answer that is not an object")
        return value


class ExpressionFailed(ControllerError):
    """The expression's own error, as the worker worded it (value-free, from ``core``)."""
