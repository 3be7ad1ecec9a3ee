"""configure_tracing() against a real local OTLP receiver (HTTP/protobuf and gRPC).

Spans are made with the OTel SDK directly (a small agent tree), so these tests pin the export
path on its own: env-var handling, the wire format, the OTLP/JSON file, bounded flush and
shutdown on a dead endpoint, and the dropped-span count. Providers are passed explicitly or
created with ``set_global=False``; the one test that sets the global provider restores it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util._once import Once
from support.otlp_receiver import OtlpReceiver, ReceivedSpan

from orchestrator.core.errors import ConfigurationError
from orchestrator.tracing import (
    TracingSetup,
    configure_tracing,
    content_capture_enabled,
    content_for_span,
    decode_otlp_json,
    encode_otlp_json,
    flush_tracer_provider,
    resolve_otlp_endpoint,
)
from orchestrator.tracing.export import export_trace
from orchestrator.tracing.tracefiles import load_trace

RUN_ID = "run-7f3a9c"
TREE = ["invoke_agent lead", "execute_tool spawn_subagent", "invoke_agent researcher", "chat m1"]
PROTOCOLS = ["http/protobuf", "grpc"]


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL_* variable from the developer's shell may leak into these tests."""
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def make_tree(provider: TracerProvider) -> dict[str, tuple[str, str]]:
    """lead → spawn_subagent tool → researcher → one chat call; returns name → (trace, span) hex."""
    tracer = provider.get_tracer("orchestrator.test")
    ids: dict[str, tuple[str, str]] = {}

    def note(span: trace.Span) -> None:
        ctx = span.get_span_context()
        ids[span.name] = (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")  # type: ignore[attr-defined]

    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": RUN_ID}
    with tracer.start_as_current_span(
        "invoke_agent lead",
        attributes={**agent, "gen_ai.agent.name": "lead", "orchestrator.depth": 0},
    ) as lead:
        note(lead)
        with tracer.start_as_current_span(
            "execute_tool spawn_subagent",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "spawn_subagent",
                "gen_ai.tool.call.id": "toolu_01",
            },
        ) as tool:
            note(tool)
            with tracer.start_as_current_span(
                "invoke_agent researcher",
                attributes={**agent, "gen_ai.agent.name": "researcher", "orchestrator.depth": 1},
            ) as researcher:
                note(researcher)
                with tracer.start_as_current_span(
                    "chat m1",
                    kind=SpanKind.CLIENT,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "m1",
                        "gen_ai.usage.input_tokens": 1200,
                        "gen_ai.usage.output_tokens": 80,
                        "gen_ai.response.finish_reasons": ["end_turn"],
                        "gen_ai.request.temperature": 0.25,
                        "gen_ai.request.stream": True,
                        "orchestrator.cost_usd": 0.0042,
                    },
                ) as chat:
                    note(chat)
                researcher.set_attribute("orchestrator.usage.subtree.input_tokens", 1200)
                researcher.set_attribute("orchestrator.usage.subtree.output_tokens", 80)
                researcher.set_attribute("orchestrator.outcome", "completed")
                researcher.set_status(Status(StatusCode.OK))
            tool.set_attribute("orchestrator.outcome", "completed")
        lead.set_attribute("orchestrator.outcome", "completed")
        lead.set_status(Status(StatusCode.OK))
    return ids


