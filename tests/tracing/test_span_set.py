"""The span set a run makes is pinned: names, nesting, kinds, statuses, events and every attribute.

One small tree (a lead that spawns a worker and calls two tools in one turn, one of which
fails; the worker looks something up and fetches it with a retry, an event, then answers) is
traced four ways: through a program's own SDK ``TracerProvider``, through
``configure_tracing``'s trace file (what the CLI writes), through OTLP/HTTP to a real receiver
(with the file kept, as the CLI does), and with content capture on. Each is reduced to a canonical form (ids and times left out, the run id replaced,
parents named by their path) and compared with ``span_set.json``, recorded before tracing was
made faster: how spans are made may change, what they say may not. Regenerate the file only
for a deliberate change of the span set (``ORCHESTRATOR_PIN_SPANS=1``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.otlp_receiver import OtlpReceiver, ReceivedSpan

from orchestrator import Agent, Limits, RunResult, ToolError, Usage, run_sync, tool
from orchestrator.models import FunctionModel, response, text, tool_call
from orchestrator.models.base import ModelRequest, ModelResponse
from orchestrator.tracing import OtlpJsonLinesExporter, configure_tracing
from orchestrator.tracing.tracefiles import SpanRecord, load_trace

PINNED = Path(__file__).with_name("span_set.json")
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


@tool
async def lookup(item: str) -> str:
    """Look an item up.

    Args:
        item: what to look up
    """
    return f"{item}: found"


@tool
async def flaky(item: str) -> str:
    """Fail, always.

    Args:
        item: anything
    """
    raise ToolError(f"no such item: {item}")


_fetched: list[str] = []


@tool(idempotent=True)
async def fetch(item: str) -> str:
    """Fetch an item: the first attempt of each call fails, the retry works.

    Args:
        item: what to fetch
    """
    _fetched.append(item)
    if len(_fetched) % 2:
        raise ConnectionError("the first attempt fails")
    return f"{item}: fetched"


WORKER = Agent("worker", "You look things up.", description="Looks up.", tools=[lookup, fetch])
LEAD = Agent("lead", "You lead.", tools=[lookup, flaky], subagents=[WORKER])


def answer(request: ModelRequest) -> ModelResponse:
    turn = (len(request.messages) - 1) // 2
    usage = Usage(100 + 10 * turn, 20, 5, 1)
    if request.agent.depth == 0 and turn == 0:
        return response(
            tool_call("spawn_subagent", {"agent": "worker", "task": "Find a."}, id="toolu_s1"),
            tool_call("lookup", {"item": "b"}, id="toolu_l1"),
            tool_call("flaky", {"item": "c"}, id="toolu_f1"),
            usage=usage,
        )
    if request.agent.depth == 1 and turn == 0:
        return response(
            tool_call("lookup", {"item": "a"}, id="toolu_w1"),
            tool_call("fetch", {"item": "a"}, id="toolu_w2"),
            usage=usage,
        )
    return response(text(f"done at depth {request.agent.depth}"), usage=usage)


def run_tree(provider: Any) -> RunResult:
    result = run_sync(
        LEAD,
        "Find a, b and c.",
        model=FunctionModel(answer, name="pin-fm"),
        limits=Limits(max_concurrency=1),  # one order of sibling spans, whatever the scheduler
        tracer_provider=provider,
    )
    assert result.status.value == "completed", result.error
    return result


def _value(value: Any, run_id: str) -> Any:
    if isinstance(value, str):
        return value.replace(run_id, "<run>")
    if isinstance(value, list | tuple):
        return [_value(v, run_id) for v in value]
    return value


def canonical(
    spans: list[tuple[str, str, str | None, int, str, str, dict[str, Any], list[str], str]],
    run_id: str,
) -> list[dict[str, Any]]:
    """(span id, name, parent id, kind, status, status message, attributes, event names,
    scope) as sorted records that name each span's parent by its path of names."""
    by_id = {s[0]: s for s in spans}

    def path(span_id: str | None) -> str:
        names = []
        while span_id in by_id:
            names.append(by_id[span_id][1])
            span_id = by_id[span_id][2]
        return " / ".join(reversed(names))

    out = [
        {
            "path": path(span_id),
            "kind": kind,
            "status": status,
            "status_message": _value(message, run_id),
            "attributes": {k: _value(v, run_id) for k, v in sorted(attributes.items())},
            "events": events,
            "scope": scope,
        }
        for span_id, _name, _parent, kind, status, message, attributes, events, scope in spans
    ]
    return sorted(out, key=lambda r: (r["path"], json.dumps(r, sort_keys=True)))


