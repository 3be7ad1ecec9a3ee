"""AnthropicModel: the real anthropic SDK, over real HTTP, against the fake Messages server.

Every test goes through ``AnthropicModel.request`` with a real ``ClientPool`` inside an
``AsyncExitStack`` (as a run does). Retry and backoff tests run on trio's virtual clock
(``MockClock`` with an autojump threshold of 0.1 s) and with ``timeout=None``, so that the only
deadlines are the retry sleeps: a jump while a request is in flight (a server slow to answer on a
loaded machine) has nothing to reach. A test whose ordering depends on the client having read a
response, or whose run has other deadlines, uses ``quiet_clock`` and ``jump_when_idle`` instead:
time moves only while no request is in flight. Cancellation tests use the real clock.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

# imported before any virtual clock runs: the adapter imports the SDK in a worker thread on
# first use, and an autojumping clock would jump to a pending deadline while that thread works
import anthropic
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from support.clocks import jump_when_idle
from support.fake_messages_server import (
    Drop,
    DropMidStream,
    Endless,
    Error,
    FakeMessagesServer,
    Malformed,
    PromptCache,
    Stall,
    StreamError,
    text,
    thinking,
    tool_use,
)
from support.fake_messages_server import (
    Message as Reply,
)

from orchestrator.core.errors import ConfigurationError, ModelError
from orchestrator.core.messages import (
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from orchestrator.models.anthropic import (
    CURRENT_MODELS,
    DEFAULT_MODEL,
    FAST_MODEL,
    PRICES,
    AnthropicModel,
    Price,
    price_for,
)
from orchestrator.models.base import AgentInfo, ClientPool, ModelContext, ModelRequest, ToolSpec

CANARY_KEY = "sk-ant-canary-0123456789abcdef"
SYSTEM = "You are a careful research assistant. " * 80  # ~3,000 characters, like a real prompt
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
        {
            "type": "object",
            "properties": {"doc_id": {"type": "string"}},
            "required": ["doc_id"],
        },
    ),
    ToolSpec(
        "spawn_subagent",
        "Start a subagent.",
        {
            "type": "object",
            "properties": {"agent": {"type": "string"}, "task": {"type": "string"}},
            "required": ["agent", "task"],
        },
    ),
)


# --------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY_KEY)
    for name in (
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_CUSTOM_HEADERS",
        "ANTHROPIC_OPEN_TELEMETRY",
        "ANTHROPIC_OPEN_TELEMETRY_PROPAGATION",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    """pytest-trio runs a test with this clock when the test asks for the fixture."""
    return trio.testing.MockClock(autojump_threshold=0.1)


@pytest.fixture
def quiet_clock() -> trio.testing.MockClock:
    """A virtual clock that never jumps by itself: a test starts ``jump_when_idle`` on it, and
    time moves only while no request is in flight (for a test whose ordering depends on the
    client having read a response first, or whose run has deadlines a jump could reach)."""
    return trio.testing.MockClock()


@asynccontextmanager
async def open_ctx(**hooks: Any) -> AsyncIterator[ModelContext]:
    """A model context over a real ClientPool, closed (clients and all) on exit, like a run."""
    async with AsyncExitStack() as stack:
        yield ModelContext(ClientPool(stack), **hooks)


def make_request(
    messages: list[Message] | None = None,
    *,
    system: str = SYSTEM,
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


def model_for(
    server: FakeMessagesServer, name: str = DEFAULT_MODEL, **kwargs: Any
) -> AnthropicModel:
    return AnthropicModel(name, base_url=server.url, **kwargs)


def strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Model names, prices, construction


def test_current_models_are_in_the_installed_sdk_and_not_deprecated() -> None:
    import anthropic.types
    from anthropic._data import DEPRECATED_MODELS  # the SDK's own deprecation table

    literal = typing.get_args(anthropic.types.Model)[0]
    known = set(typing.get_args(literal))
    assert known, "could not read the SDK's model list"
    assert set(CURRENT_MODELS) <= known, set(CURRENT_MODELS) - known
    assert not set(CURRENT_MODELS) & set(DEPRECATED_MODELS)
    assert DEFAULT_MODEL in CURRENT_MODELS and FAST_MODEL in CURRENT_MODELS
    for name in CURRENT_MODELS:  # every current model has its own price, not the fallback
        assert any(name.startswith(prefix) for prefix in PRICES), name


def test_prices() -> None:
    sonnet = price_for("claude-sonnet-5-5")
    assert (sonnet.input, sonnet.output, sonnet.cache_write, sonnet.cache_read) == (2, 10, 2.5, 0.2)
    assert price_for("claude-opus-4-5-20251101") == Price.of(5, 25)  # longest prefix wins
    assert price_for("claude-sonnet-5") == Price.of(2, 10)
    assert price_for("claude-unknown-9") == PRICES["claude-fable-5"]  # unknown: the dearest
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=600_000,
        cache_write_tokens=300_000,
    )
    # 100k uncached * 2 + 300k write * 2.5 + 600k read * 0.2 + 100k out * 10, per million
    assert AnthropicModel().cost(usage) == pytest.approx(0.2 + 0.75 + 0.12 + 1.0)
    haiku = AnthropicModel(FAST_MODEL)
    small, large = Usage(50_000, 1_000), Usage(200_000, 1_000)
    assert haiku.cost(small) == pytest.approx((50_000 * 0.10 + 1_000 * 0.50) / 1e6)
    assert haiku.cost(large) == pytest.approx((200_000 * 0.50 + 1_000 * 2.50) / 1e6)
    assert AnthropicModel(prices=Price.of(1, 1)).cost(Usage(1_000_000, 0)) == pytest.approx(1)
    assert AnthropicModel(prices={"claude-sonnet": Price.of(3, 3)}).price == Price.of(3, 3)


def test_constructor_is_cheap_and_imports_no_sdk() -> None:
    code = (
        "import sys; from orchestrator.models.anthropic import AnthropicModel\n"
        "m = AnthropicModel('claude-opus-5-5', api_key='k' * 20)\n"
        "assert 'anthropic' not in sys.modules, 'SDK imported'\n"
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
    assert out.stdout.split() == ["claude-opus-5-5", "anthropic"]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"timeout": -5}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"max_retry_after": -1}, "max_retry_after"),
        ({"max_retry_after": float("nan")}, "max_retry_after"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"base_url": "localhost:8080"}, "base_url"),
        ({"base_url": "ftp://proxy.example"}, "base_url"),
        ({"base_url": "http://exa mple.com"}, "base_url"),
    ],
)
def test_a_setting_that_could_never_work_is_refused_when_the_model_is_built(
    options: dict[str, Any], problem: str
) -> None:
    # a negative timeout was retried five times as a "connection error"; a base URL without
    # a scheme took five attempts and ~7 s per agent before failing as a network blip
    with pytest.raises(ConfigurationError, match=problem):
        AnthropicModel(**options)


async def test_a_base_url_variable_that_is_not_a_url_is_fatal_at_once(
    server: FakeMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url.replace("http://", ""))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await AnthropicModel().request(make_request(), ctx)
    assert (caught.value.fatal, caught.value.kind) == (True, "configuration")
    assert "ANTHROPIC_BASE_URL" in str(caught.value) and not server.requests
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f" {server.url}/ ")  # spaces around: fine
    server.push(text("ok"))
    async with open_ctx() as ctx:
        assert (await AnthropicModel().request(make_request(), ctx)).content == (TextBlock("ok"),)


async def test_a_blank_system_prompt_is_left_out_not_sent_as_a_blank_block(
    server: FakeMessagesServer,
) -> None:
    # the API refuses blank text with a 400 the adapter must treat as fatal: the tree stopped
    server.push(text("ok"))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(system="\n  \n"), ctx)
    assert result.content == (TextBlock("ok"),)
    body = server.requests[0].json
    assert body is not None and "system" not in body


def test_the_first_call_imports_the_sdk_without_freezing_the_event_loop() -> None:
    # the ~1.5 s import ran on the event loop: every agent, the run's deadline and cancel()
    # stood still behind the first call of a process
    # the ticker counts its ticks while the import is under way (the module in sys.modules,
    # still initializing): on the event loop, the import would leave it no tick at all
    code = textwrap.dedent(
        """
        import sys
        import trio
        from support.fake_messages_server import FakeMessagesServer, text
        from orchestrator import Agent, run
        from orchestrator.models import AnthropicModel

        assert "anthropic" not in sys.modules
        with FakeMessagesServer() as server:
            server.push(text("hi"))

            async def main():
                ticks = 0

                async def ticker():
                    nonlocal ticks
                    while True:
                        await trio.sleep(0.01)
                        sdk = sys.modules.get("anthropic")
                        if sdk is not None and getattr(sdk.__spec__, "_initializing", False):
                            ticks += 1

                model = AnthropicModel(api_key="sk-ant-test-key-000000", base_url=server.url)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ticker)
                    result = await run(Agent("a", "x", model=model), "go")
                    nursery.cancel_scope.cancel()
                print(result.status.value, ticks)

            trio.run(main)
        """
    )
    tests_dir = os.path.dirname(os.path.dirname(__file__))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(tests_dir),
        env={**os.environ, "PYTHONPATH": tests_dir},
    )
    assert out.returncode == 0, out.stderr
    status, ticks_while_importing = out.stdout.split()
    assert status == "completed"
    assert int(ticks_while_importing) > 0, out.stdout  # the loop ran during the import


# --------------------------------------------------------------------------------------------
# Streaming, content, usage


async def test_text_is_streamed_and_usage_mapped(server: FakeMessagesServer) -> None:
    answer = "Trio is a friendly async library; nurseries keep tasks structured."
    server.push(
        text(
            answer,
            usage={
                "cache_read_input_tokens": 800,
                "cache_creation_input_tokens": 100,
                "input_tokens": 20,
                "output_tokens": 15,
            },
        )
    )
    deltas: list[str] = []
    model = model_for(server)
    async with open_ctx(on_text_delta=deltas.append) as ctx:
        result = await model.request(make_request(), ctx)
    assert result.content == (TextBlock(answer),)
    assert len(deltas) > 3 and "".join(deltas) == answer  # published piece by piece
    assert result.stop_reason == "end_turn"
    assert result.id.startswith("msg_") and result.model == DEFAULT_MODEL
    u = result.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        920,
        15,
        800,
        100,
    )
    assert u.requests == 1
    assert u.cost_usd == pytest.approx((20 * 2 + 100 * 2.5 + 800 * 0.2 + 15 * 10) / 1e6)
    [sent] = server.requests
    assert sent.json is not None and sent.json["stream"] is True
    assert sent.headers["x-stainless-retry-count"] == "0"


async def test_tool_use_is_assembled_from_json_deltas(server: FakeMessagesServer) -> None:
    args = {"query": "structured concurrency — trio", "limit": 5, "filters": {"year": [2024, 2025]}}
    server.push(tool_use("search", args, id="toolu_01", preamble="Searching.", chunk_chars=3))
    starts: list[tuple[str, str]] = []
    deltas: list[str] = []
    async with open_ctx(
        on_text_delta=deltas.append, on_tool_call_start=lambda i, n: starts.append((i, n))
    ) as ctx:
        result = await model_for(server).request(make_request(), ctx)
    assert result.content == (TextBlock("Searching."), ToolUseBlock("toolu_01", "search", args))
    assert result.stop_reason == "tool_use"
    assert starts == [("toolu_01", "search")]
    assert "".join(deltas) == "Searching."


async def test_every_stop_reason_passes_through(server: FakeMessagesServer) -> None:
    reasons = [
        "end_turn",
        "stop_sequence",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
        "a_reason_from_the_future",
    ]
    for reason in reasons:
        server.push(text(f"({reason})", stop_reason=reason))
    server.push(
        tool_use("search", {"query": "a long query that gets cut"}, id="toolu_cut", cut=True)
    )
    server.push(
        Reply(
            (thinking("Let me think.", "sig-1"), {"type": "text", "text": "Done."}),
            stop_reason="max_tokens",
        )
    )
    model = model_for(server)
    async with open_ctx() as ctx:
        for reason in reasons:
            result = await model.request(make_request(), ctx)
            assert (result.stop_reason, result.content) == (reason, (TextBlock(f"({reason})"),))
        cut = await model.request(make_request(), ctx)
        assert cut.stop_reason == "max_tokens"
        assert cut.content == (ToolUseBlock("toolu_cut", "search", {}),)  # half a call: no input
        thought = await model.request(make_request(), ctx)
        assert thought.content == (ThinkingBlock("Let me think.", "sig-1"), TextBlock("Done."))
    assert len(server.requests) == len(reasons) + 2  # none was retried


async def test_request_layout_and_cache_breakpoints(server: FakeMessagesServer) -> None:
    server.push(text("ok"))
    messages = [
        Message.user("Find papers on trio."),
        Message.assistant("Searching.", ToolUseBlock("toolu_1", "search", {"query": "trio"})),
        Message.user(ToolResultBlock("toolu_1", "3 papers found")),
    ]
    async with open_ctx() as ctx:
        await model_for(server).request(make_request(messages, max_tokens=777), ctx)
    body = server.bodies[0]
    assert list(body) == ["max_tokens", "messages", "model", "stream", "system", "tools"]
    assert body["max_tokens"] == 777 and body["model"] == DEFAULT_MODEL
    assert [t["name"] for t in body["tools"]] == ["search", "read", "spawn_subagent"]  # as given
    marked = [t["name"] for t in body["tools"] if "cache_control" in t]
    assert marked == ["spawn_subagent"]  # the last tool
    assert body["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]
    blocks = [(i, b) for i, m in enumerate(body["messages"]) for b in m["content"]]
    marked_blocks = [(i, b["type"]) for i, b in blocks if "cache_control" in b]
    # the last message (cached for the next turn) and the previous request's last message
    assert marked_blocks == [(0, "text"), (2, "tool_result")]


async def test_no_traceparent_is_sent(server: FakeMessagesServer) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    server.responder = lambda body: text("ok")
    tracer = TracerProvider().get_tracer("test")
    async with open_ctx() as ctx:
        with tracer.start_as_current_span("turn"):
            await model_for(server).request(make_request(), ctx)
            # Control: the SDK's defaults would send our trace id to the API.
            async with anthropic.AsyncAnthropic(base_url=server.url, max_retries=0) as raw:
                await raw.messages.create(
                    model=DEFAULT_MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                )
    ours, control = server.requests
    assert "traceparent" not in ours.headers and "tracestate" not in ours.headers
    assert "traceparent" in control.headers


# --------------------------------------------------------------------------------------------
# Prompt caching


def _conversation_responder(turns: int) -> Callable[[dict[str, Any]], Reply]:
    def respond(body: dict[str, Any]) -> Reply:
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if n + 1 >= turns:
            return text("Final answer: trio nurseries.")
        return tool_use(
            "search",
            {"query": f"question {n}", "limit": 5},
            id=f"toolu_{n:03d}",
            preamble=f"Looking up part {n}.",
        )

    return respond


async def _converse(
    model: AnthropicModel, ctx: ModelContext, turns: int, result_chars: int, calls_per_turn: int = 1
) -> list[Message]:
    messages = [Message.user("Survey structured concurrency in Python.")]
    for _ in range(turns):
        result = await model.request(make_request(messages), ctx)
        messages.append(Message("assistant", result.content))
        calls = [b for b in result.content if isinstance(b, ToolUseBlock)]
        if not calls:
            break
        messages.append(
            Message(
                "user",
                tuple(
                    ToolResultBlock(c.id, f"result for {c.input['query']}: " + "x" * result_chars)
                    for c in calls
                ),
            )
        )
    return messages


async def test_prefix_is_byte_identical_across_turns(server: FakeMessagesServer) -> None:
    server.responder = _conversation_responder(turns=3)
    model = model_for(server)
    async with open_ctx() as ctx:
        await _converse(model, ctx, turns=3, result_chars=300)
        # The same request twice gives the same bytes: nothing time- or id-dependent.
        server.responder = lambda body: text("again")
        await model.request(make_request([Message.user("Same?")]), ctx)
        await model.request(make_request([Message.user("Same?")]), ctx)
    bodies = server.bodies
    assert len(bodies) == 5
    assert server.requests[3].body == server.requests[4].body
    for earlier, later in itertools.pairwise(bodies[:3]):
        assert dumps(later["tools"]) == dumps(earlier["tools"])
        assert dumps(later["system"]) == dumps(earlier["system"])
        n = len(earlier["messages"])
        # Only the moving cache_control markers differ in the earlier turns.
        assert dumps(strip_cache_control(later["messages"][:n])) == dumps(
            strip_cache_control(earlier["messages"])
        )
    reads = [r.usage["cache_read_input_tokens"] for r in server.requests[:3] if r.usage]
    assert reads[0] == 0 and reads[1] > 0 and reads[2] > reads[1]


async def test_twenty_turns_read_most_input_from_cache(server: FakeMessagesServer) -> None:
    server.responder = _conversation_responder(turns=20)
    model = model_for(server)
    async with open_ctx() as ctx:
        messages = await _converse(model, ctx, turns=20, result_chars=600)
    assert len(server.requests) == 20 and messages[-1].text == "Final answer: trio nurseries."
    usages = [r.usage for r in server.requests if r.usage]
    first, later = usages[0], usages[1:]
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0

    def total(u: dict[str, int]) -> int:
        return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]

    read = sum(u["cache_read_input_tokens"] for u in later)
    all_input = sum(total(u) for u in later)
    share = read / all_input
    worst = min(u["cache_read_input_tokens"] / total(u) for u in later)
    print(
        f"\n20-turn conversation: turns 2-20 read {read}/{all_input} input tokens from cache "
        f"= {share:.1%} (worst turn {worst:.1%}; first turn wrote "
        f"{first['cache_creation_input_tokens']})"
    )
    assert share >= 0.90


async def test_a_wide_turn_still_reads_the_cache(server: FakeMessagesServer) -> None:
    """A turn with 12 parallel calls adds 25 blocks, more than the API's 20-block lookback; the
    breakpoint on the previous request's last message still finds the cached prefix."""

    def respond(body: dict[str, Any]) -> Reply:
        if len(body["messages"]) == 1:
            calls = tuple(
                {
                    "type": "tool_use",
                    "id": f"toolu_{i:02d}",
                    "name": "search",
                    "input": {"query": f"q{i}"},
                }
                for i in range(12)
            )
            return Reply(({"type": "text", "text": "Fanning out."}, *calls), stop_reason="tool_use")
        return text("Done.")

    server.responder = respond
    async with open_ctx() as ctx:
        await _converse(model_for(server), ctx, turns=2, result_chars=100)
    first, second = (r.usage for r in server.requests)
    assert first is not None and second is not None
    prefix = sum(
        first[k] for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    assert second["cache_read_input_tokens"] == prefix  # the whole previous request

    # Without that second breakpoint, only tools and system would be read, not the first message.
    body = json.loads(server.requests[1].body)
    for block in body["messages"][0]["content"]:
        block.pop("cache_control", None)
    cache = PromptCache()
    cache.account(json.loads(server.requests[0].body))
    assert cache.account(body).cache_read_input_tokens < prefix


# --------------------------------------------------------------------------------------------
# Retries, the shared gate, errors


async def test_429_retry_after_gates_every_request_on_the_client(
    server: FakeMessagesServer,
    quiet_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
) -> None:
    nursery.start_soon(jump_when_idle, quiet_clock)
    server.push(
        Error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your rate limit",
            {"retry-after": "30"},
        )
    )
    server.responder = lambda body: text("ok")
    # Two different model objects, same endpoint and key: one client, one gate.
    lead, worker = model_for(server, timeout=None), model_for(server, FAST_MODEL, timeout=None)
    times: dict[str, tuple[float, float]] = {}
    real = time.perf_counter()
    async with open_ctx() as ctx:

        async def call(name: str, model: AnthropicModel) -> None:
            start = trio.current_time()
            await model.request(make_request([Message.user(name)]), ctx)
            times[name] = (start, trio.current_time())

        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "lead", lead)
            while not server.requests:  # the lead's first attempt has reached the server
                await trio.sleep(0.01)
            # virtual time moves once the lead has read the 429 (no request in flight)
            await trio.sleep(1.0)
            nursery.start_soon(call, "worker", worker)
    real = time.perf_counter() - real
    assert [r.reply for r in server.requests] == ["Error 429", "Message", "Message"]
    assert times["lead"][1] - t0 >= 30  # honoured retry-after
    worker_wait = times["worker"][1] - times["worker"][0]
    assert worker_wait >= 28  # a sibling that never saw the 429 waited at the gate too
    print(
        f"\n429 retry-after 30 s: lead done at {times['lead'][1] - t0:.1f} s virtual, worker waited "
        f"{worker_wait:.1f} s virtual; {real:.2f} s real"
    )


