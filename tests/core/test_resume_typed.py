"""Typed results in a journal: a resumed run gives the same typed values, each replayed answer
checked again (a text agent's by its validators too), and a journal refuses a tree whose
output types changed (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from orchestrator import (
    Agent,
    ConfigurationError,
    OutputContext,
    OutputRejected,
    RunStatus,
    resume,
    run,
)
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.testing import final


class Finding(BaseModel):
    topic: str
    facts: list[str]


class Report(BaseModel):
    title: str
    findings: int


CHECKED: list[str] = []
"""The agent paths whose answers ``count_checks`` saw, in order."""
REJECT: set[str] = set()
"""Topics ``count_checks`` rejects (a validator changed between the run and its resume)."""
ASKED: list[str] = []
UP: set[str] = set()


def count_checks(ctx: OutputContext, value: Finding) -> Finding:
    CHECKED.append(ctx.agent_path)
    if value.topic in REJECT:
        raise OutputRejected(f"{value.topic} is not a topic any more")
    return value


@pytest.fixture(autouse=True)
def _clean() -> None:
    for kept in (CHECKED, REJECT, ASKED, UP):
        kept.clear()


def answer(request: ModelRequest) -> object:
    """The lead spawns two workers, then (once "up") reports; each worker answers a Finding
    for its task (a rejected one answers again, as "<task> again")."""
    ASKED.append(request.agent.path)
    messages = request.messages
    if request.agent.name == "lead":
        if len(messages) == 1:
            return [tool_call("spawn_subagent", {"agent": "worker", "task": t}) for t in ("a", "b")]
        if "provider" not in UP:
            raise RuntimeError("the lead's provider is down")
        return final(Report(title="done", findings=2))
    task = messages[0].content[0].text
    rejected = any(b.type == "tool_result" and b.is_error for b in messages[-1].content)
    return final(Finding(topic=f"{task} again" if rejected else task, facts=[task * 2]))


MODEL = FunctionModel(answer)
WORKER = Agent(
    "worker", "Find.", description="finds", output_type=Finding, output_validators=[count_checks]
)
LEAD = Agent("lead", "Report.", subagents=[WORKER], output_type=Report)


async def _stopped_after_the_workers(path: Path) -> None:
    first = await run(LEAD, "go", model=MODEL, journal=path)
    assert first.status is RunStatus.ERROR  # the lead's second call failed
    assert [c.output for c in first.children] == [
        Finding(topic="a", facts=["aa"]),
        Finding(topic="b", facts=["bb"]),
    ]
    assert sorted(CHECKED) == ["lead/worker#1", "lead/worker#2"]


async def test_a_resumed_typed_run_gives_the_same_values_each_checked_again(tmp_path: Path):
    path = tmp_path / "run.db"
    await _stopped_after_the_workers(path)
    CHECKED.clear()
    ASKED.clear()
    UP.add("provider")
    again = await resume(path, agent=LEAD, model=MODEL)
    assert again.status is RunStatus.COMPLETED
    assert isinstance(again.output, Report) and again.output == Report(title="done", findings=2)
    assert again.output_json == '{"title":"done","findings":2}'
    assert [type(c.output) for c in again.children] == [Finding, Finding]
    assert [c.output_json for c in again.children] == [
        '{"topic":"a","facts":["aa"]}',
        '{"topic":"b","facts":["bb"]}',
    ]
    assert ASKED == ["lead"]  # the workers' answers came from the journal
    assert sorted(CHECKED) == ["lead/worker#1", "lead/worker#2"]  # and were checked again

    # a completed run resumes to the same values at once, checked again, nobody asked
    CHECKED.clear()
    ASKED.clear()
    done = await resume(path, agent=LEAD, model=MODEL)
    assert done.output == again.output and ASKED == []
    assert [c.output for c in done.children] == [c.output for c in again.children]
    assert sorted(CHECKED) == ["lead/worker#1", "lead/worker#2"]


async def test_a_replayed_answer_the_validators_now_reject_is_asked_for_again(tmp_path: Path):
    path = tmp_path / "run.db"
    await _stopped_after_the_workers(path)
    ASKED.clear()
    UP.add("provider")
    REJECT.add("a")  # the validator changed (the schema did not: the tree is the same)
    again = await resume(path, agent=LEAD, model=MODEL)
    assert again.status is RunStatus.COMPLETED
    assert [c.output for c in again.children] == [
        Finding(topic="a again", facts=["aa"]),
        Finding(topic="b", facts=["bb"]),
    ]
    assert sorted(ASKED) == ["lead", "lead/worker#1"]  # only the rejected one was asked


@pytest.mark.parametrize(
    "changed",
    [
        WORKER.replace(output_type=Report),  # another type
        WORKER.replace(output_mode="native"),  # the same type, asked another way
        WORKER.replace(output_type=str, output_validators=()),  # text now
    ],
    ids=["type", "mode", "text"],
)
async def test_a_journal_refuses_a_tree_whose_output_type_changed(tmp_path: Path, changed: Agent):
    path = tmp_path / "run.db"
    await _stopped_after_the_workers(path)
    other = LEAD.replace(subagents=[changed])
    with pytest.raises(
        ConfigurationError,
        match="was written by another tree: agent 'worker' has another output type or mode ",
    ):
        await resume(path, agent=other, model=MODEL)


async def test_a_text_agent_made_typed_is_refused_as_another_output(tmp_path: Path):
    plain = Agent("solo", "Answer.")
    path = tmp_path / "run.db"
    await run(plain, "go", model=FunctionModel(lambda r: text("ok")), journal=path)
    typed = plain.replace(output_type=Report)
    with pytest.raises(ConfigurationError, match="agent 'solo' has another output type or mode"):
        await resume(path, agent=typed, model=MODEL)


def check_text(ctx: OutputContext, answer: str) -> str:
    CHECKED.append(ctx.agent_path)
    if answer in REJECT:
        raise OutputRejected(f"{answer} is not an answer any more")
    return answer


def answer_text(request: ModelRequest) -> object:
    """:func:`answer` for text workers: each answers its task (a rejected one "<task> again"),
    and the lead (once "up") joins what they said."""
    ASKED.append(request.agent.path)
    messages = request.messages
    if request.agent.name == "lead":
        if len(messages) == 1:
            return [tool_call("spawn_subagent", {"agent": "worker", "task": t}) for t in ("a", "b")]
        if "provider" not in UP:
            raise RuntimeError("the lead's provider is down")
        return text(" ".join(b.content for b in messages[-1].content if b.type == "tool_result"))
    task = messages[0].content[0].text
    rejected = messages[-1].role == "user" and "rejected" in messages[-1].content[0].text
    return text(f"{task} again" if rejected else task)


TEXT_MODEL = FunctionModel(answer_text)
TEXT_LEAD = Agent(
    "lead",
    "Report.",
    subagents=[Agent("worker", "Find.", description="finds", output_validators=[check_text])],
)


async def test_a_text_agents_replayed_answers_are_checked_again_and_a_now_rejected_one_asked(
    tmp_path: Path,
):
    path = tmp_path / "run.db"
    first = await run(TEXT_LEAD, "go", model=TEXT_MODEL, journal=path)
    assert first.status is RunStatus.ERROR  # the lead's second call failed
    assert [c.output for c in first.children] == ["a", "b"]
    assert sorted(CHECKED) == ["lead/worker#1", "lead/worker#2"]
    CHECKED.clear()
    ASKED.clear()
    UP.add("provider")
    REJECT.add("a")  # the validator changed between the run and its resume
    again = await resume(path, agent=TEXT_LEAD, model=TEXT_MODEL)
    assert again.status is RunStatus.COMPLETED, again.error
    assert [c.output for c in again.children] == ["a again", "b"]
    assert again.output == "a again b"
    assert sorted(ASKED) == ["lead", "lead/worker#1"]  # only the rejected one was asked
    # both replayed answers were checked again, and the new one once more
    assert sorted(CHECKED) == ["lead/worker#1", "lead/worker#1", "lead/worker#2"]
