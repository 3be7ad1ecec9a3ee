"""Durable runs in one process: a journal file, and resume() over it after the run stopped.

The crash tests (a real SIGKILL of the command line) are in tests/cli/test_resume_crash.py.
"""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    RunStatus,
    open_run,
    resume,
    resume_sync,
    run,
    run_sync,
    tool,
)
from orchestrator.core.events import AgentFinished
from orchestrator.core.journal_sqlite import SQLiteJournal, read_header
from orchestrator.core.messages import transcript_problem
from orchestrator.models import FunctionModel, response, text, tool_call

SIDE_EFFECTS: list[str] = []
GATE: dict[str, trio.Event] = {}


@tool
async def send_email(to: str) -> str:
    """Send an email (not idempotent: it must never be sent twice)."""
    SIDE_EFFECTS.append(f"email {to}")
    gate = GATE.get(to)
    if gate is not None:
        await gate.wait()
    return f"sent to {to}"


@tool(idempotent=True)
async def fetch(url: str) -> str:
    """Fetch a page (idempotent: safe to run again)."""
    SIDE_EFFECTS.append(f"fetch {url}")
    gate = GATE.get(url)
    if gate is not None:
        await gate.wait()
    return f"page {url}"


WORKER = Agent("worker", "Fetch, then answer.", description="fetches", tools=[fetch])
LEAD = Agent("lead", "Delegate, email, answer.", subagents=[WORKER], tools=[send_email])
ASKED: list[tuple[str, int]] = []


def answer(request):
    """Deterministic replies keyed by agent and turn; every request is counted."""
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    ASKED.append((request.agent.path, turn))
    if request.agent.name == "lead":
        if turn == 1:
            return response(
                tool_call("spawn_subagent", {"agent": "worker", "task": "a"}, id="s1"),
                tool_call("spawn_subagent", {"agent": "worker", "task": "b"}, id="s2"),
                usage={"input_tokens": 100, "output_tokens": 10},
            )
        if turn == 2:
            return response(tool_call("send_email", {"to": "boss"}, id="e1"))
        return text("all done: " + request.messages[-1].content[0].content)
    task = request.messages[0].content[0].text
    if turn == 1:
        return response(tool_call("fetch", {"url": task}, id=f"f-{task}"))
    return text(f"worker {task}: " + request.messages[-1].content[0].content)


MODEL = FunctionModel(answer)


@pytest.fixture(autouse=True)
def _clean():
    SIDE_EFFECTS.clear()
    ASKED.clear()
    GATE.clear()


def all_transcripts_valid(result):
    problems = [transcript_problem(result.messages)]
    for child in result.children:
        problems.append(transcript_problem(child.messages))
    return all(p is None for p in problems)


async def test_a_journaled_run_writes_a_private_file_with_a_header(tmp_path):
    path = tmp_path / "run.db"
    result = await run(LEAD, "go", model=MODEL, journal=path, run_id="r1")
    assert result.status is RunStatus.COMPLETED
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    header = read_header(path)
    assert (header.run_id, header.prompt, header.status) == ("r1", "go", "completed")
    assert header.tree_ref == "tests.core.test_resume:LEAD" or header.tree_ref.endswith(":LEAD")


async def test_a_completed_run_resumes_to_its_answer_without_asking_or_running_anything(tmp_path):
    path = tmp_path / "run.db"
    first = await run(LEAD, "go", model=MODEL, journal=path)
    asked, effects = len(ASKED), len(SIDE_EFFECTS)
    again = await resume(path, agent=LEAD, model=MODEL)
    assert again.output == first.output and again.status is RunStatus.COMPLETED
    assert (len(ASKED), len(SIDE_EFFECTS)) == (asked, effects)
    assert [c.output for c in again.children] == [c.output for c in first.children]
    assert again.usage == first.usage  # the budget's view: what was spent, once


def test_resume_sync_takes_resumes_options_by_name_and_replays_a_completed_run(tmp_path):
    path = tmp_path / "run.db"
    first = run_sync(LEAD, "go", model=MODEL, journal=path)
    asked = len(ASKED)
    again = resume_sync(path, agent=LEAD, model=MODEL, limits=Limits(max_turns=5))
    assert (again.status, again.output, len(ASKED)) == (RunStatus.COMPLETED, first.output, asked)
    with pytest.raises(TypeError, match="unexpected keyword argument 'modle'"):
        resume_sync(path, agent=LEAD, modle=MODEL)  # type: ignore[call-arg]


async def test_a_cancelled_run_resumes_where_it_stopped_and_an_unknown_outcome_is_not_run_again(
    tmp_path,
):
    path = tmp_path / "run.db"
    GATE["boss"] = trio.Event()  # the email hangs: the run is cancelled while it is in flight
    async with open_run(LEAD, "go", model=MODEL, journal=path) as handle:
        while "email boss" not in SIDE_EFFECTS:
            await trio.sleep(0.01)
        handle.cancel()
        cut = await handle.result()
    assert cut.status is RunStatus.CANCELLED
    asked_before = list(ASKED)
    GATE.clear()

    result = await resume(path, agent=LEAD, model=MODEL)
    assert result.status is RunStatus.COMPLETED
    assert SIDE_EFFECTS.count("email boss") == 1  # never sent twice
    assert "outcome is unknown" in result.output  # the model was told, and can check
    new_requests = ASKED[len(asked_before) :]
    assert new_requests == [("lead", 3)]  # only the turn never answered was asked
    assert [c.path for c in result.children] == ["lead/worker#1", "lead/worker#2"]
    assert all(c.status is RunStatus.COMPLETED for c in result.children)
    assert all_transcripts_valid(result)


