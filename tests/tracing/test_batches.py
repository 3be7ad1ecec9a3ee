"""Batches go as OTLP requests under :data:`MAX_REQUEST_BYTES` (orchestrator.tracing.batches): a
receiver refuses a request over its limit whole (gRPC's default is 4 MiB, as this test
receiver's is), and a batch of spans with captured messages can be several times that.

Against the real local receiver over both transports, live (configure_tracing) and from a saved
file (send_trace); the split itself on requests built here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from support.otlp_receiver import OtlpReceiver

from orchestrator.tracing import configure_tracing
from orchestrator.tracing.batches import MAX_REQUEST_BYTES, sized_parts, split_request
from orchestrator.tracing.export import send_trace

BIG = "y" * 16_000  # what a span with captured messages may carry per attribute


def make_spans(setup_provider: object, count: int, big: str = BIG) -> None:
    tracer = setup_provider.get_tracer("test")  # type: ignore[attr-defined]
    with tracer.start_as_current_span("root"):
        for i in range(count):
            with tracer.start_as_current_span(f"child {i}") as span:
                span.set_attribute("gen_ai.input.messages", big)
                span.set_attribute("gen_ai.output.messages", big)


@pytest.mark.slow  # ~13 MB of spans encoded and received
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_batch_over_the_receivers_limit_arrives_whole_in_smaller_requests(
    protocol: str,
) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        setup = configure_tracing(endpoint=endpoint, protocol=protocol, set_global=False)
        with setup:
            make_spans(setup.tracer_provider, 400)  # ~13 MB: one batch of 401 spans
            assert setup.force_flush(timeout=60)
        spans = receiver.wait_for_spans(401, timeout=30)
        assert len(spans) == 401
        assert len({s.span_id for s in spans}) == 401
        sizes = [r.ByteSize() for r in receiver.requests]
        assert len(sizes) >= 4 and max(sizes) <= MAX_REQUEST_BYTES
        assert (setup.exported_spans, setup.failed_spans, setup.dropped_spans) == (401, 0, 0)


@pytest.mark.slow  # ~13 MB of spans written, read and received
def test_a_saved_line_over_the_limit_is_sent_in_parts_over_grpc(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    setup = configure_tracing(run_file=path, set_global=False)
    with setup:
        make_spans(setup.tracer_provider, 400)
    assert len(path.read_text().splitlines()) == 1  # one batch, ~13 MB: one line
    with OtlpReceiver() as receiver:
        sent = send_trace(path, receiver.grpc_endpoint, "grpc")
        assert sent.spans == 401 and len(receiver.spans) == 401
        assert 0 < sent.largest_request <= MAX_REQUEST_BYTES
        assert len(sent.trace_ids) == 1


def request_with(spans: int, resources: int = 2, big: str = BIG) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for r in range(resources):
        rs = request.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = f"service {r}"
        for s in range(2):
            ss = rs.scope_spans.add()
            ss.scope.name = f"scope {s}"
            for i in range(spans):
                span = ss.spans.add()
                span.name = f"{r}/{s}/{i}"
                span.attributes.add(key="content").value.string_value = big
    return request


def names(requests: list[ExportTraceServiceRequest]) -> list[tuple[str, str, str]]:
    return [
        (rs.resource.attributes[0].value.string_value, ss.scope.name, span.name)
        for request in requests
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def test_a_split_request_keeps_every_span_in_order_under_its_resource_and_scope() -> None:
    request = request_with(60)  # 240 spans of 16 KB: ~3.9 MB
    parts = split_request(request, limit=1_000_000)
    assert len(parts) >= 4
    assert all(part.ByteSize() <= 1_000_000 for part in parts)
    assert names(parts) == names([request])


def test_a_request_under_the_limit_is_sent_as_it_is() -> None:
    request = request_with(2)
    assert split_request(request) == [request]
    assert split_request(request)[0] is request


def test_an_item_over_the_limit_on_its_own_goes_alone(caplog: pytest.LogCaptureFixture) -> None:
    items = ["a" * 10, "b" * 500, "c" * 10, "d" * 10]
    parts = sized_parts(items, lambda run: "".join(run), len, limit=100)
    assert sum(n for n, _ in parts) == 4
    assert [p for _, p in parts if len(p) > 100] == ["b" * 500]  # alone, the rest under 100
    assert "".join(p for _, p in parts) == "".join(items)
    assert "over the 100 a request should hold" in caplog.text
