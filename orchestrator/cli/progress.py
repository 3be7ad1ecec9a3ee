"""Live progress for terminals: a tree of agents updating in place, or plain event lines.

Driven only by a run's events (``handle.events``), so drawing can never slow the run: if the
display falls behind, the run drops events instead of waiting. The tree shows each agent's
state (waiting / running / done / failed / parked: waiting for a person), its current step
(waiting for the model, which tool, what the provider searches or fetches for it), turns and
tokens; siblings running in parallel are visible side by side. A call the policy
kept from running shows as declined when an approver (or ``--approve``) said no, and as
refused with what it was otherwise (an unknown tool, a deny rule, no approver...).

:class:`TerminalApprover` is the CLI's ``--approve ask``: it asks on the terminal about one call
at a time (agent path, tool, arguments), pausing the live view while it waits for the answer.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
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
    ModelWaiting,
    ServerToolStarted,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from ..core.messages import canonical_json
from ..core.policy import PendingCall
from ..core.redact import secret_values
from ..core.result import RunResult
from ..core.terminal import terminal_safe

__all__ = ["LiveControl", "TerminalApprover", "follow_events"]

_REDRAW_S = 0.125
_STYLE = {
    "running": "yellow",
    "done": "green",
    "failed": "red",
    "waiting": "dim",
    "parked": "magenta",
}
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
    declined: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Tools (fit for a terminal) whose calls the policy kept from running."""


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
            if row.state in ("done", "failed", "parked"):
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
            if event.refused:
                tool = self._safe(event.tool, 80)
                why = event.refused_why or "declined"
                if why == "no approver":  # the command's --approve none: its no
                    why = "declined"
                # "declined" only for an approver's (or --approve's) no: the rest say what it was
                (row.declined if why == "declined" else row.refused).append(tool)
                if not row.tools_running:
                    row.step = f"{tool} {why}"
                if why == "declined":
                    return f"declined {self._safe(event.path)}: {tool} (not run)"
                return f"refused {self._safe(event.path)}: {tool} ({why}; not run)"
            return None
        if isinstance(event, AgentFinished):
            row.state = (
                "done"
                if event.status == "completed"
                else "parked"  # waits for a person: nothing failed
                if event.status == "awaiting_approval"
                else "failed"
            )
            status = str(event.status)
            row.step = status if event.error is None else f"{status}: {self._safe(event.error, 60)}"
            row.tokens = event.usage.billed_tokens
            row.turns = event.turns
            path = self._safe(event.path)
            line = f"finish {path}: {status} ({event.turns} turns, {row.tokens} tokens)"
            if event.error is not None and event.status != "completed":  # say why
                line += f": {self._safe(event.error, 200)}"
            return line
        if isinstance(event, ModelWaiting):  # every wait shown: none is silent
            why = self._safe(event.reason, 80)
            row.step = f"waiting {event.seconds:.1f}s ({why})"
            return (
                f"wait   {self._safe(event.path)}: {why}; model call again in {event.seconds:.1f}s"
            )
        return self._streamed(row, event)

    def _streamed(self, row: _AgentRow, event: Event) -> str | None:
        """What the model's stream shows: text, a tool call being written, a hosted tool the
        provider runs (a line of its own: searches and fetches are worth a log line)."""
        if isinstance(event, ServerToolStarted):
            row.step = self._server_step(event)
            return f"web    {self._safe(event.path)}: {row.step}"
        if isinstance(event, ModelToolCallStarted):
            row.step = f"model is calling {self._safe(event.tool, 80)}"
        elif isinstance(event, ModelTextDelta):
            row.step = "model is writing"
        return None

    def _server_step(self, event: ServerToolStarted) -> str:
        """``searching "query"``, ``fetching URL``, or the tool's name for another one."""
        arguments = event.input if isinstance(event.input, Mapping) else {}
        query, url = arguments.get("query"), arguments.get("url")
        if event.tool == "web_search" and isinstance(query, str):
            return f'searching "{self._safe(query, 80)}"'
        if event.tool == "web_fetch" and isinstance(url, str):
            return f"fetching {self._safe(url, 120)}"
        return f"provider runs {self._safe(event.tool, 80)}"

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
        if row.declined:
            label.append(f" declined={len(row.declined)}", style="red")
        if row.refused:
            label.append(f" refused={len(row.refused)}", style="red")
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


class LiveControl:
    """Lets an approver pause the live view while it asks a question on the terminal (the view
    would otherwise redraw over the question and the answer being typed)."""

    def __init__(self) -> None:
        self.view: Live | None = None
        self.paused = False

    def pause(self) -> None:
        if self.view is not None and not self.paused:
            self.view.stop()
        self.paused = True

    def resume(self) -> None:
        if self.view is not None and self.paused:
            self.view.start(refresh=True)
        self.paused = False


