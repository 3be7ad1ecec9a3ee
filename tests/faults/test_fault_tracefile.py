"""Trace files that survive faults: a failed write costs only its batch, a damaged line only
itself, and a run whose root span is missing is never reported as a success.

Every fault here is real: the file-size limit is a real ``RLIMIT_FSIZE`` in a child process
(SIGXFSZ ignored, so a write past it fails with ``EFBIG`` after writing what fit), the kill a
real ``SIGKILL`` of ``orchestrator run``, the crash a real ``os._exit`` from a tool. The trace
is then read back the three ways a user reads one: ``trace show``, ``trace list`` and
``trace export`` (to a real local OTLP receiver), the command in this process
(:mod:`support.cli`: reading a file back needs no process of its own).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli
from support.cli import cli_env as clean_env  # the CLI tests' environment
from support.otlp_receiver import OtlpReceiver

from orchestrator.tracing import configure_tracing
from orchestrator.tracing.tracefiles import (
    INTERRUPTED_NOTE,
    DamagedLine,
    list_runs,
    load_trace,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")

# A traced run (scripted model) that flushes its spans at each step (one line each), with the
# file-size limit lowered around one flush ("transient": the limit is lifted again, as when a
# full disk gets room back), around the last one, the batch holding the root span
# ("root-lost"), or never ("plain").
SIZE_LIMITED_RUN = textwrap.dedent(
    '''
    import json
    import resource
    import signal
    import sys
    from pathlib import Path

    import trio

    from orchestrator import Agent, run, tool
    from orchestrator.models import ScriptedModel, text, tool_call
    from orchestrator.tracing import configure_tracing

    trace_file, mode = Path(sys.argv[1]), sys.argv[2]
    setup = configure_tracing(run_file=trace_file, set_global=False)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, write() fails with EFBIG
    SOFT, HARD = resource.getrlimit(resource.RLIMIT_FSIZE)
    ROOM = 64  # bytes left under the limit: far less than one batch


    def flush(limited):
        if limited:
            resource.setrlimit(resource.RLIMIT_FSIZE, (trace_file.stat().st_size + ROOM, HARD))
        try:
            return setup.force_flush(10)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (SOFT, HARD))


    @tool
    def step(n: int) -> str:
        """Take a step (the result is big, so each batch is bigger than any write buffer).

        Args:
            n: Which step.
        """
        flushed = flush(mode == "transient" and n == 2)
        return f"step {n} flushed={flushed} " + "x" * 20_000


    agent = Agent(
        "solo",
        "Take the steps.",
        model=ScriptedModel([tool_call("step", {"n": n}) for n in (1, 2, 3)] + [text("done")]),
        tools=[step],
    )
    result = trio.run(lambda: run(agent, "go", tracer_provider=setup.tracer_provider))
    if mode == "root-lost":
        flush(True)  # the root's batch meets the limit
    setup.shutdown()
    print(json.dumps({
        "status": result.status.value,
        "run_id": result.run_id,
        "ended": setup.ended_spans,
        "exported": setup.exported_spans,
        "failed": setup.failed_spans,
    }))
    '''
)

SLOW_TREE = textwrap.dedent(
    '''
    """A lead that delegates to a worker, then naps; a tool that crashes the process."""

    import os
    import pathlib

    import trio

    from orchestrator import Agent, tool
    from orchestrator.models import ScriptedModel, text, tool_call

    HERE = pathlib.Path(__file__).parent


    @tool
    def echo(word: str) -> str:
        """Echo a word back.

        Args:
            word: The word.
        """
        return word


    @tool
    async def nap(seconds: float) -> str:
        """Sleep for a while (leaves a marker file when it starts).

        Args:
            seconds: How long to sleep.
        """
        (HERE / "napping").write_text("started")
        await trio.sleep(seconds)
        return "rested"


    @tool
    async def crash(code: int) -> str:
        """End the process at once, as a crash does (once some spans are on disk).

        Args:
            code: The exit status.
        """
        (HERE / "napping").write_text("started")
        for _ in range(600):  # at most 30 s: a bound for a loaded machine, not a pause
            if any(p.stat().st_size for p in (HERE / "runs").glob("*.jsonl")):
                break
            await trio.sleep(0.05)
        os._exit(code)


    worker = Agent("worker", "Echo, then report.", description="Echoes words.", tools=[echo])


    def lead_with(last_tool, args):
        return Agent(
            "lead",
            "Delegate, then rest.",
            model=ScriptedModel(
                {
                    "lead": [
                        tool_call("spawn_subagent", {"agent": "worker", "task": "echo hi"}),
                        tool_call(last_tool.name, args),
                        text("done"),
                    ],
                    "worker": [tool_call("echo", {"word": "hi"}), text("hi")],
                }
            ),
            tools=[last_tool],
            subagents=[worker],
        )


    napper = lead_with(nap, {"seconds": 60})
    crasher = lead_with(crash, {"code": 70})
    '''
)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The command in this process, in ``tmp_path``, in the environment of :func:`clean_env`."""
    return Cli(monkeypatch, tmp_path, clean_env)


