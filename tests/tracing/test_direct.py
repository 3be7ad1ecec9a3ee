"""The direct road: a configured setup's spans skip the SDK's span objects, and say the same.

``configure_tracing``'s provider, with no processor of anyone else's, makes
:class:`~orchestrator.tracing.direct.DirectSpan` objects that its exporters encode themselves
(test_span_set.py pins that the trace is the one the SDK's road makes). Checked here: when the
road is taken and when it is not, the two encoders against each other and against protobuf's
own decoder, a program's spans nesting under ours, sampling and remote parents, that every
span is delivered or counted as dropped, and that the road a setup's runs take is logged once:
the SDK's as a warning saying why.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_trace_exporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from support.cli import Cli
from support.otlp_receiver import OtlpReceiver

from orchestrator import Agent, run_sync, tool
from orchestrator.models import FunctionModel, response, text, tool_call
from orchestrator.models.base import ModelRequest, ModelResponse
from orchestrator.tracing import TracingSetup, configure_tracing, decode_otlp_json
from orchestrator.tracing.direct import DirectSpan, DirectTracer
from orchestrator.tracing.otlp_json import encode_direct_json
from orchestrator.tracing.otlp_proto import encode_direct_proto
from orchestrator.tracing.spans import get_tracer
from orchestrator.tracing.tracefiles import load_trace


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[TracingSetup]:
    configured = configure_tracing(run_file=tmp_path / "t.jsonl", set_global=False)
    yield configured
    configured.shutdown()


def test_a_configured_setups_provider_takes_the_direct_road(setup: TracingSetup) -> None:
    assert isinstance(get_tracer(setup.tracer_provider), DirectTracer)


def test_a_processor_of_the_programs_own_sends_the_run_through_the_sdk(
    setup: TracingSetup,
) -> None:
    own = InMemorySpanExporter()
    setup.tracer_provider.add_span_processor(SimpleSpanProcessor(own))
    assert not isinstance(get_tracer(setup.tracer_provider), DirectTracer)


def test_a_sampler_other_than_the_default_sends_the_run_through_the_sdk(tmp_path: Path) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    configured = configure_tracing(
        run_file=tmp_path / "t.jsonl", tracer_provider=provider, set_global=False
    )
    try:
        assert not isinstance(get_tracer(provider), DirectTracer)
    finally:
        configured.shutdown()


def test_a_console_exporter_sends_the_run_through_the_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    configured = configure_tracing(set_global=False)
    try:
        assert not isinstance(get_tracer(configured.tracer_provider), DirectTracer)
    finally:
        configured.shutdown(timeout=1)


def _spans_with_every_feature(tracer: DirectTracer) -> list[DirectSpan]:
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=trace.TraceState([("vendor", "v1")]),
    )
    parent_ctx = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    root = tracer.start_span("invoke_agent lead ü", context=parent_ctx, kind=SpanKind.SERVER)
    assert isinstance(root, DirectSpan)
    root.set_attributes(
        {
            "text": "naïve 字",
            "count": 7,
            "negative": -3,
            "ratio": 0.25,
            "flag": True,
            "names": ["a", "b"],
            "numbers": (1, 2, 3),
        }
    )
    root.add_event("orchestrator.retry", {"orchestrator.retry.attempt": 1, "error.type": "X"})
    root.add_link(remote, {"why": "resumed"})
    root.set_status(Status(StatusCode.ERROR, "it failed"))
    child = tracer.start_span("chat m", context=trace.set_span_in_context(root))
    assert isinstance(child, DirectSpan)
    child.set_attribute("big", 2**62)
    child.set_status(StatusCode.OK)
    child.end()
    root.end()
    return [child, root]


def test_the_protobuf_and_json_encoders_agree_on_every_field(setup: TracingSetup) -> None:
    tracer = get_tracer(setup.tracer_provider)
    assert isinstance(tracer, DirectTracer)
    spans = _spans_with_every_feature(tracer)
    from_json = decode_otlp_json(encode_direct_json(spans))
    from_proto = ExportTraceServiceRequest.FromString(encode_direct_proto(spans))
    assert from_proto == from_json
    (child, root) = from_proto.resource_spans[0].scope_spans[0].spans
    assert root.parent_span_id.hex() == "b7ad6b7169203331"
    assert root.flags == 0x300  # the parent is remote
    assert root.trace_state == "vendor=v1"
    assert child.parent_span_id == root.span_id and child.flags == 0x100
    assert [e.name for e in root.events] == ["orchestrator.retry"]
    assert root.links[0].span_id.hex() == "b7ad6b7169203331"
    assert root.status.code == 2 and root.status.message == "it failed"
    assert child.status.code == 1


def test_a_direct_span_follows_the_sdks_rules_for_attributes_and_status(
    setup: TracingSetup,
) -> None:
    tracer = get_tracer(setup.tracer_provider)
    span = tracer.start_span("s")
    assert isinstance(span, DirectSpan)
    span.set_attribute("mixed", ["a", 1])  # type: ignore[list-item]  # not one type: dropped
    span.set_attribute("object", object())  # type: ignore[arg-type]
    span.set_status(StatusCode.OK)
    span.set_status(Status(StatusCode.ERROR, "too late"))  # OK is final
    for i in range(200):
        span.set_attribute(f"a{i}", i)
    span.end()
    span.set_attribute("after", 1)  # an ended span takes nothing
    assert "mixed" not in span.attributes and "object" not in span.attributes
    assert span.status_code == StatusCode.OK.value and not span.status_message
    assert len(span.attributes) == 128 and span.dropped_attributes == 72
    assert not span.is_recording()


WORKER = Agent("worker", "You work.", description="Works.")


def _answer(request: ModelRequest) -> ModelResponse:
    if request.agent.depth == 0 and len(request.messages) == 1:
        return response(tool_call("probe", {}, id="toolu_p"))
    return response(text("done"))


def test_a_tools_own_spans_nest_under_its_execute_tool_span(setup: TracingSetup) -> None:
    @tool
    async def probe() -> str:
        """Make a span of the program's own and annotate ours."""
        trace.get_current_span().set_attribute("probe.note", "written by the tool")
        own = trace.get_tracer("the-program", tracer_provider=setup.tracer_provider)
        with own.start_as_current_span("the tool's own span"):
            pass
        return "ok"

    lead = Agent("lead", "You probe.", tools=[probe])
    result = run_sync(
        lead, "Probe.", model=FunctionModel(_answer), tracer_provider=setup.tracer_provider
    )
    assert result.status.value == "completed"
    assert setup.force_flush()
    assert setup.trace_file is not None
    spans = {s.name: s for s in load_trace(setup.trace_file)}
    tool_span = spans["execute_tool probe"]
    assert spans["the tool's own span"].parent_span_id == tool_span.span_id
    assert spans["the tool's own span"].trace_id == tool_span.trace_id
    assert tool_span.attributes["probe.note"] == "written by the tool"