def from_records(records: list[SpanRecord], run_id: str) -> list[dict[str, Any]]:
    return canonical(
        [
            (
                r.span_id,
                r.name,
                r.parent_span_id,
                r.kind,
                r.status,
                r.status_message,
                dict(r.attributes),
                [e.name for e in r.events],
                r.scope,
            )
            for r in records
        ],
        run_id,
    )


def from_received(received: list[ReceivedSpan], run_id: str) -> list[dict[str, Any]]:
    return canonical(
        [
            (
                r.span_id,
                r.name,
                r.parent_span_id,
                r.kind,
                STATUS[r.status_code],
                r.status_message,
                dict(r.attributes),
                [name for name, _ in r.events],
                r.scope,
            )
            for r in received
        ],
        run_id,
    )


def pinned(variant: str, got: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The pinned span set of ``variant`` (recorded from ``got`` when asked to pin)."""
    recorded = json.loads(PINNED.read_text()) if PINNED.exists() else {}
    if got is not None and os.environ.get("ORCHESTRATOR_PIN_SPANS") == "1":
        recorded[variant] = got
        PINNED.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    return list(recorded[variant])


@pytest.fixture
def capture(request: pytest.FixtureRequest) -> Iterator[bool]:
    on = bool(getattr(request, "param", False))
    old = os.environ.pop(CAPTURE, None)
    if on:
        os.environ[CAPTURE] = "true"
    yield on
    os.environ.pop(CAPTURE, None)
    if old is not None:
        os.environ[CAPTURE] = old


@pytest.mark.parametrize("capture", [False, True], indirect=True, ids=["plain", "content"])
def test_a_programs_own_sdk_provider_gets_the_pinned_span_set(
    tmp_path: Path, capture: bool
) -> None:
    exporter = OtlpJsonLinesExporter(tmp_path / "own.jsonl")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = run_tree(provider)
    provider.shutdown()
    got = from_records(list(load_trace(exporter.path)), result.run_id)
    assert got == pinned("content" if capture else "plain", got)


@pytest.mark.parametrize("capture", [False, True], indirect=True, ids=["plain", "content"])
def test_the_clis_trace_file_holds_the_pinned_span_set(tmp_path: Path, capture: bool) -> None:
    setup = configure_tracing(run_file=tmp_path / "cli.jsonl", keep_file=True, set_global=False)
    result = run_tree(setup.tracer_provider)
    assert setup.shutdown()
    assert setup.trace_file is not None
    got = from_records(list(load_trace(setup.trace_file)), result.run_id)
    assert got == pinned("content" if capture else "plain", got)


def test_otlp_export_and_its_kept_file_hold_the_pinned_span_set(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        setup = configure_tracing(
            endpoint=receiver.http_endpoint,
            run_file=tmp_path / "kept.jsonl",
            keep_file=True,
            set_global=False,
        )
        result = run_tree(setup.tracer_provider)
        assert setup.shutdown()
        expected = pinned("plain")
        received = receiver.wait_for_spans(len(expected))
    assert setup.trace_file is not None
    assert from_received(received, result.run_id) == expected
    assert from_records(list(load_trace(setup.trace_file)), result.run_id) == expected
