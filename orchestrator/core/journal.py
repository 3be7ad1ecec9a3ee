"""The journal seam: what a run records before it acts, so a later run can replay it.

A durable run (``resume`` after a crash) needs every model response and every tool result on
record before the runtime acts on it: a response before its tools run, a tool's start before
its side effect, its result before the model sees it. :class:`Journal` is where the runtime
says so; the loop and the tool execution await each call before going on, so a journal that
writes to disk has written when the call returns. The SQLite journal behind resume plugs in
here; the default, :class:`NullJournal`, records nothing, and the runtime skips its calls
altogether (a run without a journal pays nothing for the seam).

Calls, in the order a run makes them (``path`` is the agent's path in the tree, ``turn`` its
turn number, from 1):

- ``run_started(run_id, trace_id, span_id)`` once, before the root agent starts (the ids of the
  run's root span, zero when it is not traced);
- per model call: ``lookup_response(path, turn)`` (a recorded response is used instead of
  calling the model), then ``record_response(path, turn, response)`` once the reply is in,
  before anything acts on it (a tool call cut by the output cap is asked again in the same
  turn: its ``record_response`` replaces the cut reply's, without a second lookup);
- per tool call: ``lookup_call(path, turn, call_id)`` first (a recorded result is used
  instead of running the call; a call recorded as started with no result was in flight when
  the recording run stopped);
- per tool call that runs: ``tool_started(path, turn, call_id, idempotent)`` before it runs,
  then ``record_result(path, turn, call_id, result)`` once its result (a child's answer
  included) is known; a call refused before it runs (bad arguments, the policy, an unknown
  tool) gets only ``record_result``; a call cut by a cancellation gets neither a result nor a
  second start, so resume knows it was in flight;
- ``run_ended(run_id, status)`` once, on every way out (a cancelled run included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..models.base import ModelResponse
from .messages import ToolResultBlock

__all__ = ["Journal", "NullJournal", "RecordedCall"]


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """What a journal holds of one tool call: its result, or ``None`` if it started and its
    result was never recorded (it was in flight when the run stopped)."""

    result: ToolResultBlock | None


@runtime_checkable
class Journal(Protocol):
    """Records a run as it goes (see the module docstring for when each method is called).

    Every method is awaited before the runtime acts on what it records. A method that raises
    ends the run with status ``error`` naming the journal: a run that cannot be recorded must
    not act as if it were.
    """

    async def run_started(self, run_id: str, trace_id: int, span_id: int) -> None:
        """The run starts; ``trace_id`` and ``span_id`` are its root span's (0 if untraced)."""
        ...

    async def lookup_response(self, path: str, turn: int) -> ModelResponse | None:
        """A response recorded for this agent's turn by an earlier run, or ``None``."""
        ...

    async def record_response(self, path: str, turn: int, response: ModelResponse) -> None:
        """A model response, before its tool calls run or the agent ends on it."""
        ...

    async def lookup_call(self, path: str, turn: int, call_id: str) -> RecordedCall | None:
        """What an earlier run recorded of this tool call, or ``None`` (never started)."""
        ...

    async def tool_started(self, path: str, turn: int, call_id: str, idempotent: bool) -> None:
        """A tool call is about to run (after validation and the policy)."""
        ...

    async def record_result(
        self, path: str, turn: int, call_id: str, result: ToolResultBlock
    ) -> None:
        """A tool call's result (or a spawn's child answer), before the model sees it."""
        ...

    async def run_ended(self, run_id: str, status: str) -> None:
        """The run ended with ``status`` (a ``RunStatus`` value), on every way out."""
        ...


class NullJournal:
    """The default journal: records nothing, replays nothing (the runtime skips its calls)."""

    async def run_started(self, run_id: str, trace_id: int, span_id: int) -> None:
        return None

    async def lookup_response(self, path: str, turn: int) -> ModelResponse | None:
        return None

    async def record_response(self, path: str, turn: int, response: ModelResponse) -> None:
        return None

    async def lookup_call(self, path: str, turn: int, call_id: str) -> RecordedCall | None:
        return None

    async def tool_started(self, path: str, turn: int, call_id: str, idempotent: bool) -> None:
        return None

    async def record_result(
        self, path: str, turn: int, call_id: str, result: ToolResultBlock
    ) -> None:
        return None

    async def run_ended(self, run_id: str, status: str) -> None:
        return None
