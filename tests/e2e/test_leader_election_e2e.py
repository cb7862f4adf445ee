"""Two replicas with leader election (issue 3; checklist H2–H4): one reconciles, the other takes over."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import NS, Controller, apply, get, install, ready, wait_for

pytestmark = pytest.mark.e2e
LEASE = "notification-controller-leader-election"
FAST = (
    "--enable-leader-election",
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=500ms",
)


def holder(kube: KubeTestServer) -> str:
    lease = get(kube, "lease", NS, LEASE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def receiver(namespace: str, name: str) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Secret
        metadata: {{name: tok, namespace: {namespace}}}
        stringData: {{token: t}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1
        kind: Receiver
        metadata: {{name: {name}, namespace: {namespace}}}
        spec:
          type: generic
          secretRef: {{name: tok}}
          resources: [{{kind: GitRepository, name: app}}]
        """
    )


def test_one_leader_reconciles_and_the_standby_takes_over(kube: KubeTestServer, namespace: str) -> None:
    install(kube)
    kubeconfig: Path = kube.create_service_account_kubeconfig(NS, "notification-controller")
    first = Controller(kube, kubeconfig, *FAST, name="a")
    first.wait_ready()
    leader_identity = wait_for(lambda: holder(kube), what="a lease holder")
    second = Controller(kube, kubeconfig, *FAST, name="b")
    try:
        second.wait_ready()  # every replica serves events and hooks, leader or not
        apply(kube, receiver(namespace, "one"))
        wait_for(lambda: ready(get(kube, "receiver", namespace, "one")), what="reconciled by the leader")
        assert holder(kube) == leader_identity
        leader, standby = (
            (first, second) if f"leading as {leader_identity}" in first.log() else (second, first)
        )
        assert f"leading as {leader_identity}" in leader.log()
        assert "leading as" not in standby.log()
        leader.kill()  # SIGKILL: no release, the standby must wait for the lease to expire
        wait_for(
            lambda: holder(kube) not in ("", leader_identity), timeout=30, what="standby takes the lease"
        )
        apply(kube, receiver(namespace, "two"))
        wait_for(
            lambda: ready(get(kube, "receiver", namespace, "two")),
            timeout=30,
            what="reconciled by the new leader",
        )
        assert standby.proc.poll() is None
    finally:
        for ctl in (first, second):
            if ctl.proc.poll() is None:
                assert ctl.stop() == 0, ctl.log()[-2000:]
    lease = json.loads(kube.kubectl("get", "lease", LEASE, "-n", NS, "-o", "json", check=True).stdout)
    # release on cancel: the last leader gave the lease up when it stopped
    assert lease["spec"].get("holderIdentity") in (None, "")
