"""A saved run sent to a collector later (``orchestrator trace export``), over OTLP/HTTP or gRPC.

Each line of a trace file is decoded back into the ``ExportTraceServiceRequest`` it was made
from (:func:`~.otlp_json.decode_otlp_json`) and sent as one request, or several when it is
over what a receiver takes (:mod:`.batches`), so the run arrives as if it had been exported
live; a damaged line is skipped and reported, the others are sent. protobuf and grpc are
imported only while sending.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..core.errors import OrchestratorError
from .batches import split_request
from .endpoints import resolve_otlp_endpoint, resolve_protocol
from .otlp_json import decode_otlp_json
from .tracefiles import DamagedLine, damage_note, read_docs, unreadable

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

__all__ = ["SentTrace", "TraceExportError", "export_trace", "send_trace"]


class TraceExportError(OrchestratorError):
    """The collector refused or could not be reached; spans already sent stay sent."""


def _headers_from_env() -> dict[str, str]:
    from opentelemetry.util.re import parse_env_headers

    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get(
        "OTEL_EXPORTER_OTLP_HEADERS", ""
    )
    return dict(parse_env_headers(raw, liberal=True)) if raw else {}


def _send_http(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST one request; returns the collector's rejected-span count."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={**headers, "Content-Type": "application/x-protobuf"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:200].decode("utf-8", "replace")
        raise TraceExportError(f"{url}: HTTP {exc.code} {exc.reason} {detail}".strip()) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise TraceExportError(f"{url}: {exc}") from exc
    except (http.client.InvalidURL, ValueError) as exc:
        raise TraceExportError(f"{url}: {exc}") from exc
    except http.client.HTTPException as exc:  # not HTTP at all: say, the gRPC port
        raise TraceExportError(
            f"{url}: the answer is not HTTP ({type(exc).__name__}); is this the OTLP/HTTP port "
            "(4318), or should --protocol be grpc (4317)?"
        ) from exc
    answer = ExportTraceServiceResponse()
    if payload:
        try:
            answer.ParseFromString(payload)
        except Exception:  # a non-OTLP 200 body (some proxies); the spans were accepted
            return 0
    return int(answer.partial_success.rejected_spans)


@dataclass(frozen=True, slots=True)
class SentTrace:
    """What :func:`send_trace` sent: ``spans``, the ``damaged`` lines it skipped, the
    ``trace_ids`` the spans belong to (hex, in the order first sent) and the bytes of the
    ``largest_request``."""

    spans: int
    damaged: tuple[DamagedLine, ...] = ()
    trace_ids: tuple[str, ...] = ()
    largest_request: int = 0

    @property
    def damage_note(self) -> str | None:
        return damage_note(self.damaged)


def _requests(path: Path) -> tuple[list[ExportTraceServiceRequest], list[DamagedLine]]:
    """The file's lines as requests; a damaged line (not JSON, or not the OTLP shape) is
    skipped and listed. Raises :class:`TraceFileError` when no line is OTLP/JSON traces."""
    from google.protobuf import json_format  # type: ignore[import-untyped, unused-ignore]

    docs, damaged = read_docs(path)
    requests = []
    for number, doc in docs:
        try:
            requests.append(decode_otlp_json(doc))
        except (json_format.ParseError, ValueError, TypeError, KeyError, AttributeError) as exc:
            damaged.append(DamagedLine(number, "malformed span data", str(exc)[:200]))
    damaged.sort(key=lambda d: d.number)
    if damaged and not requests:
        raise unreadable(path, damaged)
    return requests, damaged


def export_trace(
    path: Path,
    endpoint: str | None,
    protocol: str | None = "http/protobuf",
    *,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Send a saved trace file to an OTLP endpoint; returns the number of spans sent.

    :func:`send_trace`, for a caller that does not need the damaged lines it skipped.
    """
    return send_trace(path, endpoint, protocol, timeout=timeout, headers=headers).spans


def send_trace(
    path: Path,
    endpoint: str | None,
    protocol: str | None = "http/protobuf",
    *,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> SentTrace:
    """Send a saved trace file to an OTLP endpoint; returns the spans sent and the damaged
    lines skipped (a batch cut off by a full disk or a killed writer costs only itself).

    Each line of the file is decoded back into the ``ExportTraceServiceRequest`` it was made
    from and sent as one request (or several, when it is over
    :data:`~.batches.MAX_REQUEST_BYTES`), so trace and span ids, timestamps, resource and typed
    attributes arrive unchanged: the run shows up in Jaeger as if it had been exported live.

    ``endpoint`` is a base URL (``http://localhost:4318``; ``/v1/traces`` is added for HTTP) or
    None to use the ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variables. ``protocol`` is
    ``http/protobuf`` or ``grpc`` (None: the ``OTEL_EXPORTER_OTLP_*PROTOCOL`` variables).
    Headers default to ``OTEL_EXPORTER_OTLP_HEADERS``. Raises :class:`TraceExportError` on a
    refusal, an unreachable endpoint, or spans the collector reports as rejected, and
    :class:`~.tracefiles.TraceFileError` when no line of the file is OTLP/JSON traces.
    """
    proto = resolve_protocol(protocol)
    url = resolve_otlp_endpoint(endpoint, proto)
    if url is None:
        raise TraceExportError("no OTLP endpoint: pass one or set OTEL_EXPORTER_OTLP_ENDPOINT")
    send_headers = dict(_headers_from_env() if headers is None else headers)
    lines, damaged = _requests(path)
    # a line is one batch of the run, which may be over what a receiver takes in one request
    requests = [part for line in lines for part in split_request(line)]
    trace_ids = dict.fromkeys(
        span.trace_id.hex()
        for request in requests
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    )
    largest = max((request.ByteSize() for request in requests), default=0)
    sent = rejected = 0
    if proto == "grpc":
        import grpc  # type: ignore[import-untyped, unused-ignore]
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
            TraceServiceStub,
        )

        target = url.split("://", 1)[-1].split("/", 1)[0]
        channel = (
            grpc.secure_channel(target, grpc.ssl_channel_credentials())
            if url.startswith("https://")
            else grpc.insecure_channel(target)
        )
        try:
            # The generated stub is unannotated.
            stub = cast(Any, TraceServiceStub)(channel)
            for request in requests:
                try:
                    answer = stub.Export(
                        request, timeout=timeout, metadata=tuple(send_headers.items())
                    )
                except grpc.RpcError as exc:
                    raise TraceExportError(
                        f"{target}: gRPC {exc.code().name}: {exc.details()}"
                    ) from exc
                rejected += int(answer.partial_success.rejected_spans)
                sent += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        finally:
            channel.close()
    else:
        for request in requests:
            rejected += _send_http(url, request.SerializeToString(), send_headers, timeout)
            sent += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if rejected:
        raise TraceExportError(f"{url}: the collector rejected {rejected} of {sent} spans")
    return SentTrace(sent, tuple(damaged), tuple(trace_ids), largest)
