"""EXECUTE's machinery: one tool call, validate -> gate -> run -> result.

:func:`_execute` runs one turn's calls concurrently (results in call order); :func:`_call_one`
puts one call behind the policy gate (:func:`_screen`: arguments validated before any approver
is asked) and :func:`execute` runs it: timeouts, retries of idempotent tools, result caps.
Everything that can go wrong in a call (bad arguments, an unknown tool, an exception, a hang)
becomes an ``is_error`` tool result whose text says what was wrong and how to fix it, because
the model can often recover and an exception would lose the whole run.

That holds for every ``BaseException`` a tool or an approver raises itself too (SystemExit,
KeyboardInterrupt, GeneratorExit, a stray ``trio.Cancelled``, any other subclass, a group of
them): only two things stop a call instead, a cancellation from outside it (the run's cancel,
a deadline, a fatal error) and a real Ctrl-C (:func:`.cancellation.interrupted_by_signal`),
which cancels the whole run (:func:`_stop_for_signal`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import random
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import pydantic
import trio
from opentelemetry.trace import SpanKind

from ..tracing import spans
from .approvals import DECLINED_BY_A_PERSON
from .cancellation import (
    SignalInterrupt,
    interrupted_by_signal,
    is_cancellation,
    tool_boundary,
)
from .errors import ToolError, exception_type
from .events import ToolFinished, ToolStarted
from .inprocess import SpawnSide
from .messages import ToolResultBlock, ToolUseBlock, canonical_json, well_formed
from .policy import PARK, Decision, Park, PendingCall
from .redact import redact
from .state import AgentNode, RunState, _AskInOrder
from .tools import (
    NotedResult,
    Tool,
    ToolContext,
    ToolRuntime,
    _leaves,
    cap,
    describe_exception,
    error_result,
    to_content,
)

__all__ = ["ASYNCIO_HOST", "execute"]

_SHOWN_PROBLEMS = 10
_SHOWN_PROBLEM_CHARS = 300
"""An argument problem is cut past this many characters."""
_SHOWN_SCHEMA_CHARS = 4_000
"""An argument error quotes the tool's schema up to this size, and names it past it."""
_logger = logging.getLogger(__name__)

HostCall = typing.Callable[
    [typing.Callable[..., typing.Awaitable[Any]], tuple[Any, ...], dict[str, Any]],
    typing.Awaitable[Any],
]
ASYNCIO_HOST: trio.lowlevel.RunVar[HostCall | None] = trio.lowlevel.RunVar(
    "orchestrator_asyncio_host", default=None
)
"""Set by :mod:`orchestrator.aio` in the trio guest run it hosts on an asyncio loop: how an
``async def`` tool is called there (as an asyncio task on the host loop). ``None`` under plain
trio, where such a tool is awaited in its trio task."""


async def _execute(
    node: AgentNode,
    run: RunState,
    calls: list[ToolUseBlock],
    given: dict[int, ToolResultBlock] | None = None,
) -> tuple[ToolResultBlock, ...]:
    """Run the calls concurrently; results come back in call order, one per call.
    ``given``: results that stand for some calls (by position), which do not run (a typed
    agent's rejected ``final_result``)."""
    results: list[ToolResultBlock | None] = [None] * len(calls)
    if given:
        for i, result in given.items():
            results[i] = result
    node.in_flight = results
    node.started_calls.clear()  # ids may repeat across turns: only this step's count
    if run.parking is not None:  # a run that may park calls: which of this step's wait
        run.parking.step_started(node, len(calls) - len(given or ()))
    try:
        if len(calls) == 1 and not given:
            await _call_one(node, run, 0, calls[0], results)
        else:
            node.ask_order = _AskInOrder.for_calls(node, calls)
            async with trio.open_nursery() as nursery:
                for i, call in enumerate(calls):
                    if results[i] is None:
                        nursery.start_soon(_call_one, node, run, i, call, results)
    finally:
        node.ask_order = None
        if node.spawns is not None:  # allowances taken for this step's spawns and not used
            node.spawns.end_step(node)
    node.in_flight = None
    return typing.cast("tuple[ToolResultBlock, ...]", tuple(results))  # every slot is filled


