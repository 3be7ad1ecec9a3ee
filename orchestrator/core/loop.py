"""The loop of one agent: GENERATE, PARSE, EXECUTE, RESUME, and the stop-reason table.

Each turn calls the model with the assembled transcript (GENERATE; the call is
:mod:`.generate`'s), reads ``stop_reason`` and the tool calls (PARSE), runs the calls
concurrently behind validation and the policy gate (EXECUTE; :mod:`.execute`), and appends the
assistant turn plus one user message holding every result in call order (RESUME). Every way out
(an answer, a bound, an error, a cancellation) goes through :meth:`AgentNode.finish`, which
leaves the transcript valid: each ``tool_use`` answered by exactly one ``tool_result``. This
module knows nothing of subagents: ``spawn_subagent`` is an ordinary tool built by ``spawn.py``.
"""

from __future__ import annotations

import math
import operator
from functools import partial
from typing import Any

import trio
from opentelemetry.trace import Span, SpanKind

from ..models.base import ModelResponse
from ..tracing import spans
from .cancellation import is_cancellation
from .compaction import TurnContext
from .events import AgentFinished, AgentStarted, TurnStarted
from .execute import _execute
from .generate import (
    ContextFull,
    Ended,
    _compact,
    _fit_context,
    _generate,
    _turn_attributes,
    context_window,
    replayed,
)
from .ledger import fixed_units
from .messages import Message, ToolResultBlock, ToolUseBlock, text_of
from .output import FINAL_RESULT, settle_calls, settle_text
from .records import record
from .result import RunStatus
from .state import AgentNode, RunState, _LoopState, tool_specs

__all__ = ["run_agent"]

_DONE = frozenset({"end_turn", "stop_sequence"})
_KNOWN = (
    frozenset({"tool_use", "max_tokens", "pause_turn", "refusal", "model_context_window_exceeded"})
    | _DONE
)
MAX_OUTPUT_CAP = 64_000
_IS_ERROR = operator.attrgetter("is_error")
CONTEXT_EXCEEDED_REASON = "the transcript exceeded the model's context window"
CONTINUE_PROMPT = (
    "Your last reply was cut off by the output limit. Continue exactly where it stopped."
)


def _agent_attributes(node: AgentNode, run: RunState) -> dict[str, Any]:
    out: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": node.agent.name,
        "gen_ai.agent.id": f"{run.run_id}/{node.path}",
        "gen_ai.conversation.id": run.run_id,
        "gen_ai.provider.name": node.model.provider,
        "gen_ai.request.model": node.model.name,
        "orchestrator.agent.path": node.path,
        "orchestrator.agent.depth": node.depth,
    }
    if node.agent.description:
        out["gen_ai.agent.description"] = node.agent.description
    return out


