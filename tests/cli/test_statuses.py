"""Every run status is handled wherever statuses are shown: its own exit code, a line in the
README's table, a style in ``trace list`` / ``trace show``, and a line in the progress view (a
new status fails here until each of them knows it)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import trio

from orchestrator import Usage
from orchestrator.cli.main import EXIT_CODES
from orchestrator.cli.progress import follow_events
from orchestrator.core.events import AgentFinished, AgentStarted, Event
from orchestrator.core.result import RunStatus
from orchestrator.testing import recording_spans
from orchestrator.tracing import spans
from orchestrator.tracing.view import STATUS_STYLES

README = (Path(__file__).parents[2] / "README.md").read_text()


def test_every_status_has_an_exit_code_of_its_own() -> None:
    assert set(EXIT_CODES) == set(RunStatus)
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)
    assert 2 not in EXIT_CODES.values()  # bad usage


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
def test_each_status_is_in_the_readmes_table_with_its_exit_code(status: RunStatus) -> None:
    row = re.search(rf"^\| `{status.value}` \|[^|]*\| (\d+) \|$", README, re.MULTILINE)
    assert row is not None, f"README.md has no row for {status.value}"
    assert int(row[1]) == EXIT_CODES[status]


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
def test_an_agent_span_ending_with_each_status_has_a_trace_style(status: RunStatus) -> None:
    with recording_spans() as recorder:
        tracer = recorder.tracer_provider.get_tracer("test")
        with tracer.start_as_current_span("invoke_agent a") as span:
            spans.record_outcome(span, status.value, "why it ended")
    [recorded] = recorder.spans
    assert recorded.attributes["orchestrator.outcome"] == status.value
    shown = recorded.status.status_code.name  # as trace files keep it: OK, ERROR or UNSET
    assert STATUS_STYLES[shown]
    # nothing failed in a run that was cancelled, or that waits for a person
    failed = status not in (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.AWAITING_APPROVAL)
    assert (shown == "ERROR") == failed
    if failed:
        assert recorded.attributes["error.type"] == status.value


async def _progress(status: RunStatus, *, live: bool) -> str:
    events: list[Event] = [
        AgentStarted("a", "a", 0, None, "go"),
        AgentFinished(
            "a", "a", status, None if status is RunStatus.COMPLETED else "why", Usage(), 1
        ),
    ]
    send, receive = trio.open_memory_channel[Event](len(events))
    for event in events:
        send.send_nowait(event)
    send.close()
    stream = io.StringIO()
    await follow_events(receive, live=live, stream=stream)
    return stream.getvalue()


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
async def test_the_progress_view_shows_each_status_as_the_agent_ended(status: RunStatus) -> None:
    plain = await _progress(status, live=False)
    why = "" if status is RunStatus.COMPLETED else ": why"  # an agent that did not complete
    assert f"finish a: {status.value} (1 turns, 0 tokens){why}" in plain.splitlines()
    live = await _progress(status, live=True)
    state = {RunStatus.COMPLETED: "done", RunStatus.AWAITING_APPROVAL: "parked"}.get(
        status, "failed"
    )
    assert f"a [{state}] {status.value}" in live
