"""The offline model: research answers whose citations hold, predictable behaviour on any other
tree (schema-valid tool calls, spawning what it is offered, finishing), determinism, tokens
counted and zero cost."""

from __future__ import annotations

import datetime
import enum
import re
import uuid
from pathlib import Path
from typing import Annotated, Literal

import pydantic
import pytest
from quality.evaluate import citations_of, passage_in, read_ids

from orchestrator import Agent, Limits, RunStatus, Usage, run, tool
from orchestrator.core.messages import Message, TextBlock, ToolResultBlock
from orchestrator.models.base import AgentInfo, ModelRequest, ToolSpec
from orchestrator.research.arguments import example_arguments
from orchestrator.research.corpus import Corpus, SearchHit
from orchestrator.research.findings import Findings, cited_sources_were_read
from orchestrator.research.offline import OfflineModel
from orchestrator.research.passages import select_passages
from orchestrator.research.questions import keywords, search_query, split_question
from orchestrator.research.tools import corpus_tools, rerank

DOCS = {
    "generators.md": """# Generators

A generator function is a function whose body contains a yield statement. Calling it does not
run the body: it returns a generator iterator, and each call of next() runs the body up to the
next yield, which hands a value back to the caller.

## Sending values

The send() method resumes the generator and makes the pending yield expression return the value
sent. The close() method raises GeneratorExit inside the generator.
""",
    "context.md": """# Context managers

A context manager is an object that defines the methods __enter__ and __exit__. The with
statement calls __enter__ before its block runs and __exit__ after it, even when the block
raises an exception.

## Writing one with contextlib

The contextmanager decorator turns a generator function that yields once into a context manager.
""",
    "bread.md": """# Bread

Bread is baked from flour, water, salt and yeast. A long fermentation gives a better crumb.
""",
}


