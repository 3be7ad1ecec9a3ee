"""A lead whose researcher reads files through an MCP server (the filesystem server from npm).

The researcher holds two tools of `@modelcontextprotocol/server-filesystem`, narrowed with
`only()`: it lists examples/files/ and reads each note, then reports their first lines. The run
starts the server before the first model call and stops it when the run ends; the model sees
its tools as `fs__list_directory` and `fs__read_text_file`. Needs node (`npx`); set
MCP_FILESYSTEM_SERVER to another command line to start the server some other way. The models
are scripted functions that read the tool results, so the example runs without an API key.
"""

import os
import shlex
from pathlib import Path

from orchestrator import Agent, run_sync
from orchestrator.mcp import MCPServer
from orchestrator.models import FunctionModel, text, tool_call

FILES = Path(__file__).resolve().parent / "files"
COMMAND = shlex.split(
    os.environ.get(
        "MCP_FILESYSTEM_SERVER", "npx -y @modelcontextprotocol/server-filesystem@2026.8.31"
    )
)
fs = MCPServer.stdio("fs", COMMAND[0], [*COMMAND[1:], str(FILES)])


def last_result(request):
    """The text of the newest tool result in the request's transcript."""
    return next(
        b.content for m in reversed(request.messages) for b in m.content if b.type == "tool_result"
    )


def researcher_model(request):
    turn = request.turn_index()
    if turn == 0:
        return tool_call("fs__list_directory", {"path": str(FILES)})
    if turn == 1:  # "[FILE] nurseries.md" lines: read every note, in name order
        names = sorted(line.split(" ", 1)[1] for line in last_result(request).splitlines())
        return [tool_call("fs__read_text_file", {"path": str(FILES / n)}) for n in names]
    results = [b.content for b in request.messages[-1].content if b.type == "tool_result"]
    return text("\n".join(r.splitlines()[0] for r in results))


def lead_model(request):
    if request.turn_index() == 0:
        task = f"Read the notes in {FILES} and report the first line of each."
        return tool_call("spawn_subagent", {"agent": "researcher", "task": task})
    return text("From the files:\n" + last_result(request))


researcher = Agent(
    "researcher",
    "Read the files you are pointed to and report what they say.",
    description="Reads files through the filesystem server.",
    model=FunctionModel(researcher_model),
    tools=[fs.only("list_directory", "read_text_file")],
)
agent = Agent(
    "lead",
    "Ask the researcher to read the notes, then answer from its report.",
    model=FunctionModel(lead_model),
    subagents=[researcher],
)

if __name__ == "__main__":
    result = run_sync(agent, "What do the notes say?")
    print(result.output)
