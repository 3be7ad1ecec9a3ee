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
import os
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
from mcp_types import methods
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import ValidationError

from .. import __version__
from ..core.cancellation import is_cancellation
from ..core.errors import ConfigurationError, ToolError
from ..core.tools import Tool, describe_exception
from ..core.toolset import OfferedTool, ToolsetFailed, ToolsetRun
from ..tracing import spans
from .mcp import MAX_NAME, HttpTransport, StdioTransport, exposed_name

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
_NOT_SAMPLED = trace.NonRecordingSpan(
    trace.SpanContext(0x6D6370, 0x6D6370, is_remote=True, trace_flags=trace.TraceFlags(0))
)
"""A parent whose children a parent-based sampler drops (remote: a sampler that records them
anyway makes them start a trace of their own, as they did before, not orphans)."""
_STDERR_KEEP = 1 << 20
"""Bytes of a server's stderr its log keeps (its end; the file holds at most twice this)."""
_STDERR_SETTLE = 1.0
"""Seconds a stopped server's last stderr has to reach the log before it is read."""
_PING_SECONDS = 5.0
"""How long a server that answered -32000 has to answer a ping (else it is taken as busy)."""


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
        self.network_transport = "pipe" if isinstance(server.transport, StdioTransport) else "tcp"
        self._warned_changes = False
        self._stderr_done: trio.Event | None = None
        self._unreadable: dict[trio.CancelScope, str] = {}
        """The calls ended by a message the SDK could not read, and what it was."""

    # -- lifetime -----------------------------------------------------------------------

    async def serve(self, ready: Callable[[Sequence[OfferedTool]], None]) -> None:
        # The SDK traces what it sends through the global tracer provider. This task runs
        # outside the run's spans (it starts before the root agent's), so its connection spans
        # (server/discover, initialize, tools/list, subscriptions) would each start a trace of
        # their own beside the run's; under a parent that is not sampled a parent-based sampler
        # (the default) drops them. Calls send from the agents' tasks: under execute_tool.
        token = otel_context.attach(trace.set_span_in_context(_NOT_SAMPLED))
        try:
            await self._serve(ready)
        finally:
            otel_context.detach(token)

    async def _serve(self, ready: Callable[[Sequence[OfferedTool]], None]) -> None:
        started = False
        refused: ConfigurationError | None = None  # raised outside the SDK's task groups
        try:
            with trio.CancelScope() as startup:
                startup.deadline = min(trio.current_time() + self.server.timeout, self.run.deadline)
                try:
                    async with self._connected() as client:
                        listed = await _list_tools(client, self.name)
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
            if isinstance(transport, StdioTransport):
                errlog = await self._stderr_pipe(stack)
                command, args = _tethered(transport)
                params = StdioServerParameters(
                    command=command,
                    args=args,
                    env=dict(transport.env) if transport.env is not None else None,
                    cwd=transport.cwd,
                    # bytes that are not UTF-8 are read as U+FFFD ("strict" stops the reader
                    # and leaves every later call waiting for its timeout)
                    encoding_error_handler="replace",
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
            entered = await stack.enter_async_context(client)
            if isinstance(transport, StdioTransport):
                errlog.close()  # the server holds its own copy: its exit ends the pipe
            yield entered

    async def _stderr_pipe(self, stack: AsyncExitStack) -> TextIO:
        """The server's stderr: a pipe whose other end a task copies to a file beside the
        run's trace (never the terminal), keeping its last :data:`_STDERR_KEEP` bytes (a
        server may write hundreds of MB). The file is the owner's only: a server may log the
        keys it was given."""
        folder = self.run.log_dir
        folder.mkdir(parents=True, exist_ok=True)
        self.stderr_path = folder / f"{self.run.run_id}.mcp-{self.name}.stderr.log"
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        log = _TailLog(os.open(self.stderr_path, flags, 0o600))
        stack.callback(log.close)
        read_end, write_end = os.pipe()
        self._stderr_done = done = trio.Event()
        nursery = await stack.enter_async_context(trio.open_nursery())
        nursery.start_soon(log.copy, trio.lowlevel.FdStream(read_end), done)

        async def settle() -> None:  # the copy ends at the pipe's end: bounded, whatever comes
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + _STDERR_SETTLE
                await done.wait()
            nursery.cancel_scope.cancel()

        stack.push_async_callback(settle)
        # closed once the server is started (its copy is then the only one), or on the way out
        return stack.enter_context(os.fdopen(write_end, "w"))  # a pipe: opening never blocks

    async def _stderr_settled(self) -> None:
        """Wait (briefly) for what a stopped server last wrote to reach its log."""
        done = self._stderr_done
        if done is not None:
            with trio.move_on_after(_STDERR_SETTLE):
                await done.wait()

    def _http_client(self, transport: HttpTransport) -> httpx2.AsyncClient:
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
        elif isinstance(message, Exception):
            # A line the SDK could not parse (it logs it and drops it): if it was a reply, the
            # call waiting for it would wait for its timeout. Its id cannot be read either, so
            # every call in flight ends now, saying why; the server stays usable.
            what = _one_line(describe_exception(message))
            level = logging.WARNING if self._calls else logging.DEBUG  # a start's failure says
            _logger.log(
                level, "MCP server %r sent a message that cannot be read: %s", self.name, what
            )
            for scope in list(self._calls):
                self._unreadable[scope] = what
                scope.cancel()
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
        """The tools to offer, sorted by exposed name. Tools that would share one exposed name
        are all offered (the same tool listed twice, once): :meth:`MCPServer.select` leaves
        them out unless ``only()`` names one by the server's own name."""
        by_name: dict[str, list[OfferedTool]] = {}
        seen: dict[str, dict[str, Any]] = {}
        for listed_tool in listed:
            definition = listed_tool.model_dump(mode="json", by_alias=True)
            if seen.get(listed_tool.name) == definition:
                continue  # listed twice alike: one tool
            seen[listed_tool.name] = definition
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
            by_name.setdefault(name, []).append(OfferedTool(tool, origin, listed_tool.name))
        for name, group in by_name.items():
            keys = sorted({o.key for o in group})
            if len(keys) == 1 and len(group) > 1:
                _logger.warning(
                    "MCP server %r lists the tool %r %d times, unlike each time; it is left out",
                    self.name,
                    keys[0],
                    len(group),
                )
            elif len(group) > 1:
                _logger.warning(
                    "MCP server %r: its tools %s would all be the tool %r; they are left out "
                    "unless only() names one of them by the server's name",
                    self.name,
                    ", ".join(map(repr, keys)),
                    name,
                )
        return [o for n in sorted(by_name) for o in by_name[n]]

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
                # -32000 is both the SDK's "connection closed" and a code servers answer with
                # themselves: only a connection that refuses a ping too is taken as closed.
                if exc.code == types.CONNECTION_CLOSED and await self._closed(client):
                    self._stop("its connection closed")
                    await self._stderr_settled()
                    raise ToolError(self._stopped_message()) from None
                raise ToolError(
                    f"MCP server {self.name!r} answered the call to {tool_name!r} with an "
                    f"error ({exc.code}): {exc.message}"
                ) from None
            finally:
                self._calls.discard(scope)
                unreadable = self._unreadable.pop(scope, None)
        if scope.cancelled_caught:
            if unreadable is not None and self.stopped is None:
                raise ToolError(
                    f"MCP server {self.name!r} sent a reply this client cannot read "
                    f"({unreadable}); the call is ended instead of waiting for its "
                    "timeout (the server is still running)"
                )
            await self._stderr_settled()
            raise ToolError(self._stopped_message(during=True))  # the connection ended under it
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"MCP server {self.name!r}: the call to {tool_name!r} failed")
        return text

    async def _closed(self, client: Client) -> bool:
        """Whether the connection is closed: a closed one refuses a ping at once (the SDK
        raises "connection closed" for any send after it saw the end)."""
        with trio.move_on_after(_PING_SECONDS):
            try:
                await client.session.send_ping()
            except MCPError as exc:  # any other error is an answer (2026 servers know no ping)
                return exc.code == types.CONNECTION_CLOSED
            except Exception:  # an answer the SDK could not take: something answered
                return False
        return False  # no answer in time: a busy server, not a closed connection

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
        if isinstance(self.server.transport, HttpTransport):
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
        if isinstance(transport, StdioTransport) and _leaf(exc, FileNotFoundError):
            why = f"its command {transport.command!r} was not found"
        elif isinstance(transport, HttpTransport) and _leaf(exc, httpx2.ConnectError):
            why = f"nothing answered at {transport.describe()}"
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


