"""Flags and environment → ``Settings``, then ``app.run``. Nothing else.

Flag names are Flux's where Flux has the flag (``--events-addr``, ``--receiverAddr`` ...); Go's flag
syntax is accepted too: ``-flag``, ``--flag=value``, ``--flag value``, and booleans as ``--flag``,
``--flag=true|false``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .core.duration import parse_duration
from .settings import (
    EventSettings,
    KubeSettings,
    LeaderSettings,
    LogSettings,
    ReceiverSettings,
    ServerSettings,
    Settings,
)

KNOWN_GATES = ("CacheSecretsAndConfigMaps", "DisableConfigWatchers", "ObjectLevelWorkloadIdentity")


def go_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true", "yes"):
        return True
    if lowered in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def feature_gates(value: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for item in filter(None, (p.strip() for p in value.split(","))):
        name, _, raw = item.partition("=")
        if name not in KNOWN_GATES:
            raise argparse.ArgumentTypeError(
                f"unknown feature gate {name!r} (known: {', '.join(KNOWN_GATES)})"
            )
        gates[name] = go_bool(raw or "true")
    return gates


def _normalise(argv: Sequence[str]) -> list[str]:
    """Go accepts ``-flag``; argparse wants ``--flag``."""
    return ["-" + a if a.startswith("-") and not a.startswith("--") and len(a) > 2 else a for a in argv]


def _bool(p: argparse.ArgumentParser, flag: str, default: bool) -> None:
    """A Go-style boolean flag: ``--flag``, ``--flag=true``, ``--flag=false``."""
    p.add_argument(flag, type=go_bool, nargs="?", const=True, default=default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="notification-controller", description=__doc__.split("\n")[0])
    p.add_argument("--events-addr", default=":9090", help="event server address")
    p.add_argument("--receiverAddr", "--receiver-addr", dest="receiver_addr", default=":9292")
    p.add_argument("--metrics-addr", default=":8080")
    p.add_argument("--health-addr", default=":9440")
    p.add_argument("--rate-limit-interval", type=duration, default=300.0, help="duplicate-event window (5m)")
    _bool(p, "--no-cross-namespace-refs", False)
    _bool(p, "--export-http-path-metrics", False)
    p.add_argument("--log-level", choices=["trace", "debug", "info", "error"], default="info")
    p.add_argument("--log-encoding", choices=["json", "console"], default="json")
    p.add_argument("--manifests", type=Path, default=None, help="local mode: a directory of YAML manifests")
    p.add_argument("--manifests-poll-interval", type=duration, default=2.0)
    p.add_argument("--kubeconfig", default=None)
    _bool(p, "--watch-all-namespaces", True)
    p.add_argument("--watch-configs-label-selector", default="reconcile.fluxcd.io/watch=Enabled")
    p.add_argument("--concurrent", type=int, default=4)
    p.add_argument("--min-retry-delay", type=duration, default=0.75)
    p.add_argument("--max-retry-delay", type=duration, default=900.0)
    p.add_argument("--resync-interval", type=duration, default=600.0)
    p.add_argument("--kube-api-qps", type=float, default=50.0)
    p.add_argument("--kube-api-burst", type=int, default=300)
    _bool(p, "--enable-leader-election", False)
    _bool(p, "--leader-election-release-on-cancel", True)
    p.add_argument("--leader-election-lease-duration", type=duration, default=35.0)
    p.add_argument("--leader-election-renew-deadline", type=duration, default=30.0)
    p.add_argument("--leader-election-retry-period", type=duration, default=5.0)
    p.add_argument("--feature-gates", type=feature_gates, default={})
    p.add_argument("--max-pending-notifications", type=int, default=10_000)
    p.add_argument("--provider-concurrency", type=int, default=16, help="parallel deliveries per Provider")
    p.add_argument("--shutdown-grace-period", type=duration, default=25.0)
    p.add_argument("--receiver-rate-limit", type=float, default=10.0, help="requests/s per Receiver (0: off)")
    p.add_argument("--receiver-rate-burst", type=int, default=50)
    p.add_argument("--receiver-replay-ttl", type=duration, default=600.0)
    p.add_argument("--hooks-config", type=Path, default=None)
    return p


def parse_args(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    ns = build_parser().parse_args(_normalise(list(sys.argv[1:] if argv is None else argv)))
    return Settings(
        server=ServerSettings(
            events_addr=ns.events_addr,
            receiver_addr=ns.receiver_addr,
            metrics_addr=ns.metrics_addr,
            health_addr=ns.health_addr,
            export_http_path_metrics=ns.export_http_path_metrics,
            shutdown_grace=ns.shutdown_grace_period,
        ),
        events=EventSettings(
            rate_limit_interval=ns.rate_limit_interval,
            no_cross_namespace_refs=ns.no_cross_namespace_refs,
            max_pending=ns.max_pending_notifications,
            provider_concurrency=ns.provider_concurrency,
        ),
        receivers=ReceiverSettings(
            rate_limit=ns.receiver_rate_limit,
            rate_burst=ns.receiver_rate_burst,
            replay_ttl=ns.receiver_replay_ttl,
        ),
        leader=LeaderSettings(
            enabled=ns.enable_leader_election,
            release_on_cancel=ns.leader_election_release_on_cancel,
            lease_duration=ns.leader_election_lease_duration,
            renew_deadline=ns.leader_election_renew_deadline,
            retry_period=ns.leader_election_retry_period,
        ),
        kube=KubeSettings(
            kubeconfig=ns.kubeconfig or env.get("KUBECONFIG") or None,
            watch_all_namespaces=ns.watch_all_namespaces,
            runtime_namespace=env.get("RUNTIME_NAMESPACE", "flux-system"),
            qps=ns.kube_api_qps,
            burst=ns.kube_api_burst,
            concurrent=ns.concurrent,
            min_retry_delay=ns.min_retry_delay,
            max_retry_delay=ns.max_retry_delay,
            resync_interval=ns.resync_interval,
            watch_configs_label_selector=ns.watch_configs_label_selector,
        ),
        log=LogSettings(level=ns.log_level, encoding=ns.log_encoding),
        feature_gates=ns.feature_gates,
        manifests=ns.manifests,
        manifests_poll_interval=ns.manifests_poll_interval,
        hooks_config=ns.hooks_config,
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    from .app import run

    return run(settings)