def assert_tree(spans: list[ReceivedSpan], ids: dict[str, tuple[str, str]]) -> None:
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == sorted(TREE)
    parents = {s.name: s.parent_span_id for s in spans}
    assert parents["invoke_agent lead"] is None
    assert parents["execute_tool spawn_subagent"] == ids["invoke_agent lead"][1]
    assert parents["invoke_agent researcher"] == ids["execute_tool spawn_subagent"][1]
    assert parents["chat m1"] == ids["invoke_agent researcher"][1]
    for name, (trace_id, span_id) in ids.items():
        assert by_name[name].trace_id == trace_id
        assert by_name[name].span_id == span_id
    chat = by_name["chat m1"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == 1200
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert chat.attributes["gen_ai.request.temperature"] == 0.25
    assert chat.attributes["gen_ai.request.stream"] is True
    assert chat.kind == 3  # CLIENT
    assert by_name["invoke_agent lead"].status_code == 1  # OK
    assert by_name["invoke_agent lead"].attributes["orchestrator.outcome"] == "completed"


def closed_port() -> int:
    """A port nothing listens on: bound, read, closed (connections get refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def endpoint_for(receiver: OtlpReceiver, protocol: str) -> str:
    return receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint


# --------------------------------------------------------------------------------------------
# Delivery over OTLP


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tree_arrives_over_otlp_with_service_name(
    receiver: OtlpReceiver, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "research-svc")
    setup = configure_tracing(
        endpoint=endpoint_for(receiver, protocol), protocol=protocol, set_global=False
    )
    assert setup.exporters == ("otlp",)
    assert setup.protocol == protocol
    ids = make_tree(setup.tracer_provider)
    assert setup.shutdown()
    spans = receiver.wait_for_spans(4)
    assert_tree(spans, ids)
    assert {s.transport for s in spans} == {"grpc" if protocol == "grpc" else "http"}
    assert all(s.resource["service.name"] == "research-svc" for s in spans)
    assert setup.exported_spans == 4
    assert setup.dropped_spans == setup.failed_spans == 0


def test_default_service_name_is_orchestrator(receiver: OtlpReceiver) -> None:
    with configure_tracing(endpoint=receiver.http_endpoint, set_global=False) as setup:
        make_tree(setup.tracer_provider)
    spans = receiver.wait_for_spans(4)
    assert {s.resource["service.name"] for s in spans} == {"orchestrator"}


def test_service_name_argument_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    setup = configure_tracing(service_name="from-arg", set_global=False)
    assert setup.tracer_provider.resource.attributes["service.name"] == "from-arg"
    setup.shutdown()


def test_traces_endpoint_env_wins_over_general_endpoint(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    traces_url = f"{receiver.http_endpoint}/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces_url)
    setup = configure_tracing(set_global=False)
    assert setup.endpoint == traces_url
    make_tree(setup.tracer_provider)
    setup.shutdown()
    assert len(receiver.wait_for_spans(4)) == 4


def test_general_endpoint_and_protocol_from_env(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.grpc_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    setup = configure_tracing(set_global=False)
    assert (setup.protocol, setup.endpoint) == ("grpc", receiver.grpc_endpoint)
    ids = make_tree(setup.tracer_provider)
    setup.shutdown()
    spans = receiver.wait_for_spans(4)
    assert_tree(spans, ids)
    assert {s.transport for s in spans} == {"grpc"}


def test_endpoint_resolution_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_otlp_endpoint() is None
    # An explicit base URL gets the traces path; an explicit full URL is kept.
    assert resolve_otlp_endpoint("http://h:4318") == "http://h:4318/v1/traces"
    assert resolve_otlp_endpoint("http://h:4318/v1/traces") == "http://h:4318/v1/traces"
    assert resolve_otlp_endpoint("http://h:4317", "grpc") == "http://h:4317"
    # The general variable is a base URL even with a path; the traces one is used verbatim.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/otlp/")
    assert resolve_otlp_endpoint() == "http://c:4318/otlp/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/custom")
    assert resolve_otlp_endpoint() == "http://t:9/custom"
    assert resolve_otlp_endpoint("http://arg:1") == "http://arg:1/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigurationError, match="http/json"):
        resolve_otlp_endpoint()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    assert resolve_otlp_endpoint() == "http://t:9/custom"


def test_a_protocol_we_cannot_use_matters_only_where_spans_are_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a shell shared with another SDK may say http/json: every run was refused, even with no
    # endpoint (spans only to the local file) or with OTEL_TRACES_EXPORTER=none
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    assert resolve_otlp_endpoint() is None
    setup = configure_tracing(run_file=tmp_path / "run.jsonl", set_global=False)
    assert setup.endpoint is None and setup.trace_file == tmp_path / "run.jsonl"
    setup.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    configure_tracing(set_global=False).shutdown()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    configure_tracing(set_global=False).shutdown()
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    with pytest.raises(ConfigurationError, match="http/json"):  # where it would be used
        configure_tracing(set_global=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    with pytest.raises(ConfigurationError, match="grpcc"):  # an argument is always checked
        configure_tracing(protocol="grpcc", set_global=False)


def test_a_traces_endpoint_without_a_scheme_means_plain_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as the general endpoint and --endpoint already did; every export failed silently
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "127.0.0.1:4318/v1/traces")
    assert resolve_otlp_endpoint() == "http://127.0.0.1:4318/v1/traces"
    assert resolve_otlp_endpoint(protocol="grpc") == "127.0.0.1:4318/v1/traces"


# --------------------------------------------------------------------------------------------
# Exporter selection


def test_traces_exporter_none_exports_nothing(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.http_endpoint)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    setup = configure_tracing(runs_dir=tmp_path, set_global=False)
    assert setup.exporters == ()
    assert setup.endpoint is None and setup.trace_file is None
    make_tree(setup.tracer_provider)
    assert setup.shutdown()
    time.sleep(0.2)
    assert receiver.spans == []
    assert list(tmp_path.iterdir()) == []


def test_sdk_disabled_names_no_trace_file_or_endpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the SDK made no spans, yet the CLI's summary pointed at a trace file that never came
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    setup = configure_tracing(run_file=tmp_path / "run.jsonl", set_global=False)
    assert setup.exporters == () and setup.endpoint is None and setup.trace_file is None
    assert setup.shutdown()
    assert list(tmp_path.iterdir()) == []


def test_no_endpoint_no_file_means_no_exporter() -> None:
    setup = configure_tracing(set_global=False)
    assert setup.exporters == ()
    assert "not exported" in setup.describe()
    setup.shutdown()


def test_explicit_otlp_without_endpoint_uses_the_spec_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    setup = configure_tracing(set_global=False)
    assert (setup.exporters, setup.endpoint) == (("otlp",), "http://localhost:4318/v1/traces")
    assert setup.shutdown()  # nothing ended, nothing sent
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    setup = configure_tracing(set_global=False)
    assert setup.endpoint == "http://localhost:4317"
    assert setup.shutdown()


def test_flush_tracer_provider_for_any_provider(receiver: OtlpReceiver) -> None:
    setup = configure_tracing(endpoint=receiver.http_endpoint, set_global=False)
    make_tree(setup.tracer_provider)
    assert flush_tracer_provider(setup.tracer_provider, timeout=2.0)
    assert len(receiver.spans) == 4
    assert flush_tracer_provider(trace.NoOpTracerProvider())  # nothing to flush
    setup.shutdown()


def test_console_exporter_writes_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    setup = configure_tracing(set_global=False)
    assert setup.exporters == ("console",)
    make_tree(setup.tracer_provider)
    setup.shutdown()
    out, err = capfd.readouterr()
    assert "invoke_agent researcher" in err
    assert "invoke_agent researcher" not in out


def test_explicit_provider_gets_processors_but_is_not_shut_down(receiver: OtlpReceiver) -> None:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    setup = configure_tracing(tracer_provider=provider, endpoint=receiver.http_endpoint)
    assert setup.tracer_provider is provider
    make_tree(provider)
    setup.shutdown()
    assert len(receiver.wait_for_spans(4)) == 4
    # The caller's own processor still works after our shutdown; ours no longer sees spans.
    with provider.get_tracer("t").start_as_current_span("after"):
        pass
    assert [s.name for s in memory.get_finished_spans()][-1] == "after"
    assert (setup.ended_spans, setup.dropped_spans) == (4, 0)
    provider.shutdown()


@pytest.fixture
def restore_global_provider() -> Iterator[None]:
    # OpenTelemetry sets the global provider once per process; tests that set it must undo it.
    saved = trace._TRACER_PROVIDER
    yield
    trace._TRACER_PROVIDER = saved
    trace._TRACER_PROVIDER_SET_ONCE = Once()


def test_sets_global_provider_unless_given_one(restore_global_provider: None) -> None:
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    setup = configure_tracing()
    try:
        assert trace.get_tracer_provider() is setup.tracer_provider
        # A second call reuses the global SDK provider (OTel refuses to replace it).
        again = configure_tracing()
        assert again.tracer_provider is setup.tracer_provider
        again.shutdown()
    finally:
        setup.shutdown()


def test_a_setup_shut_down_leaves_the_global_provider_for_the_next_one(
    restore_global_provider: None, tmp_path: Path
) -> None:
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    first = configure_tracing(runs_dir=tmp_path / "first")
    make_tree(first.tracer_provider)
    first.shutdown()
    assert first.ended_spans == 4
    for i in range(3):  # configure, trace, shut down: as a service would, job after job
        again = configure_tracing(runs_dir=tmp_path / f"again-{i}")
        assert again.tracer_provider is first.tracer_provider
        make_tree(again.tracer_provider)
        again.shutdown()
        assert again.exported_spans == 4
    assert (first.ended_spans, first.dropped_spans) == (4, 0)  # later spans never reach it


def test_a_service_name_the_reused_global_provider_cannot_take_is_warned_of(
    restore_global_provider: None, caplog: pytest.LogCaptureFixture
) -> None:
    # job after job with its own service name: every run showed under the first one, silently
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    configure_tracing(service_name="svc-alpha").shutdown()
    with caplog.at_level("WARNING", logger="orchestrator"):
        configure_tracing(service_name="svc-alpha").shutdown()
        assert not caplog.records
        again = configure_tracing(service_name="svc-beta")
        again.shutdown()
    assert again.tracer_provider.resource.attributes["service.name"] == "svc-alpha"
    assert "'svc-beta' ignored" in caplog.text and "set_global=False" in caplog.text


def test_shutting_down_the_setup_that_made_the_global_provider_leaves_others_exporting(
    restore_global_provider: None, tmp_path: Path
) -> None:
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    maker = configure_tracing(runs_dir=tmp_path / "maker")
    user = configure_tracing(runs_dir=tmp_path / "user")
    maker.shutdown()
    make_tree(user.tracer_provider)
    user.shutdown()
    assert (user.exported_spans, user.dropped_spans) == (4, 0)


def test_a_flush_waiting_on_a_silent_collector_is_not_started_again_until_it_ends() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        setup = configure_tracing(
            endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}", set_global=False
        )
        make_tree(setup.tracer_provider)
        before = set(threading.enumerate())  # an earlier test's abandoned flush may still run
        results = [flush_tracer_provider(setup.tracer_provider, timeout=0.2) for _ in range(4)]
        flushing = [
            t for t in set(threading.enumerate()) - before if t.name == "orchestrator-trace flush"
        ]
        assert results == [False] * 4
        assert len(flushing) == 1  # not one per call
        setup.shutdown(timeout=0.5)


class _SlowExporter(InMemorySpanExporter):
    def export(self, spans: Any) -> Any:
        time.sleep(0.3)
        return super().export(spans)


def test_flushes_that_overlap_against_a_healthy_collector_both_flush() -> None:
    provider = TracerProvider()
    exporter = _SlowExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    make_tree(provider)
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(flush_tracer_provider(provider, 5.0)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True]
    assert len(exporter.get_finished_spans()) == 4
    provider.shutdown()


def test_flushing_a_provider_that_takes_no_weak_reference_works() -> None:
    class Minimal:
        __slots__ = ()

        def force_flush(self) -> bool:
            return True

    assert flush_tracer_provider(Minimal()) is True


def test_a_processor_added_to_the_global_provider_by_the_program_is_flushed_at_exit(
    tmp_path: Path,
) -> None:
    program = f"""
from pathlib import Path
from opentelemetry import trace
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from orchestrator.tracing import configure_tracing

class Marker(SpanExporter):
    def export(self, spans):
        with open({str(tmp_path / "exported")!r}, "a") as f:
            f.write("".join(s.name + "\\n" for s in spans))
        return SpanExportResult.SUCCESS

setup = configure_tracing(runs_dir=Path({str(tmp_path / "runs")!r}))
trace.get_tracer_provider().add_span_processor(BatchSpanProcessor(Marker()))
with trace.get_tracer("t").start_as_current_span("mine"):
    pass
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "exported").read_text() == "mine\n"


