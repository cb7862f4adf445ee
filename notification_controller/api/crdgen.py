"""Generate the CustomResourceDefinitions (Flux's three, and our ``Silence``) from the pydantic models.

Why: the models in ``api/`` are the one description of what an Alert, Provider or Receiver may contain.
Generating the CRDs from them means the API server and the controller cannot disagree about a field,
an enum value, a pattern or a default, and a field added to a model (``spec.hooks``...) reaches the CRD
by running ``make crds``; ``tests/unit/test_crds.py`` fails when the checked-in ``crds/`` drift.

Kubernetes accepts only *structural* OpenAPI v3 schemas (reference §1), so pydantic's JSON Schema is
rewritten rather than copied: ``$ref`` is inlined, the ``anyOf: [X, null]`` of ``Optional`` collapses to
``X`` (an absent field and ``null`` mean the same thing to the API server, which prunes nulls),
``title`` and class docstrings are dropped (field ``description=`` is kept), ``additionalProperties:
false`` is dropped (Kubernetes forbids it beside ``properties``; unknown fields are pruned instead),
integers get ``format: int64``, and ``required`` lists are sorted as controller-gen sorts them.

Defaults follow Go's ``omitempty`` convention: a zero value (``None``, ``False``, ``0``, ``""``, empty
collections) is what an absent field already means, so it is not written as a schema default; any other
default is (``eventSeverity: info``, Receiver ``interval: 10m``). A field whose default is a model
(``status``) gets that model's non-zero fields as an object default (``{observedGeneration: -1}``) and
its properties do not repeat them, as in Flux's CRDs.

Model metadata travels through pydantic's ``json_schema_extra``: the ``x-kubernetes-validations`` CEL
rules on ``ProviderSpec``/``ReceiverSpec`` and the ``x-kubernetes-list-*`` markers on ``oidcProviders``.
``metav1.Condition`` is a Kubernetes type, so its upstream schema replaces the lenient model's.

Run ``python -m notification_controller.api.crdgen crds/`` to write the files, ``--check`` to compare.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from ..errors import ControllerError
from .alert import Alert
from .common import Condition
from .provider import Provider
from .receiver import Receiver
from .silence import Silence

KINDS: tuple[type[BaseModel], ...] = (Alert, Provider, Receiver, Silence)
"""Top-level object models; each becomes one CRD with one served+storage version."""

CATEGORIES = ["all", "fluxcd", "fluxcd-notifications"]
CRD_ANNOTATIONS = {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}
PRINTER_COLUMNS: list[dict[str, str]] = [
    {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
    {"jsonPath": '.status.conditions[?(@.type=="Ready")].status', "name": "Ready", "type": "string"},
    {"jsonPath": '.status.conditions[?(@.type=="Ready")].message', "name": "Status", "type": "string"},
]
"""Flux's Receiver columns; Alert and Provider get the same ones because ours report Ready in status."""

SILENCE_CATEGORIES = ["all", "notification-controller"]
"""A Silence is ours, not Flux's (issue 26): ``kubectl get fluxcd`` does not list it, ``kubectl get
notification-controller`` does."""
SILENCE_PRINTER_COLUMNS: list[dict[str, str]] = [
    {"jsonPath": ".status.state", "name": "State", "type": "string"},
    # a string, not a date: kubectl prints a date in the future as "<invalid>"
    {"jsonPath": ".status.endsAt", "name": "Ends", "type": "string"},
    {"jsonPath": ".status.held", "name": "Held", "type": "integer"},
    {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
]
_NAMES: dict[type[BaseModel], tuple[list[str], list[dict[str, str]]]] = {
    Silence: (SILENCE_CATEGORIES, SILENCE_PRINTER_COLUMNS),
}
"""Categories and printer columns of the kinds that are not Flux's (default: ``CATEGORIES``, ``PRINTER_COLUMNS``)."""

_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object.\n"
    "Servers should convert recognized schemas to the latest internal value, and\n"
    "may reject unrecognized values.\n"
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents.\n"
    "Servers may infer this from the endpoint the client submits requests to.\n"
    "Cannot be updated.\n"
    "In CamelCase.\n"
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)

METAV1_CONDITION: dict[str, Any] = {
    "properties": {
        "lastTransitionTime": {"format": "date-time", "type": "string"},
        "message": {"maxLength": 32768, "type": "string"},
        "observedGeneration": {"format": "int64", "minimum": 0, "type": "integer"},
        "reason": {
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            "type": "string",
        },
        "status": {"enum": ["True", "False", "Unknown"], "type": "string"},
        "type": {
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            "type": "string",
        },
    },
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "type": "object",
}
"""The upstream ``metav1.Condition`` schema (reference §1.4), used wherever a model holds a ``Condition``."""

_WELL_KNOWN: dict[type[BaseModel], dict[str, Any]] = {Condition: METAV1_CONDITION}

