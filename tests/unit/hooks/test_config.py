"""``spec.hooks`` and the ``--hooks-config`` file: models and CRD schema (docs/hooks.md, issue 8).

Flux manifests without ``hooks`` keep validating (models + the generated CRD, reference §1); manifests with
``hooks`` validate here; invalid hooks are rejected by the model with a message naming the field, and —
where a Kubernetes schema can express the rule — by the CRD too (OpenAPI via jsonschema, CEL rules via a
real CEL engine), so both modes reject the same objects.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import cel
import jsonschema
import pytest
import yaml

from notification_controller.api import GROUP
from notification_controller.api.alert import Alert
from notification_controller.api.hooks import (
    ADDRESS_REQUIRED,
    HOOK_TIMEOUT_PATTERN,
    PRE_DISPATCH_ON_RECEIVER,
    HookCapability,
    HookKind,
    HooksConfig,
)
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import Provider
from notification_controller.api.receiver import Receiver
from notification_controller.errors import ConfigError, ManifestError
from notification_controller.hooks.config import load_hooks_config

REPO = Path(__file__).resolve().parents[3]
CRDS = REPO / "crds"
EXAMPLES = REPO / "tests" / "data" / "flux-doc-examples"
HOOK_EXAMPLES = REPO / "examples" / "hooks" / "manifests"
KINDS = ("Alert", "Provider", "Receiver")


@functools.cache
def _crd_schema(kind: str) -> dict[str, Any]:
    document = yaml.safe_load((CRDS / f"{GROUP}_{kind.lower()}s.yaml").read_text(encoding="utf-8"))
    schema: dict[str, Any] = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as draft-4 JSON Schema, unknown fields rejected (the API server would prune them)."""
    out = copy.deepcopy(schema)
    stack = [out]
    while stack:
        node = stack.pop()
        if "properties" in node:
            node.setdefault("additionalProperties", False)
            stack.extend(node["properties"].values())
        if isinstance(node.get("items"), dict):
            stack.append(node["items"])
        if isinstance(node.get("additionalProperties"), dict):
            stack.append(node["additionalProperties"])
    return out


def schema_errors(raw: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft4Validator(_strict(_crd_schema(raw["kind"])))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(raw)]


