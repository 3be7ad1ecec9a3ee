"""OTLP requests of a bounded size: a batch of spans goes as several requests when one would be
too big for the receiver.

The OTLP gRPC receivers of Jaeger v2 and the OpenTelemetry Collector refuse a request over
4 MiB by default (``max_recv_msg_size_mib``), the whole request: a batch of 512 spans with
captured messages (up to 16 KiB per attribute) can pass that, and a trace file's line, which is
one batch, too. So the live exporters (:mod:`.exporters`) and ``trace export`` (:mod:`.export`)
send at most :data:`MAX_REQUEST_BYTES` per request, split by span; over HTTP too (the
collector's HTTP receivers take 20 MiB, a proxy in front of one may take less). Needs no SDK;
protobuf is imported only to split a request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

__all__ = ["MAX_REQUEST_BYTES", "sized_parts", "split_request"]

_logger = logging.getLogger("orchestrator.tracing")

MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
"""The most one OTLP request holds: 3 MiB, a quarter under the receivers' 4 MiB default."""

S = TypeVar("S")
R = TypeVar("R")


def sized_parts(
    items: Sequence[S],
    encode: Callable[[Sequence[S]], R],
    size: Callable[[R], int],
    limit: int = MAX_REQUEST_BYTES,
) -> list[tuple[int, R]]:
    """``items`` encoded as requests of at most ``limit`` bytes each, in order, with how many
    items each holds.

    The whole batch is encoded once; only a batch over the limit is cut, into as many equal
    runs of items as its size calls for, each encoded (and cut again if still over). An item
    that is over the limit on its own goes alone, with a warning: a receiver may refuse it,
    but it takes no other item with it.
    """
    request = encode(items)
    total = size(request)
    if total <= limit or len(items) <= 1:
        if total > limit:
            _logger.warning(
                "tracing: one span's request is %d bytes, over the %d a request should hold: "
                "a receiver may refuse it",
                total,
                limit,
            )
        return [(len(items), request)]
    parts = min(len(items), total // limit + 1)
    step = -(-len(items) // parts)  # ceil: `parts` runs at most
    out: list[tuple[int, R]] = []
    for start in range(0, len(items), step):
        out.extend(sized_parts(items[start : start + step], encode, size, limit))
    return out


def split_request(
    request: ExportTraceServiceRequest, limit: int = MAX_REQUEST_BYTES
) -> list[ExportTraceServiceRequest]:
    """``request`` as requests of at most ``limit`` bytes each (itself when it fits), the
    spans in their order, each under a copy of its own resource and scope."""
    if request.ByteSize() <= limit:
        return [request]
    where = [
        (r, s, span)
        for r, rs in enumerate(request.resource_spans)
        for s, ss in enumerate(rs.scope_spans)
        for span in range(len(ss.spans))
    ]

    def build(run: Sequence[tuple[int, int, int]]) -> ExportTraceServiceRequest:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        part = ExportTraceServiceRequest()
        last: tuple[int, int] | None = None
        for r, s, i in run:
            rs, ss = request.resource_spans[r], request.resource_spans[r].scope_spans[s]
            if last is None or last[0] != r:
                new_rs = part.resource_spans.add()
                new_rs.resource.CopyFrom(rs.resource)
                new_rs.schema_url = rs.schema_url
            if last != (r, s):
                new_ss = part.resource_spans[-1].scope_spans.add()
                new_ss.scope.CopyFrom(ss.scope)
                new_ss.schema_url = ss.schema_url
            part.resource_spans[-1].scope_spans[-1].spans.append(ss.spans[i])
            last = (r, s)
        return part

    return [part for _, part in sized_parts(where, build, lambda p: p.ByteSize(), limit)]
