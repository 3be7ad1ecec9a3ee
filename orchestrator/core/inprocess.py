"""The in-process runner, and the parent's side every runner is handed.

:class:`InProcessRunner` (the default) runs a child's loop right here, in the parent's EXECUTE
step, so the child is cancelled with its parent and never outlives it. :class:`SpawnSide` is
the parent's side of one spawn call: the spawn tool plans the child with it, and every runner
gets it as its :class:`~.runner.Parent`; a runner that runs the child elsewhere leases, adopts
and settles through it (the child's node here stands in for the subtree run there).
:class:`InProcessRun` is the run's side (:class:`~.runner.RunSide`) a runner's session gets.

The loop is imported on first use (the one deferred import the layout allows here): a child
runs an agent loop, and the loop's tool execution imports this module.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import pickle
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from opentelemetry import trace

from ..tracing import spans
from .cancellation import is_cancellation
from .events import AgentFinished, AgentStarted, Event
from .ledger import Calibration, Reservation
from .limits import Limits
from .messages import ToolResultBlock, Usage
from .policy import Approver, PendingCall, ask_approver
from .result import RunResult, RunStatus
from .runner import (
    BudgetLease,
    ChildOutcome,
    ChildRunner,
    ChildSpec,
    Inherited,
    Parent,
    RunDefinitions,
    as_json,
)
from .spawn import (
    SPAWN_TOOL,
    build_child,
    check_budget_tokens,
    check_model_choice,
    plan_child,
    summarize,
)
from .state import Warmup

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from .agent import AgentTree
    from .state import AgentNode, Quota, RunState
    from .tools import Tool

__all__ = ["IN_PROCESS", "SUBTREE_KEY", "InProcessRun", "InProcessRunner", "SpawnSide"]

SUBTREE_KEY = "runner:subtree"
"""The journal's call id for the result tree of a child run elsewhere (under the child's path,
turn 0): a resume replays it instead of running the child again."""


class InProcessRun:
    """The run's side (:class:`~.runner.RunSide`) over its state: equal for one run."""

    __slots__ = ("_state",)

    def __init__(self, state: RunState) -> None:
        self._state = state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InProcessRun) and other._state is self._state

    def __hash__(self) -> int:
        return id(self._state)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._state.run_id

    @property
    def tracer(self) -> Tracer | None:
        """The run's tracer (``None``: not traced)."""
        return self._state.tracer

    @property
    def events_enabled(self) -> bool:
        """Whether anybody reads the run's events."""
        return self._state.events.enabled

    def definitions(self) -> RunDefinitions:
        """The tree and the run's options."""
        s = self._state
        return RunDefinitions(
            s.run_id,
            s.tree.root,
            s.run_limits,
            s.run_policy,
            s.default_model,
            s.deps,
            s.context,
            s.capture,
            int(s.thread_limiter.total_tokens),
        )

    def emit(self, event: Event) -> None:
        """Publish an event on the run's stream."""
        self._state.events.emit(event)

    async def ask(self, approver: Approver, call: PendingCall) -> object:
        """Ask ``approver`` about ``call`` through the run's one-question-at-a-time gate."""
        s = self._state
        return await ask_approver(approver, call, s.approvals, s.abandoned)


