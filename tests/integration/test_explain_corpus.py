"""``explain --send`` and the running controller send the same bytes (issue 25 item 3).

A corpus of events × manifests (the bundled ``examples/manifests`` with both ``examples/events``, plus planted
cases: ``checksum``/``token`` metadata, a generic-hmac signature, a broken template, a filter that fails at run
time, a filtered-out event, a threshold, a suspended Alert, a cross-namespace reference refused by
``--no-cross-namespace-refs``, a missing Provider, templated Slack and generic messages) goes through both:

* ``notification-controller explain --send`` (the installed console script, a process), one event at a time;
* the controller (a real process in local mode, ``tests/support/controllers.py``), the same events POSTed.

Every Alert has its own Provider path on one local capture server, so each request names its Alert. For every
case the test asserts the same decision (what explain says "would send" is what the controller sent, nothing
else arrives within a second) and byte-identical requests (method, path, every header — ``X-Signature``,
``Authorization`` — and body). The old explain failed it: it forwarded the ``token`` metadata the dispatcher
strips (another body, another signature) and called the Alert with a broken template "not matched" where the
controller sends the default message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.capture import CapturedRequest, CaptureServer
from tests.support.controllers import ROOT, ControllerProcess, post_event

CONSOLE_SCRIPT = Path(sys.executable).parent / "notification-controller"
EXAMPLES = ROOT / "examples"
GROUP = "kustomize.toolkit.fluxcd.io"
HMAC_KEY = "corpus-hmac-key-0123456789"
SLACK_TOKEN = "xoxb-corpus-canary-0123456789"

PROVIDER = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: {ns}}}
spec: {spec}
"""

ALERTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (Provider spec without the address, Alert spec without providerRef/eventSources)
    "hmac-signed": ({"type": "generic-hmac", "secretRef": {"name": "hmac"}}, {}),
    "slack-templated": (
        {"type": "slack", "channel": "deploys", "secretRef": {"name": "slack"}},
        {"template": {"title": "{{ event.reason }} on {{ event.involvedObject.name }}"}},
    ),
    "generic-templated": (
        {"type": "generic"},
        {"template": {"message": "{{ event.severity | upper }}: {{ event.message }}"}},
    ),
    "broken-template": ({"type": "generic"}, {"template": {"message": "{{ event.reason "}}),
    "failing-filter": ({"type": "generic"}, {"filter": "int(event.message) > 1"}),
    "filtered-out": ({"type": "generic"}, {"filter": "event.reason == 'Nope'"}),
    "threshold": ({"type": "generic"}, {"threshold": {"count": 3, "within": "10m"}}),
    "suspended": ({"type": "generic"}, {"suspend": True}),
    "missing-provider": ({"type": "generic"}, {"providerRef": {"name": "nowhere"}}),
}

PLANTED_EVENT = {
    "involvedObject": {"kind": "Kustomization", "namespace": "planted", "name": "web",
                       "apiVersion": "kustomize.toolkit.fluxcd.io/v1"},
    "severity": "info",
    "timestamp": "2026-11-27T08:00:00Z",
    "message": "applied revision main@sha1:0c9c2e41",
    "reason": "ReconciliationSucceeded",
    "metadata": {
        f"{GROUP}/revision": "main@sha1:0c9c2e41",
        f"{GROUP}/checksum": "internal-checksum",
        f"{GROUP}/token": "internal-dedup-token",
        "event.toolkit.fluxcd.io/team": "web",
        "other.example.com/ignored": "dropped-on-ingest",
    },
    "reportingController": "kustomize-controller",
}  # fmt: skip

EXPECTED_LINES = {
    "planted/hmac-signed": "would send -> Provider planted/hmac-signed (generic-hmac)",
    "planted/slack-templated": "would send -> Provider planted/slack-templated (slack)",
    "planted/generic-templated": "would send -> Provider planted/generic-templated (generic)",
    "planted/broken-template": "would send -> Provider planted/broken-template (generic) (TemplateRenderFailed: ",
    "planted/failing-filter": "would send -> Provider planted/failing-filter (generic) (FilterFailed: ",
    "planted/filtered-out": "would not send: noise-filter: Kustomization/planted/web: spec.filter returned false",
    "planted/threshold": "would not send: noise-threshold: Kustomization/planted/web: 1 of 3 events within 10m",
    "planted/suspended": "would not send: matcher: suspended",
    "planted/missing-provider": "would not send: rules: failed to read provider: Provider 'planted/nowhere' not found",
    "watch/cross-namespace": "would not send: rules: discarding event, access denied to cross-namespace sources",
}
"""The verdict line of each planted Alert for the planted event (one line, one vocabulary)."""


