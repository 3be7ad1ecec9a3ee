"""OpenAIModel: the real openai SDK, over real HTTP, against the fake Chat Completions server.

Every test goes through ``OpenAIModel.request`` (or a whole run) with a real ``ClientPool``
inside an ``AsyncExitStack``, as a run does. Retry and backoff tests run on trio's virtual clock
(``MockClock`` with an autojump threshold of 0.1 s) and with ``timeout=None``, so that the only
deadlines are the retry sleeps (a jump while a request is in flight has nothing to reach). The
gate test, whose ordering depends on the client having read a response, uses ``quiet_clock``
and ``jump_when_idle``: time moves only while no request is in flight. Cancellation tests use
the real clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

# imported before any virtual clock runs: the adapter imports the SDK in a worker thread on
# first use, and an autojumping clock would jump to a pending deadline while that thread works
import openai
import pytest
import trio
import trio.testing
from support.clocks import jump_when_idle
from support.fake_chat_server import (
    Completion,
    Drop,
    DropMidStream,
    Endless,
    Error,
    FakeChatServer,
    Malformed,
    Stall,
    StreamError,
    text,
    tool_calls,
)
from support.transcripts import check_transcript

from orchestrator import Agent, Limits, RunStatus, run, tool
from orchestrator.core.errors import ConfigurationError, ModelError
from orchestrator.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from orchestrator.models import resolve_model
from orchestrator.models.base import AgentInfo, ClientPool, ModelContext, ModelRequest, ToolSpec
from orchestrator.models.openai import (
    FREE,
    INVALID_JSON_KEY,
    PRICES,
    OpenAIModel,
    Price,
    ollama,
    price_for,
)

CANARY_KEY = "sk-proj-canary-0123456789abcdef"
MODEL = "gpt-4.1-mini"
TOOLS = (
    ToolSpec(
        "search",
        "Search the corpus.",
        {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    ),
    ToolSpec(
        "read",
        "Read one document.",
        {"type": "object", "properties": {"doc_id": {"type": "string"}}, "required": ["doc_id"]},
    ),
)


# --------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    for name in (
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_CUSTOM_HEADERS",
        "OPENAI_ADMIN_KEY",
        "OLLAMA_HOST",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.1)


@pytest.fixture
def quiet_clock() -> trio.testing.MockClock:
    """A virtual clock that never jumps by itself: a test starts ``jump_when_idle`` on it, and
    time moves only while no request is in flight."""
    return trio.testing.MockClock()


@asynccontextmanager
async def open_ctx(**hooks: Any) -> AsyncIterator[ModelContext]:
    """A model context over a real ClientPool, closed (clients and all) on exit, like a run."""
    async with AsyncExitStack() as stack:
        yield ModelContext(ClientPool(stack), **hooks)


def make_request(
    messages: list[Message] | None = None,
    *,
    system: str = "You are a careful research assistant.",
    tools: tuple[ToolSpec, ...] = TOOLS,
    max_tokens: int = 1024,
) -> ModelRequest:
    return ModelRequest(
        system,
        list(messages or [Message.user("Hello")]),
        list(tools),
        max_tokens,
        AgentInfo("lead", "lead", 0),
    )


def model_for(server: FakeChatServer, name: str = MODEL, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel(name, base_url=server.url, **kwargs)


@tool
def search(query: str, limit: int = 3) -> str:
    """Search the corpus.

    Args:
        query: Plain keywords.
        limit: How many hits.
    """
    return f"{limit} hits for {query}"


# --------------------------------------------------------------------------------------------
# Construction, model strings, prices


def test_constructor_is_cheap_and_imports_no_sdk() -> None:
    code = (
        "import sys; from orchestrator.models.openai import OpenAIModel\n"
        "m = OpenAIModel('gpt-4.1', api_key='k' * 20)\n"
        "assert 'openai' not in sys.modules, 'SDK imported'\n"
        "assert 'k' * 20 not in repr(m), repr(m)\n"
        "print(m.name, m.provider)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["gpt-4.1", "openai"]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"timeout": -5}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retry_after": -1}, "max_retry_after"),
        ({"base_url": "localhost:8080/v1"}, "base_url"),
        ({"base_url": "ftp://proxy.example"}, "base_url"),
        ({"max_tokens_field": "max_output"}, "max_tokens_field"),
        ({"context_window": 0}, "context_window"),
        ({"tool_choice": 3}, "tool_choice"),
    ],
)
def test_a_setting_that_could_never_work_is_refused_when_the_model_is_built(
    options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        OpenAIModel(MODEL, **options)
    with pytest.raises(ConfigurationError, match="model name"):
        OpenAIModel(" ")


def test_model_strings_name_the_openai_and_ollama_providers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = resolve_model("openai:gpt-4.1-mini")
    assert isinstance(m, OpenAIModel) and (m.name, m.provider) == ("gpt-4.1-mini", "openai")
    local = resolve_model("ollama:llama3.2")
    assert isinstance(local, OpenAIModel) and (local.name, local.provider) == ("llama3.2", "ollama")
    assert local.price == FREE and local.has_endpoint and not m.has_endpoint
    assert local._credentials() == ("unused", "http://127.0.0.1:11434/v1")
    for host, url in [
        ("0.0.0.0", "http://0.0.0.0:11434/v1"),
        ("gpu-box:8000", "http://gpu-box:8000/v1"),
        ("https://ollama.example/", "https://ollama.example:11434/v1"),
        ("http://127.0.0.1:9999/v1", "http://127.0.0.1:9999/v1"),
    ]:
        monkeypatch.setenv("OLLAMA_HOST", host)
        assert ollama("x")._credentials()[1] == url, host
    with pytest.raises(ConfigurationError, match="unknown model"):
        resolve_model("openai:")


def test_prices_and_a_model_without_one() -> None:
    assert price_for("gpt-4.1-mini-2025-04-14") == PRICES["gpt-4.1-mini"]  # longest prefix
    assert price_for("gpt-4.1-2025-04-14") == PRICES["gpt-4.1"]
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=600_000)
    # 400k uncached * 0.40 + 600k cached * 0.10 + 100k out * 1.60, per million
    assert OpenAIModel("gpt-4.1-mini").cost(usage) == pytest.approx(0.16 + 0.06 + 0.16)
    assert price_for("smollm2") is None
    with pytest.raises(ConfigurationError, match=r"prices=Price"):
        OpenAIModel("smollm2").cost(usage)
    assert OpenAIModel("smollm2", prices=Price(1, 1, 1, 1)).cost(Usage(1_000_000)) == 1
    assert OpenAIModel("mine-7b", prices={"mine": FREE}).cost(usage) == 0


async def test_a_cost_budget_refuses_to_guess_the_price_of_an_unknown_model(
    server: FakeChatServer,
) -> None:
    server.responder = lambda body: text("free?")
    agent = Agent("a", "x", model=model_for(server, "local-gguf"))
    result = await run(agent, "go", limits=Limits(cost_budget_usd=1.0))
    assert result.status is RunStatus.ERROR and "prices=Price" in (result.error or "")
    assert not server.requests  # refused before anything was sent
    unbudgeted = await run(agent, "go")
    assert unbudgeted.status is RunStatus.COMPLETED and unbudgeted.usage.cost_usd == 0


# --------------------------------------------------------------------------------------------
# Streaming, content, usage


async def test_text_is_streamed_and_usage_mapped_with_cached_tokens(
    server: FakeChatServer,
) -> None:
    answer = "Trio is a friendly async library; nurseries keep tasks structured."
    server.push(
        text(
            answer,
            usage={
                "prompt_tokens": 920,
                "completion_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 800},
            },
        )
    )
    deltas: list[str] = []
    async with open_ctx(on_text_delta=deltas.append) as ctx:
        result = await model_for(server).request(make_request(), ctx)
    assert result.content == (TextBlock(answer),)
    assert len(deltas) > 3 and "".join(deltas) == answer  # published piece by piece
    assert (result.stop_reason, result.finish_reason) == ("end_turn", "stop")
    assert result.id.startswith("chatcmpl-") and result.model == MODEL
    u = result.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        920,
        15,
        800,
        0,
    )
    assert u.requests == 1
    assert u.cost_usd == pytest.approx((120 * 0.40 + 800 * 0.10 + 15 * 1.60) / 1e6)
    [sent] = server.requests
    assert sent.json is not None and sent.json["stream"] is True
    assert sent.json["stream_options"] == {"include_usage": True}
    assert sent.headers["authorization"] == f"Bearer {CANARY_KEY}"
    assert sent.headers.get("x-stainless-retry-count", "0") == "0"


async def test_the_simulated_prompt_cache_shows_in_usage_across_turns(
    server: FakeChatServer,
) -> None:
    server.responder = lambda body: text("next")
    messages = [Message.user("Survey structured concurrency in Python. " * 20)]
    async with open_ctx() as ctx:
        first = await model_for(server).request(make_request(messages), ctx)
        messages += [Message("assistant", first.content), Message.user("And trio?")]
        second = await model_for(server).request(make_request(messages), ctx)
    assert first.usage.cache_read_tokens == 0
    assert 0 < second.usage.cache_read_tokens < second.usage.input_tokens
    # the request prefix is byte-stable: the second body starts with the first's messages
    one, two = server.bodies
    assert two["messages"][: len(one["messages"])] == one["messages"]
    assert json.dumps(two["tools"]) == json.dumps(one["tools"])


async def test_parallel_tool_calls_are_assembled_from_split_deltas(
    server: FakeChatServer,
) -> None:
    args = {"query": "structured concurrency — trio", "limit": 5, "filters": {"year": [2024]}}
    server.push(
        tool_calls(
            ("search", args),
            ("read", {"doc_id": "topic:for"}),
            ids=["call_A", "call_B"],
            content="Searching.",
            chunk_chars=3,
        )
    )
    starts: list[tuple[str, str]] = []
    deltas: list[str] = []
    async with open_ctx(
        on_text_delta=deltas.append, on_tool_call_start=lambda i, n: starts.append((i, n))
    ) as ctx:
        result = await model_for(server).request(make_request(), ctx)
    assert result.content == (
        TextBlock("Searching."),
        ToolUseBlock("call_A", "search", args),
        ToolUseBlock("call_B", "read", {"doc_id": "topic:for"}),
    )
    assert result.stop_reason == "tool_use"
    assert starts == [("call_A", "search"), ("call_B", "read")]
    assert "".join(deltas) == "Searching."
    body = server.bodies[0]
    assert body["tool_choice"] == "auto"  # llama.cpp's server ignores tools without it
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus.",
            "parameters": TOOLS[0].input_schema,
        },
    }


async def test_the_transcript_is_converted_with_ids_tool_messages_and_no_null_content() -> None:
    with FakeChatServer(refuse_null_content=True) as server:
        server.push(text("done"))
        messages = [
            Message.user("Find papers on trio."),
            Message(
                "assistant",
                (
                    ThinkingBlock("I should search."),
                    ToolUseBlock("call_1", "search", {"query": "trio"}),
                    ToolUseBlock("call_2", "read", {"doc_id": "d"}),
                ),
            ),
            Message.user(
                ToolResultBlock("call_1", "3 papers found"),
                ToolResultBlock("call_2", "no such document", is_error=True),
                TextBlock("Be brief."),
            ),
        ]
        async with open_ctx() as ctx:
            await model_for(server).request(make_request(messages, system="Sys."), ctx)
        assert not server.errors
    assert server.bodies[0]["messages"] == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "Find papers on trio."},
        {
            "role": "assistant",
            "content": "",  # not null: llama.cpp's server refuses it
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "trio"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"doc_id": "d"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3 papers found"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such document"},
        {"role": "user", "content": "Be brief."},
    ]


@pytest.mark.parametrize(
    ("reply", "stop_reason"),
    [
        (text("a", finish_reason="stop"), "end_turn"),
        (text("b", finish_reason="length"), "max_tokens"),
        (text("c", finish_reason="content_filter"), "refusal"),
        (tool_calls(("search", {"query": "q"}), finish_reason="tool_calls"), "tool_use"),
        # some servers (older Ollama) say "stop" after tool calls: the calls still run
        (tool_calls(("search", {"query": "q"}), finish_reason="stop"), "tool_use"),
        (
            Completion(content="", refusal="I can't help with that.", finish_reason="stop"),
            "refusal",
        ),
    ],
    ids=["stop", "length", "content_filter", "tool_calls", "stop-with-calls", "refusal-field"],
)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_finish_reasons_are_mapped(
    server: FakeChatServer, reply: Completion, stop_reason: str, stream: bool
) -> None:
    server.push(reply)
    async with open_ctx() as ctx:
        result = await model_for(server, stream=stream).request(make_request(), ctx)
    assert result.stop_reason == stop_reason
    assert result.finish_reason == reply.reason
    if reply.refusal:
        assert result.content == (TextBlock(reply.refusal),)
    assert len(server.requests) == 1
    assert ("stream" in server.bodies[0]) is stream


async def test_an_unknown_finish_reason_is_an_error_naming_it(server: FakeChatServer) -> None:
    server.push(text("?", finish_reason="function_call"))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(), ctx)
    assert "function_call" in str(caught.value) and not caught.value.fatal
    assert caught.value.usage is not None and caught.value.usage.output_tokens > 0  # billed
    assert len(server.requests) == 1  # not retried
    server.push(text("?", finish_reason="eos_token"))
    result = await run(Agent("a", "x", model=model_for(server)), "go")
    assert result.status is RunStatus.ERROR and "eos_token" in (result.error or "")


async def test_reasoning_text_becomes_a_thinking_block_that_is_not_sent_back(
    server: FakeChatServer,
) -> None:
    server.push(text("42", reasoning="Six times seven."), text("ok"))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(), ctx)
        assert result.content == (ThinkingBlock("Six times seven."), TextBlock("42"))
        messages = [Message.user("q"), Message("assistant", result.content), Message.user("more")]
        await model_for(server).request(make_request(messages), ctx)
    assert server.bodies[1]["messages"][2] == {"role": "assistant", "content": "42"}


async def test_arguments_that_are_not_json_reach_the_model_as_an_error_result_not_a_crash(
    server: FakeChatServer,
) -> None:
    calls: list[str] = []

    @tool
    def lookup(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: What to look up.
        """
        calls.append(topic)
        return f"notes on {topic}"

    broken = '{"topic": "trio nurseries"'  # a small model's arguments, cut short
    server.push(
        tool_calls(("lookup", broken), ids=["call_bad"]),
        tool_calls(("lookup", "[1, 2]"), ids=["call_list"]),
        tool_calls(("lookup", '{"topic": "trio\tnurseries"}'), ids=["call_ok"]),  # a raw tab
        text("Nurseries own their tasks."),
    )
    agent = Agent("w", "Use lookup.", model=model_for(server), tools=[lookup])
    result = await run(agent, "What is a nursery?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert calls == ["trio\tnurseries"]  # only the valid call ran
    check_transcript(result.messages)
    errors = [b for m in result.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert [e.is_error for e in errors] == [True, True, False]
    assert "not valid JSON" in errors[0].content and "topic" in errors[0].content
    assert "not an object" in errors[1].content
    bad = result.messages[1].tool_uses[0]
    assert next(iter(bad.input)).startswith(INVALID_JSON_KEY)
    # what the model wrote goes back to it as it wrote it, next to the error result
    second = server.bodies[1]["messages"]
    assert second[2]["tool_calls"][0]["function"]["arguments"] == broken
    assert second[3]["role"] == "tool" and second[3]["content"].startswith("Error: ")


async def test_unreadable_arguments_never_run_a_schema_tool_that_takes_any_object(
    server: FakeChatServer,
) -> None:
    # JSON schema lets an object carry keys it does not name: the invalid-JSON key would pass
    # a schema with nothing required, so such a tool gets the runtime's refused input instead
    from orchestrator import Tool

    ran: list[dict[str, Any]] = []
    loose = Tool.from_schema(
        "ping", "Ping the service.", {"type": "object", "properties": {}}, ran.append
    )
    server.push(
        tool_calls(("ping", "{'verbose': True}"), ids=["call_py"]),  # Python, not JSON
        tool_calls(("ping", "{}"), ids=["call_ok"]),
        text("pong"),
    )
    result = await run(Agent("w", "Ping.", model=model_for(server), tools=[loose]), "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert ran == [{}]  # only the readable call reached the handler
    check_transcript(result.messages)
    first = next(b for m in result.messages for b in m.content if isinstance(b, ToolResultBlock))
    assert first.is_error and first.tool_use_id == "call_py"
    sent = server.bodies[1]["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert sent == "{'verbose': True}"  # the model's own text goes back to it


async def test_a_tool_call_cut_by_the_output_cap_is_retried_with_a_larger_cap(
    server: FakeChatServer,
) -> None:
    server.push(
        tool_calls(("search", '{"query": "trio nur'), finish_reason="length"),
        tool_calls(("search", {"query": "trio nurseries"}), ids=["call_2"]),
        text("Done."),
    )
    agent = Agent("w", "x", model=model_for(server), tools=[search], max_output_tokens=512)
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert [b["max_tokens"] for b in server.bodies] == [512, 1024, 512]
    assert [b.id for m in result.messages for b in m.tool_uses] == ["call_2"]


async def test_max_completion_tokens_for_reasoning_models_and_where_a_server_requires_it() -> None:
    with FakeChatServer(completion_tokens_only=("o3", "house-")) as server:
        server.responder = lambda body: text("ok")
        async with open_ctx() as ctx:
            await model_for(server, "o3-mini").request(make_request(max_tokens=300), ctx)
            for _ in range(2):  # refused once, then asked right at once and from then on
                await model_for(server, "house-model").request(make_request(max_tokens=300), ctx)
            await model_for(server, "gpt-4.1").request(make_request(max_tokens=300), ctx)
        assert not server.errors
    fields = [("max_tokens" in b, b.get("max_completion_tokens")) for b in server.bodies]
    assert fields == [(False, 300), (True, None), (False, 300), (False, 300), (True, None)]
    assert [r.reply for r in server.requests] == [
        "Completion",
        "Error 400",
        "Completion",
        "Completion",
        "Completion",
    ]


async def test_no_traceparent_is_sent(server: FakeChatServer) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    server.responder = lambda body: text("ok")
    tracer = TracerProvider().get_tracer("test")
    async with open_ctx() as ctx:
        with tracer.start_as_current_span("turn"):
            await model_for(server).request(make_request(), ctx)
    (sent,) = server.requests
    assert "traceparent" not in sent.headers and "tracestate" not in sent.headers


# --------------------------------------------------------------------------------------------
# llama.cpp's server quirks


async def test_a_server_that_cannot_stream_tool_calls_is_asked_without_streaming() -> None:
    with FakeChatServer(stream_tools=False, stream_usage=False, tools_need_choice=True) as server:
        server.responder = lambda body: text("ok")
        deltas: list[str] = []
        async with open_ctx(on_text_delta=deltas.append) as ctx:
            model = model_for(server)
            for _ in range(2):
                result = await model.request(make_request(), ctx)
                assert result.content == (TextBlock("ok"),)
            no_tools = await model.request(make_request(tools=()), ctx)
        assert not server.errors
    # one dropped streamed attempt, then tools without streaming; no tools: streamed
    assert [r.reply for r in server.requests] == ["Drop", "Completion", "Completion", "Completion"]
    assert [b.get("stream", False) for b in server.bodies] == [True, False, False, True]
    assert deltas == ["ok"] * 3  # a whole answer's text is published in one piece
    # a stream without usage: estimated from the sizes sent and received
    assert no_tools.usage.input_tokens > 0 and no_tools.usage.output_tokens == 1
    assert no_tools.usage.requests == 1


# --------------------------------------------------------------------------------------------
# Retries, the shared gate, errors


@pytest.mark.parametrize(
    "failure",
    [
        Error(500, "The server had an error", type="server_error"),
        Error(503, "busy", headers={"retry-after-ms": "1500"}),
        Error(502, "Bad gateway", html=True),
        Drop(),
        DropMidStream(),
        StreamError(),
        Malformed(),
        Malformed(
            b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "a',
            "text/event-stream",
        ),
        Malformed(b"data: [1, 2]\n\n", "text/event-stream"),
        Malformed(b"", "text/event-stream"),
    ],
    ids=[
        "500",
        "503-retry-after-ms",
        "502-html",
        "drop",
        "drop-mid-stream",
        "mid-stream-error",
        "malformed-json",
        "cut-chunk",
        "chunk-not-an-object",
        "empty-stream",
    ],
)
async def test_transient_failures_are_retried(
    server: FakeChatServer, virtual_clock: trio.testing.MockClock, failure: Any
) -> None:
    server.push(failure, text("recovered"))
    deltas: list[str] = []
    async with open_ctx(on_text_delta=deltas.append) as ctx:
        t0 = trio.current_time()
        result = await model_for(server, timeout=None).request(make_request(tools=()), ctx)
        waited = trio.current_time() - t0
    assert result.content == (TextBlock("recovered"),)
    assert len(server.requests) == 2
    assert 0.375 <= waited <= 0.5 or (
        isinstance(failure, Error) and failure.status == 503 and waited == pytest.approx(1.5)
    )
    assert "".join(deltas).endswith("recovered")


async def test_a_stream_cut_in_the_middle_is_retried_then_ends_with_one_line(
    server: FakeChatServer, virtual_clock: trio.testing.MockClock
) -> None:
    for _ in range(3):
        server.push(DropMidStream(text("never finished, never finished"), chunks=4))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server, max_retries=2, timeout=None).request(
                make_request(tools=()), ctx
            )
    message = str(caught.value)
    assert "\n" not in message and "after 3 attempts" in message, message
    assert caught.value.kind in ("connection", "incomplete_response") and not caught.value.fatal
    print(f"\ncut stream: {message}")


async def test_429_retry_after_gates_every_request_on_the_client(
    server: FakeChatServer, quiet_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    nursery.start_soon(jump_when_idle, quiet_clock)
    server.push(Error(429, "Rate limit reached", type="requests", headers={"retry-after": "30"}))
    server.responder = lambda body: text("ok")
    lead, worker = model_for(server, timeout=None), model_for(server, "gpt-4.1", timeout=None)
    times: dict[str, tuple[float, float]] = {}
    async with open_ctx() as ctx:

        async def call(name: str, model: OpenAIModel) -> None:
            start = trio.current_time()
            await model.request(make_request([Message.user(name)]), ctx)
            times[name] = (start, trio.current_time())

        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "lead", lead)
            while not server.requests:
                await trio.sleep(0.01)
            # virtual time moves once the lead has read the 429 (no request in flight)
            await trio.sleep(1.0)
            nursery.start_soon(call, "worker", worker)
    assert [r.reply for r in server.requests] == ["Error 429", "Completion", "Completion"]
    assert times["lead"][1] - t0 >= 30
    assert times["worker"][1] - times["worker"][0] >= 28  # a sibling waited at the gate too


@pytest.mark.parametrize(
    ("error", "kind", "hint"),
    [
        (
            Error(401, "Incorrect API key provided: {api_key}.", code="invalid_api_key"),
            "authentication",
            "OPENAI_API_KEY",
        ),
        (
            Error(403, "Project {api_key} has no access", type="permission"),
            "permission",
            "permission",
        ),
        (
            Error(404, "The model `x` does not exist ({api_key})", code="model_not_found"),
            "not_found",
            "/v1",
        ),
        (
            Error(400, "Invalid schema for function 'search' ({api_key})"),
            "invalid_request",
            "tool schemas",
        ),
        (
            Error(429, "You exceeded your current quota ({api_key})", code="insufficient_quota"),
            "billing",
            "quota",
        ),
    ],
    ids=["401", "403", "404", "400", "429-quota"],
)
async def test_fatal_errors_are_not_retried_and_never_show_the_key(
    server: FakeChatServer, error: Error, kind: str, hint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain_key = "plainkey0123456789"  # shaped like no known pattern: only the adapter hides it
    monkeypatch.delenv("OPENAI_API_KEY")
    for key in (CANARY_KEY, plain_key):
        server.push(error)
        async with open_ctx() as ctx:
            with pytest.raises(ModelError) as caught:
                await model_for(server, api_key=key).request(make_request(), ctx)
        message = str(caught.value)
        assert (caught.value.fatal, caught.value.kind) == (True, kind), message
        assert key not in message and "[REDACTED]" in message
        assert hint in message and "\n" not in message
    assert len(server.requests) == 2  # one each: not retried


async def test_an_unknown_model_ends_the_whole_run_with_one_line() -> None:
    with FakeChatServer(models=["smollm2"]) as server:
        lead = Agent(
            "lead",
            "x",
            model=model_for(server, "no-such-model"),
            subagents=[Agent("helper", "y", description="helps")],
        )
        result = await run(lead, "go")
    assert result.status is RunStatus.ERROR
    assert "no-such-model" in (result.error or "") and "does not exist" in (result.error or "")
    assert "\n" not in (result.error or "") and len(server.requests) == 1


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens.",
        "Requested tokens (9000) exceed context window of 8192",
    ],
    ids=["openai", "llama.cpp"],
)
async def test_an_input_too_long_for_the_context_window_is_not_fatal(
    server: FakeChatServer, message: str
) -> None:
    server.push(Error(400, message, code="context_length_exceeded"))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(), ctx)
    assert (caught.value.fatal, caught.value.kind) == (False, "context_exceeded")


async def test_bad_base_urls_and_servers_that_are_not_openai_compatible(
    server: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a base URL variable that is not a URL: fatal at once, nothing sent
    monkeypatch.setenv("OPENAI_BASE_URL", server.url.replace("http://", ""))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await OpenAIModel(MODEL).request(make_request(), ctx)
    assert (caught.value.fatal, caught.value.kind) == (True, "configuration")
    assert "OPENAI_BASE_URL" in str(caught.value) and not server.requests
    monkeypatch.delenv("OPENAI_BASE_URL")
    # the server's root instead of its /v1: a 404 on /chat/completions
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await OpenAIModel(MODEL, base_url=server.root).request(make_request(), ctx)
    assert caught.value.fatal and "/v1" in str(caught.value) and "\n" not in str(caught.value)
    # a web server answering 200 with an HTML page
    server.push(Malformed(b"<!DOCTYPE html><html><body>Welcome</body></html>", "text/html"))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(), ctx)
    assert (caught.value.fatal, caught.value.kind) == (True, "not_compatible")
    assert "HTML" in str(caught.value) and "\n" not in str(caught.value)
    # and a 404 HTML page
    server.push(Error(404, "Not Found", html=True))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(), ctx)
    assert caught.value.fatal and "HTML" in str(caught.value)
    print(f"\nHTML 404: {caught.value}")


