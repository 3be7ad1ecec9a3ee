"""No secret reaches a span through a string the model or the user chose, with content capture
off or on, on the caller's own tracer provider (no CLI, no exporter setup of ours)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import Agent, ModelError, run, tool
from orchestrator.models import FunctionModel, response, text, tool_call

SECRET = "plain-looking-secret-4242"  # shaped like no known key: only the environment says so


def every_text(span: ReadableSpan) -> list[str]:
    texts = [span.name, span.status.description or ""]
    values: list[Any] = list((span.attributes or {}).values())
    for event in span.events:
        texts.append(event.name)
        values.extend((event.attributes or {}).values())
    for value in values:
        texts.extend(str(v) for v in (value if isinstance(value, tuple | list) else [value]))
    return texts


@tool
def lookup(query: str) -> str:
    """Look up.

    Args:
        query: what
    """
    return "nothing"


def turn(request: Any) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def lead_steps(request: Any) -> Any:
    if turn(request) == 0:
        return [
            tool_call(SECRET, {}, id="id-" + SECRET),
            tool_call("lookup", {"query": SECRET}),
            tool_call("spawn_subagent", {"agent": "broken", "task": SECRET}),
        ]
    if turn(request) == 1:
        return response(text("odd"), stop_reason="reason-" + SECRET)
    return text("never")


def broken_steps(request: Any) -> Any:
    raise ModelError("failed", kind="kind-" + SECRET)


@pytest.mark.parametrize("capture", ["false", "true"])
async def test_no_span_name_attribute_event_or_status_holds_a_secret(
    monkeypatch: pytest.MonkeyPatch, capture: str
) -> None:
    monkeypatch.setenv("MY_SERVICE_KEY", SECRET)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", capture)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    broken = Agent(
        "broken", "Break.", description="uses " + SECRET, model=FunctionModel(broken_steps)
    )
    lead = Agent(
        "lead",
        "Lead.",
        model=FunctionModel(lead_steps),
        tools=[lookup],
        subagents=[broken],
    )
    result = await run(lead, "go " + SECRET, tracer_provider=provider)
    assert result.status.value == "error"
    spans = exporter.get_finished_spans()
    names = {s.name for s in spans}
    assert "execute_tool [REDACTED]" in names  # the model's tool name was used, and redacted
    texts = [t for s in spans for t in every_text(s)]
    assert "id-[REDACTED]" in texts and "kind-[REDACTED]" in texts
    assert "reason-[REDACTED]" in texts and "uses [REDACTED]" in texts
    assert [t for t in texts if SECRET in t] == []
