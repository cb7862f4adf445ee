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


@pytest.fixture
def namespace(kube: KubeTestServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, uniquely named namespace (deletion never completes: no controller-manager)."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "test"
    name = f"e2e-{base}-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name, check=True)
    yield name
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
