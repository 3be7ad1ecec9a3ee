"""Cancellation and checkpoints: the two trio rules the loop leans on.

A nursery whose children were all cancelled raises a group of ``trio.Cancelled``; code that
records how an agent or a span ended must treat that group as the cancellation it is
(:func:`is_cancellation`).

Every model call must be a checkpoint: a model that answers without waiting (a FunctionModel, a
cache) would otherwise let one agent run turn after turn while its siblings never start.
:func:`checkpointed` guarantees that without paying for a second trip through the scheduler
when the call waited anyway, as every network call does.

Ctrl-C: trio turns a SIGINT into ``KeyboardInterrupt`` raised right where the code is, unless
that code is protected from it (trio's own, and the runtime's: :class:`~.run.RunHandle`'s task
and every tool call's bookkeeping), where it is delivered at the calling task's next checkpoint
instead. A tool's own code is never protected (:func:`tool_boundary`): a Ctrl-C can stop a tool
that computes without awaiting, as in plain Python. :func:`interrupted_by_signal` tells that
``KeyboardInterrupt`` from one a tool raises itself, and :func:`in_tool_code` tells a signal
handler whether it interrupted a tool (see the CLI's signal handling).
"""

from __future__ import annotations

import signal
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import trio

__all__ = [
    "SignalInterrupt",
    "checkpointed",
    "in_tool_code",
    "interrupted_by_signal",
    "is_cancellation",
    "tool_boundary",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_TOOL_BOUNDARIES: set[types.CodeType] = set()
_TRIO_KI = "trio._core._ki"
"""The module of trio's SIGINT handler: a ``KeyboardInterrupt`` raised in its frame is a Ctrl-C."""


def is_cancellation(exc: BaseException) -> bool:
    """True for ``trio.Cancelled`` and for exception groups made only of cancellations."""
    if isinstance(exc, trio.Cancelled):
        return True
    stack = [exc]  # iterative: a tool may raise a group of groups thousands deep
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        elif not isinstance(e, trio.Cancelled):
            return False
    return True


class SignalInterrupt(KeyboardInterrupt):
    """What a program's signal handler raises into a tool that holds the event loop (the
    CLI's, on Ctrl-C, SIGTERM or a passed deadline), so the run can wind down: the runtime
    takes it as the run's cancellation, never as the tool's own error."""


def tool_boundary(fn: F) -> F:
    """Mark ``fn`` as where the runtime calls a user's tool: the code it calls is not protected
    from ``KeyboardInterrupt`` (the runtime's code around it is), and :func:`in_tool_code`
    recognises frames under it. A mark on the code object: nothing runs per call."""
    _TOOL_BOUNDARIES.add(fn.__code__)
    return trio.lowlevel.disable_ki_protection(fn)


def in_tool_code(frame: types.FrameType | None) -> bool:
    """Whether ``frame`` (the one a signal handler interrupted) runs a tool's own code, where
    raising an exception is as safe as the tool raising it: under a :func:`tool_boundary`, and
    not in code trio protects (trio's internals the tool called into)."""
    if frame is None or trio.lowlevel.currently_ki_protected():
        return False
    while frame is not None:
        if frame.f_code in _TOOL_BOUNDARIES:
            return True
        frame = frame.f_back
    return False


def interrupted_by_signal(exc: BaseException) -> bool:
    """True if ``exc`` is, or a group holding, a ``KeyboardInterrupt`` that a signal handler
    raised (trio's own on Ctrl-C, the program's SIGINT handler, or a :class:`SignalInterrupt`),
    and not one that user code raised itself: the handler's frame is in its traceback."""
    if isinstance(exc, BaseExceptionGroup):
        return any(interrupted_by_signal(e) for e in exc.exceptions)
    if not isinstance(exc, KeyboardInterrupt):
        return False
    if isinstance(exc, SignalInterrupt):
        return True
    handler = signal.getsignal(signal.SIGINT)
    handler_code = getattr(handler, "__code__", None)
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is handler_code or frame.f_globals.get("__name__") == _TRIO_KI:
            return True
        tb = tb.tb_next
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
        yield from trio.lowlevel.checkpoint_if_cancelled()  # noqa: ASYNC105 - yield from awaits
    except BaseException:
        coro.close()  # never started: no "was never awaited" warning
        raise
    # The first step runs here; if it finishes, only the checkpoint is left to do. Otherwise
    # every later step is forwarded to the event loop exactly as ``await`` would.
    try:
        trap = coro.send(None)
    except StopIteration as done:
        yield from trio.lowlevel.cancel_shielded_checkpoint()  # noqa: ASYNC105 - as await
        result: T = done.value
        # A deadline that passed, or a Ctrl-C that came, while code before this call blocked
        # the event loop (a tool busy without an await) is only seen by the scheduler during
        # that yield: honour it now, or the agent would go on as if nothing had happened. Only
        # a call that never waited (a test or offline model) gets here, so no other call pays
        # for the check; its answer is not used, but handed over to be billed.
        try:
            yield from trio.lowlevel.checkpoint_if_cancelled()  # noqa: ASYNC105 - yield from awaits
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
