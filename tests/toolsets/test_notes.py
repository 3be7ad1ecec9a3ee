"""The ``notes`` toolset: external memory scoped per run and per agent path.

Runs go through the public API with FunctionModels that decide from the transcript they are sent
(the calls already made and their results), so compaction and clearing cannot confuse them. The
store's edges (path prefixes, search, ids, validation, files, threads) are tested by calling the
tools' functions with a ToolContext, as the runtime does.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from support.transcripts import check_transcript

from orchestrator import Agent, Limits, RunStatus, ToolContext, ToolError, run, tool
from orchestrator.core.compaction import ContextPolicy
from orchestrator.core.tools import Tool
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.toolsets.notes import MAX_LISTED, MAX_NOTE_CHARS, NoteStore, notes_tools

BIG = Limits(max_turns=100, repeat_limit=100, token_budget=10**9)
CODE_WORD = "HELIOTROPE"


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


def ctx(path: str, run_id: str = "run-1") -> ToolContext:
    return ToolContext(run_id, path.rsplit("/", 1)[-1].split("#")[0], path, path.count("/"))


# --------------------------------------------------------------------------------------------
# Reading the transcript


def calls_made(request: ModelRequest) -> list[Any]:
    return [b for m in request.messages if m.role == "assistant" for b in m.tool_uses]


def results_of(request: ModelRequest, name: str) -> list[Any]:
    """The tool_result blocks answering calls to ``name``, in transcript order."""
    ids = {c.id for c in calls_made(request) if c.name == name}
    return [
        b
        for m in request.messages
        if m.role == "user"
        for b in m.content
        if b.type == "tool_result" and b.tool_use_id in ids
    ]


def last_result(request: ModelRequest, name: str) -> Any | None:
    found = results_of(request, name)
    return found[-1] if found else None


def first_text(request: ModelRequest) -> str:
    return request.messages[0].text


def is_checkpoint(request: ModelRequest) -> bool:
    last = request.messages[-1]
    return any(b.type == "text" and "Context checkpoint" in b.text for b in last.content)


def called(request: ModelRequest, name: str) -> int:
    return sum(1 for c in calls_made(request) if c.name == name)


# --------------------------------------------------------------------------------------------
# The tools


def test_four_tools_with_context_injected_and_left_out_of_the_schema() -> None:
    tools = notes_tools()
    assert [t.name for t in tools] == ["write_note", "list_notes", "read_note", "search_notes"]
    for t in tools:
        assert t.takes_context
        assert "ctx" not in t.input_schema.get("properties", {})
        assert t.description
    schemas = {t.name: t.input_schema for t in tools}
    assert schemas["write_note"]["required"] == ["title", "text"]
    assert schemas["list_notes"]["properties"] == {}
    assert schemas["read_note"]["required"] == ["note_id"]
    assert schemas["search_notes"]["required"] == ["query"]


def test_write_returns_an_integer_id_and_read_returns_the_text() -> None:
    t = by_name(notes_tools())
    first = t["write_note"].fn(ctx("lead"), "Trio facts", "Nurseries keep tasks structured.")
    second = t["write_note"].fn(ctx("lead"), "More", "Cancel scopes nest.")
    assert (first, second) == ("1", "2")
    out = t["read_note"].fn(ctx("lead"), int(first))
    assert out == "note 1: Trio facts (by you)\n\nNurseries keep tasks structured."
    assert t["list_notes"].fn(ctx("lead")) == "1: Trio facts (32 chars)\n2: More (19 chars)"


@pytest.mark.parametrize("given", [2, "2", "note 2", "#2", " Note #2 "])
def test_ids_are_accepted_as_models_write_them(given: int | str) -> None:
    t = by_name(notes_tools())
    t["write_note"].fn(ctx("lead"), "a", "first")
    t["write_note"].fn(ctx("lead"), "b", "second")
    assert t["read_note"].fn(ctx("lead"), given).endswith("second")


@pytest.mark.parametrize("given", ["two", "2a", "", "note", "9" * 5000])
def test_a_malformed_id_is_a_clear_error(given: str) -> None:
    t = by_name(notes_tools())
    with pytest.raises(ToolError, match="is not a note id"):
        t["read_note"].fn(ctx("lead"), given)


@pytest.mark.parametrize("given", [7, -1, 2**63, "99999999999999999999999"])
def test_an_unknown_id_is_a_clear_error(given: int | str) -> None:
    t = by_name(notes_tools())
    with pytest.raises(ToolError, match=f"there is no note {given}; list_notes shows"):
        t["read_note"].fn(ctx("lead"), given)


@pytest.mark.parametrize(
    ("title", "body", "message"),
    [
        ("  ", "text", "non-empty title"),
        ("t" * 201, "text", "keep it under 200"),
        ("title", " \n", "needs some text"),
        ("title", "x" * (MAX_NOTE_CHARS + 1), "split it into several notes"),
        ("title", "half a pair: \ud800", "lone surrogate"),
        ("caf\udce9", "text", "lone surrogate"),
    ],
)
def test_write_validates_title_and_text(title: str, body: str, message: str) -> None:
    t = by_name(notes_tools())
    with pytest.raises(ToolError, match=message):
        t["write_note"].fn(ctx("lead"), title, body)
    assert t["list_notes"].fn(ctx("lead")) == "(no notes yet)"


# --------------------------------------------------------------------------------------------
# Scoping


def test_an_agent_sees_its_own_notes_and_its_descendants_only() -> None:
    t = by_name(notes_tools())
    ids = {
        path: t["write_note"].fn(ctx(path), f"from {path}", f"finding of {path}")
        for path in ["lead", "lead/r#1", "lead/r#1/sub#1", "lead/r#2", "lead/r#10"]
    }

    def visible(path: str) -> set[str]:
        listing = t["list_notes"].fn(ctx(path))
        return {line.split(":")[0] for line in listing.splitlines()} - {"(no notes yet)"}

    assert visible("lead") == set(ids.values())
    assert visible("lead/r#1") == {ids["lead/r#1"], ids["lead/r#1/sub#1"]}  # not r#10's
    assert visible("lead/r#1/sub#1") == {ids["lead/r#1/sub#1"]}  # not its parent's
    assert visible("lead/r#2") == {ids["lead/r#2"]}
    assert visible("lead/r#3") == set()
    for reader, owner in [
        ("lead/r#1", "lead/r#2"),
        ("lead/r#1", "lead/r#10"),
        ("lead/r#1/sub#1", "lead/r#1"),
        ("lead/r#2", "lead"),
    ]:
        with pytest.raises(ToolError, match=f"belongs to {re.escape(owner)}, which is not you"):
            t["read_note"].fn(ctx(reader), ids[owner])
    # a descendant's note says who wrote it
    assert (
        t["read_note"]
        .fn(ctx("lead"), ids["lead/r#1/sub#1"])
        .startswith(f"note {ids['lead/r#1/sub#1']}: from lead/r#1/sub#1 (by lead/r#1/sub#1)")
    )
    assert ", by lead/r#1/sub#1)" in t["list_notes"].fn(ctx("lead/r#1"))


def test_sql_wildcards_in_agent_names_do_not_widen_the_scope() -> None:
    t = by_name(notes_tools())
    t["write_note"].fn(ctx("leadX1/child#1"), "other tree", "not yours")
    t["write_note"].fn(ctx("lead%/child#1"), "other tree", "not yours either")
    assert t["list_notes"].fn(ctx("lead_1")) == "(no notes yet)"
    assert t["list_notes"].fn(ctx("lead")) == "(no notes yet)"
    assert t["search_notes"].fn(ctx("lead_1"), "yours") == "(no notes match 'yours')"


def test_notes_are_scoped_per_run() -> None:
    t = by_name(notes_tools())
    note = t["write_note"].fn(ctx("lead", "run-1"), "secret", "run one only")
    assert t["list_notes"].fn(ctx("lead", "run-2")) == "(no notes yet)"
    assert t["search_notes"].fn(ctx("lead", "run-2"), "secret") == "(no notes match 'secret')"
    with pytest.raises(ToolError, match=f"there is no note {note}"):  # not even its existence
        t["read_note"].fn(ctx("lead", "run-2"), note)


def test_two_toolsets_are_two_stores() -> None:
    a, b = by_name(notes_tools()), by_name(notes_tools())
    a["write_note"].fn(ctx("lead"), "x", "y")
    assert b["list_notes"].fn(ctx("lead")) == "(no notes yet)"


# --------------------------------------------------------------------------------------------
# Search


@pytest.mark.parametrize("use_fts", [True, False], ids=["fts5", "like"])
def test_search_matches_any_word_and_ranks_more_matches_first(use_fts: bool) -> None:
    store = NoteStore(use_fts=use_fts)
    assert store.fts is use_fts
    store.write("r", "lead", "Trio nurseries", "Nurseries own their child tasks.")
    store.write("r", "lead", "Cancel scopes", "Trio cancel scopes nest; deadlines propagate.")
    store.write("r", "lead", "asyncio", "TaskGroup arrived in Python 3.11.")
    store.write("r", "lead/r#1", "Trio and cancel", "A trio cancel scope can shield.")
    store.write("r", "other", "Trio cancel", "not visible to lead")
    hits = store.search("r", "lead", "trio cancel")
    assert [n.id for n in hits][:2] in ([2, 4], [4, 2])  # both words first
    assert {n.id for n in hits} == {1, 2, 4}
    assert store.search("r", "lead", "TASKGROUP")[0].id == 3  # case-insensitive
    assert store.search("r", "lead", "   ") == []
    # the model's query is data: FTS5 syntax and LIKE wildcards are matched literally or ignored
    for query in ['"trio', "trio AND (", "NEAR(trio cancel)", "tri*", "col:trio", "%", "_", "'"]:
        store.search("r", "lead", query)
    assert store.search("r", "lead", "100%") == []


def test_fts_search_stems_words() -> None:
    store = NoteStore()
    if not store.fts:
        pytest.skip("this SQLite has no FTS5")
    store.write("r", "lead", "Nurseries", "Nurseries keep tasks structured.")
    assert [n.id for n in store.search("r", "lead", "nursery")] == [1]


def test_like_search_escapes_wildcards() -> None:
    store = NoteStore(use_fts=False)
    store.write("r", "lead", "odds", "a 100% sure thing")
    store.write("r", "lead", "evens", "a 1000 sure thing")
    store.write("r", "lead", "snake", "snake_case names")
    store.write("r", "lead", "camel", "snakeXcase names")
    assert [n.id for n in store.search("r", "lead", "100%")] == [1, 2]  # the word "100" matches
    # words are letters and digits (as the FTS index reads them): "_" separates, never a wildcard
    assert [n.id for n in store.search("r", "lead", "snake_case")] == [3, 4]
    assert store.search("r", "lead", "_") == []


def test_search_tool_lists_id_title_owner_and_an_excerpt() -> None:
    t = by_name(notes_tools())
    t["write_note"].fn(
        ctx("lead/r#1"), "Deadlines", "filler " * 30 + "move_on_after sets a deadline"
    )
    t["write_note"].fn(ctx("lead"), "Mine", "deadline of the lead")
    out = t["search_notes"].fn(ctx("lead"), "deadline")
    lines = out.splitlines()
    assert len(lines) == 2
    line = next(x for x in lines if x.startswith("1: "))
    assert line.startswith("1: Deadlines (by lead/r#1) - ...")
    assert "move_on_after sets a deadline" in line
    assert next(x for x in lines if x.startswith("2: ")) == "2: Mine - deadline of the lead"
    with pytest.raises(ToolError, match="at least one word"):
        t["search_notes"].fn(ctx("lead"), "?!")


def test_list_shows_the_newest_when_there_are_many() -> None:
    t = by_name(notes_tools())
    for i in range(MAX_LISTED + 5):
        t["write_note"].fn(ctx("lead"), f"n{i}", "x")
    lines = t["list_notes"].fn(ctx("lead")).splitlines()
    assert lines[0] == f"(showing the newest {MAX_LISTED} of {MAX_LISTED + 5}; use search_notes)"
    assert lines[1].startswith("6: n5 ") and lines[-1].startswith(f"{MAX_LISTED + 5}: ")


# --------------------------------------------------------------------------------------------
# Files and threads


def test_a_file_keeps_notes_across_toolsets(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    by_name(notes_tools(path))["write_note"].fn(ctx("lead"), "kept", "on disk")
    assert path.exists()
    again = by_name(notes_tools(str(path)))
    assert again["read_note"].fn(ctx("lead"), 1).endswith("on disk")
    assert again["search_notes"].fn(ctx("lead"), "disk").startswith("1: kept")


def test_a_file_written_without_fts_is_indexed_when_reopened_with_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    plain = NoteStore(path, use_fts=False)
    plain.write("r", "lead", "old", "written before the index")
    plain.close()
    store = NoteStore(path)
    if not store.fts:
        pytest.skip("this SQLite has no FTS5")
    assert [n.id for n in store.search("r", "lead", "index")] == [1]
    store.write("r", "lead", "new", "written after the index")
    assert [n.id for n in store.search("r", "lead", "index")] == [1, 2]


def test_without_fts5_a_leftover_trigger_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "notes.db"
    NoteStore(path).close()  # with FTS5 (when available): leaves the insert trigger
    monkeypatch.setattr(
        "orchestrator.toolsets.notes._FTS_SCHEMA", "CREATE VIRTUAL TABLE x USING nope(a);"
    )
    store = NoteStore(path)  # as on an SQLite build without FTS5
    assert not store.fts
    assert store.write("r", "lead", "t", "inserts still work") >= 1
    assert [n.title for n in store.search("r", "lead", "inserts")] == ["t"]
    with pytest.raises(sqlite3.OperationalError):
        NoteStore(path, use_fts=True)


def test_the_in_memory_store_is_safe_from_many_threads() -> None:
    t = by_name(notes_tools())
    ids: list[str] = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        for i in range(50):
            note = t["write_note"].fn(ctx(f"lead/w#{k}"), f"w{k} n{i}", f"finding {k}.{i}")
            t["read_note"].fn(ctx(f"lead/w#{k}"), note)
            with lock:
                ids.append(note)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(ids)) == 400
    assert len(t["list_notes"].fn(ctx("lead")).splitlines()) == MAX_LISTED + 1
    assert len(t["list_notes"].fn(ctx("lead/w#3")).splitlines()) == 50


# --------------------------------------------------------------------------------------------
# Through runs


@tool
async def read(doc: int) -> str:
    """Read one document.

    Args:
        doc: the document's number
    """
    head = f"doc {doc}: " + (f"the code word is {CODE_WORD}. " if doc == 1 else "")
    return head + "filler " * 200


async def test_notes_survive_across_turns_clearing_and_compaction() -> None:
    """The code word is read once, parked in a note, and found again after the transcript that
    held it was cleared and compacted away. The checkpoint summary does not name the word."""
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Any:
        requests.append(request)
        wrote = called(request, "write_note") > 0 or "note written: yes" in first_text(request)
        docs = max(
            [int(c.input["doc"]) for c in calls_made(request) if c.name == "read"]
            + [int(x) for x in re.findall(r"docs read: (\d+)", first_text(request))]
            + [0]
        )
        if is_checkpoint(request):
            return text(
                f"Goal: find the code word. Evidence: docs read: {docs}; "
                f"note written: {'yes' if wrote else 'no'}. Work left: read the note."
            )
        read_back = last_result(request, "read_note")
        if read_back is not None:
            return text(f"From my notes: {read_back.content.splitlines()[-1]}")
        listing = last_result(request, "list_notes")
        if listing is not None:
            return tool_call("read_note", {"note_id": listing.content.split(":")[0]})
        if not wrote:
            for r in results_of(request, "read"):
                found = re.search(r"the code word is \w+", r.content)
                if found:
                    return tool_call(
                        "write_note", {"title": "code word", "text": f"doc 1: {found.group()}"}
                    )
        if docs < 12:
            return tool_call("read", {"doc": docs + 1})
        return tool_call("list_notes", {})

    agent = Agent("reader", "You read.", model=FunctionModel(respond), tools=[read, *notes_tools()])
    policy = ContextPolicy(clear_results_after=2, clear_batch=1, compact_at_tokens=1_500)
    result = await run(agent, "Find the code word.", limits=BIG, context=policy)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == f"From my notes: doc 1: the code word is {CODE_WORD}"
    checkpoints = [r for r in requests if is_checkpoint(r)]
    assert checkpoints, "the run was compacted"
    write_turn = next(i for i, r in enumerate(requests) if called(r, "write_note"))
    assert any(is_checkpoint(r) for r in requests[write_turn:])  # compacted after the write
    # in the request that asked for the note, the word was nowhere: cleared, then compacted
    asked = next(r for r in requests if calls_made(r) and calls_made(r)[-1].name == "list_notes")
    assert CODE_WORD not in " ".join(
        b.content if b.type == "tool_result" else getattr(b, "text", "")
        for m in asked.messages
        for b in m.content
    )
    assert any(t.cleared_results for t in result.turn_log)
    assert any(t.compacted for t in result.turn_log)
    check_transcript(result.messages)


def lead_and_researchers(respond_lead: Any, respond_researcher: Any, notes: list[Tool]) -> Agent:
    def respond(request: ModelRequest) -> Any:
        if request.agent.name == "lead":
            return respond_lead(request)
        return respond_researcher(request)

    researcher = Agent("researcher", "You research.", description="Researches one topic.")
    return Agent(
        "lead", "You lead.", model=FunctionModel(respond), tools=notes, subagents=[researcher]
    )


async def test_a_parent_reads_a_childs_note_by_id() -> None:
    finding = "Trio's nurseries guarantee no task outlives its parent. " * 20

    def researcher(request: ModelRequest) -> Any:
        saved = last_result(request, "write_note")
        if saved is not None:
            return text(f"Done: see note {saved.content}")
        return tool_call("write_note", {"title": "nurseries", "text": finding})

    def lead(request: ModelRequest) -> Any:
        note = last_result(request, "read_note")
        if note is not None:
            return text(note.content)
        answer = last_result(request, "spawn_subagent")
        if answer is not None:
            note_id = re.search(r"see note (\d+)", answer.content)
            assert note_id, answer.content
            return tool_call("read_note", {"note_id": int(note_id.group(1))})
        return tool_call("spawn_subagent", {"agent": "researcher", "task": "nurseries"})

    result = await run(lead_and_researchers(lead, researcher, notes_tools()), "go", limits=BIG)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == f"note 1: nurseries (by lead/researcher#1)\n\n{finding}"
    [spawn_result] = [b for b in result.messages[2].content if b.type == "tool_result"]
    assert spawn_result.content == "Done: see note 1"  # the finding itself was not pasted
    [child] = result.children
    assert child.path == "lead/researcher#1" and child.status is RunStatus.COMPLETED


async def test_notes_are_isolated_between_sibling_agents() -> None:
    """researcher#1 writes a note and reports its id; researcher#2, told that id, is refused;
    each lists and searches only its own notes; the parent reads both."""
    requests: list[ModelRequest] = []

    def researcher(request: ModelRequest) -> Any:
        requests.append(request)
        task = first_text(request)
        mine = f"finding of {request.agent.path}"
        if not called(request, "write_note"):
            return tool_call("write_note", {"title": task, "text": mine})
        other = re.search(r"note (\d+)", task)
        if other and not called(request, "read_note"):
            return tool_call("read_note", {"note_id": other.group(1)})
        if not called(request, "list_notes"):
            return tool_call("list_notes", {})
        if not called(request, "search_notes"):
            return tool_call("search_notes", {"query": "finding researcher"})
        saved = results_of(request, "write_note")[0].content
        return text(f"see note {saved}")

    def lead(request: ModelRequest) -> Any:
        answers = results_of(request, "spawn_subagent")
        if not answers:
            return tool_call("spawn_subagent", {"agent": "researcher", "task": "topic one"})
        if len(answers) == 1:
            first = re.search(r"see note (\d+)", answers[0].content)
            assert first, answers[0].content
            task = f"topic two; also look at note {first.group(1)}"
            return tool_call("spawn_subagent", {"agent": "researcher", "task": task})
        if not called(request, "list_notes"):
            return tool_call("list_notes", {})
        return text(last_result(request, "list_notes").content)

    result = await run(lead_and_researchers(lead, researcher, notes_tools()), "go", limits=BIG)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == (
        "1: topic one (28 chars, by lead/researcher#1)\n"
        "2: topic two; also look at note 1 (28 chars, by lead/researcher#2)"
    )
    second = next(c for c in result.children if c.path == "lead/researcher#2")
    outcome = {}
    for m in second.messages:
        for b in m.content:
            if b.type == "tool_result":
                outcome[b.tool_use_id] = b
    calls = [c for m in second.messages if m.role == "assistant" for c in m.tool_uses]
    by_tool = {c.name: outcome[c.id] for c in calls}
    refused = by_tool["read_note"]
    assert refused.is_error
    assert refused.content == (
        "note 1 belongs to lead/researcher#1, which is not you (lead/researcher#2) or one of "
        "your subagents; an agent can read only its own notes and those of its subagents"
    )
    assert by_tool["list_notes"].content == "2: topic two; also look at note 1 (28 chars)"
    assert by_tool["search_notes"].content.startswith("2: topic two")
    assert "\n" not in by_tool["search_notes"].content  # researcher#1's note is not found
    assert "lead/researcher#1" not in by_tool["search_notes"].content


async def test_concurrent_siblings_see_only_their_own_notes() -> None:
    def researcher(request: ModelRequest) -> Any:
        if not called(request, "write_note"):
            return tool_call("write_note", {"title": first_text(request), "text": "x"})
        if not called(request, "list_notes"):
            return tool_call("list_notes", {})
        return text(last_result(request, "list_notes").content)

    def lead(request: ModelRequest) -> Any:
        answers = results_of(request, "spawn_subagent")
        if answers:
            return text("\n".join(a.content for a in answers))
        return [
            tool_call("spawn_subagent", {"agent": "researcher", "task": f"topic {i}"})
            for i in range(4)
        ]

    result = await run(lead_and_researchers(lead, researcher, notes_tools()), "go", limits=BIG)
    assert result.status is RunStatus.COMPLETED, result.error
    lines = result.output.splitlines()
    assert len(lines) == 4
    assert sorted(line.split(": ", 1)[1] for line in lines) == [
        f"topic {i} (1 chars)" for i in range(4)
    ]  # each saw exactly one note, its own
    assert len({line.split(":")[0] for line in lines}) == 4


async def test_a_child_cannot_read_its_parents_notes() -> None:
    def researcher(request: ModelRequest) -> Any:
        answer = last_result(request, "read_note")
        if answer is not None:
            return text(answer.content)
        return tool_call("read_note", {"note_id": 1})

    def lead(request: ModelRequest) -> Any:
        answer = last_result(request, "spawn_subagent")
        if answer is not None:
            return text(answer.content)
        if not called(request, "write_note"):
            return tool_call("write_note", {"title": "plan", "text": "the lead's plan"})
        return tool_call("spawn_subagent", {"agent": "researcher", "task": "read note 1"})

    result = await run(lead_and_researchers(lead, researcher, notes_tools()), "go", limits=BIG)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output.startswith("note 1 belongs to lead, which is not you (lead/researcher#1)")


async def test_runs_sharing_a_toolset_do_not_see_each_others_notes(tmp_path: Path) -> None:
    notes = notes_tools(tmp_path / "shared.db")

    def respond(request: ModelRequest) -> Any:
        listing = last_result(request, "list_notes")
        if listing is not None:
            return text(listing.content)
        if not called(request, "write_note"):
            return tool_call("write_note", {"title": first_text(request), "text": "x"})
        return tool_call("list_notes", {})

    agent = Agent("lead", "x", model=FunctionModel(respond), tools=notes)
    first = await run(agent, "run one", run_id="one")
    second = await run(agent, "run two", run_id="two")
    assert (first.output, second.output) == ("1: run one (1 chars)", "2: run two (1 chars)")


# --------------------------------------------------------------------------------------------
# Found by a probe: long notes, the LIKE fallback, snippets, database files


def read_in_pages(read_note: Tool, note_id: int, length: int) -> str:
    """A note's whole text, page after page as the headers say, each at most ``length``."""
    text, start = "", 0
    while True:
        page = read_note.fn(ctx("lead"), note_id, start, length)
        header, _, chunk = page.partition("\n\n")
        assert len(chunk) <= length, header
        text += chunk
        found = re.search(r"start=(\d+)", header)
        if found is None:
            return text
        start = int(found.group(1))


