"""The event other Flux controllers POST (reference §2, ``fluxcd/pkg/apis/event/v1beta1``).

Decoding is as lenient as Go's ``encoding/json``: field names match case-insensitively, unknown fields
are ignored, missing fields take zero values. Wrong JSON types (a number for a string, a non-string
metadata value, a timestamp that is not an RFC 3339 string or ``null``) are rejected. Encoding
(``to_go_json``) reproduces Go's bytes exactly, field order included.

Timestamps follow the grammar Go's ``time.Parse(time.RFC3339)`` accepts (``metav1.Time``): upper-case
``T`` and ``Z``, a fraction of any length after a ``.`` or ``,`` (cut to microseconds, as Go cuts it to
nanoseconds), an offset of ``hh:mm``. Python's ``fromisoformat`` alone is looser (lower-case ``t``, offsets
with seconds, week dates). A timestamp Python's ``datetime`` cannot hold once converted to UTC (year 0000,
or ``0001-01-01T00:00:00+01:00`` and ``9999-12-31T23:59:59-01:00`` whose UTC instant falls outside years
1-9999) is a client error (400), never an ``OverflowError`` (issue 11 item 7: it was a 500 with a
traceback); Go can represent those instants, so this is a documented difference of edge values.

The involved object's ``kind``, ``namespace`` and ``name`` may not hold control characters (C0, DEL, C1):
Kubernetes cannot name an object so, and every sink downstream (logs, chat messages, the ``dead-letters``
table on an operator's terminal) would carry them (issue 23 item 12). Flux accepts them; here they are a
400. The message and metadata stay free text.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ControllerError
from ..lib.clock import rfc3339
from ..lib.gojson import _BYTE_ESCAPES as _GO_BYTE_ESCAPES
from ..lib.gojson import GoStruct, dumps

SEVERITY_INFO = "info"
SEVERITY_ERROR = "error"
SEVERITY_TRACE = "trace"

EVENT_ANNOTATION_PREFIX = "event.toolkit.fluxcd.io/"

# Plain metadata keys (reference §2); on the wire they are prefixed with the involved object's API group.
MD_REVISION = "revision"
MD_ORIGIN_REVISION = "originRevision"
MD_CHECKSUM = "checksum"
MD_DIGEST = "digest"
MD_TOKEN = "token"
MD_COMMIT = "commit"
MD_COMMIT_STATUS = "commit_status"
MD_COMMIT_STATUS_UPDATE = "update"
MD_CHANGE_REQUEST = "change_request"


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:\d{2})", re.ASCII)
_NOT_RFC3339 = "timestamp must be an RFC 3339 string or null"
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
"""Go's zero ``time.Time``: ``metav1.Time`` writes it as ``null``."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = ("kind", "namespace", "name")

_recent_timestamps: dict[str, datetime] = {}  # a timestamp's text → its UTC datetime (bounded: 64)


class EventDecodeError(ControllerError, ValueError):
    """The request body is not a Flux event. The message is safe to return to the client."""


_OBJ_FIELDS = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
_EVENT_FIELDS = (
    "involvedObject",
    "severity",
    "timestamp",
    "message",
    "reason",
    "metadata",
    "reportingController",
    "reportingInstance",
)
# lower-case name → field, plus each field's own spelling (what Flux sends) so that the common case needs
# no ``lower()``: the same answer, since a canonical name lowers to its own lower-case entry.
_OBJ_CANON = {f.lower(): f for f in _OBJ_FIELDS} | {f: f for f in _OBJ_FIELDS}
_EVENT_CANON = {f.lower(): f for f in _EVENT_FIELDS} | {f: f for f in _EVENT_FIELDS}
_OBJ_NAMES = frozenset(_OBJ_FIELDS)
_EVENT_NAMES = frozenset(_EVENT_FIELDS)


def _canonical_keys(raw: dict[str, Any], canon: dict[str, str], names: frozenset[str]) -> dict[str, Any]:
    """Go matches JSON keys to struct fields case-insensitively; unknown keys are dropped."""
    if names.issuperset(raw):  # every key spelled as the field (what Flux sends): nothing to rename
        return dict(raw)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = canon.get(key)
        if name is None and isinstance(key, str):
            name = canon.get(key.lower())
        if name is not None:
            out[name] = value
    return out


