"""Calls that wait for a person: parking (``DEFER``), when a run ends ``awaiting_approval``, and
the decisions a resume brings.

A call the policy parks is recorded in the journal (before anything else happens to it) and
waits; it is never half-run: it has not started, and it starts only once a person allowed it,
in a later resume. An agent counts as waiting when each call of its EXECUTE step still in
flight is parked, or is a spawn whose child is waiting; :class:`Parking` keeps the count of
running agents that are not waiting, and when it reaches zero the run ends: every waiting agent
is cut with status ``awaiting_approval``, and the root's result lists the parked calls.

A run without ``DEFER`` (and without parked calls to carry over) has no :class:`Parking`:
nothing here runs, and the loop pays one ``is None`` per EXECUTE step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn, Protocol, runtime_checkable

import trio

from .errors import ConfigurationError
from .messages import ToolUseBlock
from .result import PendingApproval

if TYPE_CHECKING:
    from .state import AgentNode, RunState

__all__ = [
    "DECLINED_BY_A_PERSON",
    "ApprovalJournal",
    "Parking",
    "pending_of",
    "resolve_approvals",
]

DECLINED_BY_A_PERSON = "the call to {name!r} was declined by a person; it was not run"
Key = tuple[str, int, str]
"""A parked call: (agent path, turn, call id)."""


@runtime_checkable
class ApprovalJournal(Protocol):
    """What a journal needs to hold parked calls and their decisions (the SQLite journal
    does); ``DEFER`` is refused with a journal without it."""

    def parked(self) -> list[tuple[PendingApproval, bool | None]]:
        """Every call parked in the run so far, with its decision (``None``: undecided)."""
        ...

    def record_parked(self, call: PendingApproval) -> None:
        """A call is parked (before the agent waits on it)."""
        ...

    def record_decisions(self, decisions: Mapping[Key, bool]) -> None:
        """A person's decisions, in one transaction, before they take effect."""
        ...


class Parking:
    """The run's parked calls and the count of agents that are not waiting."""

    def __init__(self, run: RunState, journal: ApprovalJournal) -> None:
        self._run = run
        self._journal = journal
        self.busy = 0
        """Agents running and not waiting."""
        self.decisions: dict[Key, bool | None] = {}
        self.pending: dict[Key, PendingApproval] = {}
        """The calls parked in this run, undecided."""
        for call, decision in journal.parked():
            key = (call.agent_path, call.turn, call.id)
            self.decisions[key] = decision
            if decision is None:
                self.pending[key] = call

    def decision(self, node: AgentNode, call: ToolUseBlock) -> bool | str | None:
        """A person's decision on this call (parked by an earlier run), ``"parked"`` if it
        was parked and is still undecided, ``None`` if it was never parked."""
        key = (node.path, node.turns, call.id)
        if key not in self.decisions:
            return None
        decided = self.decisions[key]
        return "parked" if decided is None else decided

    async def park(self, node: AgentNode, index: int, call: ToolUseBlock) -> NoReturn:
        """Park ``call`` (the ``index``-th of the agent's step): on record, then wait until the
        run ends (it never returns: the run's end cancels it)."""
        key = (node.path, node.turns, call.id)
        pending = PendingApproval(call.id, node.path, call.name, dict(call.input), node.turns)
        if key not in self.decisions:
            self.decisions[key] = None
            await self._run.journaled(_record(self._journal, pending))
        self.pending[key] = pending
        self.hold(node, index)
        await trio.sleep_forever()
        raise AssertionError("unreachable: sleep_forever returned")

    # -- who is waiting -------------------------------------------------------------------

    def agent_started(self, node: AgentNode) -> None:
        self.busy += 1

    def agent_finished(self, node: AgentNode) -> None:
        if node.waiting:
            node.waiting = False  # it was not counted: its parent's call still holds it
        else:
            self.busy -= 1

    def step_started(self, node: AgentNode, calls: int) -> None:
        """The agent's EXECUTE step runs ``calls`` calls."""
        node.open_calls = calls
        node.held = set()

    def call_done(self, node: AgentNode, index: int) -> None:
        """The ``index``-th call of the agent's step has its result."""
        node.open_calls -= 1
        if node.held is not None:
            node.held.discard(index)
        self._update(node)

    def hold(self, node: AgentNode, index: int) -> None:
        """The ``index``-th call of the agent's step waits (parked, or its child waits)."""
        if node.held is None:
            node.held = set()
        node.held.add(index)
        self._update(node)

    def _update(self, node: AgentNode) -> None:
        held = node.held or ()
        waiting = node.open_calls > 0 and len(held) == node.open_calls
        if waiting == node.waiting or node.status is not None:
            return
        node.waiting = waiting
        parent = node.parent
        if waiting:
            self.busy -= 1
            if parent is not None:
                self.hold(parent, node.spawn_index)
            if self.busy <= 0:
                self._end()
        else:
            self.busy += 1
            if parent is not None and parent.held is not None:
                parent.held.discard(node.spawn_index)
                self._update(parent)

    def _end(self) -> None:
        """Every running agent waits: the run ends ``awaiting_approval``."""
        run = self._run
        if run.fatal_error is None and not run.cancel_requested:
            run.awaiting_approval = True
            run.scope.cancel()

    def pending_list(self) -> list[PendingApproval]:
        """The undecided parked calls, by agent path, turn and id (as the journal lists them:
        the order concurrent agents parked them in is the scheduler's)."""
        return [self.pending[key] for key in sorted(self.pending)]


async def _record(journal: ApprovalJournal, call: PendingApproval) -> None:
    journal.record_parked(call)


def resolve_approvals(
    approvals: Mapping[str, bool], parked: list[tuple[PendingApproval, bool | None]]
) -> dict[Key, bool]:
    """``{id or unique prefix: allow}`` as decisions on the undecided parked calls (``AGENT_PATH:ID``
    names a call of one agent, where two agents' models used the same id); an id that names
    none, or more than one, is a ConfigurationError (one line)."""
    undecided = [call for call, decision in parked if decision is None]
    out: dict[Key, bool] = {}
    for given, allow in approvals.items():
        if not isinstance(given, str) or not isinstance(allow, bool):
            raise ConfigurationError(
                f"approvals map a pending call's id to True or False, got {given!r}: {allow!r}"
            )
        among = undecided
        path, colon, rest = given.rpartition(":")
        if colon and any(c.agent_path == path for c in undecided):  # AGENT_PATH:ID
            among, given = [c for c in undecided if c.agent_path == path], rest
        exact = [c for c in among if c.id == given]
        found = exact or [c for c in among if c.id.startswith(given)]
        if not found:
            pending = ", ".join(c.id for c in undecided) or "none"
            raise ConfigurationError(f"no pending call {given!r} in this run (pending: {pending})")
        if len(found) > 1:
            raise ConfigurationError(
                f"{given!r} names {len(found)} pending calls "
                f"({', '.join(f'{c.id} of {c.agent_path}' for c in found)}); give more of its "
                "id, or AGENT_PATH:ID"
            )
        call = found[0]
        out[(call.agent_path, call.turn, call.id)] = allow
    return out


def pending_of(parked: list[tuple[PendingApproval, bool | None]]) -> list[PendingApproval]:
    """The undecided calls among a journal's parked ones."""
    return [call for call, decision in parked if decision is None]
