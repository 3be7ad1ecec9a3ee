"""Direct spans (:mod:`.direct`) as an OTLP ``ExportTraceServiceRequest`` in protobuf's wire
format, written by hand.

What OTLP/HTTP with ``http/protobuf`` sends. Building the generated protobuf messages (what
the SDK's encoder does) costs tens of microseconds per span; the wire format of these few
messages is simple enough to write directly: tags, lengths as varints, fixed-width times. Field
numbers are those of opentelemetry-proto's ``trace.proto`` and ``common.proto``; the tests
decode the bytes with the generated classes and compare them with the JSON encoding of the
same spans. Texts are UTF-8; a lone surrogate (which UTF-8 cannot hold) becomes ``?``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.trace import SpanKind

from .otlp_json import AttributeMemo

if TYPE_CHECKING:
    from .direct import DirectSpan, DirectTracer

__all__ = ["encode_direct_proto"]

_logger = logging.getLogger(__name__)

_fixed64: Final = struct.Struct("<Q").pack
_fixed32: Final = struct.Struct("<I").pack
_double: Final = struct.Struct("<d").pack
_SMALL: Final = tuple(bytes((n,)) for n in range(128))
_INT64_MIN: Final = -(2**63)
_INT64_END: Final = 2**63
_MAX_DEPTH: Final = 64
_CACHE_LIMIT: Final = 8192
_key_fields: dict[str, bytes] = {}


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the length, the bytes."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 128 else _varint(n)) + payload


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")


def _any_value(value: Any, depth: int = 0) -> bytes:
    """An ``AnyValue`` message (string 1, bool 2, int 3, double 4, array 5, kvlist 6, bytes 7)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", _utf8(str.__str__(value)))
    if isinstance(value, int):
        if not _INT64_MIN <= value < _INT64_END:
            raise ValueError(f"integer {value} does not fit in 64 bits")
        return b"\x18" + _varint(int(value) & 0xFFFFFFFFFFFFFFFF)  # two's complement
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if depth >= _MAX_DEPTH and isinstance(value, Sequence | Mapping):
        raise ValueError(f"the value nests arrays or maps deeper than {_MAX_DEPTH} levels")
    if isinstance(value, Sequence):
        items = b"".join(_field(b"\x0a", _any_value(v, depth + 1)) for v in value)
        return _field(b"\x2a", items)
    if isinstance(value, Mapping):
        pairs = b"".join(
            _field(b"\x0a", _key_value(str(k), _any_value(v, depth + 1))) for k, v in value.items()
        )
        return _field(b"\x32", pairs)
    raise TypeError(f"invalid type {type(value).__name__} of value {value!r}")


def _key_value(key: str, any_value: bytes) -> bytes:
    """A ``KeyValue`` message: key 1, value 2."""
    return (_field(b"\x0a", _utf8(key)) if key else b"") + _field(b"\x12", any_value)


def _key_field(key: str) -> bytes:
    """A ``KeyValue``'s key field, remembered per key (a few dozen names, span after span)."""
    encoded = _key_fields.get(key)
    if encoded is None:
        encoded = _field(b"\x0a", _utf8(key)) if key else b""
        if len(_key_fields) < _CACHE_LIMIT:
            _key_fields[key] = encoded
    return encoded


def _key_value_of(key: str, value: Any) -> bytes | None:
    """A ``KeyValue`` for one attribute; the common kinds without the generic walk."""
    kind = type(value)
    if kind is str:
        return _key_field(key) + _field(b"\x12", _field(b"\x0a", _utf8(value)))
    if kind is int and 0 <= value < _INT64_END:  # counts: a varint of at most 9 bytes
        varint = _SMALL[value] if value < 128 else _varint(value)
        return _key_field(key) + b"\x12" + _SMALL[len(varint) + 1] + b"\x18" + varint
    if kind is float:
        return _key_field(key) + b"\x12\x09\x21" + _double(value)
    if kind is bool:
        return _key_field(key) + (b"\x12\x02\x10\x01" if value else b"\x12\x02\x10\x00")
    try:
        return _key_value(key, _any_value(value))
    except (TypeError, ValueError) as exc:
        _logger.error("cannot encode span attribute %s: %s", key, exc)
        return None


def _span_attribute(key: str, value: Any) -> bytes | None:
    """A span's attribute field (``Span.attributes`` is field 9), length included."""
    pair = _key_value_of(key, value)
    if pair is None:
        return None
    n = len(pair)
    return b"\x4a" + (_SMALL[n] if n < 128 else _varint(n)) + pair


_memo: Final = AttributeMemo(_span_attribute)


def _attributes(tag: bytes, attributes: Mapping[str, Any]) -> bytes:
    """Attributes as repeated ``KeyValue`` fields ``tag`` of their message."""
    out = []
    for key, value in attributes.items():
        pair = _key_value_of(key, value)
        if pair is not None:
            n = len(pair)
            out.append(tag + (_SMALL[n] if n < 128 else _varint(n)) + pair)
    return b"".join(out)


def _span_attributes(attributes: Mapping[str, Any]) -> bytes:
    """A span's attributes, remembered ones by lookup (see :class:`AttributeMemo`)."""
    return b"".join(_memo.encode_all(attributes))


def _trace_state(state: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in state.items())


