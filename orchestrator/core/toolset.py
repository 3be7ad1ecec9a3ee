"""Toolsets: tools that exist only while a run holds their source open (an MCP server's).

A :class:`Toolset` goes into ``Agent(tools=[...])`` next to plain tools. Its tools are not known
when the tree is defined: the run opens every toolset of its tree when it starts, concurrently
and before the first model call (:func:`open_toolsets`), so a source that cannot start ends the
run before anything is spent, and the names its tools get can be checked (collisions, policy
rules) like any tool's. Toolsets with one :attr:`Toolset.source` (a server and the narrowed
views of it that ``only(...)`` makes) share one connection per run, whichever agents hold them.
Each source is served by a task of its own under the run's :class:`ToolsetHost`, outside every
agent's nursery (a transport that fails must not cancel an agent), and is closed when the run
ends, on every way out. Core knows nothing of MCP: :mod:`orchestrator.toolsets.mcp` implements
the protocol.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import trio
from opentelemetry.trace import SpanKind

from ..tracing import spans
from .errors import ConfigurationError, OrchestratorError
from .result import RunStatus
from .tools import Tool, describe_exception

if TYPE_CHECKING:
    from .agent import AgentTree
    from .state import AgentNode, RunState

__all__ = ["OfferedTool", "Toolset", "ToolsetFailed", "ToolsetHost", "ToolsetRun"]

_logger = logging.getLogger(__name__)
CLOSE_TIMEOUT = 15.0
"""Seconds the run waits for its toolsets to close (a stdio server gets a grace period to exit
after its stdin closes, then SIGTERM, then SIGKILL: the SDK's, a few seconds at most)."""


class OfferedTool(NamedTuple):
    """A tool a source offers, and where it came from (for messages naming two of them)."""

    tool: Tool
    origin: str
    """Say, ``"the tool 'read.file' of MCP server 'fs'"``."""
    key: str = ""
    """The name the source knows the tool by (an MCP server's own name for it)."""


@dataclass(frozen=True, slots=True)
class ToolsetRun:
    """What a source is told about the run that opens it."""

    run_id: str
    log_dir: Path
    """Where the source may write its logs (a stdio server's stderr), beside the run's trace."""
    deadline: float = math.inf
    """The run's deadline on trio's clock: starting must not outlast it."""


class ToolsetFailed(OrchestratorError):
    """A source could not start: a run ends with status ``error`` and this reason (raised to
    the caller only by a listing outside a run, such as ``MCPServer.list_tools()``)."""


class Toolset(abc.ABC):
    """Tools from a source that the run opens when it starts and closes when it ends."""

    @property
    @abc.abstractmethod
    def toolset_name(self) -> str:
        """Names the toolset in messages (an MCP server's name); unique among sources."""

    @property
    def source(self) -> Hashable:
        """Toolsets with the same source share one connection per run (default: itself)."""
        return self

    @abc.abstractmethod
    async def serve(self, run: ToolsetRun, ready: Callable[[Sequence[OfferedTool]], None]) -> None:
        """Open the source for ``run`` and keep it open until cancelled, then close it.

        Call ``ready(tools)`` once the source's tools are known; raise :class:`ToolsetFailed`
        (or any exception) before that if it cannot start. After ``ready``, a failing source
        must keep serving what it can (calls that come back as errors), never raise.
        """

    def select(self, offered: Sequence[OfferedTool]) -> list[OfferedTool]:
        """The tools this toolset gives an agent, of those its source offers (default: all).
        Raise ConfigurationError for a selection naming a tool the source does not offer."""
        return list(offered)


_Outcome = str | ConfigurationError | None
"""What opening every source came to: ``None`` (all open), a failure reason, or a
configuration error to raise."""


class ToolsetHost:
    """The run's toolsets: one task per source, opened together, closed together."""

    def __init__(self, toolsets: Sequence[Toolset], run: ToolsetRun) -> None:
        self._run = run
        self._sources: dict[Hashable, Toolset] = {}
        names: dict[str, Toolset] = {}
        for ts in toolsets:
            if ts.source in self._sources:
                continue
            other = names.get(ts.toolset_name)
            if other is not None:
                raise ConfigurationError(
                    f"two different toolsets are named {ts.toolset_name!r} ({other!r} and "
                    f"{ts!r}); give each server a name of its own"
                )
            names[ts.toolset_name] = ts
            self._sources[ts.source] = ts
        self.offered: dict[Hashable, tuple[OfferedTool, ...]] = {}
        self._close = trio.Event()
        self._closed = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[_Outcome]) -> None:
        """Open every source concurrently; report the outcome; serve until :meth:`aclose`."""
        outcome: _Outcome = None
        try:
            async with trio.open_nursery() as nursery:
                outcome = await self._open_all(nursery)
                if outcome is None:
                    task_status.started(None)
                    await self._close.wait()
                nursery.cancel_scope.cancel()  # every connection closes (each shields its own)
        finally:
            self._closed.set()
        if outcome is not None:
            task_status.started(outcome)

    async def _open_all(self, nursery: trio.Nursery) -> _Outcome:
        failures: dict[str, str] = {}
        errors: list[ConfigurationError] = []

        async def start(ts: Toolset) -> None:
            try:
                offered = await nursery.start(self._serve_one, ts)
            except ConfigurationError as exc:
                errors.append(exc)
            except ToolsetFailed as exc:
                failures[ts.toolset_name] = str(exc)
            except Exception as exc:
                failures[ts.toolset_name] = (
                    f"toolset {ts.toolset_name!r} failed to start: {describe_exception(exc)}"
                )
            else:
                self.offered[ts.source] = tuple(offered)

        async with trio.open_nursery() as starting:
            for ts in self._sources.values():
                starting.start_soon(start, ts)
        if errors:
            return errors[0]
        if failures:
            return "; ".join(failures[name] for name in sorted(failures))
        return None

    async def _serve_one(
        self, ts: Toolset, *, task_status: trio.TaskStatus[Sequence[OfferedTool]]
    ) -> None:
        started = False

        def ready(tools: Sequence[OfferedTool]) -> None:
            nonlocal started
            started = True
            task_status.started(tools)

        try:
            await ts.serve(self._run, ready)
        except Exception as exc:
            if not started:
                raise
            # a source must not raise once serving: if one does, its calls fail, the run goes on
            _logger.warning(
                "toolset %r stopped with an error: %s", ts.toolset_name, describe_exception(exc)
            )

    def resolve(self, tree: AgentTree) -> dict[str, dict[str, Tool]]:
        """The tools of every agent that holds toolsets: its own tools, then each toolset's
        (in the order its source offers them: sorted by name). Two different tools under one
        name are a ConfigurationError naming both."""
        chosen: dict[int, list[OfferedTool]] = {}
        for ts in tree.toolsets:
            chosen[id(ts)] = ts.select(self.offered.get(ts.source, ()))
        out: dict[str, dict[str, Tool]] = {}
        for agent in tree.by_name.values():
            if not agent.toolsets:
                continue
            tools: dict[str, Tool] = {}
            origin: dict[str, str] = {}
            for t in agent.tools or ():
                tools[t.name] = t
                origin[t.name] = f"the tool {t.name!r} of agent {agent.name!r}"
            for ts in agent.toolsets:
                for offered in chosen[id(ts)]:
                    name = offered.tool.name
                    known = tools.get(name)
                    if known is offered.tool:
                        continue  # two views of one source naming the same tool
                    if known is not None:
                        raise ConfigurationError(
                            f"agent {agent.name!r}: {origin[name]} and {offered.origin} would "
                            f"both be the tool {name!r}; rename one, or leave one out with only()"
                        )
                    tools[name] = offered.tool
                    origin[name] = offered.origin
            out[agent.name] = tools
        return out

    async def aclose(self) -> None:
        """Close every source and wait for them (bounded, and whatever cancels the caller)."""
        self._close.set()
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            await self._closed.wait()
        if scope.cancelled_caught:
            _logger.warning("the run's toolsets did not close within %gs", CLOSE_TIMEOUT)


