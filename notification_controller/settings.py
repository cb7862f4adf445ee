"""Typed settings, grouped by concern. Built by ``cli.parse_args``; defaults are Flux's (reference §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ServerSettings:
    events_addr: str = ":9090"
    receiver_addr: str = ":9292"
    metrics_addr: str = ":8080"
    health_addr: str = ":9440"
    export_http_path_metrics: bool = False
    shutdown_grace: float = 25.0  # seconds to drain deliveries on SIGTERM (pod grace period is 30 s)


@dataclass(frozen=True)
class EventSettings:
    rate_limit_interval: float = 300.0
    no_cross_namespace_refs: bool = False
    max_pending: int = 10_000
    provider_concurrency: int = 16


@dataclass(frozen=True)
class ReceiverSettings:
    rate_limit: float = 10.0  # requests per second per Receiver; 0 disables
    rate_burst: int = 50
    replay_ttl: float = 600.0


@dataclass(frozen=True)
class LeaderSettings:
    enabled: bool = False
    release_on_cancel: bool = True
    lease_duration: float = 35.0
    renew_deadline: float = 30.0
    retry_period: float = 5.0


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: str | None = None
    watch_all_namespaces: bool = True
    runtime_namespace: str = "flux-system"
    qps: float = 50.0
    burst: int = 300
    concurrent: int = 4
    min_retry_delay: float = 0.75
    max_retry_delay: float = 900.0
    resync_interval: float = 600.0
    watch_configs_label_selector: str = "reconcile.fluxcd.io/watch=Enabled"


@dataclass(frozen=True)
class LogSettings:
    level: str = "info"
    encoding: str = "json"


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    events: EventSettings = field(default_factory=EventSettings)
    receivers: ReceiverSettings = field(default_factory=ReceiverSettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    log: LogSettings = field(default_factory=LogSettings)
    feature_gates: dict[str, bool] = field(default_factory=dict)
    manifests: Path | None = None  # local mode when set
    manifests_poll_interval: float = 2.0
    hooks_config: Path | None = None

    @property
    def local_mode(self) -> bool:
        return self.manifests is not None

    def gate(self, name: str) -> bool:
        return self.feature_gates.get(name, False)
