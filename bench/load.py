"""The Python load generator: N concurrent keep-alive connections, bounded by request count AND duration.

Throughput is measured with ``wrk`` (``bench/wrk.py``): this generator tops out near 11,500 req/s on a
2-core machine, below the bare aiohttp server, so it measured itself. It stays for what ``wrk`` cannot do:
open-loop latency at a fixed rate (request *i* due at ``start + i/R``, each event carrying its send time
for POST-to-delivery latency at the sink) and the count-bounded burst.

Two modes:

* closed loop (``rate=None``): every connection sends its next request as soon as the previous answer
  arrived — the request rate is whatever the server sustains, which is what "requests/s" measures;
* open loop (``rate=R``): request *i* is due at ``start + i/R``; a connection that is free waits for the
  next due slot. Latency is measured from the moment the request was due, not from when a connection
  became free, so a server that falls behind shows it in p99 instead of hiding it (no coordinated
  omission).

The generator always stops by itself: after ``max_requests`` requests or ``max_duration`` seconds,
whichever comes first, and every request has a timeout. It runs in the benchmark driver's process,
which is separate from the server under test and from the sink.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

BodyFactory = Callable[[int], bytes]
HeadersFactory = Callable[[int, bytes], Mapping[str, str]]

JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 for an empty list)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


@dataclass
class LoadResult:
    """What one run of the generator measured. Latencies are in seconds."""

    requests: int = 0
    errors: int = 0  # connection errors and timeouts (no HTTP status)
    elapsed: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    error_kinds: Counter[str] = field(default_factory=Counter)

    @property
    def rps(self) -> float:
        """Completed requests (any HTTP status) per second."""
        return self.requests / self.elapsed if self.elapsed > 0 else 0.0

    def rate_of(self, status: int) -> float:
        return self.statuses[status] / self.elapsed if self.elapsed > 0 else 0.0

    def quantile(self, q: float) -> float:
        return percentile(sorted(self.latencies), q)

    @property
    def p50(self) -> float:
        return self.quantile(50)

    @property
    def p99(self) -> float:
        return self.quantile(99)

    def merge(self, other: LoadResult) -> LoadResult:
        """Add another run's counts (interleaved slices of one measurement)."""
        self.requests += other.requests
        self.errors += other.errors
        self.elapsed += other.elapsed
        self.statuses.update(other.statuses)
        self.error_kinds.update(other.error_kinds)
        self.latencies.extend(other.latencies)
        return self

    def summary(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        return (
            f"{self.requests} requests in {self.elapsed:.2f}s = {self.rps:.0f} req/s, "
            f"p50 {self.p50 * 1000:.2f} ms, p99 {self.p99 * 1000:.2f} ms, errors {self.errors} [{codes}]"
        )


async def run_load(
    url: str,
    body_for: BodyFactory,
    *,
    connections: int = 32,
    max_requests: int = 100_000,
    max_duration: float = 10.0,
    rate: float | None = None,
    headers: Mapping[str, str] = JSON_HEADERS,
    headers_for: HeadersFactory | None = None,
    request_timeout: float = 10.0,
    first_index: int = 0,
) -> LoadResult:
    """POST ``body_for(i)`` to ``url`` for i in ``first_index`` ..., and measure.

    ``body_for`` is called right before each request is sent (so a timestamp it embeds is the send
    time); ``headers_for(i, body)``, if given, adds per-request headers (signatures, delivery ids).
    """
    if connections < 1 or max_requests < 1 or max_duration <= 0:
        raise ValueError("connections, max_requests and max_duration must be positive")
    result = LoadResult()
    loop = asyncio.get_running_loop()
    next_slot = 0
    start = loop.time()
    perf_start = time.perf_counter()
    deadline = start + max_duration
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    connector = aiohttp.TCPConnector(limit=connections, force_close=False, ttl_dns_cache=None)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_slot
        while True:
            slot = next_slot
            if slot >= max_requests:
                return
            next_slot += 1
            due = start + slot / rate if rate else loop.time()
            if due >= deadline or loop.time() >= deadline:
                return
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            index = first_index + slot
            body = body_for(index)
            request_headers = dict(headers)
            if headers_for is not None:
                request_headers.update(headers_for(index, body))
            # perf_counter, not loop.time(): uvloop's clock has a 1 ms resolution.
            sent = time.perf_counter() if rate is None else due - start + perf_start
            try:
                async with session.post(url, data=body, headers=request_headers) as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                result.errors += 1
                result.error_kinds[type(exc).__name__] += 1
                continue
            result.latencies.append(time.perf_counter() - sent)
            result.statuses[status] += 1
            result.requests += 1

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        workers = [asyncio.create_task(worker(session)) for _ in range(connections)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
        result.elapsed = loop.time() - start
    return result


def install_fast_loop() -> str:
    """Use uvloop for the generator when installed (``speed`` extra), so the client is not the bottleneck."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def wall_ns() -> int:
    """Wall-clock nanoseconds, comparable across processes on the same machine (send/arrival stamps)."""
    return time.time_ns()
