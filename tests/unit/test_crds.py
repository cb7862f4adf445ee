"""The CRDs in ``crds/`` are generated from the models, are structural, and accept what Flux accepts.

Reference §1 (CRDs): versions, enums, patterns, defaults, the ``x-kubernetes-validations`` rules and
their messages (§1.3, §1.4), printer columns. The checked-in YAML must equal the generator's output,
so a model change that is not followed by ``make crds`` fails here.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cel
import jsonschema
import pytest
import yaml
from pydantic import BaseModel, Field

from notification_controller.api import ALERT_VERSION, GROUP, PROVIDER_VERSION, RECEIVER_VERSION, crdgen
from notification_controller.api.alert import Alert, AlertSpec, EventSeverity
from notification_controller.api.common import Model, SourceKind
from notification_controller.api.messages import field_path
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import (
    BEYOND_FLUX,
    COMMIT_STATUS_EXPR_MESSAGE,
    Provider,
    ProviderSpec,
    ProviderType,
)
from notification_controller.api.receiver import Receiver, ReceiverSpec, ReceiverType
from notification_controller.api.silence import (
    MATCHER_NAME_PATTERN,
    MAX_MATCHER_VALUE,
    MAX_MATCHERS,
    SILENCE_GROUP,
    SILENCE_VERSION,
    MatchType,
    Silence,
    SilenceState,
)
from notification_controller.errors import ManifestError
from notification_controller.lib.duration import DURATION_PATTERN, TIMEOUT_PATTERN

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
EXAMPLES = REPO / "tests" / "data" / "flux-doc-examples"
KINDS = ("Alert", "Provider", "Receiver")
VERSIONS = {"Alert": ALERT_VERSION, "Provider": PROVIDER_VERSION, "Receiver": RECEIVER_VERSION}


@functools.cache
def _load_crd(kind: str) -> dict[str, Any]:
    """The checked-in CRD, parsed once (callers treat it as read-only)."""
    group = SILENCE_GROUP if kind == "Silence" else GROUP
    path = CRDS / f"{group}_{kind.lower()}s.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = _load_crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """Sub-schema at a dotted path; ``[]`` steps into array items (``spec.eventSources[].kind``)."""
    node = schema
    for part in path.split("."):
        items = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


# ------------------------------------------------------------------------------------------ drift


def test_checked_in_crds_equal_the_generator_output() -> None:
    """crds/ is generated (reference §1): any difference means a model changed without regenerating."""
    files = crdgen.generate()
    assert set(files) == {
        f"{GROUP}_alerts.yaml",
        f"{GROUP}_providers.yaml",
        f"{GROUP}_receivers.yaml",
        f"{SILENCE_GROUP}_silences.yaml",
    }
    stale = crdgen.drift(CRDS, files)
    assert stale == [], f"crds/ is out of date ({', '.join(stale)}): run `make crds` and commit the result"


def test_crds_directory_holds_only_crds_and_the_kustomization_lists_them_all() -> None:
    """`kubectl apply -f crds/` must apply CRDs only; `kubectl apply -k config/crd` the same set."""
    docs = [d for p in sorted(CRDS.iterdir()) for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]
    assert {d["kind"] for d in docs} == {"CustomResourceDefinition"}
    kustomization = yaml.safe_load(
        (REPO / "config" / "crd" / "kustomization.yaml").read_text(encoding="utf-8")
    )
    listed = {Path(r).name for r in kustomization["resources"]}
    assert listed == {p.name for p in CRDS.iterdir()}
    assert (REPO / "config" / "crd" / "bases").resolve() == CRDS.resolve()


def test_generator_cli_writes_then_check_detects_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "crds"
    assert crdgen.main([str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(crdgen.generate())
    assert crdgen.main(["--check", str(out)]) == 0

    alerts = out / f"{GROUP}_alerts.yaml"
    alerts.write_text(alerts.read_text(encoding="utf-8").replace("default: info", "default: error"))
    (out / "stale.yaml").write_text("---\n")
    assert crdgen.main(["--check", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{GROUP}_alerts.yaml: out of date, run `make crds`" in err
    assert "stale.yaml" in err
    assert f"{GROUP}_providers.yaml" not in err


# ------------------------------------------------------------------------------------------ CRD shape


@pytest.mark.parametrize("kind", KINDS)
def test_crd_names_scope_version_and_columns(kind: str) -> None:
    """Reference §1 / §1.1: group, names, categories, annotation, one served+storage version."""
    crd = _load_crd(kind)
    plural = kind.lower() + "s"
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"] == {
        "name": f"{plural}.{GROUP}",
        "annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"},
    }
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "categories": ["all", "fluxcd", "fluxcd-notifications"],
    }
    (version,) = spec["versions"]
    assert version["name"] == VERSIONS[kind]
    assert version["served"] is True
    assert version["storage"] is True
    # Flux has no status subresource on Alert/Provider; ours report Ready there, so all three have one.
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: (c["jsonPath"], c["type"]) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Age": (".metadata.creationTimestamp", "date"),
        "Ready": ('.status.conditions[?(@.type=="Ready")].status', "string"),
        "Status": ('.status.conditions[?(@.type=="Ready")].message', "string"),
    }
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}


def _walk(node: Any, path: str) -> Iterator[str]:
    """Every violation of the structural-schema rules below ``node`` (apiextensions.k8s.io/v1)."""
    if not isinstance(node, dict):
        yield f"{path}: not a schema object"
        return
    for key in ("$ref", "anyOf", "oneOf", "allOf", "not", "title", "$defs", "definitions", "const"):
        if key in node:
            yield f"{path}: {key} is not allowed"
    if "type" not in node and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        yield f"{path}: no type"
    if "nullable" in node and node["nullable"] is not True:
        yield f"{path}: nullable must be true when present"
    kind = node.get("type")
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: properties and additionalProperties are mutually exclusive"
    if isinstance(node.get("additionalProperties"), bool):
        yield f"{path}: additionalProperties must be a schema"
    if (
        kind == "object"
        and "properties" not in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and path != "$.metadata"
    ):
        yield f"{path}: object without properties would be pruned empty"
    if kind == "array" and not isinstance(node.get("items"), dict):
        yield f"{path}: array without an items schema"
    if kind != "array" and "items" in node:
        yield f"{path}: items on a non-array"
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            yield f"{path}: required {name!r} is not a property"
    if node.get("required", []) != sorted(node.get("required", [])):
        yield f"{path}: required is not sorted"
    if node.get("x-kubernetes-list-type") == "map":
        item = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in item.get("required", []) and "default" not in item.get("properties", {}).get(
                key, {}
            ):
                yield f"{path}: list-map key {key!r} must be required or defaulted"
    if "default" in node:
        errors = list(jsonschema.Draft4Validator(_strict(node)).iter_errors(node["default"]))
        if errors:
            yield f"{path}: default does not validate: {errors[0].message}"
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(kind: str) -> None:
    """Kubernetes rejects non-structural schemas; pydantic's $ref/anyOf/titles must all be gone."""
    problems = list(_walk(_schema(kind), "$"))
    assert problems == []


