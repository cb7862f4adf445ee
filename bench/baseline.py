"""The baseline every benchmark is compared to: the least an aiohttp event server can do.

It reads the body, parses it as JSON (with ``orjson``, the parser the controller uses) and answers
202 with an empty body — no validation, no duplicate detection, no matching, no metrics. Measured
in the same run, on the same machine, with the same load generator, it turns absolute numbers
(which depend on the machine and on what else runs) into ratios that can be compared across runs.

Like the controller it runs in its own process on the default asyncio loop (the controller does not
install uvloop). ``python -m bench.baseline [--port N]`` prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import orjson
from aiohttp import web


async def accept(request: web.Request) -> web.Response:
    body = await request.read()
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return web.Response(status=400)
    return web.Response(status=202)


def create_app() -> web.Application:
    app = web.Application(client_max_size=3 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", accept)
    return app


async def serve(host: str, port: int) -> None:
    runner = web.AppRunner(create_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