@trio.lowlevel.enable_ki_protection  # a Ctrl-C waits for a checkpoint here; tools are not protected
async def _call_one(  # noqa: C901 - the hot path, kept in one frame (docs/performance.md)
    node: AgentNode,
    run: RunState,
    index: int,
    call: ToolUseBlock,
    results: list[ToolResultBlock | None],
) -> None:
    with spans.span(
        run.tracer,
        "execute_tool",
        call.name,
        SpanKind.INTERNAL,
        partial(spans.tool_attributes, call, run.run_id, node.agent.name, run.capture)
        if run.tracer
        else None,
        cut=partial(run.cut_outcome, node) if run.tracer else None,
    ) as s:
        held = node.tools.get(call.name)
        decision = node.policy.decide(call.name)
        refused_as = "refused"
        replay = None if run.journal is None else await _replayed(node, run, call, held)
        if replay is not None:  # what the journal recorded of the call stands for it
            refusal, result = None, replay
        elif held is not None and decision is Decision.ALLOW:
            refusal = None  # the common case, without building the approver's view of the call
        else:
            refusal, refused_as = await _screen(node, run, index, call, held, decision)
            if isinstance(
                refusal, Park
            ):  # never half-run: on record, then it waits for the run's end
                assert run.parking is not None
                if s.is_recording():
                    s.set_attribute("orchestrator.parked", True)
                await run.parking.park(node, index, call)
        if replay is not None:
            pass
        elif isinstance(refusal, str):
            result = error_result(call.id, refusal, node.runtime.max_result_chars, refused_as)
            if node.spawns is not None:  # a declined spawn's agent allowance goes back now
                node.spawns.decline(node, node.turns, index)
            if s.is_recording():
                s.set_attribute("orchestrator.refused", True)
        else:
            if run.events.enabled:
                run.events.emit(ToolStarted(node.path, call.name, call.id))
            t = node.tools[call.name]
            ctx = (
                ToolContext(
                    run.run_id,
                    node.agent.name,
                    node.path,
                    node.depth,
                    run.deps,
                    call.id,
                    node.turns,
                    s,
                    SpawnSide(run, node, node.turns, index, s) if t.runtime_tool else None,
                )
                if t.takes_context
                else None
            )
            node.started_calls.add(call.id)
            runtime = node.runtime
            cap = node.context.result_caps.get(call.name)
            if cap is not None and cap < runtime.max_result_chars:
                runtime = dataclasses.replace(runtime, max_result_chars=cap)
            try:
                if run.journal is not None:  # before its side effects, on record
                    await run.journaled(
                        run.journal.tool_started(node.path, node.turns, call.id, t.idempotent)
                    )
                result = await execute(t, call, ctx, runtime)
            except BaseException as exc:
                if run.events.enabled:  # a call cut off still ends, for a progress display
                    run.events.emit(ToolFinished(node.path, call.name, call.id, True))
                if interrupted_by_signal(exc):
                    await _stop_for_signal(run, exc)
                raise
        if run.journal is not None and replay is None:  # on record before the model sees it
            await run.journaled(run.journal.record_result(node.path, node.turns, call.id, result))
        results[index] = result
        if run.parking is not None:
            run.parking.call_done(node, index)
        if run.tracer:
            spans.record_tool_result(s, result, run.capture)
        if run.events.enabled:
            why = (
                _refused_why(held, decision, refused_as, refusal)
                if isinstance(refusal, str)
                else ""
            )
            run.events.emit(
                ToolFinished(
                    node.path, call.name, call.id, result.is_error, refusal is not None, why
                )
            )


def _refused_why(held: Tool | None, decision: Decision, refused_as: str, refusal: str) -> str:
    """What kept a call from running, in a few words (see ``ToolFinished.refused_why``)."""
    if held is None:
        return "unknown tool"
    if refused_as == "invalid_arguments":
        return "invalid arguments"
    if decision is Decision.DENY:
        return "denied by policy"
    if "no approver is configured" in refusal:
        return "no approver"
    if refusal.startswith(("the approver failed", "the approver gave no answer")):
        return "approver failed"
    return "declined"


OUTCOME_UNKNOWN = (
    "the run stopped while this call was in flight, and its outcome is unknown (it may or may "
    "not have taken effect): check before calling it again"
)


async def _replayed(
    node: AgentNode, run: RunState, call: ToolUseBlock, held: Tool | None
) -> ToolResultBlock | None:
    """The result a journal recorded for ``call`` (an earlier run of this one made it), or
    ``None`` to run the call. A call that started and has no result was in flight when that
    run stopped: an idempotent one runs again; any other gets an ``is_error`` result saying
    its outcome is unknown. A spawn always runs: its child replays its own record, so the
    result tree is whole."""
    assert run.journal is not None
    if held is not None and held.runtime_tool:
        return None
    recorded = await run.journaled(run.journal.lookup_call(node.path, node.turns, call.id))
    if recorded is None:
        return None
    if recorded.result is not None:
        return recorded.result
    if held is not None and held.idempotent:
        return None
    unknown = error_result(
        call.id, OUTCOME_UNKNOWN, node.runtime.max_result_chars, "outcome_unknown"
    )
    await run.journaled(run.journal.record_result(node.path, node.turns, call.id, unknown))
    return unknown


