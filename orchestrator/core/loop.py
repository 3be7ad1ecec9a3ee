"""The loop of one agent: GENERATE, PARSE, EXECUTE, RESUME.

Each turn calls the model with the assembled transcript (GENERATE), reads ``stop_reason`` and
the tool calls (PARSE), runs the calls concurrently behind validation and the policy gate
(EXECUTE), and appends the assistant turn plus one user message holding every result in call
order (RESUME). Every way out (an answer, a bound, an error, a cancellation) goes through
:meth:`AgentNode.finish`, which leaves the transcript valid: each ``tool_use`` answered by
exactly one ``tool_result`` in the next message.

This module knows nothing of subagents: ``spawn_subagent`` is an ordinary tool built by
``spawn.py`` and handed in with the agent's other tools.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import typing
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from opentelemetry.trace import SpanKind, Tracer

from ..models.base import (
    AgentInfo,
    ClientPool,
    Model,
    ModelContext,
    ModelRequest,
    ModelResponse,
    ToolSpec,
)
from ..tracing import spans
from .agent import Agent, AgentTree
from .cancellation import checkpointed, is_cancellation
from .compaction import (
    ContextPolicy,
    TurnContext,
    clear_old_results,
    compacted_transcript,
    shorten_kept_results,
    summary_request,
)
from .errors import ModelError, exception_type
from .events import (
    AgentFinished,
    AgentStarted,
    EventSink,
    ModelTextDelta,
    ModelToolCallStarted,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from .limits import BudgetExceeded, Ledger, Limits, Slots
from .messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    text_of,
)
from .policy import Decision, PendingCall, Policy
from .redact import redact
from .result import RunResult, RunStatus
from .tools import (
    Tool,
    ToolContext,
    ToolRuntime,
    arguments_of,
    describe_exception,
    error_result,
    execute,
)

__all__ = ["AgentNode", "RunState", "run_agent"]

_DONE = frozenset({"end_turn", "stop_sequence"})
_KNOWN = (
    frozenset({"tool_use", "max_tokens", "pause_turn", "refusal", "model_context_window_exceeded"})
    | _DONE
)
_SUMMARY_STOPS = _DONE | {"tool_use", "max_tokens"}
"""Stop reasons whose text may stand as a checkpoint summary."""
MAX_OUTPUT_CAP = 64_000
_IS_ERROR = operator.attrgetter("is_error")
CONTEXT_FULL = ModelResponse((), "model_context_window_exceeded")
"""Returned by ``_generate`` when the provider refused the input as too long."""
CONTEXT_EXCEEDED_REASON = "the transcript exceeded the model's context window"
CONTINUE_PROMPT = (
    "Your last reply was cut off by the output limit. Continue exactly where it stopped."
)


class Quota:
    """A counted allowance (agents per run), optionally nested in a parent's."""

    def __init__(self, limit: int | None, parent: Quota | None = None, used: int = 0) -> None:
        self.limit = limit
        self.parent = parent
        self.used = used

    def try_take(self) -> bool:
        node: Quota | None = self
        chain = []
        while node is not None:
            if node.limit is not None and node.used >= node.limit:
                return False
            chain.append(node)
            node = node.parent
        for q in chain:
            q.used += 1
        return True

    def give_back(self, count: int) -> None:
        """Return ``count`` taken and unused allowances to this quota and its parents."""
        node: Quota | None = self
        while node is not None:
            node.used -= count
            node = node.parent


