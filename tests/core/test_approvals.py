"""Runs that wait for a person (DESIGN.md "Runs that wait for a person"): ``DEFER`` parks a
``confirm`` call, the run ends ``awaiting_approval`` when every running agent waits, and
``resume(journal, approvals=...)`` decides the calls, each once."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from orchestrator import (
    DEFER,
    Agent,
    ConfigurationError,
    Limits,
    Policy,
    RunStatus,
    resume,
    run,
    tool,
)
from orchestrator.core.journal_sqlite import read_parked
from orchestrator.core.messages import transcript_problem
from orchestrator.models import FunctionModel, response, text, tool_call

SENT: list[str] = []
ASKED: list[tuple[str, int]] = []


@tool
async def send_email(to: str) -> str:
    """Send an email (not idempotent)."""
    SENT.append(to)
    return f"sent to {to}"


@tool
async def slow_lookup(what: str) -> str:
    """Look something up, slowly."""
    await trio.sleep(30)
    return f"found {what}"


def answer(request):
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    ASKED.append((request.agent.path, turn))
    name = request.agent.name
    last = request.messages[-1].content[0]
    if name == "lead":
        if turn == 1:
            return response(
                tool_call("spawn_subagent", {"agent": "mailer", "task": "ann"}, id="s1"),
                tool_call("spawn_subagent", {"agent": "mailer", "task": "bob"}, id="s2"),
                tool_call("spawn_subagent", {"agent": "looker", "task": "x"}, id="s3"),
            )
        results = "; ".join(b.content for b in request.messages[-1].content)
        return text(f"lead: {results}")
    if name == "looker":
        if turn == 1:
            return response(tool_call("slow_lookup", {"what": "x"}, id="l1"))
        return text(last.content)
    task = request.messages[0].content[0].text
    if turn == 1:
        return response(tool_call("send_email", {"to": task}, id=f"mail-{task}"))
    return text(f"{'error: ' if last.is_error else ''}{last.content}")


MODEL = FunctionModel(answer, name="m")
CONFIRM = Policy({"send_email": "confirm"})
MAILER = Agent("mailer", "Mail.", tools=[send_email], policy=CONFIRM, description="mails")
LOOKER = Agent("looker", "Look.", tools=[slow_lookup], description="looks")
LEAD = Agent("lead", "Delegate.", subagents=[MAILER, LOOKER], model=MODEL)
SOLO = Agent(
    "solo",
    "Mail.",
    tools=[send_email],
    policy=CONFIRM,
    model=FunctionModel(
        lambda r: (
            response(tool_call("send_email", {"to": "cy"}, id="mail-cy"))
            if len(r.messages) == 1
            else text(r.messages[-1].content[0].content)
        ),
        name="m",
    ),
)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SENT.clear()
    ASKED.clear()


async def test_a_deferred_call_parks_and_the_run_ends_awaiting_approval_with_the_pending_call(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "run.db"
    result = await run(SOLO, "go", policy=Policy(approver=DEFER), journal=journal)
    assert result.status is RunStatus.AWAITING_APPROVAL
    assert SENT == []  # never half-run: it did not start
    [pending] = result.pending_approvals
    assert (pending.id, pending.agent_path, pending.tool, pending.input) == (
        "mail-cy",
        "solo",
        "send_email",
        {"to": "cy"},
    )
    assert transcript_problem(result.messages) is None
    assert [c.id for c, decision in read_parked(journal)] == ["mail-cy"]

    done = await resume(journal, agent=SOLO, approvals={"mail": True})  # a unique prefix
    assert done.status is RunStatus.COMPLETED, done.error
    assert done.output == "sent to cy" and SENT == ["cy"]
    assert done.pending_approvals == []
    again = await resume(journal, agent=SOLO)  # replayed: never asked, never sent twice
    assert again.status is RunStatus.COMPLETED and SENT == ["cy"]


async def test_a_denied_call_is_declined_by_a_person_and_never_runs(tmp_path: Path) -> None:
    journal = tmp_path / "run.db"
    await run(SOLO, "go", policy=Policy(approver=DEFER), journal=journal)
    done = await resume(journal, agent=SOLO, approvals={"mail-cy": False})
    assert done.status is RunStatus.COMPLETED
    assert done.output == "the call to 'send_email' was declined by a person; it was not run"
    assert SENT == []


async def test_the_rest_of_the_tree_goes_on_and_two_parked_calls_are_decided_one_at_a_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    journal = tmp_path / "run.db"
    result = await run(LEAD, "go", policy=Policy(approver=DEFER), journal=journal)
    assert result.status is RunStatus.AWAITING_APPROVAL
    # the looker's slow tool went on while both mailers waited, and finished
    looker = next(c for c in result.children if c.agent_name == "looker")
    assert looker.status is RunStatus.COMPLETED and looker.output == "found x"
    waiting = [c for c in result.children if c.agent_name == "mailer"]
    assert [c.status for c in waiting] == [RunStatus.AWAITING_APPROVAL] * 2
    assert sorted(p.id for p in result.pending_approvals) == ["mail-ann", "mail-bob"]
    assert sorted(p.agent_path for p in result.pending_approvals) == [
        "lead/mailer#1",
        "lead/mailer#2",
    ]

    first = await resume(journal, agent=LEAD, approvals={"mail-ann": True})
    assert first.status is RunStatus.AWAITING_APPROVAL  # bob's stays parked
    assert [p.id for p in first.pending_approvals] == ["mail-bob"]
    assert SENT == ["ann"]
    asked = len(ASKED)
    second = await resume(journal, agent=LEAD, approvals={"mail-bob": True})
    assert second.status is RunStatus.COMPLETED, second.error
    assert SENT == ["ann", "bob"]  # each once
    assert "sent to ann" in second.output and "sent to bob" in second.output
    # nothing recorded was asked of the model again: only bob's mailer and the lead went on
    assert sorted(ASKED[asked:]) == [("lead", 2), ("lead/mailer#2", 2)]


async def test_deciding_a_call_that_is_not_pending_is_refused_naming_the_pending_ones(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "run.db"
    await run(SOLO, "go", policy=Policy(approver=DEFER), journal=journal)
    with pytest.raises(ConfigurationError, match=r"no pending call 'nope' .*pending: mail-cy"):
        await resume(journal, agent=SOLO, approvals={"nope": True})
    assert [d for _, d in read_parked(journal)] == [None]  # nothing decided by the refusal
    assert SENT == []


async def test_defer_without_a_journal_or_with_a_remote_runner_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="DEFER parks calls in the run's journal"):
        await run(SOLO, "go", policy=Policy(approver=DEFER))
    with pytest.raises(ConfigurationError, match="DEFER parks calls"):  # an agent's own DEFER
        await run(SOLO.replace(policy=Policy({"send_email": "confirm"}, approver=DEFER)), "go")


async def test_a_run_without_a_parked_call_is_not_changed_by_defer(tmp_path: Path) -> None:
    """The guard: DEFER changes only calls that need confirmation."""
    free = SOLO.replace(policy=None)
    result = await run(free, "go", policy=Policy(approver=DEFER), journal=tmp_path / "r.db")
    assert result.status is RunStatus.COMPLETED and SENT == ["cy"]
    assert result.pending_approvals == []


async def test_time_parked_is_not_charged_to_the_resumed_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    journal = tmp_path / "run.db"
    limits = Limits(timeout=40)
    result = await run(LEAD, "go", policy=Policy(approver=DEFER), journal=journal, limits=limits)
    assert result.status is RunStatus.AWAITING_APPROVAL  # after the looker's 30 s
    await trio.sleep(3600)  # an hour before the person answers
    done = await resume(journal, agent=LEAD, approvals={"mail-ann": True, "mail-bob": False})
    assert done.status is RunStatus.COMPLETED, done.error
    assert SENT == ["ann"]


async def test_an_id_two_agents_share_is_refused_as_ambiguous_and_taken_with_its_agents_path(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    same = FunctionModel(
        lambda r: (
            response(tool_call("send_email", {"to": r.agent.path}, id="mail"))
            if len(r.messages) == 1
            else text(r.messages[-1].content[0].content)
        ),
        name="m",
    )
    lead = LEAD.replace(subagents=[MAILER.replace(model=same), LOOKER])
    journal = tmp_path / "run.db"
    result = await run(lead, "go", policy=Policy(approver=DEFER), journal=journal)
    assert [p.id for p in result.pending_approvals] == ["mail", "mail"]
    with pytest.raises(ConfigurationError, match="'mail' names 2 pending calls"):
        await resume(journal, agent=lead, approvals={"mail": True})
    done = await resume(journal, agent=lead, approvals={"lead/mailer#2:mail": True})
    assert done.status is RunStatus.AWAITING_APPROVAL  # mailer#1's call is still parked
    assert SENT == ["lead/mailer#2"]