# --------------------------------------------------------------------------------------------
# A dead endpoint must not hold up exit


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dead_endpoint_does_not_stall_flush_or_shutdown(protocol: str) -> None:
    setup = configure_tracing(
        endpoint=f"http://127.0.0.1:{closed_port()}", protocol=protocol, set_global=False
    )
    for _ in range(3):
        make_tree(setup.tracer_provider)  # 12 spans in one batch
    started = time.perf_counter()
    flushed = setup.force_flush()
    flush_s = time.perf_counter() - started
    for _ in range(1000):
        make_tree(setup.tracer_provider)  # 4,000 more: 8 batches, each would retry ~1 s
    started = time.perf_counter()
    setup.shutdown()
    shutdown_s = time.perf_counter() - started
    print(f"{protocol}: dead-endpoint flush {flush_s:.2f}s, shutdown {shutdown_s:.2f}s")
    assert not flushed
    # each is bounded by the 2 s export timeout; the stall this guards against (the SDK
    # retrying batch after batch against a dead collector) held a shutdown 6.5-7.4 s. The
    # margin is for a loaded machine: a thread woken late, not a window around 2 s.
    assert flush_s < 6.0
    assert shutdown_s < 6.0
    assert setup.exported_spans == 0
    # Every span is accounted for: handed to the exporter and failed, or never handed.
    assert setup.failed_spans + setup.dropped_spans == 4012


