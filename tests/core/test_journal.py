"""The Journal seam: what a run records, in which order, before it acts on it."""

from __future__ import annotations

import pytest
import trio

from orchestrator import Agent, RunStatus, open_run, run, tool
from orchestrator.core.journal import Journal, NullJournal
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call


class RecordingJournal:
    """Keeps every call, in order; replays the responses it was given."""

    def __init__(self, replay=None, fail_on=None):
        self.calls: list[tuple] = []
        self.replay = dict(replay or {})
        self.fail_on = fail_on

    def _note(self, *call):
        self.calls.append(call)
        if self.fail_on == call[0]:
            raise OSError("disk full")

    async def run_started(self, run_id, trace_id, span_id):
        self._note("run_started", run_id)

    async def lookup_response(self, path, turn):
        self._note("lookup_response", path, turn)
        return self.replay.get((path, turn))

    async def record_response(self, path, turn, response):
        self._note("record_response", path, turn, response.stop_reason)

    async def lookup_call(self, path, turn, call_id):
        self._note("lookup_call", path, turn, call_id)

    async def tool_started(self, path, turn, call_id, idempotent):
        self._note("tool_started", path, turn, call_id, idempotent)

    async def record_result(self, path, turn, call_id, result):
        self._note("record_result", path, turn, call_id, result.is_error)

    async def run_ended(self, run_id, status):
        self._note("run_ended", status)

    def names(self):
        return [c[0] for c in self.calls]


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def test_the_null_journal_is_a_journal_and_the_recording_one_too():
    assert isinstance(NullJournal(), Journal)
    assert isinstance(RecordingJournal(), Journal)


async def test_a_run_records_each_response_before_its_tools_and_each_result_before_the_next_turn():
    journal = RecordingJournal()
    model = ScriptedModel([[tool_call("lookup", {"key": "k"}, id="c1")], text("done")])
    result = await run(Agent("a", "x", tools=[lookup]), "go", model=model, journal=journal)

    assert result.status is RunStatus.COMPLETED
    assert journal.calls == [
        ("run_started", result.run_id),
        ("lookup_response", "a", 1),
        ("record_response", "a", 1, "tool_use"),
        ("lookup_call", "a", 1, "c1"),
        ("tool_started", "a", 1, "c1", False),
        ("record_result", "a", 1, "c1", False),
        ("lookup_response", "a", 2),
        ("record_response", "a", 2, "end_turn"),
        ("run_ended", "completed"),
    ]


async def test_a_child_records_its_own_turns_inside_the_spawn_call_of_its_parent():
    worker = Agent("worker", "w", description="does the work")
    lead = Agent("lead", "l", subagents=[worker])
    model = ScriptedModel(
        {
            "lead": [
                [tool_call("spawn_subagent", {"agent": "worker", "task": "t"}, id="s1")],
                text("all done"),
            ],
            "worker": [text("worked")],
        }
    )
    journal = RecordingJournal()
    result = await run(lead, "go", model=model, journal=journal)
    assert result.status is RunStatus.COMPLETED
    spawn_start = journal.calls.index(("tool_started", "lead", 1, "s1", False))
    spawn_result = journal.calls.index(("record_result", "lead", 1, "s1", False))
    child = [c for c in journal.calls if c[1:2] == ("lead/worker#1",)]
    assert child == [
        ("lookup_response", "lead/worker#1", 1),
        ("record_response", "lead/worker#1", 1, "end_turn"),
    ]
    assert spawn_start < journal.calls.index(child[0]) < spawn_result


async def test_a_refused_call_is_recorded_as_a_result_that_never_started():
    journal = RecordingJournal()
    model = ScriptedModel([[tool_call("nope", {}, id="c1")], text("done")])
    await run(Agent("a", "x", tools=[lookup]), "go", model=model, journal=journal)
    assert ("record_result", "a", 1, "c1", True) in journal.calls
    assert "tool_started" not in journal.names()


async def test_a_tool_that_raises_is_recorded_as_an_error_result():
    @tool
    def broken() -> str:
        """Break."""
        raise RuntimeError("boom")

    journal = RecordingJournal()
    model = ScriptedModel([[tool_call("broken", {}, id="c1")], text("done")])
    await run(Agent("a", "x", tools=[broken]), "go", model=model, journal=journal)
    start = journal.calls.index(("tool_started", "a", 1, "c1", False))
    assert journal.calls[start + 1] == ("record_result", "a", 1, "c1", True)


async def test_a_cancelled_call_has_a_start_and_no_result_and_the_end_is_still_recorded():
    started = trio.Event()

    @tool
    async def hang() -> str:
        """Wait forever."""
        started.set()
        await trio.sleep_forever()
        return "never"

    journal = RecordingJournal()
    model = ScriptedModel([[tool_call("hang", {}, id="c1")], text("done")])
    async with open_run(Agent("a", "x", tools=[hang]), "go", model=model, journal=journal) as h:
        await started.wait()
        h.cancel()
        result = await h.result()
    assert result.status is RunStatus.CANCELLED
    assert ("tool_started", "a", 1, "c1", False) in journal.calls
    assert not [c for c in journal.calls if c[0] == "record_result"]
    assert journal.calls[-1] == ("run_ended", "cancelled")


async def test_a_recorded_response_is_used_instead_of_calling_the_model_and_billed():
    asked = []

    def answer(request):
        asked.append(request.turn_index() if hasattr(request, "turn_index") else len(asked))
        return text("from the model")

    recorded = response(text("from the journal"), usage={"input_tokens": 50, "output_tokens": 7})
    journal = RecordingJournal(replay={("a", 1): recorded})
    result = await run(Agent("a", "x"), "go", model=FunctionModel(answer), journal=journal)
    assert result.output == "from the journal"
    assert asked == []
    assert (result.usage.input_tokens, result.usage.output_tokens) == (50, 7)
    assert "record_response" not in journal.names()  # it is on record already


@pytest.mark.parametrize("failing", ["record_response", "tool_started", "record_result"])
async def test_a_journal_that_fails_ends_the_run_with_an_error_naming_it(failing):
    ran = []

    @tool
    def act() -> str:
        """Act."""
        ran.append(1)
        return "acted"

    journal = RecordingJournal(fail_on=failing)
    model = ScriptedModel([[tool_call("act", {}, id="c1")], text("done")])
    result = await run(Agent("a", "x", tools=[act]), "go", model=model, journal=journal)
    assert result.status is RunStatus.ERROR
    assert "journal" in (result.error or "") and "disk full" in (result.error or "")
    assert ran == ([] if failing != "record_result" else [1])  # nothing runs past a failed record
    assert journal.calls[-1] == ("run_ended", "error")
    assert result.messages[-1].role == "user"  # the transcript is still valid


async def test_a_tool_call_cut_by_the_output_cap_is_asked_again_and_recorded_again():
    replies = iter(
        [
            response(tool_call("lookup", {"key": "k"}, id="c1"), stop_reason="max_tokens"),
            response(tool_call("lookup", {"key": "k"}, id="c1")),
            text("done"),
        ]
    )
    journal = RecordingJournal()
    model = FunctionModel(lambda request: next(replies))
    result = await run(Agent("a", "x", tools=[lookup]), "go", model=model, journal=journal)
    assert result.status is RunStatus.COMPLETED
    assert journal.calls[1:6] == [
        ("lookup_response", "a", 1),
        ("record_response", "a", 1, "max_tokens"),
        ("record_response", "a", 1, "tool_use"),  # replaces the cut one, without a lookup
        ("lookup_call", "a", 1, "c1"),
        ("tool_started", "a", 1, "c1", False),
    ]
