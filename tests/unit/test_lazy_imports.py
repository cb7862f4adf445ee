"""A smaller process (issue 17, item 4): what each mode imports, checked in fresh interpreters.

Local mode must not load the Kubernetes client, the OIDC stack (PyJWT → cryptography, ~10 MB of RSS),
the SOCKS proxy client, tenacity, Jinja2, protobuf or CEL until something uses them; cluster mode loads a
dozen modules of ``kubernetes_asyncio`` instead of its ~850 (``kube/library.py``), and the rest of that
library still works when something asks for it. A lazy import that regressed to a module-level one fails
here. ``tests/integration/test_lazy_imports_process.py`` checks a started controller the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Top-level packages a local-mode controller with no Receiver of the OIDC types, no SOCKS proxy, no
# template, no CEL expression and no otel Provider must not have imported.
NOT_AT_START = (
    "kubernetes_asyncio",
    "jwt",
    "cryptography",
    "aiohttp_socks",
    "python_socks",
    "tenacity",
    "jinja2",
    "opentelemetry",
    "google",
    "cel",
    "celpy",
    "nats",
)


def run(code: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_local_mode_imports_none_of_the_heavy_packages() -> None:
    modules = run(
        "import json, sys\n"
        "import notification_controller.cli, notification_controller.app, notification_controller.objects.local\n"
        "import notification_controller.server.receivers\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = sorted({m.split(".")[0] for m in modules} & set(NOT_AT_START))
    assert loaded == []


def test_cluster_mode_imports_only_the_used_parts_of_the_kubernetes_client() -> None:
    modules = run(
        "import json, sys\n"
        "import notification_controller.runtime\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kubernetes_asyncio'))))"
    )
    assert "kubernetes_asyncio.client.api_client" in modules
    assert "kubernetes_asyncio.config.kube_config" in modules
    assert "kubernetes_asyncio.client.api" not in modules  # the API groups
    assert not [m for m in modules if m.startswith("kubernetes_asyncio.client.models.")]
    assert len(modules) < 40  # 15 today; the whole client is ~850


def test_the_rest_of_the_kubernetes_client_still_loads_on_demand() -> None:
    """Deferred packages complete themselves on the first attribute they lack, for any other user."""
    result = run(
        "import json, sys\n"
        "import notification_controller.kube.client\n"
        "import kubernetes_asyncio\n"
        "from kubernetes_asyncio.client import V1ObjectMeta, CoreV1Api, ApiClient\n"
        "from kubernetes_asyncio import watch\n"
        "import kubernetes_asyncio.client.models as models\n"
        "from notification_controller.kube.client import ApiException\n"
        "from kubernetes_asyncio.client.exceptions import ApiException as Real\n"
        "print(json.dumps({'version': kubernetes_asyncio.__version__,\n"
        "  'meta': V1ObjectMeta(name='x').name, 'api': CoreV1Api.__name__,\n"
        "  'status': models.V1Status.__name__, 'watch': watch.Watch.__name__,\n"
        "  'same_exception': ApiException is Real, 'same_client': ApiClient is\n"
        "     sys.modules['kubernetes_asyncio.client.api_client'].ApiClient,\n"
        "  'plain': [type(sys.modules[m]).__name__ for m in ('kubernetes_asyncio', 'kubernetes_asyncio.client',\n"
        "     'kubernetes_asyncio.client.models')]}))"
    )
    assert result == {
        "version": result["version"],
        "meta": "x",
        "api": "CoreV1Api",
        "status": "V1Status",
        "watch": "Watch",
        "same_exception": True,
        "same_client": True,
        "plain": ["module", "module", "module"],
    }


def test_a_missing_kubernetes_client_fails_loudly() -> None:
    """Without the package (site-packages out of the path), loading it names it: no silent half-import."""
    result = run(
        "import json, sys\n"
        f"sys.path[:] = [p for p in sys.path if 'site-packages' not in p] + [{str(ROOT)!r}]\n"
        "from notification_controller.kube import library\n"
        "try:\n"
        "    library.load()\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(json.dumps({'name': exc.name, 'message': str(exc)}))\n"
    )
    assert result["name"] == "kubernetes_asyncio"
    assert "kubernetes-asyncio" in result["message"]
