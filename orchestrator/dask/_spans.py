"""Spans of a remote child: recorded on the worker, shipped back, ended again in the parent.

A worker needs no exporter: the child's run records its spans with a tracer provider of its
own that keeps them in memory (:func:`worker_tracer`); they travel back with the result as one
line of OTLP/JSON (:func:`~.tracing.otlp_json.encode_spans_json`), and the parent hands them,
as finished spans with their own ids, to its tracer provider's span processors
(:func:`emit`): the trace file, the OTLP exporter, a test's in-memory exporter. The worker's
spans were made under the spawn span's W3C context, so they sit under it in the run's one trace.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Tracer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["SpanCollector", "emit"]


class SpanCollector:
    """A tracer provider of the worker's own whose spans stay in memory until :meth:`encode`."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.provider = TracerProvider()
        self._exporter: InMemorySpanExporter = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self._exporter))

    def encode(self) -> str:
        """Every span ended so far, as one line of OTLP/JSON."""
        from ..tracing.otlp_json import encode_spans_json

        spans = self._exporter.get_finished_spans()
        self.provider.shutdown()
        return encode_spans_json(spans)


def _value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if "arrayValue" in value:
        return tuple(_value(v) for v in value["arrayValue"].get("values", ()))
    if "kvlistValue" in value:  # not an OTel attribute type: kept as its JSON text
        return json.dumps(value["kvlistValue"])
    return None


def _attributes(items: Any) -> dict[str, Any]:
    out = {}
    for item in items or ():
        decoded = _value(item.get("value", {}))
        if decoded is not None:
            out[item.get("key", "")] = decoded
    return out


def _spans(line: str, tracer: Tracer) -> Iterator[Any]:
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    resource = getattr(tracer, "resource", None)
    sampled = TraceFlags(TraceFlags.SAMPLED)

    def context(trace_id: str, span_id: str, remote: bool) -> SpanContext:
        return SpanContext(int(trace_id, 16), int(span_id, 16), remote, sampled)

    for group in json.loads(line).get("resourceSpans", ()):
        for scope_spans in group.get("scopeSpans", ()):
            scope = scope_spans.get("scope", {})
            instrumentation = InstrumentationScope(
                scope.get("name", ""), scope.get("version"), scope_spans.get("schemaUrl")
            )
            for s in scope_spans.get("spans", ()):
                parent = None
                if s.get("parentSpanId"):
                    parent = context(
                        s["traceId"], s["parentSpanId"], bool(s.get("flags", 0) & 0x200)
                    )
                status = s.get("status", {})
                yield ReadableSpan(
                    name=s.get("name", ""),
                    context=context(s["traceId"], s["spanId"], False),
                    parent=parent,
                    resource=resource,
                    attributes=_attributes(s.get("attributes")),
                    events=[
                        Event(
                            e.get("name", ""),
                            _attributes(e.get("attributes")),
                            int(e.get("timeUnixNano", 0)),
                        )
                        for e in s.get("events", ())
                    ],
                    links=[
                        Link(
                            context(link["traceId"], link["spanId"], False),
                            _attributes(link.get("attributes")),
                        )
                        for link in s.get("links", ())
                    ],
                    kind=SpanKind(max(0, int(s.get("kind", 1)) - 1)),
                    status=Status(StatusCode(int(status.get("code", 0))), status.get("message")),
                    start_time=int(s.get("startTimeUnixNano", 0)),
                    end_time=int(s.get("endTimeUnixNano", 0)),
                    instrumentation_scope=instrumentation,
                )


def emit(line: str, tracer: Tracer | None) -> int:
    """End the spans of ``line`` (OTLP/JSON) again through ``tracer``'s provider's span
    processors, with their own ids; how many. A tracer that is not the SDK's takes none."""
    processor = getattr(tracer, "span_processor", None)
    if tracer is None or processor is None or not line:
        return 0
    n = 0
    for span in _spans(line, tracer):
        processor.on_end(span)
        n += 1
    return n
