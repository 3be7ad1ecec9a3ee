"""A resumed run in Jaeger (DESIGN.md, "Durable runs"): its trace is its own, and its root is a
root there, with the link to the first run's root shown as a reference into the other trace.

Jaeger's UI takes a span's first reference as its parent, CHILD_OF or FOLLOWS_FROM alike, and
a span whose parent is not in the trace as a root; it names a trace after the span with no
reference to a span of the same trace. So the resumed root must have no CHILD_OF reference and
only references into the first trace, and the first trace must be whole (its root ended: a run
cut by its timeout ends its spans).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import cli_env, file_spans, orchestrator, trace_id_of
from support.jaeger import Jaeger

CRASH_TREE = Path(__file__).resolve().parents[1] / "support" / "crash_tree.py"


def ui_trace_name(trace: dict[str, Any]) -> str:
    """The name Jaeger's UI gives a trace, by jaeger-ui's rule: the service and operation of a
    span with no reference to a span of this trace (fewest references, then earliest, first);
    without one, ``<trace-without-root-span>``."""
    ids = {s["spanID"] for s in trace["spans"]}
    roots = [
        s
        for s in trace["spans"]
        if not any(r["traceID"] == s["traceID"] and r["spanID"] in ids for r in s["references"])
    ]
    if not roots:
        return "<trace-without-root-span>"
    root = min(roots, key=lambda s: (len(s["references"]), s["startTime"]))
    service = trace["processes"][root["processID"]]["serviceName"]
    return f"{service}: {root['operationName']}"


def test_a_resumed_run_is_a_trace_of_its_own_linked_to_the_first_runs_root(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    env = cli_env(
        CRASH_DIR=str(tmp_path),
        CRASH_CHILDREN="2",
        OTEL_EXPORTER_OTLP_ENDPOINT=jaeger.otlp_http,
    )
    runs = ("--runs-dir", str(tmp_path / "runs"), "--json")
    # the second worker's fetch holds until the run's timeout cuts it
    first = orchestrator(
        "run", str(CRASH_TREE), "go", "--timeout", "2", *runs, cwd=tmp_path,
        env={**env, "CRASH_HOLD": "fetch:b"},
    )  # fmt: skip
    cut = json.loads(first.stdout)
    assert cut["status"] == "timeout", first.stderr
    second = orchestrator("resume", cut["run_id"], *runs, cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    resumed = json.loads(second.stdout)
    assert resumed["status"] == "completed"

    first_spans = file_spans(tmp_path / cut["trace_file"])
    second_spans = file_spans(tmp_path / resumed["trace_file"])
    first_id, second_id = trace_id_of(first_spans), trace_id_of(second_spans)
    assert first_id != second_id
    first_trace = jaeger.wait_for_spans(first_id, len(first_spans))
    second_trace = jaeger.wait_for_spans(second_id, len(second_spans))
    [first_root] = [s for s in first_trace["spans"] if not s["references"]]
    assert first_root["operationName"] == "invoke_agent lead"

    [root] = [s for s in second_trace["spans"] if s["operationName"] == "invoke_agent lead"]
    # a root of its own trace, its only reference the link into the first trace
    assert root["references"] == [
        {"refType": "FOLLOWS_FROM", "traceID": first_id, "spanID": first_root["spanID"]}
    ]
    assert all(
        r["traceID"] == second_id and r["refType"] == "CHILD_OF"
        for s in second_trace["spans"]
        if s is not root
        for r in s["references"]
    )
    assert ui_trace_name(second_trace) == "orchestrator: invoke_agent lead"
    assert ui_trace_name(first_trace) == "orchestrator: invoke_agent lead"
    # the OTLP view: no parent, one link
    [v3_root] = [s for s in jaeger.trace_v3(second_id) if s["name"] == "invoke_agent lead"]
    assert not v3_root.get("parentSpanId")
    assert [(link["traceId"], link["spanId"]) for link in v3_root["links"]] == [
        (first_id, first_root["spanID"])
    ]
