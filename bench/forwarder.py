"""The delivery baseline: the least an aiohttp event *forwarder* can do (issue 17).

It reads the body, parses it as JSON (``orjson``), answers 202, then POSTs the body unchanged to one
address with a pooled ``aiohttp.ClientSession``: a queue drained by ``--concurrency`` workers (16, the
controller's default ``--provider-concurrency``), one keep-alive pool. No matching, no duplicate
detection, no metadata, no metrics, no retries. Measured in the same run as the controller's delivery
path, it says how much of the controller's CPU per notification is the controller's own doing and how
much is the price of two HTTP exchanges in asyncio/aiohttp.

Like the controller it runs on the default asyncio loop, in its own process. ``python -m
bench.forwarder --to URL [--port N]`` prints ``PORT <n>`` once listening. On SIGTERM it stops taking
events and finishes what is queued (bounded by ``--drain`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import aiohttp
import orjson
from aiohttp import web

QUEUE: web.AppKey[asyncio.Queue[bytes]] = web.AppKey("queue", asyncio.Queue)


async def accept(request: web.Request) -> web.Response:
    body = await request.read()
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return web.Response(status=400)
    request.app[QUEUE].put_nowait(body)
    return web.Response(status=202)


async def deliver(queue: asyncio.Queue[bytes], session: aiohttp.ClientSession, address: str) -> None:
    headers = {"Content-Type": "application/json"}
    while True:
        body = await queue.get()
        try:
            async with session.post(address, data=body, headers=headers) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError):
            pass  # a baseline: the controller's retries and accounting are what it does not do
        finally:
            queue.task_done()


def create_app(queue: asyncio.Queue[bytes]) -> web.Application:
    app = web.Application(client_max_size=3 * 1024 * 1024)
    app[QUEUE] = queue
    app.router.add_route("*", "/{tail:.*}", accept)
    return app


async def serve(host: str, port: int, address: str, concurrency: int, drain: float) -> None:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        workers = [asyncio.create_task(deliver(queue, session, address)) for _ in range(concurrency)]
        runner = web.AppRunner(create_app(queue), access_log=None)
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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(queue.join(), drain)
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forwarder", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--to", required=True, help="where every event is POSTed (the sink)")
    parser.add_argument("--concurrency", type=int, default=16, help="parallel POSTs (pool size)")
    parser.add_argument("--drain", type=float, default=10.0, help="seconds to finish the queue on SIGTERM")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.to, args.concurrency, args.drain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
