"""The parts of ``kubernetes_asyncio`` the controller uses, without the rest (issue 17).

Importing anything from ``kubernetes_asyncio`` runs the package's ``__init__``, and so
``kubernetes_asyncio.client``'s, which imports every API group and every model: ~850 modules, ~33 MB of
RSS and ~0.2 s at start-up, in a controller that sends raw JSON (``ApiClient.call_api`` with
``_preload_content=False``: no response is ever deserialized into a model). What ``kube/client.py`` uses
is ``Configuration``, ``ApiClient``, the kubeconfig and in-cluster loaders (``kubernetes_asyncio.config``)
and the exception classes: a dozen small modules.

``load()`` registers the three packages whose ``__init__`` is heavy — ``kubernetes_asyncio``,
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models`` — without running that ``__init__``,
then imports only those submodules. Nothing is taken away from the rest of the process: a submodule still
imports as usual, and the first access to any other attribute of one of these packages
(``kubernetes_asyncio.client.CoreV1Api``, a model that ``ApiClient`` looks up by name) runs the package's
real ``__init__`` into the same module object, after which it is the ordinary package. When the package was
imported in full before ``load()`` (tests, tools), ``load()`` just uses it.

A missing ``kubernetes_asyncio`` raises ``ModuleNotFoundError`` naming it, as a plain import would.

Measured against the plain import (``import kubernetes_asyncio.client, kubernetes_asyncio.config``), each in a
fresh interpreter, 7 alternating runs, medians, kubernetes_asyncio 36.1 on the loaded 2-core machine (issue
24): 859 modules, 71.8 MB maximum RSS and 1.28 s, against 15 modules, 39.0 MB and 0.82 s for ``load()``
(the interpreter with this package alone: 12.7 MB). Most of the 0.82 s is the library's dependencies
(aiohttp, urllib3, dateutil: 0.3-0.4 s, loaded anyway); with those imported, ``load()`` takes 8 ms.

What it leans on in kubernetes_asyncio, its module layout: the three packages above are packages, the
submodules named in ``load()`` hold those names, ``config/`` takes only ``ApiClient`` and ``Configuration``
from ``kubernetes_asyncio.client`` (set here before it is imported), and ``ApiClient`` finds models with
``getattr(kubernetes_asyncio.client.models, name)`` (which completes the deferred package). A release that
moves any of these fails ``tests/unit/test_dependency_internals.py`` (the layout) or
``tests/unit/test_lazy_imports.py`` (the behaviour: the module count, the rest of the library on demand).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

DEFERRED = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")
"""The packages registered without their ``__init__`` (parents first)."""


class DeferredPackage(ModuleType):
    """A package registered without running its ``__init__``: a missing attribute is first looked for as a
    submodule (imported as ``from package import submodule`` would), otherwise the real ``__init__`` runs
    into this module, which then becomes a plain module (``__class__`` reset)."""

    _nc_running_init = False

    def __getattr__(self, name: str) -> Any:
        if self._nc_running_init:
            # the real __init__ is running: what it has not defined yet does not exist, as for any module
            raise AttributeError(f"partially initialized module {self.__name__!r} has no attribute {name!r}")
        qualified = f"{self.__name__}.{name}"
        if not name.startswith("__") and importlib.util.find_spec(qualified) is not None:
            return importlib.import_module(qualified)
        complete(self)
        return getattr(self, name)


def complete(module: ModuleType) -> None:
    """Run a deferred package's real ``__init__`` into it (idempotent; a plain module is left alone)."""
    if not isinstance(module, DeferredPackage):
        return
    spec = module.__spec__
    assert spec is not None and spec.loader is not None
    module._nc_running_init = True
    try:
        spec.loader.exec_module(module)
    finally:
        plain: ModuleType = module
        plain.__class__ = ModuleType  # a plain module again: no more __getattr__ hook
        vars(module).pop("_nc_running_init", None)


def _defer(name: str) -> None:
    if name in sys.modules:
        return  # already imported (in full, or deferred by an earlier load())
    spec = importlib.util.find_spec(name)  # the parent is in sys.modules already: nothing else runs
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(
            f"No module named {name!r}: Kubernetes mode needs the kubernetes-asyncio package", name=name
        )
    module = importlib.util.module_from_spec(spec)
    module.__class__ = DeferredPackage
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


@dataclass(frozen=True)
class Library:
    """What ``kube/client.py`` takes from ``kubernetes_asyncio``."""

    Configuration: Any
    ApiClient: Any
    load_kube_config: Any
    load_incluster_config: Any
    ApiException: Any  # exception classes (untyped library)
    OpenApiException: Any
    ConfigException: Any


def load() -> Library:
    """Import the used parts of ``kubernetes_asyncio`` (see the module docstring)."""
    for name in DEFERRED:
        _defer(name)
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration
    from kubernetes_asyncio.client.exceptions import ApiException, OpenApiException

    client = sys.modules["kubernetes_asyncio.client"]
    for attribute, value in (("Configuration", Configuration), ("ApiClient", ApiClient)):
        if attribute not in vars(client):  # config/ does "from kubernetes_asyncio.client import ApiClient"
            setattr(client, attribute, value)
    from kubernetes_asyncio.config import load_incluster_config, load_kube_config
    from kubernetes_asyncio.config.config_exception import ConfigException

    return Library(
        Configuration=Configuration,
        ApiClient=ApiClient,
        load_kube_config=load_kube_config,
        load_incluster_config=load_incluster_config,
        ApiException=ApiException,
        OpenApiException=OpenApiException,
        ConfigException=ConfigException,
    )
