"""A tiny webhook sink for the local example: prints every notification it receives.

Run with ``make sink`` (port 9999), then ``make run`` and post an event (see README).
"""

from __future__ import annotations

import json
import sys

from aiohttp import web


async def receive(request: web.Request) -> web.Response:
    body = await request.read()
    try:
        shown = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        shown = body.decode("utf-8", errors="replace")
    print(f"--- {request.method} {request.path}  X-Signature: {request.headers.get('X-Signature', '-')}")
    print(shown, flush=True)
    return web.Response(status=200)


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9999
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", receive)
    print(f"sink listening on http://127.0.0.1:{port}/", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
