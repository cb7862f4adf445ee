"""Provider registry == CRD enum == docs pages (STYLE: no type can drift; reference §1.3)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from notification_controller.api.provider import BEYOND_FLUX, ProviderType
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.registry import create_notifier, registered_types

ROOT = Path(__file__).resolve().parents[3]


def crd_enum() -> set[str]:
    crd = yaml.safe_load((ROOT / "crds" / "notification.toolkit.fluxcd.io_providers.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"]["type"]["enum"])


def test_registry_equals_crd_enum_equals_docs() -> None:
    registry = {str(t) for t in registered_types()}
    docs = {p.stem for p in (ROOT / "docs" / "providers").glob("*.md") if p.stem != "README"}
    assert len(ProviderType) == 34 + len(BEYOND_FLUX)
    assert registry == {str(t) for t in ProviderType}
    assert crd_enum() == registry
    assert docs == registry, f"missing docs: {registry - docs}, stray docs: {docs - registry}"


def test_every_type_beyond_flux_says_so_on_its_page_and_in_the_table() -> None:
    """A Flux user must see at a glance which types a Flux controller would reject (issue 28)."""
    readme = (ROOT / "docs" / "providers" / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Types beyond Flux", 1)[1].split("\n## ", 1)[0]
    for t in ProviderType:
        page = (ROOT / "docs" / "providers" / f"{t}.md").read_text(encoding="utf-8")
        head = page[:400]
        if t in BEYOND_FLUX:
            assert "**Beyond Flux" in head, f"docs/providers/{t}.md does not open with 'Beyond Flux'"
            assert f"[`{t}`]({t}.md)" in table, f"{t} missing from the table of types beyond Flux"
        else:
            assert "Beyond Flux" not in head, f"{t} is one of Flux's 34"
            assert f"[`{t}`]" not in table


def test_an_unknown_type_is_a_clear_error_not_a_crash() -> None:
    """The CRD enum makes it impossible; if reached anyway (an older CRD), the Provider gets a clear error."""
    opts = ProviderOptions(type=ProviderType.GENERIC, name="p", namespace="ns", address="http://x.example/")
    unknown = dataclasses.replace(opts, type="carrier-pigeon")  # type: ignore[arg-type]
    with pytest.raises(ProviderConfigError, match="provider carrier-pigeon not supported"):
        create_notifier(unknown)


def test_every_entry_imports_and_names_a_notifier_of_its_type() -> None:
    from notification_controller.providers.registry import TYPES

    for ptype, record in TYPES.items():
        factory = record.load()
        assert factory.type == ptype, (ptype, record)  # type: ignore[attr-defined]


def test_starting_imports_no_provider_module_until_a_provider_is_built() -> None:
    """The map is lazy: ``import notification_controller.app`` loads no provider type (nor its SDK)."""
    import json
    import subprocess
    import sys

    probe = """
import json, sys
import notification_controller.app
from notification_controller.api.provider import ProviderType
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.registry import TYPES, create_notifier
before = sorted(m for m in sys.modules if m.rsplit(".", 1)[-1] in {r.module for r in TYPES.values()}
                and m.startswith("notification_controller.providers."))
create_notifier(ProviderOptions(type=ProviderType.SLACK, name="p", namespace="ns",
                                address="https://hooks.slack.com/services/x"))
after = sorted(m for m in sys.modules if m.startswith("notification_controller.providers.")
               and m.rsplit(".", 1)[-1] in {r.module for r in TYPES.values()})
print(json.dumps({"before": before, "after": after, "otel": "opentelemetry" in sys.modules}))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen == {"before": [], "after": ["notification_controller.providers.slack"], "otel": False}
