"""Per-run and per-agent state: what is set up when an agent starts, and what changes as it runs.

:class:`RunState` is what every agent of one run shares (budgets, clients, events, tracer,
cancellation); :class:`AgentNode` is one agent's run (its transcript, usage, children, status),
ended through :meth:`AgentNode.finish`, which leaves the transcript valid. The loop's memory
between turns (``_LoopState``) and the approval order of one EXECUTE step (``_AskInOrder``) live
here too, so that the modules using them (loop, generate, execute) all sit above this one.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio
from opentelemetry.trace import Tracer

from ..models.base import AgentInfo, ClientPool, HostedToolSpec, Model, ModelContext, ToolSpec
from .agent import Agent, AgentTree
from .compaction import ContextPolicy, ResultClearing, TurnContext
from .events import EventSink
from .journal import Journal
from .ledger import Ledger, text_units
from .limits import Limits, Slots
from .messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from .policy import Decision, Policy
from .redact import redact
from .result import RunResult, RunStatus
from .tools import Tool, ToolRuntime, describe_exception, error_result

T = TypeVar("T")

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from .approvals import Parking
    from .journal_sqlite import SQLiteJournal
    from .runner import ChildRunner
    from .spawn import SpawnBook
    from .toolset import ToolsetHost

__all__ = ["AgentNode", "Limiters", "Quota", "RunState"]


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
    interrupted: BaseException | None = None
    """A Ctrl-C trio raised inside a tool, which cancelled the run: re-raised by ``open_run``."""
    deadline: float = math.inf
    context: ContextPolicy | None = None
    approvals: trio.Semaphore = field(default_factory=lambda: trio.Semaphore(1))
    """Approvers answer one pending call at a time (see Policy.check)."""
    models: dict[str, Model] = field(default_factory=dict)
    """The model of every agent that names one, resolved once when the run starts."""
    menus: dict[str, tuple[Model, ...]] = field(default_factory=dict)
    """The menu of every agent given ``models=(...)``, resolved with :attr:`models`."""
    capture: bool = False
    """Record message content on spans (read once per run from the GenAI capture variable)."""
    secrets: tuple[str, ...] = ()
    """Secret values to redact, snapshotted from the environment when the run starts."""
    cut_answers: list[Any] = field(default_factory=list)
    """A model's answer a cancellation cut right after it came (to bill, not to use). One list
    for the run: the agent whose call was cut takes it back before any other agent can run
    (nothing between the cut and that agent's billing waits)."""
    journal: Journal | None = None
    """Where the run records itself before acting (``None``: no journal, no calls made)."""
    owned_journal: SQLiteJournal | None = None
    """A journal the run opened itself (``journal=PATH``), closed when it ends."""
    resumed_from: SpanContext | None = None
    """The root span of the run this one resumes (the new root links to it)."""
    runner: ChildRunner | None = None
    """Runs the children (``None``: in this process, :data:`.inprocess.IN_PROCESS`)."""
    toolsets: ToolsetHost | None = None
    """The run's :class:`~.toolset.ToolsetHost` when its tree holds toolsets (MCP servers)."""
    toolset_failure: str | None = None
    """Why a toolset could not start (the run then ends with ``error`` before any model call)."""
    agent_tools: dict[str, dict[str, Tool]] = field(default_factory=dict)
    """The tools of each agent holding toolsets, its own first (resolved when they opened)."""
    parking: Parking | None = None
    """The parked calls and who waits, in a run that may park one (``DEFER``); else ``None``."""
    awaiting_approval: bool = False
    """Every running agent waits on a parked call: the run ends ``awaiting_approval``."""
    model_context: ModelContext = field(init=False)
    """What every model call of a run without event subscribers gets: the clients only."""

    def __post_init__(self) -> None:
        self.model_context = ModelContext(self.clients)

    async def journaled(self, call: Awaitable[T]) -> T:
        """Await a journal call; a journal that fails ends the run with ``error`` (a run that
        cannot be recorded must not act as if it were)."""
        try:
            return await call
        except Exception as exc:
            self.fail(f"the run's journal failed: {describe_exception(exc)}")
            await trio.lowlevel.checkpoint()  # raises Cancelled: the run's scope is cancelled
            raise

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
        if self.awaiting_approval:
            n = len(self.parking.pending) if self.parking is not None else 0
            return (
                RunStatus.AWAITING_APPROVAL,
                f"waiting for a person to decide {n} parked call{'s' if n != 1 else ''}",
            )
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
class Warmup:
    """A child's place in a group of siblings that share a cached prefix (one definition, tool
    set and model, on a provider with prompt caching): the leader's first call goes out alone
    and sets ``started`` when its response starts; the others' first calls wait for that, at
    most ``wait`` seconds."""

    started: trio.Event
    leader: bool
    wait: float


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
    output: Any = ""
    """The answer: text, or a typed agent's validated value (``None`` until it has one)."""
    output_json: str | None = None
    """A typed agent's answer as JSON (what its parent's model reads)."""
    output_rejections: int = 0
    """Typed answers rejected so far (bounded by ``limits.output_retries``)."""
    turns: int = 0
    started_at: float = 0.0
    in_flight: list[ToolResultBlock | None] | None = None
    model_context: ModelContext | None = None
    started_calls: set[str] = field(default_factory=set)
    """Ids of tool calls whose handler started (a cut one may have had side effects)."""
    assistant_turns: int = 0
    """Assistant messages in the transcript (kept as it changes; test models index by it)."""
    spawns: SpawnBook | None = None
    """Bookkeeping of the spawn tool, for nodes holding it: the loop tells it
    which calls the policy declined and when EXECUTE ends."""
    ask_order: _AskInOrder | None = None
    """During an EXECUTE with several calls to confirm: asks the approver in call order."""
    context: ContextPolicy = field(default_factory=ContextPolicy)
    clearing: ResultClearing | None = None
    """Follows the transcript for ``context.clear_results_after`` (made at the first clearing)."""
    turn_log: list[TurnContext] = field(default_factory=list)
    parent: AgentNode | None = None
    remote_result: RunResult | None = None
    """The result tree of a child that ran elsewhere (a Dask worker): this node is its
    stand-in under its parent, and its result and usage are that tree's."""
    compactions: int = 0
    """Checkpoint summaries asked for so far (in a journaled run: the key of each)."""
    spawn_index: int = -1
    """The position of the spawn call that started this child in its parent's step."""
    warmup: Warmup | None = None
    """Until its first model call: the group of siblings sharing a cached prefix it is in."""
    open_calls: int = 0
    held: set[int] | None = None
    waiting: bool = False
    """In a run that may park calls (``RunState.parking``): the step's calls without a result,
    those of them that wait (parked, or a spawn whose child waits), and whether all do."""
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
        """Estimated input tokens of the next request (quarter tokens / 4: see ``text_units``)."""
        return (self._fixed_chars + self._chars) // 4 + 1

    def clear_old_results(self) -> int:
        """Clear tool results as the context policy says: in place, reading only what the
        transcript gained since the last call (see ``ResultClearing``); how many it cleared."""
        if self.clearing is None:
            self.clearing = ResultClearing(
                self.context.clear_results_after or 1, self.context.clear_batch
            )
        cleared, removed_chars = self.clearing.clear(self.messages)
        self._chars -= removed_chars  # a result counts its length (see _message_chars)
        return cleared

    def replace_messages(self, messages: list[Message]) -> None:
        """Swap the transcript (after clearing or compaction) and recount its size."""
        self.messages = messages
        self._chars = sum(_message_chars(m) for m in messages)
        self.assistant_turns = sum(1 for m in messages if m.role == "assistant")

    def finish(
        self,
        status: RunStatus,
        error: str | None = None,
        output: Any = "",
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
        self.output = output if self.agent.output_spec is None or output != "" else None

    def traced_error(self, capture: bool) -> str | None:
        """The reason spans record: without quoted content unless content capture is on."""
        if capture or self.error_without_content is None:
            return self.error
        return self.error_without_content

    def subtree_usage(self) -> Usage:
        if self.remote_result is not None:
            return self.remote_result.usage
        total = self.own_usage
        for _, child in self.children:
            total = total + child.subtree_usage()
        return total

    def to_result(self, run_id: str) -> RunResult:
        if self.remote_result is not None:
            return self.remote_result
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
            output_json=self.output_json,
            model=f"{self.model.provider}:{self.model.name}",
        )


def _message_chars(message: Message) -> int:
    """The message's estimated size in quarter tokens (``text_units``)."""
    n = 0
    for b in message.content:
        if isinstance(b, TextBlock):
            n += text_units(b.text)
        elif isinstance(b, ToolResultBlock):
            n += text_units(b.content) + 16 + sum(text_units(t) + 8 for t in b.notes)
        elif isinstance(b, ToolUseBlock):
            n += len(b.name) + text_units(str(b.input)) + 16  # a size estimate: no need for JSON
        else:
            n += text_units(getattr(b, "thinking", ""))
    return n


def tool_specs(node: AgentNode) -> list[ToolSpec]:
    """The agent's tools as the model sees them, in a stable order (for the prompt cache).

    A hosted tool the policy denies is left out: the provider would run it without asking."""
    specs = [t.spec for t in node.tools.values()]
    if any(type(s) is HostedToolSpec for s in specs):
        specs = [
            s
            for s in specs
            if type(s) is not HostedToolSpec or node.policy.decide(s.name) is not Decision.DENY
        ]
    return specs


def make_runtime(node_limits: Limits, run: RunState) -> ToolRuntime:
    """Tool execution settings for one agent."""
    return ToolRuntime(
        timeout=float(node_limits.tool_timeout or math.inf),
        max_result_chars=int(node_limits.max_result_chars or 100_000),
        thread_limiter=run.thread_limiter,
        on_abandoned_thread=run.abandoned,
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
    turn_estimate: int = 0
    turn_cleared: int = 0
    turn_compacted: bool = False
    """The current turn's input estimate, cleared results and compaction (for its record)."""


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
