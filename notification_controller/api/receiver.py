"""Receiver ``v1`` (reference §1.4)."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..lib.duration import DURATION_PATTERN, parse_duration
from .common import Condition, LocalObjectReference, Model, ObjectMeta, SourceKind
from .hooks import ReceiverHooks, hooks_field

DEFAULT_INTERVAL_SECONDS = 600.0
DEFAULT_OIDC_AUDIENCE = "notification-controller"


class ReceiverType(StrEnum):
    GENERIC = "generic"
    GENERIC_HMAC = "generic-hmac"
    GENERIC_OIDC = "generic-oidc"
    GITHUB = "github"
    GITLAB = "gitlab"
    BITBUCKET = "bitbucket"
    HARBOR = "harbor"
    DOCKERHUB = "dockerhub"
    QUAY = "quay"
    GCR = "gcr"
    NEXUS = "nexus"
    ACR = "acr"
    CDEVENTS = "cdevents"


class ReceiverResource(Model):
    api_version: str | None = None
    kind: SourceKind
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(None, min_length=1, max_length=253)
    match_labels: dict[str, str] | None = None
    filter: str | None = None


class OIDCVariable(Model):
    name: str
    expression: str


class OIDCValidation(Model):
    expression: str
    message: str


class OIDCProvider(Model):
    issuer_url: str = Field(alias="issuerURL", pattern=r"^https?://")
    audience: str | None = None
    variables: list[OIDCVariable] | None = None
    validations: list[OIDCValidation] = Field(min_length=1)


RECEIVER_SPEC_RULES: tuple[tuple[str, str], ...] = (
    (
        "generic-oidc receivers must define at least one oidcProvider",
        "self.type != 'generic-oidc' || (has(self.oidcProviders) && size(self.oidcProviders) > 0)",
    ),
    (
        "oidcProviders can only be set when type is generic-oidc",
        "self.type == 'generic-oidc' || !has(self.oidcProviders) || size(self.oidcProviders) == 0",
    ),
    (
        "secretRef cannot be set when type is generic-oidc",
        "self.type != 'generic-oidc' || !has(self.secretRef)",
    ),
    (
        "secretRef is required when type is not generic-oidc",
        "self.type == 'generic-oidc' || has(self.secretRef)",
    ),
)
"""(message, CEL rule) pairs of the CRD's ``x-kubernetes-validations`` on ``spec`` (reference §1.4)."""


class ReceiverSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"message": message, "rule": rule} for message, rule in RECEIVER_SPEC_RULES
            ]
        }
    )

    type: ReceiverType
    interval: str | None = Field("10m", pattern=DURATION_PATTERN)
    events: list[str] | None = None
    resources: list[ReceiverResource]
    resource_filter: str | None = None
    secret_ref: LocalObjectReference | None = None
    oidc_providers: list[OIDCProvider] | None = Field(
        None, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["issuerURL"]}
    )
    suspend: bool = False
    hooks: ReceiverHooks | None = hooks_field("Receiver")

    def interval_seconds(self) -> float:
        return parse_duration(self.interval) if self.interval else DEFAULT_INTERVAL_SECONDS

    def validation_errors(self) -> list[str]:
        """The CRD's ``x-kubernetes-validations`` rules (reference §1.4), enforced here as well."""
        errors: list[str] = []
        oidc = self.type == ReceiverType.GENERIC_OIDC
        has_providers = bool(self.oidc_providers)
        if oidc and not has_providers:
            errors.append("generic-oidc receivers must define at least one oidcProvider")
        if not oidc and has_providers:
            errors.append("oidcProviders can only be set when type is generic-oidc")
        if oidc and self.secret_ref is not None:
            errors.append("secretRef cannot be set when type is generic-oidc")
        if not oidc and self.secret_ref is None:
            errors.append("secretRef is required when type is not generic-oidc")
        return errors


class ReceiverStatus(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int = Field(-1, alias="observedGeneration")
    last_handled_reconcile_at: str | None = Field(None, alias="lastHandledReconcileAt")
    webhook_path: str | None = Field(None, alias="webhookPath")


class Receiver(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["notification.toolkit.fluxcd.io/v1"] = Field(
        "notification.toolkit.fluxcd.io/v1", alias="apiVersion"
    )
    kind: Literal["Receiver"] = "Receiver"
    metadata: ObjectMeta
    spec: ReceiverSpec
    status: ReceiverStatus = Field(default_factory=ReceiverStatus)

    KIND: ClassVar[str] = "Receiver"
