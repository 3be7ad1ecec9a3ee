"""A real third-party MCP server: ``@modelcontextprotocol/server-filesystem`` from npm.

Marked ``npm``: the README's test command leaves these out (a fresh machine may lack node);
``.ci/run`` runs them as a step of its own, which fails, never skips, when node or npm is
missing. The server is installed with npm into a cache folder when it is not there yet
(``ORCHESTRATOR_NPM_CACHE``, default ``~/.cache/orchestrator-tests/npm``), at the version
measured here. Also runs examples/mcp_files.py, as a script and through the command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.trees import Script, tool_results

from orchestrator import Agent, Policy, RunStatus, run
from orchestrator.mcp import MCPServer
from orchestrator.models import text, tool_call

pytestmark = pytest.mark.npm

PACKAGE = "@modelcontextprotocol/server-filesystem"
VERSION = "2026.8.31"
EXAMPLE = Path(__file__).parents[2] / "examples" / "mcp_files.py"


@pytest.fixture(scope="session")
def filesystem_server() -> str:
    """The server's executable, installed from npm into the cache folder if it is missing."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.fail("these tests need node and npm (apt-get install nodejs npm)")
    cache = Path(
        os.environ.get("ORCHESTRATOR_NPM_CACHE", Path.home() / ".cache/orchestrator-tests/npm")
    )
    prefix = cache / f"server-filesystem-{VERSION}"
    binary = prefix / "node_modules" / ".bin" / "mcp-server-filesystem"
    if not binary.exists():
        subprocess.run(
            [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
             f"{PACKAGE}@{VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )  # fmt: skip
    return str(binary)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    served = tmp_path / "served"
    served.mkdir()
    (served / "notes.md").write_text("The first line of the notes.\nThe second line.\n")
    (tmp_path / "secret.txt").write_text("outside the served folder")
    return served


async def test_the_filesystem_servers_tools_read_files_and_refuse_what_they_must(
    tmp_path: Path, folder: Path, filesystem_server: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    script = Script(
        {
            "root": [
                [
                    tool_call("fs__read_text_file", {"path": str(folder / "notes.md")}),
                    tool_call("fs__read_text_file", {"path": str(tmp_path / "secret.txt")}),
                    tool_call("fs__read_text_file", {"file": "notes.md"}),
                    tool_call("fs__write_file", {"path": str(folder / "x"), "content": "x"}),
                ],
                text("done"),
            ]
        }
    )
    fs = MCPServer.stdio("fs", filesystem_server, [str(folder)])
    agent = Agent("root", "Read.", tools=[fs], model=script.model,
                  policy=Policy({"fs__write*": "deny", "fs__edit_file": "deny"}))  # fmt: skip
    result = await run(agent, "Go.", tracer_provider=provider, log_dir=tmp_path / "runs")
    assert result.status is RunStatus.COMPLETED, result.error
    offered = script.requests[0].tools
    names = [t.name for t in offered]
    assert names == sorted(names) and {"fs__read_text_file", "fs__list_directory"} <= set(names)
    assert all("$schema" not in t.input_schema for t in offered)  # the Node servers add it
    read, outside, bad, written = tool_results(result.messages)
    assert read.content == "The first line of the notes.\nThe second line.\n"
    assert outside.is_error and "outside the served folder" not in outside.content
    assert bad.is_error and bad.error_type == "invalid_arguments"  # checked before the call
    assert written.is_error and "denied by policy" in written.content
    assert not (folder / "x").exists()
    reads = [
        s for s in exporter.get_finished_spans() if s.name == "execute_tool fs__read_text_file"
    ]
    assert len(reads) == 3
    # the two calls that reached the server carry the MCP attributes; the refused one does not
    called = [dict(s.attributes or {}) for s in reads if "mcp.method.name" in (s.attributes or {})]
    assert len(called) == 2
    attrs = called[0]
    assert attrs["mcp.method.name"] == "tools/call" and attrs["network.transport"] == "pipe"
    assert attrs["mcp.protocol.version"] == "2025-11-25"  # the Node server's: the legacy one
    (log,) = (tmp_path / "runs").glob("*.mcp-fs.stderr.log")
    assert "Secure MCP Filesystem Server running on stdio" in log.read_text()


async def test_listing_shows_the_annotations_as_idempotent(
    folder: Path, filesystem_server: str
) -> None:
    fs = MCPServer.stdio("fs", filesystem_server, [str(folder)])
    tools = {t.name: t for t in await fs.only("read_text_file", "move_file").list_tools()}
    assert sorted(tools) == ["fs__move_file", "fs__read_text_file"]
    assert tools["fs__read_text_file"].idempotent and not tools["fs__move_file"].idempotent


def example_env(filesystem_server: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_"))}
    env["MCP_FILESYSTEM_SERVER"] = filesystem_server
    return env


EXPECTED = (
    "From the files:\n"
    "Cancel scopes: a cancel scope cancels everything inside it, deadlines included.\n"
    "Nurseries: a nursery owns its child tasks, and none outlives it.\n"
)


def test_the_example_runs_as_a_script(tmp_path: Path, filesystem_server: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env=example_env(filesystem_server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == EXPECTED
    assert "Secure MCP Filesystem Server" not in proc.stderr  # its stderr went to a log file


def test_the_example_runs_through_the_cli(tmp_path: Path, filesystem_server: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(EXAMPLE), "What do the notes say?"],
        cwd=tmp_path,
        env=example_env(filesystem_server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == EXPECTED
    assert "status=completed " in proc.stderr
    assert list((tmp_path / "runs").glob("*.mcp-fs.stderr.log"))


def test_the_command_line_adds_the_server_to_the_root(
    tmp_path: Path, folder: Path, filesystem_server: str
) -> None:
    (tmp_path / "agents.py").write_text(
        "from orchestrator import Agent\n"
        "from orchestrator.models import FunctionModel, text, tool_call\n"
        "def answer(request):\n"
        "    if request.turn_index() == 0:\n"
        f"        return tool_call('fs__read_text_file', {{'path': {str(folder / 'notes.md')!r}}})\n"
        "    (result,) = [b for b in request.messages[-1].content if b.type == 'tool_result']\n"
        "    return text(result.content)\n"
        "agent = Agent('root', 'Read.', model=FunctionModel(answer))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", "agents.py", "Read the notes.",
         "--mcp", f"fs={filesystem_server} {folder}"],
        cwd=tmp_path,
        env=example_env(filesystem_server),
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The first line of the notes.\nThe second line.\n"


def test_trio_runs_the_server_and_nothing_is_left_running(
    folder: Path, filesystem_server: str
) -> None:
    fs = MCPServer.stdio("fs", filesystem_server, [str(folder)])
    trio.run(fs.list_tools)
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(folder) not in out.stdout
