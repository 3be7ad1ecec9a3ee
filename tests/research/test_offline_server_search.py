"""The offline researcher and a server's search: offered a ``{server}__search`` tool taking a
``query`` (what ``--mcp researcher:notes=...`` gives it), it searches there beside the corpus,
in the same turn, and its findings may cite the ``[id] passage`` hits the tool returned.

The tool here is a Python tool with an MCP tool's name (the offline model knows tools by their
name and schema only); tests/cli/test_mcp_research.py runs the same with a real MCP server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from quality.evaluate import citations_of

from orchestrator import Agent, Limits, OutputRejected, RunStatus, run, tool
from orchestrator.core.messages import ToolResultBlock, ToolUseBlock
from orchestrator.core.output import OutputContext
from orchestrator.research.findings import Claim, Findings, cited_sources_were_read
from orchestrator.research.questions import search_query
from orchestrator.research.tools import corpus_tools

DOCS = {
    "generators.md": "# Generators\n\nA generator function is a function whose body contains a "
    "yield statement. Calling it returns a generator iterator.\n",
    "bread.md": "# Bread\n\nBread is baked from flour, water, salt and yeast.\n",
}
NOTE = (
    "Our team writes generator functions for every stream of records, so that no list of "
    "them is built in memory."
)


@tool
def notes__search(query: str) -> str:
    """Search the team's notes."""
    if "generator" not in query:
        return f"No passage of the notes matches: {query}"
    return f"[team.md] {NOTE}\n\n[other.md] Releases go out on Tuesdays."


@tool
def broken__search(query: str) -> str:
    """A search whose server is gone."""
    raise RuntimeError("the notes server is gone")


def tree(tmp_path: Path, *extra: object, corpus: bool = True) -> Agent:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    tools = [*(corpus_tools(root, index_path=tmp_path / "i.sqlite") if corpus else []), *extra]
    researcher = Agent(
        "researcher",
        "Research one sub-question.",
        description="Researches one sub-question.",
        tools=tools,  # type: ignore[arg-type]
        limits=Limits(max_turns=8),
        output_type=Findings,
        output_validators=[cited_sources_were_read],
    )
    return Agent(
        "lead",
        "Split the question and spawn researchers.",
        model="offline",
        subagents=[researcher],
        limits=Limits(max_turns=6, max_depth=1),
    )


def calls_of(result: object) -> list[list[ToolUseBlock]]:
    (researcher,) = result.children  # type: ignore[attr-defined]
    return [m.tool_uses for m in researcher.messages if m.role == "assistant" and m.tool_uses]


async def test_a_researcher_searches_the_server_beside_the_corpus_and_cites_what_it_returned(
    tmp_path: Path,
) -> None:
    question = "How do generators work?"
    result = await run(tree(tmp_path, notes__search), question)
    assert result.status is RunStatus.COMPLETED
    first = calls_of(result)[0]  # one turn: the corpus's search and the server's
    assert [(c.name, c.input) for c in first] == [
        ("search", {"query": search_query(question), "limit": 8}),
        ("notes__search", {"query": search_query(question)}),
    ]
    (researcher,) = result.children
    sources = {s for c in researcher.output.claims for s in c.sources}
    assert "team.md" in sources and "other.md" not in sources  # a passage on the question
    cited = dict(citations_of(result.output)[0])
    assert cited["team.md"] == NOTE
    assert any(d.startswith("generators.md") for d in cited)  # the corpus is still read


async def test_without_the_tool_the_same_question_cites_only_the_corpus(tmp_path: Path) -> None:
    result = await run(tree(tmp_path), "How do generators work?")
    assert result.status is RunStatus.COMPLETED
    assert [c.name for c in calls_of(result)[0]] == ["search"]
    assert "team.md" not in result.output


async def test_a_researcher_holding_only_a_server_search_answers_from_it(tmp_path: Path) -> None:
    result = await run(tree(tmp_path, notes__search, corpus=False), "How do generators work?")
    assert result.status is RunStatus.COMPLETED
    assert [[c.name for c in turn] for turn in calls_of(result)[:1]] == [["notes__search"]]
    assert dict(citations_of(result.output)[0]) == {"team.md": NOTE}
    nothing = await run(tree(tmp_path, notes__search, corpus=False), "What is the bread?")
    (researcher,) = nothing.children
    assert researcher.output.claims == []
    assert researcher.output.summary.startswith("I found no documents about")


async def test_a_server_search_that_fails_is_said_and_the_corpus_still_answers(
    tmp_path: Path,
) -> None:
    alone = await run(tree(tmp_path, broken__search, corpus=False), "How do generators work?")
    (researcher,) = alone.children
    assert researcher.output.summary.startswith("I could not search:")
    assert "the notes server is gone" in researcher.output.summary
    beside = await run(tree(tmp_path, broken__search), "How do generators work?")
    assert any(d.startswith("generators.md") for d, _ in citations_of(beside.output)[0])


def test_the_validator_takes_a_server_searchs_hits_as_found_and_nothing_else() -> None:
    call = ToolUseBlock("t1", "notes__search", {"query": "generators"})
    result = ToolResultBlock("t1", f"[team.md] {NOTE}")
    ctx = OutputContext("researcher", "lead/researcher#1", "run", None, ((call, result),))
    kept = Findings(summary="s", claims=[Claim(text=NOTE, sources=["team.md"])])
    assert cited_sources_were_read(ctx, kept) == kept
    with pytest.raises(OutputRejected, match=r"cites \[secret.md\], which you did not read"):
        cited_sources_were_read(
            ctx, Findings(summary="s", claims=[Claim(text="x", sources=["secret.md"])])
        )