@pytest.mark.parametrize(
    ("headers", "least", "most"),
    [
        ({"retry-after": "0"}, 0.37, 0.51),  # the backoff: 0.5 s less up to 25 %
        ({"retry-after": "-5"}, 0.37, 0.51),
        ({"retry-after": "nan"}, 0.37, 0.51),
        ({"retry-after": "Thu, 01 Jan 2015 00:00:00 GMT"}, 0.37, 0.51),  # past (clock skew)
        ({"retry-after-ms": "nan", "retry-after": "3"}, 3.0, 3.1),  # the valid one counts
        ({"retry-after-ms": "1500"}, 1.5, 1.6),
    ],
)
async def test_a_retry_after_of_zero_or_nonsense_keeps_the_backoff(
    server: FakeMessagesServer,
    virtual_clock: trio.testing.MockClock,
    headers: dict[str, str],
    least: float,
    most: float,
) -> None:
    # retry-after: 0 (or -5, nan, a past date) sent all five attempts at once
    server.push(Error(503, "api_error", "busy", headers), text("ok"))
    async with open_ctx() as ctx:
        start = trio.current_time()
        await model_for(server, timeout=None).request(make_request(), ctx)
        waited = trio.current_time() - start
    assert least <= waited <= most, waited


async def test_max_retry_after_zero_ignores_server_delays_but_keeps_the_backoff(
    server: FakeMessagesServer, virtual_clock: trio.testing.MockClock
) -> None:
    server.push(Error(503, "api_error", "busy", {"retry-after": "30"}), text("ok"))
    async with open_ctx() as ctx:
        start = trio.current_time()
        await model_for(server, timeout=None, max_retry_after=0).request(make_request(), ctx)
        waited = trio.current_time() - start
    assert 0.37 <= waited <= 0.51, waited


