"""``tracing/check_jaeger.py RUN``, the script tracing/README.md gives users to check that a run
arrived: it finds the run in a real Jaeger by its run id, compares the spans with the trace file
and prints the agent tree's shape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import cli_env, file_spans, run_tree, trace_id_of
from support.jaeger import Jaeger

SCRIPT = Path(__file__).resolve().parents[2] / "tracing" / "check_jaeger.py"


def check(jaeger: Jaeger, run: str, work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), run, "--query", jaeger.query, "--runs-dir", "runs"],
        cwd=work,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_run_that_arrived_is_reported_whole_with_its_agent_tree(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    run = run_tree("team", tmp_path, endpoint=jaeger.otlp_http)
    jaeger.wait_for_spans(trace_id_of(file_spans(run.trace_file)), 16)
    proc = check(jaeger, run.run_id[:8], tmp_path)  # a prefix, resolved by the trace file
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(
        ": 16 spans (3 agents, 5 model calls, 3 tool calls, 4 with error=true)"
    )
    assert lines[1].startswith(f"  {jaeger.query}/trace/")
    assert lines[2] == "  invoke_agent lead  [completed]"
    # the two children, in the order they started (both start at once: either may be first)
    assert set(lines[3:5]) in (
        {"  ├─ invoke_agent checker  [error]", "  └─ invoke_agent researcher  [completed]"},
        {"  ├─ invoke_agent researcher  [completed]", "  └─ invoke_agent checker  [error]"},
    )
    assert lines[-1] == f"run {run.run_id}: 16 spans in Jaeger, 16 in its trace files: whole"


def test_a_run_jaeger_never_saw_is_reported_missing(jaeger: Jaeger, tmp_path: Path) -> None:
    run = run_tree("team", tmp_path)  # to the trace file only
    proc = check(jaeger, run.run_id, tmp_path)
    assert proc.returncode == 1
    assert f"run {run.run_id} is not in Jaeger" in proc.stdout


def test_wide_siblings_are_counted_not_listed(jaeger: Jaeger, tmp_path: Path) -> None:
    run = run_tree("wide", tmp_path, endpoint=jaeger.otlp_grpc, protocol="grpc",
                   JAEGER_TREE_CHILDREN="50")  # fmt: skip
    spans = 5 + 50 * 4
    jaeger.wait_for_spans(trace_id_of(file_spans(run.trace_file)), spans)
    proc = check(jaeger, run.run_id, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  └─ invoke_agent worker ×50  [50 completed]" in proc.stdout.splitlines()
