"""Hosted tools in the trace: each server tool use is an ``execute_tool`` span under its chat.

A lead on Claude (the real anthropic SDK over real HTTP to the fake Messages server) searches
twice (the second search fails at the provider) and fetches a page in one answer. Traced through
a program's own SDK provider (the SDK's road) and through ``configure_tracing``'s trace file
(the direct road), with content capture off and on: both roads give the same spans, the spans
say what DESIGN says, and their times are the stream's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.fake_messages_server import (
    FakeMessagesServer,
    cited_text,
    server_tool_use,
    text,
    web_fetch_result,
    web_search_result,
)
from support.fake_messages_server import Message as Reply

from orchestrator import Agent, RunResult, RunStatus, Usage, WebFetch, WebSearch, run
from orchestrator.core.messages import ServerToolResultBlock, ServerToolUseBlock, TextBlock
from orchestrator.models.anthropic import AnthropicModel
from orchestrator.models.base import ModelContext, ModelRequest, ModelResponse
from orchestrator.tracing import OtlpJsonLinesExporter, configure_tracing
from orchestrator.tracing.tracefiles import SpanRecord, load_trace

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
URL_A = "https://trio.readthedocs.io/en/stable/reference-core.html"
URL_B = "https://peps.python.org/pep-0789/"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv(CAPTURE, raising=False)


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


def researched() -> Reply:
    """Two searches (the second refused by the provider: too many uses), a fetch, a citation."""
    failed = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_s2",
        "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
    }
    return Reply(
        (
            server_tool_use("web_search", {"query": "trio nursery"}, id="srvtoolu_s1"),
            web_search_result("srvtoolu_s1", (URL_A, "Trio core"), (URL_B, "PEP 789")),
            server_tool_use("web_search", {"query": "trio cancel scope"}, id="srvtoolu_s2"),
            failed,
            server_tool_use("web_fetch", {"url": URL_A}, id="srvtoolu_f1"),
            web_fetch_result("srvtoolu_f1", URL_A, "A nursery is a scope for child tasks."),
            cited_text("A nursery scopes child tasks.", (URL_A, "a scope for child tasks")),
        ),
        usage={"server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 1}},
        chunk_chars=4,
    )


async def traced(server: FakeMessagesServer, provider: Any) -> RunResult:
    server.cache.clear()  # each road's run writes the same cache entries (same usage)
    server.push(researched())
    lead = Agent(
        "lead",
        "Research.",
        model=AnthropicModel(base_url=server.url),
        tools=[WebSearch(), WebFetch()],
    )
    result = await run(lead, "What is a trio nursery?", tracer_provider=provider)
    assert result.status is RunStatus.COMPLETED, result.error
    return result


async def sdk_road(server: FakeMessagesServer, folder: Path) -> tuple[RunResult, list[SpanRecord]]:
    exporter = OtlpJsonLinesExporter(folder / "sdk.jsonl")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = await traced(server, provider)
    provider.shutdown()
    return result, list(load_trace(exporter.path))


async def direct_road(
    server: FakeMessagesServer, folder: Path
) -> tuple[RunResult, list[SpanRecord]]:
    setup = configure_tracing(run_file=folder / "direct.jsonl", keep_file=True, set_global=False)
    result = await traced(server, setup.tracer_provider)
    assert setup.shutdown()
    assert setup.trace_file is not None
    return result, list(load_trace(setup.trace_file))


def canonical(records: list[SpanRecord], run_id: str) -> list[dict[str, Any]]:
    """Each span without ids and times (nor the response's), its parent named by its path."""
    by_id = {r.span_id: r for r in records}

    def path(span_id: str | None) -> str:
        names = []
        while span_id in by_id:
            names.append(by_id[span_id].name)
            span_id = by_id[span_id].parent_span_id
        return " / ".join(reversed(names))

    def plain(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(run_id, "<run>")
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    out = [
        {
            "path": path(r.span_id),
            "kind": r.kind,
            "status": r.status,
            "status_message": plain(r.status_message),
            "attributes": {
                k: plain(v)
                for k, v in sorted(r.attributes.items())
                if k != "gen_ai.response.id"  # the server's numbering of its requests
            },
            "events": [e.name for e in r.events],
        }
        for r in records
    ]
    return sorted(out, key=lambda s: (s["path"], json.dumps(s, sort_keys=True)))


def server_spans(records: list[SpanRecord]) -> list[SpanRecord]:
    return sorted(
        (r for r in records if r.attributes.get("gen_ai.tool.type") == "server"),
        key=lambda r: (r.start_ns, r.end_ns),
    )


@pytest.mark.parametrize("capture", [False, True], ids=["plain", "content"])
async def test_both_roads_trace_each_server_tool_use_as_the_same_execute_tool_span(
    server: FakeMessagesServer, tmp_path: Path, capture: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if capture:
        monkeypatch.setenv(CAPTURE, "true")
    sdk_result, sdk = await sdk_road(server, tmp_path)
    direct_result, direct = await direct_road(server, tmp_path)

    assert canonical(sdk, sdk_result.run_id) == canonical(direct, direct_result.run_id)
    for records in (sdk, direct):
        (chat,) = [r for r in records if r.name.startswith("chat ")]
        search, refused, fetch = server_spans(records)
        assert [s.name for s in (search, refused, fetch)] == [
            "execute_tool web_search",
            "execute_tool web_search",
            "execute_tool web_fetch",
        ]
        for s in (search, refused, fetch):
            assert s.parent_span_id == chat.span_id  # under the turn's chat span
            assert s.attributes["gen_ai.operation.name"] == "execute_tool"
            assert s.attributes["gen_ai.agent.name"] == "lead"
        assert [s.attributes["gen_ai.tool.call.id"] for s in (search, refused, fetch)] == [
            "srvtoolu_s1",
            "srvtoolu_s2",
            "srvtoolu_f1",
        ]
        assert (search.status, search.attributes["orchestrator.tool.result_count"]) == ("OK", 2)
        assert fetch.attributes["orchestrator.tool.result_count"] == 1
        assert refused.status == "ERROR"
        assert refused.attributes["error.type"] == "max_uses_exceeded"
        assert "orchestrator.tool.result_count" not in refused.attributes
        # the query and the URL are content: recorded only when capture is on
        arguments = [s.attributes.get("gen_ai.tool.call.arguments") for s in (search, fetch)]
        if capture:
            assert [json.loads(str(a)) for a in arguments] == [
                {"query": "trio nursery"},
                {"url": URL_A},
            ]
            found = json.loads(str(search.attributes["gen_ai.tool.call.result"]))
            assert [f["url"] for f in found] == [URL_A, URL_B]
        else:
            assert arguments == [None, None]
            assert not any("gen_ai.tool.call.result" in s.attributes for s in (search, fetch))
        # the usage counts on the chat span, besides the tokens
        assert chat.attributes["orchestrator.usage.web_search_requests"] == 2
        assert chat.attributes["orchestrator.usage.web_fetch_requests"] == 1


async def test_a_server_tool_spans_times_are_the_streams(
    server: FakeMessagesServer, tmp_path: Path
) -> None:
    for road in (sdk_road, direct_road):
        _, records = await road(server, tmp_path)
        (chat,) = [r for r in records if r.name.startswith("chat ")]
        search, refused, fetch = server_spans(records)
        # each from its server_tool_use block's start to its result's arrival, in stream
        # order, inside the call (not all at the response's time)
        order = [chat.start_ns]
        for s in (search, refused, fetch):
            order += [s.start_ns, s.end_ns]
        order.append(chat.end_ns)
        assert order == sorted(order)
        assert all(s.start_ns < s.end_ns for s in (search, refused, fetch))


async def test_a_call_paused_before_its_result_ends_with_its_response_and_the_result_follows(
    server: FakeMessagesServer, tmp_path: Path
) -> None:
    server.push(
        Reply(
            (server_tool_use("web_search", {"query": "trio"}, id="srvtoolu_p"),),
            stop_reason="pause_turn",
        ),
        Reply(
            (
                web_search_result("srvtoolu_p", (URL_A, "Trio core")),
                cited_text("Trio has nurseries.", (URL_A, "nurseries")),
            ),
            usage={"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}},
        ),
    )
    setup = configure_tracing(run_file=tmp_path / "p.jsonl", keep_file=True, set_global=False)
    lead = Agent("lead", "R.", model=AnthropicModel(base_url=server.url), tools=[WebSearch()])
    result = await run(lead, "q", tracer_provider=setup.tracer_provider)
    assert setup.shutdown() and setup.trace_file is not None
    assert result.output == "Trio has nurseries."
    records = list(load_trace(setup.trace_file))
    chats = sorted((r for r in records if r.name.startswith("chat ")), key=lambda r: r.start_ns)
    paused, answered = server_spans(records)
    assert paused.parent_span_id == chats[0].span_id
    assert paused.attributes["orchestrator.outcome"] == "no_result"
    assert paused.end_ns <= chats[0].end_ns
    assert answered.parent_span_id == chats[1].span_id
    assert answered.attributes["gen_ai.tool.call.id"] == "srvtoolu_p"
    assert answered.attributes["orchestrator.tool.result_count"] == 1
    assert answered.name == "execute_tool web_search"
    assert chats[1].start_ns <= answered.start_ns < answered.end_ns <= chats[1].end_ns


async def test_a_run_without_hosted_tools_has_no_server_spans(
    server: FakeMessagesServer, tmp_path: Path
) -> None:
    server.push(text("plain"))
    setup = configure_tracing(run_file=tmp_path / "n.jsonl", keep_file=True, set_global=False)
    lead = Agent("lead", "R.", model=AnthropicModel(base_url=server.url))
    await run(lead, "q", tracer_provider=setup.tracer_provider)
    assert setup.shutdown() and setup.trace_file is not None
    records = list(load_trace(setup.trace_file))
    assert server_spans(records) == []
    (chat,) = [r for r in records if r.name.startswith("chat ")]
    assert "orchestrator.usage.web_search_requests" not in chat.attributes


class NotStreaming:
    """A model that runs web search at its provider and answers whole (no stream, so no
    times), once with times that are not times."""

    name = "whole"
    provider = "whole"
    supports_hosted_tools = ("web_search",)

    def __init__(self, times: tuple[Any, ...] = ()) -> None:
        self.times = times

    def cost(self, usage: Usage) -> float:
        return 0.0

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        return ModelResponse(
            (
                ServerToolUseBlock(server_tool_use("web_search", {"query": "q"}, id="srv_1")),
                ServerToolResultBlock(web_search_result("srv_1", (URL_A, "Trio core"))),
                TextBlock("found"),
            ),
            "end_turn",
            server_tool_times=self.times,
        )


@pytest.mark.parametrize(
    "times", [(), (("srv_1", "soon", None), "junk")], ids=["none", "not-times"]
)
async def test_a_response_without_stream_times_puts_the_span_at_the_responses_time(
    tmp_path: Path, times: tuple[Any, ...]
) -> None:
    setup = configure_tracing(run_file=tmp_path / "w.jsonl", keep_file=True, set_global=False)
    lead = Agent("lead", "R.", model=NotStreaming(times), tools=[WebSearch()])  # type: ignore[arg-type]
    result = await run(lead, "q", tracer_provider=setup.tracer_provider)
    assert setup.shutdown() and setup.trace_file is not None
    assert result.output == "found"
    records = list(load_trace(setup.trace_file))
    (chat,) = [r for r in records if r.name.startswith("chat ")]
    (search,) = server_spans(records)
    assert search.parent_span_id == chat.span_id
    assert chat.start_ns <= search.start_ns == search.end_ns <= chat.end_ns
    assert search.attributes["orchestrator.tool.result_count"] == 1
    assert "orchestrator.attribute_error" not in search.attributes