@pytest.fixture
def folder_corpus(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root, tmp_path / "index.sqlite"


def research_tree(root: Path, index: Path) -> Agent:
    """The shape of agents/research.py: researchers answer with checked findings."""
    researcher = Agent(
        "researcher",
        "Research one sub-question.",
        description="Researches one sub-question.",
        tools=corpus_tools(root, index_path=index),
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


# -- the research flow ---------------------------------------------------------------------------


async def test_research_answer_cites_read_documents_that_contain_the_passages(
    folder_corpus: tuple[Path, Path],
) -> None:
    root, index = folder_corpus
    result = await run(research_tree(root, index), "How do generators and context managers work?")
    assert result.status is RunStatus.COMPLETED
    assert [c.agent_name for c in result.children] == ["researcher", "researcher"]
    assert all(c.status is RunStatus.COMPLETED for c in result.children)
    tasks = [str(c.messages[0].text) for c in result.children]
    assert any("generators" in t and "context" not in t for t in tasks)
    assert any("context managers" in t and "generators" not in t for t in tasks)

    cited, listed_only = citations_of(result.output)
    assert cited and not listed_only
    read = read_ids(result)
    with Corpus.open(root, index_path=index) as corpus:
        for doc_id, passage in cited:
            assert doc_id in read, f"{doc_id} cited but never read"
            assert passage_in(passage, corpus.read(doc_id).text), (doc_id, passage)
    cited_docs = {doc_id.split("#")[0] for doc_id, _ in cited}
    assert cited_docs == {"generators.md", "context.md"}
    assert "bread" not in result.output.lower()


async def test_researcher_searches_with_content_words_and_reads_distinct_hits(
    folder_corpus: tuple[Path, Path],
) -> None:
    root, index = folder_corpus
    result = await run(research_tree(root, index), "How do generators work?")
    (researcher,) = result.children
    calls = [c for m in researcher.messages if m.role == "assistant" for c in m.tool_uses]
    searches = [c for c in calls if c.name == "search"]
    reads = [str(c.input["doc_id"]) for c in calls if c.name == "read"]
    assert [s.input["query"] for s in searches] == ["generators"]
    assert reads and len(reads) == len(set(reads))
    assert reads[0].startswith("generators.md")
    assert not any(r.startswith("bread.md") for r in reads)  # shares no word with the question


async def test_an_unanswerable_question_cites_nothing(folder_corpus: tuple[Path, Path]) -> None:
    root, index = folder_corpus
    result = await run(research_tree(root, index), "What is the airspeed of a swallow?")
    assert result.status is RunStatus.COMPLETED
    cited, listed_only = citations_of(result.output)
    assert not cited and not listed_only


async def test_a_researcher_whose_searches_fail_says_why_instead_of_finding_nothing(
    tmp_path: Path,
) -> None:
    result = await run(
        research_tree(tmp_path / "no-such-folder", tmp_path / "index.sqlite"),
        "How do generators work?",
    )
    (researcher,) = result.children
    assert researcher.output.claims == []
    assert researcher.output.summary.startswith("I could not search the documents:")
    assert "no-such-folder" in researcher.output.summary
    assert "I could not search the documents" in result.output


def test_select_passages_quotes_whole_sentences_verbatim() -> None:
    text = (
        "Thing ::= grammar | rule\n\n"
        "f(x, y=1)\nA frobnicator frobs widgets. It is fast. Widgets are small.\n\n"
        "Unrelated prose about bread and butter, which is not quoted at all."
    )
    passages = select_passages("What does a frobnicator do?", [("doc.md", text)])
    assert passages == [("doc.md", "A frobnicator frobs widgets. It is fast. Widgets are small.")]


def test_keywords_and_search_query_drop_question_words() -> None:
    assert keywords("How do I parse a JSON string in Python?") == ["parse", "json", "string"]
    assert keywords("What does the with statement do?") == ["with", "statement"]
    assert search_query("How do generators work?") == "generators"
    assert search_query("what is it?") == "what is it?"  # nothing left: the task itself


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (
            "How do generators and context managers work in Python?",
            ["How do generators work in Python", "How do context managers work in Python"],
        ),
        (
            "How do I make shallow and deep copies of objects?",
            ["How do I make shallow copies of objects", "How do deep copies of objects"],
        ),
        (
            "How are exceptions raised and handled?",
            ["How are exceptions raised", "How are exceptions handled"],
        ),
        ("Compare lists and tuples", ["lists", "tuples"]),
        (
            "What is a closure, and how does nonlocal work?",
            ["What is a closure", "how does nonlocal work"],
        ),
        ("How does the for statement work?", ["How does the for statement work"]),
        (
            "Explain decorators, generators, and context managers.",
            ["Explain decorators", "Explain generators", "Explain context managers"],
        ),
        (
            "How do lists, tuples and sets work?",
            ["How do lists work", "How do tuples work", "How do sets work"],
        ),
        (  # statements named by their keyword are names too (one researcher answered all)
            "How do the with statement, the for loop and the try statement work?",
            [
                "How do the with statement work",
                "How do the for loop work",
                "How do the try statement work",
            ],
        ),
        # comparisons, and lists that are not what the question is about, stay whole
        ("How do lists, tuples and sets differ?", ["How do lists, tuples and sets differ"]),
        (
            "What is the difference between lists, tuples, and sets?",
            ["What is the difference between lists, tuples, and sets"],
        ),
        (
            "Is it true that lists, dicts and sets are mutable?",
            ["Is it true that lists, dicts and sets are mutable"],
        ),
        (  # a question about the items together is not one question per item
            "Are the for loop, the while loop and recursion equivalent?",
            ["Are the for loop, the while loop and recursion equivalent"],
        ),
    ],
)
def test_split_question(question: str, parts: list[str]) -> None:
    assert split_question(question) == parts


def test_split_question_is_bounded_and_never_empty() -> None:
    assert split_question("") == ["the task"]
    many = "; ".join(f"What is topic{i}" for i in range(10))
    assert len(split_question(many)) == 4
    assert len(split_question(many, limit=None)) == 10


