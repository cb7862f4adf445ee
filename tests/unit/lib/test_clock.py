"""``lib.clock``: Go's ``time.Time.String()`` shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from notification_controller.lib.clock import ManualClock, SystemClock, go_time_string


def test_go_time_string_shape() -> None:
    text = go_time_string(datetime(2026, 8, 7, 16, 12, 44, 123456, tzinfo=UTC), 42.000000001)
    assert text == "2026-08-07 16:12:44.123456000 +0000 UTC m=+42.000000001"


def _plain(moment: datetime, monotonic: float) -> str:
    """The formula ``go_time_string`` had before it remembered the second (issue 29)."""
    t = moment.astimezone(UTC)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}."
        f"{t.microsecond * 1000:09d} +0000 UTC m=+{monotonic:.9f}"
    )


def test_go_time_string_is_the_plain_formula_across_boundaries() -> None:
    """The remembered second never leaks into the next one, in any order, nor across an offset."""
    plus_two = timezone(timedelta(hours=2))
    moments = [
        datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2027, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
        datetime(2027, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, 0, tzinfo=UTC),  # back in time: the second before
        datetime(2027, 1, 1, 1, 0, 0, 500, tzinfo=plus_two),  # 23:00:00 UTC the day before
        datetime(2027, 1, 1, 1, 0, 0, 500, tzinfo=timezone(timedelta(0))),  # UTC, not the UTC object
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2028, 2, 29, 12, 0, 5, 42, tzinfo=UTC),
        datetime(2028, 2, 29, 12, 0, 5, 43, tzinfo=UTC),
        datetime(2028, 2, 29, 12, 0, 6, 43, tzinfo=UTC),
        datetime(2028, 3, 1, 12, 0, 6, 43, tzinfo=UTC),  # the same time of day, the next day
        datetime(2029, 3, 1, 12, 0, 6, 43, tzinfo=UTC),  # and the next year
    ]
    step = datetime(2026, 8, 7, 16, 12, 43, 999_000, tzinfo=UTC)
    moments += [step + timedelta(microseconds=250 * i) for i in range(12)]  # across 16:12:44
    for index, moment in enumerate(moments):
        for monotonic in (0.0, 1.5, 42.000000001, 123456.987654321):
            assert go_time_string(moment, monotonic) == _plain(moment, monotonic), (index, moment)


def test_a_clocks_time_is_its_now_in_epoch_seconds() -> None:
    """``Clock.time`` (what the per-notification stages read) is ``now()`` without the datetime: the system
    clock's agrees with its ``now`` to well under a second, a manual clock's moves only with ``advance``."""
    system = SystemClock()
    before = system.now().timestamp()
    read = system.time()
    assert before - 0.001 <= read <= system.now().timestamp() + 0.001
    manual = ManualClock(datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC))
    assert (
        manual.time()
        == manual.now().timestamp()
        == datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC).timestamp()
    )
    manual.advance(90.5)
    assert (
        manual.time()
        == manual.now().timestamp()
        == datetime(2026, 3, 1, 12, 1, 30, 750_000, tzinfo=UTC).timestamp()
    )
