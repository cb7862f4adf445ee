"""Issue 11 item 3, local mode: a normal-sized cluster must not take the controller down.

The log redactor used to rebuild one regular expression of every Secret value on every Secret change, on
the event loop: start-up was quadratic in the number of Secrets (12 / 49 / 211 s for 100 / 200 / 400
Secrets, RSS up to 1.6 GB; 2,000 Secrets did not become ready within minutes) and every listener, health
included, stalled meanwhile. Masking is now incremental (``core.redact.Redactor.set_secret``, O(size of
the Secret that changed)).

The controller runs as a subprocess (``python -m notification_controller --manifests DIR``) on 2,000
Secrets, 2,000 Alerts, 500 Providers and 500 Receivers (``tests/support/scalekit.py``). Asserted: ready
(``/readyz`` 200) within ``READY_BOUND`` of the process start; every Receiver reconciled (the last one's
webhook answers 200); 200 Secrets rotated in the manifests reach the Receivers (their new webhook paths
answer) within seconds; every listener (events, receiver, metrics, health) answers correctly within
``ANSWER_BOUND`` from the moment it is up, through start-up, reconciles and the churn; peak RSS (VmHWM)
under ``RSS_BOUND``. Numbers print with the prefix ``[scale]`` (``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import listener_ports
from tests.support.scalekit import (
    ANSWER_BOUND,
    CHURN,
    READY_BOUND,
    RECEIVERS,
    RSS_BOUND,
    ListenerProbes,
    hook_path,
    http,
    population,
    receiver_secret,
    rss,
    secret,
)

ROOT = Path(__file__).resolve().parents[2]
NS = "flux-system"

pytestmark = pytest.mark.slow

GIT_REPOSITORY = {
    "apiVersion": "source.toolkit.fluxcd.io/v1",
    "kind": "GitRepository",
    "metadata": {"name": "podinfo", "namespace": NS},
    "spec": {"interval": "5m", "url": "https://github.com/stefanprodan/podinfo"},
}


def write_manifests(path: Path, objects: list[dict[str, Any]]) -> None:
    """One multi-document file (JSON documents are YAML), replaced atomically as a GitOps checkout is."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n---\n".join(json.dumps(obj) for obj in objects))
    tmp.replace(path)


def wait_until(check: Any, timeout: float, what: str, proc: subprocess.Popen[bytes]) -> float:
    """Poll ``check`` until true; the seconds it took. Fails after ``timeout`` or if the process exits."""
    start = time.monotonic()
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"controller exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.05)
    return time.monotonic() - start


def test_two_thousand_secrets_ready_in_seconds_with_every_listener_answering(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    objects = [*population(NS), GIT_REPOSITORY]
    write_manifests(manifests / "cluster.yaml", objects)
    ports = listener_ports()
    log_path = tmp_path / "controller.log"
    with log_path.open("wb") as log_file:
        started = time.monotonic()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "notification_controller",
                "--manifests",
                str(manifests),
                "--manifests-poll-interval=200ms",
                f"--events-addr=127.0.0.1:{ports['events']}",
                f"--receiverAddr=127.0.0.1:{ports['receiver']}",
                f"--metrics-addr=127.0.0.1:{ports['metrics']}",
                f"--health-addr=127.0.0.1:{ports['health']}",
                "--log-encoding=json",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            with ListenerProbes(ports) as probes:
                health = f"http://127.0.0.1:{ports['health']}/readyz"
                wait_until(lambda: http("GET", health) == 200, READY_BOUND, "ready (/readyz 200)", proc)
                ready = time.monotonic() - started
                receiver_url = f"http://127.0.0.1:{ports['receiver']}"
                last = receiver_url + hook_path(NS, RECEIVERS - 1)
                wait_until(lambda: http("POST", last, b"{}") == 200, 30, "every Receiver reconciled", proc)
                reconciled = time.monotonic() - started
                _, peak_start = rss(proc.pid)

                # Churn: rotate the Secrets of the first CHURN Receivers while the probes keep polling.
                mark = probes.mark()
                for i in range(CHURN):
                    objects[receiver_secret(i)] = secret(NS, receiver_secret(i), generation=1)
                write_manifests(manifests / "cluster.yaml", objects)
                rotated = [receiver_url + hook_path(NS, i, generation=1) for i in (0, CHURN // 2, CHURN - 1)]
                churn = wait_until(
                    lambda: all(http("POST", url, b"{}") == 200 for url in rotated),
                    30,
                    f"{CHURN} rotated Secrets reaching their Receivers",
                    proc,
                )
                probes.keep_probing(since=mark)  # a little after the churn was absorbed
            current, peak = rss(proc.pid)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    log = log_path.read_text(errors="replace")
    print(
        f"\n[scale] local: ready {ready:.1f}s, all reconciled {reconciled:.1f}s, churn of {CHURN} Secrets "
        f"{churn:.1f}s; RSS peak {peak_start >> 20} MB after start, {peak >> 20} MB overall, "
        f"{current >> 20} MB at the end;\n[scale] from start: {probes.summary()};\n"
        f"[scale] through the churn: {probes.summary(mark)}"
    )
    probes.assert_answering(ANSWER_BOUND)  # from start-up on
    probes.assert_answering(ANSWER_BOUND, since=mark)  # and through the churn
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MB"
    assert proc.returncode == 0, log[-3000:]
    assert "Traceback" not in log