def _rules(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Messages of every ``x-kubernetes-validations`` rule in the schema that rejects ``value``."""
    failures = [
        f"{path}: {rule['message']}"
        for rule in node.get("x-kubernetes-validations", [])
        if cel.evaluate(rule["rule"], {"self": value}) is not True
    ]
    if isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name in value:
                failures += _rules(child, value[name], f"{path}.{name}".lstrip("."))
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            failures += _rules(node["items"], item, f"{path}[{i}]")
    return failures


def cel_failures(raw: dict[str, Any]) -> list[str]:
    return _rules(_crd_schema(raw["kind"])["properties"]["spec"], raw["spec"], "spec")


def hook(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "enrich",
        "version": "v1",
        "address": {"uri": "http://enricher.tools.svc:8080/hook"},
        "timeout": "PT5S",
        "capabilities": ["pre-dispatch"],
        "secretRef": {"name": "hook-hmac"},
        "certSecretRef": {"name": "hook-ca"},
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def alert(*hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Alert",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {
            "providerRef": {"name": "p"},
            "eventSources": [{"kind": "GitRepository", "name": "*"}],
            "hooks": list(hooks),
        },
    }


def provider(*hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Provider",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"type": "slack", "hooks": list(hooks)},
    }


def receiver(*hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Receiver",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {
            "type": "github",
            "resources": [{"kind": "GitRepository", "name": "app"}],
            "secretRef": {"name": "token"},
            "hooks": list(hooks),
        },
    }


# --------------------------------------------------------------------------------------------------
# Flux manifests without hooks stay valid
# --------------------------------------------------------------------------------------------------


def _flux_objects() -> list[dict[str, Any]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d and d["kind"] in KINDS]
    return out


def test_flux_manifests_without_hooks_still_validate() -> None:
    """Reference §1: the field is additive — every Flux doc example parses and passes the CRD schema."""
    objects = _flux_objects()
    assert len(objects) == 66
    for raw in objects:
        assert "hooks" not in raw["spec"]
        obj = parse_object(raw)
        assert isinstance(obj, Alert | Provider | Receiver)
        assert obj.spec.hooks is None
        assert schema_errors(raw) == []
        assert cel_failures(raw) == []


def _has_default(node: Any) -> bool:
    if isinstance(node, dict):
        return "default" in node or any(_has_default(v) for k, v in node.items() if k != "description")
    if isinstance(node, list):
        return any(_has_default(v) for v in node)
    return False


def test_the_crd_adds_no_default_and_keeps_hooks_optional() -> None:
    """What the API server stores is what the user wrote: defaults (v1, 10s, Service) live in the model."""
    for kind in KINDS:
        spec = _crd_schema(kind)["properties"]["spec"]
        assert "hooks" not in spec.get("required", [])
        hooks = spec["properties"]["hooks"]
        assert hooks["x-kubernetes-list-type"] == "map"
        assert hooks["x-kubernetes-list-map-keys"] == ["name"]
        assert hooks["maxItems"] == 16
        assert not _has_default(hooks)
        assert hooks["items"]["properties"]["timeout"]["pattern"] == HOOK_TIMEOUT_PATTERN
        assert hooks["items"]["properties"]["capabilities"]["items"]["enum"] == [
            c.value for c in HookCapability
        ]


# --------------------------------------------------------------------------------------------------
# With hooks
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(alert(hook()), id="alert-pre-dispatch"),
        pytest.param(
            provider(hook(capabilities=["pre-dispatch", "pre-reconcile", "finalize"], timeout="1m30s")),
            id="provider-all-phases",
        ),
        pytest.param(
            receiver(
                hook(name="github", capabilities=["pre-reconcile", "finalize"], timeout=None, version=None),
                hook(
                    name="svc",
                    capabilities=["finalize"],
                    address={"ref": {"apiVersion": "v1", "kind": "Service", "name": "hooks", "port": 8443}},
                ),
            ),
            id="receiver-two-hooks",
        ),
        pytest.param(
            alert(
                hook(
                    address={
                        "uri": "https://ignored-host:9443/v1/hook",
                        "ref": {"name": "enricher", "namespace": "tools"},
                    },
                    timeout="PT0.5S",
                )
            ),
            id="uri-and-ref",
        ),
    ],
)
def test_manifests_with_hooks_validate(raw: dict[str, Any]) -> None:
    obj = parse_object(raw)
    assert isinstance(obj, Alert | Provider | Receiver)
    assert obj.spec.hooks is not None
    assert [h.name for h in obj.spec.hooks] == [h["name"] for h in raw["spec"]["hooks"]]
    assert schema_errors(raw) == []
    assert cel_failures(raw) == []
    # Round trip: what the controller would write back is what the user wrote.
    assert obj.spec.dump()["hooks"] == raw["spec"]["hooks"]


def test_defaults_live_in_the_model_not_in_the_crd() -> None:
    obj = parse_object(receiver(hook(name="h", capabilities=["finalize"], timeout=None, version=None)))
    assert isinstance(obj, Receiver) and obj.spec.hooks is not None
    [h] = obj.spec.hooks
    assert h.version is None
    assert h.timeout_seconds() == 10.0


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        ("PT5S", 5.0),
        ("PT1M30S", 90.0),
        ("PT0.25S", 0.25),
        ("5s", 5.0),
        ("1m30s", 90.0),
        ("750ms", 0.75),
        ("PT5M", 300.0),
    ],
)
def test_timeouts_iso_8601_and_go_style(timeout: str, seconds: float) -> None:
    obj = parse_object(alert(hook(timeout=timeout)))
    assert isinstance(obj, Alert) and obj.spec.hooks is not None
    assert obj.spec.hooks[0].timeout_seconds() == seconds
    assert schema_errors(alert(hook(timeout=timeout))) == []


# --------------------------------------------------------------------------------------------------
# Invalid hooks: clear messages, same verdict in the CRD where it can say so
# --------------------------------------------------------------------------------------------------

# (manifest, field named by the model, text of the model's message, text of the OpenAPI error, CEL message)
INVALID = [
    pytest.param(
        alert(hook(address={})),
        "spec.hooks[0].address",
        ADDRESS_REQUIRED,
        None,
        ADDRESS_REQUIRED,
        id="no-address",
    ),
    pytest.param(
        receiver(hook()),
        "spec.hooks",
        PRE_DISPATCH_ON_RECEIVER,
        None,
        PRE_DISPATCH_ON_RECEIVER,
        id="pre-dispatch-on-receiver",
    ),
    pytest.param(
        alert(hook(capabilities=["pre-post"])),
        "spec.hooks[0].capabilities[0]",
        "'pre-dispatch'",
        "is not one of",
        None,
        id="unknown-capability",
    ),
    pytest.param(
        alert(hook(capabilities=[])),
        "spec.hooks[0].capabilities",
        "at least 1",
        "should be non-empty",
        None,
        id="no-capability",
    ),
    pytest.param(
        alert(hook(timeout="5 seconds")),
        "spec.hooks[0].timeout",
        "pattern",
        "does not match",
        None,
        id="timeout-text",
    ),
    pytest.param(
        alert(hook(timeout="PT")), "spec.hooks[0].timeout", "pattern", "does not match", None, id="timeout-PT"
    ),
    pytest.param(
        alert(hook(timeout="PT10M")),
        "spec.hooks[0].timeout",
        "at most 300s",
        None,
        None,
        id="timeout-too-long",
    ),
    pytest.param(
        alert(hook(timeout="0s")), "spec.hooks[0].timeout", "greater than zero", None, None, id="timeout-zero"
    ),
    pytest.param(
        alert(hook(name="Enrich_1")),
        "spec.hooks[0].name",
        "pattern",
        "does not match",
        None,
        id="name-not-a-label",
    ),
    pytest.param(
        alert(hook(version="v2")), "spec.hooks[0].version", "'v1'", "is not one of", None, id="version"
    ),
    pytest.param(
        alert(hook(address={"uri": "ftp://x/hook"})),
        "spec.hooks[0].address.uri",
        "pattern",
        "does not match",
        None,
        id="uri-scheme",
    ),
    pytest.param(
        alert(hook(address={"uri": "http:///hook"})),
        "spec.hooks[0].address.uri",
        "uri must contain a host",
        None,
        None,
        id="uri-without-host",
    ),
    pytest.param(
        alert(hook(address={"ref": {"kind": "Deployment", "name": "x"}})),
        "spec.hooks[0].address.ref.kind",
        "'Service'",
        "is not one of",
        None,
        id="ref-kind",
    ),
    pytest.param(
        alert(hook(address={"ref": {"name": "x", "port": 70000}})),
        "spec.hooks[0].address.ref.port",
        "65535",
        "is greater than the maximum",
        None,
        id="ref-port",
    ),
    pytest.param(
        alert(hook(capabilities=["finalize", "finalize"])),
        "spec.hooks[0].capabilities",
        "must not repeat",
        None,
        None,
        id="repeated-capability",
    ),
    pytest.param(
        alert(hook(), hook()), "spec.hooks", "'enrich' is used twice", None, None, id="duplicate-names"
    ),
    pytest.param(
        alert(hook(retries=3)),
        "spec.hooks[0].retries",
        "unknown field",
        "Additional properties",
        None,
        id="unknown-field",
    ),
]


@pytest.mark.parametrize(("raw", "field", "model_text", "schema_text", "cel_text"), INVALID)
def test_invalid_hooks_are_rejected_with_clear_messages(
    raw: dict[str, Any], field: str, model_text: str, schema_text: str | None, cel_text: str | None
) -> None:
    with pytest.raises(ManifestError) as info:
        parse_object(raw)
    assert info.value.field == field
    assert model_text in str(info.value)
    errors = schema_errors(raw)
    if schema_text is None:
        assert errors == []
    else:
        assert len(errors) == 1, errors
        assert schema_text in errors[0]
    failures = cel_failures(raw)
    assert [f for f in failures if cel_text and cel_text in f] == failures
    assert bool(failures) == (cel_text is not None)


def test_duplicate_names_are_a_list_map_key_for_the_api_server() -> None:
    """jsonschema cannot check list-map keys; the API server does, through ``x-kubernetes-list-map-keys``."""
    for kind in KINDS:
        assert _crd_schema(kind)["properties"]["spec"]["properties"]["hooks"]["items"]["required"] == [
            "address",
            "capabilities",
            "name",
        ]


# --------------------------------------------------------------------------------------------------
# The controller-wide file
# --------------------------------------------------------------------------------------------------


def test_hooks_config_file(tmp_path: Path) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "hooks": [
                    hook(name="audit", capabilities=["pre-reconcile"], secretRef=None, certSecretRef=None),
                    {**hook(name="enrich"), "kinds": ["Alert", "Provider"]},
                ]
            }
        )
    )
    config = load_hooks_config(path)
    assert [h.name for h in config.hooks] == ["audit", "enrich"]
    assert config.hooks[0].kinds == list(HookKind)  # absent kinds: every kind
    assert config.hooks[1].selects("Provider") and not config.hooks[1].selects("Receiver")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_hooks_config(empty) == HooksConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hooks: [", "invalid YAML (line 1)"),
        ("- a\n- b\n", "expected a mapping with a 'hooks' list"),
        (
            "hooks:\n- {name: x, address: {uri: 'http://h/'}, capabilities: [pre-dispatch], kinds: [Receiver]}\n",
            "hooks.0: Value error, the pre-dispatch capability needs kind Alert or Provider in kinds",
        ),
        (
            "hooks:\n- {name: x, address: {uri: 'http://h/'}, capabilities: [finalize], kinds: [Bucket]}\n",
            "hooks.0.kinds.0",
        ),
        ("hooks:\n- {name: x, address: {}, capabilities: [finalize]}\n", ADDRESS_REQUIRED),
        (
            "hooks:\n- {name: x, address: {uri: 'http://h/'}, capabilities: [finalize]}\n"
            "- {name: x, address: {uri: 'http://h/'}, capabilities: [finalize]}\n",
            "'x' is used twice",
        ),
    ],
)
def test_invalid_hooks_config_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_hooks_config(path)
    assert str(info.value).startswith(f"hooks config {path}: ")
    assert message in str(info.value)


def test_missing_hooks_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read hooks config"):
        load_hooks_config(tmp_path / "absent.yaml")


def test_the_example_manifests_validate() -> None:
    """examples/hooks/manifests is what the README points at: it must apply to our CRDs."""
    docs = [
        d
        for path in sorted(HOOK_EXAMPLES.glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if d
    ]
    hooked = [d for d in docs if d["kind"] in KINDS and d["spec"].get("hooks")]
    assert hooked
    for raw in docs:
        assert raw["kind"] == parse_object(raw).KIND
        if raw["kind"] in KINDS:
            assert schema_errors(raw) == []
            assert cel_failures(raw) == []