async def test_nothing_listening_is_a_clear_connection_error(
    virtual_clock: trio.testing.MockClock,
) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await OpenAIModel(MODEL, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1).request(
                make_request(tools=()), ctx
            )
    message = str(caught.value)
    assert caught.value.kind == "connection" and "is the server running" in message
    assert "\n" not in message


async def test_missing_key_is_fatal_for_openai_but_a_local_server_needs_none(
    server: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await OpenAIModel(MODEL).request(make_request(), ctx)
        assert (caught.value.fatal, caught.value.kind) == (True, "authentication")
        assert "OPENAI_API_KEY" in str(caught.value) and "OPENAI_BASE_URL" in str(caught.value)
        server.push(text("local"))
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        result = await OpenAIModel(MODEL).request(make_request(), ctx)
    assert result.content == (TextBlock("local"),)
    assert server.requests[0].headers["authorization"] == "Bearer unused"


async def test_one_client_per_provider_base_url_and_key_closed_at_exit(
    server: FakeChatServer,
) -> None:
    server.responder = lambda body: text("ok")
    created: list[Any] = []

    class RecordingPool(ClientPool):
        async def get(self, key: Any, factory: Callable[[], Any]) -> Any:
            client = await super().get(key, factory)
            if client not in created:
                created.append(client)
            return client

    async with AsyncExitStack() as stack:
        ctx = ModelContext(RecordingPool(stack))
        for name in (MODEL, "gpt-4.1"):
            await model_for(server, name).request(make_request(), ctx)
        await model_for(server, api_key="sk-other-key-0000000000").request(make_request(), ctx)
        await model_for(server, provider="vllm").request(make_request(), ctx)
        assert len(created) == 3  # per (provider, base URL, key), shared across model names
        assert not any(c.sdk.is_closed() for c in created)
    assert all(c.sdk.is_closed() for c in created)


def test_separate_trio_runs_each_get_their_own_client(server: FakeChatServer) -> None:
    # measured: one AsyncOpenAI shared across two trio.run calls hangs; a run opens its own
    server.responder = lambda body: text("ok")
    agent = Agent("a", "x", model=model_for(server, timeout=10))
    from orchestrator import run_sync

    for _ in range(3):
        assert run_sync(agent, "go").status is RunStatus.COMPLETED


# --------------------------------------------------------------------------------------------
# Cancellation and concurrency (real clock)


STALL = 30.0


@pytest.mark.parametrize("mid_stream", [False, True], ids=["mid-request", "mid-stream"])
async def test_cancellation_is_prompt_and_leaves_the_client_usable(
    server: FakeChatServer, mid_stream: bool
) -> None:
    # the cut lands once the server stalls; "prompt" is well before the 30 s stall would end,
    # whatever the machine's load (a cut that waited for the server would take all of it)
    server.push(Stall(STALL, mid_stream=mid_stream), text("next call"))
    model = model_for(server)
    async with open_ctx() as ctx:
        scope = trio.CancelScope()
        cut_at: list[float] = []

        async def cut_once_stalled() -> None:
            with trio.fail_after(STALL):
                while not server.stalled.is_set():
                    await trio.sleep(0.01)
            cut_at.append(time.perf_counter())
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cut_once_stalled)
            with scope:
                await model.request(make_request(), ctx)
        cancelled_after = time.perf_counter() - cut_at[0]
        assert scope.cancelled_caught and cancelled_after < STALL / 3
        start = time.perf_counter()
        result = await model.request(make_request(), ctx)
        assert time.perf_counter() - start < STALL / 3  # the stalled connection not waited for
    assert result.content == (TextBlock("next call"),)


