"""Wide runs with message content captured arrive whole in Jaeger: every span, in requests under
the 4 MiB its OTLP gRPC receiver takes by default (it refuses a bigger request whole).

A batch is 512 spans; with content capture each span may carry 16 KiB per message attribute, so
a batch can be several times the limit: the exporters split batches by size
(``orchestrator.tracing.batches``), live over gRPC and HTTP, and ``trace export`` splits a
trace file's lines (each one batch) the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import CAPTURE, cli_env, file_spans, orchestrator, run_tree, trace_id_of
from support.jaeger import GRPC_MAX_REQUEST, Jaeger

from orchestrator.tracing.batches import split_request
from orchestrator.tracing.otlp_json import decode_otlp_json

BIG_TASK = "16000"  # characters per child's task: each span holding it carries ~16 KB


def spans_per_child_run(children: int) -> int:
    # lead: invoke, 2 turns, 2 chats, one spawn per child; a child: invoke, turn, chat
    return 5 + children * 4


def line_requests(path: Path) -> list[Any]:
    """The trace file's lines as the OTLP requests they were made from (one batch each)."""
    return [decode_otlp_json(json.loads(line)) for line in path.read_text().splitlines()]


def largest_line_request(path: Path) -> int:
    return max(request.ByteSize() for request in line_requests(path))


def test_a_5000_child_run_with_content_arrives_whole_over_grpc(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    run = run_tree(
        "wide",
        tmp_path,
        endpoint=jaeger.otlp_grpc,
        protocol="grpc",
        JAEGER_TREE_CHILDREN="5000",
        **{CAPTURE: "true"},
    )
    spans = file_spans(run.trace_file)
    assert len(spans) == spans_per_child_run(5000)
    trace = jaeger.wait_for_spans(trace_id_of(spans), len(spans), timeout=120)
    assert len(trace["spans"]) == len(spans)
    names = [s["operationName"] for s in trace["spans"]]
    assert names.count("invoke_agent worker") == 5000
    assert names.count("execute_tool spawn_subagent") == 5000


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_batches_over_4_mib_arrive_whole_split_into_smaller_requests(
    jaeger: Jaeger, tmp_path: Path, protocol: str
) -> None:
    run = run_tree(
        "wide",
        tmp_path,
        endpoint=jaeger.otlp_grpc if protocol == "grpc" else jaeger.otlp_http,
        protocol=protocol,
        JAEGER_TREE_CHILDREN="300",
        JAEGER_TREE_TASK_CHARS=BIG_TASK,
        **{CAPTURE: "true"},
    )
    spans = file_spans(run.trace_file)
    # the run's batches (the trace file's lines are its batches too) are over the limit: sent
    # as they are, Jaeger's gRPC receiver would refuse them
    assert largest_line_request(run.trace_file) > GRPC_MAX_REQUEST
    trace = jaeger.wait_for_spans(trace_id_of(spans), len(spans))
    assert len(trace["spans"]) == len(spans) == spans_per_child_run(300)


def test_trace_export_splits_a_line_over_4_mib(jaeger: Jaeger, tmp_path: Path) -> None:
    run = run_tree(
        "wide",
        tmp_path,
        JAEGER_TREE_CHILDREN="300",
        JAEGER_TREE_TASK_CHARS=BIG_TASK,
        **{CAPTURE: "true"},
    )
    assert largest_line_request(run.trace_file) > GRPC_MAX_REQUEST
    proc = orchestrator(
        "trace",
        "export",
        str(run.trace_file),
        "--endpoint",
        jaeger.otlp_grpc,
        "--protocol",
        "grpc",
        cwd=tmp_path,
        env=cli_env(),
    )
    assert proc.returncode == 0, proc.stderr
    spans = file_spans(run.trace_file)
    assert f"sent {len(spans)} spans" in proc.stdout
    trace = jaeger.wait_for_spans(trace_id_of(spans), len(spans))
    assert len(trace["spans"]) == len(spans)
    parts = [part for line in line_requests(run.trace_file) for part in split_request(line)]
    assert len(parts) > len(line_requests(run.trace_file))
    assert max(part.ByteSize() for part in parts) <= GRPC_MAX_REQUEST