async def test_async_flush_is_bounded_on_dead_endpoint() -> None:
    # a 60 s export timeout: the exporter itself keeps retrying the dead endpoint for ~30 s,
    # so only the flush's own 0.5 s bound can make it return in well under that
    setup = configure_tracing(
        endpoint=f"http://127.0.0.1:{closed_port()}", set_global=False, export_timeout=60
    )
    make_tree(setup.tracer_provider)
    started = time.monotonic()
    ok = await setup.flush(timeout=0.5)
    elapsed = time.monotonic() - started
    assert not ok
    assert elapsed < 10
    setup.shutdown(timeout=1.0)  # aborts the retries the abandoned flush is still making


async def test_async_flush_delivers_before_shutdown(receiver: OtlpReceiver) -> None:
    setup = configure_tracing(endpoint=receiver.http_endpoint, set_global=False)
    ids = make_tree(setup.tracer_provider)
    started = time.perf_counter()
    assert await setup.flush()
    print(f"live flush of 4 spans: {(time.perf_counter() - started) * 1000:.1f} ms")
    assert_tree(receiver.spans, ids)  # already there, no waiting
    setup.shutdown()


# --------------------------------------------------------------------------------------------
# Dropped spans


def test_dropped_spans_are_counted_when_the_queue_is_tiny() -> None:
    # A collector that takes 0.3 s per request keeps the worker busy while spans pour in.
    with OtlpReceiver(http_delay=0.3) as slow:
        setup = configure_tracing(endpoint=slow.http_endpoint, max_queue_size=4, set_global=False)
        tracer = setup.tracer_provider.get_tracer("t")
        for i in range(200):
            with tracer.start_as_current_span(f"s{i}"):
                pass
        assert setup.dropped_spans > 100
        setup.shutdown(timeout=5.0)
        received = slow.wait_for_spans(setup.exported_spans, timeout=2)
    assert len(received) == setup.exported_spans
    assert setup.exported_spans + setup.failed_spans + setup.dropped_spans == 200
    assert setup.failed_spans == 0


