"""The child seam: what a spawn hands to whoever runs the child, and what it may do back.

A spawn is planned on the parent's side (the checks that refuse it, its number and path, the
tools it may hold) into a :class:`ChildSpec` of plain data, and handed to the run's
:class:`ChildRunner` with a :class:`Parent`: the parent's side of that one child, naming
exactly what a runner may do there. The runner runs the child and returns a
:class:`ChildOutcome`. Nothing else reaches across from a parent to a child.

The default runner runs the child's loop right here (``core/inprocess.py``). A runner that runs
children elsewhere (``orchestrator.dask``; a subprocess pool, Ray or Temporal tomorrow) starts
the child on the parent's side (:meth:`Parent.start`), replays it if the run's journal holds
its subtree (:meth:`Parent.replayed`), leases it a share of the budget (:meth:`Parent.lease`),
sends its spec with what it inherits (:meth:`Parent.inherited`, and the run's definitions from
:meth:`RunSide.definitions`) to a process that calls :func:`~orchestrator.core.host.host_child`,
then adopts the result tree that comes back (:meth:`Parent.adopt`), settles the lease
(:meth:`Parent.settle`) and ends the child (:meth:`Parent.end`). Its session, if it has one, gets
the run's side (:class:`RunSide`): events published, approvals asked, the run's tracer.

This module imports no runtime module: runners import it without the loop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .limits import Limits
from .messages import Usage
from .records import record
from .result import RunResult, RunStatus

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from ..models.base import Model
    from .agent import Agent
    from .compaction import ContextPolicy
    from .events import Event
    from .policy import Approver, PendingCall, Policy
    from .tools import Tool

__all__ = [
    "BudgetLease",
    "ChildOutcome",
    "ChildRunner",
    "ChildSpec",
    "Inherited",
    "Parent",
    "RunDefinitions",
    "RunSide",
    "as_json",
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
    in the parent and its position in that turn's reply. ``model`` is the model the spawn call
    picked from the agent's menu, as the menu names it (``None``: the agent's own or inherited
    model, its menu's first); ``budget_tokens`` the sub-budget the call gave it.
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
    model: str | None = None
    budget_tokens: int | None = None
    """A token sub-budget the spawn call gave this child (``None``: none of its own)."""


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


@dataclass(frozen=True, slots=True)
class RunDefinitions:
    """What every child of one run shares, to run it elsewhere: the tree's definitions and the
    run's options (live objects: a runner sends them as it can, by pickle for Dask)."""

    run_id: str
    root: Agent
    limits: Limits
    """The run's own limits (``run(limits=...)``; unset fields inherit)."""
    policy: Policy | None
    model: Model | None
    """The run's default model (``run(model=...)``), resolved."""
    deps: Any
    context: ContextPolicy | None
    capture: bool
    """Whether spans capture content (messages, tool arguments and results)."""
    tool_threads: int


@dataclass(frozen=True, slots=True)
class Inherited:
    """What one child takes from its parent beyond its spec: the model it falls back to, the
    policy it runs under (its own combined with its ancestors'), its tools (spawn excluded: the
    host gives it its own), and how many more agents its subtree may start (``None``: no
    ``max_agents`` above it)."""

    model: Model
    policy: Policy
    tools: tuple[Tool, ...]
    agents_room: int | None


@runtime_checkable
class RunSide(Hashable, Protocol):
    """The run's side, for a runner's session and for what its children send back: equal (and
    hashing alike) for every spawn of one run, so a runner can key its per-run state on it."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def tracer(self) -> Tracer | None:
        """The run's tracer (``None``: not traced): spans recorded elsewhere end through it."""
        ...

    @property
    def events_enabled(self) -> bool:
        """Whether anybody reads the run's events (else a runner need not send them back)."""
        ...

    def definitions(self) -> RunDefinitions:
        """The tree and the run's options, for the children a runner runs elsewhere."""
        ...

    def emit(self, event: Event) -> None:
        """Publish an event of a remote agent on the run's stream (never blocks)."""
        ...

    async def ask(self, approver: Approver, call: PendingCall) -> object:
        """Ask one of the run's approvers about a remote agent's call, one question at a time
        as for local ones (its verdict: ``True`` runs the call)."""
        ...


