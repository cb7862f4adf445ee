"""Notifiers (resolved options, TLS contexts, clients) built once per Provider and Secret version.

A Provider's notifier is reused until the Provider object or one of the Secrets it references is replaced
in the store (identity comparison: the store swaps objects on every change). Nothing per event is baked
in: the commit-status id and the idempotency key travel on the ``DeliveryContext`` of each delivery.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.common import Secret
from ..api.provider import Provider
from ..errors import ControllerError
from ..objects.base import ObjectStore
from ..providers.base import Notifier, ProviderOptions
from ..providers.options import resolve_options
from ..providers.registry import create_notifier

_NO_SECRETS: tuple[None, None, None] = (None, None, None)


@dataclass
class _Cached:
    provider: Provider
    secrets: tuple[Secret | None, Secret | None, Secret | None]
    options: ProviderOptions
    notifier: Notifier


class NotifierCache:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._cached: dict[tuple[str, str], _Cached] = {}
        self.builds = 0  # notifiers built (tests: a cache hit builds nothing)

    def _secrets(self, provider: Provider) -> tuple[Secret | None, Secret | None, Secret | None]:
        spec, ns = provider.spec, provider.metadata.namespace
        refs = (spec.secret_ref, spec.cert_secret_ref, spec.proxy_secret_ref)
        if refs[0] is None and refs[1] is None and refs[2] is None:  # nothing to look up per event
            return _NO_SECRETS
        secret = self.store.secret
        return (
            secret(ns, refs[0].name) if refs[0] else None,
            secret(ns, refs[1].name) if refs[1] else None,
            secret(ns, refs[2].name) if refs[2] else None,
        )

    def get(self, provider: Provider) -> tuple[ProviderOptions, Notifier]:
        """The Provider's options and notifier. Raises ``ControllerError`` (Flux's message)."""
        key = (provider.metadata.namespace, provider.metadata.name)
        secrets = self._secrets(provider)
        cached = self._cached.get(key)
        if cached is not None and cached.provider is provider:
            held = cached.secrets
            # identity, element by element (a Secret replaced in the store is a new object); the common
            # Provider without Secrets shares one tuple, so the first test settles it
            if held is secrets or (held[0] is secrets[0] and held[1] is secrets[1] and held[2] is secrets[2]):
                return cached.options, cached.notifier
        options = resolve_options(provider, self.store.secret)
        try:
            notifier = create_notifier(options)
        except ControllerError as exc:
            raise ControllerError(
                f"failed to initialize notifier for provider '{provider.metadata.name}': {exc}"
            ) from exc
        self.builds += 1
        self._cached[key] = _Cached(provider, secrets, options, notifier)
        return options, notifier

    def invalidate(self, namespace: str, name: str) -> None:
        self._cached.pop((namespace, name), None)
