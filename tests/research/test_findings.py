"""The research tree's typed findings (research/findings.py): a researcher's claims are checked
against what it read before the lead sees them, and the offline model answers typed, again
when asked."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pytest
from quality.evaluate import citations_of, read_ids
from support.cli import Cli, cli_env

from orchestrator import Agent, Limits, OutputContext, OutputRejected, RunStatus, run
from orchestrator.core.messages import ToolResultBlock, ToolUseBlock
from orchestrator.core.output import OutputValidator
from orchestrator.models import ScriptedModel, text, tool_call
from orchestrator.research.findings import (
    Claim,
    Findings,
    answer_cites_only_findings,
    cited_sources_were_read,
    findings_sources,
    sources_seen,
)
from orchestrator.research.tools import corpus_tools
from orchestrator.testing import final

RESEARCH = Path(__file__).parents[2] / "agents" / "research.py"

DOCS = {
    "generators.md": "# Generators\n\nA generator function is a function whose body contains a "
    "yield statement. Calling it returns a generator iterator.\n\n## Generators as context "
    "managers\n\nThe contextmanager decorator makes context managers out of generators.\n",
    "context.md": "# Context managers\n\nA context manager is an object that defines the methods "
    "__enter__ and __exit__, which the with statement calls around its block.\n",
    "bread.md": "# Bread\n\nBread is baked from flour, water, salt and yeast.\n",
}


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "docs"
    root.mkdir()
    for name, body in DOCS.items():
        (root / name).write_text(body, encoding="utf-8")
    return root, tmp_path / "index.sqlite"


def researcher(
    corpus: tuple[Path, Path],
    *,
    limits: Limits | None = None,
    mode: Literal["tool", "native"] = "tool",
    validators: Sequence[OutputValidator] = (cited_sources_were_read,),
) -> Agent[Findings]:
    """A researcher of agents/research.py's kind, over the test's corpus."""
    root, index = corpus
    return Agent(
        "researcher",
        "Research one sub-question.",
        description="Researches one sub-question.",
        tools=corpus_tools(root, index_path=index),
        limits=limits or Limits(max_turns=8),
        output_type=Findings,
        output_mode=mode,
        output_validators=validators,
    )


def findings(*claims: tuple[str, list[str]]) -> Findings:
    return Findings(summary="s", claims=[Claim(text=t, sources=s) for t, s in claims])


def rejections(result_messages: list[object]) -> list[str]:
    return [
        b.content
        for m in result_messages
        for b in getattr(m, "content", ())
        if isinstance(b, ToolResultBlock) and b.error_type == "invalid_output"
    ]


# -- the validator, with a scripted researcher ----------------------------------------------------


async def test_a_claim_citing_a_document_not_read_is_rejected_and_asked_again(
    corpus: tuple[Path, Path],
) -> None:
    model = ScriptedModel(
        [
            tool_call("search", {"query": "generators"}),
            tool_call("read", {"doc_id": "generators.md"}),
            final(findings(("Generators yield.", ["generators.md"]), ("Bread rises.", ["x.md"]))),
            final(findings(("Generators yield.", ["generators.md"]))),
        ]
    )
    result = await run(researcher(corpus), "How do generators work?", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == findings(("Generators yield.", ["generators.md"]))
    (problem,) = rejections(list(result.messages))
    assert "claims.1 ('Bread rises.') cites [x.md], which you did not read" in problem
    assert "[generators.md]" in problem  # what it may cite instead
    assert "claims.0" not in problem
    assert result.turns == 4


async def test_a_researcher_that_keeps_citing_unread_documents_ends_invalid_output(
    corpus: tuple[Path, Path],
) -> None:
    unread = final(findings(("Bread is baked.", ["bread.md"])))
    model = ScriptedModel([unread, unread, unread, unread])
    result = await run(
        researcher(corpus, limits=Limits(max_turns=8, output_retries=2)), "Bread?", model=model
    )
    assert result.status is RunStatus.INVALID_OUTPUT
    assert result.turns == 3  # the answer and two retries
    assert all("(you have read none)" in p for p in rejections(list(result.messages)))


async def test_search_hits_and_sections_of_documents_read_may_be_cited_in_brackets_or_not(
    corpus: tuple[Path, Path],
) -> None:
    model = ScriptedModel(
        [
            tool_call("search", {"query": "bread generators"}),
            tool_call("read", {"doc_id": "generators.md"}),
            final(
                findings(
                    ("Bread is baked.", ["bread.md"]),  # a hit of the search, not read
                    ("Generators yield.", ["[generators.md#generators]"]),  # a section of it
                )
            ),
        ]
    )
    result = await run(researcher(corpus), "Bread and generators?", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    assert [c.sources for c in result.output.claims] == [["bread.md"], ["generators.md#generators"]]


async def test_a_failed_read_is_not_reading(corpus: tuple[Path, Path]) -> None:
    model = ScriptedModel(
        [
            tool_call("read", {"doc_id": "missing.md"}),
            final(findings(("Missing says so.", ["missing.md"]))),
            final(Findings(summary="Nothing found.", claims=[])),
        ]
    )
    result = await run(researcher(corpus), "What is missing?", model=model)
    assert result.status is RunStatus.COMPLETED
    assert result.output.claims == []
    assert len(rejections(list(result.messages))) == 1


async def test_a_claim_without_a_source_is_refused_by_the_schema(corpus: tuple[Path, Path]) -> None:
    model = ScriptedModel(
        [
            final({"summary": "s", "claims": [{"text": "Trust me.", "sources": []}]}),
            final(Findings(summary="Nothing found.", claims=[])),
        ]
    )
    result = await run(researcher(corpus), "Anything?", model=model)
    assert result.status is RunStatus.COMPLETED
    (problem,) = rejections(list(result.messages))
    assert "claims.0.sources:" in problem


def test_sources_seen_takes_successful_reads_by_name_and_header_and_search_hits() -> None:
    pairs = (
        (
            ToolUseBlock("1", "search", {"query": "q"}),
            ToolResultBlock("1", "[a.md] A\n    snippet\n[b c [1].md] B\n    more"),
        ),
        (ToolUseBlock("2", "read", {"doc_id": "A.MD"}), ToolResultBlock("2", "# A [a.md]\n\ntext")),
        (ToolUseBlock("3", "read", {"doc_id": "z.md"}), ToolResultBlock("3", "no", is_error=True)),
        (ToolUseBlock("4", "other", {"doc_id": "y.md"}), ToolResultBlock("4", "[y.md] Y")),
    )
    assert sources_seen(pairs) == ({"A.MD", "a.md"}, {"a.md", "b c [1].md"})


# -- the research tree, on the offline model ------------------------------------------------------


async def test_offline_researchers_give_findings_whose_every_source_they_read(
    corpus: tuple[Path, Path],
) -> None:
    lead = Agent(
        "lead",
        "Lead.",
        model="offline",
        subagents=[researcher(corpus)],
        limits=Limits(max_turns=6, max_depth=1),
    )
    result = await run(lead, "How do generators and context managers work?")
    assert result.status is RunStatus.COMPLETED, result.error
    claimed: list[str] = []
    for child in result.children:
        assert isinstance(child.output, Findings)
        assert child.output.claims
        read = set(read_ids_of(child))
        for claim in child.output.claims:
            assert set(claim.sources) <= read
            claimed += claim.sources
        assert rejections(list(child.messages)) == []  # right the first time
        assert child.output_json is not None
        assert json.loads(child.output_json) == child.output.model_dump(mode="json")
    cited, listed_only = citations_of(result.output)
    assert cited and not listed_only
    assert {doc for doc, _ in cited} == set(claimed)  # the lead cites its findings, no more
    assert result.output.rpartition("Sources: ")[2] == ", ".join(
        f"[{s}]" for s in dict.fromkeys(claimed)
    )


def read_ids_of(child: object) -> list[str]:
    return [
        str(c.input["doc_id"])
        for m in getattr(child, "messages", ())
        if m.role == "assistant"
        for c in m.tool_uses
        if c.name == "read"
    ]


def no_context_manager_sources(ctx: OutputContext, value: Findings) -> Findings:
    """A second validator: this team does not trust context.md."""
    bad = [i for i, c in enumerate(value.claims) if "context.md" in c.sources]
    if bad:
        raise OutputRejected(
            "; ".join(f"claims.{i} cites context.md, which we do not trust" for i in bad)
        )
    return value


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_the_offline_researcher_answers_a_rejection_without_the_claims_it_names(
    corpus: tuple[Path, Path], mode: Literal["tool", "native"]
) -> None:
    agent = researcher(
        corpus,
        mode=mode,
        validators=[cited_sources_were_read, no_context_manager_sources],
    )
    result = await run(agent, "How do generators and context managers work?", model="offline")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output.claims
    assert all("context.md" not in c.sources for c in result.output.claims)
    assert any(s.startswith("generators.md") for c in result.output.claims for s in c.sources)
    assert "context.md" in read_ids(result)  # it read it, and its claims were dropped
    asked_again = (
        rejections(list(result.messages))
        if mode == "tool"
        else [m.text for m in result.messages if m.text.startswith("The output was rejected")]
    )
    assert len(asked_again) == 1 and "we do not trust" in asked_again[0]


async def test_an_offline_researcher_whose_every_claim_is_rejected_says_so_in_its_summary(
    corpus: tuple[Path, Path],
) -> None:
    def nothing_counts(ctx: OutputContext, value: Findings) -> Findings:
        if value.claims:
            raise OutputRejected(
                "; ".join(f"claims.{i} is off topic" for i in range(len(value.claims)))
            )
        return value

    agent = researcher(corpus, validators=[cited_sources_were_read, nothing_counts])
    result = await run(agent, "How do generators work?", model="offline")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output.claims == []
    assert result.output.summary.startswith("Nothing I found could be kept: claims.0 is off topic")


def test_the_research_tree_from_the_cli_answers_offline_with_citations_checked_and_kept(
    corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = corpus
    cli = Cli(monkeypatch, tmp_path, cli_env)
    question = "How do generators and context managers work?"
    proc = cli("run", str(RESEARCH), question, "--corpus", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["status"], out["offline"]) == ("completed", True)
    claimed = []
    for child in out["tree"]["children"]:  # each researcher's checked findings, as JSON
        found = Findings.model_validate(child["output"])
        assert found.claims
        claimed += [s for c in found.claims for s in c.sources]
    cited, listed_only = citations_of(out["output"])
    assert cited and not listed_only
    assert {doc for doc, _ in cited} == set(claimed)
    assert {doc.split("#")[0] for doc in claimed} == {"generators.md", "context.md"}


# -- the lead's answer: only its researchers' sources ---------------------------------------------


def lead(corpus: tuple[Path, Path], *validators: OutputValidator) -> Agent[str]:
    return Agent(
        "lead",
        "Lead.",
        subagents=[researcher(corpus)],
        limits=Limits(max_turns=6, max_depth=1),
        output_validators=[answer_cites_only_findings, *validators],
    )


async def test_a_lead_citing_a_source_no_researcher_found_is_asked_again_naming_it(
    corpus: tuple[Path, Path],
) -> None:
    spawn = tool_call("spawn_subagent", {"agent": "researcher", "task": "generators"})
    found = findings(("A generator function contains yield.", ["generators.md"]))
    quoted = "Call it as `f(sys.argv[1:])`."  # brackets in prose are not citations
    model = ScriptedModel(
        {
            "lead": [
                spawn,
                text(f"Generators yield [generators.md]; bread is baked [bread.md]. {quoted}"),
                text(f"Generators yield [generators.md]. {quoted}"),
            ],
            "researcher": [
                tool_call("read", {"doc_id": "generators.md"}),
                final(found),
            ],
        }
    )
    result = await run(lead(corpus), "Generators?", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == f"Generators yield [generators.md]. {quoted}"
    (asked,) = [m.text for m in result.messages if m.text.startswith("The output was rejected")]
    assert "[bread.md], which no researcher's findings cite" in asked
    assert "[1:]" not in asked and "([generators.md])" in asked


def test_findings_sources_reads_urls_ids_and_a_json_cut_short() -> None:
    spawn = ToolUseBlock("c1", "spawn_subagent", {"agent": "researcher", "task": "t"})
    whole = findings(("a", ["https://Example.org/a/"]), ("b", ["[topic:for]"]))
    cut = findings(("c", ["topic:while"]), ("d", ["topic:never-seen"])).model_dump_json()
    results = [
        (spawn, ToolResultBlock("c1", whole.model_dump_json())),
        (spawn, ToolResultBlock("c1", cut[: cut.index("topic:never")])),  # at max_result_chars
        (spawn, ToolResultBlock("c1", '{"claims": [{"sources": ["x:y"]}]}', is_error=True)),
    ]
    assert findings_sources(results) == {"https://example.org/a", "topic:for", "topic:while"}


async def test_the_offline_lead_answers_a_rejection_without_the_lines_citing_what_it_names(
    corpus: tuple[Path, Path],
) -> None:
    def no_context_md(ctx: OutputContext, answer: str) -> str:
        """Worded as answer_cites_only_findings words it: the offline lead reads that form."""
        if "[context.md" in answer:
            cited = sorted({c for c in re.findall(r"\[(context\.md[^\]]*)\]", answer)})
            raise OutputRejected(
                "The answer cites "
                + ", ".join(f"[{c}]" for c in cited)
                + ", which no researcher's findings cite. Drop those citations."
            )
        return answer

    agent = lead(corpus, no_context_md).replace(model="offline")
    result = await run(agent, "How do generators and context managers work?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert "[generators.md" in result.output and "[context.md" not in result.output
    assert len([m for m in result.messages if m.text.startswith("The output was rejected")]) == 1


async def test_a_lead_whose_researchers_cited_nothing_may_cite_no_document_of_any_corpus_kind(
    corpus: tuple[Path, Path],
) -> None:
    spawn = tool_call("spawn_subagent", {"agent": "researcher", "task": "bread"})
    model = ScriptedModel(
        {
            "lead": [
                spawn,
                text("Bread is baked [Bread.MD], as [topic:while] and [stdlib:json] say."),
                text("Nothing was found about bread."),
            ],
            "researcher": [final(findings())],  # it found nothing: no kinds to go by
        }
    )
    result = await run(lead(corpus), "Bread?", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Nothing was found about bread."
    (asked,) = [m.text for m in result.messages if m.text.startswith("The output was rejected")]
    assert "The answer cites [Bread.MD], [topic:while], [stdlib:json], which" in asked
    assert "(they cited none)" in asked