@runtime_checkable
class Parent(Protocol):
    """The parent's side of one child, as a runner sees it: what it may do there.

    :meth:`start` first (the child is counted among the parent's children and its start
    published), :meth:`end` last (whatever happened: its end published and journaled, and its
    outcome for the parent). The in-process runner needs nothing else of it; a runner that runs
    the child elsewhere uses the rest.
    """

    @property
    def run(self) -> RunSide:
        """The run this child belongs to."""
        ...

    def start(self, spec: ChildSpec) -> None:
        """Count the child among the parent's children and publish its start (once)."""
        ...

    async def replayed(self) -> bool:
        """Whether the run's journal already holds this child's subtree (a resumed run): it is
        adopted (or, for one that was in flight when the run stopped, ended as an ``error``
        that is never run twice) and the runner must not run it."""
        ...

    async def lease(self) -> BudgetLease | None:
        """Reserve the child's budget on the parent's ledger: the room left, shared evenly
        among the spawns of its turn not yet leased; ``None`` when there is no room (the child
        is ended ``budget_exceeded``)."""
        ...

    def inherited(self) -> Inherited:
        """What the child takes from its parent beyond its spec."""
        ...

    async def sent(self) -> None:
        """Record in the journal that the child was handed to its runner (a resume then knows
        it may have run: it is never run twice)."""
        ...

    def settle(self, spent: Usage | None) -> None:
        """Settle the lease: ``spent`` is counted and the rest of the lease given back
        (``None``: what the child spent is not known, the whole lease stays spent)."""
        ...

    def adopt(self, result: RunResult) -> None:
        """The child's result tree, run elsewhere, becomes the child's (its status, answer,
        transcript, usage and subtree; its agents count against ``max_agents``)."""
        ...

    def fail(self, status: RunStatus, reason: str) -> None:
        """End the child with ``status`` and a one-line reason (a lost worker, a task that
        could not be sent)."""
        ...

    def cut_status(self) -> tuple[RunStatus, str]:
        """Why the child is being cut when its runner is cancelled: the run's deadline, its
        cancel(), a fatal error elsewhere, or a scope around the run."""
        ...

    async def end(self, error: BaseException | None = None) -> ChildOutcome:
        """The child's end: one not ended yet is cut (``error`` a cancellation: with
        :meth:`cut_status`) or ended as an internal error; its end is published and its
        subtree journaled; the outcome its parent reads."""
        ...


@runtime_checkable
class ChildRunner(Protocol):
    """Runs one child to its end: ``await runner.run(spec, parent)``.

    Cancellation of the awaiting task must reach the child (and end it ``cancelled``); the
    outcome must be returned whatever the child's status, and only an orchestrator bug may
    raise. A runner may also have ``session(run)``, an async context manager that
    :func:`~orchestrator.open_run` enters with the run's :class:`RunSide` before the root's
    first model call and leaves when the run ends (to open and close a connection; a
    ``ConfigurationError`` it raises refuses the run before anything is spent).
    """

    async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
        """Run the child ``spec`` describes under ``parent`` and say how it ended."""
        ...


def as_json(result: RunResult) -> RunResult:
    """``result`` with every typed answer as its JSON only (``output`` ``None``): what a runner
    sends back across a wire and what a journal records. The parent validates each again with
    its own definition when it adopts the tree (:meth:`Parent.adopt`), so no instance of a
    class defined in a tree file is ever unpickled by the parent."""
    return dataclasses.replace(
        result,
        output=None if result.output_json is not None else result.output,
        children=[as_json(c) for c in result.children],
    )
