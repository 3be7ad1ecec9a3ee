"""A real OTLP trace receiver for tests: OTLP/HTTP (protobuf, optionally gzip) and OTLP/gRPC.

It listens on 127.0.0.1 with ephemeral ports, decodes every ``ExportTraceServiceRequest`` with
opentelemetry-proto, and keeps the spans as plain Python values, so tests assert on what
actually crossed the wire rather than on what the SDK meant to send.

Use it as a context manager::

    with OtlpReceiver() as receiver:
        configure_tracing(endpoint=receiver.http_endpoint, ...)
        ...
        spans = receiver.wait_for_spans(4)

``http_delay`` stalls each HTTP export (to fill an exporter's queue on purpose) and
``http_status`` makes the HTTP side answer with an error code.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc  # type: ignore[import-untyped, unused-ignore]
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "ReceivedSpan", "any_value", "attributes_of"]


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as the Python value it carries (lists and dicts for nesting)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    """Repeated ``KeyValue`` as a dict."""
    out: dict[str, Any] = {}
    for kv in pairs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = any_value(kv.value)
    return out


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived; ids are lowercase hex, ``parent_span_id`` None for a root."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    status_code: int  # 0 UNSET, 1 OK, 2 ERROR
    status_message: str
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]
    scope: str
    transport: str  # "http" or "grpc"


@dataclass
class _Store:
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def add(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        transport: str,
        headers: dict[str, str],
    ) -> None:
        spans: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = attributes_of(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            kind=s.kind,
                            start_time_unix_nano=s.start_time_unix_nano,
                            end_time_unix_nano=s.end_time_unix_nano,
                            attributes=attributes_of(s.attributes),
                            status_code=s.status.code,
                            status_message=s.status.message,
                            events=[(e.name, attributes_of(e.attributes)) for e in s.events],
                            resource=resource,
                            scope=ss.scope.name,
                            transport=transport,
                        )
                    )
        with self.cond:
            self.requests.append(request)
            self.headers.append(headers)
            self.spans.extend(spans)
            self.cond.notify_all()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: _Store) -> None:
        self._store = store

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        headers = {k: str(v) for k, v in context.invocation_metadata()}
        self._store.add(request, "grpc", headers)
        return trace_service_pb2.ExportTraceServiceResponse()


class _HttpServer(ThreadingHTTPServer):
    # The default backlog of 5 dropped SYNs under 20 concurrent connections and stalled them
    # for a second (stack-facts §1); exporters reconnect in bursts after a failure.
    request_queue_size = 128
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, store: _Store, delay: float, status: int) -> None:
        self.store = store
        self.delay = delay
        self.status = status
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"
    # Nagle plus delayed ACK cost 44 ms per request against keep-alive clients (stack-facts §1).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: bytes, content_type: str = "application/x-protobuf") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            self._reply(404, b"not found", "text/plain")
            return
        if self.server.delay:
            time.sleep(self.server.delay)
        if self.server.status != 200:
            self._reply(self.server.status, b"", "text/plain")
            return
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if "protobuf" not in (self.headers.get("Content-Type") or ""):
            self._reply(415, b"protobuf only", "text/plain")
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.store.add(request, "http", {k.lower(): v for k, v in self.headers.items()})
        self._reply(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString())


class OtlpReceiver:
    """Both OTLP transports on ephemeral 127.0.0.1 ports, feeding one span list."""

    def __init__(self, *, http_delay: float = 0.0, http_status: int = 200) -> None:
        self._store = _Store()
        self._http = _HttpServer(self._store, http_delay, http_status)
        self._http_thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown() waits up to one poll interval
            name="otlp-receiver-http",
            daemon=True,
        )
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        register: Any = trace_service_pb2_grpc.add_TraceServiceServicer_to_server  # untyped
        register(_TraceService(self._store), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self.http_port = self._http.server_address[1]

    @property
    def http_endpoint(self) -> str:
        """Base URL for OTLP/HTTP (exporters append ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        """URL for OTLP/gRPC; ``http://`` tells the exporter to use plaintext."""
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._store.cond:
            return list(self._store.spans)

    @property
    def requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        with self._store.cond:
            return list(self._store.requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        with self._store.cond:
            return list(self._store.headers)

    def wait_for_spans(self, count: int, timeout: float = 5.0) -> list[ReceivedSpan]:
        """Block until at least ``count`` spans arrived (or ``timeout``), then return them all."""
        deadline = time.monotonic() + timeout
        with self._store.cond:
            while len(self._store.spans) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._store.cond.wait(remaining)
            return list(self._store.spans)

    def clear(self) -> None:
        with self._store.cond:
            self._store.spans.clear()
            self._store.requests.clear()
            self._store.headers.clear()

    def start(self) -> OtlpReceiver:
        self._http_thread.start()
        self._grpc.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=None).wait(5)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
