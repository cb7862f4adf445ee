"""The UI's pure helpers (``server/ui/pages.py``): grouping decisions by event, paths, times, and the template
environment's escaping (autoescape on every template, strict undefined)."""

from __future__ import annotations

import jinja2
import pytest

from notification_controller.history import Outcome, Record
from notification_controller.server.ui.pages import (
    _environment,
    age,
    group_by_event,
    object_path,
    quote_ns,
    quote_ref,
    when,
)


def record(rid: str, event: str, time: float, outcome: Outcome = Outcome.DELIVERED, **more: object) -> Record:
    fields: dict[str, object] = {
        "id": rid,
        "time": time,
        "event_id": event,
        "notification_id": "",
        "object": "Kustomization/flux-system/apps",
        "severity": "info",
        "reason": "ReconciliationSucceeded",
        "message": "ok",
        "alert": "flux-system/all",
        "provider": "flux-system/sink",
        "provider_type": "generic",
        "outcome": outcome,
    }
    fields.update(more)
    return Record(**fields)  # type: ignore[arg-type]


def test_decisions_are_grouped_by_event_in_the_order_of_their_newest_decision() -> None:
    records = [record("4", "b", 4.0), record("3", "a", 3.0), record("2", "b", 2.0), record("1", "", 1.0)]
    groups = group_by_event(records)
    assert [g.event_id for g in groups] == ["b", "a", ""]
    assert [r.id for r in groups[0].records] == ["4", "2"]
    assert groups[0].time == 2.0
    assert [r.id for r in groups[2].records] == ["1"]  # no event id: on its own


def test_paths_encode_every_segment() -> None:
    assert object_path("Kustomization/flux-system/apps") == "/objects/Kustomization/flux-system/apps"
    assert object_path("Kind/ns/a b?c#d") == "/objects/Kind/ns/a%20b%3Fc%23d"
    assert object_path("") == "" and object_path("a/b") == "" and object_path("a//c") == ""
    assert object_path("a/b/c/d") == ""
    assert quote_ns("ns/na/me") == "ns/na%2Fme"
    assert quote_ref("../x") == "..%2Fx"


def test_times() -> None:
    assert when(None) == "—"
    assert when(0.0) == "1970-01-01 00:00:00Z"
    assert (
        age(None) == "—" and age(5) == "5s" and age(125) == "2m" and age(7300) == "2h" and age(90000) == "1d"
    )
    assert age(-3) == "0s"


def test_templates_escape_and_refuse_undefined_values() -> None:
    env = _environment()
    assert env.autoescape is True
    hostile = "<script>alert(1)</script>\"'&"
    html = env.from_string("<p title='{{ v }}'>{{ v }}</p>").render(v=hostile)
    assert "<script>" not in html and "&lt;script&gt;" in html and "&#39;" in html and "&#34;" in html
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()
