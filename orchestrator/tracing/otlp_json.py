"""OTLP/JSON: the OpenTelemetry Collector's file-exporter format, written and read.

Trace files hold one ``ExportTraceServiceRequest`` per line in protobuf's canonical JSON mapping
(lowerCamelCase names, 64-bit integers and nanosecond timestamps as strings, enums as integers,
default values left out), except that trace and span ids are lowercase hex, as OTLP/JSON wants.
:func:`encode_spans_json` writes finished SDK spans straight to that JSON: the protobuf request
and protobuf's JSON printer (:func:`encode_otlp_json`, kept for requests that already are
protobuf) cost so much CPU per span that a big run's last spans missed exit's flush deadline.
The tests hold the two to the same output.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from opentelemetry.trace import SpanKind

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    from .direct import DirectSpan, DirectTracer

__all__ = ["decode_otlp_json", "encode_direct_json", "encode_otlp_json", "encode_spans_json"]

_logger = logging.getLogger(__name__)

# Ids that OTLP/JSON writes as hex where protobuf's JSON mapping would write base64.
_HEX_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")
# SpanFlags: the "has is-remote" bit is always set; the "is remote" bit when the parent is.
_FLAGS_HAS_IS_REMOTE: Final = 0x100
_FLAGS_IS_REMOTE: Final = 0x200
_INT64_MIN: Final = -(2**63)
_INT64_END: Final = 2**63


def _walk_ids(doc: dict[str, Any], convert: Callable[[str], str]) -> None:
    """Apply ``convert`` to every trace/span id in an OTLP JSON document, in place.

    OTLP/JSON departs from protobuf's canonical JSON mapping in exactly this: trace and span
    ids are lowercase hex, not base64 (every other bytes field stays base64).
    """
    for resource_spans in doc.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                for holder in (span, *span.get("links", ())):
                    for field in _HEX_ID_FIELDS:
                        value = holder.get(field)
                        if value:
                            holder[field] = convert(value)


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def encode_otlp_json(request: ExportTraceServiceRequest) -> str:
    """One ``ExportTraceServiceRequest`` as one line of OTLP/JSON (no trailing newline).

    Produced with protobuf's own JSON mapping (lowerCamelCase names, 64-bit integers and
    nanosecond timestamps as strings, enums as integers, as OTLP/JSON requires), then ids
    rewritten from base64 to hex. This is what the Collector's file exporter writes, so its
    files and ours are interchangeable.
    """
    from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]

    doc = json_format.MessageToDict(request, use_integers_for_enums=True)
    _walk_ids(doc, _b64_to_hex)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def decode_otlp_json(line: str | dict[str, Any]) -> ExportTraceServiceRequest:
    """The inverse of :func:`encode_otlp_json`: a protobuf request with the same ids and values.

    Unknown fields are ignored so that files written by newer collectors still load.
    """
    from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    doc: dict[str, Any] = json.loads(line) if isinstance(line, str) else copy.deepcopy(line)
    _walk_ids(doc, _hex_to_b64)
    request = ExportTraceServiceRequest()
    json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    return request


# --------------------------------------------------------------------------------------------
# Finished SDK spans straight to OTLP/JSON (what encode_spans + encode_otlp_json would print).


def encode_spans_json(spans: Sequence[ReadableSpan]) -> str:
    """Finished spans as one line of OTLP/JSON, grouped by resource and instrumentation scope
    in order of first appearance, as the SDK's OTLP encoder groups them."""
    groups: dict[Any, dict[Any, list[dict[str, Any]]]] = {}
    # Resources group by value, like the SDK's encoder, but a Resource hashes by JSON-dumping
    # its attributes: look each distinct object up once (the spans keep them alive meanwhile).
    by_identity: dict[int, dict[Any, list[dict[str, Any]]]] = {}
    for span in spans:
        resource = span.resource
        scopes = by_identity.get(id(resource))
        if scopes is None:
            scopes = by_identity[id(resource)] = groups.setdefault(resource, {})
        scopes.setdefault(span.instrumentation_scope or None, []).append(_span(span))
    resource_spans = []
    for resource, scopes in groups.items():
        scope_spans = []
        for scope, encoded in scopes.items():
            entry: dict[str, Any] = {"scope": _scope(scope), "spans": encoded}
            if scope is not None and scope.schema_url:
                entry["schemaUrl"] = scope.schema_url
            scope_spans.append(entry)
        item: dict[str, Any] = {
            "resource": _with_attributes({}, resource.attributes),
            "scopeSpans": scope_spans,
        }
        if resource.schema_url:
            item["schemaUrl"] = resource.schema_url
        resource_spans.append(item)
    return json.dumps({"resourceSpans": resource_spans}, separators=(",", ":"), ensure_ascii=False)