async def open_toolsets(
    state: RunState, root: AgentNode, nursery: trio.Nursery, log_dir: Path | None
) -> None:
    """Open the tree's toolsets in ``nursery`` (the run's) before the root starts, and give
    each agent its tools. A source that fails leaves ``state.toolset_failure`` set (the run
    ends with ``error`` before any model call); a configuration problem raises."""
    tree = state.tree
    if log_dir is None:
        import tempfile

        log_dir = Path(tempfile.gettempdir()) / "orchestrator-runs"
    host = ToolsetHost(tree.toolsets, ToolsetRun(state.run_id, Path(log_dir), state.deadline))
    state.toolsets = host
    outcome = await nursery.start(host.serve)
    if isinstance(outcome, ConfigurationError):
        raise outcome
    if outcome is not None:
        state.toolset_failure = outcome
        return
    resolved = host.resolve(tree)
    tree.check_policies(resolved)  # now that every tool has its name
    state.agent_tools = resolved
    own = resolved.get(root.agent.name)
    if own is not None:  # the root's own tools and its toolsets', then the spawn tool
        root.tools = {**own, **{n: t for n, t in root.tools.items() if n not in own}}


async def list_toolsets(
    tree: AgentTree, log_dir: Path
) -> tuple[dict[str, dict[str, Tool]], str | None]:
    """Open the tree's toolsets, resolve every agent's tools, check the policies, close them:
    what ``--dry-run`` shows (starting each server, as a run would). Returns the tools of each
    agent listing toolsets, and why a source did not start (``None`` if all did)."""
    host = ToolsetHost(tree.toolsets, ToolsetRun("dry-run", log_dir))
    async with trio.open_nursery() as nursery:
        outcome = await nursery.start(host.serve)
        try:
            if isinstance(outcome, ConfigurationError):
                raise outcome
            if outcome is not None:
                return {}, outcome
            resolved = host.resolve(tree)
            tree.check_policies(resolved)
            return resolved, None
        finally:
            await host.aclose()


def end_before_start(state: RunState, root: AgentNode, reason: str) -> None:
    """A toolset failed to start: the root ends with ``error`` before any model call. The
    trace gets the root's span with that outcome; no agent events (no agent started)."""
    with spans.span(
        state.tracer,
        "invoke_agent",
        root.agent.name,
        SpanKind.INTERNAL,
        lambda: {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": root.agent.name,
            "gen_ai.conversation.id": state.run_id,
            "orchestrator.agent.path": root.path,
            "orchestrator.agent.depth": 0,
        },
        records_outcome=True,
    ) as s:
        root.finish(RunStatus.ERROR, reason)
        spans.record_outcome(s, RunStatus.ERROR.value, root.error)
