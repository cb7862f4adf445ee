"""Shared helpers of the adversarial suites: raw sockets, a valid Alert+Provider manifest, polling.

Raw ``asyncio`` streams are used wherever aiohttp's client would refuse to send the request (non-ASCII or
oversized headers, smuggling, bodies that stop half way) or where the test must observe when the *server*
closes the connection (slow clients).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

KS = "kustomize.toolkit.fluxcd.io"
SHA = "5394cb7f48332b2de7c17dd8b8384bbc84b7e738"


def event_body(message: str = "Reconciliation finished", *, name: str = "apps", **metadata: str) -> bytes:
    """A Flux event as kustomize-controller POSTs it (reference §2)."""
    md = {f"{KS}/revision": f"main@sha1:{SHA}", **metadata}
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": name,
                "uid": "cc4d0095-83f4-4f08-98f2-d2e9f3731fb9",
                "apiVersion": f"{KS}/v1",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": md,
            "reportingController": "kustomize-controller",
        },
        separators=(",", ":"),
    ).encode()


def pair(name: str, ptype: str, address: str, *, secret: str | None = None, extra: str = "") -> str:
    """A Provider and an Alert (same name) on every Kustomization of flux-system, as YAML documents."""
    secret_ref = f"\n  secretRef: {{name: {secret}}}" if secret else ""
    return f"""
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: flux-system}}
spec:
  type: {ptype}
  address: "{address}"{secret_ref}{extra}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: flux-system}}
spec:
  providerRef: {{name: {name}}}
  eventSources: [{{kind: Kustomization, name: '*'}}]
"""


def secret(name: str, **data: str) -> str:
    lines = "".join(f"\n  {key}: {json.dumps(value)}" for key, value in data.items())
    return f"""
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: flux-system}}
stringData:{lines}
"""


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], *, timeout: float = 5.0, what: str = "condition"
) -> None:
    """Poll ``check`` until true; fail with ``what`` after ``timeout`` seconds (no blind sleeps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@dataclass
class RawAnswer:
    status: int  # 0: the server closed the connection without answering
    head: bytes = b""
    body: bytes = b""


_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})")


async def raw_request(port: int, data: bytes, *, timeout: float = 10.0) -> RawAnswer:
    """Send raw bytes, read the answer until the server closes (or ``timeout``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            raw = (
                await reader.read()
            )  # the caller sends "Connection: close" or a request the server closes on
    except ConnectionError:
        raw = b""
    finally:
        writer.close()
    return parse_answer(raw)


def parse_answer(raw: bytes) -> RawAnswer:
    head, _, body = raw.partition(b"\r\n\r\n")
    match = _STATUS.match(head)
    return RawAnswer(int(match.group(1)), head, body) if match else RawAnswer(0, head, body)


@dataclass
class SlowClient:
    """One slowloris socket: ``chunks`` written ``interval`` seconds apart; records when the server closed."""

    port: int
    chunks: list[bytes]
    interval: float
    opened: float = 0.0
    closed_after: float | None = None
    received: bytearray = field(default_factory=bytearray)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.opened = loop.time()

        async def trickle() -> None:
            for chunk in self.chunks:
                if writer.is_closing():
                    return
                try:
                    writer.write(chunk)
                    await writer.drain()
                except ConnectionError:
                    return
                await asyncio.sleep(self.interval)
            await asyncio.Event().wait()  # then stay silent, never closing from this side

        writer_task = asyncio.create_task(trickle())
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except ConnectionError:
                    data = b""
                if not data:
                    break
                self.received += data
            self.closed_after = loop.time() - self.opened
        finally:
            writer_task.cancel()
            await asyncio.gather(writer_task, return_exceptions=True)
            writer.close()

    @property
    def status(self) -> int:
        return parse_answer(bytes(self.received)).status


def samples(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    """All samples of metric ``name`` (full sample name, e.g. ``..._count``) with their labels."""
    out = []
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                out.append((dict(sample.labels), float(sample.value)))
    return out


def any_5xx(registry: CollectorRegistry, name: str) -> list[dict[str, Any]]:
    """Label sets of a ``code``-labelled counter with a 5xx code and a non-zero value."""
    return [
        labels
        for labels, value in samples(registry, name)
        if labels.get("code", "").startswith("5") and value
    ]
