"""Issue 23 item 17: malformed requests on the receiver port are client mistakes, not errors.

aiohttp's parser refuses a bad chunk size, ``Content-Length`` with ``Transfer-Encoding``, a bad header line...
with a 400 and logs each through ``aiohttp.server`` with ``logger.exception``; the controller printed them at
``error`` (Flux's levels have no warning), so anyone who reaches ``:9292`` could fill the log and page the
operator. The controller runs as users run it (``python -m notification_controller`` in local mode, default
``--log-level=info``, JSON logs) with a generic Receiver. Raw malformed requests (some on the Receiver's own
webhook path) must each get a 400, leave no ``error`` line (nor the webhook path) in the process's log, and be
counted in ``notification_receiver_requests_total{type="unknown",outcome="malformed"}``; the Receiver still
answers a legitimate hook with 200 afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from notification_controller.core.webhook import webhook_path
from tests.adversarial.kit import eventually, raw_request
from tests.support.controllers import ControllerProcess

pytestmark = pytest.mark.slow

NS = "flux-system"
TOKEN = "receiver-token-canary-9b2d"
PATH = webhook_path(TOKEN.encode(), "hook", NS)

MANIFESTS = f"""\
apiVersion: v1
kind: Secret
metadata: {{name: hook-token, namespace: {NS}}}
stringData: {{token: {TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: hook, namespace: {NS}}}
spec:
  type: generic
  secretRef: {{name: hook-token}}
  resources: [{{kind: GitRepository, name: webapp}}]
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: webapp, namespace: {NS}}}
spec: {{url: 'https://example.com/webapp'}}
"""


def malformed(path: str) -> list[bytes]:
    """Requests aiohttp's parser refuses (each answered 400 before any handler runs)."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
    return [
        head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",  # bad chunk size
        head + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  # CL with TE
        head + b"Content-Length: abc\r\n\r\n",
        head + b"Bad Header\r\n\r\n",
        head + b"Transfer-Encoding: gzip\r\n\r\n",
        b"GET /hook/ HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
        f"POST {path} HTTP/9.9\r\nHost: x\r\n\r\n".encode(),
    ]


async def hook_status(ctl: ControllerProcess) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(ctl.receiver_url + PATH, data=b"{}") as resp,
    ):
        await resp.read()
        return resp.status


async def hook_status_is(ctl: ControllerProcess, status: int) -> bool:
    return await hook_status(ctl) == status


def log_records(path: Path) -> list[dict[str, object]]:
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append({"level": "unparsable", "msg": line})
    return records


@pytest.mark.timeout(120)
async def test_malformed_requests_are_counted_not_logged_as_errors(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "objects.yaml").write_text(MANIFESTS, encoding="utf-8")
    log_path = tmp_path / "controller.log"
    ctl = ControllerProcess(manifests, [], log_path)
    await ctl.start(timeout=60)
    try:
        # The Receiver is served once reconciled (the scenario is live).
        await eventually(lambda: hook_status_is(ctl, 200), timeout=30, what="the Receiver's hook")
        requests = [*malformed(PATH), *malformed("/hook/0123abcd")] * 3  # bounded: 42 requests
        answers = [await raw_request(ctl.ports["receiver"], data, timeout=10) for data in requests]
        assert [a.status for a in answers] == [400] * len(requests)
        assert all(b"Traceback" not in a.body for a in answers)  # aiohttp's reason, no internals
        counted = await ctl.metric(
            "notification_receiver_requests_total", type="unknown", outcome="malformed"
        )
        assert counted == len(requests)
        assert await hook_status(ctl) == 200  # legitimate hooks still work
    finally:
        assert await ctl.stop() == 0, ctl.log()
    records = log_records(log_path)
    errors = [r for r in records if r.get("level") not in ("info", "debug", "trace")]
    assert errors == [], errors[:3]
    text = log_path.read_text(errors="replace")
    assert PATH.removeprefix("/hook/") not in text and TOKEN not in text