async def run_agent(node: AgentNode, run: RunState) -> None:
    """Run ``node``'s loop to its end. Cancellation from outside still finishes the node."""
    node.started_at = trio.current_time()
    # one frame, not a wrapper's: every agent waits under this one, and each frame on a
    # waiting agent's stack is passed through at each of its wakeups
    parking = run.parking
    if parking is not None:  # a run that may park calls counts who is not waiting
        parking.agent_started(node)
    if run.events.enabled:
        run.events.emit(
            AgentStarted(
                node.path,
                node.agent.name,
                node.depth,
                node.parent.path if node.parent else None,
                node.task,
            )
        )

    with spans.span(
        run.tracer,
        "invoke_agent",
        node.agent.name,
        SpanKind.INTERNAL,
        partial(_agent_attributes, node, run) if run.tracer else None,
        records_outcome=True,
    ) as s:
        try:
            if node.parent is None and run.resumed_from is not None and s.is_recording():
                s.add_link(run.resumed_from, {"orchestrator.link": "resumed_from"})
            if node.parent is None and run.journal is not None:  # the run's start, on record
                ids = s.get_span_context()
                await run.journaled(run.journal.run_started(run.run_id, ids.trace_id, ids.span_id))
            if node.own_deadline < math.inf:  # the agent's own timeout is a cancel scope
                with trio.CancelScope(deadline=node.own_deadline) as own_scope:
                    await _loop(node, run)
                if own_scope.cancelled_caught:
                    node.finish(
                        RunStatus.TIMEOUT, f"agent timeout reached after {node.elapsed():.1f}s"
                    )
            else:
                await _loop(node, run)
        except BaseException as exc:
            if is_cancellation(exc):  # cut from outside (an agent's own timeout is caught above)
                node.finish(*run.cut_status(node))
            raise
        finally:
            if parking is not None:
                parking.agent_finished(node)
            if node.status is None:  # an orchestrator bug is propagating: still leave a valid node
                node.finish(RunStatus.ERROR, "internal error")
            usage = node.subtree_usage()  # the whole subtree's, walked once
            if s.is_recording():
                s.set_attributes(spans.usage_attributes("orchestrator.usage", usage))
                s.set_attributes(spans.usage_attributes("orchestrator.own_usage", node.own_usage))
                s.set_attribute("orchestrator.turns", node.turns)
                s.set_attribute("orchestrator.children", len(node.children))
                spans.record_outcome(
                    s, node.status.value if node.status else "error", node.traced_error(run.capture)
                )
                if node.parent is None and run.capture:  # the run's prompt and answer
                    typed = node.output_json  # None: text, or a typed answer never given
                    spans.record_run_io(
                        s,
                        node.task,
                        (node.output or "") if typed is None else typed,
                        node.status.value if node.status else "error",
                        json_answer=typed is not None,
                    )
            if run.events.enabled:
                run.events.emit(
                    AgentFinished(
                        node.path,
                        node.agent.name,
                        node.status or RunStatus.ERROR,
                        node.error,
                        usage,
                        node.turns,
                    )
                )


@record
class ToolCalls:
    """PARSE's result when the reply asks for tools: the calls EXECUTE runs."""

    calls: list[ToolUseBlock]


@record
class AskAgain:
    """PARSE's result when the reply asks for another model call and no tools: in the same
    turn with a larger output cap (``max_tokens``: a tool call was cut), after compacting
    (``compact``: the context window filled mid-reply), or at the next turn."""

    max_tokens: int | None = None
    compact: bool = False


NEXT_TURN = AskAgain()
Parsed = ToolCalls | AskAgain | Ended
"""What PARSE decides: run tools, ask again, or end the agent (an answer is ``Ended``)."""


async def _loop(node: AgentNode, run: RunState) -> None:
    specs = tool_specs(node)
    node._fixed_chars = fixed_units(node.agent.instructions) + sum(
        t.spec_chars for t in node.tools.values()
    )
    typed = node.agent.output_spec
    checked = typed is not None or bool(node.agent.output_validators)  # a text answer too
    if typed is not None and typed.mode == "tool":  # the answer is this tool's input
        specs.append(typed.tool_spec)
        node._fixed_chars += typed.schema_units
    state = _LoopState(
        specs=specs,
        max_turns=node.limits.max_turns or 1,
        repeat_limit=node.limits.repeat_limit or 1,
        max_errors=node.limits.max_consecutive_errors or 1,
        # compaction needs a threshold: a token count, or a fraction of a known context window
        compaction_threshold=node.context.compaction_threshold(context_window(node.model)),
    )
    while node.status is None:
        node.turns += 1
        if run.events.enabled:
            run.events.emit(TurnStarted(node.path, node.turns))
        with spans.span(
            run.tracer,
            "turn",
            node.agent.name,
            SpanKind.INTERNAL,
            partial(_turn_attributes, run.run_id, node.turns, node.path) if run.tracer else None,
            records_outcome=True,
        ) as turn_span:
            try:
                # GENERATE and PARSE; then EXECUTE and RESUME when the reply calls tools (inline,
                # not a helper's frame: every agent waits here, and each frame on a waiting
                # agent's stack is passed through at each of its wakeups and walked by the GC)
                step: ModelResponse | Ended | None = await _generate_step(
                    node, run, state, turn_span
                )
                parsed = (
                    step if not isinstance(step, ModelResponse) else _parse_step(node, state, step)
                )
                step = None  # not kept through EXECUTE: every object alive across a wait is walked
                if isinstance(parsed, AskAgain) and parsed is not NEXT_TURN:
                    parsed = await _ask_again(node, run, state, turn_span, parsed)
                if isinstance(parsed, ToolCalls):
                    if typed is None or not _calls_final(parsed.calls):
                        _resume_step(node, state, await _execute(node, run, parsed.calls))
                    else:
                        await _final_step(node, run, state, parsed.calls, turn_span)
                elif isinstance(parsed, Ended):
                    if parsed.status is not RunStatus.COMPLETED or not checked:
                        node.finish(parsed.status, parsed.reason, parsed.output)
                    elif not await settle_text(node, run, typed, parsed.output, turn_span):
                        _end_if_no_turns_left(node, state)
            except BaseException as exc:
                if is_cancellation(exc):  # cut from outside: say why, as the agent span will
                    status, reason = run.cut_status(node)
                    spans.record_outcome(turn_span, status.value, reason)
                raise
            if run.tracer:  # a turn that ends the agent states its outcome; others went on ("ok")
                spans.record_outcome(
                    turn_span,
                    node.status.value if node.status else "ok",
                    node.traced_error(run.capture),
                )


