"""``core.metadata``: cleanup, the token exclusion and combining metadata (reference §3.2, §3.4, §3.6)."""

from __future__ import annotations

from notification_controller.core.metadata import (
    cleanup_metadata,
    combine_metadata,
    exclude_internal_metadata,
)

KS = "kustomize.toolkit.fluxcd.io"


def test_cleanup_keeps_group_and_event_prefixes_and_drops_checksum_digest() -> None:
    md = {
        f"{KS}/revision": "r",
        f"{KS}/Checksum": "c",
        f"{KS}/digest": "d",
        "event.toolkit.fluxcd.io/deploy": "x",
        "helm.toolkit.fluxcd.io/revision": "other-group",
        "plain": "p",
    }
    assert cleanup_metadata(md, KS) == {f"{KS}/revision": "r", "event.toolkit.fluxcd.io/deploy": "x"}


def test_token_is_excluded_before_forwarding() -> None:
    assert exclude_internal_metadata({f"{KS}/token": "t", f"{KS}/revision": "r"}, KS) == {
        f"{KS}/revision": "r"
    }


def test_combine_precedence_and_conflicts() -> None:
    md = {
        "event.toolkit.fluxcd.io/env": "annot",
        "event.toolkit.fluxcd.io/summary": "annot-sum",
        f"{KS}/env": "ctrl",
    }
    combined = combine_metadata(md, KS, {"env": "alert", "team": "a"}, "alert summary")
    assert combined.metadata == {"env": "ctrl", "summary": "alert summary", "team": "a"}
    assert combined.conflicts == {
        "env": [
            "involved object annotations",
            "Alert object .spec.eventMetadata",
            "involved object controller metadata",
        ],
        "summary": ["involved object annotations", "Alert object .spec.summary"],
    }
