"""Measure the research tree on the offline model: retrieval recall@5 and citation precision.

    python tests/quality/evaluate.py            # a table per question, the averages, the best answers
    python tests/quality/evaluate.py --json     # one JSON object instead
    python tests/quality/evaluate.py --only generators,json-csv

Each question of ``questions.json`` (beside this file) runs through ``agents/research.py``'s
``agent`` with every model swapped for ``offline`` and the research tools on the default corpus.
The result tree is then read the way a reviewer would read it:

* **recall@5** (retrieval): every ``search`` a researcher made returned ranked hits, one per
  line starting with ``[id]``; the first five of each search count as retrieved. An expected
  entry is found when any researcher's top five holds a matching id; recall is found entries
  over expected entries. (*read recall* is the same over the ids the researchers read.)
* **citation precision**: a citation is a ``[id]`` in the final answer together with its passage,
  the text between the previous citation (or the start of its line) and the ``[id]``. It is
  supported when the id was read by some agent of the tree *and* the passage appears in the
  document's full text (``Corpus.read(id)``, whitespace-normalized; ``...``/``…`` mark
  elisions, so each fragment must appear, in order). An id listed only on a ``Sources:`` line,
  never next to a passage, counts as an unsupported citation. Precision is supported citations
  over citations; an answer without citations scores 0.
* **on-topic precision**: the fraction of the distinct ids cited in the answer that match an
  expected entry.

Matching rule: an id matches an expected id when it is equal to it or is a section of it (it
starts with the expected id followed by ``#``): ``stdlib:json#loads`` matches ``stdlib:json``,
not the other way round. An expected entry may list several ids holding the same text (pydoc
ships some reference sections twice); matching any of them finds the entry.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from orchestrator import Agent, RunResult, run
from orchestrator.cli.run import load_agent
from orchestrator.core.messages import ToolResultBlock
from orchestrator.research.corpus import Corpus, CorpusError
from orchestrator.research.tools import CORPUS_ENV

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
QUESTIONS = HERE / "questions.json"
RESEARCH_TREE = ROOT / "agents" / "research.py"
TOP_K = 5
MIN_PASSAGE_CHARS = 20

_HIT_LINE = re.compile(r"^\[([^\]\s]+)\]", re.MULTILINE)
# A citation: [id] where the id names a corpus document (``topic:x``, ``stdlib:a.b#c``, or a
# folder corpus path like ``guide/intro.md#setup``).
_CITATION = re.compile(
    r"\[((?:topic|stdlib):[^\]\s]+|[^\]\s]+\.(?:md|markdown|txt|rst|html?)(?:#[^\]\s]*)?)\]"
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_ELLIPSIS = re.compile(r"\.\.\.|…")

Expected = tuple[str, ...]  # alternatives: any one of them finds the entry


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    kind: str
    expected: tuple[Expected, ...]


@dataclass
class Citation:
    id: str
    passage: str
    read: bool
    contained: bool

    @property
    def supported(self) -> bool:
        return self.read and self.contained


@dataclass
class QuestionResult:
    id: str
    question: str
    kind: str
    status: str
    expected: list[list[str]]
    retrieved: list[str]  # distinct ids in any researcher's top five, first seen first
    read: list[str]
    found: list[list[str]]  # expected entries found in a top five
    recall_at_5: float
    read_recall: float
    citations: list[dict[str, Any]]
    citation_precision: float
    cited: list[str]
    on_topic_precision: float
    searches: int
    answer: str
    missing_ids: list[str] = field(default_factory=list)  # expected ids this corpus lacks


def matches(found_id: str, expected_id: str) -> bool:
    """The matching rule: equal, or a section of the expected document."""
    return found_id == expected_id or found_id.startswith(expected_id + "#")


def entry_found(entry: Expected, ids: Iterable[str]) -> bool:
    ids = list(ids)
    return any(matches(i, e) for e in entry for i in ids)


def load_questions(path: Path = QUESTIONS, only: Sequence[str] | None = None) -> list[Question]:
    data = json.loads(path.read_text(encoding="utf-8"))
    questions = [
        Question(
            q["id"],
            q["question"],
            q.get("kind", "single"),
            tuple((e,) if isinstance(e, str) else tuple(e) for e in q["expected"]),
        )
        for q in data["questions"]
    ]
    if only:
        wanted = set(only)
        unknown = wanted - {q.id for q in questions}
        if unknown:
            raise SystemExit(f"unknown question ids: {', '.join(sorted(unknown))}")
        questions = [q for q in questions if q.id in wanted]
    return questions


def offline_tree(path: Path = RESEARCH_TREE) -> Agent:
    """The research tree with every agent on the offline model."""
    return load_agent(str(path)).map_tree(lambda a: a.replace(model="offline"))


# -- reading a result tree ----------------------------------------------------------------------


def _calls_and_results(
    result: RunResult, name: str
) -> list[tuple[dict[str, Any], ToolResultBlock]]:
    """(input, result) of every call of tool ``name`` in one agent's transcript."""
    calls = {
        c.id: dict(c.input)
        for m in result.messages
        if m.role == "assistant"
        for c in m.tool_uses
        if c.name == name
    }
    out = []
    for m in result.messages:
        if m.role != "user":
            continue
        for b in m.content:
            if isinstance(b, ToolResultBlock) and b.tool_use_id in calls:
                out.append((calls[b.tool_use_id], b))
    return out


