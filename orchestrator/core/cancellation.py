"""Cancellation and checkpoints: the two trio rules the loop leans on.

A nursery whose children were all cancelled raises a group of ``trio.Cancelled``; code that
records how an agent or a span ended must treat that group as the cancellation it is
(:func:`is_cancellation`).

Every model call must be a checkpoint: a model that answers without waiting (a FunctionModel, a
cache) would otherwise let one agent run turn after turn while its siblings never start.
:func:`checkpointed` guarantees that without paying for a second trip through the scheduler
when the call waited anyway, as every network call does.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import trio

__all__ = ["checkpointed", "is_cancellation"]

T = TypeVar("T")


def is_cancellation(exc: BaseException) -> bool:
    """True for ``trio.Cancelled`` and for exception groups made only of cancellations."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(is_cancellation(e) for e in exc.exceptions)
    return False


def checkpointed(awaitable: Awaitable[T], cut_answers: list[Any] | None = None) -> Awaitable[T]:
    """``awaitable`` as a checkpoint: cancelled before it starts, and yielding to the scheduler
    once afterwards if it finished without ever yielding itself.

    A cancellation seen during that yield is raised (see :func:`_drive`); the answer it cuts
    goes to ``cut_answers``, for the caller to bill.
    """
    # a coroutine is driven as it is; any other awaitable through a generator wrapping it
    steps = awaitable if isinstance(awaitable, types.CoroutineType) else _steps_of(awaitable)
    return _drive(steps, cut_answers)


def _steps_of(awaitable: Awaitable[T]) -> Generator[Any, Any, T]:
    # ``__await__`` may return any iterator; a generator delegating to it has send/throw/close
    return (yield from awaitable.__await__())


@types.coroutine
def _drive(
    coro: Generator[Any, Any, T] | Coroutine[Any, Any, T], cut_answers: list[Any] | None
) -> Generator[Any, Any, T]:
    try:
        # a generator-based coroutine may ``yield from`` a coroutine: no ``__await__`` wrapper
        yield from trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        coro.close()  # never started: no "was never awaited" warning
        raise
    # The first step runs here; if it finishes, only the checkpoint is left to do. Otherwise
    # every later step is forwarded to the event loop exactly as ``await`` would.
    try:
        trap = coro.send(None)
    except StopIteration as done:
        yield from trio.lowlevel.cancel_shielded_checkpoint()
        result: T = done.value
        # A deadline that passed, or a Ctrl-C that came, while code before this call blocked
        # the event loop (a tool busy without an await) is only seen by the scheduler during
        # that yield: honour it now, or the agent would go on as if nothing had happened. Only
        # a call that never waited (a test or offline model) gets here, so no other call pays
        # for the check; its answer is not used, but handed over to be billed.
        try:
            yield from trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            if cut_answers is not None:
                cut_answers.append(result)
            raise
        return result
    while True:
        try:
            answer = yield trap
        except BaseException as exc:  # thrown in by the event loop (or by close())
            step: Callable[[Any], Any] = coro.throw
            value: Any = exc
        else:
            step, value = coro.send, answer
        try:
            trap = step(value)
        except StopIteration as done:
            final: T = done.value
            return final