@dataclass(eq=False)
class RunState:
    """What every agent of one run shares: budgets, clients, events, tracer, cancellation."""

    run_id: str
    tree: AgentTree
    default_model: Model | None
    run_limits: Limits
    run_policy: Policy | None
    deps: Any
    events: EventSink
    tracer: Tracer | None
    """``None`` for an untraced run: spans cost nothing."""
    clients: ClientPool
    thread_limiter: trio.CapacityLimiter
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    abandoned_threads: int = 0
    fatal_error: str | None = None
    cancel_requested: bool = False
    deadline: float = math.inf
    context: ContextPolicy | None = None
    approvals: trio.Semaphore = field(default_factory=lambda: trio.Semaphore(1))
    """Approvers answer one pending call at a time (see Policy.check)."""
    models: dict[str, Model] = field(default_factory=dict)
    """The model of every agent that names one, resolved once when the run starts."""
    capture: bool = False
    """Record message content on spans (read once per run from the GenAI capture variable)."""
    secrets: tuple[str, ...] = ()
    """Secret values to redact, snapshotted from the environment when the run starts."""
    cut_answers: list[Any] = field(default_factory=list)
    """A model's answer a cancellation cut right after it came (to bill, not to use). One list
    for the run: the agent whose call was cut takes it back before any other agent can run
    (nothing between the cut and that agent's billing waits)."""
    model_context: ModelContext = field(init=False)
    """What every model call of a run without event subscribers gets: the clients only."""

    def __post_init__(self) -> None:
        self.model_context = ModelContext(self.clients)

    def fail(self, reason: str) -> None:
        """End the whole run with ``error``: a fatal provider error no agent can get past."""
        if self.fatal_error is None:
            self.fatal_error = reason
        self.scope.cancel()

    def cut_status(self, node: AgentNode) -> tuple[RunStatus, str]:
        """Why ``node`` was cancelled from outside: fatal error, cancel(), deadline, or a scope."""
        if self.fatal_error is not None:
            return RunStatus.ERROR, f"run stopped by a fatal error: {self.fatal_error}"
        if self.cancel_requested:
            return RunStatus.CANCELLED, "the run was cancelled"
        if trio.current_time() >= node.deadline:
            return RunStatus.TIMEOUT, f"deadline reached after {node.elapsed():.1f}s"
        return (
            RunStatus.CANCELLED,
            "cancelled from outside the run (an enclosing cancel scope, or its open_run block was left)",
        )

    def cut_outcome(self, node: AgentNode) -> tuple[str, str]:
        """:meth:`cut_status` as a span outcome (for spans a cancellation cuts)."""
        status, reason = self.cut_status(node)
        return status.value, reason

    def abandoned(self) -> None:
        self.abandoned_threads += 1


class Limiters:
    """A chain of concurrency limits (an agent's own ``max_concurrency`` inside the run's).

    Shared by every agent under the same limits; one slot of each is held per model call.
    """

    def __init__(self, chain: tuple[Slots, ...]) -> None:
        self.chain = chain

    def try_acquire(self) -> bool:
        """Take one slot of every limit in the chain if each has one free, else take none."""
        for taken, slots in enumerate(self.chain):
            if not slots.try_take():
                for held in reversed(self.chain[:taken]):
                    held.give_back()
                return False
        return True

    async def acquire(self) -> None:
        """Take one slot of every limit in the chain, innermost first, waiting for full ones.

        Call it after :meth:`try_acquire` failed: the model call made with the slots is the
        checkpoint (see :func:`checkpointed`), so the common case needs no coroutine.
        """
        taken = 0
        try:
            for slots in self.chain:
                if not slots.try_take():
                    await slots.take()
                taken += 1
        except BaseException:
            for slots in reversed(self.chain[:taken]):
                slots.give_back()
            raise

    def release(self) -> None:
        """Give back the slots of the chain, outermost first."""
        for slots in reversed(self.chain):
            slots.give_back()


