"""The trio rules the loop leans on: what counts as a cancellation, and model calls as checkpoints."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from orchestrator.core.cancellation import checkpointed, is_cancellation


def test_a_group_of_cancellations_is_a_cancellation_but_a_mixed_group_is_not() -> None:
    cancelled = trio.Cancelled._create()
    assert is_cancellation(cancelled)
    assert is_cancellation(BaseExceptionGroup("g", [cancelled, trio.Cancelled._create()]))
    assert not is_cancellation(BaseExceptionGroup("g", [cancelled, ValueError("x")]))
    assert not is_cancellation(ValueError("x"))


class _StepCounter(trio.abc.Instrument):
    """Counts how often the scheduler resumes one task (each time it yielded)."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def _trips_through_the_scheduler(
    awaitable_factory: Callable[[], Awaitable[object]],
) -> tuple[object, int]:
    counter = _StepCounter(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(counter)
    try:
        value = await checkpointed(awaitable_factory())
    finally:
        trio.lowlevel.remove_instrument(counter)
    return value, counter.steps


async def test_a_call_that_never_waits_still_goes_through_the_scheduler_once() -> None:
    async def instant() -> str:
        return "answer"

    value, trips = await _trips_through_the_scheduler(instant)
    assert value == "answer"
    assert trips == 1


async def test_a_call_that_waits_gets_no_extra_trip_through_the_scheduler() -> None:
    async def waits_once() -> str:
        await trio.lowlevel.cancel_shielded_checkpoint()
        return "answer"

    value, trips = await _trips_through_the_scheduler(waits_once)
    assert value == "answer"
    assert trips == 1  # its own wait, and nothing added


async def test_exceptions_and_results_pass_through_several_waits() -> None:
    async def waits_then_fails() -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        raise ValueError("from the model")

    with pytest.raises(ValueError, match="from the model"):
        await checkpointed(waits_then_fails())


async def test_a_cancelled_caller_never_starts_the_call_and_leaves_no_warning() -> None:
    started = False

    async def call() -> None:
        nonlocal started
        started = True

    coro = call()
    with trio.CancelScope() as scope:
        scope.cancel()
        await checkpointed(coro)
    assert scope.cancelled_caught
    assert not started
    assert coro.cr_frame is None  # closed: no "coroutine was never awaited" when it is collected


async def test_cancellation_while_the_call_waits_reaches_the_call(autojump_clock: Any) -> None:
    cleaned_up = False

    async def slow() -> None:
        nonlocal cleaned_up
        try:
            await trio.sleep(10)
        finally:
            cleaned_up = True

    with trio.move_on_after(1) as scope:
        await checkpointed(slow())
    assert scope.cancelled_caught
    assert cleaned_up
    assert trio.current_time() == pytest.approx(1)


class _Awaitable:
    """An awaitable that is not a coroutine, with a plain iterator for ``__await__``."""

    def __init__(self, waits: bool) -> None:
        self.waits = waits

    def __await__(self):  # type: ignore[no-untyped-def]
        if self.waits:
            return trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105 - awaited by __await__
        return iter(())  # finishes at once (its value is None)


async def test_awaitables_that_are_not_coroutines_are_driven_the_same_way() -> None:
    assert await _trips_through_the_scheduler(lambda: _Awaitable(waits=False)) == (None, 1)
    assert await _trips_through_the_scheduler(lambda: _Awaitable(waits=True)) == (None, 1)


async def test_a_deadline_passed_while_the_loop_was_blocked_stops_a_call_that_never_waits(
    autojump_clock: Any,
) -> None:
    # a tool busy without an await blocks the event loop past the run's deadline; the next
    # model call answers at once: the scheduler sees the deadline only during the call's one
    # trip through it, and the agent must end with timeout rather than take the answer
    from orchestrator import Agent, Limits, RunStatus, run, tool
    from orchestrator.models import ScriptedModel, text, tool_call

    @tool
    async def busy() -> str:
        """Work without ever awaiting (virtual time: the clock moves past the deadline as the
        work's seconds would, and the tool surely starts before it, whatever the load)."""
        autojump_clock.jump(30)
        return "done"

    model = ScriptedModel([tool_call("busy", {}), text("finished")])
    result = await run(Agent("a", "A.", model=model, tools=[busy]), "go", limits=Limits(timeout=10))
    assert result.status is RunStatus.TIMEOUT, result.output
    assert result.own_usage.requests == 2  # the late answer is not used, but it is billed
