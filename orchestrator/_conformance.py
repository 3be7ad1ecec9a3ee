"""The seams' conformance kits: :func:`check_journal` and :func:`check_runner`.

Each runs the contract of one seam against any implementation, through the public API, with
the test models: what the values a journal records must read back as, that a run replays from
it, that a call in flight at a stop is never run twice; that a runner's children give the same
result tree as in process, replay from a journal, stop when the run is cancelled, settle their
budgets and report their errors. A failure raises :class:`ConformanceError` naming the check
and what differed. ``orchestrator.testing`` exports both (loading this module on first use).

The trees, models and tools here are module-level, so that a runner that pickles children
(Dask's) sends them by reference: this module is importable wherever orchestrator is.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from . import (
    Agent,
    ChildRunner,
    Journal,
    Limits,
    OrchestratorError,
    RunResult,
    RunStatus,
    ToolResultBlock,
    Usage,
    open_run,
    resume,
    run,
    tool,
)
from .core.events import AgentFinished, AgentStarted
from .core.journal import RecordedCall
from .core.messages import transcript_problem
from .models import ModelRequest
from .models.scripted import FunctionModel, response, text, tool_call

__all__ = ["ConformanceError", "check_journal", "check_runner"]

SPAWN = "spawn_subagent"
DEADLINE = 60.0
"""Seconds any one check may take (a runner on a cluster included)."""


class ConformanceError(OrchestratorError, AssertionError):
    """An implementation broke its seam's contract: which check, and what differed."""


def _expect(check: str, condition: bool, what: str) -> None:
    if not condition:
        raise ConformanceError(f"{check}: {what}")


# ---------------------------------------------------------------------------------------------
# The trees (module level: a runner elsewhere imports them)


@tool
def note(text: str) -> str:
    """Note something (not idempotent: it must never run twice)."""
    _SIDE_EFFECTS.append(text)
    return f"noted {text}"


@tool(idempotent=True)
async def wait_a_while(seconds: float) -> str:
    """Wait (idempotent: safe to run again)."""
    _SIDE_EFFECTS.append(f"waiting {seconds}")
    await trio.sleep(seconds)
    return "waited"


_SIDE_EFFECTS: list[str] = []
"""What :func:`note` and :func:`wait_a_while` did in this process."""