# --------------------------------------------------------------------------------------------
# The OTLP/JSON lines file


def test_file_exporter_writes_collector_style_otlp_json(tmp_path: Path) -> None:
    run_file = tmp_path / "runs" / f"{RUN_ID}.jsonl"
    setup = configure_tracing(run_file=run_file, set_global=False)
    assert setup.exporters == ("file",) and setup.trace_file == run_file
    ids = make_tree(setup.tracer_provider)
    assert setup.shutdown()
    lines = run_file.read_text().splitlines()
    assert lines
    doc = json.loads(lines[0])
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)  # hex, not base64
    assert len(span["spanId"]) == 16
    assert isinstance(span["startTimeUnixNano"], str)  # 64-bit ints are strings in OTLP/JSON
    attrs = {a["key"]: a["value"] for s in _all_spans(lines) for a in s.get("attributes", [])}
    assert attrs["gen_ai.usage.input_tokens"] == {"intValue": "1200"}
    assert attrs["gen_ai.request.temperature"] == {"doubleValue": 0.25}
    assert attrs["gen_ai.request.stream"] == {"boolValue": True}
    assert attrs["gen_ai.response.finish_reasons"] == {
        "arrayValue": {"values": [{"stringValue": "end_turn"}]}
    }
    resource = doc["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "orchestrator"}} in resource

    records = load_trace(run_file)
    assert sorted(r.name for r in records) == sorted(TREE)
    by_id = {r.span_id: r for r in records}
    for record in records:
        assert (record.trace_id, record.span_id) == ids[record.name]
        if record.parent_span_id is not None:
            assert record.parent_span_id in by_id
    chat = next(r for r in records if r.name == "chat m1")
    researcher = by_id[chat.parent_span_id or ""]
    assert researcher.name == "invoke_agent researcher"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 1200
    assert chat.kind == 3


def test_a_trace_file_gets_its_whole_backlog_written_at_shutdown(tmp_path: Path) -> None:
    """The exit deadline is for collectors that may be dead; a file only has encoding left to
    do, and a big run's backlog used to be cut there (1,229 of 13,005 spans lost)."""
    run_file = tmp_path / "big.jsonl"
    setup = configure_tracing(run_file=run_file, set_global=False, export_timeout=0.05)
    tracer = setup.tracer_provider.get_tracer("t")
    attributes = {f"a{k}": "x" * 400 for k in range(20)}  # slower to encode than to make
    for i in range(3_000):
        with tracer.start_as_current_span(f"s{i}", attributes=attributes):
            pass
    assert setup.shutdown()
    assert (setup.exported_spans, setup.failed_spans, setup.dropped_spans) == (3_000, 0, 0)
    assert len(load_trace(run_file)) == 3_000


def test_an_explicit_shutdown_timeout_bounds_the_trace_file_too(tmp_path: Path) -> None:
    # the same backlog as above; without a timeout it is all written, with 0.05 s the shutdown
    # gives up on it. Encoding a span costs more than making one, and both share one GIL, so
    # the backlog at shutdown does not depend on the machine's load.
    setup = configure_tracing(run_file=tmp_path / "t.jsonl", set_global=False)
    tracer = setup.tracer_provider.get_tracer("t")
    attributes = {f"a{k}": "x" * 400 for k in range(20)}
    for i in range(3_000):
        with tracer.start_as_current_span(f"s{i}", attributes=attributes):
            pass
    setup.shutdown(timeout=0.05)
    assert setup.failed_spans > 0  # it gave up before the backlog was written
    assert setup.exported_spans + setup.failed_spans == 3_000
    written = tmp_path / "t.jsonl"  # made when the first span is written
    assert len(load_trace(written) if written.exists() else []) == setup.exported_spans


def _all_spans(lines: list[str]) -> list[dict[str, Any]]:
    return [
        span
        for line in lines
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def test_runs_dir_gets_a_fresh_file_and_no_file_without_spans(tmp_path: Path) -> None:
    setup = configure_tracing(runs_dir=tmp_path, set_global=False)
    assert setup.trace_file is not None and setup.trace_file.parent == tmp_path
    assert setup.trace_file.suffix == ".jsonl"
    setup.shutdown()
    assert not setup.trace_file.exists()  # nothing traced, nothing written


def test_the_trace_folder_and_file_may_be_given_as_strings(tmp_path: Path) -> None:
    by_folder = configure_tracing(runs_dir=str(tmp_path / "runs"), set_global=False)
    by_file = configure_tracing(run_file=str(tmp_path / "one.jsonl"), set_global=False)
    assert by_folder.trace_file is not None and by_folder.trace_file.parent == tmp_path / "runs"
    assert by_file.trace_file == tmp_path / "one.jsonl"
    by_folder.shutdown()
    by_file.shutdown()


def test_a_trace_folder_that_cannot_be_created_is_refused_before_anything_is_set_up(
    tmp_path: Path,
) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(ConfigurationError, match="trace folder"):
        configure_tracing(runs_dir=tmp_path / "a_file" / "runs", set_global=False)


def test_otlp_json_round_trips_to_the_same_protobuf() -> None:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    make_tree(provider)
    spans: tuple[ReadableSpan, ...] = memory.get_finished_spans()
    original = encode_spans(spans)
    assert decode_otlp_json(encode_otlp_json(original)) == original


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_saved_trace_exported_later_arrives_intact(
    receiver: OtlpReceiver, protocol: str, tmp_path: Path
) -> None:
    run_file = tmp_path / "run.jsonl"
    setup = configure_tracing(run_file=run_file, set_global=False)
    ids = make_tree(setup.tracer_provider)
    setup.shutdown()
    saved = {r.span_id: r for r in load_trace(run_file)}

    sent = export_trace(run_file, endpoint_for(receiver, protocol), protocol)
    assert sent == 4
    spans = receiver.wait_for_spans(4)
    assert_tree(spans, ids)
    for span in spans:
        record = saved[span.span_id]
        assert span.attributes == record.attributes
        assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
            record.start_ns,
            record.end_ns,
        )
        assert span.resource["service.name"] == "orchestrator"


# --------------------------------------------------------------------------------------------
# Content capture switch and helper


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        ("", False),
        ("false", False),
        ("EVENT_ONLY", False),
        ("true", True),
        ("True", True),
        ("SPAN_ONLY", True),
        ("span_and_event", True),
    ],
)
def test_content_capture_switch(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is not None:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    assert content_capture_enabled() is expected


def test_content_for_span_redacts_then_truncates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_API_KEY", "s3cr3t-value-123")
    text = content_for_span([{"role": "user", "content": "key s3cr3t-value-123 here"}])
    assert "s3cr3t" not in text and "[REDACTED]" in text
    assert json.loads(text)[0]["role"] == "user"
    long = content_for_span("x" * 100 + "Bearer abcdefghijklmnop", max_chars=50)
    assert long.startswith("x" * 50) and "truncated" in long and "abcdefgh" not in long


# --------------------------------------------------------------------------------------------
# Import cost


def test_importing_tracing_does_not_load_exporters() -> None:
    code = (
        "import sys, orchestrator.tracing; "
        "heavy = [m for m in ('grpc', 'opentelemetry.exporter.otlp.proto.http.trace_exporter', "
        "'opentelemetry.exporter.otlp.proto.grpc.trace_exporter', 'google.protobuf.json_format') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"


def test_invalid_arguments_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        configure_tracing(export_timeout=0, set_global=False)
    with pytest.raises(ConfigurationError):
        configure_tracing(protocol="http/json", endpoint="http://x", set_global=False)


def test_setup_type_is_exported() -> None:
    assert TracingSetup.__name__ == "TracingSetup"


async def test_overlapping_jobs_with_their_own_providers_write_only_their_own_runs(
    tmp_path: Path,
) -> None:
    # the README's pattern for per-job files when jobs overlap (a setup on the global
    # provider sees every run of the process while it is attached)
    from orchestrator import Agent, run
    from orchestrator.models import FunctionModel, text

    async def slow(request: Any) -> Any:
        await trio.sleep(0.1)
        return text("done")

    agent = Agent("a", "A.", model=FunctionModel(slow))

    async def job(name: str) -> None:
        setup = configure_tracing(run_file=tmp_path / f"{name}.jsonl", set_global=False)
        try:
            await run(agent, "go", run_id=name, tracer_provider=setup.tracer_provider)
        finally:
            await trio.to_thread.run_sync(setup.shutdown)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job, "job1")
        await trio.sleep(0.03)
        nursery.start_soon(job, "job2")
    for name in ("job1", "job2"):
        spans = load_trace(tmp_path / f"{name}.jsonl")
        assert spans and {s.attributes.get("gen_ai.conversation.id") for s in spans} == {name}
