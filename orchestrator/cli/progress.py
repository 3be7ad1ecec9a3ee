"""Live progress for terminals: a tree of agents updating in place, or plain event lines.

Driven only by a run's events (``handle.events``), so drawing can never slow the run: if the
display falls behind, the run drops events instead of waiting. The tree shows each agent's
state (waiting / running / done / failed), its current step (waiting for the model, which tool),
turns and tokens; siblings running in parallel are visible side by side.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TextIO

import trio
from rich.console import Console
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from ..core.events import (
    AgentFinished,
    AgentStarted,
    Event,
    ModelTextDelta,
    ModelToolCallStarted,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from ..core.redact import secret_values
from ..core.result import RunResult
from ..core.terminal import terminal_safe

__all__ = ["follow_events"]

_REDRAW_S = 0.125
_STYLE = {"running": "yellow", "done": "green", "failed": "red", "waiting": "dim"}
# "waiting": started but not yet at its first model turn (queued behind limits or its parent)


@dataclass
class _AgentRow:
    name: str = ""
    """The last part of its path, fit for a terminal."""
    state: str = "waiting"
    step: str = "starting"
    turns: int = 0
    tokens: int = 0
    tools_running: dict[str, str] = field(default_factory=dict)
    """Tool name (fit for a terminal) by call id: two parallel calls of one tool are two
    entries."""


class _Board:
    """What the display knows about every agent, by path.

    Every text an event brings (a task, a tool name the model chose, an error) passes through
    :func:`~orchestrator.core.terminal.terminal_safe` once, as it arrives: secrets redacted with
    the snapshot taken when the board was made, control characters shown as escapes.
    """

    def __init__(self, secrets: tuple[str, ...] | None = None) -> None:
        self.secrets = secret_values() if secrets is None else secrets
        self.rows: dict[str, _AgentRow] = {}
        self.children: dict[str | None, list[str]] = {}
        """Paths by parent path, so a render walks the tree once (no scan per node)."""

    def settle(self, result: RunResult) -> list[str]:
        """Bring every agent to its final state from the run's result (events may have been
        dropped when the display fell behind); the plain lines of finishes not yet shown."""
        lines = []
        for node in result.walk():
            row = self.rows.get(node.path)
            if row is None:  # its start was dropped too
                row = self.rows[node.path] = _AgentRow(
                    name=self._safe(node.path.rsplit("/", 1)[-1])
                )
                parent = node.path.rpartition("/")[0] or None
                self.children.setdefault(parent, []).append(node.path)
            if row.state in ("done", "failed"):
                continue
            line = self.apply(
                AgentFinished(
                    node.path,
                    node.agent_name,
                    node.status,
                    node.error,
                    node.usage,
                    node.turns,
                )
            )
            if line:
                lines.append(line)
        return lines

    def _safe(self, text: str, limit: int | None = None) -> str:
        return terminal_safe(text, limit=limit, secrets=self.secrets)

    def apply(self, event: Event) -> str | None:
        """Update the board; return a one-line description for plain output (or None)."""
        if isinstance(event, AgentStarted):
            self.rows[event.path] = _AgentRow(name=self._safe(event.path.rsplit("/", 1)[-1]))
            self.children.setdefault(event.parent_path, []).append(event.path)
            return f"start  {self._safe(event.path)}: '{self._safe(event.task, 80)}'"
        row = self.rows.get(event.path)
        if row is None:
            return None
        if isinstance(event, TurnStarted):
            row.state = "running"
            row.turns = event.turn
            row.step = "waiting for the model"
            return None
        if isinstance(event, ToolStarted):
            row.tools_running[event.call_id] = tool = self._safe(event.tool, 80)
            row.step = _running(row)
            return f"tool   {self._safe(event.path)}: {tool}"
        if isinstance(event, ToolFinished):
            row.tools_running.pop(event.call_id, None)
            row.step = _running(row) if row.tools_running else "tools done"
            return None
        if isinstance(event, AgentFinished):
            row.state = "done" if event.status == "completed" else "failed"
            status = str(event.status)
            row.step = status if event.error is None else f"{status}: {self._safe(event.error, 60)}"
            row.tokens = event.usage.billed_tokens
            row.turns = event.turns
            path = self._safe(event.path)
            return f"finish {path}: {status} ({event.turns} turns, {row.tokens} tokens)"
        if isinstance(event, ModelToolCallStarted):
            row.step = f"model is calling {self._safe(event.tool, 80)}"
        elif isinstance(event, ModelTextDelta):
            row.step = "model is writing"
        return None

    def render(self) -> Tree:
        tree = Tree(Text("agents", style="bold"))
        for path in self.children.get(None, []):
            self._add(tree, path)
        return tree

    def _add(self, parent: Tree, path: str) -> None:
        row = self.rows[path]
        label = Text()
        label.append(f"{row.name} ", style="bold")
        label.append(f"[{row.state}] ", style=_STYLE.get(row.state, ""))
        label.append(f"{row.step}  turns={row.turns}")
        if row.tokens:
            label.append(f" tokens={row.tokens:,}")
        node = parent.add(label)
        # children in spawn order ("name#index"), whatever order the scheduler started them in
        children = sorted(self.children.get(path, []), key=_spawn_key)
        for child_path in children:
            self._add(node, child_path)


def _running(row: _AgentRow) -> str:
    return "running " + ", ".join(sorted(set(row.tools_running.values())))


def _spawn_key(path: str) -> tuple[str, int]:
    name, _, index = path.rsplit("/", 1)[-1].rpartition("#")
    return (name, int(index)) if index.isdigit() else (path, 0)


async def follow_events(
    events: trio.MemoryReceiveChannel[Event],
    *,
    live: bool,
    stream: TextIO,
    outcome: Callable[[], Awaitable[RunResult]] | None = None,
) -> None:
    """Draw ``events`` until the channel ends: a live tree if ``live``, else one line per event.

    ``outcome`` (the run's ``handle.result``) settles the last frame: every agent is shown as
    it ended even if the run dropped some of its events because the display fell behind.
    """
    board = _Board()
    # no markup or highlighting: Live shows what others write to stderr through this console,
    # as written (an approver's "Allow? [y/N]" must not lose "[y/N]" as a style tag)
    console = Console(file=stream, markup=False, highlight=False)
    if not live:
        async for event in events:
            line = board.apply(event)
            if line:
                stream.write(line + "\n")
                stream.flush()
        if outcome is not None:
            for line in board.settle(await outcome()):
                stream.write(line + "\n")
            stream.flush()
        return
    # redraw at most every 1/8 s: a wave of a thousand events costs one render, not a thousand;
    # an event that arrived since the last redraw is drawn at the next tick even if nothing
    # follows it (a long tool call shows as running, not as the step before it)
    with Live(board.render(), console=console, auto_refresh=False, transient=False) as view:
        dirty = False
        next_draw = trio.current_time() + _REDRAW_S
        while True:
            with trio.move_on_at(next_draw if dirty else math.inf):
                try:
                    event = await events.receive()
                except trio.EndOfChannel:
                    break
                board.apply(event)
                dirty = True
                if trio.current_time() < next_draw:
                    continue
            view.update(board.render(), refresh=True)
            dirty = False
            next_draw = trio.current_time() + _REDRAW_S
        if outcome is not None:
            board.settle(await outcome())
        view.update(board.render(), refresh=True)
