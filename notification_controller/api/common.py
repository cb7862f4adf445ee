"""Shared Kubernetes shapes: object metadata, references, conditions, secrets, enums."""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """Base of spec models: camelCase aliases, unknown fields rejected (typos surface as errors)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SourceKind(StrEnum):
    """Kinds an Alert can watch and a Receiver can trigger (reference §1.2)."""

    BUCKET = "Bucket"
    GIT_REPOSITORY = "GitRepository"
    KUSTOMIZATION = "Kustomization"
    HELM_RELEASE = "HelmRelease"
    HELM_CHART = "HelmChart"
    HELM_REPOSITORY = "HelmRepository"
    IMAGE_REPOSITORY = "ImageRepository"
    IMAGE_POLICY = "ImagePolicy"
    IMAGE_UPDATE_AUTOMATION = "ImageUpdateAutomation"
    OCI_REPOSITORY = "OCIRepository"
    ARTIFACT_GENERATOR = "ArtifactGenerator"
    EXTERNAL_ARTIFACT = "ExternalArtifact"


class ObjectMeta(BaseModel):
    """The part of ``metadata`` the controller uses; everything else is kept (extra allowed)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=253)
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    deletion_timestamp: datetime | None = None
    creation_timestamp: datetime | None = None

    @field_validator("labels", "annotations", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("finalizers", mode="before")
    @classmethod
    def _none_is_empty_list(cls, value: Any) -> Any:
        return [] if value is None else value


class LocalObjectReference(Model):
    name: str = Field(min_length=1, max_length=253)


class CrossNamespaceObjectReference(Model):
    """An Alert event source (reference §1.2)."""

    api_version: str | None = None
    kind: SourceKind
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(None, min_length=1, max_length=253)
    match_labels: dict[str, str] | None = None


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(BaseModel):
    """``metav1.Condition``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    status: ConditionStatus
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field("", max_length=32768)
    last_transition_time: datetime
    observed_generation: int | None = Field(None, ge=0)


class ObjectStatus(BaseModel):
    """Status of Alert and Provider (Flux has none; we report readiness, reference §1.1)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int = -1
    last_handled_reconcile_at: str | None = None


# ---- values shared between objects (issue 17: 10,000 Alerts) ---------------------------------------------
# A status is a frozen model that nothing mutates (a reconcile builds a new one), and thousands of objects
# hold the same one: every Alert reconciled within the same second has the same conditions, timestamps
# included. Each validated copy costs ~1.5 KB (its models, their ``__dict__`` and fields-set, a datetime,
# the strings), so the objects share one instance per distinct status instead.

StatusT = TypeVar("StatusT", bound=BaseModel)
ModelT = TypeVar("ModelT", bound=BaseModel)

SHARED_STATUSES = 512
"""Distinct statuses remembered for sharing (first in, first out). Reconciles come in time order, so the
statuses written lately are the ones the next objects get; a status no longer remembered is only not
shared. Each entry is a status model and its JSON form: at most a few hundred KB in all."""

_JSON_KEY_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_shared_statuses: dict[tuple[type[BaseModel], bytes], BaseModel] = {}


def json_key(raw: Any) -> bytes | None:
    """``raw``'s JSON form when it holds JSON values only (str, int, bool, list, dict with str keys), so two
    inputs with the same key validate to the same model; None for anything else (datetimes and str
    subclasses from YAML, non-str keys, floats' NaN and infinities, which orjson writes as null: a key
    with a null is refused, as no status we share holds one)."""
    try:
        key = orjson.dumps(raw, option=_JSON_KEY_OPTIONS)
    except TypeError:
        return None
    return None if b"null" in key else key


_remembering = threading.Lock()  # a reload parses in a worker thread while the loop reconciles


def remember(cache: dict[Any, Any], key: Any, value: Any, size: int) -> None:
    """Add to a bounded first-in-first-out cache (a dict keeps insertion order)."""
    with _remembering:
        if len(cache) >= size:
            del cache[next(iter(cache))]
        cache[key] = value


def shared_status(
    model: type[StatusT], raw: Any, validate: Callable[[Any], StatusT] | None = None
) -> StatusT:
    """``raw`` validated as ``model`` (with ``validate``, default ``model.model_validate``), the same
    instance for equal inputs while it is remembered (``SHARED_STATUSES``). A model instance is returned
    as it is; validation errors are raised as usual and nothing is remembered."""
    check = validate if validate is not None else model.model_validate
    if not isinstance(raw, Mapping):
        return check(raw)
    key = json_key(raw)
    if key is None:
        return check(raw)
    found = _shared_statuses.get((model, key))
    if found is not None:
        return found  # type: ignore[return-value]
    status = share_fields_sets(check(raw))
    remember(_shared_statuses, (model, key), status, SHARED_STATUSES)
    return status


FIELDS_SETS = 4096
"""Distinct fields-sets shared (``share_fields_sets``): the combinations of field names the manifests use,
a few dozen; ``ObjectMeta`` keeps unknown keys, so a bound all the same."""
_fields_sets: dict[frozenset[str], set[str]] = {}
_model_fields: dict[type[BaseModel], tuple[str, ...]] = {}


def _holds_models(annotation: Any) -> bool:
    """Whether a field of this type may hold models (directly, in a list or tuple, or as dict values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_models(arg) for arg in get_args(annotation))


def _fields_with_models(cls: type[BaseModel]) -> tuple[str, ...]:
    names = _model_fields.get(cls)
    if names is None:
        names = tuple(name for name, info in cls.model_fields.items() if _holds_models(info.annotation))
        _model_fields[cls] = names
    return names


def share_fields_sets(model: ModelT) -> ModelT:
    """Give ``model`` and the models in its fields (lists included) the one fields-set object every model
    with the same explicitly-set field names uses, and return it.

    Pydantic keeps a ``set`` of the names of the fields given explicitly in every instance: 216 bytes, 728
    with five names (a Condition's), ~1.5 KB per Alert in its seven models. Nothing here reads it but
    pydantic's ``exclude_unset``, and pydantic never changes it in place on a frozen model (``model_copy``
    copies it first), so for frozen models (every model of ``api/``) sharing it changes nothing else.

    Measured against not sharing (``tracemalloc``, 10,000 validated Alerts with a Ready condition, 5
    alternating rounds, pydantic 2.14 / pydantic-core 2.50, issue 24): 47.2 MB without, 24.0 MB with it,
    2,320 bytes saved per Alert. It leans on pydantic internals: the set lives in the
    ``__pydantic_fields_set__`` slot, ``model_fields_set`` returns that object, ``object.__setattr__``
    replaces it on a frozen model, equality ignores it, and ``model_copy``/``deepcopy`` copy it before
    changing it. ``tests/unit/test_dependency_internals.py`` asserts each: a pydantic release that starts
    changing the set in place (the one change that would make sharing wrong) fails there."""
    stack: list[Any] = [model]
    while stack:
        item = stack.pop()
        _share_own(item)
        values = item.__dict__
        for name in _fields_with_models(type(item)):
            value = values[name]
            if isinstance(value, BaseModel):
                stack.append(value)
            elif isinstance(value, list | tuple):
                stack.extend(v for v in value if isinstance(v, BaseModel))
            elif isinstance(value, dict):
                stack.extend(v for v in value.values() if isinstance(v, BaseModel))
    return model


def with_fields(model: ModelT, **update: Any) -> ModelT:
    """``model.model_copy(update=update)`` whose own fields-set is shared (``share_fields_sets``): the copy
    adds the updated names to a copied set, which grows it (an Alert's 4 names + ``status``: 216 → 728
    bytes)."""
    return _share_own(model.model_copy(update=update))


def _share_own(model: ModelT) -> ModelT:
    names = model.__pydantic_fields_set__
    key = frozenset(names)
    shared = _fields_sets.get(key)
    if shared is None:
        if len(_fields_sets) >= FIELDS_SETS:
            return model
        shared = _fields_sets.setdefault(key, names)
    if shared is not names:
        object.__setattr__(model, "__pydantic_fields_set__", shared)
    return model


EMPTY_STATUS = ObjectStatus()
"""The status of an Alert or Provider nobody wrote yet: one instance for all of them (~450 bytes each)."""


def empty_status() -> ObjectStatus:
    return EMPTY_STATUS


class Secret(BaseModel):
    """A ``v1/Secret`` with its data decoded to bytes (``data`` base64, ``stringData`` plain)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: str = Field("v1", alias="apiVersion")
    kind: str = "Secret"
    metadata: ObjectMeta
    type: str = "Opaque"
    data: dict[str, bytes] = Field(default_factory=dict)

    KIND: ClassVar[str] = "Secret"

    @classmethod
    def from_manifest(cls, raw: dict[str, Any]) -> Secret:
        """Build from a manifest dict, merging ``data`` (base64) and ``stringData`` (wins, as in Kubernetes)."""
        decoded: dict[str, bytes] = {}
        for key, value in (raw.get("data") or {}).items():
            if not isinstance(value, str):
                raise ValueError(f"data.{key}: must be a base64 string")
            try:
                decoded[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"data.{key}: invalid base64") from exc
        for key, value in (raw.get("stringData") or {}).items():
            if not isinstance(value, str):
                raise ValueError(f"stringData.{key}: must be a string")
            decoded[key] = value.encode()
        return cls.model_validate(
            {
                "apiVersion": raw.get("apiVersion", "v1"),
                "kind": "Secret",
                "metadata": raw.get("metadata") or {},
                "type": raw.get("type") or "Opaque",
                "data": decoded,
            }
        )

    def get_str(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else value.decode("utf-8", errors="replace")

    def keys(self) -> list[str]:
        return sorted(self.data)


def condition(conditions: list[Condition], type_: str) -> Condition | None:
    for cond in conditions:
        if cond.type == type_:
            return cond
    return None
