"""The trace-file writer and deeply nested attribute values.

The SDK lets a program's own spans carry nested values (maps, arrays of arrays); the writer
encodes them by recursion, so one nested past what the stack holds would fail the whole batch
of spans with a RecursionError. An attribute nested deeper than the writer's limit is left out
and logged, as any value it cannot encode is, and the span and the rest of the batch are written.
"""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from orchestrator.tracing.otlp_json import encode_spans_json


def span(name: str, span_id: int, **attributes: object) -> ReadableSpan:
    context = SpanContext(trace_id=7, span_id=span_id, is_remote=False, trace_flags=TraceFlags(1))
    return ReadableSpan(name=name, context=context, attributes=attributes, start_time=1, end_time=2)


@pytest.mark.parametrize("levels", [1_000, 10_000, 100_000])
def test_an_attribute_nested_past_the_limit_is_left_out_and_the_batch_is_written(
    levels: int, caplog: pytest.LogCaptureFixture
) -> None:
    deep: object = "leaf"
    for i in range(levels):
        deep = (deep,) if i % 2 else {"a": deep}
    line = encode_spans_json([span("deep one", 2, deep=deep, kept="yes"), span("next", 3, n=1)])
    doc = json.loads(line)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [s["name"] for s in spans] == ["deep one", "next"]
    assert [a["key"] for a in spans[0]["attributes"]] == ["kept"]
    assert any(
        r.levelno == logging.ERROR and "cannot encode span attribute deep" in r.getMessage()
        for r in caplog.records
    )


def test_an_attribute_nested_within_the_limit_is_written_whole() -> None:
    value: object = "leaf"
    for _ in range(60):
        value = (value,)
    line = encode_spans_json([span("nested", 2, shallow=value)])
    encoded = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]
    depth, node = 0, encoded["value"]
    while "arrayValue" in node:
        node = node["arrayValue"]["values"][0]
        depth += 1
    assert depth == 60 and node == {"stringValue": "leaf"}
