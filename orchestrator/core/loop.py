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
from opentelemetry.trace import SpanKind

from ..models.base import ModelResponse
from ..tracing import spans
from .cancellation import is_cancellation
from .compaction import TurnContext
from .events import AgentFinished, AgentStarted, TurnStarted
from .execute import _execute
from .generate import (
    CONTEXT_FULL,
    _compact,
    _fit_context,
    _generate,
    _turn_attributes,
    context_window,
)
from .limits import fixed_units
from .messages import Message, ToolResultBlock, ToolUseBlock, text_of
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


async def _loop(node: AgentNode, run: RunState) -> None:
    specs = tool_specs(node)
    node._fixed_chars = fixed_units(node.agent.instructions) + sum(
        t.spec_chars for t in node.tools.values()
    )
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
                response = await _generate_step(node, run, state, turn_span)
                calls = [] if response is None else _parse_step(node, state, response)
                # the reply is not kept through the next model call (its calls are, as the
                # repeat guard's last_calls): every object alive across a wait is walked by the GC
                response = None
                if calls:  # none: the agent ended, or the reply asks for another model call
                    _resume_step(node, state, await _execute(node, run, calls))
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


async def _generate_step(
    node: AgentNode, run: RunState, state: _LoopState, turn_span: Any
) -> ModelResponse | None:
    """GENERATE: fit the context, call the model; ``None`` when there is nothing to parse.

    ``None`` means the agent ended, or it compacted after a reply cut by a full context window
    and the next turn asks again. A provider's "input too long" compacts and retries at once;
    a tool call cut by ``max_tokens`` is retried once with a larger output cap.
    """
    cleared, compacted = 0, False
    if node.context.clear_results_after is not None or state.compaction_threshold is not None:
        cleared, compacted = await _fit_context(node, run, state)
    compacted, state.compacted_since_last_turn = compacted or state.compacted_since_last_turn, False
    if node.status is not None:
        return None
    estimate = node.estimate()
    max_tokens = node.agent.max_output_tokens
    response = await _generate(node, run, state.specs, max_tokens)
    if (
        response is CONTEXT_FULL
        and state.compaction_threshold is not None
        and not state.context_retry
    ):
        state.context_retry = True
        if not await _compact(node, run, state, overflow=True):
            return None
        compacted = True
        estimate = node.estimate()
        response = await _generate(node, run, state.specs, max_tokens)
    if response is CONTEXT_FULL:
        node.finish(RunStatus.CONTEXT_EXCEEDED, CONTEXT_EXCEEDED_REASON)
        return None
    if response is None:
        return None
    _record_turn(node, run, turn_span, estimate, cleared, compacted, response)
    if response.stop_reason == "max_tokens" and _tool_calls(response):
        response = await _generate(
            node, run, state.specs, max(max_tokens, min(max_tokens * 2, MAX_OUTPUT_CAP))
        )
        if response is None or response is CONTEXT_FULL:
            if node.status is None:
                node.finish(RunStatus.CONTEXT_EXCEEDED, CONTEXT_EXCEEDED_REASON)
            return None
        node.turn_log.pop()  # the turn is the retried call's: the cut one was dropped
        _record_turn(node, run, turn_span, estimate, cleared, compacted, response)
        if response.stop_reason == "max_tokens" and _tool_calls(response):
            node.finish(
                RunStatus.ERROR,
                f"a tool call was cut by max_tokens twice; raise max_output_tokens (now {max_tokens})",
            )
            return None
    if (
        response.stop_reason == "model_context_window_exceeded"
        and state.compaction_threshold is not None
        and not state.context_retry
    ):
        # the reply was cut by a full context window: it is not kept, a checkpoint summary
        # replaces the transcript, and the next turn asks again
        state.context_retry = True
        if await _compact(node, run, state, overflow=True):
            state.compacted_since_last_turn = True
            _check_turns(node, state, "after compacting")
        return None
    return response


def _record_turn(
    node: AgentNode,
    run: RunState,
    turn_span: Any,
    estimate: int,
    cleared: int,
    compacted: bool,
    response: ModelResponse,
) -> None:
    """The turn's context figures, in ``turn_log`` and on its span."""
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


def _parse_step(node: AgentNode, state: _LoopState, response: ModelResponse) -> list[ToolUseBlock]:
    """PARSE: act on ``stop_reason``; return the tool calls to execute (none: no EXECUTE).

    Appends the reply to the transcript. Ends the agent on an answer or a bound, and sets up
    the next model call for ``max_tokens`` and ``pause_turn``.
    """
    stop = response.stop_reason
    calls = _tool_calls(response)
    if response.content:
        node.append(Message("assistant", response.content))
    if stop in _DONE and not calls:
        node.finish(
            RunStatus.COMPLETED, output="".join([*state.cut_text, text_of(response.content)])
        )
        return []
    if stop == "refusal":
        node.finish(RunStatus.REFUSAL, "the model refused to continue (stop_reason refusal)")
        return []
    if stop == "model_context_window_exceeded":  # and it could not compact (_generate_step)
        node.finish(RunStatus.CONTEXT_EXCEEDED, CONTEXT_EXCEEDED_REASON)
        return []
    if stop not in _KNOWN:
        node.finish(
            RunStatus.ERROR, f"unknown stop_reason {stop!r}; refusing to treat it as an answer"
        )
        return []
    if stop == "max_tokens":
        if response.content:  # nothing to continue from an empty reply: just ask again
            state.cut_text = (*state.cut_text, text_of(response.content))
            node.append(Message.user(CONTINUE_PROMPT))
        _check_turns(node, state, "while continuing a cut reply")
        return []
    if stop == "pause_turn" and not calls:  # send the transcript back as it is
        state.cut_text = (*state.cut_text, text_of(response.content))  # it goes on next reply
        _check_turns(node, state, "during pause_turn")
        return []
    if not calls:
        node.finish(RunStatus.ERROR, "stop_reason 'tool_use' without any tool call")
        return []
    state.repeats = state.repeats + 1 if _same_calls(calls, state.last_calls) else 1
    state.last_calls = calls
    if state.repeats >= state.repeat_limit:
        node.finish(
            RunStatus.REPEAT_GUARD,
            f"the same tool calls were requested {state.repeats} turns in a row "
            f"({', '.join(sorted(c.name for c in calls))})",
        )
        return []
    if not _check_turns(node, state, "without a final answer"):
        return []
    state.cut_text = ()
    state.context_retry = False
    return calls


def _resume_step(node: AgentNode, state: _LoopState, results: tuple[ToolResultBlock, ...]) -> None:
    """RESUME: one user message with every result, in call order; count failing turns."""
    node.append(Message("user", results))
    failed = all(map(_IS_ERROR, results))  # map, not a generator: most turns have one result
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


def _check_turns(node: AgentNode, state: _LoopState, when: str) -> bool:
    """End the agent with ``max_turns`` if its last turn is used up; True if it may go on."""
    if node.turns >= state.max_turns:
        node.finish(RunStatus.MAX_TURNS, f"reached max_turns ({state.max_turns}) {when}")
        return False
    return True


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
