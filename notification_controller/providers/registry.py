"""The explicit, read-only map from provider type to the module and class that implement it.

One line per type (``TYPES``); the module is imported the first time a Provider of that type is built, so
starting the controller never imports the 34 provider modules and their SDKs (OTLP protobuf, Google and
Azure clients): a process loads what its Providers use. Nothing registers itself: no decorator, no import
side effect. ``tests/unit/test_provider_registry.py`` asserts ``TYPES`` == the CRD enum == the docs pages,
and that every entry imports and builds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..api.provider import ProviderType
from ..core.conditions import UNSUPPORTED_PROVIDER
from ..errors import ProviderConfigError
from .base import Notifier, ProviderOptions


@dataclass(frozen=True)
class ProviderRecord:
    module: str
    """Module under ``notification_controller.providers``."""
    factory: str
    """The notifier class in it: ``factory(options)`` validates the options and builds the notifier."""

    def load(self) -> Callable[[ProviderOptions], Notifier]:
        module = importlib.import_module(f"{__package__}.{self.module}")
        factory: Callable[[ProviderOptions], Notifier] = getattr(module, self.factory)
        return factory


TYPES: Mapping[ProviderType, ProviderRecord] = MappingProxyType(
    {
        ProviderType.ALERTMANAGER: ProviderRecord("alertmanager", "AlertmanagerNotifier"),
        ProviderType.AZURE_DEVOPS: ProviderRecord("git.azuredevops", "AzureDevOpsNotifier"),
        ProviderType.AZURE_EVENT_HUB: ProviderRecord("azureeventhub", "AzureEventHubNotifier"),
        ProviderType.BITBUCKET: ProviderRecord("git.bitbucket", "BitbucketNotifier"),
        ProviderType.BITBUCKET_SERVER: ProviderRecord("git.bitbucketserver", "BitbucketServerNotifier"),
        ProviderType.DATADOG: ProviderRecord("datadog", "DatadogNotifier"),
        ProviderType.DISCORD: ProviderRecord("slack", "DiscordNotifier"),
        ProviderType.GENERIC: ProviderRecord("generic", "GenericNotifier"),
        ProviderType.GENERIC_HMAC: ProviderRecord("generic", "GenericHMACNotifier"),
        ProviderType.GITEA: ProviderRecord("git.gitea", "GiteaNotifier"),
        ProviderType.GITEA_PR_COMMENT: ProviderRecord(
            "git.giteaprcomment", "GiteaPullRequestCommentNotifier"
        ),
        ProviderType.GITHUB: ProviderRecord("git.github", "GitHubNotifier"),
        ProviderType.GITHUB_DISPATCH: ProviderRecord("git.githubdispatch", "GitHubDispatchNotifier"),
        ProviderType.GITHUB_PR_COMMENT: ProviderRecord(
            "git.githubprcomment", "GitHubPullRequestCommentNotifier"
        ),
        ProviderType.GITLAB: ProviderRecord("git.gitlab", "GitLabNotifier"),
        ProviderType.GITLAB_MR_COMMENT: ProviderRecord(
            "git.gitlabmrcomment", "GitLabMergeRequestCommentNotifier"
        ),
        ProviderType.GOOGLE_CHAT: ProviderRecord("googlechat", "GoogleChatNotifier"),
        ProviderType.GOOGLE_PUBSUB: ProviderRecord("googlepubsub", "GooglePubSubNotifier"),
        ProviderType.GRAFANA: ProviderRecord("grafana", "GrafanaNotifier"),
        ProviderType.INCIDENT_IO: ProviderRecord("incidentio", "IncidentIONotifier"),
        ProviderType.LARK: ProviderRecord("lark", "LarkNotifier"),
        ProviderType.MATRIX: ProviderRecord("matrix", "MatrixNotifier"),
        ProviderType.MSTEAMS: ProviderRecord("msteams", "MSTeamsNotifier"),
        ProviderType.NATS: ProviderRecord("nats", "NATSNotifier"),
        ProviderType.OPSGENIE: ProviderRecord("opsgenie", "OpsgenieNotifier"),
        ProviderType.OTEL: ProviderRecord("otel", "OTELNotifier"),
        ProviderType.PAGERDUTY: ProviderRecord("pagerduty", "PagerDutyNotifier"),
        ProviderType.ROCKET: ProviderRecord("slack", "RocketNotifier"),
        ProviderType.SENTRY: ProviderRecord("sentry", "SentryNotifier"),
        ProviderType.SLACK: ProviderRecord("slack", "SlackNotifier"),
        ProviderType.TELEGRAM: ProviderRecord("telegram", "TelegramNotifier"),
        ProviderType.WEBEX: ProviderRecord("webex", "WebexNotifier"),
        ProviderType.ZOOM: ProviderRecord("zoom", "ZoomNotifier"),
        ProviderType.ZULIP: ProviderRecord("zulip", "ZulipNotifier"),
        # beyond Flux (issue 28)
        ProviderType.SMTP: ProviderRecord("smtp", "SMTPNotifier"),
        ProviderType.NTFY: ProviderRecord("ntfy", "NtfyNotifier"),
        ProviderType.PUSHOVER: ProviderRecord("pushover", "PushoverNotifier"),
        ProviderType.GOTIFY: ProviderRecord("gotify", "GotifyNotifier"),
        ProviderType.MATTERMOST: ProviderRecord("mattermost", "MattermostNotifier"),
        ProviderType.CLOUDEVENTS: ProviderRecord("cloudevents", "CloudEventsNotifier"),
        ProviderType.SNS: ProviderRecord("aws", "SNSNotifier"),
        ProviderType.SQS: ProviderRecord("aws", "SQSNotifier"),
    }
)

_factories: dict[ProviderType, Callable[[ProviderOptions], Notifier]] = {}


def registered_types() -> frozenset[ProviderType]:
    return frozenset(TYPES)


def create_notifier(opts: ProviderOptions) -> Notifier:
    """Build the notifier for ``opts.type``; an unknown type is a clear error, never a crash."""
    factory = _factories.get(opts.type)
    if factory is None:
        record = TYPES.get(opts.type)
        if record is None:
            raise ProviderConfigError(f"provider {opts.type} not supported", reason=UNSUPPORTED_PROVIDER)
        factory = _factories[opts.type] = record.load()
    return factory(opts)