def _span(span: ReadableSpan) -> dict[str, Any]:
    # keys in protobuf field-number order, defaults left out, as protobuf's printer does
    context = span.get_span_context()
    assert context is not None  # a finished SDK span always has one
    out: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
    }
    trace_state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
    if trace_state:
        out["traceState"] = trace_state
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.name:
        out["name"] = span.name
    out["kind"] = span.kind.value + 1  # SpanKind INTERNAL=0.. -> OTLP SPAN_KIND_INTERNAL=1..
    if span.start_time:
        out["startTimeUnixNano"] = str(span.start_time)
    if span.end_time:
        out["endTimeUnixNano"] = str(span.end_time)
    _with_attributes(out, span.attributes)
    if span.dropped_attributes:
        out["droppedAttributesCount"] = span.dropped_attributes
    if span.events:
        out["events"] = [_event(e) for e in span.events]
    if span.dropped_events:
        out["droppedEventsCount"] = span.dropped_events
    if span.links:
        out["links"] = [_link(link) for link in span.links]
    if span.dropped_links:
        out["droppedLinksCount"] = span.dropped_links
    status: dict[str, Any] = {}
    if span.status.description:
        status["message"] = span.status.description
    if span.status.status_code.value:
        status["code"] = span.status.status_code.value
    out["status"] = status
    out["flags"] = _flags(span.parent)
    return out


def _flags(parent: SpanContext | None) -> int:
    if parent is not None and parent.is_remote:
        return _FLAGS_HAS_IS_REMOTE | _FLAGS_IS_REMOTE
    return _FLAGS_HAS_IS_REMOTE


