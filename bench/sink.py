"""The notification sink: the ``generic`` Provider's address during the benchmarks, in its own process.

For every notification it records the arrival time and reads from the event's metadata what the load
generator put there (``event.toolkit.fluxcd.io/*`` keys reach a ``generic`` provider prefix-stripped):

* ``sent_ns`` — wall-clock nanoseconds when the event was POSTed to the controller, so
  ``arrival - sent`` is the POST-to-delivery latency, measured where delivery happens;
* ``phase`` — which benchmark phase the event belongs to (warm-up, measure, burst...), so late
  deliveries of one phase never pollute the next one's numbers.

The bare forwarder baseline (``bench/forwarder.py``) sends the event as it got it, prefix included:
both spellings are read.

It also counts every event key (the event's message, unique per event) to report duplicates: the
controller's delivery is at-most-once, so any key seen twice is a bug.

``--delay S`` makes every answer wait S seconds (a slow provider). ``GET /_stats?phase=P`` returns the
phase's counts and latencies as JSON. ``python -m bench.sink`` prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
from aiohttp import web

PREFIX = "event.toolkit.fluxcd.io/"


@dataclass
class Phase:
    received: int = 0
    first_ns: int = 0
    last_ns: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    keys: Counter[str] = field(default_factory=Counter)

    def as_json(self) -> dict[str, object]:
        duplicates = sum(n - 1 for n in self.keys.values() if n > 1)
        return {
            "received": self.received,
            "unique": len(self.keys),
            "duplicates": duplicates,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "latencies_ms": self.latencies_ms,
        }


class Sink:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.phases: dict[str, Phase] = {}
        self.unparsed = 0

    async def notify(self, request: web.Request) -> web.Response:
        body = await request.read()
        arrival = time.time_ns()
        try:
            event = orjson.loads(body)
            metadata = event.get("metadata") or {}
            key = str(event.get("message", ""))
            # the controller strips the prefix (generic provider); the bare forwarder sends it as is
            phase_name = str(metadata.get("phase", metadata.get(PREFIX + "phase", "")))
            sent = int(metadata.get("sent_ns", metadata.get(PREFIX + "sent_ns", 0)))
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            self.unparsed += 1
            return web.Response(status=400)
        phase = self.phases.get(phase_name)
        if phase is None:
            phase = self.phases[phase_name] = Phase()
        phase.received += 1
        phase.keys[key] += 1
        phase.first_ns = phase.first_ns or arrival
        phase.last_ns = arrival
        if sent:
            phase.latencies_ms.append((arrival - sent) / 1e6)
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        return web.Response(status=200)

    async def stats(self, request: web.Request) -> web.Response:
        phase = self.phases.get(request.query.get("phase", ""), Phase())
        payload = phase.as_json()
        payload["unparsed"] = self.unparsed
        return web.Response(body=orjson.dumps(payload), content_type="application/json")


def create_app(delay: float = 0.0) -> web.Application:
    sink = Sink(delay)
    app = web.Application(client_max_size=3 * 1024 * 1024)
    app.router.add_get("/_stats", sink.stats)
    app.router.add_route("*", "/{tail:.*}", sink.notify)
    return app


async def serve(host: str, port: int, delay: float) -> None:
    runner = web.AppRunner(create_app(delay), access_log=None)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before answering")
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        pass
    else:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve(args.host, args.port, args.delay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