class SpawnSide:
    """The parent's side of one spawn call (a :class:`~.runner.Parent`), and what the spawn
    tool and the in-process runner use of it besides: :meth:`plan` makes the
    :class:`~.runner.ChildSpec` (raising ``ToolError`` for a spawn refused before anything
    starts), :meth:`build` the child's state under the parent, :meth:`outcome` reads how it
    ended, :meth:`roll_up` puts that on the spawn span."""

    __slots__ = (
        "_admitted",
        "_lease",
        "_sent",
        "child",
        "node",
        "position",
        "span",
        "state",
        "turn",
    )

    def __init__(
        self, state: RunState, node: AgentNode, turn: int, position: int, span: trace.Span
    ) -> None:
        self.state = state
        self.node = node
        self.turn = turn
        self.position = position
        self.span = span
        self.child: AgentNode | None = None
        """The child's node, once started."""
        self._admitted: tuple[ChildSpec, dict[str, Tool], Limits] | None = None
        """The last spec :meth:`plan` made, with the tools and limits it found for it."""
        self._lease: Reservation | None = None
        self._sent = False
        """Whether the child was handed to a runner elsewhere (its subtree is journaled)."""

    # -- the spawn tool's ----------------------------------------------------------------

    def plan(
        self,
        agent: str,
        task: str,
        tools: list[str] | None,
        model: str | None = None,
        budget_tokens: int | None = None,
    ) -> ChildSpec:
        """The child a spawn call asks for (``model``: picked from the agent's menu;
        ``budget_tokens``: its sub-budget); raises ``ToolError`` if it may not start."""
        run, node = self.state, self.node
        definition = run.tree.by_name[agent]
        # before plan_child: a refused call takes no slot
        check_model_choice(definition, model)
        check_budget_tokens(node, budget_tokens)
        path, held, limits = plan_child(
            run, node, definition, task, tools, (self.turn, self.position)
        )
        left = node.deadline - trio.current_time()
        context: tuple[tuple[str, str], ...] = ()
        if run.tracer is not None and self.span.is_recording():
            # here, not on top: opentelemetry.propagate reads its entry points when imported
            from opentelemetry import propagate

            carrier: dict[str, str] = {}
            propagate.inject(carrier, trace.set_span_in_context(self.span))
            context = tuple(carrier.items())
        tokens, cost = node.ledger.room()
        spec = ChildSpec(
            run.tree.root.name,
            agent,
            path,
            node.depth + 1,
            task,
            tuple(held),
            limits,
            time.time() + left if left < math.inf else math.inf,
            BudgetLease(tokens, cost),
            context,
            self.turn,
            self.position,
            model,
            budget_tokens,
        )
        self._admitted = (spec, held, limits)
        return spec

    @property
    def runner(self) -> ChildRunner:
        """The run's runner (in this process unless the run was given another)."""
        return self.state.runner or IN_PROCESS

    def build(self, spec: ChildSpec) -> AgentNode:
        """The child's state under the parent (its ledger, slots and quota chained to the
        parent's), counted among the parent's children."""
        admitted = self._admitted
        self.child = build_child(
            self.state,
            self.node,
            spec.agent,
            spec.path,
            spec.task,
            spec.tools,
            (spec.turn, spec.position),
            (admitted[1], admitted[2]) if admitted is not None and admitted[0] is spec else None,
            spec.model,
            spec.budget_tokens,
        )
        return self.child

    def join_warmup(self, child: AgentNode) -> None:
        """Put a child run here in its turn's group of siblings sharing a cached prefix (one
        definition, tool set and model, on a provider with prompt caching): the first of a
        group leads, the others' first calls wait for its response to start. Only for
        children run in this process (a runner elsewhere has its own clients and timing)."""
        book = self.node.spawns
        if book is None or not getattr(child.model, "prompt_caching", False):
            return
        if book.warmup_turn != self.turn:
            book.warmup_turn, book.warmups = self.turn, {}
        key = (child.agent.name, frozenset(child.tools), id(child.model))
        started = book.warmups.get(key)
        wait = child.limits.cache_warmup_wait or 0.0
        if started is None:
            book.warmups[key] = started = trio.Event()
            child.warmup = Warmup(started, True, wait)
        elif wait > 0 and not started.is_set():
            child.warmup = Warmup(started, False, wait)

    def outcome(self, child: AgentNode) -> ChildOutcome:
        """How a child ended."""
        status = child.status or RunStatus.ERROR
        return ChildOutcome(
            path=child.path,
            status=status,
            output=child.output if child.output_json is None else child.output_json,
            error=child.error,
            usage=child.subtree_usage(),
            turns=child.turns,
            summary="" if status is RunStatus.COMPLETED else summarize(child),
        )

    def roll_up(self, spec: ChildSpec, outcome: ChildOutcome | None) -> None:
        """The child's outcome on the spawn span (``None``: it was cut; what the in-process
        child got to)."""
        s = self.span
        if s.is_recording():  # the spawn span carries its subtree's roll-up
            if outcome is None:
                outcome = self._cut_outcome(spec)
            s.set_attributes(spans.usage_attributes("orchestrator.usage", outcome.usage))
            s.set_attribute("orchestrator.spawn.agent_path", outcome.path)
            s.set_attribute("orchestrator.spawn.outcome", outcome.status.value)

    def _cut_outcome(self, spec: ChildSpec) -> ChildOutcome:
        for key, child in reversed(self.node.children):
            if key == (spec.turn, spec.position):
                return self.outcome(child)
        return ChildOutcome(spec.path, RunStatus.CANCELLED, "", "cut", Usage(), 0, "")

    # -- the Parent protocol: a runner's ---------------------------------------------------

    @property
    def run(self) -> InProcessRun:
        """The run this child belongs to."""
        return InProcessRun(self.state)

    def start(self, spec: ChildSpec) -> None:
        """Count the child among the parent's children and publish its start."""
        child = self.build(spec)
        child.started_at = trio.current_time()
        if self.state.events.enabled:
            self.state.events.emit(
                AgentStarted(spec.path, spec.agent, spec.depth, self.node.path, spec.task)
            )

    def _started(self) -> AgentNode:
        if self.child is None:
            raise RuntimeError("a runner must call parent.start(spec) first")
        return self.child

    async def replayed(self) -> bool:
        """Whether the journal holds the child's subtree (adopted, or an unknown outcome)."""
        child, run = self._started(), self.state
        journal = run.journal
        if journal is None:
            return False
        recorded = await run.journaled(journal.lookup_call(child.path, 0, SUBTREE_KEY))
        if recorded is None:
            return False
        if recorded.result is None:  # in flight when the run stopped: not run twice
            child.finish(
                RunStatus.ERROR,
                "the run stopped while this child ran elsewhere (its runner's worker): it is "
                "not run again, and its outcome is unknown",
            )
        else:
            result = pickle.loads(base64.b64decode(recorded.result.content))
            child.ledger.spend(result.usage)  # the budgets go on from what it spent
            self.adopt(result)
        return True

    async def lease(self) -> BudgetLease | None:
        """Reserve the child's share of the room left; ``None`` (and ``budget_exceeded``)
        when there is none. Siblings of one turn run at once and must not overshoot together,
        so the room is shared among the turn's spawns that have not taken theirs; what the
        child does not spend goes back when it is settled."""
        child = self._started()
        tokens, cost = child.ledger.room()
        if tokens == math.inf and cost == math.inf:
            return BudgetLease()
        last = self.node.messages[-1] if self.node.messages else None
        spawns = sum(1 for c in last.tool_uses if c.name == SPAWN_TOOL) if last else 1
        book = self.node.spawns
        taken = book.leased.setdefault(self.turn, set()) if book is not None else set()
        share = max(1, spawns - len(taken))
        taken.add(self.position)
        # the parent's room is shared; a sub-budget of the child's own (its definition's
        # token_budget) is its alone
        shared_tokens, shared_cost = self.node.ledger.room()
        tokens = min(tokens, shared_tokens / share)
        cost = min(cost, shared_cost / share)
        lease_tokens = math.floor(tokens) if tokens < math.inf else math.inf
        lease_cost = cost
        if lease_tokens < 1 or lease_cost <= 0:
            child.finish(
                RunStatus.BUDGET_EXCEEDED,
                "budget exhausted: no room left to lease to a child run elsewhere",
            )
            return None
        price = None if lease_cost == math.inf else (lambda _: lease_cost)
        r = Reservation(
            0, int(lease_tokens) if lease_tokens < math.inf else 0, Calibration(), False, price
        )
        if not child.ledger.try_reserve(r):
            await child.ledger.reserve(r)
        self._lease = r
        return BudgetLease(lease_tokens, lease_cost)

    def inherited(self) -> Inherited:
        """The child's fallback model, combined policy, tools (no spawn) and agents' room."""
        child = self._started()
        tools = tuple(t for name, t in child.tools.items() if name != SPAWN_TOOL)
        return Inherited(child.model, child.policy, tools, _agents_room(child.agent_quota))

    async def sent(self) -> None:
        """Record that the child was handed to its runner."""
        child, run = self._started(), self.state
        self._sent = True
        if run.journal is not None:
            await run.journaled(run.journal.tool_started(child.path, 0, SUBTREE_KEY, False))

    def settle(self, spent: Usage | None) -> None:
        """Give back what the lease held and count ``spent`` (``None``: the lease stays
        spent, what the child spent being unknown)."""
        child = self._started()
        reservation, self._lease = self._lease, None
        if reservation is not None:
            child.ledger.settle(reservation, None if spent is None else Usage())
        if spent is not None:
            child.ledger.spend(spent)

    def adopt(self, result: RunResult) -> None:
        """The result tree run elsewhere becomes the child's (its node stands in for it), each
        typed answer in it validated again by this process's definitions."""
        child = self._started()
        _validate_again(result, self.state.tree)
        first = child.remote_result is None
        child.remote_result = result
        child.replace_messages(list(result.messages))
        child.own_usage = result.own_usage
        child.status = result.status
        child.error = result.error
        child.output = result.output
        child.output_json = result.output_json  # a typed child's answer, as its parent reads it
        child.turns = result.turns
        child.turn_log = list(result.turn_log)
        more = result.agents - 1  # its subtree's agents count against the run's max_agents
        if first and more > 0:
            child.agent_quota.give_back(-more)

    def fail(self, status: RunStatus, reason: str) -> None:
        """End the child with ``status`` and a one-line reason."""
        self._started().finish(status, reason)

    def cut_status(self) -> tuple[RunStatus, str]:
        """Why the child is being cut."""
        return self.state.cut_status(self._started())

    async def end(self, error: BaseException | None = None) -> ChildOutcome:
        """End the child (cut, or an internal error, if nothing ended it), publish its end,
        journal its subtree (shielded: a cut one too, for a resume to replay) and return its
        outcome."""
        child, run = self._started(), self.state
        if child.status is None:
            if error is not None and is_cancellation(error):
                child.finish(*run.cut_status(child))
            else:  # an orchestrator bug propagating: a valid node still
                child.finish(RunStatus.ERROR, "internal error")
        if run.events.enabled:
            run.events.emit(
                AgentFinished(
                    child.path,
                    child.agent.name,
                    child.status or RunStatus.ERROR,
                    child.error,
                    child.subtree_usage(),
                    child.turns,
                )
            )
        journal = run.journal
        if journal is not None and self._sent and child.remote_result is not None:
            recorded = pickle.dumps(as_json(child.remote_result))  # values as JSON
            content = base64.b64encode(recorded).decode("ascii")
            with trio.CancelScope(shield=True):
                await run.journaled(
                    journal.record_result(
                        child.path, 0, SUBTREE_KEY, ToolResultBlock(SUBTREE_KEY, content)
                    )
                )
        return self.outcome(child)


