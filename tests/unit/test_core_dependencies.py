"""Providers Flux has built in work from a plain ``pip install notification-controller`` (issue 16).

``nats`` needs ``nats-py`` (and ``nkeys`` for creds/nkey auth) and ``otel`` needs ``opentelemetry-proto``:
both must be core dependencies, not extras. The NATS client is still imported lazily, so importing the
provider modules never requires it (a broken install fails the one Provider, not the controller).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from notification_controller.api.provider import ProviderType
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.registry import create_notifier

ROOT = Path(__file__).resolve().parents[2]


def core_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {Requirement(line).name: Requirement(line) for line in project["dependencies"]}


def test_nats_client_is_a_core_dependency() -> None:
    core = core_requirements()
    assert "nats-py" in core
    assert "nkeys" in core["nats-py"].extras  # creds and nkey seeds need it, as in Flux
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not project["optional-dependencies"].get("nats"), "nats-py must not hide behind an extra"


def test_otlp_protobuf_messages_are_a_core_dependency() -> None:
    assert "opentelemetry-proto" in core_requirements()


def test_provider_modules_import_without_the_nats_client() -> None:
    """With ``nats``/``nkeys`` unimportable, every provider module (nats included) still imports."""
    script = textwrap.dedent(
        """
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("nats", "nkeys"):
                    raise ImportError(f"blocked: {name}")
                return None

        sys.meta_path.insert(0, Block())
        import importlib
        from notification_controller.providers.registry import TYPES
        for record in TYPES.values():
            importlib.import_module("notification_controller.providers." + record.module)
        from notification_controller.api.provider import ProviderType
        from notification_controller.errors import ProviderConfigError
        from notification_controller.providers.base import ProviderOptions
        from notification_controller.providers.registry import create_notifier, registered_types

        assert ProviderType.NATS in registered_types()
        assert not any(m.split(".")[0] in ("nats", "nkeys") for m in sys.modules), "imported eagerly"
        opts = ProviderOptions(
            type=ProviderType.NATS, name="p", namespace="ns", address="nats://127.0.0.1:4222", channel="s"
        )
        try:
            create_notifier(opts)
        except ProviderConfigError as exc:  # a broken install fails this Provider only, clearly
            assert "nats-py" in str(exc), exc
        else:
            raise AssertionError("built a nats notifier without nats-py")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_a_plain_install_builds_a_nats_notifier() -> None:
    """In this environment (core dependencies only matter), the nats provider builds without extras."""
    opts = ProviderOptions(
        type=ProviderType.NATS, name="p", namespace="ns", address="nats://127.0.0.1:4222", channel="flux"
    )
    assert create_notifier(opts).type is ProviderType.NATS
