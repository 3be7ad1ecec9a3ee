"""Over real HTTP: the real anthropic SDK against the local fake Messages server. The tree
example gives the same output as with ScriptedModel, and every stop reason of DESIGN.md's table
drives the loop as it does with the test models."""

from __future__ import annotations

import json
import runpy
import threading
from pathlib import Path
from typing import Any

import pytest
from support.fake_messages_server import FakeMessagesServer, Stall
from support.fake_messages_server import Message as Reply
from support.fake_messages_server import text as reply_text
from support.fake_messages_server import tool_use as reply_tool_use

from orchestrator import Agent, ContextPolicy, Limits, RunStatus, run, tool
from orchestrator.core.messages import ToolUseBlock, to_wire
from orchestrator.models.anthropic import AnthropicModel
from orchestrator.models.scripted import response

EXAMPLE = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "research_team.py"))
SCRIPTED_TREE: Agent = EXAMPLE["agent"]
SCRIPT: dict[str, list[Any]] = EXAMPLE["model"]._by_agent


def bridge(body: dict[str, Any]) -> Reply:
    """Answer like the example's ScriptedModel: the agent from its system prompt, the step
    from the number of assistant turns in the request."""
    system = "".join(block["text"] for block in body["system"])
    agent = "lead" if system.startswith("Split the question") else "researcher"
    step = SCRIPT[agent][sum(1 for m in body["messages"] if m["role"] == "assistant")]
    blocks = step if isinstance(step, list) else [step]
    resp = response(*blocks)
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    content = tuple(
        to_wire(ToolUseBlock(f"toolu_{turn}_{i}", b.name, b.input))
        if isinstance(b, ToolUseBlock)
        else to_wire(b)
        for i, b in enumerate(resp.content)
    )
    return Reply(content, stop_reason=resp.stop_reason)


@pytest.fixture
def server() -> Any:
    with FakeMessagesServer(responder=bridge) as s:
        yield s


async def test_the_tree_example_gives_the_same_output_over_http_as_with_the_scripted_model(
    server: FakeMessagesServer,
) -> None:
    scripted = await run(SCRIPTED_TREE, "How does trio keep concurrent tasks in order?")
    model = AnthropicModel(
        "claude-sonnet-5-5", api_key="sk-ant-test-key-000000", base_url=server.url
    )
    over_http = await run(
        SCRIPTED_TREE.map_tree(lambda a: a.replace(model=model)),
        "How does trio keep concurrent tasks in order?",
    )

    assert over_http.status is RunStatus.COMPLETED, over_http.error
    assert over_http.output == scripted.output
    assert [c.path for c in over_http.children] == [c.path for c in scripted.children]
    assert [c.output for c in over_http.children] == [c.output for c in scripted.children]
    assert len(server.requests) == 2 + 3 * 2
    assert not server.errors
    assert all("traceparent" not in r.headers for r in server.requests)
    # usage from the API flows into the result tree
    assert over_http.usage.input_tokens > 0 and over_http.usage.cost_usd > 0
    assert over_http.usage.input_tokens == sum(r.own_usage.input_tokens for r in over_http.walk())


# --------------------------------------------------------------------------------------------
# The stop-reason table over the real protocol: the loop, the SDK and the wire together.


