"""Saved traces: listing runs, finding one, drawing it, and sending it to a collector later.

Trace files are produced the real way (SDK spans through ``configure_tracing``'s OTLP/JSON
file exporter) with explicit timestamps, so the waterfall positions are exact.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.util.types import AttributeValue
from rich.console import Console
from support.otlp_receiver import OtlpReceiver

from orchestrator.cli.trace import export_command, list_command, show
from orchestrator.tracing import configure_tracing
from orchestrator.tracing import tracefiles as traceview
from orchestrator.tracing.tracefiles import (
    SpanRecord,
    TraceFileError,
    TraceNotFoundError,
    list_runs,
    load_trace,
    resolve_run,
)
from orchestrator.tracing.view import render_trace

MS = 1_000_000
T0 = 1_750_000_000_000_000_000  # ns


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def write_run(path: Path, run_id: str, *, t0: int = T0, fail: bool = False) -> None:
    """A lead (0-1000 ms) → spawn_subagent (200-800) → researcher (210-790) → chat (300-700),
    plus the lead's own chat call (0-100)."""
    setup = configure_tracing(run_file=path, set_global=False)
    tracer = setup.tracer_provider.get_tracer("orchestrator")

    def start(
        name: str, parent: Span | None, at_ms: int, attrs: dict[str, AttributeValue] | None = None
    ) -> Span:
        ctx = set_span_in_context(parent) if parent is not None else None
        kind = SpanKind.CLIENT if name.startswith("chat") else SpanKind.INTERNAL
        return tracer.start_span(
            name, context=ctx, kind=kind, start_time=t0 + at_ms * MS, attributes=attrs or None
        )

    lead = start(
        "invoke_agent lead",
        None,
        0,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "lead",
            "gen_ai.conversation.id": run_id,
            "orchestrator.usage.subtree.input_tokens": 3300,
            "orchestrator.usage.subtree.output_tokens": 250,
            "orchestrator.subtree.cost_usd": 0.0125,
        },
    )
    own_chat = start(
        "chat m1",
        lead,
        0,
        {"gen_ai.usage.input_tokens": 1100, "gen_ai.usage.output_tokens": 50},
    )
    own_chat.end(t0 + 100 * MS)
    tool = start("execute_tool spawn_subagent", lead, 200, {"gen_ai.tool.name": "spawn_subagent"})
    researcher = start("invoke_agent researcher", tool, 210, {"gen_ai.agent.name": "researcher"})
    chat = start(
        "chat m2",
        researcher,
        300,
        {
            "gen_ai.usage.input_tokens": 2200,
            "gen_ai.usage.output_tokens": 200,
            "orchestrator.cost_usd": 0.0042,
        },
    )
    chat.end(t0 + 700 * MS)
    if fail:
        researcher.set_status(Status(StatusCode.ERROR, "deadline"))
        researcher.set_attribute("orchestrator.outcome", "timeout")
        researcher.set_attribute("error.type", "timeout")
    else:
        researcher.set_status(Status(StatusCode.OK))
        researcher.set_attribute("orchestrator.outcome", "completed")
    researcher.end(t0 + 790 * MS)
    tool.end(t0 + 800 * MS)
    lead.set_status(Status(StatusCode.ERROR if fail else StatusCode.OK))
    lead.set_attribute("orchestrator.outcome", "error" if fail else "completed")
    lead.end(t0 + 1000 * MS)
    setup.shutdown()


def quiet_console(width: int = 120) -> Console:
    """A recording console that prints nowhere (``export_text`` reads what was drawn)."""
    return Console(record=True, width=width, file=io.StringIO())


def rendered(spans: list[SpanRecord], width: int = 120) -> list[str]:
    console = quiet_console(width)
    render_trace(spans, console)
    return console.export_text().splitlines()


def row(lines: list[str], name: str) -> str:
    matches = [line for line in lines if re.search(rf"[─ ]{re.escape(name)}\b|^{name}\b", line)]
    assert matches, f"no row for {name!r} in:\n" + "\n".join(lines)
    return matches[0]


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "a.jsonl"
    write_run(path, "run-aaa111")
    return path


# --------------------------------------------------------------------------------------------
# Drawing


