"""The Alert CRD's bounds on ``inclusionList``/``exclusionList`` on a real kube-apiserver (issue 11 item 5).

The API server refuses an Alert whose lists are over the bounds (100 expressions of at most 1,024
characters each) with a message naming the field, and stores one exactly at the bounds. The controller's
own check (``Ready=False`` for an over-limit Alert an API server stored anyway) is proven in local mode by
``tests/adversarial/test_regex_load.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import get

pytestmark = pytest.mark.e2e


def alert(name: str, namespace: str, **lists: list[str]) -> str:
    return json.dumps(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
                **lists,
            },
        }
    )


@pytest.mark.parametrize("field", ["inclusionList", "exclusionList"])
def test_api_server_enforces_the_list_bounds(installed: KubeTestServer, namespace: str, field: str) -> None:
    too_many = installed.kubectl(
        "create", "-f", "-", input=alert("too-many", namespace, **{field: [f"e{i}" for i in range(101)]})
    )
    assert too_many.returncode != 0
    assert f"spec.{field}" in too_many.stderr and "at most 100 items" in too_many.stderr, too_many.stderr
    too_long = installed.kubectl(
        "create", "-f", "-", input=alert("too-long", namespace, **{field: ["a" * 1025]})
    )
    assert too_long.returncode != 0
    assert f"spec.{field}" in too_long.stderr and "at most 1024 chars" in too_long.stderr, too_long.stderr
    at_limit = [f"{'x' * 1018}{i:06d}" for i in range(100)]
    created = installed.kubectl("create", "-f", "-", input=alert("at-limit", namespace, **{field: at_limit}))
    assert created.returncode == 0, created.stderr
    stored = get(installed, "alert", namespace, "at-limit")
    assert stored is not None and stored["spec"][field] == at_limit