_TETHER = """\
import os, signal, sys, time
parent, command = int(sys.argv[1]), sys.argv[2:]
child = os.fork()
if child == 0:
    os.execvp(command[0], command)
def forward(signum, frame):
    os.kill(child, signum)
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, forward)
while True:
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status) % 256)
    if os.getppid() != parent:
        os.killpg(0, signal.SIGTERM)  # the keeper passes its own on to the server
        for _ in range(20):
            time.sleep(0.1)
            if os.waitpid(child, os.WNOHANG)[0]:
                break
        os.killpg(0, signal.SIGKILL)  # what the server started too, and the keeper
    time.sleep(0.2)
"""
"""A stdio server's keeper: the SDK starts servers in a session of their own (a Ctrl-C to the
terminal must not reach them), so nothing ended them when the run's process was killed (SIGKILL
runs no cleanup). The keeper starts the server as its child, in its session, passes on the
signals the SDK's shutdown sends, and ends the session (SIGTERM, then SIGKILL once the server has
ended or 2 s later, so what the server started goes too) once
the process that started it is gone. A parent-death signal would not do: it fires when the
spawning thread exits, and the SDK spawns from a worker thread."""


def _tethered(transport: StdioTransport) -> tuple[str, list[str]]:
    """The command that starts ``transport``'s server under :data:`_TETHER` (on POSIX, and
    when the command is found: else as given, so the SDK names a command not found)."""
    import shutil
    import sys

    path = (transport.env or {}).get("PATH") or os.environ.get("PATH")
    if os.name != "posix" or shutil.which(transport.command, path=path) is None:
        return transport.command, list(transport.args)
    # -I -S: no site packages nor environment to read; the keeper needs the standard library
    keeper = ["-I", "-S", "-c", _TETHER, str(os.getpid())]
    return sys.executable, [*keeper, transport.command, *transport.args]