async def _screen(
    node: AgentNode,
    run: RunState,
    index: int,
    call: ToolUseBlock,
    held: Tool | None,
    decision: Decision,
) -> tuple[str | Park | None, str]:
    """A call the policy does not simply allow: its refusal and error type, ``None`` (it
    runs), or :data:`.policy.PARK` (it waits for a person; a person's decision recorded by an
    earlier run stands for the policy, and an undecided call parks again).

    Arguments are validated before any approver is asked (DESIGN's order); when several calls
    of the turn need approval they are asked in call order, whatever order they started in.
    """
    if run.parking is not None:  # parked by an earlier run: a person's decision, or wait
        decided = run.parking.decision(node, call)
        if decided is True:
            return None, "refused"
        if decided is False:
            return DECLINED_BY_A_PERSON.format(name=call.name), "declined"
        if decided == "parked":
            return PARK, "refused"
    order = node.ask_order if decision is Decision.CONFIRM else None
    try:
        if order is not None:
            await order.wait_turn(index)
        if held is not None and decision is Decision.CONFIRM:
            problem = (
                await _checked_in_thread(held, call, node.runtime)
                if held.checks_in_thread
                else arguments_of(held, call)
            )
            if isinstance(problem, str):
                return problem, "invalid_arguments"  # no approver asked about it
        pending = PendingCall(call.name, call.input, call.id, node.agent.name, node.path)
        try:
            refusal = await node.policy.check(
                pending,
                frozenset(node.tools),
                one_at_a_time=run.approvals,
                on_abandoned_thread=run.abandoned,
            )
        except BaseException as exc:  # the policy turns an approver's Exception into a refusal
            if interrupted_by_signal(exc):
                await _stop_for_signal(run, exc)
            await _unless_cut(exc)
            # the approver's own KeyboardInterrupt, GeneratorExit, ...: fail closed, like the
            # policy does for an Exception
            _logger.warning(
                "the approver raised %s on a call to %r by %s: it was not run",
                exception_type(exc),
                call.name,
                node.path,
            )
            return (
                f"the approver failed ({type(exc).__name__}) on the call to {call.name!r}; "
                "it was not run"
            ), "refused"
        return refusal, "refused"
    finally:
        if order is not None:
            order.done(index)


async def _stop_for_signal(run: RunState, exc: BaseException) -> None:
    """A Ctrl-C raised in a tool (or the CLI's :class:`.cancellation.SignalInterrupt`): the
    run's cancellation, raised here as a ``trio.Cancelled`` so the tree winds down as for
    ``cancel()``. Nothing else asked for it (no cancel, no passed deadline, no fatal error):
    trio's own Ctrl-C handling, so ``open_run`` raises the ``KeyboardInterrupt`` to its caller
    once the tree has ended, as it does when trio delivers the Ctrl-C to the calling task."""
    if not run.cancel_requested and run.fatal_error is None and trio.current_time() < run.deadline:
        if not _holds(exc, SignalInterrupt):  # the program's own handler meant only the cancel
            run.interrupted = exc
        run.cancel_requested = True
        run.scope.cancel()
    await trio.lowlevel.checkpoint()  # raises Cancelled: the run's scope is cancelled or past due