async def test_a_429_that_ends_a_call_still_holds_the_gate(
    server: FakeMessagesServer,
    virtual_clock: trio.testing.MockClock,
) -> None:
    server.push(Error(429, "rate_limit_error", "slow down", {"retry-after": "30"}), text("ok"))
    model = model_for(server, max_retries=0, timeout=None)
    waits: list[tuple[float, str]] = []
    async with open_ctx(on_wait=lambda seconds, why: waits.append((seconds, why))) as ctx:
        with pytest.raises(ModelError) as caught:
            await model.request(make_request(), ctx)
        assert (caught.value.fatal, caught.value.kind) == (False, "rate_limit")
        assert "max_concurrency" in str(caught.value)
        t0 = trio.current_time()
        await model.request(make_request(), ctx)
        # The next call waited at the gate for the retry-after, and said so.
        assert trio.current_time() - t0 == pytest.approx(30, abs=0.1)
    assert waits == [(pytest.approx(30, abs=0.1), "rate limited by the provider")]


async def test_a_429_asking_past_the_cap_ends_the_call_at_once_and_holds_back_the_others(
    server: FakeMessagesServer,
    virtual_clock: trio.testing.MockClock,
) -> None:
    server.push(Error(429, "rate_limit_error", "slow down", {"retry-after": "3600"}))
    model = model_for(server, timeout=None)
    async with open_ctx() as ctx:
        t0 = trio.current_time()
        with pytest.raises(ModelError) as caught:
            await model.request(make_request(), ctx)
        assert trio.current_time() == t0  # not four silent minutes of capped retries
        assert "asked to wait 3600 s" in str(caught.value)
        assert "max_retry_after (60 s)" in str(caught.value)
        with pytest.raises(ModelError, match="asked to wait 3600 s"):
            await model.request(make_request(), ctx)  # not sent: the hour has not passed
        assert len(server.requests) == 1
        await trio.sleep(3600)
        server.push(text("ok"))
        await model.request(make_request(), ctx)
        assert len(server.requests) == 2