async def test_the_research_tree_says_which_parts_of_a_long_question_it_left_out(
    folder_corpus: tuple[Path, Path],
) -> None:
    question = (
        "How do lambda expressions, list comprehensions, generators, decorators, context "
        "managers and f-strings work?"
    )
    result = await run(research_tree(*folder_corpus), question)
    assert result.status is RunStatus.COMPLETED, result.error
    assert len(result.children) == 4
    assert "Not researched" in result.output
    assert "How do context managers work" in result.output
    assert "How do f-strings work" in result.output


async def test_a_lead_that_gave_each_child_the_whole_question_claims_nothing_left_out() -> None:
    question = (
        "How do lambda expressions, list comprehensions, generators, decorators, context "
        "managers and f-strings work?"
    )
    helpers = [Agent(name, "Help.", description="helps") for name in ("alpha", "beta")]
    lead = Agent("lead", "Lead.", model="offline", subagents=helpers, limits=Limits(max_depth=1))
    result = await run(lead, question)
    assert [c.messages[0].text for c in result.children] == [question, question]
    assert "Not researched" not in result.output


# -- any other tree ------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: int
    y: Annotated[float, pydantic.Field(gt=0, lt=1)]


@tool
def everything(
    name: Annotated[str, pydantic.Field(min_length=250, max_length=300)],
    code: Annotated[str, pydantic.Field(max_length=3)],
    count: Annotated[int, pydantic.Field(ge=5, le=9)],
    step: Annotated[int, pydantic.Field(gt=10, multiple_of=7)],
    ratio: Annotated[float, pydantic.Field(gt=0.5, lt=0.6)],
    below: Annotated[int, pydantic.Field(lt=-3)],
    flag: bool,
    mode: Literal["fast", "slow"],
    color: Color,
    point: Point,
    points: Annotated[list[Point], pydantic.Field(min_length=2)],
    when: datetime.datetime,
    day: datetime.date,
    ident: uuid.UUID,
    maybe: int | None,
    mapping: dict[str, int],
    pair: tuple[int, str],
    unique: Annotated[set[int], pydantic.Field(min_length=3)],
    optional: int = 3,
) -> str:
    """Take one of every kind of argument.

    Args:
        name: A long name.
    """
    return f"everything ok ({count}, {step})"


