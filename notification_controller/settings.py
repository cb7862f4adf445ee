"""Typed settings, grouped by concern, and the ONE place where every default and flag is written.

Each field of a section carries its command-line flag in ``metadata`` (``opt(...)``): the flag name (Flux's
where Flux has the flag), its help text, how to parse it, and whether it only exists for compatibility with
Flux's controller. ``cli.py`` builds argparse from these fields, and the README's flags table is generated
from them (``python -m notification_controller.cli --flags-table``; a test keeps the README in step), so a
default is never written twice. Components take their own section (``settings.events`` ...).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .lib.natsconn import NATSAuth

KNOWN_GATES = ("CacheSecretsAndConfigMaps", "DisableConfigWatchers", "ObjectLevelWorkloadIdentity")


@dataclass(frozen=True)
class Flag:
    """How a settings field is set from the command line."""

    name: str
    help: str
    kind: str = "str"  # str | int | float | bool | duration | path | gates
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    compat_only: bool = False  # accepted so Flux's manifests run unchanged; has no effect here
    show_default: str | None = None  # how the default reads in help/README (e.g. "5m" for 300.0)


def opt(
    default: Any,
    name: str,
    help: str,
    *,
    kind: str = "str",
    aliases: tuple[str, ...] = (),
    choices: tuple[str, ...] = (),
    compat_only: bool = False,
    show_default: str | None = None,
) -> Any:
    """A settings field with its flag. ``default`` may be a zero-argument factory for mutable values."""
    flag = Flag(name, help, kind, aliases, choices, compat_only, show_default)
    if callable(default):
        return field(default_factory=default, metadata={"flag": flag})
    return field(default=default, metadata={"flag": flag})


@dataclass(frozen=True)
class ServerSettings:
    events_addr: str = opt(":9090", "--events-addr", "event server address (Flux's controllers POST here)")
    receiver_addr: str = opt(
        ":9292", "--receiverAddr", "webhook receiver server address", aliases=("--receiver-addr",)
    )
    metrics_addr: str = opt(":8080", "--metrics-addr", "Prometheus /metrics address")
    health_addr: str = opt(":9440", "--health-addr", "/healthz and /readyz address")
    export_http_path_metrics: bool = opt(
        False,
        "--export-http-path-metrics",
        "label HTTP metrics with the request path (known paths only; others count as 'other')",
        kind="bool",
    )
    shutdown_grace: float = opt(
        25.0,
        "--shutdown-grace-period",
        "time in-flight deliveries get on SIGTERM (the pod's grace period is 30s)",
        kind="duration",
        show_default="25s",
    )


@dataclass(frozen=True)
class EventSettings:
    rate_limit_interval: float = opt(
        300.0,
        "--rate-limit-interval",
        "duplicate-event window: the same event again within it gets 429",
        kind="duration",
        show_default="5m",
    )
    no_cross_namespace_refs: bool = opt(
        False,
        "--no-cross-namespace-refs",
        "refuse references across namespaces (Alert sources, Receiver resources)",
        kind="bool",
    )
    max_pending: int = opt(
        10_000,
        "--max-pending-notifications",
        "cap on queued deliveries; beyond it notifications are dropped and counted",
        kind="int",
    )
    provider_concurrency: int = opt(
        16, "--provider-concurrency", "parallel deliveries per Provider", kind="int"
    )
    label_cache_ttl: float = opt(
        30.0,
        "--label-cache-ttl",
        "how long an involved object's labels are reused for Alert matchLabels (0: one lookup per event)",
        kind="duration",
        show_default="30s",
    )
    label_cache_size: int = opt(
        4096, "--label-cache-size", "involved objects whose labels are cached (LRU)", kind="int"
    )
    label_lookup_concurrency: int = opt(
        4,
        "--label-lookup-concurrency",
        "API GETs for involved objects' labels in flight at once (the rest wait, bounded)",
        kind="int",
    )


@dataclass(frozen=True)
class ReceiverSettings:
    rate_limit: float = opt(
        10.0, "--receiver-rate-limit", "requests/s per Receiver (token bucket; 0 disables)", kind="float"
    )
    rate_burst: int = opt(50, "--receiver-rate-burst", "burst of the per-Receiver token bucket", kind="int")
    replay_ttl: float = opt(
        600.0,
        "--receiver-replay-ttl",
        "how long a webhook delivery id is remembered (replays get 200 without a new reconcile)",
        kind="duration",
        show_default="10m",
    )


@dataclass(frozen=True)
class LeaderSettings:
    enabled: bool = opt(
        False,
        "--enable-leader-election",
        "reconcile only on the replica holding the notification-controller-leader-election Lease",
        kind="bool",
    )
    release_on_cancel: bool = opt(
        True, "--leader-election-release-on-cancel", "release the Lease on shutdown", kind="bool"
    )
    lease_duration: float = opt(
        35.0, "--leader-election-lease-duration", "Lease duration", kind="duration", show_default="35s"
    )
    renew_deadline: float = opt(
        30.0,
        "--leader-election-renew-deadline",
        "give up leading when the Lease cannot be renewed within this",
        kind="duration",
        show_default="30s",
    )
    retry_period: float = opt(
        5.0,
        "--leader-election-retry-period",
        "time between Lease acquisition/renewal attempts",
        kind="duration",
        show_default="5s",
    )


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: str | None = opt(None, "--kubeconfig", "kubeconfig file (else $KUBECONFIG, else in-cluster)")
    watch_all_namespaces: bool = opt(
        True, "--watch-all-namespaces", "watch every namespace; false: only $RUNTIME_NAMESPACE", kind="bool"
    )
    runtime_namespace: str = "flux-system"  # $RUNTIME_NAMESPACE (no flag, as in Flux)
    qps: float = opt(50.0, "--kube-api-qps", "client-side API request rate", kind="float")
    burst: int = opt(300, "--kube-api-burst", "client-side API request burst", kind="int")
    concurrent: int = opt(4, "--concurrent", "reconcile workers per kind", kind="int")
    min_retry_delay: float = opt(
        0.75,
        "--min-retry-delay",
        "first backoff of a failed reconcile",
        kind="duration",
        show_default="750ms",
    )
    max_retry_delay: float = opt(
        900.0, "--max-retry-delay", "backoff cap of a failed reconcile", kind="duration", show_default="15m"
    )
    resync_interval: float = opt(
        600.0,
        "--resync-interval",
        "re-reconcile every object this often (the watch is the primary trigger)",
        kind="duration",
        show_default="10m",
    )
    watch_configs_label_selector: str = opt(
        "reconcile.fluxcd.io/watch=Enabled",
        "--watch-configs-label-selector",
        "Flux: which Secrets trigger reconciles; here every referenced Secret does",
        compat_only=True,
    )
    alert_provider_status: bool = opt(
        True,
        "--alert-provider-status",
        "write Ready conditions on Alerts and Providers; false: no status, as Flux's v1beta3 objects",
        kind="bool",
    )
    default_service_account: str = opt(
        "",
        "--default-service-account",
        "default ServiceAccount for object-level workload identity (needs the ObjectLevelWorkloadIdentity gate)",
    )
    workload_identity_custom_endpoints: bool = opt(
        False,
        "--workload-identity-custom-endpoints",
        "let cloud tokens minted with workload identity go to any http(s) endpoint a Provider names (Event "
        "Hubs emulator, test servers); false: only the cloud's own hosts (*.servicebus.windows.net, "
        "dev.azure.com...)",
        kind="bool",
    )


@dataclass(frozen=True)
class TokenCacheSettings:
    max_size: int = opt(
        100, "--token-cache-max-size", "cloud/GitHub-App tokens kept (0 disables the cache)", kind="int"
    )
    max_duration: float = opt(
        3600.0,
        "--token-cache-max-duration",
        "longest time a cached token is reused",
        kind="duration",
        show_default="1h",
    )


@dataclass(frozen=True)
class LogSettings:
    level: str = opt("info", "--log-level", "log level", choices=("trace", "debug", "info", "error"))
    encoding: str = opt("json", "--log-encoding", "log encoding", choices=("json", "console"))


@dataclass(frozen=True)
class StoreSettings:
    """The store, ``--store`` (docs/delivery.md): where notifications wait, and how long they are retried."""

    url: str = opt(
        "memory",
        "--store",
        "where notifications wait for delivery: memory (Flux's at-most-once), sqlite:PATH (durable, one "
        "replica) or nats://HOST:PORT[,HOST:PORT] (durable, several replicas; NATS JetStream)",
    )
    delivery_max_age: float = opt(
        3600.0,
        "--delivery-max-age",
        "durable stores: how long a notification is retried before it becomes a dead letter",
        kind="duration",
        show_default="1h",
    )
    retry_base: float = opt(
        1.0,
        "--delivery-retry-base",
        "durable stores: first delay between attempts (doubles up to --delivery-retry-cap, with jitter)",
        kind="duration",
        show_default="1s",
    )
    retry_cap: float = opt(
        300.0,
        "--delivery-retry-cap",
        "durable stores: longest delay between attempts",
        kind="duration",
        show_default="5m",
    )
    breaker_threshold: int = opt(
        5,
        "--circuit-breaker-threshold",
        "durable stores: consecutive failures that pause a Provider's lane (then one probe at a time)",
        kind="int",
    )
    breaker_cooldown: float = opt(
        30.0,
        "--circuit-breaker-cooldown",
        "durable stores: first pause of a failing Provider's lane (doubles up to 5m while probes fail)",
        kind="duration",
        show_default="30s",
    )
    dead_letter_max_age: float = opt(
        14 * 24 * 3600.0,
        "--store-dead-letter-max-age",
        "durable stores: how long a dead letter is kept (then deleted; the dead-letters command lists them)",
        kind="duration",
        show_default="336h",
    )
    dead_letter_max_bytes: int = opt(
        128 << 20,
        "--store-dead-letter-max-bytes",
        "durable stores: size of the dead letters beyond which the oldest are deleted (0: no cap)",
        kind="int",
        show_default="134217728 (128 MiB)",
    )
    ack_wait: float = opt(
        30.0,
        "--store-ack-wait",
        "durable stores: how long a delivery holds its notification before another worker may retry it",
        kind="duration",
        show_default="30s",
    )
    nats_creds: Path | None = opt(
        None,
        "--store-nats-creds",
        "NATS store: a .creds file (JWT + nkey), mounted from a Secret",
        kind="path",
    )
    nats_user: str = opt("", "--store-nats-user", "NATS store: user name")
    nats_password_file: Path | None = opt(
        None,
        "--store-nats-password-file",
        "NATS store: a file holding the password (a mounted Secret)",
        kind="path",
    )
    nats_tls_ca: Path | None = opt(
        None, "--store-nats-tls-ca", "NATS store: CA bundle to verify the server", kind="path"
    )
    nats_tls_cert: Path | None = opt(
        None, "--store-nats-tls-cert", "NATS store: client certificate (mutual TLS)", kind="path"
    )
    nats_tls_key: Path | None = opt(
        None, "--store-nats-tls-key", "NATS store: client key (mutual TLS)", kind="path"
    )

    def nats_auth(self) -> NATSAuth:
        """The ``--store-nats-*`` credentials for the state store and the history stream, the password read
        from its file (a mounted Secret) now. Raises ``ConfigError`` naming the flag."""
        password = None
        if self.nats_password_file is not None:
            try:
                password = self.nats_password_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read --store-nats-password-file {str(self.nats_password_file)!r}: "
                    f"{exc.strerror or type(exc).__name__}",
                    reason="InvalidStore",
                ) from None
        return NATSAuth(
            creds_file=str(self.nats_creds) if self.nats_creds else None,
            user=self.nats_user or None,
            password=password,
            tls_ca_file=str(self.nats_tls_ca) if self.nats_tls_ca else None,
            tls_cert_file=str(self.nats_tls_cert) if self.nats_tls_cert else None,
            tls_key_file=str(self.nats_tls_key) if self.nats_tls_key else None,
        )


_NATS_FILES = ("nats_creds", "nats_password_file", "nats_tls_ca", "nats_tls_cert", "nats_tls_key")


def add_store_access_flags(parser: argparse.ArgumentParser) -> None:
    """The ``--store-nats-*`` flags of the tools that open the controller's store (``dead-letters``,
    ``history --store``): the same names as the controller's, the files read the same way."""
    for name in _NATS_FILES:
        flag = "--store-" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, type=Path, metavar="PATH", help=f"as the controller's {flag}")
    parser.add_argument(
        "--store-nats-user", dest="nats_user", default="", help="as the controller's --store-nats-user"
    )


