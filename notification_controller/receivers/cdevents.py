"""``cdevents``: structural validation of a CDEvent (spec v0.4) and the ``Ce-Type`` filter (reference §5.3).

Flux parses the body with cdevents sdk-go v0.5.0 (``v04.NewFromJsonBytes`` then ``cdevents.Validate``). No SDK
exists for Python, so this module checks the structure the SDK enforces:

* the body is a JSON object with objects ``context`` and ``subject``;
* ``context.type`` is ``dev.cdevents.<subject>.<predicate>.<semver>``, ``<subject>.<predicate>`` is one of the
  45 event types of spec v0.4, and the version shares the SDK's major version (the SDK's ``IsCompatible``);
* ``context.id``, ``context.source`` are non-empty strings, ``context.timestamp`` an RFC 3339 date-time;
  ``context.version`` (the spec version; called ``specversion`` from v0.5, accepted too) is optional because
  the SDK fills it in, but must be a non-empty string when present; ``schemaUri``/``chainId`` are strings;
* ``subject.id`` is a non-empty string; ``subject.source`` a string; ``subject.type``, when present, is the
  subject type of the event (``change``, ``pipelineRun``...); ``subject.content`` an object;
* ``customData`` is an object or a string; ``customDataContentType`` a string.

Not validated (the SDK validates them through each event's JSON schema): the per-event ``subject.content``
fields (``repository.id``, ``artifactId`` purls, ``environment.id``...), ``context.links``, URI syntax of
``source``/``schemaUri``, and custom ``dev.cdeventsx.*`` types (refused, as sdk-go v0.5.0's v04 map has none).

The event filter compares the ``Ce-Type`` header (CloudEvents binary mode) with ``spec.events`` AFTER the
payload is validated, as Flux does; ``ce-id`` is the delivery id for replay protection.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ..errors import VerificationError
from .base import HookRequest, JSONShapeError, Verified, VerifyContext, load_json, require_event

EVENT_HEADER = "Ce-Type"
DELIVERY_HEADER = "Ce-Id"

# subject (as in the type string) → (subject type in the payload, predicates) for spec v0.4.
V04_EVENTS: dict[str, tuple[str, frozenset[str]]] = {
    "artifact": ("artifact", frozenset({"deleted", "downloaded", "packaged", "published", "signed"})),
    "branch": ("branch", frozenset({"created", "deleted"})),
    "build": ("build", frozenset({"finished", "queued", "started"})),
    "change": ("change", frozenset({"abandoned", "created", "merged", "reviewed", "updated"})),
    "environment": ("environment", frozenset({"created", "deleted", "modified"})),
    "incident": ("incident", frozenset({"detected", "reported", "resolved"})),
    "pipelinerun": ("pipelineRun", frozenset({"finished", "queued", "started"})),
    "repository": ("repository", frozenset({"created", "deleted", "modified"})),
    "service": ("service", frozenset({"deployed", "published", "removed", "rolledback", "upgraded"})),
    "taskrun": ("taskRun", frozenset({"finished", "started"})),
    "testcaserun": ("testCaseRun", frozenset({"finished", "queued", "skipped", "started"})),
    "testoutput": ("testOutput", frozenset({"published"})),
    "testsuiterun": ("testSuiteRun", frozenset({"finished", "queued", "started"})),
    "ticket": ("ticket", frozenset({"closed", "created", "updated"})),
}
SDK_MAJOR = 0

_TYPE_RE = re.compile(r"\Adev\.cdevents\.(?P<subject>[a-z]+)\.(?P<predicate>[a-z]+)\.(?P<version>.+)\Z")
_SEMVER_RE = re.compile(
    r"\A(?P<major>0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?\Z"
)
_RFC3339_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z")


def validate_cdevent(body: bytes) -> dict[str, Any]:
    """Return the decoded event, or raise ``ValueError`` saying what is wrong."""
    try:
        event = load_json(body)
    except JSONShapeError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(event, dict):
        raise ValueError("a CDEvent must be a JSON object")
    context, subject = event.get("context"), event.get("subject")
    if not isinstance(context, dict):
        raise ValueError("context: required object")
    if not isinstance(subject, dict):
        raise ValueError("subject: required object")

    type_ = context.get("type")
    if not isinstance(type_, str) or not type_:
        raise ValueError("context.type: required string")
    if type_.startswith("dev.cdeventsx."):
        raise ValueError(f"unknown event type {type_}")
    match = _TYPE_RE.match(type_)
    if match is None:
        raise ValueError(f"cannot parse event type {type_}")
    semver = _SEMVER_RE.match(match["version"])
    if semver is None:
        raise ValueError(f"invalid version format {match['version']}")
    known = V04_EVENTS.get(match["subject"])
    if known is None or match["predicate"] not in known[1]:
        raise ValueError(f"unknown event type {type_}")
    if int(semver["major"]) != SDK_MAJOR:
        raise ValueError(f"sdk event version 0.x not compatible with {match['version']}")

    for key in ("id", "source"):
        _non_empty_string(context, key, "context")
    timestamp = context.get("timestamp")
    if not isinstance(timestamp, str) or not _RFC3339_RE.match(timestamp):
        raise ValueError("context.timestamp: required RFC 3339 date-time")
    try:
        datetime.fromisoformat(timestamp.replace("z", "Z").replace("t", "T"))
    except ValueError:
        raise ValueError("context.timestamp: required RFC 3339 date-time") from None
    for key in ("version", "specversion", "schemaUri", "chainId"):
        if key in context:
            _non_empty_string(context, key, "context")

    _non_empty_string(subject, "id", "subject")
    if "source" in subject and not isinstance(subject["source"], str):
        raise ValueError("subject.source: must be a string")
    subject_type = subject.get("type")
    if subject_type is not None and subject_type != known[0]:
        raise ValueError(f"subject.type: must be {known[0]!r}")
    if subject.get("content") is not None and not isinstance(subject["content"], dict):
        raise ValueError("subject.content: must be an object")
    custom = event.get("customData")
    if custom is not None and not isinstance(custom, dict | str):
        raise ValueError("customData: must be an object or a string")
    if event.get("customDataContentType") is not None and not isinstance(event["customDataContentType"], str):
        raise ValueError("customDataContentType: must be a string")
    return event


def _non_empty_string(obj: dict[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}.{key}: required non-empty string")


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    event_type = req.headers.text(EVENT_HEADER)
    try:
        validate_cdevent(req.body)
    except ValueError as exc:
        raise VerificationError(f"unable to validate CDEvent event: {exc}") from None
    require_event(event_type, ctx, "the CDEvent {} is not authorised")
    return Verified(body=req.body, event=event_type, delivery_id=req.headers.text(DELIVERY_HEADER) or None)
