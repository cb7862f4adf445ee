"""The one stage runner (``dispatch/stage.py``): synchronous while every stage is, in order across awaits,
a ``Drop`` or a raise stops the list and is reported once. Pure: plain functions as stages."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from notification_controller.dispatch.model import Drop
from notification_controller.dispatch.stage import Runner, Stage, StageLike, name_of


class Box:
    """The value the stages pass on (the runner is told its type, as it is ``Draft`` or ``Delivery``)."""

    def __init__(self, trail: tuple[str, ...] = ()) -> None:
        self.trail = trail

    def plus(self, step: str) -> Box:
        return Box((*self.trail, step))


class Calls:
    def __init__(self) -> None:
        self.dropped: list[tuple[tuple[str, ...], Drop]] = []
        self.failed: list[tuple[tuple[str, ...], str, str]] = []

    def runner(self, *stages: StageLike[Box]) -> Runner[Box]:
        return Runner(stages, Box, self.drop, self.fail)

    def drop(self, value: Any, drop: Drop) -> None:
        self.dropped.append((value.trail, drop))

    def fail(self, value: Any, stage: StageLike[Any], exc: Exception) -> None:
        self.failed.append((value.trail, name_of(stage), type(exc).__name__))


def sync(step: str) -> Stage[Box]:
    return Stage(step, lambda box: box.plus(step))


def later(step: str) -> Stage[Box]:
    async def run(box: Box) -> Box:
        await asyncio.sleep(0)
        return box.plus(step)

    return Stage(step, run)


def test_every_stage_synchronous_is_answered_without_an_awaitable() -> None:
    calls = Calls()
    out = calls.runner(sync("a"), sync("b"), sync("c")).run(Box())
    assert isinstance(out, Box) and out.trail == ("a", "b", "c")
    assert not inspect.isawaitable(out)


async def test_an_awaiting_stage_turns_the_rest_into_one_awaitable_in_order() -> None:
    calls = Calls()
    out = calls.runner(sync("a"), later("b"), sync("c"), later("d"), sync("e")).run(Box())
    assert inspect.isawaitable(out)
    box = await out
    assert box is not None and box.trail == ("a", "b", "c", "d", "e")
    assert calls.dropped == [] and calls.failed == []


@pytest.mark.parametrize("where", [0, 1, 2])
async def test_a_drop_stops_the_list_and_is_reported_once(where: int) -> None:
    calls = Calls()
    seen: list[str] = []

    def dropper(box: Box) -> Drop:
        return Drop("noise", "no")

    async def async_dropper(box: Box) -> Drop:
        return Drop("noise", "no")

    def after(box: Box) -> Box:
        seen.append("after")
        return box

    stages: list[StageLike[Box]] = [sync("a"), later("b")]
    stages.insert(where, Stage("drop", dropper if where != 1 else async_dropper))
    stages.append(Stage("after", after))
    out = calls.runner(*stages).run(Box())
    result = await out if inspect.isawaitable(out) else out
    assert result is None and seen == []
    [(trail, drop)] = calls.dropped
    assert drop.reason == "noise" and trail == ("a", "b")[:where]


async def test_a_stage_that_raises_before_or_after_awaiting_is_reported_with_its_name() -> None:
    def boom(box: Box) -> Box:
        raise ValueError("bug")

    async def late_boom(box: Box) -> Box:
        await asyncio.sleep(0)
        raise KeyError("bug")

    calls = Calls()
    assert calls.runner(sync("a"), Stage("boom", boom), sync("c")).run(Box()) is None
    assert await calls.runner(later("a"), Stage("late", late_boom), sync("c")).finish(Box()) is None
    assert calls.failed == [(("a",), "boom", "ValueError"), (("a",), "late", "KeyError")]


async def test_finish_runs_a_whole_list_of_awaiting_stages() -> None:
    """The pre-send list: ``finish(value)`` from the first stage, the same loop as the pre-queue resume."""
    calls = Calls()
    box = await calls.runner(later("hooks"), later("template"), sync("thread")).finish(Box())
    assert box is not None and box.trail == ("hooks", "template", "thread")
    assert await calls.runner().finish(Box(("x",))) is not None


async def test_cancellation_is_not_a_stage_failure() -> None:
    calls = Calls()
    gate = asyncio.Event()

    async def hold(box: Box) -> Box:
        await gate.wait()
        return box

    task = asyncio.ensure_future(calls.runner(Stage("hold", hold)).finish(Box()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls.failed == []