def retrieved_top_k(result: RunResult, k: int = TOP_K) -> tuple[list[str], int]:
    """Distinct ids among the first ``k`` hits of every search in the tree, and the searches."""
    ids: dict[str, None] = {}
    searches = 0
    for agent in result.walk():
        for _, r in _calls_and_results(agent, "search"):
            searches += 1
            if not r.is_error:
                ids.update(dict.fromkeys(_HIT_LINE.findall(r.content)[:k]))
    return list(ids), searches


def read_ids(result: RunResult) -> list[str]:
    """Ids read successfully anywhere in the tree."""
    ids: dict[str, None] = {}
    for agent in result.walk():
        for args, r in _calls_and_results(agent, "read"):
            if not r.is_error:
                ids[str(args.get("doc_id", "")).strip()] = None
    return list(ids)


def citations_of(answer: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(id, passage) for each citation in the body, and ids that appear only on Sources lines."""
    cited: list[tuple[str, str]] = []
    listed: list[str] = []
    for line in answer.splitlines():
        if re.match(r"^\s*(?:\*\*)?sources?(?:\*\*)?\s*:", line, re.IGNORECASE):
            listed += _CITATION.findall(line)
            continue
        start, previous = 0, ""
        for m in _CITATION.finditer(line):
            passage = _BULLET.sub("", line[start : m.start()]).strip(" \t\"'“”,;")
            if not passage:  # "[a] [b]": both cite the passage before the first
                passage = previous
            cited.append((m.group(1), passage))
            previous, start = passage, m.end()
    body_ids = {i for i, _ in cited}
    return cited, [i for i in dict.fromkeys(listed) if i not in body_ids]


def normalize(text: str) -> str:
    return " ".join(text.split())


def passage_in(passage: str, text: str) -> bool:
    """Whether ``passage`` (``...`` marking elisions) appears in ``text``, whitespace-normalized."""
    fragments = [normalize(f) for f in _ELLIPSIS.split(passage)]
    fragments = [f for f in fragments if f]
    if sum(len(f) for f in fragments) < MIN_PASSAGE_CHARS:
        return False
    haystack, at = normalize(text), 0
    for fragment in fragments:
        at = haystack.find(fragment, at)
        if at < 0:
            return False
        at += len(fragment)
    return True


# -- evaluating ---------------------------------------------------------------------------------


def score(question: Question, result: RunResult, corpus: Corpus) -> QuestionResult:
    missing: list[str] = []
    expected: list[Expected] = []
    for entry in question.expected:
        present = []
        for doc_id in entry:
            try:
                corpus.read(doc_id, max_chars=1)
                present.append(doc_id)
            except CorpusError:
                missing.append(doc_id)
        if present:
            expected.append(tuple(present))
    retrieved, searches = retrieved_top_k(result)
    read = read_ids(result)
    found = [e for e in expected if entry_found(e, retrieved)]
    recall = len(found) / len(expected) if expected else 0.0
    read_recall = sum(entry_found(e, read) for e in expected) / len(expected) if expected else 0.0

    texts: dict[str, str | None] = {}

    def text_of(doc_id: str) -> str | None:
        if doc_id not in texts:
            try:
                texts[doc_id] = corpus.read(doc_id).text
            except CorpusError:
                texts[doc_id] = None
        return texts[doc_id]

    answer = result.output or ""
    body, listed_only = citations_of(answer)
    citations = []
    for doc_id, passage in body:
        text = text_of(doc_id)
        citations.append(
            Citation(
                doc_id, passage, doc_id in read, text is not None and passage_in(passage, text)
            )
        )
    citations += [Citation(doc_id, "", doc_id in read, False) for doc_id in listed_only]
    supported = sum(c.supported for c in citations)
    precision = supported / len(citations) if citations else 0.0
    cited = list(dict.fromkeys(c.id for c in citations))
    on_topic = (
        sum(any(entry_found(e, [c]) for e in expected) for c in cited) / len(cited)
        if cited
        else 0.0
    )
    return QuestionResult(
        id=question.id,
        question=question.question,
        kind=question.kind,
        status=str(result.status.value),
        expected=[list(e) for e in expected],
        retrieved=retrieved,
        read=read,
        found=[list(e) for e in found],
        recall_at_5=recall,
        read_recall=read_recall,
        citations=[{**asdict(c), "supported": c.supported} for c in citations],
        citation_precision=precision,
        cited=cited,
        on_topic_precision=on_topic,
        searches=searches,
        answer=answer,
        missing_ids=missing,
    )


def evaluate(questions: Sequence[Question], agent: Agent | None = None) -> list[QuestionResult]:
    """Run the tree on every question (one after another) and score each result."""
    if os.environ.get(CORPUS_ENV):
        raise SystemExit(
            f"{CORPUS_ENV} is set: the questions are about the default corpus; unset it first"
        )
    tree = agent if agent is not None else offline_tree()
    with Corpus.open() as corpus:

        async def main() -> list[QuestionResult]:
            out = []
            for q in questions:
                result = await run(tree, q.question)
                out.append(score(q, result, corpus))
            return out

        return trio.run(main)


def averages(results: Sequence[QuestionResult]) -> dict[str, float]:
    n = len(results) or 1

    def mean(name: str, rows: Sequence[QuestionResult] = results) -> float:
        return round(sum(getattr(r, name) for r in rows) / (len(rows) or 1), 4)

    singles = [r for r in results if r.kind == "single"]
    compounds = [r for r in results if r.kind == "compound"]
    return {
        "questions": len(results),
        "recall_at_5": mean("recall_at_5"),
        "read_recall": mean("read_recall"),
        "citation_precision": mean("citation_precision"),
        "on_topic_precision": mean("on_topic_precision"),
        "recall_at_5_single": mean("recall_at_5", singles),
        "recall_at_5_compound": mean("recall_at_5", compounds),
        "completed": round(sum(r.status == "completed" for r in results) / n, 4),
    }


def best(results: Sequence[QuestionResult], n: int = 5) -> list[QuestionResult]:
    """The ``n`` best answers: by recall@5, then citation precision, then on-topic precision."""
    ranked = sorted(
        enumerate(results),
        key=lambda ir: (
            -ir[1].recall_at_5,
            -ir[1].citation_precision,
            -ir[1].on_topic_precision,
            ir[0],
        ),
    )
    return [r for _, r in ranked[:n]]


def markdown_best(results: Sequence[QuestionResult], n: int = 5) -> str:
    parts = []
    for r in best(results, n):
        parts.append(
            f"**{r.question}** (recall@5 {r.recall_at_5:.2f}, citation precision "
            f"{r.citation_precision:.2f}, on-topic {r.on_topic_precision:.2f})\n\n"
            f"```text\n{r.answer.strip()}\n```"
        )
    return "\n\n".join(parts)


def table(results: Sequence[QuestionResult]) -> str:
    head = f"{'question':<30} {'kind':<8} {'R@5':>5} {'readR':>5} {'cites':>5} {'CitP':>5} {'OnTop':>5}  missed"
    lines = [head, "-" * len(head)]
    for r in results:
        missed = [e[0] for e in r.expected if e not in r.found]
        lines.append(
            f"{r.id:<30} {r.kind:<8} {r.recall_at_5:>5.2f} {r.read_recall:>5.2f} "
            f"{len(r.citations):>5} {r.citation_precision:>5.2f} {r.on_topic_precision:>5.2f}  "
            + (", ".join(missed) or "-")
        )
    avg = averages(results)
    lines.append("-" * len(head))
    lines.append(
        f"{'average (' + str(avg['questions']) + ' questions)':<39} {avg['recall_at_5']:>5.2f} "
        f"{avg['read_recall']:>5.2f} {'':>5} {avg['citation_precision']:>5.2f} "
        f"{avg['on_topic_precision']:>5.2f}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", help="comma-separated question ids")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    args = parser.parse_args(argv)
    questions = load_questions(args.questions, args.only.split(",") if args.only else None)
    started = time.perf_counter()
    results = evaluate(questions)
    seconds = round(time.perf_counter() - started, 2)
    missing = sorted({i for r in results for i in r.missing_ids})
    if args.json:
        print(
            json.dumps(
                {
                    "python": ".".join(map(str, sys.version_info[:3])),
                    "model": "offline",
                    "top_k": TOP_K,
                    "seconds": seconds,
                    "averages": averages(results),
                    "missing_ids": missing,
                    "best": [r.id for r in best(results)],
                    "questions": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
        return 0
    print(table(results))
    avg = averages(results)
    print(
        f"\nrecall@{TOP_K} {avg['recall_at_5']:.3f} (single {avg['recall_at_5_single']:.3f}, "
        f"compound {avg['recall_at_5_compound']:.3f}) · read recall {avg['read_recall']:.3f} · "
        f"citation precision {avg['citation_precision']:.3f} · on-topic precision "
        f"{avg['on_topic_precision']:.3f} · {avg['questions']} questions in {seconds}s"
    )
    if missing:
        print(f"expected ids this Python's corpus lacks (left out): {', '.join(missing)}")
    print("\nFive best answers (README-ready):\n")
    print(markdown_best(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
