"""A smaller process (issue 17): what `import notification_controller.app` loads in local mode.

Checked in a fresh interpreter: the Kubernetes client (~40 MB of models) only in cluster mode, and the CEL
package's REPL (prompt_toolkit) never — the controller needs the compiled CEL module only.
"""

from __future__ import annotations

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
