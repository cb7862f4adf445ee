"""The explicit map from provider type to notifier class. Adding a type = one module + one import here.

``tests/unit/test_registry.py`` asserts registry == CRD enum == ``docs/providers/*.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from .base import Notifier, ProviderOptions

NotifierFactory = Callable[[ProviderOptions], Notifier]
_REGISTRY: dict[ProviderType, NotifierFactory] = {}

T = TypeVar("T")


def register(cls: T) -> T:
    """Class decorator: register a notifier class under its ``type``."""
    ptype = cls.type  # type: ignore[attr-defined]
    if ptype in _REGISTRY:
        raise RuntimeError(f"provider type {ptype} registered twice")
    _REGISTRY[ptype] = cls  # type: ignore[assignment]
    return cls


def registered_types() -> frozenset[ProviderType]:
    _load_all()
    return frozenset(_REGISTRY)


def create_notifier(opts: ProviderOptions) -> Notifier:
    """Build the notifier for ``opts.type``; unknown or unbuilt types give a clear error, never a crash."""
    _load_all()
    factory = _REGISTRY.get(opts.type)
    if factory is None:
        raise ProviderConfigError(f"provider {opts.type} not supported", reason="UnsupportedProvider")
    return factory(opts)


_loaded = False


def _load_all() -> None:
    """Import every provider module once (each registers itself)."""
    global _loaded
    if _loaded:
        return
    from . import catalog  # noqa: F401  (imports all provider modules)

    _loaded = True