_MESSAGE_START = {
    "type": "message_start",
    "message": {"id": "msg_1", "model": "claude-sonnet-5-5", "usage": {"input_tokens": 5}},
}


def _sse(*events: tuple[str, Any]) -> bytes:
    """An SSE body of these events (a well-formed stream of badly shaped events)."""
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


@given(st.text(alphabet="ab\r\n\u2028", max_size=30), st.lists(st.integers(0, 30), max_size=6))
def test_stream_lines_end_at_cr_lf_or_crlf_however_the_text_is_chunked(
    text: str, cuts: list[int]
) -> None:
    from orchestrator.models.anthropic import sse_lines

    bounds = [0, *sorted(c for c in cuts if c <= len(text)), len(text)]
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]

    async def feed() -> AsyncIterator[str]:
        for chunk in chunks:
            yield chunk

    async def collect() -> list[str]:
        return [line async for line in sse_lines(feed())]

    expected = re.split(r"\r\n|\r|\n", text)
    if expected[-1] == "":
        expected.pop()
    assert trio.run(collect) == expected


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
async def test_characters_str_splitlines_breaks_at_are_not_line_ends_in_the_stream(
    server: FakeMessagesServer, separator: str
) -> None:
    # JSON may carry them unescaped (the API sends non-ASCII as it is): only CR and LF end an
    # event's line, or the data line is cut in two and every retry fails the same way
    said = f"Quoted from the page:{separator}next line"
    body = b"".join(
        f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
        for name, data in [
            ("message_start", _MESSAGE_START),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": said},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 9},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )
    server.push(Malformed(body))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(), ctx)
    assert result.content == (TextBlock(said),)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "failure",
    [
        Error(529, "overloaded_error", "Overloaded"),
        Error(500, "api_error", "Internal server error"),
        Error(503, "api_error", "Service unavailable", {"retry-after-ms": "1500"}),
        Drop(),
        DropMidStream(),
        StreamError("overloaded_error", "Overloaded"),
        StreamError("api_error", "Internal server error"),
        Malformed(),
        Malformed(_sse(("message_start", {"type": "message_start", "message": "oops"}))),
        Malformed(
            _sse(
                ("message_start", _MESSAGE_START),
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": "text"},
                ),
            )
        ),
        Malformed(
            _sse(
                ("message_start", _MESSAGE_START),
                ("message_delta", {"type": "message_delta", "delta": [1], "usage": {}}),
            )
        ),
    ],
    ids=[
        "529",
        "500",
        "503-retry-after-ms",
        "drop",
        "drop-mid-stream",
        "mid-stream-overloaded",
        "mid-stream-api-error",
        "malformed",
        "message-not-an-object",
        "content-block-not-an-object",
        "delta-not-an-object",
    ],
)
async def test_transient_failures_are_retried(
    server: FakeMessagesServer,
    virtual_clock: trio.testing.MockClock,
    failure: Any,
) -> None:
    server.push(failure, text("recovered"))
    deltas: list[str] = []
    async with open_ctx(on_text_delta=deltas.append) as ctx:
        t0 = trio.current_time()
        result = await model_for(server, timeout=None).request(make_request(), ctx)
        waited = trio.current_time() - t0
    assert result.content == (TextBlock("recovered"),)
    assert len(server.requests) == 2
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "0"]  # ours
    assert 0.375 <= waited <= 0.5 or (
        isinstance(failure, Error) and failure.status == 503 and waited == pytest.approx(1.5)
    )
    assert "".join(deltas).endswith("recovered")


