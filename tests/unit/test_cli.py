"""Flags keep Flux's names and Go's syntax (reference §7)."""

from __future__ import annotations

import pytest

from notification_controller.cli import parse_args


def test_defaults_are_fluxs() -> None:
    s = parse_args([], environ={})
    assert (s.server.events_addr, s.server.receiver_addr, s.server.metrics_addr, s.server.health_addr) == (
        ":9090",
        ":9292",
        ":8080",
        ":9440",
    )
    assert s.events.rate_limit_interval == 300
    assert s.kube.watch_all_namespaces is True
    assert s.kube.runtime_namespace == "flux-system"
    assert (s.leader.lease_duration, s.leader.renew_deadline, s.leader.retry_period) == (35, 30, 5)
    assert (s.log.level, s.log.encoding) == ("info", "json")
    assert not s.local_mode


def test_go_flag_syntax() -> None:
    s = parse_args(
        [
            "-events-addr=:19090",
            "--receiverAddr",
            ":19292",
            "--watch-all-namespaces=false",
            "--no-cross-namespace-refs",
            "--rate-limit-interval=1m30s",
            "--feature-gates=ObjectLevelWorkloadIdentity=true",
            "--manifests",
            "examples/manifests",
        ],
        environ={"RUNTIME_NAMESPACE": "flux", "KUBECONFIG": "/tmp/kc"},
    )
    assert s.server.events_addr == ":19090"
    assert s.server.receiver_addr == ":19292"
    assert s.kube.watch_all_namespaces is False
    assert s.events.no_cross_namespace_refs is True
    assert s.events.rate_limit_interval == 90
    assert s.gate("ObjectLevelWorkloadIdentity")
    assert s.kube.runtime_namespace == "flux"
    assert s.kube.kubeconfig == "/tmp/kc"
    assert s.local_mode


@pytest.mark.parametrize(
    "argv", [["--feature-gates=Nope=true"], ["--rate-limit-interval=5"], ["--log-level=warn"]]
)
def test_invalid_flags_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv, environ={})