def _validate_again(result: RunResult, tree: AgentTree) -> None:
    """Each typed answer of a tree run elsewhere (JSON on the wire) made a value here by this
    process's definition of its agent: the other side's check is not taken on trust, and the
    value is an instance of the class the parent program knows. One that does not validate
    ends that agent ``invalid_output``, the problems named."""
    for r in result.walk():
        if r.output_json is None:
            continue
        agent = tree.by_name.get(r.agent_name)
        spec = agent.output_spec if agent is not None else None
        if spec is None:  # not typed here (definitions always match): left as the JSON
            r.output = r.output_json
            continue
        raw = json.loads(r.output_json)
        value, problems = spec.check({"result": raw} if spec.wrapped else raw)
        if not problems:
            r.output = value
            continue
        shown = r.output_json if len(r.output_json) <= 1_000 else r.output_json[:1_000] + "…"
        r.status = RunStatus.INVALID_OUTPUT
        r.error = (
            "its answer from where it ran does not validate here: "
            f"{'; '.join(problems[:10])}; the answer: {shown}"
        )
        r.output, r.output_json = None, None


def _agents_room(quota: Quota | None) -> int | None:
    room: int | None = None
    while quota is not None:
        if quota.limit is not None:
            left = max(0, quota.limit - quota.used)
            room = left if room is None else min(room, left)
        quota = quota.parent
    return room


class InProcessRunner:
    """Runs each child's loop in the parent's task (the default runner): the child is a
    node of the same run, sharing its clients, tracer, budgets and cancel scope."""

    async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
        """Run the child's loop here, under its parent, and say how it ended (``parent`` is the
        one the run handed to its runner: a runner may pass it on to this one)."""
        if not isinstance(parent, SpawnSide):
            raise TypeError(
                f"the in-process runner runs a child under the Parent its run handed over, "
                f"got {type(parent).__name__}"
            )
        child = parent.build(spec)
        parent.join_warmup(child)
        await _run_agent()(child, parent.state)
        return parent.outcome(child)


@functools.cache
def _run_agent() -> Callable[[AgentNode, RunState], Awaitable[None]]:
    """The loop's entry point, imported on first use: the loop sits above the tool execution
    that imports this module."""
    from .loop import run_agent

    return run_agent


IN_PROCESS = InProcessRunner()
"""The default runner (stateless: one for every run)."""
