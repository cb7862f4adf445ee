"""Alert ``v1beta3`` (reference §1.2).

Beyond Flux: ``spec.inclusionList`` and ``spec.exclusionList`` are bounded (``MAX_FILTER_EXPRESSIONS``
expressions of at most ``MAX_FILTER_EXPRESSION_LENGTH`` characters each). Every event that reaches an Alert
is matched against them, so an unbounded list is a way for one tenant to make matching slow for everyone
(issue 11 item 5).

Beyond Flux too, all optional (an Alert without them behaves exactly as Flux's): the noise-control fields
``filter``, ``repeatInterval``, ``threshold``, ``notifyOn``, ``groupBy``/``groupWait``/``groupInterval`` and
``threadBy`` (docs/noise-control.md; the stages are in ``dispatch/noise/``). The bounds are in the CRD (``maxItems``/``maxLength``; Flux's CRD has none, and no Flux
example comes near them) and are checked by the controller as well (``AlertSpec.validation_errors``), for
API servers or local manifests that did not apply the schema: the model itself stays lenient so that such an
Alert reaches the reconciler and is reported ``Ready=False`` instead of vanishing.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidatorFunctionWrapHandler, field_validator
from pydantic.config import JsonDict

from ..lib.duration import DURATION_PATTERN, format_duration, parse_duration
from .common import (
    CrossNamespaceObjectReference,
    LocalObjectReference,
    Model,
    ObjectMeta,
    ObjectStatus,
    empty_status,
    shared_status,
)
from .hooks import AlertHooks, hooks_field
from .silence import MAX_MATCHERS, Matcher, matchers_errors
from .timeinterval import MAX_TIME_INTERVALS, TimeInterval


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


MAX_FILTER_LENGTH = 4096
"""Longest ``spec.filter`` CEL expression, in characters (the CEL environment's own limit)."""
MAX_GROUP_BY = 8
GROUP_BY_PATTERN = (
    r"^(involvedObject\.(kind|namespace|name)|reason|severity|metadata\.[A-Za-z0-9_./-]{1,253})$"
)
_GROUP_BY_RE = re.compile(GROUP_BY_PATTERN)
MAX_THRESHOLD_COUNT = 1000


class NotifyOn(StrEnum):
    ALWAYS = "Always"
    STATE_CHANGE = "StateChange"


class ThreadBy(StrEnum):
    OBJECT = "object"
    REVISION = "revision"


_DURATION_SCHEMA: JsonDict = {"pattern": DURATION_PATTERN}


def _duration(description: str) -> Any:
    """A Go duration: pattern in the schema only (the controller checks it too: ``_noise_errors``)."""
    return Field(None, description=description, json_schema_extra=_DURATION_SCHEMA)


class Threshold(Model):
    count: int = Field(
        description="Notify once this many matching events arrived for the same involved object.",
        json_schema_extra={"minimum": 1, "maximum": MAX_THRESHOLD_COUNT},
    )
    within: str = Field(
        description="The window the events must arrive in, e.g. '10m'.", json_schema_extra=_DURATION_SCHEMA
    )


class MessageTemplate(Model):
    title: str | None = Field(
        None,
        description="A Jinja2 template for the notification's title (default: kind/name.namespace).",
        json_schema_extra={"maxLength": 8192},
    )
    message: str | None = Field(
        None,
        description="A Jinja2 template for the notification's text (default: the event's message).",
        json_schema_extra={"maxLength": 8192},
    )


MAX_INHIBIT_RULES = 16
MAX_EQUAL = 8

MIN_HEARTBEAT_INTERVAL = 60.0
"""Shortest ``spec.heartbeat.interval`` in seconds: a beat is a notification like any other (a request to
the Provider, a row in a durable outbox), so a dead man's switch is not a load generator."""
HEARTBEAT_MIN_INTERVAL_ENV = "NOTIFICATION_CONTROLLER_HEARTBEAT_MIN_INTERVAL"
"""A Go duration lowering ``MIN_HEARTBEAT_INTERVAL`` (not below 1s): for tests and demos only, read by the
controller at each check (docs/monitoring.md). The CRD does not know it."""
MAX_HEARTBEAT_MESSAGE = 1024


def heartbeat_min_interval() -> float:
    """``MIN_HEARTBEAT_INTERVAL``, or ``$NOTIFICATION_CONTROLLER_HEARTBEAT_MIN_INTERVAL`` when set to a valid
    duration of at least 1s (an invalid value is ignored: the bound stays)."""
    raw = os.environ.get(HEARTBEAT_MIN_INTERVAL_ENV, "").strip()
    if raw:
        try:
            return max(1.0, parse_duration(raw))
        except ValueError:
            pass
    return MIN_HEARTBEAT_INTERVAL


class Heartbeat(Model):
    """A "still alive" notification through the Alert's Provider every ``interval`` (docs/monitoring.md)."""

    interval: str = Field(
        description="How often to send the heartbeat, e.g. '1h'; at least 1m.",
        json_schema_extra=_DURATION_SCHEMA,
    )
    message: str | None = Field(
        None,
        description="The heartbeat's text (default: which controller and Alert it comes from, and the interval).",
        json_schema_extra={"maxLength": MAX_HEARTBEAT_MESSAGE},
    )


class InhibitRule(Model):
    """Alertmanager's ``inhibit_rules`` entry over Flux events: while an object whose events match
    ``sourceMatchers`` is failing (its last event was an error), error notifications matching
    ``targetMatchers`` with the same values of the ``equal`` fields are held (``inhibited``)."""

    source_matchers: list[Matcher] = Field(
        description="What the failing object's events carry (all must match).",
        json_schema_extra={"minItems": 1, "maxItems": MAX_MATCHERS},
    )
    target_matchers: list[Matcher] = Field(
        description="What the held notifications carry (all must match).",
        json_schema_extra={"minItems": 1, "maxItems": MAX_MATCHERS},
    )
    equal: list[str] | None = Field(
        None,
        description="Fields whose values must be equal in the source and the target (matcher names).",
        json_schema_extra={"maxItems": MAX_EQUAL, "items": {"type": "string", "maxLength": 256}},
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
    template: MessageTemplate | None = Field(
        None,
        description=(
            "Beyond Flux: Jinja2 templates for the title and the text every chat and incident provider sends, "
            "with the variables event, alert, provider (and events, count for a group); docs/templates.md."
        ),
    )
    # ---- noise control (beyond Flux; docs/noise-control.md) ----
    filter: str | None = Field(
        None,
        json_schema_extra={"maxLength": MAX_FILTER_LENGTH},
        description=(
            "A CEL expression over 'event' (the Flux event) that must return true for the event to notify, "
            "e.g. \"event.reason in ['HealthCheckFailed']\". Applied after the event sources match."
        ),
    )
    repeat_interval: str | None = _duration(
        "Send an identical notification (same object, severity, reason and message, durations ignored) at "
        "most once per this interval, e.g. '1h'."
    )
    threshold: Threshold | None = Field(
        None, description="Notify only when 'count' matching events for one object arrive 'within' a window."
    )
    notify_on: NotifyOn | None = Field(
        None,
        description=(
            "Always (the default) or StateChange: notify only when an object's severity differs from the last "
            "one notified for it through this Alert (the first error, and the recovery)."
        ),
    )
    group_by: list[str] | None = Field(
        None,
        description=(
            "Group events into one notification by these fields: involvedObject.kind, involvedObject.namespace, "
            "involvedObject.name, reason, severity, metadata.<key>. An empty list makes one group."
        ),
        json_schema_extra={
            "maxItems": MAX_GROUP_BY,
            "items": {"type": "string", "pattern": GROUP_BY_PATTERN},
        },
    )
    group_wait: str | None = _duration(
        "How long a new group collects events before its first notification (default 30s)."
    )
    group_interval: str | None = _duration(
        "How long after a group's notification the next one about new events of the group may go (default 5m)."
    )
    thread_by: ThreadBy | None = Field(
        None,
        description=(
            "Slack Providers using chat.postMessage with a bot token: post follow-ups for the same object or "
            "revision in the first message's thread."
        ),
    )

    # ---- quiet (beyond Flux; docs/silences.md) ----
    mute_times: list[TimeInterval] | None = Field(
        None,
        description=(
            "Alertmanager time_interval entries (camelCase) during which notifications are held (muted) and "
            "summarised when the window ends."
        ),
        json_schema_extra={"maxItems": MAX_TIME_INTERVALS},
    )
    active_times: list[TimeInterval] | None = Field(
        None,
        description="Alertmanager time_interval entries outside which notifications are held (muted).",
        json_schema_extra={"maxItems": MAX_TIME_INTERVALS},
    )
    inhibit_dependents: bool | None = Field(
        None,
        description=(
            "Hold error notifications of objects whose source (sourceRef) or dependency (dependsOn) is failing, "
            "and name them in the source's recovery notification."
        ),
    )
    inhibit_rules: list[InhibitRule] | None = Field(
        None,
        description="Alertmanager-style inhibition rules for dependencies Flux's graph does not know.",
        json_schema_extra={"maxItems": MAX_INHIBIT_RULES},
    )
    heartbeat: Heartbeat | None = Field(
        None,
        description=(
            "Beyond Flux: send a 'still alive' notification through the Provider every interval, whatever the "
            "event sources, filters, noise control and silences say (a dead man's switch; suspend stops it)."
        ),
    )
    resolve_in_place: bool | None = Field(
        None,
        description=(
            "Slack (bot token) and Discord: the recovery edits the failure's message (state, colour, how long "
            "it failed) instead of posting a new one."
        ),
    )

    @property
    def quiet(self) -> bool:
        """Whether any quiet field is set (silences apply to every Alert; these are per Alert)."""
        return bool(self.mute_times or self.active_times or self.inhibit_dependents or self.inhibit_rules)

    @property
    def noisy(self) -> bool:
        """Whether any noise-control field is set (a Flux Alert: False, and no stage does anything)."""
        return bool(
            self.filter
            or self.repeat_interval
            or self.threshold
            or self.notify_on is NotifyOn.STATE_CHANGE
            or self.group_by is not None
            or self.thread_by
        )

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
        errors.extend(self._noise_errors())
        errors.extend(self._quiet_errors())
        errors.extend(self._heartbeat_errors())
        return errors

    def heartbeat_interval(self) -> float | None:
        """Seconds between heartbeats; None without ``spec.heartbeat`` or with an invalid one."""
        if self.heartbeat is None or self._heartbeat_errors():
            return None
        return parse_duration(self.heartbeat.interval)

    def _heartbeat_errors(self) -> list[str]:
        beat = self.heartbeat
        if beat is None:
            return []
        errors: list[str] = []
        try:
            seconds = parse_duration(beat.interval)
        except ValueError:
            seconds = None
            errors.append(f"spec.heartbeat.interval {beat.interval!r} is not a duration (e.g. '1h', '30m')")
        minimum = heartbeat_min_interval()
        if seconds is not None and seconds < minimum:
            errors.append(
                f"spec.heartbeat.interval {beat.interval!r} is shorter than the minimum of {format_duration(minimum)}"
            )
        if beat.message is not None and len(beat.message) > MAX_HEARTBEAT_MESSAGE:
            errors.append(f"spec.heartbeat.message is longer than {MAX_HEARTBEAT_MESSAGE} characters")
        return errors

    def _quiet_errors(self) -> list[str]:
        """The bounds of the quiet fields (the time intervals' syntax: ``TimeInterval.validation_errors``)."""
        errors: list[str] = []
        for field, intervals in (("muteTimes", self.mute_times), ("activeTimes", self.active_times)):
            if not intervals:
                continue
            if len(intervals) > MAX_TIME_INTERVALS:
                errors.append(f"spec.{field} has {len(intervals)} entries, more than {MAX_TIME_INTERVALS}")
            for i, interval in enumerate(intervals[:MAX_TIME_INTERVALS]):
                errors.extend(interval.validation_errors(f"spec.{field}[{i}]"))
        for i, rule in enumerate((self.inhibit_rules or [])[:MAX_INHIBIT_RULES]):
            errors.extend(matchers_errors(rule.source_matchers, f"spec.inhibitRules[{i}].sourceMatchers"))
            errors.extend(matchers_errors(rule.target_matchers, f"spec.inhibitRules[{i}].targetMatchers"))
        if self.inhibit_rules and len(self.inhibit_rules) > MAX_INHIBIT_RULES:
            errors.append(f"spec.inhibitRules has more than {MAX_INHIBIT_RULES} rules")
        return errors

    def _noise_errors(self) -> list[str]:
        """What the CRD checks on the noise-control fields, checked again (local mode has no schema)."""
        errors: list[str] = []
        durations = {
            "repeatInterval": self.repeat_interval,
            "groupWait": self.group_wait,
            "groupInterval": self.group_interval,
            "threshold.within": self.threshold.within if self.threshold else None,
        }
        for field, value in durations.items():
            if value is None:
                continue
            try:
                seconds = parse_duration(value)
            except ValueError:
                errors.append(f"spec.{field} {value!r} is not a duration (e.g. '30s', '5m', '1h')")
                continue
            if seconds <= 0 and field != "groupWait":
                errors.append(f"spec.{field} must be longer than 0s")
        if self.threshold is not None and not 1 <= self.threshold.count <= MAX_THRESHOLD_COUNT:
            errors.append(f"spec.threshold.count must be between 1 and {MAX_THRESHOLD_COUNT}")
        if self.group_by is not None:
            if len(self.group_by) > MAX_GROUP_BY:
                errors.append(f"spec.groupBy has {len(self.group_by)} fields, more than {MAX_GROUP_BY}")
            for i, name in enumerate(self.group_by):
                if not _GROUP_BY_RE.match(name):
                    errors.append(
                        f"spec.groupBy[{i}] is not one of involvedObject.kind, involvedObject.namespace, "
                        "involvedObject.name, reason, severity, metadata.<key>"
                    )
                    break
        elif self.group_wait or self.group_interval:
            errors.append("spec.groupWait and spec.groupInterval need spec.groupBy")
        if self.filter is not None and len(self.filter) > MAX_FILTER_LENGTH:
            errors.append(f"spec.filter is longer than {MAX_FILTER_LENGTH} characters")
        return errors


class Alert(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["notification.toolkit.fluxcd.io/v1beta3"] = Field(
        "notification.toolkit.fluxcd.io/v1beta3", alias="apiVersion"
    )
    kind: Literal["Alert"] = "Alert"
    metadata: ObjectMeta
    spec: AlertSpec
    status: ObjectStatus = Field(default_factory=empty_status)

    @field_validator("status", mode="wrap")
    @classmethod
    def _shared_status(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> ObjectStatus:
        """Objects with equal statuses share one (``common.shared_status``; issue 17)."""
        return shared_status(ObjectStatus, value, handler)

    KIND: ClassVar[str] = "Alert"