def _event(event: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if event.timestamp:
        out["timeUnixNano"] = str(event.timestamp)
    if event.name:
        out["name"] = event.name
    _with_attributes(out, event.attributes)
    if event.dropped_attributes:
        out["droppedAttributesCount"] = event.dropped_attributes
    return out


def _link(link: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": f"{link.context.trace_id:032x}",
        "spanId": f"{link.context.span_id:016x}",
    }
    _with_attributes(out, link.attributes)
    if link.dropped_attributes:
        out["droppedAttributesCount"] = link.dropped_attributes
    out["flags"] = _flags(link.context)
    return out


def _scope(scope: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if scope is None:
        return out
    if scope.name:
        out["name"] = scope.name
    if scope.version:
        out["version"] = scope.version
    return _with_attributes(out, scope.attributes)


def _with_attributes(out: dict[str, Any], attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """``out`` with an ``attributes`` list, if there are any (an unencodable one is skipped and
    logged, as the SDK's encoder does)."""
    if attributes:
        encoded = []
        for key, value in attributes.items():
            if type(value) is str:  # most attributes: skip the type dispatch
                encoded_value: dict[str, Any] = {"stringValue": value}
            else:
                try:
                    encoded_value = _value(value)
                except (TypeError, ValueError) as exc:
                    _logger.error("cannot encode span attribute %s: %s", key, exc)
                    continue
            encoded.append(
                {"key": key, "value": encoded_value} if key else {"value": encoded_value}
            )
        if encoded:
            out["attributes"] = encoded
    return out


_MAX_VALUE_DEPTH: Final = 64
"""How deep an attribute's arrays and maps may nest in a trace file (the SDK lets a program's
own spans set nested values): deeper, the attribute is left out and logged, like any value
that cannot be encoded, instead of failing the whole batch with a RecursionError."""


def _value(value: Any, depth: int = 0) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": str.__str__(value)}  # a (str, Enum) member's text, not its name
    if isinstance(value, int):
        # comparisons, not ``in range(...)``: that scans the whole range for an int subclass
        # (an IntEnum, an HTTPStatus) while holding the GIL
        if not _INT64_MIN <= value < _INT64_END:
            raise ValueError(f"integer {value} does not fit in 64 bits")
        return {"intValue": str(int(value))}  # int(): an IntEnum's str() is its name
    if isinstance(value, float):
        if math.isnan(value):
            return {"doubleValue": "NaN"}
        if math.isinf(value):
            return {"doubleValue": "Infinity" if value > 0 else "-Infinity"}
        return {"doubleValue": float(value)}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if depth >= _MAX_VALUE_DEPTH and isinstance(value, Sequence | Mapping):
        raise ValueError(f"the value nests arrays or maps deeper than {_MAX_VALUE_DEPTH} levels")
    if isinstance(value, Sequence):
        values = [_value(v, depth + 1) for v in value]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(value, Mapping):
        pairs = [
            {"key": str(k), "value": _value(v, depth + 1)}
            if str(k)
            else {"value": _value(v, depth + 1)}
            for k, v in value.items()
        ]
        return {"kvlistValue": {"values": pairs} if pairs else {}}
    raise TypeError(f"invalid type {type(value).__name__} of value {value!r}")


# --------------------------------------------------------------------------------------------
# Direct spans (the runtime's own, see .direct) straight to the same OTLP/JSON.

_text: Final = json.encoder.encode_basestring  # C-accelerated: a str as a JSON string
_CACHED_TEXT: Final = 256
_CACHE_LIMIT: Final = 8192

T = TypeVar("T", str, bytes)


class AttributeMemo(Generic[T]):
    """Encoded attributes remembered by their ``(key, value)`` item, for the direct encoders.

    Most attributes repeat span after span (operation, provider, model, agent, path, tool,
    run id, outcome, finish reasons, small counts): encoding each once turns an attribute into
    a dict lookup keyed by the very tuple ``dict.items()`` yields. One table per value type
    (``True == 1`` as keys; floats, mostly costs, rarely repeat and are not kept); texts longer
    than 256 characters are not kept; a full table starts over.
    """

    def __init__(self, encode: Callable[[str, Any], T | None]) -> None:
        self.tables: dict[type, dict[tuple[str, Any], T]] = {str: {}, int: {}, bool: {}, tuple: {}}
        self._encode: Callable[[str, Any], T | None] = encode

    def miss(self, item: tuple[str, Any]) -> T | None:
        """Encode ``item`` (the loops look the tables up themselves) and remember it."""
        encoded = self._encode(*item)
        table = self.tables.get(type(item[1]))
        if encoded is not None and table is not None and len(str(item[1])) <= _CACHED_TEXT:
            if len(table) >= _CACHE_LIMIT:
                table.clear()
            table[item] = encoded
        return encoded

    def encode_all(self, attributes: Mapping[str, Any]) -> list[T]:
        """Every attribute of ``attributes`` that can be encoded, in order."""
        out = []
        tables = self.tables
        for item in attributes.items():
            table = tables.get(type(item[1]))
            encoded = None if table is None else table.get(item)
            if encoded is None:
                encoded = self.miss(item)
                if encoded is None:
                    continue
            out.append(encoded)
        return out


_keys: dict[str, str] = {}
_KINDS: Final = {kind: kind.value + 1 for kind in SpanKind}  # ours INTERNAL=0.., OTLP's 1..


def encode_direct_json(spans: Sequence[DirectSpan]) -> str:
    """Direct spans as one line of OTLP/JSON, the same text :func:`encode_spans_json` writes
    for SDK spans saying the same, grouped by tracer (one resource and scope each)."""
    groups: dict[int, tuple[DirectTracer, list[str]]] = {}
    for span in spans:
        tracer = span.tracer
        group = groups.get(id(tracer))
        if group is None:
            group = groups[id(tracer)] = (tracer, [])
        group[1].append(_direct_span(span))
    blocks = []
    for tracer, encoded in groups.values():
        prefix = tracer.encoded.get("json")
        if prefix is None:
            prefix = tracer.encoded["json"] = _direct_prefix(tracer)
        blocks.append(f"{prefix}{','.join(encoded)}]{tracer.encoded['json_suffix']}")
    return f'{{"resourceSpans":[{",".join(blocks)}]}}'


def _direct_prefix(tracer: DirectTracer) -> str:
    """Everything of a resource block before its spans (its suffix is kept beside it)."""
    resource = _with_attributes({}, tracer.resource.attributes)
    scope: dict[str, Any] = {"scope": _scope(tracer.scope)}
    head = json.dumps({"resource": resource}, separators=(",", ":"), ensure_ascii=False)[
        :-1
    ]  # without its closing brace
    scope_head = json.dumps(scope, separators=(",", ":"), ensure_ascii=False)[:-1]
    suffix = "}"
    if tracer.scope.schema_url:
        suffix = f',"schemaUrl":{_text(tracer.scope.schema_url)}}}'
    suffix += "]"
    if tracer.resource.schema_url:
        suffix += f',"schemaUrl":{_text(tracer.resource.schema_url)}'
    tracer.encoded["json_suffix"] = suffix + "}"
    return f'{head},"scopeSpans":[{scope_head},"spans":['


def _key(key: str) -> str:
    encoded = _keys.get(key)
    if encoded is None:
        encoded = _text(key)
        if len(_keys) < _CACHE_LIMIT:
            _keys[key] = encoded
    return encoded


def _direct_attribute(key: str, value: Any) -> str | None:
    kind = type(value)
    if kind is str:
        return f'{{"key":{_key(key)},"value":{{"stringValue":{_text(value)}}}}}'
    if kind is int and _INT64_MIN <= value < _INT64_END:
        return f'{{"key":{_key(key)},"value":{{"intValue":"{value}"}}}}'
    if kind is float and math.isfinite(value):
        return f'{{"key":{_key(key)},"value":{{"doubleValue":{value!r}}}}}'
    if kind is bool:
        return f'{{"key":{_key(key)},"value":{{"boolValue":{"true" if value else "false"}}}}}'
    try:
        encoded_value = _value(value)
    except (TypeError, ValueError) as exc:
        _logger.error("cannot encode span attribute %s: %s", key, exc)
        return None
    pair = {"key": key, "value": encoded_value} if key else {"value": encoded_value}
    return json.dumps(pair, separators=(",", ":"), ensure_ascii=False)


_memo: Final = AttributeMemo(_direct_attribute)


def _direct_attributes(attributes: Mapping[str, Any]) -> str:
    encoded = _memo.encode_all(attributes)
    return f',"attributes":[{",".join(encoded)}]' if encoded else ""


_names: dict[str, str] = {}


def _status_tail(code: int, remote: bool) -> str:
    status = f'"code":{code}' if code else ""
    flags = _FLAGS_HAS_IS_REMOTE | (_FLAGS_IS_REMOTE if remote else 0)
    return f',"status":{{{status}}},"flags":{flags}}}'


_STATUS_TAIL: Final = {(c, r): _status_tail(c, r) for c in (0, 1, 2) for r in (False, True)}
"""A span's closing fields when its status has no message (most spans)."""


def _direct_span(span: DirectSpan) -> str:
    # the keys and defaults of _span(), in its order
    name = _names.get(span.name)
    if name is None:
        name = f',"name":{_text(span.name)}' if span.name else ""
        if len(_names) < _CACHE_LIMIT:
            _names[span.name] = name
    parent = f',"parentSpanId":"{span.parent_id:016x}"' if span.parent_id else ""
    if span.trace_state:
        state = ",".join(f"{k}={v}" for k, v in span.trace_state.items())
        parent = f',"traceState":{_text(state)}{parent}'
    out = (
        f'{{"traceId":"{_trace_hex(span.trace_id)}","spanId":"{span.span_id:016x}"{parent}{name}'
        f',"kind":{_KINDS[span.kind]},"startTimeUnixNano":"{span.start_time}"'
        f',"endTimeUnixNano":"{span.end_time}"'
    )
    if span.attributes:
        out += _direct_attributes(span.attributes)
    if span.events or span.links or span.dropped_attributes:
        out += _direct_extras(span)
    if span.status_message:
        status = f'"message":{_text(span.status_message)}'
        if span.status_code:
            status += f',"code":{span.status_code}'
        flags = _FLAGS_HAS_IS_REMOTE | (_FLAGS_IS_REMOTE if span.parent_remote else 0)
        return f'{out},"status":{{{status}}},"flags":{flags}}}'
    return out + _STATUS_TAIL[span.status_code, span.parent_remote]


def _direct_extras(span: DirectSpan) -> str:
    """The fields few spans have: dropped counts, events, links."""
    out = ""
    if span.dropped_attributes:
        out += f',"droppedAttributesCount":{span.dropped_attributes}'
    if span.events:
        events = []
        for name, attributes, timestamp in span.events:
            event = f'{{"timeUnixNano":"{timestamp}"'
            if name:
                event += f',"name":{_text(name)}'
            events.append(f"{event}{_direct_attributes(attributes)}}}")
        out += f',"events":[{",".join(events)}]'
    if span.dropped_events:
        out += f',"droppedEventsCount":{span.dropped_events}'
    if span.links:
        links = [
            f'{{"traceId":"{context.trace_id:032x}","spanId":"{context.span_id:016x}"'
            f'{_direct_attributes(attributes)},"flags":{_flags(context)}}}'
            for context, attributes in span.links
        ]
        out += f',"links":[{",".join(links)}]'
    if span.dropped_links:
        out += f',"droppedLinksCount":{span.dropped_links}'
    return out


_last_trace: tuple[int, str] = (0, "")


def _trace_hex(trace_id: int) -> str:
    """A trace id in hex, the last one remembered (a batch is mostly one trace)."""
    global _last_trace
    last = _last_trace  # one tuple, read and replaced whole: safe across export threads
    if last[0] != trace_id:
        last = _last_trace = (trace_id, f"{trace_id:032x}")
    return last[1]