@dataclass(eq=False, slots=True)
class AgentNode:
    """The state of one agent run; becomes a :class:`RunResult` when it ends."""

    agent: Agent
    path: str
    depth: int
    model: Model
    limits: Limits
    policy: Policy
    tools: dict[str, Tool]
    ledger: Ledger
    limiters: Limiters
    agent_quota: Quota
    deadline: float
    own_deadline: float
    task: str
    runtime: ToolRuntime
    messages: list[Message] = field(default_factory=list)
    own_usage: Usage = field(default_factory=Usage)
    children: list[tuple[tuple[int, int], AgentNode]] = field(default_factory=list)
    status: RunStatus | None = None
    error: str | None = None
    error_without_content: str | None = None
    output: str = ""
    turns: int = 0
    started_at: float = 0.0
    in_flight: list[ToolResultBlock | None] | None = None
    model_context: ModelContext | None = None
    started_calls: set[str] = field(default_factory=set)
    """Ids of tool calls whose handler started (a cut one may have had side effects)."""
    assistant_turns: int = 0
    """Assistant messages in the transcript (kept as it changes; test models index by it)."""
    spawns: Any = None
    """Bookkeeping of the spawn tool (spawn.SpawnBook), for nodes holding it: the loop tells it
    which calls the policy declined and when EXECUTE ends."""
    ask_order: _AskInOrder | None = None
    """During an EXECUTE with several calls to confirm: asks the approver in call order."""
    context: ContextPolicy = field(default_factory=ContextPolicy)
    turn_log: list[TurnContext] = field(default_factory=list)
    parent: AgentNode | None = None
    _chars: int = 0
    _fixed_chars: int = 0

    info: AgentInfo = field(init=False)
    """Who is asking, as the model sees it (built once)."""

    def __post_init__(self) -> None:
        self.info = AgentInfo(self.agent.name, self.path, self.depth)

    def elapsed(self) -> float:
        return trio.current_time() - self.started_at

    def append(self, message: Message) -> None:
        """RESUME: add a message and keep the running size estimate current."""
        self.messages.append(message)
        self._chars += _message_chars(message)
        if message.role == "assistant":
            self.assistant_turns += 1

    def estimate(self) -> int:
        """Estimated input tokens of the next request (characters / 4)."""
        return (self._fixed_chars + self._chars) // 4 + 1

    def replace_messages(self, messages: list[Message]) -> None:
        """Swap the transcript (after clearing or compaction) and recount its size."""
        self.messages = messages
        self._chars = sum(_message_chars(m) for m in messages)
        self.assistant_turns = sum(1 for m in messages if m.role == "assistant")

    def finish(
        self,
        status: RunStatus,
        error: str | None = None,
        output: str = "",
        *,
        error_without_content: str | None = None,
    ) -> None:
        """End the agent, closing any unanswered tool calls so the transcript stays valid.

        ``error_without_content``: the reason for spans when content capture is off, if
        ``error`` quotes a tool result or a model's text.
        """
        if self.status is not None:
            return
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant" and last.tool_uses:
            executing = self.in_flight is not None  # cut during EXECUTE, not before it
            done = self.in_flight or []
            not_run = f"not run: the agent stopped ({status.value})"
            cut = (
                f"cut off while running: the agent stopped ({status.value}); "
                "it may have partly run, check before calling it again"
            )
            results = [
                done[i]
                if i < len(done) and done[i] is not None
                else error_result(c.id, cut, kind="cut_off")
                if executing and c.id in self.started_calls
                else error_result(c.id, not_run, kind="not_run")
                for i, c in enumerate(last.tool_uses)
            ]
            self.append(Message("user", tuple(r for r in results if r is not None)))
        self.in_flight = None
        self.status = status
        # a one-line reason, whatever the error text it quotes
        self.error = " ".join(redact(error).split()) if error else None
        self.error_without_content = error_without_content
        self.output = output

    def traced_error(self, capture: bool) -> str | None:
        """The reason spans record: without quoted content unless content capture is on."""
        if capture or self.error_without_content is None:
            return self.error
        return self.error_without_content

    def subtree_usage(self) -> Usage:
        total = self.own_usage
        for _, child in self.children:
            total = total + child.subtree_usage()
        return total

    def to_result(self, run_id: str) -> RunResult:
        return RunResult(
            agent_name=self.agent.name,
            status=self.status or RunStatus.ERROR,
            output=self.output,
            messages=list(self.messages),
            own_usage=self.own_usage,
            usage=self.subtree_usage(),
            children=[c.to_result(run_id) for _, c in sorted(self.children, key=lambda kc: kc[0])],
            error=self.error,
            path=self.path,
            depth=self.depth,
            turns=self.turns,
            run_id=run_id,
            turn_log=list(self.turn_log),
        )