async def test_persistent_overload_ends_with_one_line_error(
    server: FakeMessagesServer,
    virtual_clock: trio.testing.MockClock,
) -> None:
    for _ in range(3):
        server.push(Error(529, "overloaded_error", "Overloaded\nplease retry"))
    async with open_ctx() as ctx:
        t0 = trio.current_time()
        with pytest.raises(ModelError) as caught:
            await model_for(server, max_retries=2, timeout=None).request(make_request(), ctx)
        waited = trio.current_time() - t0
    error = caught.value
    assert (error.fatal, error.kind) == (False, "overloaded")
    message = str(error)
    assert "\n" not in message and "after 3 attempts" in message and "529" in message
    assert len(server.requests) == 3
    assert 0.375 + 0.75 <= waited <= 0.5 + 1.0  # backoff 0.5 s then 1 s, each less up to 25%
    print(f"\npersistent 529: {message}")


@pytest.mark.parametrize(
    ("status", "etype", "kind", "hint"),
    [
        (401, "authentication_error", "authentication", "ANTHROPIC_API_KEY"),
        (403, "permission_error", "permission", "permission"),
        (400, "invalid_request_error", "invalid_request", "max_output_tokens"),
        (404, "not_found_error", "not_found", "claude-sonnet-5-5"),
    ],
)
async def test_fatal_errors_are_not_retried_and_never_show_the_key(
    server: FakeMessagesServer,
    status: int,
    etype: str,
    kind: str,
    hint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A key shaped like no known pattern, passed as an argument and absent from the environment:
    # only the adapter itself can keep it out (the server echoes it in its message).
    plain_key = "plainkey0123456789"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    for key, model in (
        (CANARY_KEY, model_for(server, api_key=CANARY_KEY)),
        (plain_key, model_for(server, api_key=plain_key)),
    ):
        server.push(Error(status, etype, "bad request for key {api_key}"))
        async with open_ctx() as ctx:
            with pytest.raises(ModelError) as caught:
                await model.request(make_request(), ctx)
        error = caught.value
        assert (error.fatal, error.kind) == (True, kind)
        assert key not in str(error) and "[REDACTED]" in str(error)
        assert hint in str(error) and "\n" not in str(error)
    assert len(server.requests) == 2  # one each: not retried


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 1200000 tokens > 1000000",
        "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ],
    ids=["prompt-too-long", "input-and-max-tokens-exceed-the-limit"],
)
async def test_an_input_too_long_for_the_context_window_is_not_fatal(
    server: FakeMessagesServer, message: str
) -> None:
    server.push(Error(400, "invalid_request_error", message))
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(), ctx)
    assert (caught.value.fatal, caught.value.kind) == (False, "context_exceeded")