def _turn(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant") + 1


def _last_result(request: ModelRequest) -> str:
    blocks = request.messages[-1].content
    return "; ".join(str(getattr(b, "content", "")) for b in blocks)


def tree_answers(request: ModelRequest) -> Any:
    """A lead that notes, spawns two workers at once, then answers with what they said; each
    worker notes its task and answers."""
    turn, usage = _turn(request), {"input_tokens": 100, "output_tokens": 10}
    if request.agent.name == "lead":
        if turn == 1:
            return response(tool_call("note", {"text": "lead"}, id="n1"), usage=usage)
        if turn == 2:
            return response(
                tool_call(SPAWN, {"agent": "worker", "task": "a"}, id="s1"),
                tool_call(SPAWN, {"agent": "worker", "task": "b"}, id="s2"),
                usage=usage,
            )
        return response(text("lead done: " + _last_result(request)), usage=usage)
    task = request.messages[0].content[0].text  # type: ignore[union-attr]
    if turn == 1:
        return response(tool_call("note", {"text": f"worker {task}"}, id=f"n-{task}"), usage=usage)
    return response(text(f"worker {task} done"), usage=usage)


def never_asked(request: ModelRequest) -> Any:
    """A model for a run that must replay everything: any call is a contract failure."""
    raise RuntimeError(f"the model was asked ({request.agent.path}, turn {_turn(request)})")


def slow_workers(request: ModelRequest) -> Any:
    """A lead that spawns two workers whose first call takes a minute (to be cancelled)."""
    if request.agent.name == "lead":
        if _turn(request) == 1:
            return response(
                tool_call(SPAWN, {"agent": "worker", "task": "a"}, id="s1"),
                tool_call(SPAWN, {"agent": "worker", "task": "b"}, id="s2"),
            )
        return text("lead done")
    return response(tool_call("wait_a_while", {"seconds": 60.0}, id="w1"))


def in_flight_answers(request: ModelRequest) -> Any:
    """A lead that calls note and wait_a_while at once, then answers (for the journal)."""
    if _turn(request) == 1:
        return response(
            tool_call("note", {"text": "once"}, id="n1"),
            tool_call("wait_a_while", {"seconds": 60.0}, id="w1"),
        )
    return text("done: " + _last_result(request))


def failing_workers(request: ModelRequest) -> Any:
    """A lead that spawns a worker which never answers (it ends ``max_turns``)."""
    if request.agent.name == "lead":
        if _turn(request) == 1:
            return response(tool_call(SPAWN, {"agent": "worker", "task": "a"}, id="s1"))
        return text("lead saw: " + _last_result(request))
    n = _turn(request)
    return response(tool_call("note", {"text": f"again {n}"}, id=f"n{n}"))


def _tree(model: Any) -> Agent:
    worker = Agent("worker", "Work.", description="works", tools=[note, wait_a_while])
    return Agent("lead", "Lead.", subagents=[worker], tools=[note, wait_a_while], model=model)


TREE = _tree(FunctionModel(tree_answers))


# ---------------------------------------------------------------------------------------------
# check_journal


def check_journal(make_journal: Callable[[str], Journal]) -> None:
    """Run the :class:`~orchestrator.Journal` contract against ``make_journal``.

    ``make_journal(name)`` gives a journal named ``name``: the first call for a name an empty
    one, a later call for the same name a new object over the same record (what resume opens).
    A journal with a ``close()`` method is closed when the kit is done with it. Raises
    :class:`ConformanceError` naming the first check that fails.
    """
    trio.run(_check_journal, make_journal)


async def _check_journal(make_journal: Callable[[str], Journal]) -> None:
    with trio.fail_after(DEADLINE):
        await _journal_values(make_journal)
        await _journal_replays_a_run(make_journal)
        await _journal_keeps_a_call_in_flight(make_journal)


def _close(journal: Any) -> None:
    close = getattr(journal, "close", None)
    if callable(close):
        close()


async def _journal_values(make_journal: Callable[[str], Journal]) -> None:
    # what an earlier run recorded, read back by a later one (a journal need not answer its
    # own run's lookups: the SQLite journal answers none while it records a new run)
    check = "values read back"
    first = response(tool_call("note", {"text": "é ✓"}, id="c1"), usage={"input_tokens": 7})
    second = response(text("replaced"), usage={"input_tokens": 9, "output_tokens": 2})
    result = ToolResultBlock("c1", "noted é ✓", is_error=True)
    journal = make_journal("values")
    try:
        await journal.run_started("kit-values", 0, 0)
        await journal.record_response("lead", 1, first)
        await journal.tool_started("lead", 1, "c1", False)
        await journal.record_result("lead", 1, "c1", result)
        await journal.record_response("lead", 1, second)  # the turn asked again: it replaces
        await journal.tool_started("lead", 2, "c2", True)  # started, never finished
        await journal.run_ended("kit-values", RunStatus.CANCELLED.value)
    finally:
        _close(journal)
    again = make_journal("values")
    try:
        got = await again.lookup_response("lead", 1)
        _expect(check, got == second, f"recorded {second!r} (replacing another), read {got!r}")
        call = await again.lookup_call("lead", 1, "c1")
        _expect(check, call == RecordedCall(result), f"recorded {result!r}, read {call!r}")
        call = await again.lookup_call("lead", 2, "c2")
        _expect(
            check,
            call == RecordedCall(None),
            "a call started with no result must read "
            f"as RecordedCall(None) (it was in flight), read {call!r}",
        )
        for path, turn in (("lead/worker#1", 1), ("lead", 2)):
            got = await again.lookup_response(path, turn)
            _expect(check, got is None, f"nothing was recorded for {path} turn {turn}: {got!r}")
        call = await again.lookup_call("lead", 1, "c9")
        _expect(check, call is None, f"a call never started read as {call!r}")
    finally:
        _close(again)


async def _journal_replays_a_run(make_journal: Callable[[str], Journal]) -> None:
    check = "a run replays from the journal"
    del _SIDE_EFFECTS[:]
    journal = make_journal("replay")
    try:
        first = await run(TREE, "go", journal=journal, run_id="kit-replay")
    finally:
        _close(journal)
    _expect(check, first.status is RunStatus.COMPLETED, f"the first run ended {first.status}")
    effects = list(_SIDE_EFFECTS)
    journal = make_journal("replay")
    try:
        again = await run(
            _tree(FunctionModel(never_asked)), "go", journal=journal, run_id="kit-replay"
        )
    finally:
        _close(journal)
    _expect(
        check,
        again.status is RunStatus.COMPLETED and again.output == first.output,
        f"replayed: {again.status} {again.output!r}, first: {first.output!r}",
    )
    _expect(check, effects == _SIDE_EFFECTS, f"tools ran again: {_SIDE_EFFECTS[len(effects) :]}")
    _expect(
        check,
        again.usage == first.usage,
        f"replayed usage {again.usage} != {first.usage} (the budgets go on from what was spent)",
    )
    _expect(
        check,
        [c.output for c in again.children] == [c.output for c in first.children],
        "the children's answers differ",
    )


async def _journal_keeps_a_call_in_flight(make_journal: Callable[[str], Journal]) -> None:
    check = "a call in flight at a stop"
    del _SIDE_EFFECTS[:]
    lead = Agent("lead", "Lead.", tools=[note, wait_a_while])
    journal = make_journal("in-flight")
    try:
        async with open_run(
            lead, "go", model=FunctionModel(in_flight_answers), journal=journal, run_id="kit-f"
        ) as handle:
            while "waiting 60.0" not in _SIDE_EFFECTS:  # noqa: ASYNC110 - a tool's doing
                await trio.sleep(0.01)
            handle.cancel()
            first = await handle.result()
    finally:
        _close(journal)
    _expect(check, first.status is RunStatus.CANCELLED, f"the first run ended {first.status}")
    del _SIDE_EFFECTS[:]
    journal = make_journal("in-flight")
    try:
        second = await run(
            lead.replace(tools=[note, _quick_wait]),
            "go",
            model=FunctionModel(in_flight_answers),
            journal=journal,
            run_id="kit-f",
        )
    finally:
        _close(journal)
    _expect(check, second.status is RunStatus.COMPLETED, f"resumed: {second.status}")
    _expect(check, "once" not in _SIDE_EFFECTS, "a non-idempotent call that had finished ran again")


@tool(name="wait_a_while", idempotent=True)
async def _quick_wait(seconds: float) -> str:
    """Wait (idempotent: safe to run again)."""
    _SIDE_EFFECTS.append("quick")
    return "waited"


# ---------------------------------------------------------------------------------------------
# check_runner


def check_runner(make_runner: Callable[[], ChildRunner]) -> None:
    """Run the :class:`~orchestrator.ChildRunner` contract against ``make_runner``.

    ``make_runner()`` gives a runner for one run (a new one each time, or the same one if it
    can serve runs one after another). Its children must give the same result tree as in
    process (events included), replay from a journal without being run again, end
    ``cancelled`` when the run is, settle what they spent on the run's budget, and report how
    they failed. Raises :class:`ConformanceError` naming the first check that fails.
    """
    trio.run(_check_runner, make_runner)


async def _check_runner(make_runner: Callable[[], ChildRunner]) -> None:
    with trio.fail_after(DEADLINE * 5):
        with tempfile.TemporaryDirectory(prefix="orchestrator-kit-") as folder:
            await _runner_same_tree(make_runner)
            await _runner_replays(make_runner, Path(folder))
            await _runner_cancels(make_runner)
            await _runner_settles_budgets(make_runner)
            await _runner_reports_errors(make_runner)


def _shape(result: RunResult[Any]) -> list[tuple[str, str, Any, int]]:
    return [(r.agent_name, r.status.value, r.output, r.turns) for r in result.walk()]


async def _events_of(tree: Agent, runner: ChildRunner | None) -> tuple[RunResult[Any], list[Any]]:
    events: list[Any] = []
    async with open_run(tree, "go", runner=runner) as handle:
        async for event in handle.events:
            events.append(event)
        return await handle.result(), events


async def _runner_same_tree(make_runner: Callable[[], ChildRunner]) -> None:
    check = "the same result tree as in process"
    here, _ = await _events_of(TREE, None)
    there, events = await _events_of(TREE, make_runner())
    _expect(check, _shape(there) == _shape(here), f"{_shape(there)} != {_shape(here)}")
    _expect(check, there.usage == here.usage, f"usage {there.usage} != {here.usage}")
    for r in there.walk():
        problem = transcript_problem(r.messages)
        _expect(check, problem is None, f"{r.agent_name}'s transcript: {problem}")
    for child in ("lead/worker#1", "lead/worker#2"):
        seen = [
            type(e).__name__
            for e in events
            if isinstance(e, AgentStarted | AgentFinished) and e.path == child
        ]
        _expect(
            check,
            seen == ["AgentStarted", "AgentFinished"],
            f"{child}'s start and end events: {seen}",
        )


async def _runner_replays(make_runner: Callable[[], ChildRunner], folder: Path) -> None:
    check = "a resumed run replays its children"
    path = folder / "replay.db"
    first = await run(TREE, "go", journal=path, runner=make_runner())
    _expect(check, first.status is RunStatus.COMPLETED, f"the first run ended {first.status}")
    again = await resume(
        path, agent=_tree(FunctionModel(never_asked)), runner=make_runner(), definitions=TREE
    )
    _expect(
        check,
        _shape(again) == _shape(first),
        f"{_shape(again)} != {_shape(first)} (a "
        "child asked its model again, or its recorded tree was not adopted)",
    )
    _expect(check, again.usage == first.usage, f"usage {again.usage} != {first.usage}")


async def _runner_cancels(make_runner: Callable[[], ChildRunner]) -> None:
    check = "cancelling the run reaches the children"
    tree = _tree(FunctionModel(slow_workers))
    async with open_run(tree, "go", runner=make_runner()) as handle:
        started: set[str] = set()
        async for event in handle.events:
            if isinstance(event, AgentStarted) and event.depth == 1:
                started.add(event.path)
            if len(started) == 2:
                break
        await trio.sleep(0.2)  # past the start: the children are waiting on their tools
        with trio.fail_after(30):  # the contract: within a second; generous for a cluster
            handle.cancel()
            result = await handle.result()
    _expect(check, result.status is RunStatus.CANCELLED, f"the run ended {result.status}")
    for child in result.children:
        _expect(
            check,
            child.status is RunStatus.CANCELLED,
            f"{child.agent_name} ended {child.status}, not cancelled",
        )
    for r in result.walk():
        problem = transcript_problem(r.messages)
        _expect(check, problem is None, f"{r.agent_name}'s transcript: {problem}")


def _budgeted_tree(model: Any) -> Agent:
    # each worker's subtree has 250 tokens: its first call (110) fits, its second does not
    worker = Agent(
        "worker",
        "Work.",
        description="works",
        tools=[note, wait_a_while],
        limits=Limits(token_budget=WORKER_BUDGET),
        max_output_tokens=20,
    )
    return Agent(
        "lead", "Lead.", subagents=[worker], tools=[note], model=model, max_output_tokens=20
    )


WORKER_BUDGET = 250
BUDGETED_TREE = _budgeted_tree(FunctionModel(tree_answers))


async def _runner_settles_budgets(make_runner: Callable[[], ChildRunner]) -> None:
    check = "what children spend is settled on the run's budget"
    here = await run(BUDGETED_TREE, "go")
    there = await run(BUDGETED_TREE, "go", runner=make_runner())
    _expect(check, _shape(there) == _shape(here), f"{_shape(there)} != {_shape(here)}")
    total = there.own_usage + sum((c.usage for c in there.children), Usage())
    _expect(
        check,
        there.usage == total,
        f"the run's usage {there.usage} != its own plus its children's {total}",
    )
    _expect(check, there.usage == here.usage, f"usage {there.usage} != {here.usage} in process")
    for child in there.children:
        spent = child.usage.input_tokens + child.usage.output_tokens
        _expect(
            check,
            child.status is RunStatus.BUDGET_EXCEEDED and spent <= WORKER_BUDGET,
            f"{child.agent_name} ended {child.status} having spent {spent} of {WORKER_BUDGET}",
        )


async def _runner_reports_errors(make_runner: Callable[[], ChildRunner]) -> None:
    check = "a child that fails is an error result"
    tree = _tree(FunctionModel(failing_workers))
    result = await run(tree, "go", runner=make_runner(), limits=Limits(max_turns=3))
    [child] = result.children
    _expect(check, child.status is RunStatus.MAX_TURNS, f"the child ended {child.status}")
    seen = [
        b
        for m in result.messages
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.tool_use_id == "s1"
    ]
    _expect(
        check,
        len(seen) == 1 and seen[0].is_error and "max_turns" in str(seen[0].content),
        f"the parent read {seen!r}",
    )
