"""``Silence`` ``v1alpha1``, in an API group of our own (issue 26 item 1), and the matchers it shares with an
Alert's ``spec.inhibitRules``.

Flux has ``Alert.spec.suspend`` only: no expiry, no reason, the whole Alert. Alertmanager has silences,
but only through its API. A Silence is an object, so it can live in Git next to the Alerts (with an
``endsAt``) or be made ad hoc (``notification-controller silence add``). Its group is not Flux's: a Flux
installation never sees it, and Flux's CRDs cannot prune it.

A Silence holds the notifications of the Alerts of its own namespace whose fields match *all* its
matchers, from ``startsAt`` (default: its creation) until ``endsAt`` (or ``startsAt + duration``). With
``--cluster-silences-namespace=NS``, a Silence in ``NS`` with ``spec.allNamespaces: true`` holds the
Alerts of every namespace (that namespace is the cluster admin's to guard with RBAC).

Matchers are prometheus-operator's ``AlertmanagerConfig`` matcher shape (``name``, ``value``,
``matchType``: ``=``, ``!=``, ``=~``, ``!~``) over what a notification carries: ``kind``, ``name``,
``namespace`` (of the involved object), ``reason``, ``severity``, ``alert``, ``provider`` and
``metadata.KEY`` (event metadata). Regular expressions are RE2, anchored at both ends as Alertmanager's,
and bounded like the Alert's inclusion lists (``MAX_MATCHERS`` of at most ``MAX_MATCHER_VALUE`` characters).
What a matcher means at run time is ``core/quiet.py``; this module is the shape and its checks.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..lib.duration import DURATION_PATTERN, parse_duration
from .common import Condition, Model, ObjectMeta

SILENCE_GROUP = "notification-controller.io"
SILENCE_VERSION = "v1alpha1"
SILENCE_API_VERSION = f"{SILENCE_GROUP}/{SILENCE_VERSION}"

MAX_MATCHERS = 32
MAX_MATCHER_VALUE = 1024
MATCHER_NAME_PATTERN = (
    r"^(kind|name|namespace|reason|severity|alert|provider|metadata\.[A-Za-z0-9_./-]{1,253})$"
)
_MATCHER_NAME = re.compile(MATCHER_NAME_PATTERN)
MATCHER_NAMES = ("kind", "name", "namespace", "reason", "severity", "alert", "provider", "metadata.KEY")


class MatchType(StrEnum):
    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


class Matcher(Model):
    name: str = Field(
        description=(
            "What to match: kind, name, namespace (of the involved object), reason, severity, alert, provider, "
            "or metadata.KEY (an event metadata key)."
        ),
        json_schema_extra={"pattern": MATCHER_NAME_PATTERN},
    )
    value: str = Field(
        "",
        description="The value, or an RE2 expression anchored at both ends for =~ and !~.",
        json_schema_extra={"maxLength": MAX_MATCHER_VALUE},
    )
    match_type: MatchType = Field(MatchType.EQUAL, description="One of =, !=, =~, !~ (default =).")

    def __str__(self) -> str:
        return f"{self.name}{self.match_type.value}{self.value}"

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """``name=value``, ``name!=value``, ``name=~regex``, ``name!~regex`` (the CLI's ``--match``).
        Raises ``ValueError`` with what is wrong."""
        found = re.match(r"^\s*([A-Za-z0-9_./-]+)\s*(=~|!~|!=|=)(.*)$", text, re.DOTALL)
        if found is None:
            raise ValueError(f"matcher {text!r} is not NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX")
        name, op, value = found.group(1), found.group(2), found.group(3).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        matcher = cls(name=name, value=value, match_type=MatchType(op))
        errors = matcher.validation_errors("")
        if errors:
            raise ValueError(errors[0])
        return matcher

    def validation_errors(self, where: str) -> list[str]:
        """The schema's bounds, and RE2 syntax for the regex types (needs ``re2``)."""
        errors: list[str] = []
        if not _MATCHER_NAME.match(self.name):
            errors.append(
                f"{where}name {self.name!r} is not one of {', '.join(MATCHER_NAMES)}".replace("  ", " ")
            )
        if len(self.value) > MAX_MATCHER_VALUE:
            errors.append(f"{where}value is longer than {MAX_MATCHER_VALUE} characters")
        elif self.match_type in (MatchType.REGEX, MatchType.NOT_REGEX):
            reason = re2_error(self.value)
            if reason is not None:
                errors.append(f"{where}value is not an RE2 expression: {reason}")
        return errors


def re2_error(expression: str) -> str | None:
    """Why RE2 cannot compile ``expression`` (``missing ): apps-(``), or None. With ``log_errors`` off: RE2's
    defaults write an "Error parsing" line on stderr for each, which a tenant could trigger at will, and
    which breaks the CLI's one-line error contract; the reason is decoded (RE2 raises it as bytes)."""
    import re2  # the run-time engine; imported here so the model stays importable without it

    options = re2.Options()
    options.log_errors = False
    try:
        re2.compile(expression, options)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        return text.splitlines()[0][:200] if text.strip() else "invalid regular expression"
    return None


def matchers_errors(matchers: list[Matcher], field: str) -> list[str]:
    errors: list[str] = []
    if len(matchers) > MAX_MATCHERS:
        errors.append(f"{field} has {len(matchers)} matchers, more than the limit of {MAX_MATCHERS}")
    for i, matcher in enumerate(matchers[:MAX_MATCHERS]):
        errors.extend(matcher.validation_errors(f"{field}[{i}]."))
    return errors


_MATCHERS_SCHEMA: dict[str, Any] = {"maxItems": MAX_MATCHERS}


class SilenceSpec(Model):
    matchers: list[Matcher] = Field(
        description="Notifications matching all of these are held.",
        json_schema_extra={"minItems": 1, **_MATCHERS_SCHEMA},
    )
    starts_at: datetime | None = Field(
        None, description="When the silence starts (RFC 3339; default: when it was created)."
    )
    ends_at: datetime | None = Field(None, description="When the silence ends (RFC 3339).")
    duration: str | None = Field(
        None,
        description="How long the silence lasts from startsAt, e.g. '2h' (when endsAt is not given).",
        json_schema_extra={"pattern": DURATION_PATTERN},
    )
    created_by: str | None = Field(None, description="Who made it.", json_schema_extra={"maxLength": 256})
    comment: str | None = Field(None, description="Why.", json_schema_extra={"maxLength": 1024})
    summary: bool = Field(
        True,
        description=(
            "Send each affected Alert one summary of what was held when the silence ends (default true)."
        ),
    )
    all_namespaces: bool = Field(
        False,
        description=(
            "Hold the Alerts of every namespace; honoured only for a Silence in the namespace the controller's "
            "--cluster-silences-namespace names."
        ),
    )

    def validation_errors(self) -> list[str]:
        errors = matchers_errors(self.matchers, "spec.matchers")
        if not self.matchers:
            errors.append("spec.matchers must have at least one matcher")
        if self.ends_at is None and self.duration is None:
            errors.append("spec.endsAt or spec.duration is required")
        if self.ends_at is not None and self.duration is not None:
            errors.append("spec.endsAt and spec.duration are exclusive")
        if self.duration is not None:
            try:
                if parse_duration(self.duration) <= 0:
                    errors.append("spec.duration must be longer than 0s")
            except ValueError:
                errors.append(f"spec.duration {self.duration!r} is not a duration (e.g. '30m', '2h')")
        return errors


class SilenceState(StrEnum):
    PENDING = "Pending"
    ACTIVE = "Active"
    EXPIRED = "Expired"


class SilenceStatus(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int = -1
    state: SilenceState | None = Field(None, description="Pending, Active or Expired.")
    held: int = Field(0, description="How many notifications it held.")
    starts_at: datetime | None = Field(None, description="When it starts (resolved).")
    ends_at: datetime | None = Field(None, description="When it ends (resolved).")


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Silence(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["notification-controller.io/v1alpha1"] = Field(
        "notification-controller.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["Silence"] = "Silence"
    metadata: ObjectMeta
    spec: SilenceSpec
    status: SilenceStatus = Field(default_factory=SilenceStatus)

    KIND: ClassVar[str] = "Silence"

    def window(self) -> tuple[datetime, datetime] | None:
        """(starts, ends), timezone-aware; None when the spec does not say (``validation_errors``)."""
        spec = self.spec
        starts = spec.starts_at or self.metadata.creation_timestamp
        if starts is None:
            return None
        starts = _aware(starts)
        if spec.ends_at is not None:
            return starts, _aware(spec.ends_at)
        if spec.duration is None:
            return None
        try:
            return starts, starts + timedelta(seconds=parse_duration(spec.duration))
        except ValueError:
            return None

    def state(self, now: datetime) -> SilenceState | None:
        window = self.window()
        if window is None:
            return None
        starts, ends = window
        if now >= ends:
            return SilenceState.EXPIRED
        return SilenceState.ACTIVE if now >= starts else SilenceState.PENDING
