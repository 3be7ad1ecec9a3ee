"""Run events, for progress displays and logs.

The run publishes events into a bounded trio memory channel and never waits for the reader: a
slow or absent consumer costs nothing but dropped events, which are counted
(:attr:`EventSink.dropped`). Agents are identified by their path from the root
(``lead/researcher#2``), which is unique within a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import trio

from .messages import Usage
from .result import RunStatus

__all__ = [
    "AgentFinished",
    "AgentStarted",
    "Event",
    "EventSink",
    "ModelTextDelta",
    "ModelToolCallStarted",
    "ModelWaiting",
    "ServerToolStarted",
    "ToolFinished",
    "ToolStarted",
    "TurnStarted",
]


@dataclass(frozen=True, slots=True)
class AgentStarted:
    """An agent (the root or a child) began its loop."""

    path: str
    name: str
    depth: int
    parent_path: str | None
    task: str


@dataclass(frozen=True, slots=True)
class AgentFinished:
    """An agent ended with ``status`` (a :class:`~orchestrator.RunStatus`, which is also its
    string value: ``event.status == "completed"`` holds too)."""

    path: str
    name: str
    status: RunStatus
    error: str | None
    usage: Usage
    turns: int


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """An agent is about to call its model (turn index from 1)."""

    path: str
    turn: int


@dataclass(frozen=True, slots=True)
class ModelTextDelta:
    """A piece of streamed model text."""

    path: str
    text: str


@dataclass(frozen=True, slots=True)
class ModelToolCallStarted:
    """The model began writing a tool call (streamed; its arguments are not complete yet)."""

    path: str
    tool: str
    call_id: str


@dataclass(frozen=True, slots=True)
class ModelWaiting:
    """The agent's model call waits ``seconds`` before it is sent (again): a retry's backoff or
    the provider's retry-after, or a rate limit another call hit (``reason`` says which)."""

    path: str
    seconds: float
    reason: str


@dataclass(frozen=True, slots=True)
class ServerToolStarted:
    """The model called a hosted tool and the provider is running it (streamed, inside the
    model call): ``tool`` is ``web_search`` or ``web_fetch``, ``input`` its call's input
    (``{"query": ...}``, ``{"url": ...}``)."""

    path: str
    tool: str
    call_id: str
    input: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A tool call passed the policy gate and is running (a refused call has only ToolFinished)."""

    path: str
    tool: str
    call_id: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call produced its result (``is_error`` for failures and refusals; ``refused``
    when the policy gate, a deny rule or an approver's no, kept it from running, and
    ``refused_why`` which: ``"declined"`` (an approver, or ``--approve``, said no),
    ``"unknown tool"`` (not a tool the agent holds), ``"denied by policy"``, ``"no approver"``,
    ``"approver failed"`` or ``"invalid arguments"`` (checked before an approver is asked))."""

    path: str
    tool: str
    call_id: str
    is_error: bool
    refused: bool = False
    refused_why: str = ""


Event: TypeAlias = (
    AgentStarted
    | AgentFinished
    | TurnStarted
    | ModelTextDelta
    | ModelToolCallStarted
    | ModelWaiting
    | ServerToolStarted
    | ToolStarted
    | ToolFinished
)


class EventSink:
    """The sending side of a run's event channel: never blocks, counts what it drops."""

    def __init__(self, buffer: int | float = 1024) -> None:  # math.inf: never drop
        self.send_channel, self.receive_channel = trio.open_memory_channel[Event](buffer)
        self.dropped = 0
        self.enabled = buffer > 0

    def emit(self, event: Event) -> None:
        """Publish ``event`` if there is room (and a reader), else count it as dropped."""
        if not self.enabled:
            return
        try:
            self.send_channel.send_nowait(event)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self.enabled = False

    def close(self) -> None:
        """End the stream: readers see the channel end after the buffered events."""
        self.enabled = False
        self.send_channel.close()
