"""Live progress for terminals: a tree of agents updating in place, or plain event lines.

Driven only by a run's events (``handle.events``), so drawing can never slow the run: if the
display falls behind, the run drops events instead of waiting. The tree shows each agent's
state (waiting / running / done / failed), its current step (waiting for the model, which tool),
turns and tokens; siblings running in parallel are visible side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

import trio
from rich.console import Console
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from .events import (
    AgentFinished,
    AgentStarted,
    Event,
    ModelTextDelta,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)

__all__ = ["follow_events"]

_STYLE = {"running": "yellow", "done": "green", "failed": "red", "waiting": "dim"}


@dataclass
class _AgentRow:
    name: str
    depth: int
    parent: str | None
    state: str = "running"
    step: str = "starting"
    turns: int = 0
    tokens: int = 0
    status: str = ""
    tools_running: set[str] = field(default_factory=set)


class _Board:
    """What the display knows about every agent, by path."""

    def __init__(self) -> None:
        self.rows: dict[str, _AgentRow] = {}

    def apply(self, event: Event) -> str | None:
        """Update the board; return a one-line description for plain output (or None)."""
        if isinstance(event, AgentStarted):
            self.rows[event.path] = _AgentRow(event.name, event.depth, event.parent_path)
            return f"start  {event.path}: {event.task[:80]!r}"
        row = self.rows.get(event.path)
        if row is None:
            return None
        if isinstance(event, TurnStarted):
            row.turns = event.turn
            row.step = "waiting for the model"
            return None
        if isinstance(event, ToolStarted):
            row.tools_running.add(event.tool)
            row.step = "running " + ", ".join(sorted(row.tools_running))
            return f"tool   {event.path}: {event.tool}"
        if isinstance(event, ToolFinished):
            row.tools_running.discard(event.tool)
            row.step = (
                ("running " + ", ".join(sorted(row.tools_running)))
                if row.tools_running
                else "tools done"
            )
            return None
        if isinstance(event, AgentFinished):
            row.state = "done" if event.status == "completed" else "failed"
            row.status = event.status
            row.step = (
                event.status if event.error is None else f"{event.status}: {event.error[:60]}"
            )
            row.tokens = event.usage.billed_tokens
            row.turns = event.turns
            return f"finish {event.path}: {event.status} ({event.turns} turns, {event.usage.billed_tokens} tokens)"
        if isinstance(event, ModelTextDelta):
            row.step = "model is writing"
        return None

    def render(self) -> Tree:
        roots = [p for p, r in self.rows.items() if r.parent is None]
        tree = Tree(Text("agents", style="bold"))
        for path in roots:
            self._add(tree, path)
        return tree

    def _add(self, parent: Tree, path: str) -> None:
        row = self.rows[path]
        label = Text()
        label.append(f"{path.rsplit('/', 1)[-1]} ", style="bold")
        label.append(f"[{row.state}] ", style=_STYLE.get(row.state, ""))
        label.append(f"{row.step}  turns={row.turns}")
        if row.tokens:
            label.append(f" tokens={row.tokens:,}")
        node = parent.add(label)
        for child_path, child in self.rows.items():
            if child.parent == path:
                self._add(node, child_path)


async def follow_events(
    events: trio.MemoryReceiveChannel[Event], *, live: bool, stream: TextIO
) -> None:
    """Draw ``events`` until the channel ends: a live tree if ``live``, else one line per event."""
    board = _Board()
    console = Console(file=stream)
    if not live:
        async for event in events:
            line = board.apply(event)
            if line:
                stream.write(line + "\n")
                stream.flush()
        return
    # redraw at most every 1/8 s: a wave of a thousand events costs one render, not a thousand
    with Live(board.render(), console=console, auto_refresh=False, transient=False) as view:
        last = 0.0
        async for event in events:
            board.apply(event)
            now = trio.current_time()
            if now - last >= 0.125:
                last = now
                view.update(board.render(), refresh=True)
        view.update(board.render(), refresh=True)