def store_access(url: str, args: argparse.Namespace) -> StoreSettings:
    """The ``StoreSettings`` of a tool's ``--store`` and the flags of ``add_store_access_flags``."""
    return StoreSettings(
        url=url, nats_user=args.nats_user, **{name: getattr(args, name) for name in _NATS_FILES}
    )


@dataclass(frozen=True)
class SandboxSettings:
    """Worker processes for tenant expressions: templates, CEL filters (``notification_controller/sandbox``)."""

    workers: int = opt(
        2, "--sandbox-workers", "worker processes evaluating templates and CEL expressions", kind="int"
    )
    memory: int = opt(
        256 * 1024 * 1024,
        "--sandbox-memory-limit",
        "address-space limit of one sandbox worker, in bytes (a worker idles at ~35 MB)",
        kind="int",
    )
    timeout: float = opt(
        0.5,
        "--sandbox-timeout",
        "wall time one template render or CEL evaluation may take before its worker is killed",
        kind="duration",
        show_default="500ms",
    )
    max_queue: int = opt(
        1024, "--sandbox-max-queue", "expressions that may wait for a sandbox worker", kind="int"
    )
    per_namespace: int = opt(
        64,
        "--sandbox-max-queue-per-namespace",
        "expressions of one namespace that may wait for a sandbox worker (served round-robin)",
        kind="int",
    )
    quarantine: float = opt(
        300.0,
        "--sandbox-quarantine",
        "how long an expression that overran (time, memory, crash) fails without a worker",
        kind="duration",
        show_default="5m",
    )
    quarantine_size: int = 4096
    """Expressions remembered in quarantine (LRU)."""
    start_timeout: float = 30.0
    """Seconds a new worker may take to import Jinja2 and CEL (a loaded node: seconds)."""


