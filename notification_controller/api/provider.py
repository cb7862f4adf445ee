"""Provider ``v1beta3`` (reference §1.3)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidatorFunctionWrapHandler, field_validator

from ..lib.duration import DURATION_PATTERN, TIMEOUT_PATTERN, parse_duration
from .common import LocalObjectReference, Model, ObjectMeta, ObjectStatus, empty_status, shared_status
from .hooks import ProviderHooks, hooks_field

DEFAULT_TIMEOUT_SECONDS = 15.0


class ProviderType(StrEnum):
    """The 34 provider types of Flux's CRD enum, in the CRD's order, then ours beyond Flux (``BEYOND_FLUX``)."""

    SLACK = "slack"
    DISCORD = "discord"
    MSTEAMS = "msteams"
    ROCKET = "rocket"
    GENERIC = "generic"
    GENERIC_HMAC = "generic-hmac"
    GITHUB = "github"
    GITLAB = "gitlab"
    GITEA = "gitea"
    GITEA_PR_COMMENT = "giteapullrequestcomment"
    BITBUCKET_SERVER = "bitbucketserver"
    BITBUCKET = "bitbucket"
    AZURE_DEVOPS = "azuredevops"
    GOOGLE_CHAT = "googlechat"
    GOOGLE_PUBSUB = "googlepubsub"
    WEBEX = "webex"
    SENTRY = "sentry"
    AZURE_EVENT_HUB = "azureeventhub"
    TELEGRAM = "telegram"
    LARK = "lark"
    MATRIX = "matrix"
    OPSGENIE = "opsgenie"
    ALERTMANAGER = "alertmanager"
    GRAFANA = "grafana"
    GITHUB_DISPATCH = "githubdispatch"
    GITHUB_PR_COMMENT = "githubpullrequestcomment"
    GITLAB_MR_COMMENT = "gitlabmergerequestcomment"
    PAGERDUTY = "pagerduty"
    DATADOG = "datadog"
    NATS = "nats"
    ZULIP = "zulip"
    OTEL = "otel"
    ZOOM = "zoom"
    INCIDENT_IO = "incident.io"
    # beyond Flux (issue 28): in our CRD's enum only; a manifest written for Flux never names them
    SMTP = "smtp"
    NTFY = "ntfy"
    PUSHOVER = "pushover"
    GOTIFY = "gotify"
    MATTERMOST = "mattermost"
    CLOUDEVENTS = "cloudevents"
    SNS = "sns"
    SQS = "sqs"


BEYOND_FLUX = frozenset(
    {
        ProviderType.SMTP,
        ProviderType.NTFY,
        ProviderType.PUSHOVER,
        ProviderType.GOTIFY,
        ProviderType.MATTERMOST,
        ProviderType.CLOUDEVENTS,
        ProviderType.SNS,
        ProviderType.SQS,
    }
)
"""The types Flux's controller does not have: documented as such in ``docs/providers/``."""


COMMIT_STATUS_TYPES = frozenset(
    {
        ProviderType.GITHUB,
        ProviderType.GITLAB,
        ProviderType.GITEA,
        ProviderType.BITBUCKET_SERVER,
        ProviderType.BITBUCKET,
        ProviderType.AZURE_DEVOPS,
    }
)
CHANGE_REQUEST_TYPES = frozenset(
    {ProviderType.GITHUB_PR_COMMENT, ProviderType.GITLAB_MR_COMMENT, ProviderType.GITEA_PR_COMMENT}
)
GENERIC_TYPES = frozenset({ProviderType.GENERIC, ProviderType.GENERIC_HMAC})
BODY_TEMPLATE_TYPES = GENERIC_TYPES | {ProviderType.CLOUDEVENTS}
"""The types whose request body a ``spec.bodyTemplate`` may replace (cloudevents: the event's data)."""

COMMIT_STATUS_EXPR_MESSAGE = (
    "spec.commitStatusExpr is only supported for the 'github', 'gitlab', 'gitea', 'bitbucketserver', "
    "'bitbucket', 'azuredevops' provider types"
)
COMMIT_STATUS_EXPR_RULE = (
    "self.type == 'github' || self.type == 'gitlab' || self.type == 'gitea' "
    "|| self.type == 'bitbucketserver' || self.type == 'bitbucket' || self.type == 'azuredevops' "
    "|| !has(self.commitStatusExpr)"
)
"""The CRD's CEL rule behind ``COMMIT_STATUS_EXPR_MESSAGE`` (reference §1.3); emitted by ``api.crdgen``."""


class ProviderSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"message": COMMIT_STATUS_EXPR_MESSAGE, "rule": COMMIT_STATUS_EXPR_RULE},
            ]
        }
    )

    type: ProviderType
    interval: str | None = Field(None, pattern=DURATION_PATTERN)
    channel: str | None = Field(None, max_length=2048)
    username: str | None = Field(None, max_length=2048)
    address: str | None = Field(None, max_length=2048)
    timeout: str | None = Field(None, pattern=TIMEOUT_PATTERN)
    proxy: str | None = Field(None, max_length=2048, pattern=r"^(http|https)://.*$")
    proxy_secret_ref: LocalObjectReference | None = None
    secret_ref: LocalObjectReference | None = None
    service_account_name: str | None = None
    cert_secret_ref: LocalObjectReference | None = None
    suspend: bool = False
    commit_status_expr: str | None = None
    hooks: ProviderHooks | None = hooks_field("Provider")
    body_template: str | None = Field(
        None,
        description=(
            "generic, generic-hmac and cloudevents only (beyond Flux): a Jinja2 template rendering the whole "
            "JSON request body (cloudevents: the event's data), with the variables event, alert and provider "
            "(docs/templates.md)."
        ),
        json_schema_extra={"maxLength": 8192},
    )

    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout) if self.timeout else DEFAULT_TIMEOUT_SECONDS

    def validation_errors(self) -> list[str]:
        """The CRD's ``x-kubernetes-validations`` rules, enforced by the controller too."""
        errors: list[str] = []
        if self.commit_status_expr is not None and self.type not in COMMIT_STATUS_TYPES:
            errors.append(COMMIT_STATUS_EXPR_MESSAGE)
        if self.body_template is not None and self.type not in BODY_TEMPLATE_TYPES:
            errors.append(
                "spec.bodyTemplate is only supported for the 'generic', 'generic-hmac' and 'cloudevents' types"
            )
        return errors


class Provider(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["notification.toolkit.fluxcd.io/v1beta3"] = Field(
        "notification.toolkit.fluxcd.io/v1beta3", alias="apiVersion"
    )
    kind: Literal["Provider"] = "Provider"
    metadata: ObjectMeta
    spec: ProviderSpec
    status: ObjectStatus = Field(default_factory=empty_status)

    @field_validator("status", mode="wrap")
    @classmethod
    def _shared_status(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> ObjectStatus:
        """Objects with equal statuses share one (``common.shared_status``; issue 17)."""
        return shared_status(ObjectStatus, value, handler)

    KIND: ClassVar[str] = "Provider"
