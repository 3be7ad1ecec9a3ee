"""The child seam: what a spawn hands to whoever runs the child, and what comes back.

A spawn is planned on the parent's side (the checks that refuse it, its number and path, the
tools it may hold) into a :class:`ChildSpec` of plain data, and handed to the run's
:class:`ChildRunner` with the parent's side of the child, :class:`ParentSide` (the parent's
ledger to lease from and settle on, its event sink, approvals, spawn quotas and cancellation).
The runner runs it and returns a :class:`ChildOutcome`. Nothing else reaches across from a
parent to a child, so a runner that runs children in another process or on another machine
(``orchestrator.dask``) implements the same protocol as :class:`InProcessRunner`, the default,
which runs the child's loop right here, in the parent's EXECUTE step (so the child is
cancelled with its parent and never outlives it).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import trio
from opentelemetry import trace

from ..tracing import spans
from .limits import Limits
from .messages import Usage
from .records import record
from .result import RunStatus
from .spawn import build_child, plan_child, summarize

if TYPE_CHECKING:
    from .events import EventSink
    from .state import AgentNode, RunState
    from .tools import Tool

__all__ = [
    "BudgetLease",
    "ChildOutcome",
    "ChildRunner",
    "ChildSpec",
    "InProcessRunner",
    "ParentSide",
]


@record
class BudgetLease:
    """What a child may spend: the room left of the parent's budgets when it was spawned
    (``inf`` where there is no budget). A runner elsewhere holds its child to it; the parent
    settles the child's real usage on its own ledger when the child ends."""

    tokens: float = math.inf
    cost_usd: float = math.inf


@record
class ChildSpec:
    """One child to run, as plain data (it pickles: a runner may send it anywhere).

    ``tree`` names the tree (its root agent) and ``agent`` the child's definition in it;
    ``path`` is the child's path in the run (``lead/researcher#2``), ``depth`` its depth.
    ``tools`` are the names of the tools it holds (its definition's, narrowed by the call).
    ``limits`` are its per-agent limits, inherited values filled in. ``deadline`` is when it
    must end, in seconds since the epoch (``inf``: no deadline). ``trace_context`` is the W3C
    trace context of the spawn span as (key, value) pairs (``dict()`` makes a carrier of it;
    empty when the run is not traced), so a child run
    elsewhere parents its spans under it. ``turn`` and ``position`` are the spawn call's turn
    in the parent and its position in that turn's reply.
    """

    tree: str
    agent: str
    path: str
    depth: int
    task: str
    tools: tuple[str, ...]
    limits: Limits
    deadline: float
    lease: BudgetLease
    trace_context: tuple[tuple[str, str], ...] = ()
    turn: int = 0
    position: int = 0


@record
class ChildOutcome:
    """How a child ended, for its parent: its status, answer (or reason), usage and a summary
    of what it had done (shown to the parent's model when it did not complete). ``output`` is
    the text the parent's model reads: a typed child's JSON."""

    path: str
    status: RunStatus
    output: str
    error: str | None
    usage: Usage
    turns: int
    summary: str


@runtime_checkable
class ChildRunner(Protocol):
    """Runs one child to its end: ``await runner.run(spec, parent)``.

    Cancellation of the awaiting task must reach the child (and end it ``cancelled``); the
    outcome must be returned whatever the child's status, and only an orchestrator bug may
    raise. A runner may also have ``session(run)``, an async context manager that
    :func:`~orchestrator.open_run` enters before the root's first model call and leaves when
    the run ends (to open and close a connection; a ``ConfigurationError`` it raises refuses
    the run before anything is spent).
    """

    async def run(self, spec: ChildSpec, parent: ParentSide) -> ChildOutcome:
        """Run the child ``spec`` describes under ``parent`` and say how it ended."""
        ...


class ParentSide:
    """The parent's side of its children, for one spawn call: what a runner may use.

    ``plan`` makes the :class:`ChildSpec` (raising ``ToolError`` for a spawn refused before
    anything starts); ``start`` builds the child's in-process state under the parent (a runner
    that runs it elsewhere does not need it); ``outcome`` reads how an in-process child ended.
    ``ledger``, ``events`` and ``cancelled`` are the parent's budget, event sink and
    cancellation, for runners that run the child elsewhere.
    """

    __slots__ = ("_admitted", "node", "position", "run", "span", "turn")

    def __init__(
        self, run: RunState, node: AgentNode, turn: int, position: int, span: trace.Span
    ) -> None:
        self.run = run
        self.node = node
        self.turn = turn
        self.position = position
        self.span = span
        self._admitted: tuple[ChildSpec, dict[str, Tool], Limits] | None = None
        """The last spec :meth:`plan` made, with the tools and limits it found for it."""

    def plan(self, agent: str, task: str, tools: list[str] | None) -> ChildSpec:
        """The child a spawn call asks for; raises ``ToolError`` if it may not start."""
        run, node = self.run, self.node
        definition = run.tree.by_name[agent]
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
        )
        self._admitted = (spec, held, limits)
        return spec

    def start(self, spec: ChildSpec) -> AgentNode:
        """The child's state under the parent (its ledger, slots and quota chained to the
        parent's), counted among the parent's children."""
        admitted = self._admitted
        return build_child(
            self.run,
            self.node,
            spec.agent,
            spec.path,
            spec.task,
            spec.tools,
            (spec.turn, spec.position),
            (admitted[1], admitted[2]) if admitted is not None and admitted[0] is spec else None,
        )

    @property
    def events(self) -> EventSink:
        """The run's event sink (a runner elsewhere forwards its child's events here)."""
        return self.run.events

    def settle(self, usage: Usage) -> None:
        """Count what a child run elsewhere spent against the parent's budgets (an in-process
        child bills the shared ledger as it goes, and never needs this)."""
        self.node.ledger.spend(usage)

    def outcome(self, child: AgentNode) -> ChildOutcome:
        """How an in-process child ended."""
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

    @property
    def runner(self) -> ChildRunner:
        """The run's runner (in this process unless the run was given another)."""
        return self.run.runner or IN_PROCESS

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


class InProcessRunner:
    """Runs each child's loop in the parent's task (the default runner): the child is a
    node of the same run, sharing its clients, tracer, budgets and cancel scope."""

    async def run(self, spec: ChildSpec, parent: ParentSide) -> ChildOutcome:
        child = parent.start(spec)
        await _run_agent()(child, parent.run)
        return parent.outcome(child)


@functools.cache
def _run_agent() -> Callable[[AgentNode, RunState], Awaitable[None]]:
    """The loop's entry point, imported on first use: the loop sits above the tool execution
    that imports this module."""
    from .loop import run_agent

    return run_agent


IN_PROCESS = InProcessRunner()
"""The default runner (stateless: one for every run)."""