def test_a_run_under_a_remote_parent_joins_its_trace_and_a_sampled_out_one_records_nothing(
    setup: TracingSetup,
) -> None:
    model = FunctionModel(lambda request: response(text("done")))
    sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    unsampled = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00"
    for traceparent in (sampled, unsampled):
        token = otel_context.attach(propagate.extract({"traceparent": traceparent}))
        try:
            run_sync(WORKER, "Go.", model=model, tracer_provider=setup.tracer_provider)
        finally:
            otel_context.detach(token)
    assert setup.force_flush()
    assert setup.trace_file is not None
    spans = list(load_trace(setup.trace_file))
    assert {s.trace_id for s in spans} == {"0af7651916cd43dd8448eb211c80319c"}
    (root,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert root.parent_span_id == "b7ad6b7169203331" and root.parent_remote is True


def test_a_full_queue_drops_and_counts_exactly_what_it_could_not_hold(tmp_path: Path) -> None:
    configured = configure_tracing(
        run_file=tmp_path / "t.jsonl", set_global=False, max_queue_size=5
    )
    tracer = get_tracer(configured.tracer_provider)
    assert isinstance(tracer, DirectTracer)
    for i in range(40):  # faster than the export thread's schedule: the queue fills
        tracer.start_span(f"s{i}").end()
    assert configured.shutdown()
    assert configured.trace_file is not None
    written = len(load_trace(configured.trace_file))
    assert configured.ended_spans == 40
    assert configured.dropped_spans == 40 - written and configured.dropped_spans > 0
    assert configured.exported_spans == written


def test_a_lone_surrogate_costs_one_character_not_the_batch(setup: TracingSetup) -> None:
    tracer = get_tracer(setup.tracer_provider)
    span = tracer.start_span("broken")
    span.set_attribute("text", "before \ud800 after")
    span.end()
    tracer.start_span("whole").end()
    assert setup.force_flush()
    assert setup.trace_file is not None
    spans = {s.name: s for s in load_trace(setup.trace_file)}
    assert spans["broken"].attributes["text"] == "before ? after"
    assert "whole" in spans


def test_otlp_receives_direct_and_sdk_spans_of_one_batch_as_one_request(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        configured = configure_tracing(
            endpoint=receiver.http_endpoint,
            set_global=False,
            run_file=tmp_path / "k.jsonl",
            keep_file=True,
        )
        tracer = get_tracer(configured.tracer_provider)
        sdk_tracer = trace.get_tracer("the-program", tracer_provider=configured.tracer_provider)
        with trace.use_span(tracer.start_span("ours"), end_on_exit=True):
            sdk_tracer.start_span("theirs").end()
        assert configured.shutdown()
        received = receiver.wait_for_spans(2)
    names = {s.name: s for s in received}
    assert names["theirs"].parent_span_id == names["ours"].span_id
    assert len(receiver.requests) == 1
    assert configured.trace_file is not None
    assert {s.name for s in load_trace(configured.trace_file)} == {"ours", "theirs"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_exports_its_own_spans_through_a_thread_of_its_own(
    setup: TracingSetup,
) -> None:
    tracer = get_tracer(setup.tracer_provider)
    tracer.start_span("parent's").end()
    assert setup.force_flush()
    pid = os.fork()
    if pid == 0:  # the child: its spans reach the file only through a new export thread
        code = 1
        try:
            tracer.start_span("child's").end()
            code = 0 if setup.force_flush(timeout=5) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert setup.trace_file is not None
    assert sorted(s.name for s in load_trace(setup.trace_file)) == ["child's", "parent's"]


def test_a_global_setup_takes_the_direct_road(tmp_path: Path) -> None:
    # a program that makes its provider the global one and runs with tracer_provider=None (the
    # CLI passes a provider of its own, as the setup fixture's); a process has one global
    # provider, hence a process of its own
    code = (
        "from orchestrator.tracing import configure_tracing\n"
        "from orchestrator.tracing.direct import DirectTracer\n"
        "from orchestrator.tracing.spans import get_tracer\n"
        f"setup = configure_tracing(run_file={str(tmp_path / 'g.jsonl')!r}, keep_file=True)\n"
        "assert isinstance(get_tracer(None), DirectTracer), get_tracer(None)\n"
        "assert setup.shutdown()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_an_exception_escaping_a_current_direct_span_is_recorded_redacted(
    setup: TracingSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("PIN_API_KEY", secret)
    tracer = get_tracer(setup.tracer_provider)
    with pytest.raises(ValueError), tracer.start_as_current_span("failing"):
        raise ValueError(f"the key {secret} was refused")
    assert setup.force_flush()
    assert setup.trace_file is not None
    (span,) = load_trace(setup.trace_file)
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ValueError"
    assert secret not in str(event.attributes) and secret not in span.status_message
    assert span.status == "ERROR"


# ---------------------------------------------------------------------------------------------
# Which road: logged once per setup, the SDK's as a warning saying why


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def tracing_log() -> Iterator[list[logging.LogRecord]]:
    """What ``orchestrator.tracing`` logs meanwhile, debug lines included (a handler on that
    logger: the command run in process takes the root logger's handlers away)."""
    logger = logging.getLogger("orchestrator.tracing")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def roads(records: Sequence[logging.LogRecord]) -> list[tuple[str, str]]:
    """(level, message) of each line saying which road runs take."""
    return [(r.levelname, r.getMessage()) for r in records if "road" in r.getMessage()]


DIRECT_LINE = ("DEBUG", "tracing: runs take the direct road (no SDK span objects)")


def test_the_clis_otlp_http_setup_takes_the_direct_road(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tree.py").write_text(
        "from orchestrator import Agent\n"
        "from orchestrator.models import ScriptedModel, text\n"
        "agent = Agent('solo', 'Answer.', model=ScriptedModel([text('hello')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with OtlpReceiver() as receiver, tracing_log() as records:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.http_endpoint
        # the command in this process (support.cli): OTLP/HTTP, and the trace file kept
        proc = Cli(monkeypatch, tmp_path, lambda: env)("run", "tree.py", "hi", "--json")
        assert proc.returncode == 0, proc.stderr
        received = receiver.wait_for_spans(3)
    doc = json.loads(proc.stdout)
    assert doc["trace"].startswith(receiver.http_endpoint.split("/v1")[0]) and doc["trace_file"]
    assert {s.transport for s in received} == {"http"}
    assert roads(records) == [DIRECT_LINE]


class _HttpExporterBefore145(http_trace_exporter.OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter as releases before 1.45 made it: no ``_client`` attribute
    (its requests go out all the same, through a client under a name of its own)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sender = self.__dict__.pop("_client")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        sent = self._sender.export(encode_spans(spans).SerializePartialToString())
        return SpanExportResult.SUCCESS if sent.success else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._sender.shutdown()


def test_an_otlp_http_exporter_without_its_client_takes_the_sdks_road_and_says_why_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what an opentelemetry-exporter-otlp older than the pinned 1.45 builds
    monkeypatch.setattr(http_trace_exporter, "OTLPSpanExporter", _HttpExporterBefore145)
    model = FunctionModel(lambda request: response(text("done")))
    with OtlpReceiver() as receiver, tracing_log() as records:
        configured = configure_tracing(endpoint=receiver.http_endpoint, set_global=False)
        try:
            for _ in range(2):  # two runs: one decision each, one warning in all
                result = run_sync(
                    WORKER, "Go.", model=model, tracer_provider=configured.tracer_provider
                )
                assert result.status.value == "completed", result.error
            assert not isinstance(get_tracer(configured.tracer_provider), DirectTracer)
        finally:
            assert configured.shutdown()
        received = receiver.wait_for_spans(2)
    assert len([s for s in received if s.name.startswith("invoke_agent")]) == 2  # SDK spans
    ((level, message),) = roads(records)
    assert level == "WARNING"
    assert "OpenTelemetry SDK's road" in message
    assert "OTLPSpanExporter._client" in message and "1.45" in message
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == [message]


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("console", "the console exporter takes the SDK's spans only"),
        ("grpc", "OTLP over gRPC is sent by the SDK's exporter"),
        ("own processor", "a span processor of the program's own"),
        ("sampler", "sampler is AlwaysOffSampler, not the SDK's default"),
    ],
)
def test_a_setup_on_the_sdks_road_warns_once_saying_why(
    case: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "t.jsonl"
    if case == "console":
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
        configured = configure_tracing(set_global=False)
    elif case == "grpc":  # nothing is sent: no collector needed
        configured = configure_tracing(endpoint="127.0.0.1:4317", protocol="grpc", set_global=False)
    elif case == "own processor":
        configured = configure_tracing(run_file=file, set_global=False)
        configured.tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    else:
        configured = configure_tracing(
            run_file=file, tracer_provider=TracerProvider(sampler=ALWAYS_OFF), set_global=False
        )
    try:
        with tracing_log() as records:
            for _ in range(3):  # each run decides its road
                assert not isinstance(get_tracer(configured.tracer_provider), DirectTracer)
    finally:
        configured.shutdown(timeout=1)
    ((level, message),) = roads(records)
    assert level == "WARNING" and why in message, message


def test_a_setup_says_once_which_road_and_again_when_it_changes(setup: TracingSetup) -> None:
    with tracing_log() as records:
        for _ in range(3):
            assert isinstance(get_tracer(setup.tracer_provider), DirectTracer)
        assert roads(records) == [DIRECT_LINE]
        setup.tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        for _ in range(3):
            assert not isinstance(get_tracer(setup.tracer_provider), DirectTracer)
    assert [level for level, _ in roads(records)] == ["DEBUG", "WARNING"]
    assert "a span processor of the program's own" in roads(records)[1][1]
