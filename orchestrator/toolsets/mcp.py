"""MCP servers as toolsets: :class:`MCPServer`, over stdio or streamable HTTP.

    fs = MCPServer.stdio("fs", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "."])
    reader = Agent("reader", "...", tools=[fs.only("read_text_file", "list_directory")])

Building one starts nothing. A run connects every server its tree holds when it starts,
concurrently and before the first model call, one connection per server shared by every agent
holding it (see :mod:`orchestrator.core.toolset`), and closes it when the run ends (a stdio
server's process gets its stdin closed, then SIGTERM, then SIGKILL: the SDK's shutdown). The
model sees each tool as ``{server}__{tool}``; arguments are checked against the tool's
``inputSchema`` before the server is called (``Tool.from_schema``); ``tool_timeout`` and
cancellation reach the server as a cancellation; results are the text parts in order, other
parts one line each, ``isError`` an ``is_error`` result. docs/mcp.md is the user's reference.

The ``mcp`` SDK (the ``orchestrator[mcp]`` extra) is imported only when a run connects a server
(:mod:`._mcp_session`), so defining servers, and ``import orchestrator``, never load it.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigurationError
from ..core.redact import hold_secrets, looks_secret, shown_url, url_secrets
from ..core.tools import Tool
from ..core.toolset import OfferedTool, Toolset, ToolsetFailed, ToolsetHost, ToolsetRun

__all__ = [
    "HttpTransport",
    "MCPServer",
    "StdioTransport",
    "option_server_name",
    "parse_mcp_option",
    "server_from_spec",
]

_logger = logging.getLogger("orchestrator.mcp")
MAX_NAME = 64
"""The longest tool name the Messages API takes."""
_OUTSIDE_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_SERVER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,48}")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def exposed_name(server: str, tool: str) -> str:
    """``{server}__{tool}`` with every character outside ``[a-zA-Z0-9_-]`` made ``_``."""
    return _OUTSIDE_NAME.sub("_", f"{server}__{tool}")


@dataclass(frozen=True, slots=True)
class StdioTransport:
    """How to reach a server started as a subprocess: its command line, environment and
    folder (:meth:`MCPServer.stdio`)."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | None

    def describe(self) -> str:
        """The command line, for messages."""
        return " ".join((self.command, *self.args))


@dataclass(frozen=True, slots=True)
class HttpTransport:
    """How to reach a server over streamable HTTP: its URL and headers (:meth:`MCPServer.http`)."""

    url: str
    headers: Mapping[str, str] | None

    def describe(self) -> str:
        """The URL, for messages (its secrets hidden)."""
        return shown_url(self.url)


