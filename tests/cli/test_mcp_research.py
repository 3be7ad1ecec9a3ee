"""docs/mcp.md's offline recipe, end to end: ``orchestrator run agents/research.py QUESTION
--mcp researcher:notes="python examples/mcp_search/server.py"`` gives the research tree's
researchers the example MCP search server (a real process), and the offline answer cites the
passages the server returned, where the same command without ``--mcp`` cites none of them."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import trio
from support.cli import Cli, cli_env

from orchestrator.mcp import MCPServer

REPO = Path(__file__).parents[2]
SERVER = REPO / "examples" / "mcp_search" / "server.py"
NOTES = SERVER.parent / "notes"
QUESTION = "How do list comprehensions work?"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(monkeypatch, REPO, lambda: cli_env())


def notes_flag() -> str:
    return "researcher:notes=" + shlex.join([sys.executable, str(SERVER)])


def shown_in_docs() -> list[str]:
    """The two answers docs/mcp.md's recipe shows (without, then with the server)."""
    text = (REPO / "docs" / "mcp.md").read_text()
    section = text.split("## A search server for the researchers (offline)", 1)[1]
    return re.findall(r"```text\n(.*?)\n```", section, re.S)[:2]


def cited_lines(answer: str) -> list[str]:
    """An answer's cited lines (``- passage [id]``) and its ``Sources:`` line."""
    return [line for line in answer.splitlines() if line.startswith(("- ", "Sources: "))]


def test_the_example_server_offers_search_and_returns_passages_with_their_file_names() -> None:
    server = MCPServer.stdio("notes", sys.executable, [str(SERVER)])
    (search,) = trio.run(server.list_tools)
    assert search.name == "notes__search"
    assert search.input_schema["required"] == ["query"]


def test_the_recipe_answer_cites_what_the_mcp_server_returned(cli: Cli, tmp_path: Path) -> None:
    runs = ["--runs-dir", str(tmp_path / "runs")]
    without = cli("run", "agents/research.py", QUESTION, *runs)
    assert without.returncode == 0, without.stderr
    with_notes = cli("run", "agents/research.py", QUESTION, "--mcp", notes_flag(), *runs)
    assert with_notes.returncode == 0, with_notes.stderr
    assert "tool   lead/researcher#1: notes__search" in with_notes.stderr.splitlines()

    cited = re.findall(r"^- (.*) \[([^\]]+)\]$", with_notes.stdout, re.M)
    from_notes = [(passage, doc) for passage, doc in cited if (NOTES / doc).is_file()]
    assert {doc for _, doc in from_notes} >= {"style-guide.md"}
    for passage, doc in from_notes:  # quoted as the server returned it, from that file
        assert passage in " ".join((NOTES / doc).read_text().split())
    assert not [
        d
        for _, d in re.findall(r"^- (.*) \[([^\]]+)\]$", without.stdout, re.M)
        if (NOTES / d).is_file()
    ]
    assert without.stdout != with_notes.stdout

    # docs/mcp.md shows these two answers: their cited lines and sources as they are (the
    # lead's headings may change with its prompt; what is cited is the recipe's point)
    shown = shown_in_docs()
    assert [cited_lines(s) for s in shown] == [
        cited_lines(without.stdout),
        cited_lines(with_notes.stdout),
    ]


def test_the_researchers_typed_findings_cite_the_server_and_passed_the_check(
    cli: Cli, tmp_path: Path
) -> None:
    proc = cli(
        "run",
        "agents/research.py",
        QUESTION,
        "--mcp",
        notes_flag(),
        "--json",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert proc.returncode == 0, proc.stderr
    (researcher,) = json.loads(proc.stdout)["tree"]["children"]
    assert researcher["status"] == "completed"
    sources = {s for claim in researcher["output"]["claims"] for s in claim["sources"]}
    assert "style-guide.md" in sources