def _holds(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(kind) is not None
    return isinstance(exc, kind)


async def _unless_cut(exc: BaseException) -> None:
    """Raise if the call that ended with ``exc`` is being cut from outside (the run's cancel,
    its deadline, a sibling's fatal error): as a cancellation, whatever the code raised on its
    way out. Return if not: ``exc`` is the code's own, to report (a stray ``trio.Cancelled``
    included: no scope of the runtime's asked for it)."""
    if trio.current_effective_deadline() != -math.inf:
        return
    if is_cancellation(exc):
        raise exc
    await trio.lowlevel.checkpoint()  # a fresh Cancelled, chained to what the code raised


def _only_tool_errors(exc: BaseException) -> bool:
    """A ``ToolError``, or a group of nothing else: the tool's own words for the model."""
    if isinstance(exc, BaseExceptionGroup):
        return all(isinstance(e, ToolError) for e in _leaves(exc))
    return isinstance(exc, ToolError)


def describe_validation_error(t: Tool, exc: pydantic.ValidationError) -> str:
    """What was wrong with the arguments (the first few problems), and the schema to fix them
    against."""
    errors = exc.errors(include_url=False)
    problems = []
    for err in errors[:_SHOWN_PROBLEMS]:
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        problems.append(_cut_problem(f"{loc}: {err['msg']}"))
    if len(errors) > _SHOWN_PROBLEMS:
        problems.append(f"and {len(errors) - _SHOWN_PROBLEMS} more")
    return f"invalid arguments for tool {t.name!r}: {'; '.join(problems)}. {_schema_hint(t)}"


def _cut_problem(text: str) -> str:
    """One problem, cut: a message may quote a long enum or the whole value."""
    if len(text) <= _SHOWN_PROBLEM_CHARS:
        return text
    return f"{text[: _SHOWN_PROBLEM_CHARS - 40]}... ({len(text):,} characters in all)"


def _schema_hint(t: Tool) -> str:
    """The schema to fix a call against: quoted when short; a long one (a 20,000-value enum)
    is in the tool's definition already, and quoting it at each bad call would bill it again."""
    schema = canonical_json(t.input_schema)
    if len(schema) <= _SHOWN_SCHEMA_CHARS:
        return f"Call it again with arguments matching this schema: {schema}"
    return (
        f"Call it again with arguments matching the tool's input schema (in its definition; "
        f"{len(schema):,} characters, not repeated here)"
    )


def arguments_of(t: Tool, call: ToolUseBlock) -> dict[str, Any] | str:
    """The call's validated keyword arguments, or what is wrong with them (for the model)."""
    if type(call.input) is not dict and not isinstance(call.input, Mapping):
        return (
            f"arguments for tool {t.name!r} must be a JSON object, got {type(call.input).__name__}. "
            f"{_schema_hint(t)}"
        )
    try:
        return t.validate(call.input)
    except pydantic.ValidationError as exc:
        return describe_validation_error(t, exc)


async def _checked_in_thread(t: Tool, call: ToolUseBlock, rt: ToolRuntime) -> dict[str, Any] | str:
    """The call's arguments checked in a worker thread, within the call's ``tool_timeout``:
    the validated keyword arguments, or what is wrong (a check that does not end in time
    included: its thread is abandoned and counted, and the call is not run)."""
    limiter = _SeenLimiter(rt.thread_limiter)
    with trio.move_on_after(rt.timeout) if rt.timeout < math.inf else contextlib.nullcontext():
        try:
            return await trio.to_thread.run_sync(
                functools.partial(arguments_of, t, call),
                abandon_on_cancel=True,
                limiter=typing.cast("trio.CapacityLimiter", limiter),
            )
        except BaseException as exc:
            if limiter.acquired and is_cancellation(exc):
                rt.on_abandoned_thread()  # a regular expression cannot be stopped: left to end
            raise
    return (
        f"the arguments for tool {t.name!r} could not be checked against its schema within "
        f"{rt.timeout:g}s (its tool_timeout; a pattern of the schema takes too long on them); "
        f"the call was not run. Send shorter or simpler values"
    )


async def execute(
    t: Tool, call: ToolUseBlock, ctx: ToolContext | None, rt: ToolRuntime
) -> ToolResultBlock:
    """Run one validated call to ``t`` and turn whatever happens into a tool result.

    Sync tools run in a worker thread that a timeout abandons (a Python thread cannot be
    killed); the abandoned thread is reported through ``rt.on_abandoned_thread``. Cancellation
    from outside propagates: the caller records a synthetic result for the cut call. ``ctx`` is
    only built (and only needed) for tools that take one.
    """
    limit = rt.max_result_chars
    if t.checks_in_thread:  # a schema pattern may backtrack for minutes: off the event loop
        checked = await _checked_in_thread(t, call, rt)
        if isinstance(checked, str):
            return error_result(call.id, checked, limit, "invalid_arguments")
        kwargs = checked
    else:
        try:  # arguments_of's work, without its frame on every call: it only words the error
            kwargs = t.validate(call.input)
        except pydantic.ValidationError:
            problem = typing.cast(str, arguments_of(t, call))
            return error_result(call.id, problem, limit, "invalid_arguments")
    args = (ctx,) if t.takes_context else ()
    if t.runtime_tool:
        # spawn_subagent, awaited here and not in _attempt: a child's whole loop runs under
        # this call, and every frame less is one less to pass through at each of its waits.
        # No timeout or retries (the child has its own bounds); a bug in it propagates.
        try:
            value = await t.fn(*args, **kwargs)
        except ToolError as exc:
            message = describe_exception(exc, with_type=False)
            return error_result(call.id, message, limit, "ToolError")
        if isinstance(value, NotedResult):  # its notes follow as blocks of their own
            block = (
                error_result(call.id, value.text, limit, "ToolError")
                if value.is_error
                else _value_result(t, call, value.text, rt)
            )
            return dataclasses.replace(block, notes=value.notes)
        return _value_result(t, call, value, rt)
    attempt = 0
    # tool_timeout bounds the call, retries included: a retry gets what is left of it, and a
    # timeout is final (retrying it would multiply the timeout by the attempts)
    deadline = trio.current_time() + rt.timeout
    while True:
        outcome = await _attempt(t, args, kwargs, rt, deadline)
        if isinstance(outcome, _Ok):
            return _value_result(t, call, outcome.value, rt)
        message = outcome.message
        if not outcome.final and attempt < t.max_retries:
            delay = min(0.25 * 2**attempt, 4.0) * (0.5 + random.random())
            if trio.current_time() + delay < deadline:
                spans.record_retry(attempt + 1, outcome.kind, delay)
                await trio.sleep(delay)
                attempt += 1
                continue
        if attempt:
            message = f"{message} (failed after {attempt + 1} attempts)"
        return error_result(call.id, message, limit, outcome.kind)


def _value_result(t: Tool, call: ToolUseBlock, value: Any, rt: ToolRuntime) -> ToolResultBlock:
    """A tool's return value as its result: shown as text, redacted, capped."""
    try:
        text = to_content(value)
        if not text.isascii():  # a lone surrogate (a name decoded with surrogateescape) cannot
            text = well_formed(text)  # go into an HTTP body
        text = redact(text)
    except Exception as exc:  # a value whose str() or JSON form raises
        return error_result(
            call.id,
            f"tool {t.name!r} returned a {type(value).__name__} that cannot be "
            f"shown as text ({describe_exception(exc)}); return a string or JSON data",
            kind="unshowable_result",
        )
    return ToolResultBlock(call.id, cap(text, rt.max_result_chars))


class _SeenLimiter:
    """The run's thread limiter, remembering whether this call got a slot (so a thread), and
    whether every slot was taken when it asked (a timeout before the slot is not that)."""

    __slots__ = ("acquired", "found_full", "inner")

    def __init__(self, inner: trio.CapacityLimiter) -> None:
        self.inner = inner
        self.acquired = False
        self.found_full = False

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        self.found_full = self.inner.available_tokens == 0
        await self.inner.acquire_on_behalf_of(borrower)
        self.acquired = True

    def release_on_behalf_of(self, borrower: object) -> None:
        self.inner.release_on_behalf_of(borrower)


@dataclass(frozen=True, slots=True)
class _Ok:
    value: Any


@dataclass(frozen=True, slots=True)
class _Failed:
    """What the model reads, the kind of failure, and whether it is final (a ``ToolError``,
    the tool's own last word, and a timeout, which used up the call's time: never retried)."""

    message: str
    kind: str
    final: bool = False


@tool_boundary  # the tool's own code runs unprotected from Ctrl-C (see cancellation.py)
async def _attempt(
    t: Tool, args: tuple[Any, ...], kwargs: dict[str, Any], rt: ToolRuntime, deadline: float
) -> _Ok | _Failed:
    """One call, to end by ``deadline`` (the call's, retries included): the value, or how it
    failed (a timeout is final)."""
    timeout = rt.timeout
    limiter: _SeenLimiter | None = None
    try:
        if t.never_waits:  # no checkpoint in it for a timeout to fire at: skip the cancel scope
            return _Ok(await t.fn(*args, **kwargs))
        if t.is_async:
            fn: typing.Callable[..., typing.Awaitable[Any]] = t.fn
            host = ASYNCIO_HOST.get()
            if host is not None and not _runtime_owned(fn):  # hosted by orchestrator.aio
                fn, args, kwargs = host, (fn, args, kwargs), {}
            if deadline == math.inf:
                return _Ok(await fn(*args, **kwargs))
            with trio.move_on_at(deadline):
                value = await fn(*args, **kwargs)
                if trio.current_time() >= deadline:  # past it, and no checkpoint saw it
                    _held_past_timeout(t, timeout, deadline)
                return _Ok(value)
        else:
            with trio.move_on_at(deadline) if deadline < math.inf else contextlib.nullcontext():
                limiter = _SeenLimiter(rt.thread_limiter)
                try:
                    return _Ok(
                        await trio.to_thread.run_sync(
                            functools.partial(t.fn, *args, **kwargs),
                            abandon_on_cancel=True,
                            limiter=typing.cast("trio.CapacityLimiter", limiter),
                        )
                    )
                except BaseException as exc:
                    # by our timeout or by a cancellation from outside: a thread that got its
                    # slot cannot be stopped, so it is left to finish on its own and counted
                    if limiter.acquired and is_cancellation(exc):
                        rt.on_abandoned_thread()
                    raise
    except Exception as exc:
        if _only_tool_errors(exc):
            return _Failed(describe_exception(exc, with_type=False), "ToolError", final=True)
        return _raised(t, exc)
    except SystemExit as exc:  # say, argparse refusing the model's arguments: not the run's end
        return _Failed(
            f"tool {t.name!r} tried to exit the program (SystemExit {exc.code!r}); "
            "check the arguments, or try a different approach.",
            "SystemExit",
        )
    except BaseException as exc:  # KeyboardInterrupt, GeneratorExit, trio.Cancelled, a group...
        if interrupted_by_signal(exc):  # a real Ctrl-C: the caller cancels the run
            raise
        await _unless_cut(exc)  # cut from outside: a cancellation, whatever the tool raised
        return _raised(t, exc)  # the tool's own: an error result like any exception's
    if limiter is not None and not limiter.acquired:
        if not limiter.found_full:  # a timeout too short to reach the thread at all
            return _Failed(
                f"tool {t.name!r} timed out after {timeout:g}s before it could start; it never "
                "ran, so calling it again is safe",
                "timeout",
                final=True,
            )
        pool = rt.thread_limiter
        return _Failed(
            f"tool {t.name!r} could not start within {timeout:g}s: all {pool.total_tokens} worker "
            "threads for sync tools are busy (tools that timed out earlier may still hold them); "
            "it never ran, so calling it again later is safe",
            "no_worker_thread",
            final=True,
        )
    return _Failed(
        f"tool {t.name!r} timed out after {timeout:g}s and was abandoned; "
        "try a smaller request or a different approach",
        "timeout",
        final=True,
    )


def _held_past_timeout(t: Tool, timeout: float, deadline: float) -> None:
    """An ``async def`` tool came back after its timeout without reaching a checkpoint where
    the timeout could stop it: it held the event loop (its result is kept: it is done)."""
    _logger.warning(
        "tool %r returned %.1fs after its %gs tool_timeout, which could not stop it: it did not "
        "await in that time (it held the event loop: the run's deadline, its other agents and "
        "cancel() all waited for it). Write CPU-bound or blocking work as a sync tool: those "
        "run in a worker thread, abandoned on timeout.",
        t.name,
        trio.current_time() - deadline,
        timeout,
    )


def _runtime_owned(fn: typing.Callable[..., Any]) -> bool:
    """A tool handler of the runtime's own (an MCP server's): it runs on trio, also when the
    run is hosted on asyncio."""
    module = getattr(fn, "__module__", None)
    return isinstance(module, str) and module.startswith("orchestrator.")


def _asyncio_under_trio(t: Tool, exc: BaseException) -> bool:
    """Whether ``exc`` says an asyncio tool ran under plain trio (no asyncio loop running, or
    an asyncio future yielded to trio)."""
    if not t.is_async or ASYNCIO_HOST.get() is not None:
        return False
    if isinstance(exc, TypeError) and "unrecognized yield message" in str(exc):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    if str(exc) == "no running event loop":  # asyncio's words (its C helpers leave no frame)
        return True
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("asyncio"):
            return True
        tb = tb.tb_next
    return False


def _raised(t: Tool, exc: BaseException) -> _Failed:
    if _asyncio_under_trio(t, exc):
        return _Failed(
            f"tool {t.name!r} is written for asyncio ({describe_exception(exc)}), but this run "
            "is under trio, where no asyncio loop runs. Run the tree from asyncio with `await "
            "orchestrator.aio.run(...)` (its asyncio tools run on the asyncio loop), or write "
            "the tool with trio or anyio.",
            "asyncio_tool",
            final=True,
        )
    return _Failed(
        f"tool {t.name!r} raised {describe_exception(exc)}. "
        "Check the arguments, or try a different approach.",
        exception_type(exc),
    )
