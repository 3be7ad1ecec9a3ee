"""One MCP server's connection for one run: start, list, call, die, close (the ``mcp`` SDK's).

:class:`Connection` runs in a task of its own under the run's toolset host: it starts the
server within its ``timeout`` (naming the server and its last stderr line if it cannot), lists
its tools once, reports them as ``{server}__{tool}`` tools (sorted), then waits until the run
ends, when leaving the SDK's ``Client`` closes the transport. Calls come from the agents' own
tasks, each under a cancel scope the connection holds: a server that dies (a stdio process
exiting, an HTTP transport failing, which cancels the whole client body) ends the calls in
flight and every later one as an ``is_error`` result naming it, and the run goes on.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast
from urllib.parse import urlsplit

import httpx2
import mcp_types as types
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import __version__
from ..core.cancellation import is_cancellation
from ..core.errors import ConfigurationError, ToolError
from ..core.tools import Tool, describe_exception
from ..core.toolset import OfferedTool, ToolsetFailed, ToolsetRun
from ..tracing import spans
from .mcp import MAX_NAME, _Http, _Stdio, exposed_name

if TYPE_CHECKING:
    from .mcp import MCPServer

__all__ = ["Connection"]

_logger = logging.getLogger("orchestrator.mcp")
# The SDK logs what a server got wrong (a line on stdout that is not JSON-RPC, with its
# traceback) as errors: for a program that configured logging they reach its handlers; for one
# that did not, a handler here keeps Python's last resort from printing them on the terminal.
logging.getLogger("mcp").addHandler(logging.NullHandler())
_PAGES = 100
"""tools/list pages read at most (a server whose cursor never ends cannot hang the start)."""
_PROPAGATOR = TraceContextTextMapPropagator()
_STDERR_TAIL = 300


class Connection:
    """One server, one run."""

    def __init__(self, server: MCPServer, run: ToolsetRun) -> None:
        self.server = server
        self.name = server.name
        self.run = run
        self.client: Client | None = None
        self.stopped: str | None = None
        """Why the server can no longer be called (``None`` while it can)."""
        self._calls: set[trio.CancelScope] = set()
        self.session_id: str | None = None
        self.stderr_path: Path | None = None
        self.network_transport = "pipe" if isinstance(server.transport, _Stdio) else "tcp"
        self._warned_changes = False

    # -- lifetime -----------------------------------------------------------------------

    async def serve(self, ready: Callable[[Sequence[OfferedTool]], None]) -> None:
        started = False
        refused: ConfigurationError | None = None  # raised outside the SDK's task groups
        try:
            with trio.CancelScope() as startup:
                startup.deadline = min(trio.current_time() + self.server.timeout, self.run.deadline)
                try:
                    async with self._connected() as client:
                        listed = await _list_tools(client)
                        try:
                            offered = self._offer(listed)
                        except ConfigurationError as exc:
                            refused = exc
                        else:
                            startup.deadline = math.inf
                            self.client = client
                            ready(offered)
                            started = True
                            await self._watch(client)  # until the run ends (or HTTP fails)
                except BaseException as exc:
                    if is_cancellation(exc):
                        raise
                    if not started:
                        raise ToolsetFailed(self._failed_to_start(exc)) from None
                    self._stop(f"its connection failed: {_leaf_text(exc)}")
            if refused is not None:
                raise refused
            if startup.cancelled_caught and not started:
                raise ToolsetFailed(
                    f"MCP server {self.name!r} did not start within "
                    f"{self.server.timeout:g}s{self._stderr_tail()}"
                )
        finally:
            self._stop("the run ended")
            self.client = None

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[Client]:
        async with AsyncExitStack() as stack:
            transport = self.server.transport
            target: Any
            if isinstance(transport, _Stdio):
                errlog = stack.enter_context(self._open_stderr_log())
                params = StdioServerParameters(
                    command=transport.command,
                    args=list(transport.args),
                    env=dict(transport.env) if transport.env is not None else None,
                    cwd=transport.cwd,
                )
                target = stdio_client(params, errlog=errlog)
            else:
                target = streamable_http_client(
                    transport.url,
                    http_client=await stack.enter_async_context(self._http_client(transport)),
                )
            client = Client(
                target,
                client_info=types.Implementation(name="orchestrator", version=__version__),
                message_handler=self._on_message,
                cache=None,
            )
            yield await stack.enter_async_context(client)

    def _open_stderr_log(self) -> TextIO:
        """The server's stderr, to a file beside the run's trace (never the terminal)."""
        folder = self.run.log_dir
        folder.mkdir(parents=True, exist_ok=True)
        self.stderr_path = folder / f"{self.run.run_id}.mcp-{self.name}.stderr.log"
        return self.stderr_path.open("w", encoding="utf-8", errors="replace")

    def _http_client(self, transport: _Http) -> httpx2.AsyncClient:
        async def remember_session(response: httpx2.Response) -> None:
            session = response.headers.get("mcp-session-id")
            if session:
                self.session_id = session

        return httpx2.AsyncClient(
            headers=dict(transport.headers or {}),
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [remember_session]},
        )

    async def _watch(self, client: Client) -> None:
        """Wait for the run's end, logging a changed tool list: a 2026 server tells through a
        subscription, an older one by a notification (:meth:`_on_message`)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    self._tools_changed()
        except Exception as exc:  # an older server (no subscriptions), or one that stopped
            _logger.debug("MCP server %r: no change subscription (%s)", self.name, exc)
        await trio.sleep_forever()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_changed()
        await trio.lowlevel.checkpoint()

    def _tools_changed(self) -> None:
        """Logged, never applied: no agent gains or loses tools during a run."""
        if not self._warned_changes:
            self._warned_changes = True
            _logger.info(
                "MCP server %r says its tools changed; this run keeps the tools it listed "
                "when it started",
                self.name,
            )

    def _stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
        for scope in list(self._calls):
            scope.cancel()

    # -- tools ---------------------------------------------------------------------------

    def _offer(self, listed: Sequence[types.Tool]) -> list[OfferedTool]:
        by_name: dict[str, OfferedTool] = {}
        for listed_tool in listed:
            name = exposed_name(self.name, listed_tool.name)
            origin = f"the tool {listed_tool.name!r} of MCP server {self.name!r}"
            if len(name) > MAX_NAME:
                _logger.warning(
                    "MCP server %r: its tool %r is left out: %r is longer than %d characters",
                    self.name,
                    listed_tool.name,
                    name,
                    MAX_NAME,
                )
                continue
            known = by_name.get(name)
            if known is not None:
                raise ConfigurationError(
                    f"{known.origin} and {origin} would both be the tool {name!r}; leave one "
                    f"out with only()"
                )
            schema = {k: v for k, v in (listed_tool.input_schema or {}).items() if k != "$schema"}
            schema.setdefault("type", "object")
            hints = listed_tool.annotations
            idempotent = bool(hints and (hints.read_only_hint or hints.idempotent_hint))
            description = (listed_tool.description or listed_tool.title or "").strip()
            try:
                tool = Tool.from_schema(
                    name,
                    description or f"{listed_tool.name} (a tool of MCP server {self.name!r})",
                    schema,
                    _Caller(self, listed_tool.name),
                    idempotent=idempotent,
                )
            except ConfigurationError as exc:
                _logger.warning(
                    "MCP server %r: its tool %r is left out: %s", self.name, listed_tool.name, exc
                )
                continue
            by_name[name] = OfferedTool(tool, origin, listed_tool.name)
        return [by_name[n] for n in sorted(by_name)]

    async def call(self, tool_name: str, arguments: dict[str, Any]) -> str:
        client = self.client
        if client is None or self.stopped is not None:
            raise ToolError(self._stopped_message())
        self._describe_span(tool_name)
        meta: dict[str, Any] = {}
        _PROPAGATOR.inject(meta)  # the W3C trace context, as the MCP conventions say
        with trio.CancelScope() as scope:
            self._calls.add(scope)
            try:
                result = await client.call_tool(
                    tool_name, arguments, meta=cast(types.RequestParamsMeta, meta)
                )
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    self._stop("its connection closed")
                    raise ToolError(self._stopped_message()) from None
                raise ToolError(
                    f"MCP server {self.name!r} answered the call to {tool_name!r} with an "
                    f"error ({exc.code}): {exc.message}"
                ) from None
            finally:
                self._calls.discard(scope)
        if scope.cancelled_caught:  # the connection ended under the call
            raise ToolError(self._stopped_message(during=True))
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"MCP server {self.name!r}: the call to {tool_name!r} failed")
        return text

    def _describe_span(self, tool_name: str) -> None:
        """The OpenTelemetry MCP conventions' attributes, on the call's ``execute_tool`` span."""
        span = trace.get_current_span()
        scope = getattr(span, "instrumentation_scope", None)
        if not span.is_recording() or scope is None or scope.name != spans.TRACER_NAME:
            return
        attributes: dict[str, Any] = {
            "mcp.method.name": "tools/call",
            "network.transport": self.network_transport,
            "orchestrator.mcp.server": self.name,
            "orchestrator.mcp.tool": tool_name,
        }
        client = self.client
        if client is not None:
            attributes["mcp.protocol.version"] = client.protocol_version
        if self.session_id:
            attributes["mcp.session.id"] = self.session_id
        if isinstance(self.server.transport, _Http):
            parts = urlsplit(self.server.transport.url)
            if parts.hostname:
                attributes["server.address"] = parts.hostname
            if parts.port:
                attributes["server.port"] = parts.port
        span.set_attributes(attributes)

    # -- messages ------------------------------------------------------------------------

    def _stopped_message(self, *, during: bool = False) -> str:
        when = "stopped during the call" if during else "is not running"
        return (
            f"MCP server {self.name!r} {when} ({self.stopped or 'not connected'}); its tools "
            f"cannot be used for the rest of this run{self._stderr_tail()}"
        )

    def _failed_to_start(self, exc: BaseException) -> str:
        transport = self.server.transport
        if isinstance(transport, _Stdio) and _leaf(exc, FileNotFoundError):
            why = f"its command {transport.command!r} was not found"
        elif isinstance(transport, _Http) and _leaf(exc, httpx2.ConnectError):
            why = f"nothing answered at {transport.url}"
        elif _leaf(exc, MCPError):
            closed = any(
                isinstance(e, MCPError) and e.code == types.CONNECTION_CLOSED for e in _leaves(exc)
            )
            what = (
                "it closed the connection before answering (it exited, or does not speak MCP)"
                if closed
                else "it did not answer as an MCP server"
            )
            why = f"{what}: {_leaf_text(exc)}"
        else:
            why = _leaf_text(exc)
        return f"MCP server {self.name!r} failed to start: {why}{self._stderr_tail()}"

    def _stderr_tail(self) -> str:
        line = last_line(self.stderr_path)
        return f"; its last stderr line: {line}" if line else ""


