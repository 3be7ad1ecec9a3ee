"""``orchestrator run FILE.py PROMPT --mcp AGENT:NAME=COMMAND``: a server for the agents of one
name and their descendants that inherit their tools, one server process per value.

The tree: ``root`` spawns ``worker`` twice and ``other`` once; ``worker`` (a tools list of its
own) spawns ``helper`` (``tools=None``: it inherits the worker's); ``other`` (``tools=None``)
inherits the root's. Each agent's model calls ``test__pid`` when it holds it and answers with
the tools it was offered and what its calls returned, so the root's answer tells who held what.
The test MCP server of tests/support runs as a real process.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from support.cli import Cli, CliRun
from support.mcp_servers import SERVER

TREE = """\
from orchestrator import Agent, tool
from orchestrator.models import FunctionModel, text, tool_call


@tool
def note(text: str) -> str:
    \"\"\"Keep a note.\"\"\"
    return text


@tool
def test__echo(text: str) -> str:
    \"\"\"A tool of the worker's own, named as the test server's echo would be.\"\"\"
    return text


def model(name, children=()):
    def answer(request):
        offered = sorted(t.name for t in request.tools)
        if request.turn_index() == 0:
            calls = [tool_call("spawn_subagent", {"agent": c, "task": "Go."}) for c in children]
            if "test__pid" in offered:
                calls.append(tool_call("test__pid", {}))
            if calls:
                return calls
        calls = {c.id: c.name for m in request.messages for c in m.tool_uses}
        results = {
            calls[b.tool_use_id]: b.content
            for m in request.messages
            for b in m.content
            if b.type == "tool_result"
        }
        reports = [
            b.content
            for m in request.messages
            for b in m.content
            if b.type == "tool_result" and calls[b.tool_use_id] == "spawn_subagent"
        ]
        pid = results.get("test__pid", "-")
        return text("\\n".join([f"{name} held {' '.join(offered)}; pid {pid}", *reports]))

    return FunctionModel(answer, name=name)


helper = Agent("helper", "Help.", model=model("helper"))
worker = Agent(
    "worker", "Work.", model=model("worker", ["helper"]), tools=[{worker_tool}], subagents=[helper]
)
other = Agent("other", "Other.", model=model("other"))
agent = Agent(
    "root", "Lead.", model=model("root", ["worker", "worker", "other"]), subagents=[worker, other]
)
"""


def write_tree(folder: Path, worker_tool: str = "note") -> None:
    (folder / "tree.py").write_text(TREE.replace("{worker_tool}", worker_tool))


def server(name: str = "test", agent: str | None = "worker") -> str:
    """``--mcp``'s value for the test server (a real process)."""
    head = f"{agent}:{name}" if agent else name
    return f"{head}={shlex.join([sys.executable, str(SERVER)])}"


def held(answer: str) -> dict[str, list[tuple[list[str], str]]]:
    """Each agent's (tools offered, the pid ``test__pid`` gave it or ``-``), from the answers
    (each agent's line, then its children's)."""
    out: dict[str, list[tuple[list[str], str]]] = {}
    for name, tools, pid in re.findall(r"^(\w+) held ([^;]*); pid (\S+)$", answer, re.M):
        out.setdefault(name, []).append((tools.split(), pid))
    return out


def one_line_error(proc: CliRun) -> str:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("orchestrator: ")
    return line


def test_the_named_agents_and_their_inheriting_descendants_hold_the_server_and_share_it(
    cli: Cli, tmp_path: Path
) -> None:
    write_tree(tmp_path)
    proc = cli("run", "tree.py", "Go.", "--mcp", server())
    assert proc.returncode == 0, proc.stderr
    agents = held(proc.stdout)
    assert len(agents["worker"]) == 2 and len(agents["helper"]) == 2
    pids = set()
    for name in ("worker", "helper"):  # the named agent, and the one inheriting its tools
        for tools, pid in agents[name]:
            assert "test__pid" in tools and "test__echo" in tools
            assert ("note" in tools) and (("spawn_subagent" in tools) == (name == "worker"))
            pids.add(pid)
    assert len(pids) == 1 and pids.pop().isdigit()  # four agents, one server process
    assert agents["other"] == [([], "-")]  # a sibling of another name: none of it
    ((root_tools, _),) = agents["root"]
    assert root_tools == ["spawn_subagent"]
    (log,) = (tmp_path / "runs").glob("*.mcp-test.stderr.log")  # one server, started once
    assert log.read_text().count("test server default starting") == 1