def _calls_final(calls: list[ToolUseBlock]) -> bool:
    # a list, not any(<generator>): cheaper for a turn's few calls, on every turn of a typed agent
    return FINAL_RESULT in [c.name for c in calls]


async def _final_step(
    node: AgentNode, run: RunState, state: _LoopState, calls: list[ToolUseBlock], turn_span: Span
) -> None:
    """EXECUTE and RESUME for a typed agent's turn that calls ``final_result``: a valid one
    ends the agent (the turn's other calls do not run); a rejected one is answered with its
    problems, the other calls run as usual, and the turn does not count as a failing one."""
    spec = node.agent.output_spec
    assert spec is not None
    verdict = await settle_calls(node, run, spec, calls, turn_span)
    if verdict.done:
        return
    results = await _execute(node, run, calls, verdict.given)
    _resume_step(node, state, results, rejected=len(verdict.given))
    _end_if_no_turns_left(node, state)


def _end_if_no_turns_left(node: AgentNode, state: _LoopState) -> None:
    """After a rejected answer: the agent is asked again only if it has a turn left."""
    if node.status is None:
        ended = _turns_left(node, state, "without a valid final answer")
        if ended is not None:
            node.finish(ended.status, ended.reason)


async def _ask_again(
    node: AgentNode, run: RunState, state: _LoopState, turn_span: Span, asked: AskAgain
) -> Parsed:
    """What PARSE asked for instead of a next turn: the turn's call made again with a larger
    output cap (a tool call was cut), or a compaction (the context window filled mid-reply)."""
    parsed: Parsed = asked
    while isinstance(parsed, AskAgain) and parsed is not NEXT_TURN:
        if parsed.max_tokens is not None:
            step = await _call_model(node, run, state, parsed.max_tokens, again=True)
            if isinstance(step, ModelResponse):
                node.turn_log.pop()  # the turn is the retried call's: the cut one was dropped
                _record_turn(node, run, turn_span, step, state)
                parsed = _parse_step(node, state, step, larger_cap=True)
            elif isinstance(step, ContextFull):
                parsed = Ended(RunStatus.CONTEXT_EXCEEDED, CONTEXT_EXCEEDED_REASON)
            else:
                parsed = step
        else:  # the reply is not kept: a checkpoint summary replaces the transcript
            state.context_retry = True
            ended = await _compact(node, run, state, overflow=True)
            if ended is not None:
                return ended
            state.compacted_since_last_turn = True
            return _turns_left(node, state, "after compacting") or NEXT_TURN
    return parsed