class MCPServer(Toolset):
    """An MCP server whose tools agents may hold: ``Agent(tools=[server])``.

    Build one with :meth:`stdio` or :meth:`http`; narrow it with :meth:`only`. Immutable: one
    definition serves many runs, each with its own connection.
    """

    __slots__ = ("_base", "_only", "name", "timeout", "transport")

    name: str
    transport: StdioTransport | HttpTransport
    timeout: float
    _base: MCPServer | None
    _only: tuple[str, ...] | None

    def __init__(
        self,
        name: str,
        transport: StdioTransport | HttpTransport,
        *,
        timeout: float = 30.0,
        _base: MCPServer | None = None,
        _only: tuple[str, ...] | None = None,
    ) -> None:
        if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
            raise ConfigurationError(
                f"MCP server name {name!r} must be 1-48 letters, digits, '_', '.' or '-' "
                "(tools are named {server}__{tool})"
            )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not timeout > 0
            or math.isnan(timeout)
        ):
            raise ConfigurationError(
                f"MCP server {name!r}: timeout must be a positive number, got {timeout!r}"
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "transport", transport)
        object.__setattr__(self, "timeout", float(timeout))
        object.__setattr__(self, "_base", _base)
        object.__setattr__(self, "_only", _only)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MCPServer is immutable (tried to set {name!r})")

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
    ) -> MCPServer:
        """A server the run starts as a process (``command`` with ``args``) and talks to over
        its stdin and stdout. ``env`` is added to the few variables it inherits (``PATH``,
        ``HOME``, ...: not the caller's secrets); its stderr goes to a log file beside the
        run's trace. ``timeout``: seconds it has to start and list its tools."""
        if not isinstance(command, str) or not command.strip():
            raise ConfigurationError(f"MCP server {name!r}: command must be a non-empty string")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ConfigurationError(
                f"MCP server {name!r}: args must be a list of strings, got {args!r}"
            )
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigurationError(f"MCP server {name!r}: env must map strings to strings")
        _hold_secrets(env)
        return cls(
            name,
            StdioTransport(
                command, tuple(args), dict(env) if env is not None else None, _path(cwd)
            ),
            timeout=timeout,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url`` (``headers`` sent with every
        request, say an API key). ``timeout``: seconds it has to answer and list its tools."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"MCP server {name!r}: url must be an http:// or https:// URL, got {url!r}"
            )
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ConfigurationError(f"MCP server {name!r}: headers must map strings to strings")
        _hold_secrets(headers)
        hold_secrets(*url_secrets(url))
        return cls(
            name,
            HttpTransport(url, dict(headers) if headers is not None else None),
            timeout=timeout,
        )

    def only(self, *names: str) -> MCPServer:
        """This server narrowed to some of its tools, named as the server names them
        (``"read_file"``) or as the model sees them (``"fs__read_file"``). Shares the server's
        connection; a name the server does not offer is a ConfigurationError when the run
        lists its tools."""
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigurationError(
                f"MCP server {self.name!r}: only() takes one or more tool names"
            )
        if self._only is not None:
            outside = sorted(set(names) - set(self._only))
            if outside:
                raise ConfigurationError(
                    f"MCP server {self.name!r}: only() can narrow, not widen: {outside} are "
                    f"not among {sorted(self._only)}"
                )
        base = self._base or self
        return MCPServer(
            self.name, self.transport, timeout=self.timeout, _base=base, _only=tuple(names)
        )

    def __repr__(self) -> str:
        kind = "stdio" if isinstance(self.transport, StdioTransport) else "http"
        only = f".only({', '.join(map(repr, self._only))})" if self._only is not None else ""
        return f"MCPServer.{kind}({self.name!r}, {self.transport.describe()!r}){only}"

    @property
    def toolset_name(self) -> str:
        return self.name

    @property
    def source(self) -> Hashable:
        return self._base or self

    async def serve(self, run: ToolsetRun, ready: Callable[[Sequence[OfferedTool]], None]) -> None:
        import importlib

        import trio

        try:  # the SDK's first import takes a while: not on the event loop's thread
            session = await trio.to_thread.run_sync(
                importlib.import_module, f"{__package__}._mcp_session"
            )
        except ImportError as exc:  # the optional extra is not installed
            raise ToolsetFailed(
                f"MCP server {self.name!r} cannot be used: the mcp package is not installed "
                f"({exc}); install it with: pip install 'orchestrator[mcp]'"
            ) from None
        await session.Connection(self, run).serve(ready)

    async def list_tools(self, *, log_dir: str | os.PathLike[str] | None = None) -> list[Tool]:
        """Start the server, list the tools an agent holding this toolset would get (as the
        model sees them: named, narrowed, sorted), and stop it. Raises ToolsetFailed if it
        cannot start. What ``orchestrator run --dry-run`` shows; each call starts the server."""
        import tempfile
        import uuid

        import trio

        folder = Path(log_dir) if log_dir is not None else Path(tempfile.gettempdir())
        host = ToolsetHost([self], ToolsetRun(f"list-{uuid.uuid4().hex[:12]}", folder))
        async with trio.open_nursery() as nursery:
            outcome = await nursery.start(host.serve)
            try:
                if isinstance(outcome, ConfigurationError):
                    raise outcome
                if outcome is not None:
                    raise ToolsetFailed(outcome)
                return [o.tool for o in self.select(host.offered[self.source])]
            finally:
                await host.aclose()

    def select(self, offered: Sequence[OfferedTool]) -> list[OfferedTool]:
        """The tools ``only()`` names (all without it). Tools the server offers under one
        exposed name (``read.file`` and ``read_file``) are left out, unless ``only()`` names
        one of them by the server's own name; one named by the shared exposed name, or two of
        them named, is a ConfigurationError saying which."""
        sharing: dict[str, int] = {}
        for o in offered:
            sharing[o.tool.name] = sharing.get(o.tool.name, 0) + 1
        if self._only is None:
            return [o for o in offered if sharing[o.tool.name] == 1]
        chosen: list[OfferedTool] = []
        unknown: list[str] = []
        for n in self._only:
            matches = [o for o in offered if o.key == n] or [o for o in offered if o.tool.name == n]
            if not matches:
                unknown.append(n)
            elif len(matches) > 1:
                what = " and ".join(o.origin for o in matches)
                how = (
                    "the server lists it more than once, unlike each time, so neither can be used"
                    if all(o.key == n for o in matches)
                    else "name one of them by the server's own name"
                )
                raise ConfigurationError(
                    f"only({n!r}) names {what}, which would all be the tool "
                    f"{matches[0].tool.name!r}; {how}"
                )
            elif not any(c is matches[0] for c in chosen):
                chosen.append(matches[0])
        if unknown:
            listed = ", ".join(sorted({o.key for o in offered})) or "none"
            raise ConfigurationError(
                f"MCP server {self.name!r} offers no tool named {', '.join(map(repr, unknown))} "
                f"(named in only()); its tools: {listed}"
            )
        names: dict[str, OfferedTool] = {}
        for o in chosen:
            known = names.setdefault(o.tool.name, o)
            if known is not o:
                raise ConfigurationError(
                    f"only() names {known.origin} and {o.origin}, which would both be the tool "
                    f"{o.tool.name!r}; leave one of them out of only()"
                )
        return [o for o in offered if any(c is o for c in chosen)]