def test_without_an_agent_the_root_holds_the_server_and_passes_it_to_inheriting_children(
    cli: Cli, tmp_path: Path
) -> None:
    write_tree(tmp_path)
    proc = cli("run", "tree.py", "Go.", "--mcp", server(agent=None))
    assert proc.returncode == 0, proc.stderr
    agents = held(proc.stdout)
    assert "test__pid" in agents["root"][0][0]
    assert "test__pid" in agents["other"][0][0]  # tools=None under the root: inherited
    assert all("test__pid" not in tools for tools, _ in agents["worker"] + agents["helper"])


def test_an_agent_the_tree_does_not_have_is_one_line_exit_2_before_any_server_starts(
    cli: Cli, tmp_path: Path
) -> None:
    write_tree(tmp_path)
    # a command that would fail if it started: nothing starts (a quick test may start no
    # process: tests/conftest.py's guard would fail this one if the server were started)
    proc = cli("run", "tree.py", "Go.", "--mcp", "reseacher:notes=python3 serve.py")
    line = one_line_error(proc)
    assert line == (
        "orchestrator: --mcp reseacher:notes: the tree has no agent named 'reseacher' (its "
        "agents: helper, other, root, worker)"
    )
    assert not (tmp_path / "runs").exists()
    dry = cli("run", "tree.py", "Go.", "--dry-run", "--mcp", "reseacher:notes=python3 serve.py")
    assert one_line_error(dry) == line


def test_an_agent_that_inherits_its_tools_cannot_be_given_a_server_of_its_own(
    cli: Cli, tmp_path: Path
) -> None:
    write_tree(tmp_path)
    line = one_line_error(cli("run", "tree.py", "Go.", "--mcp", "helper:notes=python3 s.py"))
    assert "--mcp helper:notes: agent 'helper' inherits its parent's tools (tools=None)" in line


def test_two_values_naming_one_server_are_refused_whichever_agents_they_name(
    cli: Cli, tmp_path: Path
) -> None:
    write_tree(tmp_path)
    proc = cli(
        "run", "tree.py", "Go.", "--mcp", "worker:n=python3 a.py", "--mcp", "other:n=python3 b.py"
    )
    assert one_line_error(proc) == "orchestrator: --mcp n: two servers have this name"


def test_a_tool_name_clash_is_checked_for_the_agent_the_server_goes_to(
    cli: Cli, tmp_path: Path
) -> None:
    write_tree(tmp_path, worker_tool="test__echo")  # the worker's own tool: a server's name
    line = one_line_error(cli("run", "tree.py", "Go.", "--mcp", server()))
    assert "agent 'worker': the tool 'test__echo' of agent 'worker' and" in line
    assert "would both be the tool 'test__echo'" in line
    fine = cli("run", "tree.py", "Go.", "--mcp", server(agent=None))  # the root's: no clash
    assert fine.returncode == 0, fine.stderr


def test_the_dry_run_lists_who_holds_what(cli: Cli, tmp_path: Path) -> None:
    write_tree(tmp_path)
    proc = cli("run", "tree.py", "Go.", "--dry-run", "--mcp", server())
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert lines["toolsets"] == "started 1 to list their tools"
    assert lines["tools of root"] == "spawn_subagent (allow)"
    assert lines["tools of other"] == "none"
    for name in ("worker", "helper"):
        listed = lines[f"tools of {name}"].split(", ")
        assert "note (allow)" in listed and "test__pid (allow)" in listed
    assert "spawn_subagent (allow)" in lines["tools of worker"].split(", ")
    assert lines["mcp server test"] == (
        "from --mcp worker:test; held by worker, helper (inherits worker's tools)"
    )
    doc = json.loads(cli("run", "tree.py", "Go.", "--dry-run", "--json", "--mcp", server()).stdout)
    assert doc["tools of other"] == "none"
    assert doc["mcp server test"] == lines["mcp server test"]


def test_resume_gives_the_agents_server_again_from_the_journal(cli: Cli, tmp_path: Path) -> None:
    write_tree(tmp_path)
    first = cli("run", "tree.py", "Go.", "--mcp", server(), "--max-turns", "1")
    assert first.returncode == 3, first.stderr  # max_turns: nothing answered
    (journal,) = (tmp_path / "runs").glob("*.db")
    done = cli("resume", journal.stem, "--max-turns", "3")  # the --mcp value given again
    assert done.returncode == 0, done.stderr
    agents = held(done.stdout)
    assert all(pid.isdigit() for _, pid in agents["worker"] + agents["helper"])
    assert agents["other"] == [([], "-")]
