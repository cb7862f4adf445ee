"""The summary's shape: title, one line per object (still failing or last state), the fields, the id."""

from __future__ import annotations

from notification_controller.dispatch.quiet.held import Held, HeldObject
from notification_controller.dispatch.quiet.summary import (
    HELD,
    HELD_BY,
    SHOWN_OBJECTS,
    STILL_FAILING,
    summary_message,
    summary_notification,
)
from tests.unit.dispatch.quiet.test_silences import alert

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def record(objects: int = 2, more: int = 0) -> Held:
    listed = tuple(
        HeldObject(f"kustomization/app-{i}.apps", i + 1, "error" if i % 2 == 0 else "info", f"message {i}")
        for i in range(objects)
    )
    return Held(
        "apps/on-call",
        "uid-1",
        "Silence apps/maint",
        T0 + 7200,
        T0,
        count=sum(o.count for o in listed) + more,
        objects=listed,
        more=more,
    )


def test_the_summary_says_how_many_per_object_and_what_still_fails() -> None:
    title, text, severity, fields = summary_message(record(), T0 + 7200)
    assert title == "Silence apps/maint ended: 3 notifications held, 1 object still failing"
    assert text.splitlines() == [
        "Held from 2026-01-01T00:00:00Z to 2026-01-01T02:00:00Z:",
        "• kustomization/app-0.apps: 1 held, still failing: message 0",
        "• kustomization/app-1.apps: 2 held, last info: message 1",
    ]
    assert severity == "error"
    assert dict(fields) == {
        HELD_BY: "Silence apps/maint",
        HELD: "3",
        STILL_FAILING: "kustomization/app-0.apps",
    }


def test_the_silences_comment_comes_first_one_line_bounded() -> None:
    _, text, _, _ = summary_message(record(), T0, "database upgrade\nsecond line " + "x" * 500)
    assert text.splitlines()[0] == "Comment: database upgrade"
    _, text, _, _ = summary_message(record(), T0, "y" * 5000)
    assert len(text.splitlines()[0]) == len("Comment: ") + 200


def test_nothing_failing_is_an_info_summary_and_long_lists_are_cut() -> None:
    only_info = Held(
        "apps/a",
        "mute",
        "spec.muteTimes",
        T0,
        T0,
        count=1,
        objects=(HeldObject("k/x.apps", 1, "info", "ok"),),
    )
    title, _, severity, fields = summary_message(only_info, T0)
    assert (
        severity == "info"
        and title == "spec.muteTimes ended: 1 notification held"
        and STILL_FAILING not in dict(fields)
    )
    _, text, _, _ = summary_message(record(SHOWN_OBJECTS + 5, more=7), T0)
    assert "• …and 5 more objects" in text and "• …and 7 notifications of further objects" in text
    assert len(text.splitlines()) == 1 + SHOWN_OBJECTS + 2


def test_the_id_is_the_records_so_replicas_make_the_same_notification() -> None:
    a = summary_notification(record(), alert(), "generic", T0 + 7200)
    b = summary_notification(record(), alert(), "generic", T0 + 7300)
    assert a.id == b.id and a.id.startswith("quiet-")
    assert a.event.reason == "QuietSummary" and a.provider.name == "sink" and a.provider_type == "generic"
    assert a.event.involved_object.kind == "Alert"  # no held event kept: the Alert stands for it