def write_corpus(directory: Path, url: str) -> Path:
    directory.mkdir()
    bundled = (EXAMPLES / "manifests" / "notifications.yaml").read_text(encoding="utf-8")
    assert "http://127.0.0.1:9999/flux" in bundled
    (directory / "examples.yaml").write_text(
        bundled.replace("http://127.0.0.1:9999/flux", f"{url}/flux-system/all-flux-system"), encoding="utf-8"
    )
    docs = [
        json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hmac", "namespace": "planted"},
                    "stringData": {"token": HMAC_KEY, "headers": "X-Team: web"}}),
        json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "slack", "namespace": "planted"},
                    "stringData": {"token": SLACK_TOKEN}}),
    ]  # fmt: skip
    for name, (provider, spec) in ALERTS.items():
        docs.append(
            PROVIDER.format(
                name=name, ns="planted", spec=json.dumps({**provider, "address": f"{url}/planted/{name}"})
            )
        )
        alert = {
            "providerRef": {"name": name},
            "eventSources": [{"kind": "Kustomization", "name": "*"}],
            **spec,
        }
        docs.append(json.dumps({"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert",
                                "metadata": {"name": name, "namespace": "planted"}, "spec": alert}))  # fmt: skip
    docs.append(
        PROVIDER.format(
            name="sink",
            ns="watch",
            spec=json.dumps({"type": "generic", "address": f"{url}/watch/cross-namespace"}),
        )
    )
    docs.append(json.dumps({"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert",
                            "metadata": {"name": "cross-namespace", "namespace": "watch"},
                            "spec": {"providerRef": {"name": "sink"},
                                     "eventSources": [{"kind": "Kustomization", "namespace": "planted", "name": "*"}]}}))  # fmt: skip
    (directory / "planted.yaml").write_text("\n---\n".join(docs), encoding="utf-8")
    return directory


def corpus_events(directory: Path) -> dict[str, Path]:
    events = {p.stem: p for p in sorted((EXAMPLES / "events").glob("*.json"))}
    assert len(events) >= 2
    planted = directory / "planted-event.json"
    planted.write_text(json.dumps(PLANTED_EVENT), encoding="utf-8")
    events["planted"] = planted
    return events


async def explain_send(manifests: Path, event: Path) -> tuple[int, dict[str, Any], str]:
    proc = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT), "explain", "--manifests", str(manifests), "--event", str(event),
        "--no-cross-namespace-refs", "--send", "-o", "json",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode in (0, 1), err.decode()
    return proc.returncode, json.loads(out), err.decode()


def by_path(requests: list[CapturedRequest]) -> dict[str, CapturedRequest]:
    found: dict[str, CapturedRequest] = {}
    for request in requests:
        assert request.path not in found, f"two requests for {request.path}"
        found[request.path] = request
    return found


def wire(request: CapturedRequest) -> dict[str, Any]:
    """What the sink saw, every header included (Host is the same sink; nothing is left out)."""
    return {
        "method": request.method,
        "path": request.raw_path,
        "headers": sorted((k.lower(), v) for k, v in request.headers.items()),
        "body": request.body,
    }


async def test_explain_send_and_the_controller_make_the_same_decisions_and_bytes(tmp_path: Path) -> None:
    async with CaptureServer() as srv:
        manifests = write_corpus(tmp_path / "manifests", srv.url)
        events = corpus_events(tmp_path)

        explained: dict[str, tuple[dict[str, Any], dict[str, CapturedRequest]]] = {}
        codes: dict[str, int] = {}
        for name, path in events.items():
            srv.requests.clear()
            codes[name], report, _ = await explain_send(manifests, path)
            explained[name] = (report, by_path(srv.requests))  # it has exited: what it sent has arrived
            assert SLACK_TOKEN not in json.dumps(report) and HMAC_KEY not in json.dumps(report)

        controller = ControllerProcess(
            manifests, args=["--no-cross-namespace-refs"], log_path=tmp_path / "controller.log"
        )
        await controller.start(timeout=60)
        try:
            async with aiohttp.ClientSession() as session:
                for name, path in events.items():
                    srv.requests.clear()
                    body = json.loads(path.read_text(encoding="utf-8"))
                    assert await post_event(session, controller.events_url, body) == 202
                    expected = explained[name][1]
                    if expected:
                        await srv.wait_for(len(expected), timeout=30)
                    with contextlib.suppress(TimeoutError):  # nothing more arrives: a bounded poll
                        await srv.wait_for(len(expected) + 1, timeout=1.0)
                    got = by_path(srv.requests)
                    assert sorted(got) == sorted(expected), (name, controller.log())
                    for key, request in got.items():
                        assert wire(request) == wire(expected[key]), (name, key)
        finally:
            await controller.stop()

        for name, (report, sent) in explained.items():  # one vocabulary, one line per Alert
            would = {v["alert"] for v in report["alerts"] if v["verdict"] == "would send"}
            assert codes[name] == (0 if would else 1), name
            assert {p.strip("/") for p in sent} == would, name  # it sent exactly what it says it would
            for v in report["alerts"]:
                line = v["line"]
                assert line.startswith(("would send", "would not send: ")), line
                assert ("would send" in line) != ("would not send" in line), line  # never both
                assert v["sent"] == ("delivered" if v["verdict"] == "would send" else ""), v
        lines = {v["alert"]: v["line"] for v in explained["planted"][0]["alerts"]}
        for alert, wanted in EXPECTED_LINES.items():
            assert lines[alert].startswith(wanted), (alert, lines[alert])
        assert lines["flux-system/all-flux-system"].startswith("would not send: matcher: namespace")
        helm = {v["alert"]: v["line"] for v in explained["helmrelease-upgraded"][0]["alerts"]}
        assert helm["flux-system/all-flux-system"].startswith("would not send: matcher: kind")
