"""The trace file holds the run, and the readers survive hostile files (issue 39, part 7).

Another library's root spans beside a run (the MCP SDK's connection spans made three traces of
their own in a run's file), a line nested too deeply for any JSON parser, a chain of spans
thousands deep: ``trace list`` names the run's own root agent, ``trace show`` draws the run
first and in lines of bounded width, and a file that cannot be read is skipped with a one-line
warning naming it, never taking the other runs down.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from opentelemetry.trace import Status, StatusCode
from rich.console import Console
from support.cli import Cli
from support.mcp_servers import SERVER

from orchestrator import Agent, run
from orchestrator.models import ScriptedModel, text
from orchestrator.tracing import configure_tracing
from orchestrator.tracing.tracefiles import list_runs, load_trace, resolve_run
from orchestrator.tracing.view import render_trace

T0 = 1_700_000_000_000_000_000


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


def good_run(path: Path) -> None:
    setup = configure_tracing(run_file=path, set_global=False)
    agent = Agent("solo", "Answer.", model=ScriptedModel([text("done")]))
    trio.run(lambda: run(agent, "go", tracer_provider=setup.tracer_provider))
    setup.shutdown()


# -- another library's roots beside the run ----------------------------------------------


MCP_PROGRAM = """
import sys, trio
from pathlib import Path
from orchestrator import Agent, run
from orchestrator.mcp import MCPServer
from orchestrator.models import ScriptedModel, text, tool_call
from orchestrator.tracing import configure_tracing

setup = configure_tracing(run_file=Path(sys.argv[1]))  # the global provider: the SDK's too
server = MCPServer.stdio("test", sys.executable, [sys.argv[2], "--marker-dir", sys.argv[3]])
model = ScriptedModel([tool_call("test__echo", {"text": "hi"}), text("echoed")])
agent = Agent("root", "Echo.", tools=[server], model=model)
print(trio.run(lambda: run(agent, "go", log_dir=sys.argv[3])).status.value)
setup.shutdown()
"""


def test_the_mcp_sdks_connection_spans_make_no_traces_of_their_own_in_the_runs_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    (tmp_path / "program.py").write_text(MCP_PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "program.py", str(path), str(SERVER), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "completed", done.stderr
    spans = load_trace(path)
    assert len({s.trace_id for s in spans}) == 1, sorted({s.name for s in spans})
    assert not [
        s.name for s in spans if s.name.startswith(("MCP send server/", "MCP send tools/l"))
    ]
    # the call's own SDK span is kept, under the call's execute_tool span
    by_id = {s.span_id: s for s in spans}
    (call,) = [s for s in spans if s.name == "MCP send tools/call echo"]
    assert by_id[call.parent_span_id or ""].name == "execute_tool test__echo"
    (summary,) = list_runs(tmp_path, cache=False)
    assert (summary.root_agent, summary.outcome) == ("root", "completed")


def test_list_and_show_pick_the_runs_root_agent_whatever_roots_started_before_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mixed.jsonl"
    setup = configure_tracing(run_file=path, set_global=False)
    other = setup.tracer_provider.get_tracer("mcp-python-sdk")
    early = other.start_span("MCP send server/discover")  # a root of its own, before the run
    early.set_status(Status(StatusCode.ERROR, "method not found"))
    early.end()
    agent = Agent("solo", "Answer.", model=ScriptedModel([text("done")]))
    trio.run(lambda: run(agent, "go", tracer_provider=setup.tracer_provider))
    setup.shutdown()
    (summary,) = list_runs(tmp_path, cache=False)
    assert (summary.root_agent, summary.status, summary.outcome) == ("solo", "OK", "completed")
    assert not summary.interrupted
    out = io.StringIO()
    render_trace(load_trace(path), Console(file=out, width=120, color_system=None))
    shown = out.getvalue()
    # the run's tree first; the other library's trace after it, still shown
    assert shown.index("invoke_agent solo") < shown.index("MCP send server/discover")


def test_a_file_of_another_librarys_spans_alone_is_still_listed_by_its_root(
    tmp_path: Path,
) -> None:
    setup = configure_tracing(run_file=tmp_path / "app.jsonl", set_global=False)
    span = setup.tracer_provider.get_tracer("myapp").start_span("handle request")
    span.set_status(Status(StatusCode.OK))
    span.end()
    setup.shutdown()
    (summary,) = list_runs(tmp_path, cache=False)
    assert (summary.root_agent, summary.status) == ("handle request", "OK")


# -- a file no reader can take -----------------------------------------------------------


def test_a_line_nested_too_deeply_is_skipped_with_a_warning_and_hides_no_other_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    good_run(tmp_path / "good.jsonl")
    n = 200_000
    (tmp_path / "nested.jsonl").write_text('{"resourceSpans":' + "[" * n + "]" * n + "}\n")
    (tmp_path / "events.jsonl").write_text('{"event": "not a trace"}\n')  # not ours: quiet
    with caplog.at_level(logging.WARNING, logger="orchestrator.tracing"):
        runs = list_runs(tmp_path)
        again = list_runs(tmp_path)  # the cache does not silence it
    assert [r.path.name for r in runs] == [r.path.name for r in again] == ["good.jsonl"]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("nested.jsonl:1: JSON nested too deeply" in w for w in warned)
    assert resolve_run(None, tmp_path).name == "good.jsonl"
    # the command: the other run is listed and shown, the bad file named in one line
    cli = Cli(monkeypatch, tmp_path, lambda: dict(os.environ))
    listed = cli("trace", "list", "--runs-dir", str(tmp_path))
    assert listed.returncode == 0 and "good.jsonl" in listed.stdout, listed.stderr
    assert [line for line in listed.stderr.splitlines() if "nested.jsonl" in line] == [
        line for line in listed.stderr.splitlines() if line.strip()
    ]
    assert listed.stderr.count("\n") == 1 and "Traceback" not in listed.stderr
    shown = cli("trace", "show", "--runs-dir", str(tmp_path))
    assert shown.returncode == 0 and "invoke_agent solo" in shown.stdout, shown.stderr


# -- a chain thousands deep --------------------------------------------------------------


def chain(path: Path, depth: int) -> None:
    spans = [
        {
            "traceId": "ab" * 16,
            "spanId": f"{i + 1:016x}",
            **({"parentSpanId": f"{i:016x}"} if i else {}),
            "name": f"step {i}",
            "startTimeUnixNano": str(T0 + i),
            "endTimeUnixNano": str(T0 + 10**9 - i),
        }
        for i in range(depth)
    ]
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")


def drawn(path: Path) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    render_trace(load_trace(path), console, fit_names=True)
    return out.getvalue().splitlines()


def test_a_chain_thousands_deep_draws_in_lines_of_bounded_width(tmp_path: Path) -> None:
    chain(tmp_path / "deep.jsonl", 5_000)
    lines = drawn(tmp_path / "deep.jsonl")
    rows = [line for line in lines if "step " in line]
    assert len(rows) == 5_000  # every span still has its row, in order
    assert [int(r.split("step ")[1].split()[0]) for r in rows] == list(range(5_000))
    assert max(map(len, lines)) < 400  # the guides of a 5,000-deep chain were 15,000 wide
    assert rows[-1].startswith("…  ") and "└─ step 4999" in rows[-1]


def test_a_chain_within_the_fold_keeps_every_guide(tmp_path: Path) -> None:
    chain(tmp_path / "chain.jsonl", 60)
    rows = [line for line in drawn(tmp_path / "chain.jsonl") if "step " in line]
    assert "…" not in "".join(rows)
    assert rows[-1].startswith(" " * (3 * 58) + "└─ step 59")