def test_render_shows_tree_bars_tokens_cost_and_status(run_file: Path) -> None:
    lines = rendered(load_trace(run_file))
    text = "\n".join(lines)
    for name in ("invoke_agent lead", "execute_tool spawn_subagent", "invoke_agent researcher"):
        assert name in text
    assert "run-aaa111" in lines[0] and "1.00s" in lines[0] and "5 spans" in lines[0]

    lead = row(lines, "invoke_agent lead")
    assert lead.startswith("invoke_agent lead")
    lead_bar = re.search(r"[·█]{10,}", lead)
    assert lead_bar is not None
    width = len(lead_bar.group())
    assert 10 <= width <= 40
    assert lead_bar.group() == "█" * width  # the root covers the whole timeline
    assert "1.00s" in lead and "Σ3.3k→250" in lead and "$0.0125" in lead
    assert "OK completed" in lead

    # Tree guides: the lead's two children, the researcher under the tool, the chat under it.
    assert row(lines, "chat m1").startswith("├─ chat m1")
    assert row(lines, "execute_tool spawn_subagent").startswith("└─ execute_tool spawn_subagent")
    assert row(lines, "invoke_agent researcher").startswith("   └─ invoke_agent researcher")
    assert row(lines, "chat m2").startswith("      └─ chat m2")
    order = [
        lines.index(row(lines, n))
        for n in (
            "invoke_agent lead",
            "chat m1",
            "execute_tool",
            "invoke_agent researcher",
            "chat m2",
        )
    ]
    assert order == sorted(order)

    # Waterfall: the tool runs 200-800 ms of the 1000 ms trace, the chat 300-700 ms.
    for name, start_ms, end_ms in (
        ("execute_tool spawn_subagent", 200, 800),
        ("chat m2", 300, 700),
    ):
        bar = re.search(rf"[·█]{{{width}}}", row(lines, name))
        assert bar is not None
        first, last = start_ms * width // 1000, -(-end_ms * width // 1000)
        assert bar.group() == "·" * first + "█" * (last - first) + "·" * (width - last)

    chat = row(lines, "chat m2")
    assert "400ms" in chat and "2.2k→200" in chat and "$0.0042" in chat and "UNSET" in chat
    assert "model calls: 3.3k input → 250 output" in text


def test_render_with_a_fixed_bar_width(run_file: Path) -> None:
    console = quiet_console(120)
    render_trace(load_trace(run_file), console, bar_width=30)
    tool = row(console.export_text().splitlines(), "execute_tool spawn_subagent")
    assert "·" * 6 + "█" * 18 + "·" * 6 in tool


def test_render_on_80_columns_keeps_figures_whole(run_file: Path) -> None:
    lines = rendered(load_trace(run_file), width=80)
    assert all(len(line) <= 80 for line in lines)
    lead = row(lines, "invoke_agent lead")
    assert "Σ3.3k→250" in lead and "$0.0125" in lead and "OK completed" in lead
    assert "█" * 10 in lead


def test_render_shows_errors_and_outcomes(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    write_run(path, "run-bad", fail=True)
    lines = rendered(load_trace(path))
    researcher = row(lines, "invoke_agent researcher")
    assert "ERROR timeout" in researcher
    assert "(timeout)" not in researcher  # error.type equal to the outcome is not repeated
    assert "ERROR error (timeout)" not in row(lines, "invoke_agent lead")
    assert "ERROR error" in row(lines, "invoke_agent lead")


def test_render_draws_orphans_and_survives_parent_cycles() -> None:
    def span(span_id: str, parent: str | None, name: str) -> SpanRecord:
        return SpanRecord(
            trace_id="ab" * 16,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind=1,
            start_ns=T0,
            end_ns=T0 + MS,
            attributes={},
            status="UNSET",
            status_message="",
            events=(),
            resource={},
            scope="t",
        )

    spans = [
        span("1" * 16, "f" * 16, "orphan"),  # parent not in the file (truncated trace)
        span("2" * 16, "3" * 16, "cycle-a"),
        span("3" * 16, "2" * 16, "cycle-b"),
    ]
    text = "\n".join(rendered(spans))
    assert "orphan" in text and "cycle-a" in text and "cycle-b" in text


def test_render_keeps_a_span_name_with_control_characters_on_its_row(run_file: Path) -> None:
    spans = load_trace(run_file)
    spans[1] = dataclasses.replace(spans[1], name="multi\nline\tname")
    lines = rendered(spans)
    assert len(lines) == len(rendered(load_trace(run_file)))
    assert any(r"multi\nline\tname" in line for line in lines)  # shown, each on its row


def test_render_empty() -> None:
    assert "(no spans)" in "\n".join(rendered([]))


# --------------------------------------------------------------------------------------------
# Loading and listing


def test_load_trace_reports_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"resourceSpans": []}\n\nnot json\n')
    assert [(d.number, d.reason) for d in load_trace(path).damaged] == [(3, "not JSON")]
    path.write_text("not json\n")
    with pytest.raises(TraceFileError, match=r"x\.jsonl:1: not JSON"):
        load_trace(path)
    path.write_text('{"something": "else"}\n')
    with pytest.raises(TraceFileError, match="not an OTLP/JSON traces line"):
        load_trace(path)