def test_a_note_longer_than_a_page_is_read_in_pages_to_its_end() -> None:
    # a 189,000-character note came back cut by the runtime's 100,000-character result cap,
    # whose marker asked for "a narrower range" that read_note had no way to give
    from orchestrator.toolsets.notes import READ_PAGE_CHARS

    t = by_name(notes_tools())
    body = "".join(f"line {i:06d}\n" for i in range(17_000))[:MAX_NOTE_CHARS]
    t["write_note"].fn(ctx("lead"), "Big", body)
    assert read_in_pages(t["read_note"], 1, READ_PAGE_CHARS) == body
    with pytest.raises(ToolError, match="start must be"):
        t["read_note"].fn(ctx("lead"), 1, len(body))


def test_the_like_fallback_folds_case_beyond_ascii_and_takes_long_queries() -> None:
    store = NoteStore(use_fts=False)
    store.write("r", "lead", "Preise", "Über Ärger und Ölpreise")
    for query in ("Ärger", "ärger", "ÜBER", "ölpreise"):
        assert [n.id for n in store.search("r", "lead", query)] == [1], query
    long_query = " ".join(f"w{i}" for i in range(2_000)) + " ärger"  # 997 words crashed
    assert [n.id for n in store.search("r", "lead", long_query)] == []  # the first 64 words
    assert [n.id for n in store.search("r", "lead", "ärger " + long_query)] == [1]