async def _generate_step(
    node: AgentNode, run: RunState, state: _LoopState, turn_span: Span
) -> ModelResponse | Ended:
    """GENERATE: fit the context, call the model; the reply to parse, or how the agent ends.

    A provider's "input too long" compacts and retries at once. What the reply's
    ``stop_reason`` means is PARSE's to decide.
    """
    state.turn_cleared, compacted = 0, False
    if node.context.clear_results_after is not None or state.compaction_threshold is not None:
        state.turn_cleared, compacted, ended = await _fit_context(node, run, state)
        if ended is not None:
            return ended
    state.turn_compacted = compacted or state.compacted_since_last_turn
    state.compacted_since_last_turn = False
    state.turn_estimate = node.estimate()
    max_tokens = node.agent.max_output_tokens
    response = await (
        _generate(node, run, state.specs, max_tokens)
        if run.journal is None  # a frame less where every agent waits
        else _call_model(node, run, state, max_tokens)
    )
    if (
        isinstance(response, ContextFull)
        and state.compaction_threshold is not None
        and not state.context_retry
    ):
        state.context_retry = True
        ended = await _compact(node, run, state, overflow=True)
        if ended is not None:
            return ended
        state.turn_compacted = True
        state.turn_estimate = node.estimate()
        response = await _call_model(node, run, state, node.agent.max_output_tokens)
    if isinstance(response, ContextFull):
        return Ended(RunStatus.CONTEXT_EXCEEDED, CONTEXT_EXCEEDED_REASON)
    if isinstance(response, Ended):
        return response
    _record_turn(node, run, turn_span, response, state)
    return response


async def _call_model(
    node: AgentNode, run: RunState, state: _LoopState, max_tokens: int, *, again: bool = False
) -> ModelResponse | ContextFull | Ended:
    """One model call of the turn, through the journal when the run keeps one: a response
    recorded for this turn is used instead of calling the model, and a new one is recorded
    before anything acts on it. ``again``: the turn's call made again with a larger output
    cap (the cut reply recorded for the turn is not the one to use: the new one replaces it)."""
    journal = run.journal
    if journal is None:
        return await _generate(node, run, state.specs, max_tokens)
    if not again:
        recorded = await run.journaled(journal.lookup_response(node.path, node.turns))
        if recorded is not None:
            return replayed(node, recorded)
    response = await _generate(node, run, state.specs, max_tokens)
    if isinstance(response, ModelResponse):
        await run.journaled(journal.record_response(node.path, node.turns, response))
    return response


def _record_turn(
    node: AgentNode,
    run: RunState,
    turn_span: Span,
    response: ModelResponse,
    state: _LoopState,
) -> None:
    """The turn's context figures, in ``turn_log`` and on its span."""
    estimate, cleared, compacted = state.turn_estimate, state.turn_cleared, state.turn_compacted
    usage = response.usage
    sent, cache_read = usage.input_tokens, usage.cache_read_tokens
    if usage.requests > 1:  # answers billed then retried as unusable: one request's share
        sent, cache_read = sent // usage.requests, cache_read // usage.requests
    node.turn_log.append(TurnContext(node.turns, estimate, sent, cache_read, cleared, compacted))
    if run.tracer and turn_span.is_recording():
        turn_span.set_attributes(
            {
                "orchestrator.context.input_tokens_estimate": estimate,
                "orchestrator.context.cleared_results": cleared,
                "orchestrator.context.compacted": compacted,
                "orchestrator.context.cache_read_tokens": cache_read,
                "orchestrator.stop_reason": response.stop_reason,
            }
        )


