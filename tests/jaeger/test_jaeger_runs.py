"""Runs read back whole from a real Jaeger (DESIGN.md, "Tracing": "Jaeger is checked for real").

The CLI runs the ``team`` tree (a lead, a researcher whose tool is retried once, a checker whose
model breaks) with its spans sent live over OTLP/HTTP and over gRPC, and a run traced only to
its file is sent later with ``trace export``; each is read back through the query API the UI
draws from: ``/api/v3/traces/{id}`` (OTLP JSON) and the legacy ``/api/traces`` (spans with
references, tags and logs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Run, cli_env, file_spans, orchestrator, run_tree, trace_id_of
from support.jaeger import Jaeger, attribute, tag

PROTOCOLS = ["http/protobuf", "grpc"]


@pytest.fixture(scope="module", params=[*PROTOCOLS, "trace export"])
def sent(
    request: pytest.FixtureRequest, jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Run, str, dict[str, Any]]:
    """The team run, sent one of three ways; with its trace id and the legacy trace, read
    once it holds every span of the trace file."""
    work = tmp_path_factory.mktemp("team")
    how = request.param
    if how == "trace export":
        run = run_tree("team", work)  # to the trace file only
        proc = orchestrator(
            "trace",
            "export",
            run.run_id,
            "--endpoint",
            jaeger.otlp_http,
            "--runs-dir",
            str(work / "runs"),
            cwd=work,
            env=cli_env(JAEGER_UI_URL=jaeger.query),
        )
        assert proc.returncode == 0, proc.stderr
    else:
        endpoint = jaeger.otlp_http if how == "http/protobuf" else jaeger.otlp_grpc
        run = run_tree("team", work, endpoint=endpoint, protocol=how)
    spans = file_spans(run.trace_file)
    trace_id = trace_id_of(spans)
    if how == "trace export":
        assert f"see it in Jaeger: {jaeger.query}/trace/{trace_id}" in proc.stdout
    return run, trace_id, jaeger.wait_for_spans(trace_id, len(spans))


def by_name(trace: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in trace["spans"] if s["operationName"] == name]


def test_the_run_is_one_trace_holding_every_span_of_its_file(
    sent: tuple[Run, str, dict[str, Any]], jaeger: Jaeger
) -> None:
    run, trace_id, trace = sent
    spans = file_spans(run.trace_file)
    assert len(trace["spans"]) == len(spans) == 16
    assert {s["spanID"] for s in trace["spans"]} == {s["spanId"] for s in spans}
    assert len(jaeger.trace_v3(trace_id)) == len(spans)
    # the run id as the conversation id finds this trace and no other
    found = jaeger.search("orchestrator", tags=json.dumps({"gen_ai.conversation.id": run.run_id}))
    assert [t["traceID"] for t in found] == [trace_id]


def test_references_draw_the_agent_tree(sent: tuple[Run, str, dict[str, Any]]) -> None:
    run, _, trace = sent
    parents = {s["spanId"]: s.get("parentSpanId", "") for s in file_spans(run.trace_file)}
    spans = {s["spanID"]: s for s in trace["spans"]}
    for span in trace["spans"]:
        refs = span["references"]
        if not parents[span["spanID"]]:
            assert refs == [], span["operationName"]  # the root: nothing the UI takes as parent
            continue
        # one reference, CHILD_OF the span's parent: what the UI draws the tree from
        assert [(r["refType"], r["spanID"]) for r in refs] == [
            ("CHILD_OF", parents[span["spanID"]])
        ]
    root = [s for s in trace["spans"] if not s["references"]]
    assert [s["operationName"] for s in root] == ["invoke_agent lead"]
    for name in ("invoke_agent researcher", "invoke_agent checker"):
        [child] = by_name(trace, name)
        spawn = spans[child["references"][0]["spanID"]]
        assert spawn["operationName"] == "execute_tool spawn_subagent"
        turn = spans[spawn["references"][0]["spanID"]]
        assert turn["operationName"] == "turn lead"


def test_service_and_operation_names_are_the_runs(
    sent: tuple[Run, str, dict[str, Any]], jaeger: Jaeger
) -> None:
    _, _, trace = sent
    [process] = trace["processes"].values()
    assert process["serviceName"] == "orchestrator"
    assert "orchestrator" in jaeger.get_json("/api/services")["data"]
    operations = set(jaeger.get_json("/api/services/orchestrator/operations")["data"])
    assert {
        "invoke_agent lead",
        "invoke_agent researcher",
        "invoke_agent checker",
        "turn lead",
        "chat team-fn",
        "execute_tool spawn_subagent",
        "execute_tool look",
    } <= operations


def test_genai_attributes_are_tags_a_search_finds(
    sent: tuple[Run, str, dict[str, Any]], jaeger: Jaeger
) -> None:
    run, trace_id, trace = sent
    [researcher] = by_name(trace, "invoke_agent researcher")
    assert tag(researcher, "gen_ai.agent.name") == "researcher"
    assert tag(researcher, "gen_ai.operation.name") == "invoke_agent"
    assert tag(researcher, "gen_ai.conversation.id") == run.run_id
    found = jaeger.search("orchestrator", tags=json.dumps({"gen_ai.agent.name": "researcher"}))
    assert trace_id in {t["traceID"] for t in found}
    found = jaeger.search(
        "orchestrator",
        operation="execute_tool look",
        tags=json.dumps({"gen_ai.tool.name": "look", "gen_ai.conversation.id": run.run_id}),
    )
    assert [t["traceID"] for t in found] == [trace_id]


def test_a_failed_agent_is_an_error_and_the_others_are_not(
    sent: tuple[Run, str, dict[str, Any]], jaeger: Jaeger
) -> None:
    run, trace_id, trace = sent
    [checker] = by_name(trace, "invoke_agent checker")
    [researcher] = by_name(trace, "invoke_agent researcher")
    assert tag(checker, "error") is True
    assert tag(checker, "orchestrator.outcome") == "error"
    assert tag(researcher, "error") is None
    found = jaeger.search(
        "orchestrator", tags=json.dumps({"error": "true", "gen_ai.conversation.id": run.run_id})
    )
    assert [t["traceID"] for t in found] == [trace_id]
    [v3_checker] = [s for s in jaeger.trace_v3(trace_id) if s["name"] == "invoke_agent checker"]
    assert v3_checker["status"]["code"] == 2  # STATUS_CODE_ERROR, as a number


def test_events_arrive_as_logs(sent: tuple[Run, str, dict[str, Any]], jaeger: Jaeger) -> None:
    _, trace_id, trace = sent
    [look] = by_name(trace, "execute_tool look")
    [log] = look["logs"]
    fields = {f["key"]: f["value"] for f in log["fields"]}
    assert fields["event"] == "orchestrator.retry"
    assert fields["orchestrator.retry.attempt"] == 1
    assert fields["error.type"] == "ConnectionError"
    assert look["startTime"] <= log["timestamp"] <= look["startTime"] + look["duration"]
    [v3_look] = [s for s in jaeger.trace_v3(trace_id) if s["name"] == "execute_tool look"]
    [event] = v3_look["events"]
    assert event["name"] == "orchestrator.retry"
    assert attribute(event, "error.type") == "ConnectionError"


def test_the_trace_file_and_jaeger_agree_on_every_span(
    sent: tuple[Run, str, dict[str, Any]], jaeger: Jaeger
) -> None:
    run, trace_id, _ = sent
    mine = {s["spanId"]: s for s in file_spans(run.trace_file)}
    theirs = {s["spanId"]: s for s in jaeger.trace_v3(trace_id)}
    assert theirs.keys() == mine.keys()
    for span_id, span in mine.items():
        back = theirs[span_id]
        assert back["name"] == span["name"]
        assert back.get("parentSpanId", "") == span.get("parentSpanId", "")
        assert back["startTimeUnixNano"] == span["startTimeUnixNano"]
        assert back["endTimeUnixNano"] == span["endTimeUnixNano"]
        # every attribute arrives, typed (Jaeger keeps OTLP types through its v3 API)
        assert {a["key"]: a["value"] for a in back.get("attributes", [])} == {
            a["key"]: a["value"] for a in span.get("attributes", [])
        }, span["name"]


def test_the_export_prints_no_jaeger_link_without_jaeger_ui_url(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    run = run_tree("team", tmp_path)
    args = ("trace", "export", run.run_id, "--endpoint", jaeger.otlp_grpc, "--protocol", "grpc")
    proc = orchestrator(*args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert "sent 16 spans" in proc.stdout and "Jaeger" not in proc.stdout
    jaeger.wait_for_spans(trace_id_of(file_spans(run.trace_file)), 16)