async def test_parallel_requests_share_one_client(server: FakeChatServer) -> None:
    server.responder = lambda body: text(body["messages"][-1]["content"].upper())
    model = model_for(server)
    results: dict[int, str] = {}
    async with open_ctx() as ctx:
        await model.request(make_request(), ctx)  # warm up

        async def call(i: int) -> None:
            result = await model.request(make_request([Message.user(f"task {i}")]), ctx)
            results[i] = Message("assistant", result.content).text

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(call, i)
        elapsed = time.perf_counter() - start
    assert results == {i: f"TASK {i}" for i in range(20)}
    print(f"\n20 parallel streamed calls over one client: {elapsed:.3f} s")


def test_the_sdk_is_the_one_the_extra_installs() -> None:
    major = int(openai.__version__.split(".")[0])
    assert major >= 1, openai.__version__


async def test_calls_sharing_an_id_get_unique_ids_and_the_next_request_pairs_each_result(
    server: FakeChatServer,
) -> None:
    # a server that repeats an id in one reply: a stateless API pairs a call with its result
    # by id inside the next request, so repeated ids could not be paired (the fake server,
    # like OpenAI, refuses a tool message that answers no pending call)
    paid: list[str] = []

    @tool
    def pay(who: str) -> str:
        """Pay someone."""
        paid.append(who)
        return f"paid {who}"

    server.push(
        tool_calls(("pay", {"who": "alice"}), ("pay", {"who": "bob"}), ids=["call_1", "call_1"]),
        text("both paid"),
    )
    result = await run(Agent("w", "Pay.", model=model_for(server), tools=[pay]), "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert sorted(paid) == ["alice", "bob"]
    check_transcript(result.messages)
    sent = server.bodies[1]["messages"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["call_1", "call_1~2"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[3:5]] == [
        ("call_1", "paid alice"),
        ("call_1~2", "paid bob"),
    ]


async def test_unique_ids_from_the_server_go_back_to_it_unchanged(server: FakeChatServer) -> None:
    @tool
    def pay(who: str) -> str:
        """Pay someone."""
        return f"paid {who}"

    server.push(
        tool_calls(("pay", {"who": "alice"}), ("pay", {"who": "bob"}), ids=["call_a", "call_b"]),
        text("both paid"),
    )
    result = await run(Agent("w", "Pay.", model=model_for(server), tools=[pay]), "go")
    assert result.status is RunStatus.COMPLETED, result.error
    sent = server.bodies[1]["messages"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["call_a", "call_b"]


async def test_a_retry_after_longer_than_the_cap_gives_up_at_once_naming_the_wait(
    server: FakeChatServer, virtual_clock: trio.testing.MockClock
) -> None:
    # a 429 asking for an hour was retried every 60 s (the cap) four times: five silent minutes
    server.push(Error(429, "Rate limit reached", type="requests", headers={"retry-after": "3600"}))
    model = model_for(server, timeout=None)
    async with open_ctx() as ctx:
        start = trio.current_time()
        with pytest.raises(ModelError) as caught:
            await model.request(make_request(), ctx)
        assert trio.current_time() == start  # no wait at all
        message = str(caught.value)
        assert "asked to wait 3600 s" in message and "max_retry_after (60 s)" in message, message
        assert caught.value.kind == "rate_limit" and not caught.value.fatal
        # every other request on the client gives up too, unsent, until the hour has passed
        with pytest.raises(ModelError, match="asked to wait 3600 s"):
            await model.request(make_request(), ctx)
        assert len(server.requests) == 1
        await trio.sleep(3600)
        server.responder = lambda body: text("ok")
        answer = await model.request(make_request(), ctx)
        assert answer.content[0].text == "ok"


async def test_every_retry_wait_within_the_cap_is_waited_and_published(
    server: FakeChatServer, virtual_clock: trio.testing.MockClock
) -> None:
    server.push(
        Error(429, "Rate limit reached", type="requests", headers={"retry-after": "30"}),
        Error(500, "The server had an error", type="server_error"),
        text("ok"),
    )
    waits: list[tuple[float, str]] = []
    async with open_ctx(on_wait=lambda seconds, why: waits.append((seconds, why))) as ctx:
        start = trio.current_time()
        await model_for(server, timeout=None).request(make_request(), ctx)
        waited = trio.current_time() - start
    assert [why for _, why in waits] == ["rate limited by the provider", "api error: retry 2"]
    assert waits[0][0] == pytest.approx(30)
    assert waited == pytest.approx(sum(seconds for seconds, _ in waits))


async def test_a_runs_events_show_the_model_waiting(
    server: FakeChatServer, virtual_clock: trio.testing.MockClock
) -> None:
    from orchestrator import open_run
    from orchestrator.core.events import ModelWaiting

    server.push(Error(429, "slow down", type="requests", headers={"retry-after": "2"}), text("ok"))
    agent = Agent("w", "Answer.", model=model_for(server, timeout=None))
    async with open_run(agent, "go") as handle:
        result = await handle.result()
        events = [e async for e in handle.events]
    assert result.status is RunStatus.COMPLETED, result.error
    assert [e for e in events if isinstance(e, ModelWaiting)] == [
        ModelWaiting("w", 2.0, "rate limited by the provider")
    ]


async def test_usage_figures_that_are_not_counts_are_taken_as_missing_not_a_crash(
    server: FakeChatServer,
) -> None:
    server.push(text("first", usage={"prompt_tokens": "n/a", "completion_tokens": [15]}))
    server.push(text("second", usage={"prompt_tokens": 920, "completion_tokens": "lots"}))
    server.push(text("third", usage={"prompt_tokens": "920", "completion_tokens": 15.0}))
    async with open_ctx() as ctx:
        model = model_for(server)
        first = await model.request(make_request(), ctx)
        second = await model.request(make_request(), ctx)
        third = await model.request(make_request(), ctx)
    # no input count: the whole usage is estimated from what was sent and answered
    assert first.content == (TextBlock("first"),)
    assert first.usage.input_tokens > 0 and first.usage.output_tokens >= 1
    # no output count: the input is kept, the output estimated
    assert (second.usage.input_tokens, second.usage.output_tokens) == (920, 2)
    # counts written as a digit string or a whole float are counts
    assert (third.usage.input_tokens, third.usage.output_tokens) == (920, 15)


async def test_an_endless_stream_is_cut_at_the_output_limit_and_billed_for_it(
    server: FakeChatServer,
) -> None:
    server.push(Endless(size=100))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(max_tokens=100), ctx)
    assert (result.stop_reason, result.finish_reason) == ("max_tokens", "length")
    (block,) = result.content
    assert isinstance(block, TextBlock)
    limit = 100 * 32 + 4096  # characters: more than 100 tokens of any tokenizer can hold
    assert limit < len(block.text) <= limit + 100  # read to the limit, not to the server's end
    assert result.usage.output_tokens >= 100  # billed the limit at least, not 0


async def test_a_long_answer_within_the_limit_is_not_cut(server: FakeChatServer) -> None:
    answer = "y" * 3_000  # 30 characters a token of a 100-token limit: long, yet possible
    server.push(text(answer))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(max_tokens=100), ctx)
    assert result.content == (TextBlock(answer),) and result.stop_reason == "end_turn"


async def test_a_results_notes_are_joined_after_its_content_in_the_tool_message(
    server: FakeChatServer,
) -> None:
    server.push(text("ok"))
    note = "[budget left: 812,400 tokens, $3.12]"
    messages = [
        Message.user("Research."),
        Message.assistant(ToolUseBlock("call_1", "spawn_subagent", {"agent": "r", "task": "t"})),
        Message.user(ToolResultBlock("call_1", '{"claim":"x"}', notes=(note,))),
    ]
    async with open_ctx() as ctx:
        await model_for(server).request(make_request(messages), ctx)
    [tool_message] = [m for m in server.bodies[0]["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == '{"claim":"x"}\n\n' + note