class ObjectReference(BaseModel):
    """``corev1.ObjectReference`` as found in ``involvedObject``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = Field("", alias="apiVersion")
    resource_version: str = Field("", alias="resourceVersion")
    field_path: str = Field("", alias="fieldPath")

    @property
    def group(self) -> str:
        """API group of the object ("" for the core group or no apiVersion)."""
        if "/" in self.api_version:
            return self.api_version.split("/", 1)[0]
        return ""

    def to_go(self) -> GoStruct:
        out = GoStruct()
        for attr, key in (
            ("kind", "kind"),
            ("namespace", "namespace"),
            ("name", "name"),
            ("uid", "uid"),
            ("api_version", "apiVersion"),
            ("resource_version", "resourceVersion"),
            ("field_path", "fieldPath"),
        ):
            value = getattr(self, attr)
            if value:
                out[key] = value
        return out

    def describe(self) -> str:
        """``<Kind>/<ns>/<name>`` as Flux writes it in messages."""
        return f"{self.kind}/{self.namespace}/{self.name}"


class Event(BaseModel):
    """A Flux event. Immutable: pipeline stages produce modified copies with ``model_copy``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore", strict=False)

    involved_object: ObjectReference = Field(default_factory=ObjectReference, alias="involvedObject")
    severity: str = ""
    timestamp: datetime | None = None
    message: str = ""
    reason: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    reporting_controller: str = Field("", alias="reportingController")
    reporting_instance: str = Field("", alias="reportingInstance")

    @field_validator("timestamp", mode="before")
    @classmethod
    def _parse_timestamp(cls, value: Any) -> datetime | None:
        if value is None or isinstance(value, datetime):
            return value
        if isinstance(value, str) and (parsed := _recent_timestamps.get(value)) is not None:
            return parsed  # the same second as a recent event (they come in bursts): parsed once
        if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
            raise ValueError(_NOT_RFC3339)
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:  # a field out of range (month 13, hour 24, offset 24:00, year 0000)
            raise ValueError(_NOT_RFC3339) from exc
        try:
            utc = parsed.astimezone(UTC)
        except OverflowError:  # the UTC instant is before year 1 or after year 9999
            raise ValueError("timestamp out of range (years 0001-9999 in UTC)") from None
        if len(_recent_timestamps) >= 64:
            _recent_timestamps.clear()
        _recent_timestamps[value] = utc
        return utc

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_strings(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("metadata must be an object of strings")
        for v in value.values():
            if not isinstance(v, str):
                raise ValueError("metadata values must be strings")
        return value

    @classmethod
    def decode(cls, body: bytes) -> Event:
        """Decode a request body. Raises ``EventDecodeError`` with a short, client-safe reason."""
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise EventDecodeError("request body is not valid JSON") from exc
        return cls.from_raw(raw)

    @classmethod
    def from_raw(cls, raw: Any) -> Event:
        if not isinstance(raw, dict):
            raise EventDecodeError("request body must be a JSON object")
        data = _canonical_keys(raw, _EVENT_CANON, _EVENT_NAMES)
        obj = data.get("involvedObject")
        if obj is not None:
            if not isinstance(obj, dict):
                raise EventDecodeError("involvedObject must be an object")
            obj = data["involvedObject"] = _canonical_keys(obj, _OBJ_CANON, _OBJ_NAMES)
            for key in _NAMED:
                value = obj.get(key)
                # isprintable: one C pass for the usual ASCII name; the regex only for what it refuses
                if type(value) is str and not value.isprintable() and _CONTROL.search(value):
                    raise EventDecodeError(f"invalid event field involvedObject.{key}: control characters")
        for key in ("severity", "message", "reason", "reportingController", "reportingInstance"):
            if key in data and data[key] is None:
                data.pop(key)  # Go leaves a string field untouched on JSON null
        try:
            return cls.model_validate(data, strict=False)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise EventDecodeError(
                f"invalid event field {where}: {first.get('msg', 'invalid value')}"
            ) from None

    @property
    def object_group(self) -> str:
        return self.involved_object.group

    def plain_metadata(self, key: str) -> str | None:
        """Metadata value of an un-prefixed key after ``combine_metadata`` (e.g. ``revision``)."""
        return self.metadata.get(key)

    def revision(self) -> str | None:
        """``GetRevision``: first of ``commit``, ``originRevision``, ``revision`` (plain keys)."""
        for key in (MD_COMMIT, MD_ORIGIN_REVISION, MD_REVISION):
            value = self.metadata.get(key)
            if value:
                return value
        return None

    def to_go(self) -> GoStruct:
        out = GoStruct()
        out["involvedObject"] = self.involved_object.to_go()
        out["severity"] = self.severity
        ts = self.timestamp
        out["timestamp"] = rfc3339(ts) if ts is not None and ts != GO_ZERO_TIME else None
        out["message"] = self.message
        out["reason"] = self.reason
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        out["reportingController"] = self.reporting_controller
        if self.reporting_instance:
            out["reportingInstance"] = self.reporting_instance
        return out

    def to_go_json(self) -> bytes:
        """The exact bytes Go's ``json.Marshal(event)`` produces.

        The generic payload of every notification: built here in Go's field order with the metadata map
        sorted and encoded in one ``orjson.dumps``, instead of ``to_go`` + ``gojson.dumps``' generic walk
        (callgrind, per call: ~31k instructions -> ~13k). Every value is a string (validated on decode),
        so what orjson refuses (a lone surrogate) takes ``gojson.dumps``, which replaces it as Go does."""
        obj = self.involved_object
        involved: dict[str, str] = {}
        if obj.kind:
            involved["kind"] = obj.kind
        if obj.namespace:
            involved["namespace"] = obj.namespace
        if obj.name:
            involved["name"] = obj.name
        if obj.uid:
            involved["uid"] = obj.uid
        if obj.api_version:
            involved["apiVersion"] = obj.api_version
        if obj.resource_version:
            involved["resourceVersion"] = obj.resource_version
        if obj.field_path:
            involved["fieldPath"] = obj.field_path
        ts = self.timestamp
        out: dict[str, Any] = {
            "involvedObject": involved,
            "severity": self.severity,
            "timestamp": rfc3339(ts) if ts is not None and ts != GO_ZERO_TIME else None,
            "message": self.message,
            "reason": self.reason,
        }
        md = self.metadata
        if md:
            out["metadata"] = {k: md[k] for k in sorted(md)}  # a Go map: keys sorted
        out["reportingController"] = self.reporting_controller
        if self.reporting_instance:
            out["reportingInstance"] = self.reporting_instance
        try:
            raw = orjson.dumps(out)
        except TypeError:
            return dumps(self.to_go())
        for plain, escaped in _GO_BYTE_ESCAPES:  # only inside strings: replacing in the bytes is exact
            if plain in raw:
                raw = raw.replace(plain, escaped)
        return raw

    def as_cel(self) -> dict[str, Any]:
        """The event as the JSON-like map CEL expressions see (reference §3.9)."""
        data: dict[str, Any] = dict(self.to_go())
        data["involvedObject"] = dict(self.involved_object.to_go())
        data.setdefault("metadata", {})
        data.setdefault("reportingInstance", "")
        return data