def test_a_search_excerpt_shows_the_match_even_after_characters_lower_lengthens() -> None:
    t = by_name(notes_tools())
    t["write_note"].fn(ctx("lead"), "Odd", "İ" * 300 + " the needle is here")
    t["write_note"].fn(ctx("lead"), "Stem", "x " * 200 + "nurseries keep tasks")
    hits = t["search_notes"].fn(ctx("lead"), "needle").splitlines()
    assert "needle" in hits[0]
    assert "nurseries" in t["search_notes"].fn(ctx("lead"), "nursery")


def test_a_notes_path_in_a_new_folder_is_created_and_a_foreign_database_refused(
    tmp_path: Path,
) -> None:
    from orchestrator import ConfigurationError

    store = NoteStore(tmp_path / "deep" / "er" / "notes.sqlite")  # the folder did not exist
    store.write("r", "lead", "t", "x")
    store.close()
    again = NoteStore(tmp_path / "deep" / "er" / "notes.sqlite")  # ours: opened as it is
    assert again.get(1) is not None
    again.close()
    foreign = tmp_path / "app.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(ConfigurationError, match="another program's SQLite file"):
        NoteStore(foreign)
    with sqlite3.connect(foreign) as conn:  # left alone: no notes tables added
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert names == {"users"}