async def test_an_output_cap_over_the_models_is_that_agents_error_not_the_runs(
    server: FakeMessagesServer,
) -> None:
    # a cut tool call is retried with a doubled cap, which may pass the model's own limit
    server.push(
        Error(
            400,
            "invalid_request_error",
            "max_tokens: 40000 > 32000, which is the maximum allowed number of output tokens",
        )
    )
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(max_tokens=40000), ctx)
    assert (caught.value.fatal, caught.value.kind) == (False, "invalid_request")


@pytest.mark.parametrize("stop_reason", ["model_context_window_exceeded", "refusal"])
async def test_a_tool_call_cut_by_a_full_window_or_a_refusal_is_passed_on_not_retried(
    server: FakeMessagesServer, stop_reason: str
) -> None:
    cut = {"type": "tool_use", "id": "toolu_c", "name": "search", "input": {"q": "x"}}
    server.push(Reply((dict(cut, _partial_json='{"q": "x'),), stop_reason=stop_reason))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(), ctx)
    assert result.stop_reason == stop_reason
    assert len(server.requests) == 1


async def test_answers_billed_then_retried_as_unusable_count_in_the_runs_usage(
    server: FakeMessagesServer, quiet_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # a whole run has deadlines (its own, the SDK's HTTP timeout) that trio's autojump could
    # reach while a request is in flight to a slow server: time moves only between requests
    nursery.start_soon(jump_when_idle, quiet_clock)
    # a whole answer whose tool input is not JSON is retried; the API billed it all the same
    from orchestrator import Agent, RunStatus, run

    billed = {
        "input_tokens": 1000,
        "output_tokens": 400,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    broken = {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {"q": "x"}}
    unusable = Reply(
        (dict(broken, _partial_json='{"q": "x'),), stop_reason="tool_use", usage=billed
    )
    server.push(unusable, unusable, text("done", usage=dict(billed, output_tokens=5)))
    result = await run(Agent("w", "x", model=model_for(server)), "go")
    assert result.status is RunStatus.COMPLETED and result.output == "done"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (3000, 805)
    assert result.usage.cost_usd == pytest.approx((3000 * 2 + 805 * 10) / 1e6)
    (turn,) = result.turn_log  # the size of what the turn sent: one request's, not three
    assert (turn.input_tokens, turn.cache_read_tokens) == (1000, 0)

    server.push(unusable, unusable)  # and when no attempt was usable: the error keeps the bill
    failed = await run(Agent("w", "x", model=model_for(server, max_retries=1)), "go")
    assert failed.status is RunStatus.ERROR and "malformed response" in (failed.error or "")
    assert (failed.usage.input_tokens, failed.usage.output_tokens) == (2000, 800)


async def test_no_cache_breakpoint_lands_on_redacted_thinking(server: FakeMessagesServer) -> None:
    server.push(text("ok"))
    messages = [
        Message.user("Hello"),
        Message("assistant", (RedactedThinkingBlock("opaque"),)),
    ]
    async with open_ctx() as ctx:
        await model_for(server).request(make_request(messages), ctx)
    body = server.requests[0].json
    assert body is not None
    blocks = [b for m in body["messages"] for b in m["content"]]
    assert all("cache_control" not in b for b in blocks if b["type"] == "redacted_thinking")


async def test_missing_key_is_fatal_and_says_what_to_set(
    server: FakeMessagesServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    async with open_ctx() as ctx:
        with pytest.raises(ModelError) as caught:
            await model_for(server).request(make_request(), ctx)
    assert (caught.value.fatal, caught.value.kind) == (True, "authentication")
    assert "ANTHROPIC_API_KEY" in str(caught.value)
    assert not server.requests


async def test_base_url_from_environment_and_client_closed_at_exit(
    server: FakeMessagesServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.responder = lambda body: text("via env")
    created: list[Any] = []

    class RecordingPool(ClientPool):
        async def get(self, key: Any, factory: Callable[[], Any]) -> Any:
            client = await super().get(key, factory)
            if client not in created:
                created.append(client)
            return client

    async with AsyncExitStack() as stack:
        ctx = ModelContext(RecordingPool(stack))
        for name in (DEFAULT_MODEL, FAST_MODEL):
            result = await AnthropicModel(name).request(make_request(), ctx)
            assert result.content == (TextBlock("via env"),)
        await AnthropicModel(api_key="sk-ant-other-key-000000").request(make_request(), ctx)
        assert len(created) == 2  # one per (base URL, key), shared across model names
        assert not any(c.sdk.is_closed() for c in created)
    assert all(c.sdk.is_closed() for c in created)


async def test_clients_of_separate_runs_share_one_tls_context(
    server: FakeMessagesServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Building a TLS context (loading the CA bundle) was most of the cost of opening a client,
    paid by every run; it is built once per process, and again only if the variables choosing
    the CA bundle change."""
    server.responder = lambda body: text("ok")

    async def tls_context_of_a_new_run() -> Any:
        opened: list[Any] = []

        class RecordingPool(ClientPool):
            async def get(self, key: Any, factory: Callable[[], Any]) -> Any:
                client = await super().get(key, factory)
                opened.append(client)
                return client

        async with AsyncExitStack() as stack:  # one pool per run, as run() makes
            await model_for(server).request(make_request(), ModelContext(RecordingPool(stack)))
        client = opened[0]
        assert all(c is client for c in opened) and client.sdk.is_closed()
        return client.sdk._client._transport._pool._ssl_context

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = await tls_context_of_a_new_run()
    assert await tls_context_of_a_new_run() is first
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # another CA directory: a new context
    assert await tls_context_of_a_new_run() is not first


# --------------------------------------------------------------------------------------------
# Cancellation and concurrency (real clock)


STALL = 30.0


@pytest.mark.parametrize("mid_stream", [False, True], ids=["mid-request", "mid-stream"])
async def test_cancellation_is_prompt_and_leaves_the_client_usable(
    server: FakeMessagesServer,
    mid_stream: bool,
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
        assert scope.cancelled_caught
        assert cancelled_after < STALL / 3
        start = time.perf_counter()
        result = await model.request(make_request(), ctx)
        next_call = time.perf_counter() - start
    assert result.content == (TextBlock("next call"),)
    assert next_call < STALL / 3  # the stalled connection was not waited for
    print(
        f"\ncancel {'mid-stream' if mid_stream else 'mid-request'}: returned after "
        f"{cancelled_after:.3f} s; next call on the same client {next_call * 1000:.1f} ms"
    )


async def test_parallel_requests_share_one_client(server: FakeMessagesServer) -> None:
    server.responder = lambda body: text(body["messages"][0]["content"][0]["text"].upper())
    model = model_for(server)
    results: dict[int, str] = {}
    async with open_ctx() as ctx:
        await model.request(make_request(), ctx)  # warm up (client creation, platform probe)
        start = time.perf_counter()

        async def call(i: int) -> None:
            result = await model.request(make_request([Message.user(f"task {i}")]), ctx)
            results[i] = Message("assistant", result.content).text

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(call, i)
        elapsed = time.perf_counter() - start
    assert results == {i: f"TASK {i}" for i in range(20)}
    print(f"\n20 parallel streamed calls over one client: {elapsed:.3f} s")


async def test_usage_figures_that_are_not_counts_are_taken_as_missing_not_a_crash(
    server: FakeMessagesServer,
) -> None:
    odd: Any = {"input_tokens": "n/a", "cache_read_input_tokens": [1], "output_tokens": 15}
    server.push(text("answer", usage=odd))
    counts: Any = {
        "input_tokens": "20",
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 15.0,
    }
    server.push(text("again", usage=counts))
    async with open_ctx() as ctx:
        first = await model_for(server).request(make_request(), ctx)
        second = await model_for(server).request(make_request(), ctx)
    assert first.content == (TextBlock("answer"),)
    # the stream's figures that are not counts are skipped: what message_start said stays
    assert first.usage.input_tokens > 0 and first.usage.cache_read_tokens == 0
    assert first.usage.output_tokens == 15  # the figures that are counts are kept
    assert (second.usage.input_tokens, second.usage.output_tokens) == (20, 15)


async def test_an_endless_stream_is_cut_at_the_output_limit_and_billed_for_it(
    server: FakeMessagesServer,
) -> None:
    server.push(Endless(size=100))
    async with open_ctx() as ctx:
        result = await model_for(server).request(make_request(max_tokens=100), ctx)
    assert result.stop_reason == "max_tokens"
    (block,) = result.content
    assert isinstance(block, TextBlock)
    limit = 100 * 32 + 4096  # characters: more than 100 tokens of any tokenizer can hold
    assert limit < len(block.text) <= limit + 100  # read to the limit, not to the server's end
    assert result.usage.output_tokens >= 100  # billed the limit at least, not 0


async def test_ids_the_api_would_refuse_are_sent_mapped_and_still_paired(
    server: FakeMessagesServer,
) -> None:
    # a reply repeating an id: the runtime makes the second `toolu_1~2`, which the API refuses
    # (the fake server checks its id pattern); the adapter sends a form it takes, paired
    from orchestrator import Agent, RunStatus, run, tool

    paid: list[str] = []

    @tool
    def pay(who: str) -> str:
        """Pay someone."""
        paid.append(who)
        return f"paid {who}"

    calls = tuple(
        {"type": "tool_use", "id": "toolu_1", "name": "pay", "input": {"who": who}}
        for who in ("alice", "bob")
    )
    server.push(Reply(calls, stop_reason="tool_use"), text("both paid"))
    result = await run(Agent("w", "Pay.", model=model_for(server), tools=[pay]), "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert sorted(paid) == ["alice", "bob"]
    sent = server.bodies[1]["messages"]
    ids = [b["id"] for b in sent[1]["content"] if b["type"] == "tool_use"]
    answered = [b["tool_use_id"] for b in sent[2]["content"] if b["type"] == "tool_result"]
    assert ids[0] == "toolu_1" and ids[1].startswith("toolu_1_2_") and "~" not in ids[1]
    assert answered == ids  # each result still answers its call


async def test_a_results_notes_go_as_text_blocks_after_its_content(
    server: FakeMessagesServer,
) -> None:
    server.push(text("ok"))
    note = "[budget left: 812,400 tokens, $3.12]"
    messages = [
        Message.user("Research."),
        Message.assistant(ToolUseBlock("toolu_1", "spawn_subagent", {"agent": "r", "task": "t"})),
        Message.user(ToolResultBlock("toolu_1", '{"claim":"x"}', notes=(note,))),
    ]
    async with open_ctx() as ctx:
        await model_for(server).request(make_request(messages), ctx)
    [result] = server.bodies[0]["messages"][2]["content"]
    assert strip_cache_control(result["content"]) == [
        {"type": "text", "text": '{"claim":"x"}'},
        {"type": "text", "text": note},
    ]


async def test_the_fake_cache_decides_at_arrival_and_serves_an_entry_once_its_writer_responds(
    server: FakeMessagesServer,
) -> None:
    # The prompt cache as the API runs it: a request's reads and writes are decided when it
    # arrives, and what it writes is readable only once its response has started. Request A is
    # held before answering; B, with the same prefix, arrives meanwhile and must miss and write
    # too; C, sent after A's response started, reads.
    gate = threading.Event()
    server.push(Stall(60, then=text("a"), until=gate), text("b"), text("c"))
    prefix = "x" * 4_000  # the system prompt: the shared prefix, closed by its breakpoint
    usage: dict[str, Any] = {}

    async def ask(name: str) -> None:
        async with open_ctx() as ctx:
            request = make_request([Message.user(name)], system=prefix, tools=())
            usage[name] = (await model_for(server).request(request, ctx)).usage

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "A")
        await trio.to_thread.run_sync(server.stalled.wait, 60)  # A arrived and is held
        await ask("B")
        gate.set()
    await ask("C")

    assert usage["A"].cache_write_tokens > 1_000 and usage["A"].cache_read_tokens == 0
    assert usage["B"].cache_write_tokens == usage["A"].cache_write_tokens
    assert usage["B"].cache_read_tokens == 0
    # C reads the shared prefix (the system prompt) and writes only its own message
    assert 1_000 <= usage["C"].cache_read_tokens < usage["A"].cache_write_tokens
    assert (
        usage["C"].cache_write_tokens
        == usage["A"].cache_write_tokens - usage["C"].cache_read_tokens
    )
