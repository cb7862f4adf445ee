"""Alert ``v1beta3`` (reference §1.2).

Beyond Flux: ``spec.inclusionList`` and ``spec.exclusionList`` are bounded (``MAX_FILTER_EXPRESSIONS``
expressions of at most ``MAX_FILTER_EXPRESSION_LENGTH`` characters each). Every event that reaches an Alert
is matched against them, so an unbounded list is a way for one tenant to make matching slow for everyone
(issue 11 item 5). The bounds are in the CRD (``maxItems``/``maxLength``; Flux's CRD has none, and no Flux
example comes near them) and are checked by the controller as well (``AlertSpec.validation_errors``), for
API servers or local manifests that did not apply the schema: the model itself stays lenient so that such an
Alert reaches the reconciler and is reported ``Ready=False`` instead of vanishing.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from .common import CrossNamespaceObjectReference, LocalObjectReference, Model, ObjectMeta, ObjectStatus
from .hooks import AlertHooks, hooks_field


class EventSeverity(StrEnum):
    INFO = "info"
    ERROR = "error"


MAX_FILTER_EXPRESSIONS = 100
"""Most expressions in ``spec.inclusionList`` and in ``spec.exclusionList`` (each; CRD ``maxItems``)."""
MAX_FILTER_EXPRESSION_LENGTH = 1024
"""Longest expression in either list, in characters (CRD ``items.maxLength``)."""

_FILTER_LIST_SCHEMA: JsonDict = {
    "maxItems": MAX_FILTER_EXPRESSIONS,
    "items": {"type": "string", "maxLength": MAX_FILTER_EXPRESSION_LENGTH},
}


def _filter_list(verb: str) -> Any:
    """A bounded list of RE2 expressions: bounds in the schema only (see the module docstring)."""
    return Field(
        None,
        description=(
            f"A list of Go (RE2) regular expressions to be used for {verb} messages; "
            f"at most {MAX_FILTER_EXPRESSIONS} expressions of at most {MAX_FILTER_EXPRESSION_LENGTH} "
            "characters each."
        ),
        json_schema_extra=_FILTER_LIST_SCHEMA,
    )


class AlertSpec(Model):
    provider_ref: LocalObjectReference
    event_severity: EventSeverity = EventSeverity.INFO
    event_sources: list[CrossNamespaceObjectReference]
    inclusion_list: list[str] | None = _filter_list("including")
    exclusion_list: list[str] | None = _filter_list("excluding")
    event_metadata: dict[str, str] | None = None
    summary: str | None = Field(None, max_length=255)
    suspend: bool = False
    hooks: AlertHooks | None = hooks_field("Alert")

    def validation_errors(self) -> list[str]:
        """The CRD's bounds on the inclusion/exclusion lists, enforced by the controller too."""
        errors: list[str] = []
        for field, expressions in (
            ("inclusionList", self.inclusion_list),
            ("exclusionList", self.exclusion_list),
        ):
            if not expressions:
                continue
            if len(expressions) > MAX_FILTER_EXPRESSIONS:
                errors.append(
                    f"spec.{field} has {len(expressions)} expressions, "
                    f"more than the limit of {MAX_FILTER_EXPRESSIONS}"
                )
            for i, expression in enumerate(expressions):
                if len(expression) > MAX_FILTER_EXPRESSION_LENGTH:
                    errors.append(
                        f"spec.{field}[{i}] is {len(expression)} characters long, "
                        f"more than the limit of {MAX_FILTER_EXPRESSION_LENGTH}"
                    )
                    break  # one per list is enough to act on
        return errors


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
