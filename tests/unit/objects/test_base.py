"""The store's alert index never misses an Alert that matching would accept (reference §3.5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.core.matching import SourceMatch, compile_alert
from notification_controller.objects.base import ObjectStore

NAMESPACES = ["a", "b"]
KINDS = ["Kustomization", "GitRepository"]
NAMES = ["x", "y", "*"]

sources = st.lists(
    st.fixed_dictionaries(
        {
            "kind": st.sampled_from(KINDS),
            "name": st.sampled_from(NAMES),
            "namespace": st.sampled_from([*NAMESPACES, None]),
        }
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(sources, min_size=1, max_size=8),
    st.sampled_from(NAMESPACES),
    st.sampled_from(KINDS),
    st.sampled_from(["x", "y", "z"]),
)
def test_indexed_candidates_cover_every_possible_match(
    alert_sources: list[list[dict[str, str | None]]], ns: str, kind: str, name: str
) -> None:
    store = ObjectStore()
    alerts = []
    for i, srcs in enumerate(alert_sources):
        cleaned = [{k: v for k, v in src.items() if v is not None} for src in srcs]
        alert = Alert.model_validate(
            {
                "metadata": {"name": f"alert-{i}", "namespace": NAMESPACES[i % 2]},
                "spec": {"providerRef": {"name": "p"}, "eventSources": cleaned},
            }
        )
        alerts.append(alert)
        store.upsert(alert)
    event = Event.model_validate(
        {"involvedObject": {"kind": kind, "namespace": ns, "name": name}, "severity": "info"}
    )
    candidates = store.alerts_for(ns, kind, name)
    names = [c.name for c in candidates]
    assert len(names) == len(set(names)), "an Alert must appear once"
    expected = {
        a.metadata.name for a in alerts if compile_alert(a).match_sources(event) is not SourceMatch.NO
    }
    assert expected <= set(names)
    # and nothing irrelevant: every candidate has a source for this namespace/kind that could match
    assert set(names) == expected


def test_deleting_an_alert_removes_it_from_every_bucket() -> None:
    store = ObjectStore()
    alert = Alert.model_validate(
        {
            "metadata": {"name": "both", "namespace": "a"},
            "spec": {
                "providerRef": {"name": "p"},
                "eventSources": [
                    {"kind": "Kustomization", "name": "*"},
                    {"kind": "Kustomization", "name": "x"},
                ],
            },
        }
    )
    store.upsert(alert)
    assert [c.name for c in store.alerts_for("a", "Kustomization", "x")] == ["both"]
    store.delete("Alert", "a", "both")
    assert store.alerts_for("a", "Kustomization", "x") == ()
    assert store.alerts_for("a", "Kustomization") == ()