class _TailLog:
    """A log file that keeps the last :data:`_STDERR_KEEP` bytes written to it: past twice
    that, the file is cut to its end behind a line saying so (cheap: once per
    :data:`_STDERR_KEEP` bytes written)."""

    __slots__ = ("fd", "size")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = 0

    async def copy(self, stream: trio.lowlevel.FdStream, done: trio.Event) -> None:
        try:
            async with stream:
                while chunk := await stream.receive_some(65536):
                    self.write(chunk)
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            pass
        finally:
            done.set()

    def write(self, chunk: bytes) -> None:
        try:
            os.write(self.fd, chunk)
            self.size += len(chunk)
            if self.size > 2 * _STDERR_KEEP:
                tail = os.pread(self.fd, _STDERR_KEEP, self.size - _STDERR_KEEP)
                cut = tail.find(b"\n") + 1  # start at a line's start when there is one
                kept = tail[cut:] if 0 < cut < len(tail) else tail
                note = (
                    f"[{self.size - len(kept):,} earlier bytes of stderr left out: this log "
                    f"keeps the last {_STDERR_KEEP:,}]\n"
                ).encode()
                os.ftruncate(self.fd, 0)
                os.lseek(self.fd, 0, os.SEEK_SET)
                os.write(self.fd, note + kept)
                self.size = len(note) + len(kept)
        except OSError:  # a full disk: the server's stderr is not worth failing its calls
            pass

    def close(self) -> None:
        os.close(self.fd)


class _Caller:
    """The handler of one MCP tool (async: ``Tool.from_schema`` awaits it)."""

    __slots__ = ("connection", "tool_name")

    def __init__(self, connection: Connection, tool_name: str) -> None:
        self.connection = connection
        self.tool_name = tool_name

    async def __call__(self, arguments: dict[str, Any]) -> str:
        return await self.connection.call(self.tool_name, arguments)


async def _list_tools(client: Client, server: str) -> list[types.Tool]:
    listed: list[types.Tool] = []
    cursor: str | None = None
    try:
        for _ in range(_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
    except ValidationError:  # one tool the SDK's models refuse fails the whole listing
        kept = await _list_tools_one_by_one(client, server)
        if kept is None:
            raise
        return kept
    return listed


async def _list_tools_one_by_one(client: Client, server: str) -> list[types.Tool] | None:
    """The listing again, each tool checked on its own: one the SDK's models refuse is left
    out with a warning, the others kept (and taught to the session, which checks results
    against their output schemas). The SDK has no public call for an unchecked result, so
    this takes three of ``ClientSession``'s private names (``mcp`` is pinned below 3); without
    them (``None``) the listing fails as before."""
    session: Any = client.session
    stamp = getattr(session, "_stamp", None)
    dispatcher = getattr(session, "_dispatcher", None)
    absorb = getattr(session, "_absorb_tool_listing", None)
    if stamp is None or dispatcher is None or absorb is None:
        return None
    version = client.protocol_version
    kept: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        request = types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor))
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        options: dict[str, Any] = {}
        stamp(data, options)
        raw = await dispatcher.send_raw_request(data["method"], data.get("params"), options)
        tools = raw.get("tools") if isinstance(raw, dict) else None
        if not isinstance(tools, list):
            raise ToolsetFailed(f"MCP server {server!r} answered tools/list without a tool list")
        for item in tools:
            try:
                methods.validate_server_result("tools/list", version, {**raw, "tools": [item]})
                kept.append(types.Tool.model_validate(item, by_name=False))
            except (ValidationError, ValueError, KeyError) as exc:
                name = item.get("name") if isinstance(item, dict) else None
                _logger.warning(
                    "MCP server %r: its tool %r is left out: its definition does not pass the "
                    "MCP SDK's check: %s",
                    server,
                    name if isinstance(name, str) else "(unnamed)",
                    _validation_text(exc),
                )
        cursor = raw.get("nextCursor") if isinstance(raw.get("nextCursor"), str) else None
        if cursor is None:
            break
    absorb(types.ListToolsResult(tools=kept), complete=True)
    return kept


def _validation_text(exc: Exception) -> str:
    """What a model check found, in a line (pydantic's text runs to several with links)."""
    if isinstance(exc, ValidationError):
        found = [
            f"{'.'.join(str(part) for part in e['loc'][2:]) or 'the tool'}: {e['msg']}"
            for e in exc.errors()[:3]
        ]
        return _one_line("; ".join(found))
    return _one_line(str(exc))


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


def _one_line(text: str) -> str:
    """``text`` on one line, cut to a few hundred characters."""
    line = " ".join(text.split())
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