def test_list_runs_newest_first_and_skips_other_files(tmp_path: Path) -> None:
    write_run(tmp_path / "old.jsonl", "run-old", t0=T0)
    write_run(tmp_path / "sub" / "new.jsonl", "run-new", t0=T0 + 3_600 * 10**9, fail=True)
    (tmp_path / "events.jsonl").write_text(json.dumps({"event": "agent_started"}) + "\n")
    (tmp_path / "broken.jsonl").write_text('{"resourceSpans": []}\n{broken\n')
    (tmp_path / "notes.txt").write_text("hello")

    runs = list_runs(tmp_path)
    assert [r.run_id for r in runs] == ["run-new", "run-old"]
    new = runs[0]
    assert new.root_agent == "lead"
    assert new.span_count == 5
    assert new.duration_s == pytest.approx(1.0)
    assert (new.status, new.outcome) == ("ERROR", "error")
    assert new.service_name == "orchestrator"
    assert new.start is not None and new.start.timestamp() == pytest.approx((T0 + 3_600e9) / 1e9)
    assert list_runs(tmp_path / "missing") == []


def test_resolve_run_by_prefix_path_or_newest(tmp_path: Path) -> None:
    write_run(tmp_path / "one.jsonl", "run-abc-1", t0=T0)
    write_run(tmp_path / "two.jsonl", "run-abd-2", t0=T0 + 10**9)
    assert resolve_run(None, tmp_path).name == "two.jsonl"
    assert resolve_run("run-abc", tmp_path).name == "one.jsonl"
    assert resolve_run("run-abc-1", tmp_path).name == "one.jsonl"
    assert resolve_run("one", tmp_path).name == "one.jsonl"
    assert resolve_run(str(tmp_path / "two.jsonl"), tmp_path).name == "two.jsonl"
    with pytest.raises(TraceNotFoundError, match="matches 2 runs"):
        resolve_run("run-ab", tmp_path)
    with pytest.raises(TraceNotFoundError, match="no saved trace matches"):
        resolve_run("zzz", tmp_path)
    with pytest.raises(TraceNotFoundError, match="no saved traces"):
        resolve_run(None, tmp_path / "empty")


def test_a_run_named_by_its_file_is_found_without_reading_the_other_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(tmp_path / "2026-run-a.jsonl", "2026-run-a", t0=T0)
    for i in range(5):
        write_run(tmp_path / "old" / f"run-{i}.jsonl", f"run-{i}", t0=T0 - 10**9 * (i + 1))
    read: list[Path] = []
    real_load_trace = traceview.load_trace

    def counting_load_trace(path: Path) -> list[SpanRecord]:
        read.append(path)
        return real_load_trace(path)

    monkeypatch.setattr(traceview, "load_trace", counting_load_trace)
    assert resolve_run("2026-run-a", tmp_path).name == "2026-run-a.jsonl"
    assert resolve_run("2026-run-a.jsonl", tmp_path).name == "2026-run-a.jsonl"
    assert read == []
    assert resolve_run("2026-run", tmp_path).name == "2026-run-a.jsonl"  # a prefix reads them all
    assert len(read) == 6


def test_a_path_or_a_name_with_folders_that_matches_nothing_is_simply_not_found(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "r1.jsonl", "r1", t0=T0)
    write_run(tmp_path / "outside.jsonl", "outside", t0=T0)
    for missing in (str(tmp_path / "typo.jsonl"), "../outside", "sub/r1", "/r1"):
        with pytest.raises(TraceNotFoundError, match="no saved trace matches"):
            resolve_run(missing, runs)


def test_a_trace_whose_last_line_was_cut_off_while_written_loads_the_lines_before_it(
    tmp_path: Path,
) -> None:
    whole = tmp_path / "whole.jsonl"
    write_run(whole, "run-cut", t0=T0)
    complete = load_trace(whole)
    cut = tmp_path / "cut.jsonl"
    cut.write_text(whole.read_text() + whole.read_text()[:100])  # no newline: cut mid-write
    assert load_trace(cut) == complete
    cut_in_a_character = tmp_path / "cut-utf8.jsonl"
    cut_in_a_character.write_bytes(whole.read_bytes() + '{"resourceSpans":"é'.encode()[:-1])
    assert load_trace(cut_in_a_character) == complete
    broken = tmp_path / "broken.jsonl"
    broken.write_text(whole.read_text()[:100] + "\n" + whole.read_text())  # not at the end
    loaded = load_trace(broken)
    assert loaded == complete
    assert [(d.number, d.reason) for d in loaded.damaged] == [(1, "not JSON")]
    not_a_trace = tmp_path / "hello.jsonl"
    not_a_trace.write_text("hello world")  # one line, no newline: not a cut-off trace
    with pytest.raises(TraceFileError, match="not JSON"):
        load_trace(not_a_trace)