@dataclass(frozen=True)
class NoiseControlSettings:
    """Bounds of an Alert's noise-control state (docs/noise-control.md; events are unauthenticated)."""

    state_retention: float = opt(
        7 * 24 * 3600.0,
        "--noise-state-retention",
        "how long notifyOn: StateChange remembers an object's last notified severity (then it counts as "
        "healthy again)",
        kind="duration",
        show_default="168h",
    )
    max_keys_per_alert: int = opt(
        10_000,
        "--noise-max-keys-per-alert",
        "objects (threshold, state change) and distinct notifications (repeat) tracked per Alert; "
        "beyond it events are notified without noise control and counted",
        kind="int",
    )
    max_groups_per_alert: int = opt(
        1_000,
        "--noise-max-groups-per-alert",
        "open groupBy groups per Alert; beyond it events of new groups are notified ungrouped and counted",
        kind="int",
    )


@dataclass(frozen=True)
class SilenceSettings:
    """Silences (issue 26, docs/silences.md): how long expired ones are kept, who may silence every namespace."""

    retention: float = opt(
        24 * 3600.0,
        "--silence-retention",
        "delete a Silence this long after it expired (cluster: the object; local mode: only files the "
        "silence CLI wrote); 0 keeps them",
        kind="duration",
        show_default="24h",
    )
    cluster_namespace: str = opt(
        "",
        "--cluster-silences-namespace",
        "a Silence in this namespace with spec.allNamespaces: true holds the Alerts of every namespace "
        "(empty: no cluster-wide Silences)",
    )