async def test_an_idempotent_call_in_flight_runs_again_on_resume(tmp_path):
    path = tmp_path / "run.db"
    GATE["a"] = trio.Event()
    async with open_run(LEAD, "go", model=MODEL, journal=path) as handle:
        with trio.fail_after(30):  # worker b finishes; worker a is held in its fetch
            async for event in handle.events:
                if isinstance(event, AgentFinished) and event.path == "lead/worker#2":
                    break
            while "fetch a" not in SIDE_EFFECTS:
                await trio.sleep(0.01)
        handle.cancel()
        await handle.result()
    GATE.clear()
    result = await resume(path, agent=LEAD, model=MODEL)
    assert result.status is RunStatus.COMPLETED
    assert SIDE_EFFECTS.count("fetch a") == 2  # in flight: idempotent, so run again
    assert SIDE_EFFECTS.count("fetch b") == 1  # finished: its recorded result replayed
    assert result.children[1].output == "worker b: page b"
    assert ASKED.count(("lead/worker#2", 2)) == 1  # the finished child was not asked again


async def test_budgets_continue_from_what_the_journal_shows_was_spent(tmp_path):
    path = tmp_path / "run.db"
    GATE["boss"] = trio.Event()
    async with open_run(
        LEAD, "go", model=MODEL, journal=path, limits=Limits(token_budget=20_000)
    ) as handle:
        while "email boss" not in SIDE_EFFECTS:
            await trio.sleep(0.01)
        handle.cancel()
        first = await handle.result()
    GATE.clear()
    spent = first.usage.input_tokens + first.usage.output_tokens
    # a budget that one fresh call fits (output cap 4,096 plus its input), but not once what
    # the first run spent counts: the resumed run cannot make its one new call
    budget = 4096 + 600
    assert spent > 600
    result = await resume(path, agent=LEAD, model=MODEL, limits=Limits(token_budget=budget))
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert ("lead", 3) not in ASKED


async def test_a_journal_of_another_tree_is_refused_naming_the_first_difference(tmp_path):
    path = tmp_path / "run.db"
    await run(LEAD, "go", model=MODEL, journal=path)
    changed = Agent("worker", "Fetch twice, then answer.", description="fetches", tools=[fetch])
    other = Agent("lead", "Delegate, email, answer.", subagents=[changed], tools=[send_email])
    with pytest.raises(ConfigurationError, match="agent 'worker' has other instructions"):
        await resume(path, agent=other, model=MODEL)


async def test_a_journal_in_use_is_refused(tmp_path):
    path = tmp_path / "run.db"
    await run(LEAD, "go", model=MODEL, journal=path)
    held = SQLiteJournal.open(path)
    try:
        with pytest.raises(ConfigurationError, match="in use"):
            await resume(path, agent=LEAD, model=MODEL)
    finally:
        held.close()


async def test_a_journal_of_another_schema_version_or_no_journal_at_all_is_refused(tmp_path):
    path = tmp_path / "run.db"
    await run(LEAD, "go", model=MODEL, journal=path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE header SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ConfigurationError, match="schema version 99"):
        await resume(path, agent=LEAD, model=MODEL)
    bogus = tmp_path / "bogus.db"
    bogus.write_text("not a database")
    with pytest.raises(ConfigurationError, match="not a run journal"):
        await resume(bogus, agent=LEAD, model=MODEL)
    with pytest.raises(ConfigurationError, match="no journal"):
        await resume(tmp_path / "missing.db", agent=LEAD, model=MODEL)


async def test_a_second_run_cannot_reuse_a_journal_file(tmp_path):
    path = tmp_path / "run.db"
    await run(LEAD, "go", model=MODEL, journal=path)
    with pytest.raises(ConfigurationError, match="already exists"):
        await run(LEAD, "go", model=MODEL, journal=path)


async def test_the_resumed_trace_is_a_new_trace_linked_to_the_first_runs_root(tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    path = tmp_path / "run.db"
    GATE["boss"] = trio.Event()
    async with open_run(LEAD, "go", model=MODEL, journal=path, tracer_provider=provider) as handle:
        while "email boss" not in SIDE_EFFECTS:
            await trio.sleep(0.01)
        handle.cancel()
        await handle.result()
    GATE.clear()
    first_root = next(s for s in exporter.get_finished_spans() if s.parent is None)
    exporter.clear()
    await resume(path, agent=LEAD, model=MODEL, tracer_provider=provider)
    root = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert root.context.trace_id != first_root.context.trace_id
    [link] = root.links
    assert (link.context.trace_id, link.context.span_id) == (
        first_root.context.trace_id,
        first_root.context.span_id,
    )


def test_the_fingerprint_reads_definitions_without_checking_them():
    # a policy naming a tool of an MCP server is checked once the server's tools are listed,
    # when the run starts; the journal's fingerprint is taken before that
    from orchestrator import Policy
    from orchestrator.core.treeref import fingerprint

    agent = Agent("a", "x", policy=Policy({"files__delete": "deny"}))
    whole, parts = fingerprint(agent)
    assert whole and "a.instructions" in parts
    assert fingerprint(Agent("a", "y", policy=Policy({"files__delete": "deny"})))[0] != whole


async def test_a_journal_that_cannot_be_written_is_a_configuration_error_before_the_run(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(ConfigurationError, match="cannot write the run's journal"):
        await run(LEAD, "go", model=MODEL, journal=tmp_path / "a_file" / "run.db")
    assert ASKED == []  # nothing was asked of the model
