"""What the runtime adds to an MCP tool call, over stdio and streamable HTTP, untraced.

Against the test server of tests/support/mcp_server.py (the SDK's own server, in a process of
its own), ``echo("x")`` is called N times each way, one call after the other, alternating:

- ``bare``: the SDK's ``Client.call_tool`` on a connection of its own;
- ``ours``: the tool as the runtime runs it (:func:`orchestrator.core.execute.execute`: the
  check against the input schema, the timeout scope, the SDK call with the trace context in
  ``_meta``, the result as text, the cap), on the connection a run's toolset host opened.

Two stdio servers (one per way, the same program), one HTTP server (two sessions). The
figures are medians; ``overhead_us`` is ours minus bare, and the target is at most 10 % of the
bare call or 50 µs, whichever is more.

Usage: ``python tests/benchmarks/bench_mcp.py [--smoke] [--calls 200]``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import emit, machine, median, table  # noqa: E402

from orchestrator.core.execute import execute  # noqa: E402
from orchestrator.core.messages import ToolUseBlock  # noqa: E402
from orchestrator.core.tools import Tool, ToolRuntime  # noqa: E402
from orchestrator.core.toolset import ToolsetHost, ToolsetRun  # noqa: E402
from orchestrator.mcp import MCPServer  # noqa: E402

SERVER = HERE.parent / "support" / "mcp_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@asynccontextmanager
async def our_tool(server: MCPServer, folder: Path) -> AsyncIterator[Tool]:
    """The server's echo tool, on a connection opened as a run opens it."""
    host = ToolsetHost([server], ToolsetRun("bench", folder))
    async with trio.open_nursery() as nursery:
        outcome = await nursery.start(host.serve)
        assert outcome is None, outcome
        (echo,) = [o.tool for o in host.offered[server.source] if o.key == "echo"]
        try:
            yield echo
        finally:
            await host.aclose()


async def measure(
    bare: Callable[[], Awaitable[Any]], ours: Callable[[], Awaitable[Any]], calls: int
) -> dict[str, float]:
    for _ in range(10):  # warm-up
        await bare()
        await ours()
    bare_s: list[float] = []
    ours_s: list[float] = []
    for _ in range(calls):
        t = time.perf_counter()
        await bare()
        bare_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        await ours()
        ours_s.append(time.perf_counter() - t)
    b, o = median(bare_s) * 1e6, median(ours_s) * 1e6
    return {
        "bare_us": round(b, 1),
        "ours_us": round(o, 1),
        "overhead_us": round(o - b, 1),
        "overhead_pct": round(100 * (o - b) / b, 1),
        "within_target": (o - b) <= max(0.10 * b, 50.0),
    }


async def run_transport(kind: str, calls: int, folder: Path) -> dict[str, float]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    runtime = ToolRuntime(
        timeout=120.0, max_result_chars=100_000, thread_limiter=trio.CapacityLimiter(1)
    )
    call = ToolUseBlock("toolu_bench", "bench__echo", {"text": "x"})
    args = [str(SERVER), "--marker-dir", str(folder)]
    proc: subprocess.Popen[bytes] | None = None
    if kind == "stdio":
        server = MCPServer.stdio("bench", sys.executable, args)
        target: Any = stdio_client(
            StdioServerParameters(command=sys.executable, args=args),
            errlog=(folder / "bare.log").open("w"),
        )
    else:
        port = free_port()
        proc = subprocess.Popen(  # noqa: ASYNC220 - the server starts before anything is timed
            [sys.executable, *args, "--http", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)  # noqa: ASYNC251 - as above: not timed, nothing else runs
        url = f"http://127.0.0.1:{port}/mcp"
        server = MCPServer.http("bench", url)
        target = url
    try:
        async with Client(target) as client, our_tool(server, folder) as echo:

            async def bare() -> Any:
                return await client.call_tool("echo", {"text": "x"})

            async def ours() -> Any:
                result = await execute(echo, call, None, runtime)
                assert result.content == "x", result
                return result

            return await measure(bare, ours, calls)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="a few calls: keeps the script working"
    )
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    calls = 5 if args.smoke else args.calls
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            kind: trio.run(run_transport, kind, calls, Path(tmp)) for kind in ("stdio", "http")
        }
    rows = [[k, *(r[c] for c in ("bare_us", "ours_us", "overhead_us", "overhead_pct"))]
            for k, r in results.items()]  # fmt: skip
    emit(
        {"machine": machine(), "calls": calls, "results": results},
        table(["transport", "bare µs", "ours µs", "overhead µs", "overhead %"], rows),
    )


if __name__ == "__main__":
    main()