@dataclass(frozen=True)
class HistorySettings:
    """The history of decisions (issue 27, docs/history.md): kept in memory, or next to the ``--store``."""

    enabled: bool = opt(
        True,
        "--history",
        "record every decision of the pipeline (delivered, suppressed, dropped, failed...) for the history "
        "command and the UI",
        kind="bool",
    )
    max_records: int = opt(
        10_000, "--history-max-records", "memory store: decisions kept (the oldest go first)", kind="int"
    )
    max_age: float = opt(
        7 * 24 * 3600.0,
        "--history-max-age",
        "durable stores: how long a decision is kept",
        kind="duration",
        show_default="168h",
    )
    max_bytes: int = opt(
        64 << 20,
        "--history-max-bytes",
        "durable stores: size of the history beyond which the oldest decisions are deleted",
        kind="int",
        show_default="67108864 (64 MiB)",
    )


@dataclass(frozen=True)
class UISettings:
    """The web UI (issue 27, docs/ui.md): its own listener, off unless ``--ui-addr`` is given."""

    addr: str = opt(
        "",
        "--ui-addr",
        "web UI and its read-only JSON API (/api/) address, e.g. 127.0.0.1:9494 (empty: no UI listener)",
    )
    actions_token_file: Path | None = opt(
        None,
        "--ui-actions-token-file",
        "enable the UI's actions (replay a dead letter, expire a Silence) for whoever presents the token in "
        "this file (a mounted Secret); without it the UI is read-only",
        kind="path",
    )
    allowed_hosts: str = opt(
        "",
        "--ui-allowed-hosts",
        "comma-separated host names the UI answers besides its own address, 127.0.0.1 and localhost "
        "(a DNS-rebinding guard: requests naming any other Host get 403)",
    )