_names: dict[str, bytes] = {}
_KINDS: Final = {kind: b"\x30" + _SMALL[kind.value + 1] for kind in SpanKind}  # 6 kind, OTLP's
_times: Final = struct.Struct("<BQBQ").pack  # 7 start and 8 end (fixed64), tags included
_STATUS_TAIL: Final = {
    (code, remote): _field(b"\x7a", b"\x18" + _SMALL[code] if code else b"")  # 15 status
    + b"\x85\x01"  # 16 flags (fixed32): has-is-remote, is-remote
    + _fixed32(0x300 if remote else 0x100)
    for code in (0, 1, 2)
    for remote in (False, True)
}
"""A span's closing fields when its status has no message (most spans)."""
_last_trace: tuple[int, bytes] = (0, b"")


def _trace_field(trace_id: int) -> bytes:
    """Field 1, the trace id, the last one remembered (a batch is mostly one trace)."""
    global _last_trace
    last = _last_trace  # one tuple, read and replaced whole: safe across export threads
    if last[0] != trace_id:
        last = _last_trace = (trace_id, b"\x0a\x10" + trace_id.to_bytes(16, "big"))
    return last[1]


def _span(span: DirectSpan) -> bytes:
    """A ``Span`` message, fields in number order."""
    name = _names.get(span.name)
    if name is None:
        name = _field(b"\x2a", _utf8(span.name)) if span.name else b""  # 5 name
        if len(_names) < _CACHE_LIMIT:
            _names[span.name] = name
    out = _trace_field(span.trace_id) + b"\x12\x08" + span.span_id.to_bytes(8, "big")  # 1, 2
    if span.trace_state:
        out += _field(b"\x1a", _utf8(_trace_state(span.trace_state)))  # 3
    if span.parent_id:
        out += b"\x22\x08" + span.parent_id.to_bytes(8, "big")  # 4 parent_span_id
    out += name + _KINDS[span.kind] + _times(0x39, span.start_time, 0x41, span.end_time)
    if span.attributes:
        out += _span_attributes(span.attributes)  # 9 attributes
    if span.events or span.links or span.dropped_attributes:
        out += _extras(span)
    if span.status_message:
        status = _field(b"\x12", _utf8(span.status_message))  # 2 message
        if span.status_code:
            status += b"\x18" + _SMALL[span.status_code]  # 3 code
        flags = 0x300 if span.parent_remote else 0x100
        return out + _field(b"\x7a", status) + b"\x85\x01" + _fixed32(flags)
    return out + _STATUS_TAIL[span.status_code, span.parent_remote]


def _extras(span: DirectSpan) -> bytes:
    """The fields few spans have: dropped counts (10, 12, 14), events (11), links (13)."""
    out = b""
    if span.dropped_attributes:
        out += b"\x50" + _varint(span.dropped_attributes)
    for name, attributes, timestamp in span.events or ():
        event = b"\x09" + _fixed64(timestamp)
        if name:
            event += _field(b"\x12", _utf8(name))
        out += _field(b"\x5a", event + _attributes(b"\x1a", attributes))
    if span.dropped_events:
        out += b"\x60" + _varint(span.dropped_events)
    for context, attributes in span.links or ():  # no trace state, as the SDK's
        link = b"\x0a\x10" + context.trace_id.to_bytes(16, "big")
        link += b"\x12\x08" + context.span_id.to_bytes(8, "big")
        link += _attributes(b"\x22", attributes)
        link += b"\x35" + _fixed32(0x300 if context.is_remote else 0x100)  # 6 flags
        out += _field(b"\x6a", link)
    if span.dropped_links:
        out += b"\x70" + _varint(span.dropped_links)
    return out


def _prefix(tracer: DirectTracer) -> tuple[bytes, bytes]:
    """A tracer's ``Resource`` field and ``InstrumentationScope`` field, encoded once."""
    resource = _attributes(b"\x0a", tracer.resource.attributes)
    scope = b""
    if tracer.scope.name:
        scope += _field(b"\x0a", _utf8(tracer.scope.name))
    if tracer.scope.version:
        scope += _field(b"\x12", _utf8(tracer.scope.version))
    scope += _attributes(b"\x1a", tracer.scope.attributes or {})
    return _field(b"\x0a", resource), _field(b"\x0a", scope)


def encode_direct_proto(spans: Sequence[DirectSpan]) -> bytes:
    """Direct spans as one serialized ``ExportTraceServiceRequest``, one ``ResourceSpans``
    per tracer (its resource, our scope)."""
    groups: dict[int, tuple[DirectTracer, list[bytes]]] = {}
    for span in spans:
        tracer = span.tracer
        group = groups.get(id(tracer))
        if group is None:
            group = groups[id(tracer)] = (tracer, [])
        group[1].append(_field(b"\x12", _span(span)))  # ScopeSpans 2 spans
    out = []
    for tracer, encoded in groups.values():
        prefix = tracer.encoded.get("proto")
        if prefix is None:
            prefix = tracer.encoded["proto"] = _prefix(tracer)
        resource, scope = prefix
        scope_spans = scope + b"".join(encoded)
        if tracer.scope.schema_url:
            scope_spans += _field(b"\x1a", _utf8(tracer.scope.schema_url))
        resource_spans = resource + _field(b"\x12", scope_spans)
        if tracer.resource.schema_url:
            resource_spans += _field(b"\x1a", _utf8(tracer.resource.schema_url))
        out.append(_field(b"\x0a", resource_spans))  # ExportTraceServiceRequest 1
    return b"".join(out)