def _message_chars(message: Message) -> int:
    n = 0
    for b in message.content:
        if isinstance(b, TextBlock):
            n += len(b.text)
        elif isinstance(b, ToolResultBlock):
            n += len(b.content) + 16
        elif isinstance(b, ToolUseBlock):
            n += len(b.name) + len(str(b.input)) + 16  # a size estimate: no need for JSON
        else:
            n += len(getattr(b, "thinking", ""))
    return n


def tool_specs(node: AgentNode) -> list[ToolSpec]:
    """The agent's tools as the model sees them, in a stable order (for the prompt cache)."""
    return [t.spec for t in node.tools.values()]


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


@dataclass(eq=False, slots=True)
class _LoopState:
    """What the loop remembers between turns of one agent."""

    specs: list[ToolSpec]
    max_turns: int
    repeat_limit: int
    max_errors: int
    compaction_threshold: int | None
    """Estimated input tokens past which the agent compacts (``None``: it cannot compact)."""
    last_calls: list[ToolUseBlock] = field(default_factory=list)
    repeats: int = 0
    error_turns: int = 0
    context_retry: bool = False
    compacted_since_last_turn: bool = False
    cut_text: tuple[str, ...] = ()
    """Pieces of an answer cut by ``max_tokens`` or paused, joined when it completes (a tuple:
    most agents never have one, and the empty tuple is shared)."""