class _Caller:
    """The handler of one MCP tool (async: ``Tool.from_schema`` awaits it)."""

    __slots__ = ("connection", "tool_name")

    def __init__(self, connection: Connection, tool_name: str) -> None:
        self.connection = connection
        self.tool_name = tool_name

    async def __call__(self, arguments: dict[str, Any]) -> str:
        return await self.connection.call(self.tool_name, arguments)


async def _list_tools(client: Client) -> list[types.Tool]:
    listed: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return listed


def result_text(result: types.CallToolResult) -> str:
    """The text parts in order; each other part one line; structured content if nothing else."""
    lines: list[str] = []
    for part in result.content:
        if isinstance(part, types.TextContent):
            lines.append(part.text)
        elif isinstance(part, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(part, types.ImageContent) else "audio"
            lines.append(f"[{kind}: {part.mime_type}, {len(part.data) * 3 // 4} bytes, not shown]")
        elif isinstance(part, types.ResourceLink):
            mime = f", {part.mime_type}" if part.mime_type else ""
            lines.append(f"[resource link: {part.name} <{part.uri}>{mime}]")
        elif isinstance(part, types.EmbeddedResource):
            inner = part.resource
            mime = f", {inner.mime_type}" if inner.mime_type else ""
            size = (
                f"{len(inner.text)} characters"
                if isinstance(inner, types.TextResourceContents)
                else f"{len(inner.blob) * 3 // 4} bytes"
            )
            lines.append(f"[resource: <{inner.uri}>{mime}, {size}, not shown]")
        else:
            lines.append(f"[{getattr(part, 'type', type(part).__name__)} content, not shown]")
    if not lines and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return "\n".join(lines)


def last_line(path: Path | None) -> str:
    """The last non-blank line of a log file (its end only: the file may be long)."""
    if path is None:
        return ""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 8192))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= _STDERR_TAIL else line[:_STDERR_TAIL] + "..."


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _leaf(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(e, kind) for e in _leaves(exc))


def _leaf_text(exc: BaseException) -> str:
    """What went wrong, from the innermost exceptions (the SDK nests them in groups)."""
    seen: list[str] = []
    for leaf in _leaves(exc):
        if is_cancellation(leaf):
            continue
        text = describe_exception(leaf)
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) or describe_exception(exc)
