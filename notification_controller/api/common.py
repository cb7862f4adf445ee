"""Shared Kubernetes shapes: object metadata, references, conditions, secrets, enums."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

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