@tool
def lookup(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: What to look up.
    """
    return f"notes on {topic}"


def http_agent(server: FakeMessagesServer) -> Agent:
    model = AnthropicModel(
        "claude-sonnet-5-5", api_key="sk-ant-test-key-000000", base_url=server.url
    )
    return Agent(
        "worker", "Answer with the lookup tool.", model=model, tools=[lookup], max_output_tokens=512
    )


@pytest.fixture
def plain_server() -> Any:
    with FakeMessagesServer() as s:
        yield s


async def test_a_tool_call_cut_by_max_tokens_is_retried_once_with_a_larger_cap_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    plain_server.push(
        reply_tool_use("lookup", {"topic": "trio nurseries"}, id="toolu_a", cut=True),
        reply_tool_use("lookup", {"topic": "trio nurseries"}, id="toolu_b"),
        reply_text("Nurseries own their tasks."),
    )
    result = await run(http_agent(plain_server), "What is a nursery?")
    assert result.status is RunStatus.COMPLETED, result.error
    caps = [r.json["max_tokens"] for r in plain_server.requests if r.json]
    assert caps == [512, 1024, 512]
    # the cut call never reached the transcript; the retried one was answered
    uses = [b.id for m in result.messages for b in m.tool_uses]
    assert uses == ["toolu_b"]


async def test_pause_turn_sends_the_transcript_back_as_it_is_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    plain_server.push(reply_text("Working on it...", stop_reason="pause_turn"), reply_text("Done."))
    result = await run(http_agent(plain_server), "Go.")
    assert result.status is RunStatus.COMPLETED and result.output == "Working on it...Done."
    second = plain_server.requests[1].json
    assert second is not None and second["messages"][-1]["role"] == "assistant"


@pytest.mark.parametrize(
    ("stop_reason", "status"),
    [
        ("refusal", RunStatus.REFUSAL),
        ("model_context_window_exceeded", RunStatus.CONTEXT_EXCEEDED),
        ("a_reason_from_the_future", RunStatus.ERROR),
    ],
)
async def test_terminal_stop_reasons_end_the_agent_with_their_status_over_http(
    plain_server: FakeMessagesServer, stop_reason: str, status: RunStatus
) -> None:
    plain_server.push(reply_text("partial", stop_reason=stop_reason))
    no_compaction = ContextPolicy(compact_at_fraction=None)
    result = await run(http_agent(plain_server), "Go.", context=no_compaction)
    assert result.status is status
    if status is RunStatus.ERROR:
        assert result.error is not None and "a_reason_from_the_future" in result.error


async def test_a_full_context_window_is_compacted_once_and_the_run_recovers_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    plain_server.push(
        reply_text("", stop_reason="model_context_window_exceeded"),
        reply_text("Goal: answer. Evidence: nurseries own tasks."),  # the checkpoint summary
        reply_text("Nurseries own their tasks."),
    )
    result = await run(http_agent(plain_server), "What is a nursery?")
    assert result.status is RunStatus.COMPLETED, result.error
    summary_request = plain_server.requests[1].json
    assert summary_request is not None
    assert "Context checkpoint" in json.dumps(summary_request["messages"][-1])
    resumed = plain_server.requests[2].json
    assert resumed is not None and "nurseries own tasks" in json.dumps(resumed["messages"][0])
    assert any(t.compacted for t in result.turn_log)


async def test_a_reply_cut_by_max_tokens_is_continued_and_joined_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    plain_server.push(
        reply_text("The first half, ", stop_reason="max_tokens"), reply_text("the second half.")
    )
    result = await run(http_agent(plain_server), "Go.")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "The first half, the second half."


async def test_tool_call_starts_stream_as_run_events_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    from orchestrator import open_run
    from orchestrator.core.events import ModelToolCallStarted

    plain_server.push(reply_tool_use("lookup", {"topic": "x"}, id="toolu_s"), reply_text("ok"))
    seen: list[ModelToolCallStarted] = []
    async with open_run(http_agent(plain_server), "go") as handle:
        async for event in handle.events:
            if isinstance(event, ModelToolCallStarted):
                seen.append(event)
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED
    assert [(e.tool, e.call_id) for e in seen] == [("lookup", "toolu_s")]


async def test_blank_text_blocks_a_model_returned_are_not_sent_back_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    # The API can answer with an empty text block before a tool call, and refuses empty or
    # blank text blocks in requests with a (fatal) 400: the adapter must not send them back.
    plain_server.push(
        Reply(
            (
                {"type": "text", "text": ""},
                {"type": "tool_use", "id": "toolu_e", "name": "lookup", "input": {"topic": "x"}},
            ),
            stop_reason="tool_use",
        ),
        Reply(
            (
                {"type": "text", "text": " \n"},
                {"type": "tool_use", "id": "toolu_f", "name": "lookup", "input": {"topic": "y"}},
            ),
            stop_reason="tool_use",
        ),
        reply_text("Done."),
    )
    result = await run(http_agent(plain_server), "Look up x, then y.")
    assert result.status is RunStatus.COMPLETED, result.error
    assert not plain_server.errors
    last = plain_server.requests[-1].json
    assert last is not None
    sent = [b for m in last["messages"] for b in m["content"] if b["type"] == "text"]
    assert [b["text"] for b in sent] == ["Look up x, then y."]


async def test_a_blank_assistant_turn_in_the_history_is_left_out_of_the_request_over_http(
    plain_server: FakeMessagesServer,
) -> None:
    from orchestrator import Message, TextBlock

    plain_server.push(reply_text("Still here."))
    history = [Message.user("Hello?"), Message("assistant", (TextBlock("  "),))]
    result = await run(http_agent(plain_server), "Are you there?", message_history=history)
    assert result.status is RunStatus.COMPLETED, result.error
    sent = plain_server.requests[0].json
    assert sent is not None
    assert [m["role"] for m in sent["messages"]] == ["user", "user"]


async def test_a_retried_model_call_shows_its_retries_as_events_on_the_chat_span(
    plain_server: FakeMessagesServer,
) -> None:  # (real clock: the virtual one would jump while the HTTP call waits; ~0.5 s backoff)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from support.fake_messages_server import Error

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    plain_server.push(Error(529, "overloaded_error", "Overloaded"), reply_text("Fine."))
    result = await run(http_agent(plain_server), "Go.", tracer_provider=provider)
    assert result.status is RunStatus.COMPLETED, result.error
    (chat,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    (retry,) = [e for e in chat.events if e.name == "orchestrator.retry"]
    assert retry.attributes is not None
    assert (retry.attributes["orchestrator.retry.attempt"], retry.attributes["error.type"]) == (
        1,
        "overloaded",
    )


async def test_a_lone_surrogate_in_the_models_own_reply_does_not_break_the_next_request(
    plain_server: FakeMessagesServer,
) -> None:
    # a JSON escape like "\ud83d" alone decodes to a lone surrogate: the reply goes back in
    # the transcript, and the next request failed to encode ("surrogates not allowed")
    call = reply_tool_use("lookup", {"topic": "x"}, id="toolu_s")
    broken = dict(call.content[0], _partial_json='{"topic": "caf\\udce9"}')
    plain_server.push(
        Reply(({"type": "text", "text": "Looking up caf\udce9."}, broken), stop_reason="tool_use"),
        reply_text("Done."),
    )
    result = await run(http_agent(plain_server), "Go.")
    assert result.status is RunStatus.COMPLETED, result.error
    assert len(plain_server.requests) == 2
    sent = json.dumps(plain_server.requests[1].json, ensure_ascii=False)
    assert "caf\ufffd" in sent and "\\udce9" not in sent
    (use,) = [b for m in result.messages for b in m.tool_uses]
    assert use.input == {"topic": "caf\ufffd"}


async def test_a_failed_call_that_was_billed_shows_its_usage_on_its_chat_span(
    plain_server: FakeMessagesServer,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    billed = {
        "input_tokens": 700,
        "output_tokens": 30,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    call = reply_tool_use("lookup", {"topic": "x"}, id="toolu_u")
    unusable = Reply(
        (dict(call.content[0], _partial_json='{"topic": "x'),), "tool_use", usage=billed
    )
    plain_server.push(unusable, unusable)
    model = AnthropicModel(
        "claude-sonnet-5-5",
        api_key="sk-ant-test-key-000000",
        base_url=plain_server.url,
        max_retries=1,
    )
    agent = Agent("worker", "Answer.", model=model, tools=[lookup])
    result = await run(agent, "Go.", tracer_provider=provider)
    assert result.status is RunStatus.ERROR and result.usage.input_tokens == 1400
    (chat,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chat.attributes is not None
    assert (chat.attributes["gen_ai.usage.input_tokens"], chat.status.status_code.name) == (
        1400,
        "ERROR",
    )


# --------------------------------------------------------------------------------------------
# Siblings share the cache: over real HTTP on the realistic fake (usage decided on arrival, an
# entry readable once its writer's response starts).

RESEARCHER_PROMPT = "You research one part of a question. " + "Be thorough and cite. " * 700


class _Siblings:
    """Answers the lead (four researchers in one turn) and the researchers. With ``hold``, the
    researchers' answers are held until all four have arrived (siblings sent together)."""

    def __init__(self, hold: bool) -> None:
        self.hold = hold
        self.arrived = 0
        self.lock = threading.Lock()
        self.gate = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply | Stall:
        system = "".join(block["text"] for block in body["system"])
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if system.startswith("You lead") and turn == 0:
            calls = tuple(
                {
                    "type": "tool_use",
                    "id": f"toolu_spawn_{i}",
                    "name": "spawn_subagent",
                    "input": {"agent": "researcher", "task": f"part {i} of the question"},
                }
                for i in range(4)
            )
            return Reply(calls, stop_reason="tool_use")
        if turn or system.startswith("You lead"):
            return reply_text("done")
        with self.lock:
            self.arrived += 1
            if self.arrived == 4:
                self.gate.set()
        if self.hold:
            return Stall(60, then=reply_text("the part's answer"), until=self.gate)
        return reply_text("the part's answer")


@pytest.mark.parametrize("siblings_wait", [True, False])
async def test_siblings_write_the_shared_prefix_once_over_http(siblings_wait: bool) -> None:
    # without waiting, the siblings' answers are held until all four arrived, as siblings
    # sent together arrive on the API; with waiting, nothing is held but the order of events
    responder = _Siblings(hold=not siblings_wait)
    with FakeMessagesServer(responder=responder) as server:
        model = AnthropicModel(
            "claude-sonnet-5-5", api_key="sk-ant-test-key-000000", base_url=server.url
        )
        if not siblings_wait:  # the same model without prompt caching declared: no waiting
            model.prompt_caching = False  # type: ignore[misc]
        researcher = Agent("researcher", RESEARCHER_PROMPT)
        lead = Agent("lead", "You lead.", subagents=[researcher], model=model)

        result = await run(lead, "q", limits=Limits(cache_warmup_wait=60.0))

    assert result.status is RunStatus.COMPLETED, result.error
    firsts = [
        r
        for r in server.requests
        if r.json is not None
        and "".join(b["text"] for b in r.json["system"]) != "You lead."
        and not any(m["role"] == "assistant" for m in r.json["messages"])
    ]
    assert len(firsts) == 4
    firsts.sort(key=lambda r: r.received_at)
    writes = [(r.usage or {})["cache_creation_input_tokens"] for r in firsts]
    reads = [(r.usage or {})["cache_read_input_tokens"] for r in firsts]
    prefix = len(RESEARCHER_PROMPT) // 4  # the fake's estimate of the shared system prompt
    if siblings_wait:
        leader = firsts[0]
        assert all(r.received_at >= leader.started_at > 0 for r in firsts[1:])
        assert reads[0] == 0 and all(read >= prefix for read in reads[1:])
        assert sum(writes) <= 1.3 * prefix
    else:
        assert all(write >= prefix for write in writes)  # every sibling wrote it again