def size_limited_run(tmp_path: Path, mode: str) -> tuple[Path, dict[str, Any]]:
    """Run SIZE_LIMITED_RUN in a child; returns its trace file and its figures."""
    script = tmp_path / "size_limited_run.py"
    script.write_text(SIZE_LIMITED_RUN)
    trace_file = tmp_path / "runs" / "limited.jsonl"
    proc = subprocess.run(
        [sys.executable, str(script), str(trace_file), mode],
        cwd=tmp_path,
        env=clean_env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["status"] == "completed", figures
    if mode != "plain":  # the limit was real: a write failed with EFBIG, its batch with it
        assert "File too large" in proc.stderr, proc.stderr
        assert figures["failed"] > 0, figures
    return trace_file, figures


def sent_to(cli: Cli, receiver: OtlpReceiver, run: str, expected: int) -> str:
    proc = cli("trace", "export", run, "--endpoint", receiver.http_endpoint)
    assert proc.returncode == 0, proc.stderr
    assert f"sent {expected} spans" in proc.stdout, proc.stdout
    assert len(receiver.wait_for_spans(expected)) == expected
    return proc.stdout


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


# --------------------------------------------------------------------------------------------
# A failed write costs only its batch.


def test_a_batch_cut_off_by_the_file_size_limit_costs_only_that_batch(
    cli: Cli, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    trace_file, figures = size_limited_run(tmp_path, "transient")
    # the cut batch was taken back: every line of the file is whole, none is damaged
    spans = load_trace(trace_file)
    assert spans.damaged == ()
    for line in trace_file.read_bytes().splitlines():
        assert json.loads(line)["resourceSpans"]
    # and only that batch is missing: the batches before and after it are all there
    assert len(spans) == figures["exported"] == figures["ended"] - figures["failed"]
    root = next(s for s in spans if s.parent_span_id is None)
    assert root.attributes["orchestrator.outcome"] == "completed"

    (run,) = list_runs(trace_file.parent)
    assert (run.run_id, run.status, run.outcome) == (figures["run_id"], "OK", "completed")
    assert not run.interrupted and run.span_count == len(spans)

    shown = cli("trace", "show", str(trace_file))
    assert shown.returncode == 0, shown.stderr
    assert "invoke_agent solo" in shown.stdout and "damaged" not in shown.stdout
    listed = cli("trace", "list")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"{figures['run_id']}\s+solo\s.*\s{len(spans)}\s+completed", listed.stdout)
    sent_to(cli, receiver, figures["run_id"], len(spans))


def test_a_run_whose_root_batch_could_not_be_written_is_listed_as_interrupted(
    cli: Cli, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    trace_file, figures = size_limited_run(tmp_path, "root-lost")
    spans = load_trace(trace_file)
    assert spans and spans.damaged == ()
    assert not [s for s in spans if s.name == "invoke_agent solo"]  # the root's batch was lost

    (run,) = list_runs(trace_file.parent)
    assert run.interrupted and (run.status, run.outcome) == ("ERROR", "interrupted")
    assert (run.run_id, run.root_agent) == (figures["run_id"], "solo")
    listed = cli("trace", "list")
    assert re.search(rf"{figures['run_id']}\s+solo\s.*\sinterrupted", listed.stdout), listed
    assert "completed" not in listed.stdout and " ok" not in listed.stdout
    shown = cli("trace", "show")
    assert shown.returncode == 0, shown.stderr
    assert INTERRUPTED_NOTE.split(";")[0] in " ".join(shown.stdout.split())
    sent_to(cli, receiver, figures["run_id"], len(spans))


def test_a_writer_appending_to_a_file_a_killed_writer_left_mid_line_starts_a_new_line(
    tmp_path: Path,
) -> None:
    trace_file = tmp_path / "runs" / "shared.jsonl"
    first = configure_tracing(run_file=trace_file, set_global=False)
    first.tracer_provider.get_tracer("orchestrator").start_span("first").end()
    first.shutdown()
    whole = trace_file.read_bytes()
    cut = whole[: len(whole) // 2]  # what a writer killed in the middle of a batch leaves
    trace_file.write_bytes(whole + cut)

    second = configure_tracing(run_file=trace_file, set_global=False)
    second.tracer_provider.get_tracer("orchestrator").start_span("second").end()
    second.shutdown()

    lines = trace_file.read_bytes().split(b"\n")
    assert lines[1] == cut  # the cut batch stays a line of its own, costing only itself
    spans = load_trace(trace_file)
    assert [s.name for s in spans] == ["first", "second"]
    assert spans.damaged == (DamagedLine(2, "not JSON", spans.damaged[0].detail),)


# --------------------------------------------------------------------------------------------
# A damaged line costs only itself, in show, list and export.


def test_damaged_lines_cost_only_themselves_in_show_list_and_export(
    cli: Cli, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    trace_file, figures = size_limited_run(tmp_path, "plain")
    run_id = figures["run_id"]
    intact = load_trace(trace_file)
    lines = trace_file.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4 and len(intact) == figures["ended"]
    # a batch cut off mid-write, a stray binary block, and one glued to the next batch
    damaged = [
        lines[0][: len(lines[0]) // 3] + b"\n",
        b"\x00\xff" * 40 + b"\n",
        lines[-1][: len(lines[-1]) // 2],
    ]
    trace_file.write_bytes(damaged[0] + b"".join(lines[:-1]) + damaged[1] + damaged[2] + lines[-1])
    spans = load_trace(trace_file)
    assert spans == intact
    assert [d.number for d in spans.damaged] == [1, len(lines) + 1, len(lines) + 2]
    note = "3 damaged lines skipped"

    shown = cli("trace", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert note in shown.stdout and "invoke_agent solo" in shown.stdout
    assert "interrupted" not in shown.stdout
    listed = cli("trace", "list")
    assert re.search(rf"{run_id}\s+solo\s.*\s{len(intact)}\s+completed", listed.stdout), listed
    assert f"{run_id}: {note}" in listed.stdout
    exported = sent_to(cli, receiver, run_id, len(intact))
    assert note in exported
    assert sorted(s.span_id for s in receiver.spans) == sorted(s.span_id for s in intact)


# --------------------------------------------------------------------------------------------
# A run whose root span is missing is never a success.


@pytest.mark.parametrize("how", ["sigkill", "crash"])
def test_a_killed_or_crashed_run_is_listed_and_shown_as_interrupted(
    cli: Cli, tmp_path: Path, receiver: OtlpReceiver, how: str
) -> None:
    (tmp_path / "agents.py").write_text(SLOW_TREE)
    # the run is a process of its own, to be killed or to crash; reading it back is not
    target = "agents.py:napper" if how == "sigkill" else "agents.py:crasher"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", target, "go"],
        cwd=tmp_path,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if how == "sigkill":
            # the worker has finished and its spans are on disk while the lead naps: kill it
            deadline = time.monotonic() + 30
            while not (
                (tmp_path / "napping").exists()
                and any(p.stat().st_size for p in (tmp_path / "runs").glob("*.jsonl"))
            ):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "no spans were flushed"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == (-signal.SIGKILL if how == "sigkill" else 70), stderr

    (trace_file,) = (tmp_path / "runs").glob("*.jsonl")
    run_id = trace_file.stem
    spans = load_trace(trace_file)
    names = {s.name for s in spans}
    assert "invoke_agent worker" in names and "invoke_agent lead" not in names
    # what remains says "OK": the worker completed, its spawn and the lead's first turn too
    assert all(s.status != "ERROR" for s in spans)

    (run,) = list_runs(tmp_path / "runs")
    assert run.interrupted and (run.status, run.outcome) == ("ERROR", "interrupted")
    assert (run.run_id, run.root_agent, run.span_count) == (run_id, "lead", len(spans))
    listed = cli("trace", "list")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"{run_id}\s+lead\s.*\s{len(spans)}\s+interrupted", listed.stdout), listed
    assert not re.search(r"\b(OK|ok|completed)\b", listed.stdout), listed.stdout

    shown = cli("trace", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert INTERRUPTED_NOTE.split(";")[0] in " ".join(shown.stdout.split())
    for name in ("invoke_agent worker", "execute_tool spawn_subagent", "turn lead"):
        assert name in shown.stdout  # the orphans are drawn, as roots of their own
    sent_to(cli, receiver, run_id, len(spans))
