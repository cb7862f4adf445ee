"""The web UI against a real kube-apiserver (issue 27 item 3, docs/ui.md): the controller runs under the
least-privilege RBAC of config/rbac (``sa_kubeconfig``) with ``--ui-addr`` and ``--ui-actions-token-file``.

* the overview lists a Silence created through the API server;
* expiring it from the UI needs ``patch`` on Silences, which config/rbac does not grant: the action answers
  409 with the API server's refusal and the Silence is unchanged; once the ClusterRole and binding that
  docs/ui.md gives are applied (taken from the page itself), the same action sends the merge patch and the
  Silence ends now;
* without the bearer token the action is a 403 and nothing is patched.
"""

from __future__ import annotations

import json
import re
import textwrap
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from notification_controller.api.silence import SILENCE_API_VERSION
from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import ROOT, Controller, apply, get, wait_for
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e

SILENCE = "silences.notification-controller.io"
TOKEN = "e2e-ui-actions-token-0b3c5d"


def _request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def docs_rbac() -> str:
    """The ClusterRole and ClusterRoleBinding docs/ui.md tells a user to apply for the actions."""
    page = (ROOT / "docs" / "ui.md").read_text()
    blocks: list[str] = re.findall(r"```yaml\n(.*?)```", page, re.S)
    (rbac,) = [b for b in blocks if "notification-controller-ui-actions" in b]
    return rbac


def test_expire_a_silence_from_the_ui_needs_the_documented_grant(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    port = free_port()
    controller = Controller(
        installed,
        sa_kubeconfig,
        f"--ui-addr=127.0.0.1:{port}",
        f"--ui-actions-token-file={token}",
        name="ui",
    )
    ui = f"http://127.0.0.1:{port}"
    now = datetime.now(UTC)
    ends = (now + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        controller.wait_ready()
        apply(
            installed,
            json.dumps(
                {
                    "apiVersion": SILENCE_API_VERSION,
                    "kind": "Silence",
                    "metadata": {"name": "freeze", "namespace": namespace},
                    "spec": {"matchers": [{"name": "kind", "value": "Kustomization"}], "endsAt": ends},
                }
            ),
        )
        wait_for(lambda: "freeze" in _request(ui + "/")[1], 60, what="the Silence on the overview")
        form = f"namespace={namespace}&name=freeze".encode()
        url = ui + "/actions/silences/expire"
        form_type = {"Content-Type": "application/x-www-form-urlencoded"}

        status, text = _request(url, form, form_type)
        assert status == 403, text  # no token

        bearer = {**form_type, "Authorization": f"Bearer {TOKEN}"}
        status, text = _request(url, form, bearer)
        assert status == 409 and "cannot expire the Silence" in text, text  # config/rbac: no patch
        assert (get(installed, SILENCE, namespace, "freeze") or {})["spec"]["endsAt"] == ends

        apply(installed, textwrap.dedent(docs_rbac()))

        def expired() -> bool:
            status, text = _request(url, form, bearer)
            return status == 200 and "expired" in text

        wait_for(expired, 60, what="the expire action once the grant is applied")
        spec = (get(installed, SILENCE, namespace, "freeze") or {})["spec"]
        assert spec["endsAt"] != ends
        ended = datetime.strptime(spec["endsAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert ended <= datetime.now(UTC) + timedelta(seconds=1)
    finally:
        code = controller.stop()
        installed.kubectl(
            "delete",
            "clusterrolebinding,clusterrole",
            "notification-controller-ui-actions",
            "--ignore-not-found",
        )
    assert code == 0, controller.log()[-3000:]
    assert TOKEN not in controller.log()