@tool
async def echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: What to echo.
    """
    return f"echo: {text}"


@tool
def no_arguments() -> str:
    """Return a constant."""
    return "constant"


def test_example_arguments_validate_against_their_schemas() -> None:
    for t in (everything, echo, no_arguments):
        spec = ToolSpec(t.name, t.description, t.input_schema)
        t.validate(example_arguments(spec, "the task"))  # raises if invalid


async def test_non_research_tree_calls_every_tool_with_valid_arguments_and_finishes() -> None:
    agent = Agent("worker", "Do the task.", model="offline", tools=[everything, echo, no_arguments])
    result = await run(agent, "Tidy the shed")
    assert result.status is RunStatus.COMPLETED
    results = [
        b
        for m in result.messages
        if m.role == "user"
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    calls = [c.name for m in result.messages if m.role == "assistant" for c in m.tool_uses]
    assert sorted(calls) == ["echo", "everything", "no_arguments"]
    assert [r.is_error for r in results] == [False, False, False], [r.content for r in results]
    assert "everything ok (5, 14)" in result.output
    assert "echo: Tidy the shed" in result.output
    assert result.turns == 2


async def test_a_tree_without_tools_finishes_at_once() -> None:
    result = await run(Agent("solo", "Say something.", model="offline"), "hello")
    assert result.status is RunStatus.COMPLETED
    assert "hello" in result.output
    assert result.turns == 1


async def test_spawns_each_offered_subagent_with_the_task() -> None:
    writer = Agent("writer", "Write.", description="Writes drafts.")
    checker = Agent("checker", "Check.", description="Checks drafts.", tools=[echo])
    lead = Agent("lead", "Coordinate.", model="offline", subagents=[writer, checker])
    result = await run(lead, "Draft a note about trio")
    assert result.status is RunStatus.COMPLETED
    assert [c.agent_name for c in result.children] == ["writer", "checker"]
    assert all(c.status is RunStatus.COMPLETED for c in result.children)
    assert all(c.messages[0].text == "Draft a note about trio" for c in result.children)
    assert "echo: Draft a note about trio" in result.children[1].output
    for child in result.children:  # the lead's answer is built from its children's
        assert child.output.splitlines()[0] in result.output


# -- determinism and cost ------------------------------------------------------------------------


async def test_same_input_same_output_and_transcripts(folder_corpus: tuple[Path, Path]) -> None:
    root, index = folder_corpus
    tree = research_tree(root, index)
    question = "How do generators and context managers work?"
    first, second = await run(tree, question), await run(tree, question)
    assert first.output == second.output
    assert [n.messages for n in first.walk()] == [n.messages for n in second.walk()]
    assert [n.path for n in first.walk()] == [n.path for n in second.walk()]


def test_decide_is_a_pure_function_of_the_request() -> None:
    spec = ToolSpec(echo.name, echo.description, echo.input_schema)
    request = ModelRequest(
        system="s",
        messages=[Message("user", (TextBlock("How do generators work?"),))],
        tools=[spec],
        max_tokens=100,
        agent=AgentInfo("a", "a", 0),
    )
    model = OfflineModel()
    assert model.decide(request) == model.decide(request) == OfflineModel().decide(request)


async def test_tokens_are_counted_as_a_model_would_bill_them_and_cost_nothing(
    folder_corpus: tuple[Path, Path],
) -> None:
    root, index = folder_corpus
    result = await run(research_tree(root, index), "How do generators work?")
    assert result.agents == 2
    for node in result.walk():  # every call counted: the request's estimate in, the reply out
        own = node.own_usage
        assert own.requests >= 1, node.path
        assert own.input_tokens >= 10 * own.requests and own.output_tokens >= own.requests
    assert result.usage.billed_tokens == sum(n.own_usage.billed_tokens for n in result.walk())
    assert result.usage.cost_usd == 0  # free all the same
    again = await run(research_tree(root, index), "How do generators work?")
    assert again.usage == result.usage  # as deterministic as the answers
    model = OfflineModel()
    assert model.provider == "offline" and model.name == "offline"
    assert model.cost(Usage(input_tokens=1000, output_tokens=1000)) == 0.0
    worker = await run(Agent("w", "x", model="offline", tools=[echo]), "hi")
    assert worker.usage.input_tokens > 0 and worker.usage.cost_usd == 0


# -- search re-ranking ---------------------------------------------------------------------------


def test_rerank_prefers_titles_holding_the_words_as_written() -> None:
    hits = [
        SearchHit("stdlib:codec#generic_thing", "codec.generic_thing", "generic codec", 12.0),
        SearchHit("stdlib:gen", "gen", "generate things", 11.0),
        SearchHit("topic:types#generator-functions", "Generator functions", "a generator", 8.0),
        SearchHit("stdlib:email.generator", "email.generator", "generator of mail", 7.0),
    ]
    ranked = [h.id for h in rerank("generators", hits, 3)]
    assert ranked == [
        "topic:types#generator-functions",
        "stdlib:email.generator",
        "stdlib:codec#generic_thing",
    ]
    assert [h.id for h in rerank("", hits, 2)] == ["stdlib:codec#generic_thing", "stdlib:gen"]


def test_rerank_keeps_at_most_two_places_per_document_while_others_are_left() -> None:
    hits = [SearchHit(f"stdlib:a#s{i}", f"a.s{i}", "x", 10.0 - i) for i in range(4)]
    hits.append(SearchHit("stdlib:b", "b", "x", 1.0))
    ranked = [h.id for h in rerank("x", hits, 4)]
    assert ranked == ["stdlib:a#s0", "stdlib:a#s1", "stdlib:b", "stdlib:a#s2"]


def test_a_search_that_finds_nothing_says_how_many_files_were_not_indexed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "plain.md").write_text("# Plain\n\nNothing special here.\n")
    (root / "C#-notes.md").write_text("# Notes\n\nThe zanzibar protocol.\n")  # '#': not indexed
    search, _ = corpus_tools(root, index_path=tmp_path / "index.sqlite")
    answer = search.fn(query="zanzibar")
    assert "No documents match" in answer and "1 file of the folder is not indexed" in answer


# -- found by a probe: file names, words of other scripts, long sections ---------------------------


async def test_files_named_with_spaces_or_brackets_are_read_and_cited(tmp_path: Path) -> None:
    # the hit parser stopped an id at a space or a "]": such files were found, never read
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "warranty notes (v2).txt").write_text(
        "Warranty\n\nThe warranty covers parts and labour for two years after purchase.\n"
    )
    (root / "notes[1].md").write_text(
        "# Feeding\n\nFeed your ferret twice a day with food made for ferrets.\n"
    )
    tree = research_tree(root, tmp_path / "index.sqlite")
    for question, doc_id in (
        ("What does the warranty cover?", "guide/warranty notes (v2).txt"),
        ("How often should I feed my ferret?", "notes[1].md"),
    ):
        result = await run(tree, question)
        assert result.status is RunStatus.COMPLETED
        assert doc_id in read_ids(result), (question, read_ids(result))
        sources = result.output.rpartition("Sources: ")[2]
        assert sources == f"[{doc_id}]", result.output  # the lead's Sources line names it


async def test_words_with_accents_are_searched_whole(tmp_path: Path) -> None:
    # "sécurité" was searched as "curit", "Größe" as "gr": nothing was found
    root = tmp_path / "docs"
    root.mkdir()
    (root / "securite.md").write_text(
        "# Sécurité\n\nLa sécurité du réseau repose sur un pare-feu bien configuré.\n"
    )
    assert search_query("Qu'est-ce que la sécurité ?").endswith("sécurité")
    result = await run(research_tree(root, tmp_path / "index.sqlite"), "sécurité du réseau")
    assert "securite.md" in read_ids(result), result.output


def test_a_long_section_is_read_to_its_end_in_pages(tmp_path: Path) -> None:
    # a section indexed in parts of up to 16,000 characters was read only to 6,000: the text
    # search showed could not be reached
    from orchestrator.research.tools import READ_CHARS

    root = tmp_path / "docs"
    root.mkdir()
    body = " ".join(f"Sentence number {i} about the descaler." for i in range(300))
    (root / "manual.md").write_text(f"# Maintenance\n\n{body} Replace the cartridge yearly.\n")
    _, read = corpus_tools(root, index_path=tmp_path / "index.sqlite")
    text, start = "", 0
    while True:
        page = read.fn("manual.md", start)
        _, _, rest = page.partition("\n\n")
        chunk, _, marker = rest.rpartition("\n\n[characters ")
        chunk = chunk if marker else rest
        assert len(chunk) <= READ_CHARS
        text += chunk
        found = re.search(r"start=(\d+)", marker)
        if found is None:
            break
        start = int(found.group(1))
    assert "Replace the cartridge yearly." in text and text.count("Sentence number") == 300


async def test_brackets_inside_a_quoted_passage_are_not_taken_for_sources(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "descaler.md").write_text(
        "# Descaler\n\nRinse the machine with the descaler [Note: see safety.md] before first use.\n"
    )
    result = await run(research_tree(root, tmp_path / "index.sqlite"), "How do I use the descaler?")
    assert result.output.rpartition("Sources: ")[2] == "[descaler.md]", result.output