def test_the_index_finds_words_whose_casefold_differs_from_their_lowercase() -> None:
    # the FTS index lowercases; casefolded query words ("strasse") missed "Straße"
    store = NoteStore()
    store.write("r", "lead", "Adresse", "Die Straße ist lang")
    for query in ("Straße", "straße"):
        assert [n.id for n in store.search("r", "lead", query)] == [1], query


def test_a_page_smaller_than_the_default_reads_a_note_to_its_end() -> None:
    # with a result cap under one page, the runtime cut the page and the header's next start
    # skipped what was cut: a smaller page is asked for with `length`
    t = by_name(notes_tools())
    body = "".join(f"line {i:06d}\n" for i in range(6_000))  # 72,000 characters
    t["write_note"].fn(ctx("lead"), "Big", body)
    assert read_in_pages(t["read_note"], 1, 20_000) == body


def test_another_programs_application_id_is_refused_not_overwritten(tmp_path: Path) -> None:
    from orchestrator import ConfigurationError

    marked = tmp_path / "marked.sqlite"
    with sqlite3.connect(marked) as conn:
        conn.execute("PRAGMA application_id = 1234")
    with pytest.raises(ConfigurationError, match="another program's"):
        NoteStore(marked)
    with sqlite3.connect(marked) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 1234
    shared = tmp_path / "app.sqlite"  # an application's file that holds a notes table too
    with sqlite3.connect(shared) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    NoteStore(tmp_path / "mine.sqlite").close()
    with sqlite3.connect(tmp_path / "mine.sqlite") as mine, sqlite3.connect(shared) as app:
        (schema,) = mine.execute("SELECT sql FROM sqlite_master WHERE name = 'notes'").fetchone()
        app.execute(schema)
    NoteStore(shared).close()  # a notes file from before files were marked: opened as it is
    with sqlite3.connect(shared) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 0
