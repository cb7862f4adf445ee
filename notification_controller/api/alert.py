"""Alert ``v1beta3`` (reference §1.2)."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import CrossNamespaceObjectReference, LocalObjectReference, Model, ObjectMeta, ObjectStatus
from .hooks import AlertHooks, hooks_field


class EventSeverity(StrEnum):
    INFO = "info"
    ERROR = "error"


class AlertSpec(Model):
    provider_ref: LocalObjectReference
    event_severity: EventSeverity = EventSeverity.INFO
    event_sources: list[CrossNamespaceObjectReference]
    inclusion_list: list[str] | None = None
    exclusion_list: list[str] | None = None
    event_metadata: dict[str, str] | None = None
    summary: str | None = Field(None, max_length=255)
    suspend: bool = False
    hooks: AlertHooks | None = hooks_field("Alert")


class Alert(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["notification.toolkit.fluxcd.io/v1beta3"] = Field(
        "notification.toolkit.fluxcd.io/v1beta3", alias="apiVersion"
    )
    kind: Literal["Alert"] = "Alert"
    metadata: ObjectMeta
    spec: AlertSpec
    status: ObjectStatus = Field(default_factory=ObjectStatus)

    KIND: ClassVar[str] = "Alert"
