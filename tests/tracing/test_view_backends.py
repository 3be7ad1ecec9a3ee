"""Traces that real backends show whole (DESIGN.md, "Tracing"), checked against the GenAI
conventions' message shapes and the OpenInference kinds Arize Phoenix reads; and the CLI keeps
its local trace file when it exports over OTLP (to a real local OTLP receiver).

- one ``tool`` message per tool result (Phoenix keeps one part per message);
- the root ``invoke_agent`` span carries the run's prompt and answer when content is captured,
  as GenAI messages and as ``input.value`` / ``output.value``;
- every span has a GenAI operation or an ``openinference.span.kind``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.cli import Cli
from support.otlp_receiver import OtlpReceiver

from orchestrator import Agent, run, tool
from orchestrator.models import ScriptedModel, response, text, tool_call

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@tool
def look(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: What to look up.
    """
    return f"notes on {topic}"


def agent() -> Agent:
    model = ScriptedModel(
        [
            response(
                tool_call("look", {"topic": "a"}, id="t1"),
                tool_call("look", {"topic": "b"}, id="t2"),
                tool_call("look", {"topic": "c"}, id="t3"),
            ),
            text("a, b and c are noted."),
        ]
    )
    return Agent("lead", "Look things up.", tools=[look], model=model)


async def traced_run(capture: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    if capture:
        monkeypatch.setenv(CAPTURE, "true")
    else:
        monkeypatch.delenv(CAPTURE, raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = await run(agent(), "Look up a, b and c.", tracer_provider=provider)
    assert result.status.value == "completed"
    return list(exporter.get_finished_spans())


async def test_each_parallel_tool_result_is_a_tool_message_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans = await traced_run(True, monkeypatch)
    second_chat = [s for s in spans if s.name.startswith("chat")][1]
    messages = json.loads(second_chat.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert all(len(m["parts"]) == 1 for m in tool_messages)
    assert [m["parts"][0] for m in tool_messages] == [
        {"type": "tool_call_response", "id": f"t{i}", "response": f"notes on {topic}"}
        for i, topic in ((1, "a"), (2, "b"), (3, "c"))
    ]


async def test_the_root_span_carries_the_runs_prompt_and_answer_when_captured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans = await traced_run(True, monkeypatch)
    [root] = [s for s in spans if s.parent is None]
    attrs = root.attributes
    assert attrs["input.value"] == "Look up a, b and c."
    assert attrs["output.value"] == "a, b and c are noted."
    assert json.loads(attrs["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Look up a, b and c."}]}
    ]
    assert json.loads(attrs["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "a, b and c are noted."}],
            "finish_reason": "stop",
        }
    ]


async def test_without_capture_no_content_reaches_the_root_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans = await traced_run(False, monkeypatch)
    [root] = [s for s in spans if s.parent is None]
    for key in ("input.value", "output.value", "gen_ai.input.messages", "gen_ai.output.messages"):
        assert key not in root.attributes


async def test_every_span_has_a_kind_a_backend_can_show(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = await traced_run(False, monkeypatch)
    turns = [s for s in spans if s.name.startswith("turn ")]
    assert turns and all(s.attributes["openinference.span.kind"] == "CHAIN" for s in turns)
    for s in spans:
        assert "gen_ai.operation.name" in s.attributes or "openinference.span.kind" in s.attributes


def test_the_cli_keeps_the_trace_file_when_it_exports_over_otlp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tree.py").write_text(
        "from orchestrator import Agent\n"
        "from orchestrator.models import ScriptedModel, text\n"
        "agent = Agent('solo', 'Answer.', model=ScriptedModel([text('hello')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with OtlpReceiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.http_endpoint
        # the command in this process (support.cli), with a tracer provider of its own
        proc = Cli(monkeypatch, tmp_path, lambda: env)("run", "tree.py", "hi", "--json")
        assert proc.returncode == 0, proc.stderr
        received = receiver.wait_for_spans(3)
    doc = json.loads(proc.stdout)
    assert doc["trace"].startswith(receiver.http_endpoint.split("/v1")[0])
    kept = tmp_path / doc["trace_file"]
    assert kept.is_file() and kept.name == f"{doc['run_id']}.jsonl"
    ids = {
        json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]
        for line in kept.read_text().splitlines()
        if line.strip()
    }
    assert ids and {s.span_id for s in received} >= {i.lower() for i in ids}