def test_a_trace_line_may_hold_line_separators_other_than_newline(tmp_path: Path) -> None:
    path = tmp_path / "u2028.jsonl"
    write_run(path, "run-u2028", t0=T0)
    written = len(load_trace(path))
    # a captured text holding U+2028 or U+0085 is written raw (ensure_ascii=False)
    text = path.read_text(encoding="utf-8").replace('"run-u2028"', '"run-\u2028-\u0085"')
    path.write_text(text, encoding="utf-8")
    spans = load_trace(path)
    assert len(spans) == written
    assert any("run-\u2028-\u0085" in s.attributes.values() for s in spans)


def test_a_run_named_after_a_file_that_is_not_a_trace_says_so(tmp_path: Path) -> None:
    write_run(tmp_path / "good.jsonl", "good", t0=T0)
    (tmp_path / "events.jsonl").write_text('{"event": "started"}\n')
    with pytest.raises(TraceNotFoundError, match=r"events\.jsonl is not a saved trace"):
        resolve_run("events", tmp_path)
    assert resolve_run("good", tmp_path).name == "good.jsonl"


# --------------------------------------------------------------------------------------------
# CLI entry points


def test_show_and_list_entry_points(tmp_path: Path) -> None:
    write_run(tmp_path / "one.jsonl", "run-show-1")
    console = quiet_console()
    assert show(None, tmp_path, console) == 0
    assert show("run-show", tmp_path, console) == 0
    assert list_command(tmp_path, console) == 0
    assert show("nope", tmp_path, console) == 1
    text = console.export_text()
    assert text.count("invoke_agent researcher") == 2
    assert "run-show-1" in text and "lead" in text
    assert "error: no saved trace matches 'nope'" in text


def test_export_entry_point_sends_the_run(receiver: OtlpReceiver, run_file: Path) -> None:
    console = quiet_console()
    code = export_command("run-aaa", run_file.parent, receiver.http_endpoint, None, console)
    text = console.export_text()
    assert code == 0, text
    spans = receiver.wait_for_spans(5)
    assert sorted(s.name for s in spans) == sorted(r.name for r in load_trace(run_file))
    assert "sent 5 spans" in text
    assert f"{receiver.http_endpoint}/v1/traces" in text


def test_export_to_a_dead_endpoint_fails_cleanly(run_file: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    console = quiet_console()
    for protocol in ("http/protobuf", "grpc"):
        endpoint = f"http://127.0.0.1:{port}"
        code = export_command(None, run_file.parent, endpoint, protocol, console, timeout=2.0)
        assert code == 1
    text = console.export_text()
    assert [line.split(" ", 1)[0] for line in text.splitlines() if "127.0.0.1" in line] == [
        "error:",
        "error:",
    ]
    assert "Connection refused" in text and "UNAVAILABLE" in text


def test_export_to_a_port_that_does_not_speak_http_or_a_bad_url_is_a_one_line_error(
    receiver: OtlpReceiver, run_file: Path
) -> None:
    # the gRPC port answered HTTP/1 with binary frames: BadStatusLine went out as a traceback
    console = quiet_console()
    for endpoint in (receiver.grpc_endpoint, "http://127.0.0.1:abc"):
        code = export_command(None, run_file.parent, endpoint, "http/protobuf", console)
        assert code == 1
    text = " ".join(console.export_text().split())
    assert text.count("error:") == 2 and "Traceback" not in text
    assert "should --protocol be grpc" in text and "nonnumeric port" in text, text


def test_export_protocol_defaults_to_the_otel_variable(
    receiver: OtlpReceiver, run_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    console = quiet_console()
    code = export_command(None, run_file.parent, receiver.grpc_endpoint, None, console)
    assert code == 0, console.export_text()
    assert len(receiver.wait_for_spans(5)) == 5


def test_export_reports_collector_refusal(run_file: Path) -> None:
    console = quiet_console()
    with OtlpReceiver(http_status=400) as refusing:
        code = export_command(None, run_file.parent, refusing.http_endpoint, None, console)
    assert code == 1
    assert "HTTP 400" in console.export_text()


def test_export_without_endpoint_is_an_error(run_file: Path) -> None:
    console = quiet_console()
    assert export_command(None, run_file.parent, None, None, console) == 1
    assert "no OTLP endpoint" in console.export_text()
