"""Leads scale effort to the question (issue 35): one researcher for a simple fact, one per part
of a question in parts, never more than the lead's instructions allow, all spawned in one turn,
and the answer says what was not found. Offline, through the CLI, as a person runs
agents/research.py; spawns counted in the result's tree, not in the answer's text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli, cli_env

from orchestrator import Agent, Limits, RunStatus, run
from orchestrator.research.findings import Findings, cited_sources_were_read
from orchestrator.research.questions import MAX_SUBQUESTIONS, most_subquestions
from orchestrator.research.tools import corpus_tools

RESEARCH = Path(__file__).parents[2] / "agents" / "research.py"
WEB = Path(__file__).parents[2] / "agents" / "web_research.py"

DOCS = {
    "zip.md": "# zip\n\nThe zip function iterates over several iterables in parallel, producing "
    "tuples with an item from each one.\n",
    "map.md": "# map\n\nThe map function applies a function to every item of an iterable and "
    "returns an iterator of the results.\n",
    "filter.md": "# filter\n\nThe filter function builds an iterator from those items of an "
    "iterable for which a function returns true.\n",
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _run(cli: Cli, corpus: Path, question: str) -> dict[str, Any]:
    proc = cli("run", str(RESEARCH), question, "--corpus", str(corpus), "--json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert (out["status"], out["offline"]) == ("completed", True)
    return out


def test_the_offline_research_tree_spawns_one_researcher_for_one_fact_and_three_for_three_parts(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(monkeypatch, tmp_path, cli_env)
    one = _run(cli, corpus, "What does the zip function do?")
    assert len(one["tree"]["children"]) == 1
    assert one["tree"]["turns"] == 2  # spawn, then answer

    three = _run(cli, corpus, "What do the zip, map and filter functions do?")
    children = three["tree"]["children"]
    assert len(children) == 3
    assert three["tree"]["turns"] == 2  # all three spawned in one turn
    read = [
        {s.split("#")[0] for c in Findings.model_validate(ch["output"]).claims for s in c.sources}
        for ch in children
    ]
    assert read == [{"zip.md"}, {"map.md"}, {"filter.md"}]
    assert "Not found" not in three["output"]


def test_a_part_nothing_was_found_for_is_said_in_the_answer(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(monkeypatch, tmp_path, cli_env)
    out = _run(cli, corpus, "What does the zip function do, and what is a frobnicator?")
    assert len(out["tree"]["children"]) == 2
    assert "Not found: what is a frobnicator." in out["output"]
    assert "Not found: What does the zip" not in out["output"]


def test_the_lead_prompts_state_the_bound_their_max_children_enforce() -> None:
    for path in (RESEARCH, WEB):
        namespace: dict[str, Any] = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        lead = namespace["agent"]
        assert lead.limits.max_children == namespace["MAX_RESEARCHERS"] == 6
        assert most_subquestions(lead.instructions) == 6, path.name
        assert "one researcher for a simple fact" in lead.instructions
        assert "single turn" in lead.instructions
        assert "could not find" in lead.instructions


@pytest.mark.parametrize(
    ("instructions", "bound"),
    [
        ("Spawn researchers, never more than six.", 6),
        ("Use at most 2 researchers.", 2),
        ("No more than one helper.", 1),
        ("Split the question and spawn researchers.", MAX_SUBQUESTIONS),
    ],
)
def test_most_subquestions_reads_the_bound_a_lead_is_given(instructions: str, bound: int) -> None:
    assert most_subquestions(instructions) == bound


async def test_the_offline_lead_never_spawns_more_researchers_than_its_instructions_allow(
    corpus: Path, tmp_path: Path
) -> None:
    researcher = Agent(
        "researcher",
        "Research one sub-question.",
        description="Researches one sub-question.",
        tools=corpus_tools(corpus, index_path=tmp_path / "index.sqlite"),
        output_type=Findings,
        output_validators=[cited_sources_were_read],
    )
    lead = Agent(
        "lead",
        "Split the question; spawn researchers, at most 2 of them.",
        model="offline",
        subagents=[researcher],
        limits=Limits(max_depth=1, max_children=2),
    )
    result = await run(lead, "What do the zip, map and filter functions do?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert len(result.children) == 2
    assert (
        "Not researched" in result.output and "filter" in result.output.split("Not researched")[1]
    )
