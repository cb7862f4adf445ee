"""Event metadata: cleanup on ingest (reference §3.2) and combination per Alert (reference §3.6)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..api.event import EVENT_ANNOTATION_PREFIX, MD_CHECKSUM, MD_DIGEST, MD_TOKEN

SOURCE_ANNOTATIONS = "involved object annotations"
SOURCE_ALERT_METADATA = "Alert object .spec.eventMetadata"
SOURCE_ALERT_SUMMARY = "Alert object .spec.summary"
SOURCE_CONTROLLER = "involved object controller metadata"


def cleanup_metadata(metadata: Mapping[str, str], object_group: str) -> dict[str, str]:
    """Keep ``event.toolkit.fluxcd.io/*`` and ``<group>/*`` keys, minus ``<group>/checksum|digest``."""
    group_prefix, dropped = _cleanup_keys(object_group)
    out: dict[str, str] = {}
    for key, value in metadata.items():
        if key.startswith(EVENT_ANNOTATION_PREFIX) or key.startswith(group_prefix):
            if key.lower() in dropped:
                continue
            out[key] = value
    return out


@functools.lru_cache(maxsize=64)  # the few API groups of Flux's controllers (a client's: bounded)
def _cleanup_keys(object_group: str) -> tuple[str, frozenset[str]]:
    """``<group>/`` and the lower-cased ``<group>/checksum|digest`` keys ``cleanup_metadata`` drops."""
    prefix = object_group + "/"
    return prefix, frozenset({(prefix + MD_CHECKSUM).lower(), (prefix + MD_DIGEST).lower()})


def exclude_internal_metadata(metadata: Mapping[str, str], object_group: str) -> dict[str, str]:
    """Drop ``<group>/token``: it counts for duplicate detection but is never forwarded (§3.4)."""
    token_key = f"{object_group}/{MD_TOKEN}"
    return {k: v for k, v in metadata.items() if k != token_key}


@dataclass(slots=True)  # never mutated; not frozen: made for every notification (issue 29)
class CombinedMetadata:
    metadata: dict[str, str]
    conflicts: dict[str, list[str]] = field(default_factory=dict)


def combine_metadata(
    metadata: Mapping[str, str],
    object_group: str,
    alert_event_metadata: Mapping[str, str] | None,
    alert_summary: str | None,
) -> CombinedMetadata:
    """Precedence low → high: annotations, ``spec.eventMetadata``, ``spec.summary``, controller metadata.

    Returns the prefix-stripped metadata and, for keys set by more than one source, the sources in
    that order (Flux emits one ``MetadataAppendFailed`` Warning listing them).
    """
    prefix_len = len(EVENT_ANNOTATION_PREFIX)
    group_prefix = object_group + "/"
    group_len = len(group_prefix)
    # Fast pass (every event, once per matching Alert): build the result without tracking sources.
    # A key set twice shows as fewer keys than puts; only then take the pass that names the sources.
    out: dict[str, str] = {}
    puts = 0
    controller: list[str] = []
    for key, value in metadata.items():
        if key.startswith(EVENT_ANNOTATION_PREFIX):
            out[key[prefix_len:]] = value
            puts += 1
        elif key.startswith(group_prefix):
            controller.append(key)
    if alert_event_metadata:
        out.update(alert_event_metadata)
        puts += len(alert_event_metadata)
    if alert_summary:
        out["summary"] = alert_summary
        puts += 1
    for key in controller:
        out[key[group_len:]] = metadata[key]
    puts += len(controller)
    if len(out) == puts:
        return CombinedMetadata(out)
    return _combine_with_sources(metadata, group_prefix, alert_event_metadata, alert_summary)


def _combine_with_sources(
    metadata: Mapping[str, str],
    group_prefix: str,
    alert_event_metadata: Mapping[str, str] | None,
    alert_summary: str | None,
) -> CombinedMetadata:
    sources: dict[str, list[str]] = {}
    out: dict[str, str] = {}

    def put(key: str, value: str, source: str) -> None:
        out[key] = value
        sources.setdefault(key, []).append(source)

    for key, value in metadata.items():
        if key.startswith(EVENT_ANNOTATION_PREFIX):
            put(key[len(EVENT_ANNOTATION_PREFIX) :], value, SOURCE_ANNOTATIONS)
    for key, value in (alert_event_metadata or {}).items():
        put(key, value, SOURCE_ALERT_METADATA)
    if alert_summary:
        put("summary", alert_summary, SOURCE_ALERT_SUMMARY)
    for key, value in metadata.items():
        if key.startswith(group_prefix) and not key.startswith(EVENT_ANNOTATION_PREFIX):
            put(key[len(group_prefix) :], value, SOURCE_CONTROLLER)
    conflicts = {k: v for k, v in sources.items() if len(v) > 1}
    return CombinedMetadata(out, conflicts)
