"""A real MCP server for the tests, written with the ``mcp`` SDK's own server (``MCPServer``).

    python tests/support/mcp_server.py [--http PORT] [--variant NAME] [--marker-dir DIR]

Over stdio by default, or streamable HTTP on 127.0.0.1:PORT (path ``/mcp``). Variants change
what it offers or how it misbehaves: ``default``; ``collide`` (two tools whose exposed names
are the same); ``long`` (a tool whose exposed name is past 64 characters); ``chatty`` (5 MB
of stderr, then the default tools); ``helper`` (the default tools, and a process of its own
started beside them, its pid in ``helper.pid``, as ``npx`` starts ``node``); ``fail-start``
(writes a reason to stderr and exits before speaking MCP); ``mute`` (reads stdin, never
answers); ``slow-start`` (the default tools, once a second ``slow-start`` server is starting
too: ``started-PID`` marks its start, ``ready-PID`` says ``together``, or ``alone`` when it gave
up waiting after 20 s). ``--marker-dir`` is where tools leave files the tests read (a cancelled
call's marker, the ``_meta`` a call carried).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def build(variant: str, markers: Path) -> Any:
    # imported here, after the start line is written (the mute variant never needs them); no
    # ``from __future__ import annotations`` in this file: the SDK reads the tools' hints
    import anyio
    import mcp_types as types
    from mcp import MCPError
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("orchestrator-tests")

    if variant == "collide":

        @server.tool(name="read.file")
        def read_dot_file(path: str) -> str:
            """Read a file (dotted name)."""
            return f"dot {path}"

        @server.tool(name="read_file")
        def read_file(path: str) -> str:
            """Read a file."""
            return f"underscore {path}"

        return server

    if variant == "long":

        @server.tool(name="t" * 70)
        def long_named() -> str:
            """A tool whose exposed name cannot be formed."""
            return "long"

    echoed: list[str] = []

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back.

        Args:
            text: what to say
        """
        echoed.append(text)
        return text

    @server.tool()
    def echo_count() -> str:
        """How many times echo ran."""
        return str(len(echoed))

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool(annotations=types.ToolAnnotations(idempotent_hint=True))
    def pid() -> str:
        """The server's process id."""
        return str(os.getpid())

    @server.tool()
    async def sleep(seconds: float, marker: str = "") -> str:
        """Sleep, leaving a marker file if the call is cancelled (and ``{marker}.started``
        when it starts)."""
        if marker:
            (markers / f"{marker}.started").write_text("started")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            if marker:
                (markers / marker).write_text("cancelled")
            raise
        return f"slept {seconds}"

    @server.tool()
    def fail(message: str) -> str:
        """Fail with the message."""
        raise ToolError(message)

    @server.tool()
    def env(name: str) -> str:
        """The value of one of the server's environment variables (server-everything's
        get-env does the same)."""
        return os.environ.get(name, "(unset)")

    @server.tool()
    def refuse() -> str:
        """Answer with the JSON-RPC error -32000 (the code the SDK also uses for a closed
        connection)."""
        raise MCPError(code=-32000, message="quota exhausted for today; try tomorrow")

    @server.tool()
    def mixed() -> list[Any]:
        """Text, an image, more text and a resource link."""
        return [
            types.TextContent(type="text", text="first part"),
            types.ImageContent(type="image", data=_PNG, mime_type="image/png"),
            types.TextContent(type="text", text="second part"),
            types.ResourceLink(
                type="resource_link", name="notes", uri="file:///notes.txt", mime_type="text/plain"
            ),
        ]

    @server.tool()
    def big(n: int) -> str:
        """A long text of n characters."""
        return "x" * n

    @server.tool()
    def die() -> str:
        """Exit the server process in the middle of the call."""
        print("dying now: the test asked for it", file=sys.stderr, flush=True)
        os._exit(7)

    @server.tool()
    async def sample(ctx: Context) -> str:
        """Ask the client for a model completion (sampling)."""
        try:
            result = await ctx.session.create_message(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text="hi")
                    )
                ],
                max_tokens=10,
            )
        except Exception as exc:
            return f"sampling refused: {type(exc).__name__}: {exc}"
        return f"sampling answered: {result}"

    @server.tool()
    def meta(ctx: Context, name: str) -> str:
        """Write the request's _meta to a marker file."""
        request_meta = ctx.request_context.meta
        dumped = (
            request_meta
            if isinstance(request_meta, dict)
            else (request_meta.model_dump(by_alias=True) if request_meta is not None else {})
        )
        (markers / name).write_text(json.dumps(dumped, default=str))
        return "written"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool and tell the client the list changed."""

        def extra() -> str:
            """A tool added mid-run."""
            return "extra"

        server.add_tool(extra, name="extra")
        try:
            await ctx.notify_tools_changed()
        except Exception as exc:
            return f"grew, notification failed: {exc}"
        return "grew"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--variant", default="default")
    parser.add_argument("--marker-dir", default=".")
    args = parser.parse_args()
    print(f"test server {args.variant} starting (pid {os.getpid()})", file=sys.stderr, flush=True)
    if args.variant == "fail-start":
        print("error: cannot open the database at /nonexistent/db", file=sys.stderr, flush=True)
        sys.exit(3)
    if args.variant == "slow-start":  # then the default tools
        markers = Path(args.marker_dir)
        (markers / f"started-{os.getpid()}").write_text(str(time.time()))
        give_up_at = time.monotonic() + 20
        while len(list(markers.glob("started-*"))) < 2 and time.monotonic() < give_up_at:
            time.sleep(0.01)
        together = len(list(markers.glob("started-*"))) >= 2
        (markers / f"ready-{os.getpid()}").write_text("together" if together else "alone")
        args.variant = "default"
    if args.variant == "helper":  # a process of its own beside it (as npx starts node)
        import subprocess

        helper = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL
        )
        (Path(args.marker_dir) / "helper.pid").write_text(str(helper.pid))
        args.variant = "default"
    if args.variant == "chatty":  # 5 MB of stderr before it serves, then its last words
        for i in range(50_000):
            print(f"chatter line {i:06d} " + "x" * 80, file=sys.stderr)
        print("chatty server ready", file=sys.stderr, flush=True)
        args.variant = "default"
    if args.variant == "mute":
        while sys.stdin.readline():
            time.sleep(0.01)
        return
    server = build(args.variant, Path(args.marker_dir))
    if args.http is not None:
        import anyio

        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=args.http))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