async def _loop(node: AgentNode, run: RunState) -> None:
    specs = tool_specs(node)
    node._fixed_chars = len(node.agent.instructions) + sum(
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


def _turn_attributes(run_id: str, turn: int, path: str) -> dict[str, Any]:
    return {
        "gen_ai.conversation.id": run_id,
        "orchestrator.turn.index": turn,
        "orchestrator.agent.path": path,
    }


def context_window(model: Model) -> int | None:
    window = getattr(model, "context_window", None)
    return window if isinstance(window, int) else None


async def _fit_context(node: AgentNode, run: RunState, state: _LoopState) -> tuple[int, bool]:
    """Clear old tool results and compact as the agent's context policy says."""
    policy = node.context
    cleared = 0
    if policy.clear_results_after is not None:
        messages, cleared = clear_old_results(
            node.messages, policy.clear_results_after, policy.clear_batch
        )
        if cleared:
            node.replace_messages(messages)
    threshold = state.compaction_threshold
    if threshold is not None and node.estimate() > threshold and len(node.messages) > 1:
        return cleared, await _compact(node, run, state)
    return cleared, False


async def _compact(
    node: AgentNode, run: RunState, state: _LoopState, *, overflow: bool = False
) -> bool:
    """Replace the transcript by a checkpoint summary the model writes; False if the agent ended.

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
            response = await _generate(
                node,
                run,
                state.specs,
                node.agent.max_output_tokens,
                messages=summary_request(source),
            )
            if response is not CONTEXT_FULL:
                break
        if node.status is not None:  # the call ended the agent (a model error, the budget)
            spans.record_outcome(s, node.status.value, node.traced_error(run.capture))
            return False
        # a refusal or a reply the loop does not know must not replace the transcript as if it
        # were a summary; a summary cut by max_tokens (most of it) or followed by a tool call
        # (its text) is kept
        if response is None or response is CONTEXT_FULL:
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
            node.finish(RunStatus.CONTEXT_EXCEEDED, reason)
            spans.record_outcome(s, RunStatus.CONTEXT_EXCEEDED.value, reason)
            return False
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
        return True


async def _generate(
    node: AgentNode,
    run: RunState,
    specs: list[ToolSpec],
    max_tokens: int,
    messages: list[Message] | None = None,
) -> ModelResponse | None:
    """One model call under the ledger and the concurrency limit.

    ``None`` if the agent ended; :data:`CONTEXT_FULL` if the provider said the input is too long.
    """
    model = node.model
    estimate = node.estimate()
    ledger = node.ledger
    tokens = estimate + max_tokens
    cost = 0.0
    if ledger.tracks_cost:
        try:
            cost = model.cost(Usage(input_tokens=estimate, output_tokens=max_tokens))
            if isinstance(cost, bool) or not isinstance(cost, int | float) or cost < 0:
                raise TypeError(f"it returned {cost!r}, not a number of dollars")
        except Exception as exc:  # a model adapter bug: end this agent, not the tree
            node.finish(RunStatus.ERROR, f"the model's cost() failed: {describe_exception(exc)}")
            return None
    try:
        reservation = ledger.try_reserve(tokens, cost) or await ledger.reserve(tokens, cost)
    except BudgetExceeded as exc:
        node.finish(RunStatus.BUDGET_EXCEEDED, str(exc))
        return None
    request = ModelRequest(
        node.agent.instructions,
        tuple(node.messages if messages is None else messages),
        specs,
        max_tokens,
        node.info,
        estimate,
        node.assistant_turns,
    )
    ctx = node.model_context or _model_context(run, node)
    node.model_context = ctx
    usage: Usage | None = None  # None: unknown, a call sent and cut may still be billed
    try:
        if not node.limiters.try_acquire():
            try:
                await node.limiters.acquire()
            except BaseException:
                usage = Usage()  # cut while waiting for a slot: nothing was sent
                raise
        try:
            # the call in this frame, not a helper's: every agent waits here, and each frame
            # on a waiting agent's stack is passed through twice per wait and walked by the GC
            with spans.span(
                run.tracer,
                "chat",
                model.name,
                SpanKind.CLIENT,
                partial(
                    spans.chat_request_attributes,
                    model.name,
                    model.provider,
                    request,
                    run.run_id,
                    run.capture,
                )
                if run.tracer
                else None,
                cut=partial(run.cut_outcome, node) if run.tracer else None,
            ) as s:
                response: ModelResponse | None
                try:
                    answered = await checkpointed(model.request(request, ctx), run.cut_answers)
                    if not isinstance(answered, ModelResponse):
                        raise TypeError(
                            f"request() returned a {type(answered).__name__}, not a ModelResponse"
                        )
                except Exception as exc:
                    response = _failed_call(node, run, s, exc)
                    billed = getattr(exc, "usage", None) if isinstance(exc, ModelError) else None
                    if isinstance(billed, Usage):  # answers billed, none usable
                        usage = billed
                        _bill(node, usage)
                        spans.record_chat_usage(s, usage)
                else:
                    if run.tracer:
                        spans.record_chat_response(s, answered, model.name, run.capture)
                    response = answered
        finally:
            node.limiters.release()
        if usage is None:
            usage = Usage() if response is None else response.usage  # CONTEXT_FULL's is zero
    finally:
        if usage is None and run.cut_answers:  # answered, then cut before it could be used
            cut = run.cut_answers.pop()
            usage = cut.usage if isinstance(cut, ModelResponse) else None
            if usage is not None:
                _bill(node, usage)
        node.ledger.settle(reservation, usage)
    if response is None or response is CONTEXT_FULL:  # billed above if anything was billed
        return response
    _bill(node, usage)
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
    )


def _failed_call(node: AgentNode, run: RunState, s: Any, exc: Exception) -> ModelResponse | None:
    """A model call raised: :data:`CONTEXT_FULL` for "input too long", else end the agent (or
    the whole run, for a fatal provider error) and return ``None``."""
    if isinstance(exc, ModelError):
        spans.record_outcome(s, exc.kind, str(exc))
        if exc.kind == "context_exceeded":
            return CONTEXT_FULL
        if exc.fatal:
            run.fail(redact(str(exc)))
        node.finish(RunStatus.ERROR, str(exc))
        return None
    # a model adapter or FunctionModel bug: end this agent
    spans.record_outcome(s, exception_type(exc), describe_exception(exc))
    node.finish(RunStatus.ERROR, f"model call raised {describe_exception(exc)}")
    return None


def _model_context(run: RunState, node: AgentNode) -> ModelContext:
    """What a model call may use: the run's clients, and hooks publishing streamed progress."""
    if not run.events.enabled:
        return run.model_context
    path = node.path

    def text_delta(text: str) -> None:
        run.events.emit(ModelTextDelta(path, text))

    def tool_call_start(call_id: str, tool: str) -> None:
        run.events.emit(ModelToolCallStarted(path, tool, call_id))

    return ModelContext(run.clients, text_delta, tool_call_start)


async def _execute(
    node: AgentNode, run: RunState, calls: list[ToolUseBlock]
) -> tuple[ToolResultBlock, ...]:
    """Run the calls concurrently; results come back in call order, one per call."""
    results: list[ToolResultBlock | None] = [None] * len(calls)
    node.in_flight = results
    node.started_calls.clear()  # ids may repeat across turns: only this step's count
    try:
        if len(calls) == 1:
            await _call_one(node, run, 0, calls[0], results)
        else:
            node.ask_order = _AskInOrder.for_calls(node, calls)
            async with trio.open_nursery() as nursery:
                for i, call in enumerate(calls):
                    nursery.start_soon(_call_one, node, run, i, call, results)
    finally:
        node.ask_order = None
        if node.spawns is not None:  # allowances taken for this step's spawns and not used
            node.spawns.end_step(node)
    node.in_flight = None
    return typing.cast("tuple[ToolResultBlock, ...]", tuple(results))  # every slot is filled


async def _call_one(
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
        if held is not None and decision is Decision.ALLOW:
            refusal = None  # the common case, without building the approver's view of the call
        else:
            refusal, refused_as = await _screen(node, run, index, call, held, decision)
        if refusal is not None:
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
                    (run, node, (node.turns, index), s),
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
                result = await execute(t, call, ctx, runtime)
            except BaseException:
                if run.events.enabled:  # a call cut off still ends, for a progress display
                    run.events.emit(ToolFinished(node.path, call.name, call.id, True))
                raise
        results[index] = result
        if run.tracer:
            spans.record_tool_result(s, result, run.capture)
        if run.events.enabled:
            run.events.emit(ToolFinished(node.path, call.name, call.id, result.is_error))


async def _screen(
    node: AgentNode,
    run: RunState,
    index: int,
    call: ToolUseBlock,
    held: Tool | None,
    decision: Decision,
) -> tuple[str | None, str]:
    """A call the policy does not simply allow: its refusal and error type, or ``None``.

    Arguments are validated before any approver is asked (DESIGN's order); when several calls
    of the turn need approval they are asked in call order, whatever order they started in.
    """
    order = node.ask_order if decision is Decision.CONFIRM else None
    try:
        if order is not None:
            await order.wait_turn(index)
        if (
            held is not None
            and decision is Decision.CONFIRM
            and isinstance(problem := arguments_of(held, call), str)
        ):
            return problem, "invalid_arguments"  # no approver asked about it
        pending = PendingCall(call.name, call.input, call.id, node.agent.name, node.path)
        refusal = await node.policy.check(
            pending,
            frozenset(node.tools),
            one_at_a_time=run.approvals,
            on_abandoned_thread=run.abandoned,
        )
        return refusal, "refused"
    finally:
        if order is not None:
            order.done(index)


class _AskInOrder:
    """The approvals one turn's calls need, asked in call order: its calls run as tasks of one
    nursery, which trio starts in no set order, and a person at a terminal (or an approver
    keeping count) must see them as the model wrote them."""

    def __init__(self, indices: list[int]) -> None:
        self._before = dict(zip(indices[1:], indices, strict=False))
        self._asked = {i: trio.Event() for i in indices}

    @classmethod
    def for_calls(cls, node: AgentNode, calls: list[ToolUseBlock]) -> _AskInOrder | None:
        confirm = [
            i
            for i, call in enumerate(calls)
            if call.name in node.tools and node.policy.decide(call.name) is Decision.CONFIRM
        ]
        return cls(confirm) if len(confirm) > 1 else None

    async def wait_turn(self, index: int) -> None:
        before = self._before.get(index)
        if before is not None:
            await self._asked[before].wait()

    def done(self, index: int) -> None:
        if index in self._asked:
            self._asked[index].set()


def make_runtime(node_limits: Limits, run: RunState) -> ToolRuntime:
    """Tool execution settings for one agent."""
    return ToolRuntime(
        timeout=float(node_limits.tool_timeout or math.inf),
        max_result_chars=int(node_limits.max_result_chars or 100_000),
        thread_limiter=run.thread_limiter,
        on_abandoned_thread=run.abandoned,
    )