def _parse_step(  # noqa: C901 - the stop-reason table, whole, as its docstring says
    node: AgentNode, state: _LoopState, response: ModelResponse, *, larger_cap: bool = False
) -> Parsed:
    """PARSE: what ``stop_reason`` and the tool calls mean. The stop-reason table, whole.

    Appends the reply to the transcript, except a reply that is asked again (a tool call cut
    by ``max_tokens``, a reply cut by a full context window), which is dropped.
    ``larger_cap``: the reply is the one asked again with a larger output cap.
    """
    stop = response.stop_reason
    calls = _tool_calls(response)
    if stop == "max_tokens" and calls:  # a tool call cut mid-way cannot run
        max_tokens = node.agent.max_output_tokens
        if larger_cap:
            return Ended(
                RunStatus.ERROR,
                f"a tool call was cut by max_tokens twice; raise max_output_tokens (now {max_tokens})",
            )
        return AskAgain(max_tokens=max(max_tokens, min(max_tokens * 2, MAX_OUTPUT_CAP)))
    if (
        stop == "model_context_window_exceeded"
        and state.compaction_threshold is not None
        and not state.context_retry
    ):
        return AskAgain(compact=True)
    if response.content:
        node.append(Message("assistant", response.content))
    if stop in _DONE and not calls:
        output = "".join([*state.cut_text, text_of(response.content)])
        return Ended(RunStatus.COMPLETED, output=output)
    if stop == "refusal":
        return Ended(RunStatus.REFUSAL, "the model refused to continue (stop_reason refusal)")
    if stop == "model_context_window_exceeded":  # and it cannot compact (again)
        return Ended(RunStatus.CONTEXT_EXCEEDED, CONTEXT_EXCEEDED_REASON)
    if stop not in _KNOWN:
        return Ended(
            RunStatus.ERROR, f"unknown stop_reason {stop!r}; refusing to treat it as an answer"
        )
    if stop == "max_tokens":
        if response.content:  # nothing to continue from an empty reply: just ask again
            state.cut_text = (*state.cut_text, text_of(response.content))
            node.append(Message.user(CONTINUE_PROMPT))
        return _turns_left(node, state, "while continuing a cut reply") or NEXT_TURN
    if stop == "pause_turn" and not calls:  # send the transcript back as it is
        state.cut_text = (*state.cut_text, text_of(response.content))  # it goes on next reply
        return _turns_left(node, state, "during pause_turn") or NEXT_TURN
    if not calls:
        return Ended(RunStatus.ERROR, "stop_reason 'tool_use' without any tool call")
    if node.agent.output_spec is not None and _calls_final(calls):
        state.cut_text = ()
        state.context_retry = False
        return ToolCalls(calls)  # an answer, even on the last turn (checked before it runs)
    state.repeats = state.repeats + 1 if _same_calls(calls, state.last_calls) else 1
    state.last_calls = calls
    if state.repeats >= state.repeat_limit:
        return Ended(
            RunStatus.REPEAT_GUARD,
            f"the same tool calls were requested {state.repeats} turns in a row "
            f"({', '.join(sorted(c.name for c in calls))})",
        )
    ended = _turns_left(node, state, "without a final answer")
    if ended is not None:
        return ended
    state.cut_text = ()
    state.context_retry = False
    return ToolCalls(calls)


def _resume_step(
    node: AgentNode, state: _LoopState, results: tuple[ToolResultBlock, ...], rejected: int = 0
) -> None:
    """RESUME: one user message with every result, in call order; count failing turns
    (``rejected``: typed answers among the results, which count against ``output_retries``
    instead)."""
    node.append(Message("user", results))
    failed = all(map(_IS_ERROR, results))  # map, not a generator: most turns have one result
    if rejected:
        failed = len(results) > rejected and sum(map(_IS_ERROR, results)) == len(results)
    state.error_turns = state.error_turns + 1 if failed else 0
    if state.error_turns >= state.max_errors:
        reason = (
            f"every tool call failed in {state.error_turns} consecutive "
            f"turn{'s' if state.error_turns != 1 else ''}"
        )
        node.finish(
            RunStatus.ERROR_THRESHOLD,
            f"{reason}; last error: {results[-1].content[:200]}",
            error_without_content=reason,
        )


def _turns_left(node: AgentNode, state: _LoopState, when: str) -> Ended | None:
    """``max_turns`` if the agent's last turn is used up, else ``None`` (it may go on)."""
    if node.turns >= state.max_turns:
        return Ended(RunStatus.MAX_TURNS, f"reached max_turns ({state.max_turns}) {when}")
    return None


def _same_calls(calls: list[ToolUseBlock], previous: list[ToolUseBlock]) -> bool:
    """Whether two turns ask for the same calls (names and arguments, as a set).

    Dict equality ignores key order, so no canonical JSON is needed for the comparison.
    """
    if len(calls) != len(previous):
        return False
    if len(calls) == 1:
        return calls[0].name == previous[0].name and calls[0].input == previous[0].input
    remaining = [(c.name, c.input) for c in previous]
    for call in calls:
        try:
            remaining.remove((call.name, call.input))
        except ValueError:
            return False
    return True


def _tool_calls(response: ModelResponse) -> list[ToolUseBlock]:
    return [b for b in response.content if isinstance(b, ToolUseBlock)]