def test_structural_walker_catches_pydantic_shapes() -> None:
    """The walker is what guards the CRDs: show it flags what raw pydantic output contains."""
    raw = Receiver.model_json_schema(by_alias=True)
    problems = "\n".join(_walk({**raw, "type": "object"}, "$"))
    assert "$ref is not allowed" in problems
    assert "title is not allowed" in problems


def test_metav1_condition_schema_in_every_status() -> None:
    """Reference §1.4: status.conditions uses the upstream metav1.Condition schema."""
    for kind in KINDS:
        condition = _at(_schema(kind), "status.conditions[]")
        assert condition == crdgen.METAV1_CONDITION
        assert condition["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]
        assert _at(_schema(kind), "status.observedGeneration") == {"format": "int64", "type": "integer"}


# ------------------------------------------------------------------------------------------ values


def test_enums_equal_the_model_enums() -> None:
    """Reference §1.2-§1.4 enums; the CRD lists them in the models' (Flux's) order."""
    assert len(ProviderType) == 34 + len(BEYOND_FLUX)
    assert [t for t in ProviderType if t not in BEYOND_FLUX] == list(ProviderType)[:34]  # Flux's, first
    assert len(ReceiverType) == 13
    assert len(SourceKind) == 12
    assert _at(_schema("Provider"), "spec.type")["enum"] == [t.value for t in ProviderType]
    assert _at(_schema("Receiver"), "spec.type")["enum"] == [t.value for t in ReceiverType]
    assert _at(_schema("Alert"), "spec.eventSources[].kind")["enum"] == [k.value for k in SourceKind]
    assert _at(_schema("Receiver"), "spec.resources[].kind")["enum"] == [k.value for k in SourceKind]
    assert _at(_schema("Alert"), "spec.eventSeverity")["enum"] == [s.value for s in EventSeverity]
    assert _at(_schema("Alert"), "status.conditions[].status")["enum"] == ["True", "False", "Unknown"]


def test_patterns_lengths_and_required() -> None:
    """Reference §1.2-§1.4 constraints."""
    alert, provider, receiver = _schema("Alert"), _schema("Provider"), _schema("Receiver")
    assert _at(alert, "spec")["required"] == ["eventSources", "providerRef"]
    assert _at(alert, "spec.summary")["maxLength"] == 255
    source = _at(alert, "spec.eventSources[]")
    assert source["required"] == ["kind", "name"]
    assert (source["properties"]["name"]["minLength"], source["properties"]["name"]["maxLength"]) == (1, 253)
    assert _at(alert, "spec.eventMetadata") == {"additionalProperties": {"type": "string"}, "type": "object"}

    assert _at(provider, "spec")["required"] == ["type"]
    assert _at(provider, "spec.timeout")["pattern"] == TIMEOUT_PATTERN == r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$"
    assert _at(provider, "spec.interval")["pattern"] == DURATION_PATTERN
    assert _at(provider, "spec.proxy") == {
        "maxLength": 2048,
        "pattern": "^(http|https)://.*$",
        "type": "string",
    }
    for field in ("channel", "username", "address"):
        assert _at(provider, f"spec.{field}")["maxLength"] == 2048

    assert _at(receiver, "spec")["required"] == ["resources", "type"]
    oidc = _at(receiver, "spec.oidcProviders")
    assert oidc["x-kubernetes-list-type"] == "map"
    assert oidc["x-kubernetes-list-map-keys"] == ["issuerURL"]
    assert oidc["items"]["properties"]["issuerURL"]["pattern"] == "^https?://"
    assert oidc["items"]["properties"]["validations"]["minItems"] == 1
    assert oidc["items"]["required"] == ["issuerURL", "validations"]


def test_defaults_are_fluxs() -> None:
    """Reference §1.2, §1.4: eventSeverity info, interval 10m, status {observedGeneration: -1}; nothing else."""
    defaults: dict[str, Any] = {}
    for kind in KINDS:
        defaults.update({f"{kind}{path}": value for path, value in _defaults(_schema(kind), "")})
    assert defaults == {
        # inside a beyond-Flux field (issue 26): only present when the field is, so a Flux manifest gets none
        "Alert.spec.inhibitRules[].sourceMatchers[].matchType": "=",
        "Alert.spec.inhibitRules[].targetMatchers[].matchType": "=",
        "Alert.spec.eventSeverity": "info",
        "Alert.status": {"observedGeneration": -1},
        "Provider.status": {"observedGeneration": -1},
        "Receiver.spec.interval": "10m",
        "Receiver.status": {"observedGeneration": -1},
    }


def _defaults(node: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    if "default" in node:
        yield path, node["default"]
    for name, child in node.get("properties", {}).items():
        yield from _defaults(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _defaults(node["items"], f"{path}[]")


def _rules(kind: str) -> list[dict[str, str]]:
    rules: list[dict[str, str]] = _at(_schema(kind), "spec").get("x-kubernetes-validations", [])
    return rules


def test_cel_rules_are_fluxs() -> None:
    """Reference §1.3 and §1.4: the exact rules and messages; Alert has none."""
    assert _rules("Alert") == []
    assert _rules("Provider") == [
        {
            "message": COMMIT_STATUS_EXPR_MESSAGE,
            "rule": "self.type == 'github' || self.type == 'gitlab' || self.type == 'gitea' || "
            "self.type == 'bitbucketserver' || self.type == 'bitbucket' || self.type == 'azuredevops' || "
            "!has(self.commitStatusExpr)",
        }
    ]
    assert COMMIT_STATUS_EXPR_MESSAGE == (
        "spec.commitStatusExpr is only supported for the 'github', 'gitlab', 'gitea', 'bitbucketserver', "
        "'bitbucket', 'azuredevops' provider types"
    )
    assert _rules("Receiver") == [
        {
            "message": "generic-oidc receivers must define at least one oidcProvider",
            "rule": "self.type != 'generic-oidc' || (has(self.oidcProviders) && size(self.oidcProviders) > 0)",
        },
        {
            "message": "oidcProviders can only be set when type is generic-oidc",
            "rule": "self.type == 'generic-oidc' || !has(self.oidcProviders) || size(self.oidcProviders) == 0",
        },
        {
            "message": "secretRef cannot be set when type is generic-oidc",
            "rule": "self.type != 'generic-oidc' || !has(self.secretRef)",
        },
        {
            "message": "secretRef is required when type is not generic-oidc",
            "rule": "self.type == 'generic-oidc' || has(self.secretRef)",
        },
    ]


def _cel_failures(kind: str, spec: dict[str, Any]) -> list[str]:
    """Messages of the CRD rules that reject ``spec``, evaluated by a real CEL engine as the API server would."""
    return [r["message"] for r in _rules(kind) if cel.evaluate(r["rule"], {"self": spec}) is not True]


_OIDC_PROVIDER = {
    "issuerURL": "https://issuer.example",
    "validations": [{"expression": "true", "message": "m"}],
}


def test_cel_rules_agree_with_model_validation_on_every_combination() -> None:
    """Old API servers ignore x-kubernetes-validations, so the models enforce the same rules: prove they agree."""
    for provider_type, with_expr in itertools.product(ProviderType, (False, True)):
        spec: dict[str, Any] = {"type": provider_type.value}
        if with_expr:
            spec["commitStatusExpr"] = "event.metadata.app"
        assert _cel_failures("Provider", spec) == ProviderSpec.model_validate(spec).validation_errors(), spec
    for receiver_type, secret, providers in itertools.product(
        ReceiverType, (False, True), (None, [], [_OIDC_PROVIDER])
    ):
        spec = {"type": receiver_type.value, "resources": [{"kind": "GitRepository", "name": "app"}]}
        if secret:
            spec["secretRef"] = {"name": "token"}
        if providers is not None:
            spec["oidcProviders"] = providers
        assert _cel_failures("Receiver", spec) == ReceiverSpec.model_validate(spec).validation_errors(), spec


# ------------------------------------------------------------------------------------------ examples


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as JSON Schema draft 4 (OpenAPI 3.0's base), rejecting unknown fields.

    The API server would prune an unknown field silently; for a Flux example that would be data loss,
    so here it is an error. ``x-kubernetes-*`` keywords are ignored by jsonschema.
    """
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


def _schema_errors(raw: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft4Validator(_strict(_schema(raw["kind"])))
    return [f"{field_path(list(e.absolute_path))}: {e.message}" for e in validator.iter_errors(raw)]


def _documents() -> list[tuple[str, int, dict[str, Any]]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if doc:
                docs.append((path.name, index, doc))
    return docs


_OBJECTS = [d for d in _documents() if d[2]["kind"] in KINDS]


def test_examples_are_present() -> None:
    """The copy in tests/data is complete (a lost document would silently shrink the test below)."""
    counts = {kind: sum(1 for _, _, d in _OBJECTS if d["kind"] == kind) for kind in KINDS}
    assert counts == {"Alert": 6, "Provider": 41, "Receiver": 19}


@pytest.mark.parametrize(
    ("source", "index", "raw"), _OBJECTS, ids=[f"{s}[{i}]-{d['metadata']['name']}" for s, i, d in _OBJECTS]
)
def test_flux_doc_example_validates_against_models_and_crd(
    source: str, index: int, raw: dict[str, Any]
) -> None:
    """Every Alert/Provider/Receiver of Flux's docs applies to our CRD and parses with our models."""
    obj = parse_object(raw, source=source, index=index)
    assert raw["kind"] == obj.KIND
    assert _schema_errors(raw) == []
    assert _cel_failures(raw["kind"], raw["spec"]) == []
    # The CRD's defaults, applied as the API server would, do not change what the model reads.
    defaulted = _apply_defaults(_schema(raw["kind"]), copy.deepcopy(raw))
    assert _schema_errors(defaulted) == []
    assert parse_object(defaulted, source=source, index=index) == obj


def test_flux_doc_secrets_parse() -> None:
    secrets = [d for d in _documents() if d[2]["kind"] == "Secret"]
    assert secrets
    for source, index, raw in secrets:
        assert parse_object(raw, source=source, index=index).KIND == "Secret"


def _apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Kubernetes structural defaulting: fill absent properties that have a ``default``, recursively."""
    if isinstance(value, dict) and "properties" in schema:
        for name, child in schema["properties"].items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                value[name] = _apply_defaults(child, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(schema["items"], item) for item in value]
    return value


# ------------------------------------------------------------------------------------------ rejections


def _provider(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Provider",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": spec,
    }


def _receiver(**spec: Any) -> dict[str, Any]:
    spec.setdefault("resources", [{"kind": "GitRepository", "name": "app"}])
    return {"apiVersion": f"{GROUP}/v1", "kind": "Receiver", "metadata": {"name": "r"}, "spec": spec}


def _alert(**spec: Any) -> dict[str, Any]:
    spec.setdefault("providerRef", {"name": "p"})
    spec.setdefault("eventSources", [{"kind": "GitRepository", "name": "*"}])
    return {"apiVersion": f"{GROUP}/v1beta3", "kind": "Alert", "metadata": {"name": "a"}, "spec": spec}


# (manifest, field the model names, text of the model's message, text of the OpenAPI error or None)
_SCHEMA_INVALID = [
    # A typo: the API server would prune it (our strict schema flags it), the model rejects it by name.
    pytest.param(
        _provider(type="slack", chanel="general"),
        "spec.chanel",
        "unknown field",
        "Additional properties are not allowed ('chanel' was unexpected)",
        id="unknown-field",
    ),
    pytest.param(_provider(type="slackk"), "spec.type", "'slack'", "is not one of", id="provider-bad-enum"),
    pytest.param(
        _provider(type="slack", timeout="1h"),
        "spec.timeout",
        TIMEOUT_PATTERN,
        "does not match",
        id="timeout-1h",
    ),
    pytest.param(
        _provider(type="slack", proxy="socks5://p:1080"),
        "spec.proxy",
        "pattern",
        "does not match",
        id="proxy",
    ),
    pytest.param(_receiver(type="gitea"), "spec.type", "'generic'", "is not one of", id="receiver-bad-enum"),
    pytest.param(
        _receiver(type="generic", interval="10 minutes", secretRef={"name": "t"}),
        "spec.interval",
        "pattern",
        "does not match",
        id="receiver-interval",
    ),
    pytest.param(
        _alert(eventSeverity="warning"), "spec.eventSeverity", "'info'", "is not one of", id="severity"
    ),
    pytest.param(_alert(summary="x" * 256), "spec.summary", "255", "is too long", id="summary-too-long"),
    pytest.param(
        _alert(eventSources=[{"kind": "Deployment", "name": "x"}]),
        "spec.eventSources[0].kind",
        "'Bucket'",
        "is not one of",
        id="source-kind",
    ),
    pytest.param(
        _alert(eventSources=[{"kind": "GitRepository", "name": ""}]),
        "spec.eventSources[0].name",
        "at least 1",
        "should be non-empty",
        id="empty-source-name",
    ),
    pytest.param(
        {**_alert(), "spec": {"eventSources": [{"kind": "Bucket", "name": "b"}]}},
        "spec.providerRef",
        "required",
        "'providerRef' is a required property",
        id="missing-providerRef",
    ),
]


@pytest.mark.parametrize(("raw", "field", "model_text", "schema_text"), _SCHEMA_INVALID)
def test_invalid_manifest_rejected_by_models_and_schema(
    raw: dict[str, Any], field: str, model_text: str, schema_text: str
) -> None:
    with pytest.raises(ManifestError) as info:
        parse_object(raw)
    assert info.value.field == field
    assert model_text in str(info.value)
    errors = _schema_errors(raw)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{field}:") or errors[0].startswith(f"{field.rsplit('.', 1)[0]}:")
    assert schema_text in errors[0]


_CEL_INVALID = [
    pytest.param(
        _provider(type="slack", commitStatusExpr="'ci'"),
        COMMIT_STATUS_EXPR_MESSAGE,
        id="commitStatusExpr-on-slack",
    ),
    pytest.param(
        _receiver(type="generic-oidc"),
        "generic-oidc receivers must define at least one oidcProvider",
        id="oidc-without-providers",
    ),
    pytest.param(
        _receiver(type="generic-oidc", oidcProviders=[]),
        "generic-oidc receivers must define at least one oidcProvider",
        id="oidc-with-empty-providers",
    ),
    pytest.param(
        _receiver(type="github"),
        "secretRef is required when type is not generic-oidc",
        id="github-without-secretRef",
    ),
    pytest.param(
        _receiver(type="generic-oidc", oidcProviders=[_OIDC_PROVIDER], secretRef={"name": "t"}),
        "secretRef cannot be set when type is generic-oidc",
        id="oidc-with-secretRef",
    ),
    pytest.param(
        _receiver(type="github", secretRef={"name": "t"}, oidcProviders=[_OIDC_PROVIDER]),
        "oidcProviders can only be set when type is generic-oidc",
        id="providers-on-github",
    ),
]


@pytest.mark.parametrize(("raw", "message"), _CEL_INVALID)
def test_invalid_manifest_rejected_with_fluxs_message(raw: dict[str, Any], message: str) -> None:
    """Reference §1.3/§1.4: the CRD's CEL rule and the model reject it with the same, exact Flux message."""
    assert _schema_errors(raw) == []  # only the CEL rules catch these
    assert _cel_failures(raw["kind"], raw["spec"]) == [message]
    with pytest.raises(ManifestError) as info:
        parse_object(raw)
    assert info.value.field == "spec"
    assert str(info.value) == f"spec: {message}"


# ------------------------------------------------------------------------------------------ genericity


class _Hook(Model):
    name: str = Field(min_length=1, description="Name of the hook.")
    timeout: str | None = Field(None, pattern=TIMEOUT_PATTERN)
    retries: int = Field(3, ge=0)
    weight: float | None = Field(None, gt=0)
    headers: dict[str, str] | None = None
    port: int | str | None = None
    labels: set[str] | None = None
    extra: dict[str, Any] | None = None


class _HookedAlertSpec(AlertSpec):
    hooks: list[_Hook] | None = Field(None, description="Hooks run for every event.")  # type: ignore[assignment]


class _HookedAlert(Alert):
    spec: _HookedAlertSpec


def test_generator_is_generic_over_new_fields() -> None:
    """A field added to a model (the planned ``spec.hooks``) reaches the CRD without touching the generator."""
    schema = crdgen.openapi_schema(_HookedAlert)
    assert list(_walk(schema, "$")) == []
    hooks = _at(schema, "spec.hooks")
    assert hooks["type"] == "array"
    assert hooks["description"] == "Hooks run for every event."
    hook = hooks["items"]
    assert hook["required"] == ["name"]
    props = hook["properties"]
    assert props["name"] == {"description": "Name of the hook.", "minLength": 1, "type": "string"}
    assert props["timeout"] == {"pattern": TIMEOUT_PATTERN, "type": "string"}
    assert props["retries"] == {"default": 3, "format": "int64", "minimum": 0, "type": "integer"}
    assert props["weight"] == {"exclusiveMinimum": True, "minimum": 0, "type": "number"}
    assert props["headers"] == {"additionalProperties": {"type": "string"}, "type": "object"}
    assert props["port"] == {"x-kubernetes-int-or-string": True}
    assert props["labels"] == {"items": {"type": "string"}, "type": "array", "x-kubernetes-list-type": "set"}
    assert props["extra"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    # The existing fields are untouched by the addition.
    base = crdgen.openapi_schema(Alert)
    assert {k: v for k, v in _at(schema, "spec")["properties"].items() if k != "hooks"} == {
        k: v for k, v in _at(base, "spec")["properties"].items() if k != "hooks"
    }


class _Unstructural(Model):
    choice: list[str] | dict[str, str]


class _BadSpec(AlertSpec):
    bad: _Unstructural | None = None


class _BadAlert(Alert):
    spec: _BadSpec


def test_generator_refuses_unions_kubernetes_cannot_express() -> None:
    with pytest.raises(
        crdgen.CRDGenerationError, match=r"spec\.bad\.choice: a union of \['array', 'object'\]"
    ):
        crdgen.openapi_schema(_BadAlert)


def test_generator_only_documents_object_models() -> None:
    class _NotAnObject(BaseModel):
        spec: int

    with pytest.raises(crdgen.CRDGenerationError, match="apiVersion/kind defaults are required"):
        crdgen.crd(_NotAnObject)


def test_kinds_cover_all_object_models() -> None:
    assert (Alert, Provider, Receiver, Silence) == crdgen.KINDS


# ------------------------------------------------------------------------------------------ Silence


def test_silence_crd_is_ours_not_fluxs() -> None:
    """Issue 26: our group and version, our own categories (``kubectl get fluxcd`` must not list it), and
    the columns an operator reads: state, when it ends, how much it held."""
    crd = _load_crd("Silence")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"silences.{SILENCE_GROUP}"
    assert spec["group"] == SILENCE_GROUP == "notification-controller.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "Silence",
        "listKind": "SilenceList",
        "plural": "silences",
        "singular": "silence",
        "categories": ["all", "notification-controller"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (SILENCE_VERSION, True, True)
    assert version["subresources"] == {"status": {}}
    columns = [(c["name"], c["jsonPath"], c["type"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("State", ".status.state", "string"),
        ("Ends", ".status.endsAt", "string"),
        ("Held", ".status.held", "integer"),
        ("Age", ".metadata.creationTimestamp", "date"),
    ]
    schema = _schema("Silence")
    assert list(_walk(schema, "$")) == []
    assert _at(schema, "status.conditions[]") == crdgen.METAV1_CONDITION
    assert _at(schema, "status.state")["enum"] == [s.value for s in SilenceState]
    assert _at(schema, "spec.matchers[].matchType")["enum"] == [m.value for m in MatchType]


def test_silence_bounds_are_in_the_schema() -> None:
    """What a tenant writes is bounded by the API server too (the models check the same, for old servers)."""
    schema = _schema("Silence")
    assert _at(schema, "spec")["required"] == ["matchers"]
    matchers = _at(schema, "spec.matchers")
    assert (matchers["minItems"], matchers["maxItems"]) == (1, MAX_MATCHERS)
    assert _at(schema, "spec.matchers[]")["required"] == ["name"]
    assert _at(schema, "spec.matchers[].name")["pattern"] == MATCHER_NAME_PATTERN
    assert _at(schema, "spec.matchers[].value")["maxLength"] == MAX_MATCHER_VALUE
    assert _at(schema, "spec.createdBy")["maxLength"] == 256
    assert _at(schema, "spec.comment")["maxLength"] == 1024
    assert _at(schema, "spec.duration")["pattern"] == DURATION_PATTERN
    assert _at(schema, "spec.summary")["default"] is True


def _silence(**spec: Any) -> dict[str, Any]:
    spec.setdefault("matchers", [{"name": "kind", "value": "Kustomization"}])
    spec.setdefault("duration", "2h")
    return {
        "apiVersion": f"{SILENCE_GROUP}/{SILENCE_VERSION}",
        "kind": "Silence",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": spec,
    }


def test_a_valid_silence_passes_schema_and_model() -> None:
    raw = _silence(
        matchers=[
            {"name": "kind", "value": "Kustomization"},
            {"name": "name", "value": "apps-.*", "matchType": "=~"},
            {"name": "metadata.env", "value": "prod", "matchType": "!="},
        ],
        comment="maintenance",
        createdBy="alice",
    )
    assert _schema_errors(raw) == []
    assert parse_object(raw).KIND == "Silence"


_SILENCE_INVALID = [
    pytest.param(_silence(matchers=[]), "spec.matchers", "non-empty", id="no-matchers"),
    pytest.param(
        _silence(matchers=[{"name": "kind", "value": "K"}] * (MAX_MATCHERS + 1)),
        "spec.matchers",
        "is too long",
        id="too-many-matchers",
    ),
    pytest.param(
        _silence(matchers=[{"name": "color", "value": "red"}]),
        "spec.matchers[0].name",
        "does not match",
        id="unknown-matcher-name",
    ),
    pytest.param(
        _silence(matchers=[{"name": "name", "value": "x" * (MAX_MATCHER_VALUE + 1)}]),
        "spec.matchers[0].value",
        "is too long",
        id="value-too-long",
    ),
    pytest.param(
        _silence(matchers=[{"name": "name", "value": "x", "matchType": "=="}]),
        "spec.matchers[0].matchType",
        "is not one of",
        id="bad-match-type",
    ),
    pytest.param(_silence(duration="2 hours"), "spec.duration", "does not match", id="bad-duration"),
]
"""The model refuses each of these too; ``spec.comment``/``spec.createdBy`` over their bounds are the
reconciler's to report (``controllers/silence.py``, tests/unit/controllers/test_silence.py)."""


@pytest.mark.parametrize(("raw", "field", "schema_text"), _SILENCE_INVALID)
def test_an_invalid_silence_is_rejected_by_schema_and_model(
    raw: dict[str, Any], field: str, schema_text: str
) -> None:
    """The API server refuses it (schema) and local mode / ``check`` refuse it too (the model), naming the
    same field."""
    errors = _schema_errors(raw)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{field}:") and schema_text in errors[0], errors
    with pytest.raises(ManifestError) as info:
        parse_object(raw)
    assert field.startswith(str(info.value.field)) or str(info.value.field).startswith(field), (
        info.value.field,
        str(info.value),
    )