# Keys of pydantic's output that have no place in a structural CRD schema.
_DROPPED_KEYS = frozenset({"title", "$defs", "examples"})
_NULL = {"type": "null"}


class CRDGenerationError(ControllerError):
    """A model uses a construct that has no structural-schema equivalent (fix the model or the generator)."""


# --------------------------------------------------------------------------------------------- defaults


def _is_zero(value: Any) -> bool:
    return value is None or value is False or (not isinstance(value, bool) and value in (0, "", [], {}))


def _prune_zero(value: Any) -> Any:
    """Drop zero-valued keys recursively, as Go's ``omitempty`` would when marshalling the default."""
    if isinstance(value, dict):
        pruned = {k: _prune_zero(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if not _is_zero(v)}
    return value


def _schema_default(value: Any) -> Any:
    """The CRD default for a Python default, or ``NoDefault`` when the field should have none."""
    if isinstance(value, BaseModel):
        value = _prune_zero(value.model_dump(by_alias=True, mode="json", exclude_none=True))
    elif isinstance(value, Enum):
        value = value.value
    return NoDefault if _is_zero(value) else value


class _CRDJsonSchema(GenerateJsonSchema):
    """pydantic's generator with Kubernetes' idea of a default (see the module docstring)."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        if "default_factory" in schema:
            if schema.get("default_factory_takes_data"):
                return NoDefault
            factory: Any = schema["default_factory"]
            return _schema_default(factory())
        return _schema_default(schema.get("default", NoDefault))


# --------------------------------------------------------------------------------------------- schemas


def _resolve(ref: str, defs: Mapping[str, Any]) -> dict[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise CRDGenerationError(f"unresolvable $ref {ref!r}")
    target = copy.deepcopy(defs[ref[len(prefix) :]])
    # A definition's description is its class docstring: written for maintainers, not for kubectl explain.
    target.pop("description", None)
    return dict(target)


def _merge_union(node: dict[str, Any], branches: Sequence[Any], path: str) -> dict[str, Any]:
    non_null = [b for b in branches if b != _NULL]
    if len(non_null) == 1:
        return {**non_null[0], **node}
    types = {b.get("type") for b in non_null}
    if types == {"integer", "string"} and len(non_null) == 2:
        return {**node, "x-kubernetes-int-or-string": True}
    raise CRDGenerationError(f"{path}: a union of {sorted(map(str, types))} has no structural schema")


def _structural(node: Any, defs: Mapping[str, Any], path: str) -> dict[str, Any]:
    """Rewrite one pydantic JSON Schema node (and its children) into a structural OpenAPI v3 node."""
    if not isinstance(node, dict):
        raise CRDGenerationError(f"{path}: schema node is not an object")
    out = dict(node)
    for _ in range(8):  # $ref and anyOf/allOf can nest (Optional[ref], ref with siblings); unwrap all
        if "$ref" in out:
            ref = out.pop("$ref")
            out = {**_resolve(ref, defs), **out}
        elif "anyOf" in out:
            out = _merge_union({k: v for k, v in out.items() if k != "anyOf"}, out["anyOf"], path)
        elif "allOf" in out and len(out["allOf"]) == 1:
            out = {**out["allOf"][0], **{k: v for k, v in out.items() if k != "allOf"}}
        else:
            break
    for key in ("anyOf", "allOf", "oneOf", "not", "$ref"):
        if key in out:
            raise CRDGenerationError(f"{path}: {key} has no structural schema")
    for key in _DROPPED_KEYS:
        out.pop(key, None)
    if out.get("default", NoDefault) is None:
        del out["default"]

    if "const" in out:
        out["enum"] = [out.pop("const")]
    if "enum" in out and "type" not in out:
        kinds = {type(v) for v in out["enum"]}
        if kinds == {str}:
            out["type"] = "string"
    if "exclusiveMinimum" in out and not isinstance(out["exclusiveMinimum"], bool):
        out["minimum"], out["exclusiveMinimum"] = out["exclusiveMinimum"], True
    if "exclusiveMaximum" in out and not isinstance(out["exclusiveMaximum"], bool):
        out["maximum"], out["exclusiveMaximum"] = out["exclusiveMaximum"], True
    if out.pop("uniqueItems", False):
        out.setdefault("x-kubernetes-list-type", "set")
    if out.get("type") == "integer":
        out.setdefault("format", "int64")

    if "properties" in out:
        out["type"] = "object"
        default = out.get("default")
        covered: dict[str, Any] = default if isinstance(default, dict) else {}
        props: dict[str, Any] = {}
        for name, child in out["properties"].items():
            converted = _structural(child, defs, f"{path}.{name}")
            if name in covered:
                converted.pop("default", None)
            props[name] = converted
        out["properties"] = props
        additional = out.pop("additionalProperties", None)
        if isinstance(additional, dict) and additional:
            raise CRDGenerationError(f"{path}: properties and additionalProperties are mutually exclusive")
    elif "additionalProperties" in out:
        additional = out["additionalProperties"]
        if additional is True or additional == {}:
            del out["additionalProperties"]
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif additional is False:
            del out["additionalProperties"]
        else:
            out["additionalProperties"] = _structural(additional, defs, f"{path}.*")
    if out.get("type") == "array":
        if "items" not in out:
            raise CRDGenerationError(f"{path}: array without items")
        out["items"] = _structural(out["items"], defs, f"{path}[]")
    if "required" in out:
        out["required"] = sorted(out["required"])
        if not out["required"]:
            del out["required"]
    if (
        "type" not in out
        and not out.get("x-kubernetes-int-or-string")
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        if out.keys() <= {"description", "default"}:  # ``Any``: keep whatever the user wrote
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            raise CRDGenerationError(f"{path}: no type in {sorted(out)}")
    return out


def _kind_and_version(model: type[BaseModel]) -> tuple[str, str, str]:
    """(group, version, kind) from the model's ``apiVersion``/``kind`` field defaults."""
    fields = model.model_fields
    api_version = fields["api_version"].default if "api_version" in fields else None
    kind = fields["kind"].default if "kind" in fields else None
    if not isinstance(api_version, str) or not isinstance(kind, str) or api_version.count("/") != 1:
        raise CRDGenerationError(f"{model.__name__}: apiVersion/kind defaults are required")
    group, version = api_version.split("/")
    return group, version, kind


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one top-level object model."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_CRDJsonSchema)
    defs: dict[str, Any] = dict(raw.get("$defs", {}))
    for cls, schema in _WELL_KNOWN.items():
        if cls.__name__ in defs:
            defs[cls.__name__] = copy.deepcopy(schema)
    _, _, kind = _kind_and_version(model)
    properties: dict[str, Any] = {}
    for name, prop in raw["properties"].items():
        if name == "apiVersion":
            properties[name] = {"description": _API_VERSION_DESCRIPTION, "type": "string"}
        elif name == "kind":
            properties[name] = {"description": _KIND_DESCRIPTION, "type": "string"}
        elif name == "metadata":
            properties[name] = {"type": "object"}
        else:
            properties[name] = _structural(prop, defs, name)
    # No top-level ``required``: like Flux's CRDs (controller-gen ``omitempty`` on spec/status).
    return {
        "description": f"{kind} is the Schema for the {_plural(kind)} API.",
        "properties": properties,
        "type": "object",
    }


def _plural(kind: str) -> str:
    return kind.lower() + "s"


def crd(model: type[BaseModel]) -> dict[str, Any]:
    """The CustomResourceDefinition (``apiextensions.k8s.io/v1``) of one top-level object model."""
    group, version, kind = _kind_and_version(model)
    plural = _plural(kind)
    categories, columns = _NAMES.get(model, (CATEGORIES, PRINTER_COLUMNS))
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"annotations": dict(CRD_ANNOTATIONS), "name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "categories": list(categories),
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "additionalPrinterColumns": copy.deepcopy(columns),
                    "name": version,
                    "schema": {"openAPIV3Schema": openapi_schema(model)},
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                }
            ],
        },
    }


