"""GENERATE's machinery: one model call, and keeping the transcript inside the context window.

:func:`_generate` makes one model call under the ledger (a reservation settled with what was
billed) and the concurrency limits, and turns a failure into the agent's end (or the run's, for
a fatal provider error). :func:`_fit_context` clears old results and compacts before a call;
:func:`_compact` has the model write a checkpoint summary that replaces the transcript (also
after the provider refused the input as too long). The transforms themselves (clearing,
shortening, the summary request) are :mod:`.compaction`'s, which sits below the agent state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import Any

import trio
from opentelemetry.trace import SpanKind

from ..models.base import (
    Model,
    ModelContext,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    fallback_chain,
    passes_on,
)
from ..tracing import spans
from .cancellation import checkpointed
from .compaction import (
    clear_old_results,
    compacted_transcript,
    shorten_kept_results,
    summary_request,
)
from .errors import ContextWindowExceeded, ModelError, exception_type
from .events import ModelTextDelta, ModelToolCallStarted, ModelWaiting, ServerToolStarted
from .hosted import most_hosted_uses
from .ledger import BudgetExceeded, PricingFailed
from .messages import Message, Usage, clamp_usage, text_of
from .records import record
from .redact import redact
from .result import RunStatus
from .state import AgentNode, RunState, _LoopState
from .tools import admit_response, describe_exception

__all__ = ["CONTEXT_FULL", "ContextFull", "Ended", "context_window", "replayed"]

_SUMMARY_STOPS = frozenset({"end_turn", "stop_sequence", "tool_use", "max_tokens"})
"""Stop reasons whose text may stand as a checkpoint summary (the loop's ``_DONE`` and two more)."""


@record
class Ended:
    """A step's result when the agent ends: its status and why (or its answer)."""

    status: RunStatus
    reason: str | None = None
    output: str = ""


class ContextFull:
    """A model call's result when the provider refused the input as too long (the agent may
    compact and ask again)."""

    __slots__ = ()


CONTEXT_FULL = ContextFull()


def _turn_attributes(run_id: str, turn: int, path: str) -> dict[str, Any]:
    return {
        "gen_ai.conversation.id": run_id,
        "orchestrator.turn.index": turn,
        "orchestrator.agent.path": path,
        # no GenAI operation fits a loop turn: the kind backends show (Phoenix: not UNKNOWN)
        "openinference.span.kind": "CHAIN",
    }


def context_window(model: Model) -> int | None:
    window = getattr(model, "context_window", None)
    return window if isinstance(window, int) else None


async def _fit_context(
    node: AgentNode, run: RunState, state: _LoopState
) -> tuple[int, bool, Ended | None]:
    """Clear old tool results and compact as the agent's context policy says: how many results
    were cleared, whether it compacted, and how the agent ends if compacting failed."""
    policy = node.context
    cleared = 0
    if policy.clear_results_after is not None:
        cleared = node.clear_old_results()  # incremental, in place
    threshold = state.compaction_threshold
    if threshold is not None and node.estimate() > threshold and len(node.messages) > 1:
        ended = await _compact(node, run, state)
        return cleared, ended is None, ended
    return cleared, False, None


async def _compact(
    node: AgentNode, run: RunState, state: _LoopState, *, overflow: bool = False
) -> Ended | None:
    """Replace the transcript by a checkpoint summary the model writes; how the agent ends if
    it cannot (``None``: compacted).

    After the provider refused the input as too long (``overflow``), the summary request
    cannot carry the same transcript: every tool result is cleared from it first, and the
    subagent answers clearing keeps are cut to fit half of the compaction threshold.
    """
    with spans.span(
        run.tracer,
        "compact",
        node.agent.name,
        SpanKind.INTERNAL,
        partial(_turn_attributes, run.run_id, node.turns, node.path),
        records_outcome=True,
        cut=partial(run.cut_outcome, node),
    ) as s:
        # a summary request refused as too long is made again as after an overflow
        for cut_down in (True,) if overflow else (False, True):
            source = node.messages
            if cut_down:
                source, _ = clear_old_results(source, after=0, batch=1)
                if state.compaction_threshold is not None:  # estimated tokens: characters / 4
                    room = state.compaction_threshold * 2 - node._fixed_chars
                    source = shorten_kept_results(source, room)
            response = await _summary(node, run, state, summary_request(source))
            if response is not CONTEXT_FULL:
                break
        if isinstance(response, Ended):  # the call ended the agent (a model error, the budget)
            spans.record_outcome(s, response.status.value, response.reason)
            return response
        # a refusal or a reply the loop does not know must not replace the transcript as if it
        # were a summary; a summary cut by max_tokens (most of it) or followed by a tool call
        # (its text) is kept
        if isinstance(response, ContextFull):
            summary, reason = (
                "",
                "the transcript exceeded the context window and could not be compacted",
            )
        elif response.stop_reason not in _SUMMARY_STOPS:
            summary = ""
            reason = (
                "the transcript is too long and the checkpoint summary was not written "
                f"(stop_reason {response.stop_reason!r})"
            )
        else:
            summary = text_of(response.content)
            reason = "the transcript is too long and the model wrote no checkpoint summary"
        if not summary.strip():
            spans.record_outcome(s, RunStatus.CONTEXT_EXCEEDED.value, reason)
            return Ended(RunStatus.CONTEXT_EXCEEDED, reason)
        before = node.estimate()
        node.replace_messages(compacted_transcript(node.task, summary))
        state.cut_text = ()  # a cut answer's pieces are in the summary now, if anywhere
        if s.is_recording():
            s.set_attributes(
                {
                    "orchestrator.context.tokens_before": before,
                    "orchestrator.context.tokens_after": node.estimate(),
                }
            )
            spans.record_outcome(s, "ok", None)
        return None


async def _generate(  # noqa: C901 - the hot path, one call in one frame (docs/performance.md)
    node: AgentNode,
    run: RunState,
    specs: list[ToolSpec],
    max_tokens: int,
    messages: list[Message] | None = None,
) -> ModelResponse | ContextFull | Ended:
    """One model call under the ledger and the concurrency limit: the reply, :data:`CONTEXT_FULL`
    if the provider said the input is too long, or how the agent ends (the budget, an error).
    """
    warmup = node.warmup
    if warmup is not None:  # a first call in a group of siblings sharing a cached prefix
        node.warmup = None
        if not warmup.leader:  # wait for the leader's response to start: its prefix is cached
            with trio.move_on_after(warmup.wait):
                await warmup.started.wait()
            warmup = None
    model = node.model
    estimate = node.estimate()
    ledger = node.ledger
    try:
        # sized from the estimate and what this model was seen to bill; a checkpoint summary's
        # request is not the transcript estimated, so what it bills teaches nothing. The
        # dollars hold each offered hosted tool's max_uses: the provider bills them in the call
        tracks_cost = ledger.tracks_cost
        reservation = ledger.claim(
            model,
            estimate,
            max_tokens,
            messages is None,
            model.cost if tracks_cost else None,
            most_hosted_uses(specs) if tracks_cost else None,
        )
        if not reservation.ledgers:  # it did not fit at once
            await ledger.reserve(reservation)
    except BudgetExceeded as exc:
        return Ended(RunStatus.BUDGET_EXCEEDED, str(exc))
    except PricingFailed as exc:  # a model adapter bug: end this agent, not the tree
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        return Ended(RunStatus.ERROR, f"the model's cost() failed: {describe_exception(cause)}")
    request = ModelRequest(
        node.agent.instructions,
        tuple(node.messages if messages is None else messages),
        specs,
        max_tokens,
        node.info,
        estimate,
        node.assistant_turns,
        None if node.agent.output_spec is None else node.agent.output_spec.format,
    )
    ctx = node.model_context or _model_context(run, node)
    node.model_context = ctx
    if warmup is not None:  # the leader: its siblings go when its response starts
        ctx = dataclasses.replace(ctx, on_response_start=warmup.started.set)
    usage: Usage | None = None  # None: unknown, a call sent and cut may still be billed
    passed: Usage | None = None  # what a fallback chain's failed attempts billed
    try:
        if not node.limiters.try_acquire():
            try:
                await node.limiters.acquire()
            except BaseException:
                usage = Usage()  # cut while waiting for a slot: nothing was sent
                raise
        try:
            # the call in this frame, not a helper's: every agent waits here, and each frame
            # on a waiting agent's stack is passed through twice per wait and walked by the GC.
            # A fallback chain asks its models in turn, each attempt its own chat span.
            chain = fallback_chain(model)
            attempt = model if chain is None else chain[0]
            while True:
                with spans.span(
                    run.tracer,
                    "chat",
                    attempt.name,
                    SpanKind.CLIENT,
                    partial(
                        spans.chat_request_attributes,
                        attempt.name,
                        attempt.provider,
                        request,
                        run.run_id,
                        run.capture,
                    )
                    if run.tracer
                    else None,
                    cut=partial(run.cut_outcome, node) if run.tracer else None,
                ) as s:
                    response: ModelResponse | ContextFull | Ended
                    try:
                        answered = await checkpointed(
                            attempt.request(request, ctx), run.cut_answers
                        )
                        if not isinstance(answered, ModelResponse):
                            raise TypeError(
                                f"request() returned a {type(answered).__name__}, "
                                "not a ModelResponse"
                            )
                        answered = admit_response(answered)  # tool inputs bounded, usage clamped
                    except Exception as exc:
                        billed = (
                            getattr(exc, "usage", None) if isinstance(exc, ModelError) else None
                        )
                        if isinstance(billed, Usage):  # answers billed, none usable
                            usage = clamp_usage(billed)
                            _bill(node, usage)
                            spans.record_chat_usage(s, usage)
                        if chain is not None and attempt is not chain[-1] and passes_on(exc):
                            spans.record_outcome(s, getattr(exc, "kind", "error"), str(exc))
                            if usage is not None:  # settled with the answer's, at the end
                                passed = usage if passed is None else passed + usage
                                usage = None
                            attempt = chain[chain.index(attempt) + 1]
                            continue
                        response = _failed_call(node, run, s, exc)
                    else:
                        if run.tracer:
                            spans.record_chat_response(s, answered, attempt.name, run.capture)
                            # each hosted tool call the provider ran in it
                            spans.record_server_tools(
                                run.tracer, answered, run.run_id, node.agent.name, run.capture
                            )
                        response = answered
                break
        finally:
            node.limiters.release()
        if usage is None:
            usage = response.usage if isinstance(response, ModelResponse) else Usage()
    finally:
        if warmup is not None:  # answered or failed: the siblings wait no longer
            warmup.started.set()
        if usage is None and run.cut_answers:  # answered, then cut before it could be used
            cut = run.cut_answers.pop()
            usage = clamp_usage(cut.usage) if isinstance(cut, ModelResponse) else None
            if usage is not None:
                _bill(node, usage)
        node.ledger.settle(
            reservation, usage if usage is None or passed is None else usage + passed
        )
    if not isinstance(response, ModelResponse):  # billed above if anything was billed
        return response
    _bill(node, usage)
    return response


async def _summary(
    node: AgentNode, run: RunState, state: _LoopState, messages: list[Message]
) -> ModelResponse | ContextFull | Ended:
    """The checkpoint summary's model call, through the journal when the run keeps one: the
    agent's k-th summary is recorded as the response of turn k of ``PATH@compact``, so a
    resume replays it instead of asking the model to compact again."""
    journal = run.journal
    if journal is None:
        return await _generate(
            node, run, state.specs, node.agent.max_output_tokens, messages=messages
        )
    node.compactions += 1
    key = f"{node.path}@compact"
    recorded = await run.journaled(journal.lookup_response(key, node.compactions))
    if recorded is not None:
        return replayed(node, recorded)
    response = await _generate(
        node, run, state.specs, node.agent.max_output_tokens, messages=messages
    )
    if isinstance(response, ModelResponse):
        await run.journaled(journal.record_response(key, node.compactions, response))
    return response


def replayed(node: AgentNode, response: ModelResponse) -> ModelResponse | Ended:
    """A response a journal recorded for this turn, taken in as if the model had just sent it:
    admitted like any reply, and billed (to the agent and its budgets) as it was then."""
    try:
        response = admit_response(response)
    except TypeError as exc:
        return Ended(RunStatus.ERROR, f"the journal's recorded response is malformed: {exc}")
    node.ledger.spend(response.usage)
    _bill(node, response.usage)
    return response


def _bill(node: AgentNode, usage: Usage) -> None:
    """Add one model call's usage to the agent's: one request more, whatever the adapter
    reported as its count."""
    own = node.own_usage
    node.own_usage = Usage(
        own.input_tokens + usage.input_tokens,
        own.output_tokens + usage.output_tokens,
        own.cache_read_tokens + usage.cache_read_tokens,
        own.cache_write_tokens + usage.cache_write_tokens,
        own.cost_usd + usage.cost_usd,
        own.requests + 1,
        own.web_search_requests + usage.web_search_requests,
        own.web_fetch_requests + usage.web_fetch_requests,
    )


def _failed_call(node: AgentNode, run: RunState, s: Any, exc: Exception) -> ContextFull | Ended:
    """A model call raised: :data:`CONTEXT_FULL` for "input too long", else how the agent ends
    (for a fatal provider error, the whole run ends too)."""
    if isinstance(exc, ModelError):
        spans.record_outcome(s, exc.kind, str(exc))
        if isinstance(exc, ContextWindowExceeded):
            return CONTEXT_FULL
        if exc.fatal:
            run.fail(redact(str(exc)))
        return Ended(RunStatus.ERROR, str(exc))
    # a model adapter or FunctionModel bug: end this agent
    spans.record_outcome(s, exception_type(exc), describe_exception(exc))
    return Ended(RunStatus.ERROR, f"model call raised {describe_exception(exc)}")


def _model_context(run: RunState, node: AgentNode) -> ModelContext:
    """What a model call may use: the run's clients, and hooks publishing streamed progress."""
    if not run.events.enabled:
        return run.model_context
    path = node.path

    def text_delta(text: str) -> None:
        run.events.emit(ModelTextDelta(path, text))

    def tool_call_start(call_id: str, tool: str) -> None:
        run.events.emit(ModelToolCallStarted(path, tool, call_id))

    def wait(seconds: float, why: str) -> None:
        run.events.emit(ModelWaiting(path, seconds, why))

    def server_tool(call_id: str, tool: str, arguments: Mapping[str, Any]) -> None:
        run.events.emit(ServerToolStarted(path, tool, call_id, arguments))

    return ModelContext(
        run.clients, text_delta, tool_call_start, wait, on_server_tool_use=server_tool
    )