def server_from_spec(spec: str) -> MCPServer:
    """A server from the command line's ``NAME=COMMAND`` (stdio; the command split as a shell
    would) or ``NAME=URL`` (streamable HTTP). Raises ConfigurationError with one line."""
    agent, server = parse_mcp_option(spec)
    if agent is not None:
        raise ConfigurationError(
            f"--mcp {spec.partition('=')[0].strip()}: expected NAME=COMMAND or NAME=URL here, "
            "without an agent name"
        )
    return server


def parse_mcp_option(spec: str) -> tuple[str | None, MCPServer]:
    """The command line's ``--mcp [AGENT:]NAME=COMMAND|URL``: the agent it names (``None``:
    the root) and the server (stdio for a command, split as a shell would; streamable HTTP for
    an ``http(s)://`` URL). The text before the first ``=`` is ``[AGENT:]NAME`` (neither name
    may hold a ``:``; the command or URL may hold ``=`` and ``:``). Raises ConfigurationError
    with one line."""
    import shlex

    head, eq, value = spec.partition("=")
    head = head.strip()
    agent, colon, name = head.rpartition(":")
    if not eq or not name.strip() or not value.strip() or (colon and not agent.strip()):
        raise ConfigurationError(
            f"--mcp {spec!r}: expected [AGENT:]NAME=COMMAND (stdio) or [AGENT:]NAME=URL "
            "(streamable HTTP)"
        )
    if ":" in agent:
        raise ConfigurationError(
            f"--mcp {head}: expected [AGENT:]NAME before the '=', with one ':' at most"
        )
    name, value = name.strip(), value.strip()
    scheme = _SCHEME.match(value)
    if scheme is not None:
        if scheme.group(1).lower() not in ("http", "https"):
            raise ConfigurationError(
                f"--mcp {head}: unknown transport {scheme.group(1)!r}; give a command (stdio) or "
                "an http:// or https:// URL (streamable HTTP)"
            )
        return agent.strip() or None, MCPServer.http(name, value)
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ConfigurationError(f"--mcp {head}: cannot split the command: {exc}") from None
    if not words:
        raise ConfigurationError(f"--mcp {head}: the command is empty")
    return agent.strip() or None, MCPServer.stdio(name, words[0], words[1:])


def option_server_name(spec: str) -> str:
    """The server name of a ``--mcp [AGENT:]NAME=...`` value, as written (for messages and to
    match one given again), without parsing the rest."""
    return spec.partition("=")[0].rpartition(":")[2].strip()


def _hold_secrets(given: Mapping[str, str] | None) -> None:
    """The secrets among a server's ``env`` or ``headers`` are redacted from then on, like the
    environment's: values under names that say secret (``API_KEY``, ``Authorization``), with a
    header's scheme (``Bearer``) stripped too, and passwords of URLs in any value."""
    for key, value in (given or {}).items():
        if looks_secret(key):
            hold_secrets(value, value.partition(" ")[2].strip())
        if "://" in value:
            hold_secrets(*url_secrets(value))


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)