# --------------------------------------------------------------------------------------------- output


class _Dumper(yaml.SafeDumper):
    """Block YAML, no anchors/aliases, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(document: Mapping[str, Any]) -> str:
    body = yaml.dump(dict(document), Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=4096)
    return "---\n" + body


def crd_filename(model: type[BaseModel]) -> str:
    group, _, kind = _kind_and_version(model)
    return f"{group}_{_plural(kind)}.yaml"


def generate(models: Sequence[type[BaseModel]] = KINDS) -> dict[str, str]:
    """File name → content for every CRD (only CRDs: ``kubectl apply -f crds/`` must work; the
    kustomization that lists them is ``config/crd/kustomization.yaml``, one level up, as Flux does)."""
    files = {crd_filename(model): to_yaml(crd(model)) for model in models}
    return files


def drift(directory: Path, files: Mapping[str, str]) -> list[str]:
    """Names of files in ``directory`` that differ from ``files`` (missing, changed, or stale CRDs)."""
    stale = {p.name for p in directory.glob("*.yaml")} - set(files) if directory.is_dir() else set()
    changed = {
        name
        for name, text in files.items()
        if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text
    }
    return sorted(changed | stale)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m notification_controller.api.crdgen", description=__doc__)
    parser.add_argument("directories", nargs="+", type=Path, help="where to write the CRDs (e.g. crds/)")
    parser.add_argument("--check", action="store_true", help="only report drift; exit 1 if any")
    args = parser.parse_args(argv)
    files = generate()
    status = 0
    for directory in args.directories:
        if args.check:
            for name in drift(directory, files):
                print(f"{directory / name}: out of date, run `make crds`", file=sys.stderr)
                status = 1
            continue
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