@dataclass(frozen=True)
class TracingSettings:
    """Traces of the pipeline (issue 28, docs/tracing.md): off unless ``--otlp-endpoint`` is given."""

    otlp_endpoint: str = opt(
        "",
        "--otlp-endpoint",
        "send a trace of every event (ingest, matching, stages, queue, each delivery attempt) to an "
        "OpenTelemetry collector at URL/v1/traces (OTLP/HTTP protobuf; needs the tracing extra); empty: "
        "$OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing",
    )


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    events: EventSettings = field(default_factory=EventSettings)
    receivers: ReceiverSettings = field(default_factory=ReceiverSettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    tokens: TokenCacheSettings = field(default_factory=TokenCacheSettings)
    log: LogSettings = field(default_factory=LogSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    noise: NoiseControlSettings = field(default_factory=NoiseControlSettings)
    silences: SilenceSettings = field(default_factory=SilenceSettings)
    history: HistorySettings = field(default_factory=HistorySettings)
    ui: UISettings = field(default_factory=UISettings)
    tracing: TracingSettings = field(default_factory=TracingSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    feature_gates: dict[str, bool] = opt(
        dict,
        "--feature-gates",
        "comma-separated Name=bool: " + ", ".join(KNOWN_GATES),
        kind="gates",
    )
    manifests: Path | None = opt(
        None,
        "--manifests",
        "local mode: a directory (or one file) of YAML manifests instead of a cluster",
        kind="path",
    )
    manifests_poll_interval: float = opt(
        2.0,
        "--manifests-poll-interval",
        "local mode: how often the manifests are checked for changes",
        kind="duration",
        show_default="2s",
    )
    hooks_config: Path | None = opt(
        None, "--hooks-config", "controller-wide hooks file (docs/hooks.md)", kind="path"
    )

    @property
    def local_mode(self) -> bool:
        return self.manifests is not None

    def gate(self, name: str) -> bool:
        return self.feature_gates.get(name, False)


def _sections() -> tuple[tuple[str, type[Any]], ...]:
    """(field, class) of every section of ``Settings`` (the fields whose default is a settings class)."""
    out: list[tuple[str, type[Any]]] = []
    for f in fields(Settings):
        factory: Any = f.default_factory
        if isinstance(factory, type) and is_dataclass(factory):
            out.append((f.name, factory))
    return tuple(out)


SECTIONS = _sections()


def flag_fields(cls: type[Any]) -> list[tuple[str, Flag, Callable[[], Any] | Any]]:
    """(field name, flag, default) of every flag-carrying field of a settings class."""
    out: list[tuple[str, Flag, Any]] = []
    for f in fields(cls):
        flag = f.metadata.get("flag")
        if flag is None:
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        out.append((f.name, flag, default))
    return out


def all_flags() -> list[tuple[str | None, str, Flag, Any]]:
    """(section or None for top level, field, flag, default) for every flag, in settings order."""
    out: list[tuple[str | None, str, Flag, Any]] = []
    for section, cls in SECTIONS:
        out.extend((section, name, flag, default) for name, flag, default in flag_fields(cls))
    out.extend((None, name, flag, default) for name, flag, default in flag_fields(Settings))
    return out


def compat_notices(settings: Settings) -> list[str]:
    """One line per flag that was set but has no effect here (logged once at start)."""
    notices = []
    for section, name, flag, default in all_flags():
        if not flag.compat_only:
            continue
        value = getattr(getattr(settings, section) if section else settings, name)
        if value != default:
            notices.append(f"{flag.name} is accepted for compatibility with Flux and has no effect here")
    return notices
