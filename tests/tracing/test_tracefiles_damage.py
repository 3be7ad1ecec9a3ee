"""Reading damaged and incomplete trace files: which span is a trace's root, what a missing
one means, and what a damaged line costs (``tests/faults/test_fault_tracefile.py`` makes the
same damage with real faults; these are the other cases of the same classes)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from support.otlp_receiver import OtlpReceiver

from orchestrator import Agent, run, tool
from orchestrator.models import ScriptedModel, text, tool_call
from orchestrator.tracing import configure_tracing
from orchestrator.tracing.export import send_trace
from orchestrator.tracing.tracefiles import (
    DamagedLine,
    TraceFileError,
    damage_note,
    list_runs,
    load_trace,
    resolve_run,
)


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@tool
def echo(word: str) -> str:
    """Echo a word back.

    Args:
        word: The word.
    """
    return word


def solo() -> Agent:
    return Agent(
        "solo",
        "Echo, then answer.",
        model=ScriptedModel([tool_call("echo", {"word": "hi"}), text("done")]),
        tools=[echo],
    )


def remote_parent(span_id: int = 0xABC) -> SpanContext:
    return SpanContext(0x1234, span_id, is_remote=True, trace_flags=TraceFlags(1))


# --------------------------------------------------------------------------------------------
# A missing root is never a success.


def test_a_run_inside_a_callers_span_kept_elsewhere_is_complete_not_interrupted(
    tmp_path: Path,
) -> None:
    setup = configure_tracing(run_file=tmp_path / "run.jsonl", set_global=False)
    callers = TracerProvider()  # the application's own provider: its spans go elsewhere
    with callers.get_tracer("myapp").start_as_current_span("request"):
        result = trio.run(lambda: run(solo(), "go", tracer_provider=setup.tracer_provider))
    setup.shutdown()
    spans = load_trace(tmp_path / "run.jsonl")
    root = next(s for s in spans if s.name == "invoke_agent solo")
    assert root.parent_span_id is not None  # the caller's span, not in this file
    (summary,) = list_runs(tmp_path)
    assert not summary.interrupted
    assert (summary.status, summary.outcome, summary.run_id) == ("OK", "completed", result.run_id)


def test_spans_of_another_library_whose_parent_in_the_same_process_was_lost_are_interrupted(
    tmp_path: Path,
) -> None:
    setup = configure_tracing(run_file=tmp_path / "lost.jsonl", set_global=False)
    tracer = setup.tracer_provider.get_tracer("myapp")
    request = tracer.start_span("request")  # never ends: the process died while it was open
    query = tracer.start_span("query", context=set_span_in_context(request))
    query.set_status(Status(StatusCode.OK))
    query.end()
    setup.shutdown()

    setup = configure_tracing(run_file=tmp_path / "served.jsonl", set_global=False)
    tracer = setup.tracer_provider.get_tracer("myapp")
    served = tracer.start_span(
        "serve", context=set_span_in_context(NonRecordingSpan(remote_parent()))
    )  # its parent is the client's, in another process
    served.set_status(Status(StatusCode.OK))
    served.end()
    setup.shutdown()

    runs = {r.path.name: r for r in list_runs(tmp_path)}
    assert runs["lost.jsonl"].interrupted
    assert (runs["lost.jsonl"].status, runs["lost.jsonl"].outcome) == ("ERROR", "interrupted")
    assert not runs["served.jsonl"].interrupted and runs["served.jsonl"].status == "OK"


def test_a_child_agent_whose_spawn_span_was_lost_does_not_pass_for_the_runs_root(
    tmp_path: Path,
) -> None:
    setup = configure_tracing(run_file=tmp_path / "child.jsonl", set_global=False)
    tracer = setup.tracer_provider.get_tracer("orchestrator")
    spawn = tracer.start_span("execute_tool spawn_subagent")  # lost with its whole batch
    child = tracer.start_span(
        "invoke_agent worker",
        context=set_span_in_context(spawn),
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "worker",
            "orchestrator.agent.path": "lead/worker#0",
            "orchestrator.agent.depth": 1,
            "orchestrator.outcome": "completed",
        },
    )
    child.set_status(Status(StatusCode.OK))
    child.end()
    setup.shutdown()
    (summary,) = list_runs(tmp_path)
    assert summary.interrupted and summary.outcome == "interrupted"
    assert summary.root_agent == "worker"  # the top agent the file still mentions


def test_a_file_holding_a_finished_trace_and_a_killed_one_is_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    setup = configure_tracing(run_file=path, set_global=False)
    trio.run(lambda: run(solo(), "go", tracer_provider=setup.tracer_provider))
    setup.shutdown()
    assert not list_runs(tmp_path)[0].interrupted
    setup = configure_tracing(run_file=path, set_global=False)  # appended to
    tracer = setup.tracer_provider.get_tracer("orchestrator")
    root = tracer.start_span("invoke_agent solo", attributes={"orchestrator.agent.depth": 0})
    tracer.start_span("chat scripted", context=set_span_in_context(root)).end()
    setup.shutdown()  # the root never ended: killed
    (summary,) = list_runs(tmp_path)
    assert summary.interrupted and (summary.status, summary.outcome) == ("ERROR", "interrupted")


# --------------------------------------------------------------------------------------------
# A damaged line costs only itself.


def written_run(path: Path) -> list[bytes]:
    """A finished run in ``path``, one batch per line (a flush per tool call); its lines."""
    setup = configure_tracing(run_file=path, set_global=False)

    @tool
    def step(n: int) -> str:
        """Flush the spans so far.

        Args:
            n: Which step.
        """
        setup.force_flush(5)
        return f"step {n}"

    agent = Agent(
        "solo",
        "Step.",
        model=ScriptedModel([tool_call("step", {"n": 1}), tool_call("step", {"n": 2}), text("ok")]),
        tools=[step],
    )
    trio.run(lambda: run(agent, "go", tracer_provider=setup.tracer_provider))
    setup.shutdown()
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    return lines


def test_a_line_of_malformed_span_data_is_skipped_by_show_list_and_export(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    path = tmp_path / "run.jsonl"
    lines = written_run(path)
    intact = load_trace(path)
    bad = {"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}
    path.write_bytes(lines[0] + json.dumps(bad).encode() + b"\n" + b"".join(lines[1:]))
    spans = load_trace(path)
    assert spans == intact
    assert [(d.number, d.reason) for d in spans.damaged] == [(2, "malformed span data")]
    (summary,) = list_runs(tmp_path)
    assert (summary.span_count, summary.outcome) == (len(intact), "completed")
    assert summary.damage_note == "1 damaged line skipped (line 2: malformed span data)"
    sent = send_trace(path, receiver.http_endpoint)
    assert sent.spans == len(intact) == len(receiver.wait_for_spans(len(intact)))
    assert [d.number for d in sent.damaged] == [2]


@pytest.mark.parametrize("first", ["cut", "binary"])
def test_a_damaged_first_line_does_not_hide_the_run(tmp_path: Path, first: str) -> None:
    path = tmp_path / "run.jsonl"
    lines = written_run(path)
    head = lines[0][:40] if first == "cut" else b"\x00" * 300
    path.write_bytes(head + b"\n" + b"".join(lines[1:]))
    (summary,) = list_runs(tmp_path)
    assert summary.outcome == "completed" and not summary.interrupted
    assert [d.number for d in summary.damaged] == [1]
    assert resolve_run(summary.run_id[:8], tmp_path) == path


def test_a_file_with_no_readable_line_is_an_error_naming_the_line_and_hides_no_other(
    tmp_path: Path,
) -> None:
    written_run(tmp_path / "good.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"resourceSpans":[{"scopeSpa\n\x00\x00\n')
    with pytest.raises(TraceFileError, match=r"bad\.jsonl:1: not JSON"):
        load_trace(bad)
    assert [r.path.name for r in list_runs(tmp_path)] == ["good.jsonl"]


def test_the_damage_note_names_the_lines() -> None:
    assert damage_note(()) is None
    assert damage_note([DamagedLine(9, "not JSON", at_end=True)]) == (
        "1 damaged line skipped (line 9: the last line, cut off)"
    )
    many = [DamagedLine(n, "not JSON") for n in range(2, 10)]
    assert damage_note(many) == "8 damaged lines skipped (lines 2, 3, 4, 5, 6, 7, ...)"