_ARGS_SHOWN = 600
"""Characters of a call's arguments shown whole in an approval question; longer ones are
shown as their first :data:`_ARGS_HEAD` and last :data:`_ARGS_TAIL` characters, with the count
of those between (the person can answer ``v`` to see them all)."""
_ARGS_HEAD = 360
_ARGS_TAIL = 200
_SPACES = re.compile(r" {12,}")
"""A run of spaces long enough to push text out of sight is shown as its count."""
_PROMPT = "  [y]es / [N]o / [a]ll: "
_PROMPT_CUT = "  [y]es / [N]o / [a]ll / [v]iew all: "


class TerminalApprover:
    """``--approve ask``: each call that needs approval is shown on ``out`` (agent path, tool,
    arguments: redacted, control characters neutralized) and answered on ``answers`` (the
    terminal): ``y`` runs it, ``a`` runs it and every later call of the run, ``v`` shows the
    whole arguments and asks again, anything else (an empty line, end of input) declines it.
    Nothing of the arguments is hidden without saying so: long arguments show their start and
    their end with the count of characters between, and long runs of spaces as their count.
    The runtime asks one call at a time; the wait counts against the run's deadline, and a
    cancelled run abandons the read."""

    def __init__(
        self,
        out: TextIO,
        answers: TextIO | None = None,
        control: LiveControl | None = None,
    ) -> None:
        self.out = out
        self.answers = answers if answers is not None else sys.stdin
        self.control = control
        self.approve_all = False
        self.secrets = secret_values()

    def arguments(self, call: PendingCall) -> str:
        """The whole arguments as shown: redacted, neutralized, long runs of spaces counted."""
        args = terminal_safe(canonical_json(call.input), secrets=self.secrets)
        return _SPACES.sub(lambda m: f"[{len(m.group()):,} spaces]", args)

    def question(self, call: PendingCall) -> str:
        args = self.arguments(call)
        prompt = _PROMPT
        if len(args) > _ARGS_SHOWN:
            hidden = len(args) - _ARGS_HEAD - _ARGS_TAIL
            args = (
                f"{args[:_ARGS_HEAD]} …[{hidden:,} more characters; v shows them]… "
                f"{args[-_ARGS_TAIL:]}"
            )
            prompt = _PROMPT_CUT
        path = terminal_safe(call.agent_path, secrets=self.secrets)
        name = terminal_safe(call.name, secrets=self.secrets)
        return f"approve? {path} wants to run {name} {args}\n{prompt}"

    async def __call__(self, call: PendingCall) -> bool:
        if self.approve_all:
            return True
        if self.control is not None:
            self.control.pause()
        try:
            question = self.question(call)
            while True:
                self.out.write(question)
                self.out.flush()
                line: str = await trio.to_thread.run_sync(
                    self.answers.readline, abandon_on_cancel=True
                )
                answer = line.strip().lower()
                if answer in ("v", "view") and line.endswith("\n"):
                    name = terminal_safe(call.name, secrets=self.secrets)
                    self.out.write(f"the whole arguments of {name}:\n")
                    self.out.write(self.arguments(call) + "\n")
                    continue
                break
            if not line.endswith("\n"):  # end of input: show it as the answer
                self.out.write("(no answer)\n")
            verdict = answer in ("y", "yes", "a", "all")
            self.approve_all = answer in ("a", "all")
            self.out.write(("approved" if verdict else "declined") + "\n")
            self.out.flush()
            return verdict
        finally:
            if self.control is not None:
                self.control.resume()


async def follow_events(
    events: trio.MemoryReceiveChannel[Event],
    *,
    live: bool,
    stream: TextIO,
    outcome: Callable[[], Awaitable[RunResult]] | None = None,
    control: LiveControl | None = None,
) -> None:
    """Draw ``events`` until the channel ends: a live tree if ``live``, else one line per event.

    ``outcome`` (the run's ``handle.result``) settles the last frame: every agent is shown as
    it ended even if the run dropped some of its events because the display fell behind.
    ``control`` lets an approver pause the live view while it asks.
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
        if control is not None:
            control.view = view
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
            view.update(board.render(), refresh=control is None or not control.paused)
            dirty = False
            next_draw = trio.current_time() + _REDRAW_S
        if outcome is not None:
            board.settle(await outcome())
        if control is not None:
            control.resume()
            control.view = None
        view.update(board.render(), refresh=True)
