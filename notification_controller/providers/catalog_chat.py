"""Chat, incident and observability providers: one import line per module, sorted."""

from . import (  # noqa: F401  (each module registers its notifiers)
    alertmanager,
    datadog,
    googlechat,
    grafana,
    incidentio,
    lark,
    matrix,
    msteams,
    opsgenie,
    pagerduty,
    sentry,
    slack,
    telegram,
    webex,
    zoom,
    zulip,
)
