"""Fixtures for end-to-end tests against a real kube-apiserver (see README.md here).

* Every test under tests/e2e gets the ``e2e`` marker (deselect with ``-m "not e2e"``).
* The kube-apiserver binary is built/located once, right after collection, so the
  (first-time, ~5 minute) build is not counted against pytest-timeout's per-test limit.
* If the server cannot be built or started, the fixtures FAIL when ``CI=true`` and skip
  otherwise.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

_E2E_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _E2E_DIR.parents[1]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from tests.e2e.apiserver import (  # noqa: E402
    KubeTestServer,
    KubeTestServerError,
    ensure_apiserver_binary,
)

_BINARY: pytest.StashKey[Path | str] = pytest.StashKey()


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def _unavailable(reason: str) -> NoReturn:
    if _in_ci():
        pytest.fail(f"e2e kube-apiserver unavailable (CI=true, so this fails): {reason}", pytrace=False)
    pytest.skip(f"e2e kube-apiserver unavailable: {reason}")


def _is_e2e(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(_E2E_DIR)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: needs the real kube-apiserver built by tests/e2e/build-apiserver.sh"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build or locate kube-apiserver once, outside any per-test timeout."""
    if session.config.option.collectonly or not any(_is_e2e(item) for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("e2e: locating kube-apiserver (first build takes ~5 minutes) ...")
    try:
        binary: Path | str = ensure_apiserver_binary()
    except (KubeTestServerError, OSError) as exc:
        binary = str(exc)
    session.config.stash[_BINARY] = binary
    if reporter is not None:
        reporter.write_line(f"e2e: kube-apiserver: {binary}")


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest) -> Iterator[KubeTestServer]:
    """A started etcd + kube-apiserver shared by the whole session (admin token)."""
    binary = request.config.stash.get(_BINARY, None)
    if binary is None:
        try:
            binary = ensure_apiserver_binary()
        except (KubeTestServerError, OSError) as exc:
            binary = str(exc)
        request.config.stash[_BINARY] = binary
    if isinstance(binary, str):
        _unavailable(f"build-apiserver.sh failed: {binary}")
    server = KubeTestServer(binary)
    try:
        server.start()
    except (KubeTestServerError, OSError) as exc:
        _unavailable(f"could not start etcd/kube-apiserver: {exc}")
    try:
        yield server
    finally:
        server.close()


LEFT_BEHIND = (  # (API prefix, plural): what a controller started by a later test would list and reconcile
    ("/apis/notification.toolkit.fluxcd.io/v1beta3", "alerts"),
    ("/apis/notification.toolkit.fluxcd.io/v1beta3", "providers"),
    ("/apis/notification.toolkit.fluxcd.io/v1", "receivers"),
    ("/apis/notification-controller.io/v1alpha1", "silences"),
    ("/apis/source.toolkit.fluxcd.io/v1", "gitrepositories"),
    ("/apis/kustomize.toolkit.fluxcd.io/v1", "kustomizations"),
    ("/api/v1", "secrets"),
)


def empty_namespace(kube: KubeTestServer, namespace: str) -> list[str]:
    """Delete the objects of ``LEFT_BEHIND`` in ``namespace``, finalizers first (no controller is left to
    remove them); what is still there afterwards (``kind/name``).

    Without this every later test's controller inherited every earlier test's Alerts, Providers, Receivers
    and Secrets (namespace deletion never completes here): it reconciled them all at start-up, called
    their hooks at ports other tests may have taken since, and started with a heap that depended on the
    order of the tests."""
    left: list[str] = []
    for prefix, plural in LEFT_BEHIND:
        collection = f"{prefix}/namespaces/{namespace}/{plural}"
        status, listing = kube.request("GET", collection)
        if status != 200:  # a kind this API server does not have (its CRD not installed by this test)
            continue
        for item in listing["items"]:
            if item["metadata"].get("finalizers"):
                kube.request(
                    "PATCH",
                    f"{collection}/{item['metadata']['name']}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
        kube.request("DELETE", collection)
        status, listing = kube.request("GET", collection)
        left += [f"{plural}/{item['metadata']['name']}" for item in listing.get("items", [])]
    return left


@pytest.fixture
def namespace(kube: KubeTestServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, uniquely named namespace; emptied afterwards (``empty_namespace``), then deleted (the
    deletion never completes: no controller-manager)."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "test"
    name = f"e2e-{base}-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name, check=True)
    yield name
    try:
        left = empty_namespace(kube, name)
    except OSError as exc:  # the API server is down (a fault test failed before restoring it)
        left = [f"not emptied: {exc}"]
    if left:
        sys.stderr.write(f"e2e: left in namespace {name}: {left[:5]}\n")
    kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture(scope="session")
def installed(kube: KubeTestServer) -> KubeTestServer:
    """config/default installed once (CRDs, RBAC, Deployment, Services; idempotent within one server)."""
    from tests.e2e.controllerkit import install

    install(kube)
    return kube


@pytest.fixture(scope="session")
def sa_kubeconfig(installed: KubeTestServer) -> Path:
    """The controller's own identity from config/rbac (ServiceAccount notification-controller): every e2e
    controller runs with it, so every e2e test also proves the least-privilege RBAC is enough."""
    from tests.e2e.controllerkit import NS

    return installed.create_service_account_kubeconfig(NS, "notification-controller")
