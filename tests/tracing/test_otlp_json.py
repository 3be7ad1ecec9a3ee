"""OTLP/JSON trace lines: the direct span encoder prints exactly what the SDK's OTLP encoder and
protobuf's JSON printer print, on real run spans and on every shape a span can take."""

from __future__ import annotations

import enum
import http
import json
import math
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import TraceState
from opentelemetry.trace.status import Status, StatusCode

from orchestrator import Agent, run, tool
from orchestrator.models import ScriptedModel, text, tool_call
from orchestrator.tracing.otlp_json import decode_otlp_json, encode_otlp_json, encode_spans_json
from orchestrator.tracing.tracefiles import load_trace


def reference(spans: Sequence[ReadableSpan]) -> Any:
    return json.loads(encode_otlp_json(encode_spans(spans)))


def direct(spans: Sequence[ReadableSpan]) -> Any:
    return json.loads(encode_spans_json(spans))


def recording_provider(
    resource: Resource | None = None, limits: SpanLimits | None = None
) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource or Resource.create(), span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@tool
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up
    """
    if key == "boom":
        raise RuntimeError("lookup failed")
    return f"value of {key}"


async def test_the_spans_of_a_traced_tree_run_encode_as_the_sdk_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    provider, exporter = recording_provider(Resource.create({"service.name": "orchestrator"}))
    worker = Agent("worker", "Work.", description="works", tools=[lookup])
    lead = Agent("lead", "Lead.", subagents=[worker], tools=[lookup])
    model = ScriptedModel(
        {
            "lead": [
                [
                    tool_call("spawn_subagent", {"agent": "worker", "task": "find ä and 𝄞"}),
                    tool_call("lookup", {"key": "boom"}),
                ],
                text("done"),
            ],
            "worker": [tool_call("lookup", {"key": "x"}), text("found it")],
        }
    )
    result = await run(lead, "go", model=model, tracer_provider=provider)
    assert result.ok
    spans = exporter.get_finished_spans()
    assert len(spans) > 10
    assert direct(spans) == reference(spans)
    assert any(s.status.status_code is StatusCode.ERROR for s in spans)  # error statuses covered


def test_every_value_type_events_links_flags_and_groups_encode_as_the_sdk_would() -> None:
    provider_a, exporter_a = recording_provider(
        Resource.create({"service.name": "a", "ratio": 0.5}, schema_url="https://example/1"),
        SpanLimits(max_attributes=12, max_events=2, max_links=1),
    )
    provider_b, exporter_b = recording_provider(Resource({}))
    tracer = provider_a.get_tracer("scope-one", "1.2.3", schema_url="https://example/s")
    other_scope = provider_a.get_tracer("scope-two")
    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "value"), ("other", "x")]),
    )
    parent = trace.set_span_in_context(NonRecordingSpan(remote))
    link_ctx = SpanContext(trace_id=1, span_id=2, is_remote=False)
    with tracer.start_as_current_span(
        "root ☃",
        context=parent,
        kind=SpanKind.SERVER,
        links=[Link(link_ctx, {"why": "because", "n": 3}), Link(remote)],
    ) as root:
        root.set_attributes(
            {
                "str": 'text with "quotes" and ünicode',
                "empty": "",
                "yes": True,
                "no": False,
                "int": 42,
                "negative": -(2**63),
                "zero": 0,
                "float": 1.5,
                "whole float": 2.0,
                "nan": math.nan,
                "inf": -math.inf,
                "ints": (1, 2, 3),
                "strings": ["a", "b"],
                "bools": [True, False],
                "floats": (0.25,),
                "over the limit": "dropped",
            }
        )
        root.add_event("first", {"k": "v"}, timestamp=1_700_000_000_000_000_001)
        root.add_event("second")
        root.add_event("third, dropped")
        with tracer.start_as_current_span("child", kind=SpanKind.CLIENT) as child:
            child.set_status(Status(StatusCode.ERROR, "it failed: 'x'"))
        with other_scope.start_as_current_span("", kind=SpanKind.PRODUCER) as unnamed:
            unnamed.set_status(Status(StatusCode.OK))
    with provider_b.get_tracer("b").start_as_current_span("consumer", kind=SpanKind.CONSUMER):
        pass
    spans = [*exporter_a.get_finished_spans(), *exporter_b.get_finished_spans()]
    assert len(spans) == 4
    encoded = direct(spans)
    assert encoded == reference(spans)
    assert len(encoded["resourceSpans"]) == 2  # two resources, the first with two scopes
    assert len(encoded["resourceSpans"][0]["scopeSpans"]) == 2
    # and the line reads back into the same protobuf request
    assert decode_otlp_json(encode_spans_json(spans)) == encode_spans(spans)


def test_an_attribute_that_cannot_be_encoded_is_skipped_like_the_sdk_does() -> None:
    provider, exporter = recording_provider()
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attribute("fine", 1)
    (finished,) = exporter.get_finished_spans()
    # a value too large for int64 only reaches the encoder by bypassing the SDK's checks
    finished._attributes = {"fine": 1, "huge": 2**64}  # type: ignore[assignment]
    assert direct([finished]) == reference([finished])


async def test_a_trace_file_written_by_the_exporter_loads_and_keeps_every_span(
    tmp_path: Any,
) -> None:
    from orchestrator.tracing import OtlpJsonLinesExporter

    provider, exporter = recording_provider()
    result = await run(
        Agent("solo", "Answer.", tools=[lookup]),
        "go",
        model=ScriptedModel([tool_call("lookup", {"key": "k"}), text("ok")]),
        tracer_provider=provider,
    )
    assert result.ok
    spans = exporter.get_finished_spans()
    path = tmp_path / "run.jsonl"
    file_exporter = OtlpJsonLinesExporter(path)
    file_exporter.export(spans[:2])
    file_exporter.export(spans[2:])
    file_exporter.shutdown()
    loaded = load_trace(path)
    assert sorted(s.span_id for s in loaded) == sorted(f"{s.context.span_id:016x}" for s in spans)
    # the owner's only (captured content and errors may quote secrets), whatever the umask
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


class Color(str, enum.Enum):  # noqa: UP042 - the mixin kind, whose str() is its name
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float, enum.Enum):
    HALF = 0.5


def test_enum_and_other_subclass_values_encode_by_their_value_and_at_once() -> None:
    """An int subclass once sent ``x in range(-2**63, 2**63)`` into a scan of the whole range
    with the GIL held: the export thread froze the process."""
    provider, exporter = recording_provider()
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attributes(
            {
                "status": http.HTTPStatus.OK,
                "level": Level.HIGH,
                "color": Color.RED,
                "ratio": Ratio.HALF,
                "levels": [Level.HIGH, Level.HIGH],
            }
        )
    spans = exporter.get_finished_spans()
    encoded = direct(spans)
    assert encoded == reference(spans)
    values = {
        a["key"]: a["value"]
        for a in encoded["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    }
    assert values["status"] == {"intValue": "200"} and values["color"] == {"stringValue": "red"}


def test_a_lone_surrogate_costs_only_its_attribute_not_the_batch(tmp_path: Path) -> None:
    from orchestrator.tracing import configure_tracing

    run_file = tmp_path / "t.jsonl"
    setup = configure_tracing(run_file=run_file, set_global=False)
    tracer = setup.tracer_provider.get_tracer("t")
    for i in range(20):
        with tracer.start_as_current_span(f"s{i}") as span:
            span.set_attribute("kept", i)
            if i == 10:  # e.g. a file name read with surrogateescape
                span.set_attribute("listing", "caf\udce9.txt")
    assert setup.shutdown()
    assert (setup.exported_spans, setup.failed_spans) == (20, 0)
    loaded = {s.name: s for s in load_trace(run_file)}
    assert len(loaded) == 20
    assert loaded["s10"].attributes == {"kept": 10}  # only the unencodable attribute is gone
