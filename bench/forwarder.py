"""The delivery baseline: the cheapest plain-aiohttp event *forwarder* (issues 17 and 29).

It reads the body, parses it as JSON (``orjson``), answers 202, then POSTs the body unchanged to one
address through a keep-alive ``aiohttp.ClientSession`` pool. No matching, no duplicate detection, no
metadata, no metrics, no retries. Measured in the same run as the controller's delivery path, it says how
much of the controller's CPU per notification is the controller's own doing and how much is the price of
two HTTP exchanges in asyncio/aiohttp.

A baseline must be the cheapest honest way to do the same work, or the ratio flatters the controller
(issue 29: a queue drained by 16 workers cost 185 µs per notification where one task per event cost
132-139 µs). ``--variant`` keeps every way tried, so ``python -m bench --only forwarders`` can measure
them again side by side; the default is the cheapest one measured (bench/README.md has the numbers):

* ``task`` — one task per event (``loop.create_task``), the session's default connector (100
  connections): the default;
* ``task16`` — the same over ``TCPConnector(limit=16)`` (the controller's default
  ``--provider-concurrency``);
* ``queue`` — an ``asyncio.Queue`` drained by 16 workers over ``TCPConnector(limit=16)`` (the baseline
  of issue 17);
* ``inline`` — the handler awaits the POST and answers 202 after it (no task, no queue; the client waits
  for the delivery, which the controller does not make it do).

Like the controller it runs on the default asyncio loop, in its own process. ``python -m
bench.forwarder --to URL [--port N]`` prints ``PORT <n>`` once listening. On SIGTERM it stops taking
events and finishes what is in flight (bounded by ``--drain`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable

import aiohttp
import orjson
from aiohttp import web

VARIANTS = ("task", "task16", "queue", "inline")
DEFAULT_VARIANT = "task"
HEADERS = {"Content-Type": "application/json"}

Handler = Callable[[web.Request], Awaitable[web.Response]]


class Forwarder:
    """One session, one address, and the in-flight bookkeeping the variants need."""

    def __init__(self, session: aiohttp.ClientSession, address: str, variant: str, concurrency: int) -> None:
        self.session = session
        self.address = address
        self.variant = variant
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()
        self.workers = (
            [asyncio.create_task(self.worker()) for _ in range(concurrency)] if variant == "queue" else []
        )

    async def post(self, body: bytes) -> None:
        try:
            async with self.session.post(self.address, data=body, headers=HEADERS) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError):
            pass  # a baseline: the controller's retries and accounting are what it does not do

    async def worker(self) -> None:
        while True:
            body = await self.queue.get()
            try:
                await self.post(body)
            finally:
                self.queue.task_done()

    async def accept(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            return web.Response(status=400)
        if self.variant == "queue":
            self.queue.put_nowait(body)
        elif self.variant == "inline":
            await self.post(body)
        else:
            task = asyncio.create_task(self.post(body))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return web.Response(status=202)

    async def drain(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.queue.join()
                if self.tasks:
                    await asyncio.wait(set(self.tasks))
        for task in [*self.workers, *self.tasks]:
            task.cancel()
        await asyncio.gather(*self.workers, *self.tasks, return_exceptions=True)


def connector(variant: str, concurrency: int) -> aiohttp.TCPConnector:
    return (
        aiohttp.TCPConnector() if variant in ("task", "inline") else aiohttp.TCPConnector(limit=concurrency)
    )


async def serve(host: str, port: int, address: str, variant: str, concurrency: int, drain: float) -> None:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector(variant, concurrency), timeout=timeout) as session:
        forwarder = Forwarder(session, address, variant, concurrency)
        app = web.Application(client_max_size=3 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", forwarder.accept)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        print(f"PORT {runner.addresses[0][1]}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()
        await forwarder.drain(drain)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forwarder", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--to", required=True, help="where every event is POSTed (the sink)")
    parser.add_argument(
        "--variant", choices=VARIANTS, default=DEFAULT_VARIANT, help="how (see the docstring)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="pool size / workers of task16 and queue")
    parser.add_argument(
        "--drain", type=float, default=10.0, help="seconds to finish in-flight POSTs on SIGTERM"
    )
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.to, args.variant, args.concurrency, args.drain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
