"""What a run returns: :class:`RunStatus` and the :class:`RunResult` tree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import RunFailedError
from .messages import Message, Usage, message_to_wire

if TYPE_CHECKING:  # only an annotation here; compaction loads trio (via limits), which the
    # command line's exit codes (``cli/main.py``) must not pay for on ``--help``
    from .compaction import TurnContext

__all__ = ["PendingApproval", "RunResult", "RunStatus"]

if TYPE_CHECKING:  # the default (PEP 696) is for type checkers: a bare RunResult is RunResult[Any]
    from typing_extensions import TypeVar as TypeVarWithDefault

    OutputT = TypeVarWithDefault("OutputT", default=Any)
else:  # at run time a plain TypeVar will do, and --help does not load typing_extensions
    OutputT = TypeVar("OutputT")


class RunStatus(StrEnum):
    """How an agent's loop ended. Every bound has its own status; ``completed`` is the only success."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    TIMEOUT = "timeout"
    BUDGET_EXCEEDED = "budget_exceeded"
    REPEAT_GUARD = "repeat_guard"
    ERROR_THRESHOLD = "error_threshold"
    REFUSAL = "refusal"
    CONTEXT_EXCEEDED = "context_exceeded"
    CANCELLED = "cancelled"
    ERROR = "error"
    INVALID_OUTPUT = "invalid_output"
    """A typed agent's answer was rejected more times than ``Limits.output_retries`` allows."""
    AWAITING_APPROVAL = "awaiting_approval"
    """Every agent still running waits for a person to decide a parked call (``DEFER``):
    ``RunResult.pending_approvals`` lists them; ``resume(..., approvals=...)`` goes on."""


@dataclass(frozen=True)
class PendingApproval:
    """A call parked by ``DEFER``, waiting for a person: its transcript ``id`` (what
    ``resume(..., approvals={id: True})`` and ``orchestrator approve --allow ID`` name), the
    agent that made it, the tool and its arguments."""

    id: str
    agent_path: str
    tool: str
    input: dict[str, Any]
    turn: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            "id": self.id,
            "agent_path": self.agent_path,
            "tool": self.tool,
            "input": self.input,
        }


@dataclass(eq=False)
class RunResult(Generic[OutputT]):
    """The outcome of one agent run, with its children's results in spawn order.

    ``output`` is the answer: text, or for an agent with an ``output_type`` the validated value
    (``output_json`` is then its JSON; ``None`` for text). A run that did not complete has
    ``output`` ``""`` or ``None`` (typed).

    ``usage`` covers this agent's whole subtree; ``own_usage`` only its own model calls.
    ``messages`` is the agent's transcript, valid on every exit (each ``tool_use`` answered by
    exactly one ``tool_result`` in the next message). ``error`` is a one-line reason whenever
    ``status`` is not ``completed``.
    """

    agent_name: str
    status: RunStatus
    output: OutputT
    messages: list[Message]
    own_usage: Usage
    usage: Usage
    children: list[RunResult[Any]] = field(default_factory=list)
    error: str | None = None
    path: str = ""
    depth: int = 0
    turns: int = 0
    """Turns begun, counting one a budget, a limit or a cancellation stopped before its model
    call answered (``own_usage.requests`` counts the calls made)."""
    run_id: str = ""
    turn_log: list[TurnContext] = field(default_factory=list)
    """Per turn: input size, results cleared, compaction, cache reads."""
    output_json: str | None = None
    """A typed agent's output as JSON text (compact, keys in field order); ``None`` for text."""
    pending_approvals: list[PendingApproval] = field(default_factory=list)
    """The run's parked calls, on the root's result of a run that ended ``awaiting_approval``."""
    model: str = ""
    """The model this agent ran on, as ``provider:name`` (a child's: the one its parent picked
    from its menu, if it has one)."""

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.status is RunStatus.COMPLETED

    def raise_for_status(self) -> RunResult[OutputT]:
        """Return ``self`` if completed, else raise :class:`~orchestrator.errors.RunFailedError`."""
        if self.status is not RunStatus.COMPLETED:
            raise RunFailedError(self)
        return self

    def walk(self) -> Iterator[RunResult[Any]]:
        """This result and every descendant, depth first in spawn order."""
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def agents(self) -> int:
        """How many agents ran in this subtree, this one included."""
        return sum(1 for _ in self.walk())

    @property
    def total_turns(self) -> int:
        """Turns begun in this subtree (see :attr:`turns`)."""
        return sum(r.turns for r in self.walk())

    def to_dict(self, *, messages: bool = False) -> dict[str, Any]:
        """Plain data for JSON output (transcripts only when ``messages`` is true)."""
        out: dict[str, Any] = {
            "agent": self.agent_name,  # kept for the scripts that read it
            "agent_name": self.agent_name,  # the RunResult field's own name
            "path": self.path,
            "status": self.status.value,
            "output": self.output if self.output_json is None else json.loads(self.output_json),
            "error": self.error,
            "turns": self.turns,
            "model": self.model,
            "usage": self.usage.to_dict(),
            "own_usage": self.own_usage.to_dict(),
            "children": [c.to_dict(messages=messages) for c in self.children],
        }
        if messages:
            out["messages"] = [message_to_wire(m) for m in self.messages]
        return out
