"""A smaller process (issue 17): what `import notification_controller.app` loads in local mode.

Checked in a fresh interpreter: the Kubernetes client (~40 MB of models) only in cluster mode, the CEL
package's REPL (prompt_toolkit) never — the controller needs the compiled CEL module only — and CEL itself
only on the first expression: a process whose objects have none never loads it.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import notification_controller.app
from notification_controller.core.cel import compile_expression, OutputType
compile_expression("event.reason == 'x'", variables=["event"], output=OutputType.BOOL)
print(json.dumps(sorted(sys.modules)))
"""


def test_local_mode_imports_neither_the_kubernetes_client_nor_the_cel_repl() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    modules = json.loads(out)
    heavy = [m for m in modules if m.split(".")[0] in ("kubernetes_asyncio", "prompt_toolkit", "pygments")]
    assert heavy == []
    assert "cel.cel" in modules  # CEL itself works (the expression above compiled)
    assert "cel.cli" not in modules


LAZY_CEL_PROBE = """
import json, sys
import notification_controller.app
before = sorted(m for m in sys.modules if m in ("notification_controller.core.cel", "cel", "cel.cel"))
from notification_controller.core.cel import compile_expression, OutputType
expr = compile_expression("res.metadata.name == 'x'", variables=["res", "req"], output=OutputType.BOOL)
ok = expr.evaluate_bool({"res": {"metadata": {"name": "x"}}, "req": {}})
print(json.dumps({"before": before, "ok": ok, "after": "cel.cel" in sys.modules}))
"""


def test_cel_is_imported_on_the_first_expression_only() -> None:
    """``import notification_controller.app`` (nothing started, no expression) leaves CEL unloaded."""
    out = subprocess.run(
        [sys.executable, "-c", LAZY_CEL_PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert json.loads(out) == {"before": [], "ok": True, "after": True}


def test_every_receiver_type_resolves_its_verifier() -> None:
    """The registry names verifier modules (imported on first use): each name must be a real ``verify``."""
    from notification_controller.receivers import registry
    from notification_controller.receivers.registry import LazyVerifier

    for receiver_type, entry in registry.TYPES.items():
        assert isinstance(entry.verify, LazyVerifier), receiver_type
        module = importlib.import_module(f"notification_controller.receivers.{entry.verify.module}")
        assert callable(module.verify), receiver_type
