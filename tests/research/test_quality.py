"""Quality of the research tree on the offline model, as tests/quality/evaluate.py measures it.

The floors below are the values measured on a subset of the questions (Python 3.11, default
corpus) minus a margin, so a change that makes retrieval or citations worse fails here, while
the full set stays a script to run by hand: ``python tests/quality/evaluate.py``.
"""

from __future__ import annotations

import sys

import pytest
from quality.evaluate import (
    QUESTIONS,
    averages,
    citations_of,
    evaluate,
    load_questions,
    markdown_best,
    matches,
    passage_in,
    score,
)

from orchestrator import RunResult, RunStatus, Usage
from orchestrator.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from orchestrator.research.corpus import Corpus, CorpusError
from orchestrator.research.tools import CORPUS_ENV

SUBSET = [
    "generators-context-managers",
    "with-statement",
    "exceptions",
    "json-parse",
    "copy",
    "cli-args",
    "global-nonlocal",
    "pickle-base64",
]
# Measured on SUBSET: recall@5 0.886, citation precision 1.000, on-topic precision 0.677.
RECALL_FLOOR = 0.80
CITATION_PRECISION_FLOOR = 0.95
ON_TOPIC_FLOOR = 0.55


@pytest.fixture
def default_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CORPUS_ENV, raising=False)


def test_research_tree_stays_above_the_measured_floors(default_corpus: None) -> None:
    results = evaluate(load_questions(only=SUBSET))
    assert sorted(r.id for r in results) == sorted(SUBSET)
    assert all(r.status == "completed" for r in results)
    assert all(r.citations for r in results), "every answer cites something"
    avg = averages(results)
    assert avg["recall_at_5"] >= RECALL_FLOOR, avg
    assert avg["citation_precision"] >= CITATION_PRECISION_FLOOR, avg
    assert avg["on_topic_precision"] >= ON_TOPIC_FLOOR, avg
    block = markdown_best(results)
    assert block.count("```text") == 5


def test_questions_file() -> None:
    questions = load_questions()
    assert len(questions) >= 24
    assert len({q.id for q in questions}) == len(questions)
    kinds = [q.kind for q in questions]
    assert set(kinds) == {"single", "compound"} and kinds.count("compound") >= 8
    assert all(q.expected and all(entry for entry in q.expected) for q in questions)
    assert set(SUBSET) <= {q.id for q in questions}


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="ids checked against Python 3.11")
def test_every_expected_id_exists_in_the_default_corpus() -> None:
    import json

    assert json.loads(QUESTIONS.read_text())["python"] == "3.11"
    missing = []
    with Corpus.open() as corpus:
        for q in load_questions():
            for entry in q.expected:
                for doc_id in entry:
                    try:
                        corpus.read(doc_id, max_chars=1)
                    except CorpusError:
                        missing.append(doc_id)
    assert not missing


# -- the measures themselves ---------------------------------------------------------------------


def test_matching_rule() -> None:
    assert matches("stdlib:json", "stdlib:json")
    assert matches("stdlib:json#loads", "stdlib:json")
    assert not matches("stdlib:json", "stdlib:json#loads")
    assert not matches("stdlib:json.decoder", "stdlib:json")
    assert not matches("topic:with", "topic:withdrawn")


def test_citations_and_passages() -> None:
    answer = (
        "Answer to: q\n\n## part\n"
        "- A generator function is a function. [topic:types#generator-functions]\n"
        "- Shared text. [topic:a] [topic:b]\n"
        "Sources: [topic:types#generator-functions], [topic:unread]"
    )
    cited, listed_only = citations_of(answer)
    assert cited == [
        ("topic:types#generator-functions", "A generator function is a function."),
        ("topic:a", "Shared text."),
        ("topic:b", "Shared text."),
    ]
    assert listed_only == ["topic:unread"]
    text = "Intro.\n\nA generator   function is a\nfunction. It yields values one by one."
    assert passage_in("A generator function is a function.", text)
    assert passage_in("A generator function is ... one by one.", text)
    assert not passage_in("one by one ... A generator function", text)  # fragments in order
    assert not passage_in("A generator is a function.", text)
    assert not passage_in("yields", text)  # too short to be a passage


def _researcher(search_hits: str, reads: dict[str, str], output: str) -> RunResult:
    calls = [ToolUseBlock("s1", "search", {"query": "q"})]
    messages = [
        Message.user("q"),
        Message("assistant", tuple(calls)),
        Message("user", (ToolResultBlock("s1", search_hits),)),
    ]
    read_calls = tuple(ToolUseBlock(f"r{i}", "read", {"doc_id": d}) for i, d in enumerate(reads))
    messages.append(Message("assistant", read_calls))
    messages.append(
        Message(
            "user",
            tuple(ToolResultBlock(c.id, reads[str(c.input["doc_id"])]) for c in read_calls),
        )
    )
    messages.append(Message("assistant", (TextBlock(output),)))
    return RunResult(
        "researcher", RunStatus.COMPLETED, output, messages, Usage(), Usage(), path="lead/r#1"
    )


def test_score_counts_what_was_retrieved_read_and_supported(default_corpus: None) -> None:
    (question,) = load_questions(only=["global-nonlocal"])
    with Corpus.open() as corpus:
        global_text = corpus.read("topic:global").text
        sentence = (
            'The "global" statement is a declaration which holds for the entire current code block.'
        )
        hits = "\n".join(
            f"[{i}] title\n    snippet"
            for i in ["stdlib:a", "stdlib:b", "stdlib:c", "stdlib:d", "stdlib:e", "topic:nonlocal"]
        )
        hits = "[topic:global] The global statement\n    snippet\n" + hits  # nonlocal is 7th
        researcher = _researcher(hits, {"topic:global": global_text}, "x")
        answer = (
            f"- {sentence} [topic:global]\n"  # read, and the passage is there
            "- The global statement deletes files. [topic:global]\n"  # not in the text
            f"- {sentence} [topic:nonlocal]\n"  # never read
            "Sources: [topic:global], [topic:with]"  # topic:with: listed, never cited
        )
        lead = RunResult(
            "lead",
            RunStatus.COMPLETED,
            answer,
            [Message.user(question.question), Message.assistant(answer)],
            Usage(),
            Usage(),
            children=[researcher],
        )
        result = score(question, lead, corpus)
    assert result.recall_at_5 == 0.5  # topic:global in a top five, topic:nonlocal 7th
    assert result.read_recall == 0.5
    assert [c["supported"] for c in result.citations] == [True, False, False, False]
    assert result.citation_precision == 0.25
    assert result.cited == ["topic:global", "topic:nonlocal", "topic:with"]
    assert result.on_topic_precision == pytest.approx(2 / 3)
