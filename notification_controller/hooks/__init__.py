"""Hooks API v1: user services that shape events (``pre-dispatch``) and reconciliation (``pre-reconcile``,
``finalize``). The contract is ``docs/hooks.md``; the models are ``api/hooks.py``.

``Hooks`` builds every piece once, for the composition root::

    hooks = Hooks(store, cluster, http, registry=registry, config=load_hooks_config(path))
    dispatch.builder.build(..., hooks=[hooks.pre_dispatch])
    ControllerManager(..., hooks=hooks.reconcile)

Modules: ``registry`` (which hooks apply, in which order), ``client`` (address, signing, one call),
``chain`` (hooks of a phase in series, metrics), ``stage`` (pre-dispatch), ``reconcile`` (pre-reconcile,
finalize), ``config`` (the ``--hooks-config`` file), ``metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ..api.hooks import HOOKS_FINALIZER, HooksConfig
from ..lib.clock import Clock, SystemClock
from ..objects.base import Cluster, ObjectStore
from ..outbound import OutboundHTTP
from .chain import Chain
from .client import HookClient, TargetResolver
from .config import load_hooks_config
from .metrics import HookMetrics
from .reconcile import ReconcileHooks
from .registry import HookSet
from .stage import PreDispatchHooks

__all__ = [
    "HOOKS_FINALIZER",
    "Hooks",
    "PreDispatchHooks",
    "ReconcileHooks",
    "load_hooks_config",
]


class Hooks:
    """Every hook component, sharing one metrics set, one resolver (Service and TLS caches) and one client."""

    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        http: OutboundHTTP,
        *,
        registry: CollectorRegistry,
        config: HooksConfig | None = None,
        runtime_namespace: str = "flux-system",
        clock: Clock | None = None,
        backoff_min: float = 0.2,
        backoff_max: float = 2.0,
    ) -> None:
        self.hookset = HookSet(config, runtime_namespace)
        self.metrics = HookMetrics(registry)
        self.resolver = TargetResolver(store, cluster)
        self.client = HookClient(http, backoff_min=backoff_min, backoff_max=backoff_max)
        self.chain = Chain(self.resolver, self.client, self.metrics)
        self.pre_dispatch = PreDispatchHooks(self.hookset, self.chain)
        self.reconcile = ReconcileHooks(self.hookset, self.chain, clock or SystemClock())
