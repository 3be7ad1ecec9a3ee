"""Typed results through AnthropicModel: the real anthropic SDK, over real HTTP, against the fake
Messages server (which refuses, as the API does, a structured-output schema with an open object).

Native mode asks for ``output_config.format`` (a JSON schema shaped by the SDK's own
``transform_schema``) and the answer's text is the JSON; tool mode needs nothing of the adapter
(``final_result`` is one more tool). The adapter always streams, so every answer here is
assembled from ``text_delta`` events.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from pydantic import BaseModel, TypeAdapter
from support.fake_messages_server import FakeMessagesServer, text, tool_use
from support.fake_messages_server import Message as Reply
from support.transcripts import check_transcript

from orchestrator import Agent, Limits, RunStatus, run, tool
from orchestrator.core.messages import Message
from orchestrator.models.anthropic import AnthropicModel
from orchestrator.models.base import AgentInfo, ModelRequest

KEY = "sk-ant-test-key-000000"


class Claim(BaseModel):
    text: str
    sources: list[str]


class Findings(BaseModel):
    summary: str
    claims: list[Claim]
    confidence: float = 0.5


FINDINGS = Findings(summary="trio orders tasks", claims=[Claim(text="nurseries", sources=["d1"])])


@tool
def search(query: str) -> str:
    """Search the corpus.

    Args:
        query: Plain keywords.
    """
    return f"d1: notes on {query}"


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


def model_for(server: FakeMessagesServer) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-5-5", api_key=KEY, base_url=server.url)


def turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return "".join(b.get("text", "") for b in content if b["type"] == "text")


def expected_format(output_type: Any) -> dict[str, Any]:
    schema = TypeAdapter(output_type).json_schema()
    return {"format": {"type": "json_schema", "schema": anthropic.transform_schema(schema)}}


def test_the_anthropic_model_declares_native_output() -> None:
    assert AnthropicModel.supports_native_output is True


async def test_a_native_typed_agent_asks_for_its_schema_and_ends_with_the_json_over_http(
    server: FakeMessagesServer,
) -> None:
    server.push(
        tool_use("search", {"query": "trio"}, id="toolu_1"),
        text(FINDINGS.model_dump_json()),
    )
    agent = Agent(
        "researcher",
        "Research, then answer.",
        model=model_for(server),
        tools=[search],
        output_type=Findings,
        output_mode="native",
    )
    result = await run(agent, "How does trio order tasks?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    assert result.output_json == FINDINGS.model_dump_json()
    assert len(server.bodies) == 2
    for body in server.bodies:
        # the exact parameter, on every turn (a tool call does not end the agent)
        assert body["output_config"] == expected_format(Findings)
        assert [t["name"] for t in body["tools"]] == ["search"]  # no final_result in native mode
    schema = server.bodies[0]["output_config"]["format"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Claim"]["additionalProperties"] is False
    check_transcript(result.messages)


async def test_native_output_leaves_the_cached_prefix_and_its_breakpoints_as_they_were() -> None:
    agent = Agent("r", "Answer.", output_type=Findings, output_mode="native", tools=[search])
    assert agent.output_spec is not None
    messages = [Message.user("Find it."), Message.assistant("Looking."), Message.user("Go on.")]
    plain = ModelRequest("Answer.", messages, [search.spec], 512, AgentInfo("r", "r", 0))
    typed = ModelRequest(
        "Answer.",
        messages,
        [search.spec],
        512,
        AgentInfo("r", "r", 0),
        output=agent.output_spec.format,
    )
    model = AnthropicModel(api_key=KEY)
    without, with_output = model.request_params(plain), model.request_params(typed)
    assert with_output.pop("output_config") == expected_format(Findings)
    assert json.dumps(with_output) == json.dumps(without)  # tools, system, messages, markers
    assert "output_config" not in without


async def test_an_invalid_native_answer_goes_back_with_its_problems_and_is_retried_over_http(
    server: FakeMessagesServer,
) -> None:
    server.push(
        text("Here you go: trio orders tasks."),
        text(json.dumps({"summary": "s"})),
        text(FINDINGS.model_dump_json()),
    )
    agent = Agent(
        "researcher", "Answer.", model=model_for(server), output_type=Findings, output_mode="native"
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    bodies = server.bodies
    assert len(bodies) == 3
    assert "not JSON" in last_user_text(bodies[1])
    assert "claims: Field required" in last_user_text(bodies[2])
    assert all(b["output_config"] == expected_format(Findings) for b in bodies)
    check_transcript(result.messages)


async def test_a_refusal_in_native_mode_ends_the_agent_refusal_over_http(
    server: FakeMessagesServer,
) -> None:
    server.push(text("I can't help with that.", stop_reason="refusal"))
    agent = Agent(
        "r", "Answer.", model=model_for(server), output_type=Findings, output_mode="native"
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.REFUSAL
    assert len(server.bodies) == 1


async def test_a_native_agent_that_never_answers_valid_json_ends_invalid_output_over_http(
    server: FakeMessagesServer,
) -> None:
    server.responder = lambda body: text("no JSON here")
    agent = Agent(
        "researcher",
        "Answer.",
        model=model_for(server),
        output_type=Findings,
        output_mode="native",
        limits=Limits(output_retries=1),
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.INVALID_OUTPUT
    assert len(server.bodies) == 2  # the answer, and one retry
    assert "no JSON here" in (result.error or "")


async def test_a_type_that_is_not_an_object_is_asked_for_wrapped_in_result_over_http(
    server: FakeMessagesServer,
) -> None:
    server.push(text(json.dumps({"result": [{"text": "t", "sources": ["d1"]}]})))
    agent = Agent(
        "r", "Answer.", model=model_for(server), output_type=list[Claim], output_mode="native"
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == [Claim(text="t", sources=["d1"])]
    schema = server.bodies[0]["output_config"]["format"]["schema"]
    assert schema["required"] == ["result"] and schema["additionalProperties"] is False
    assert schema["properties"]["result"]["type"] == "array"


async def test_a_native_child_returns_its_json_to_the_parent_over_http(
    server: FakeMessagesServer,
) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        system = "".join(b["text"] for b in body["system"])
        if system.startswith("Research"):
            return text(FINDINGS.model_dump_json())
        if turns(body) == 0:
            return tool_use(
                "spawn_subagent", {"agent": "researcher", "task": "trio"}, id="toolu_spawn"
            )
        return text("Trio orders tasks with nurseries.")

    server.responder = answer
    model = model_for(server)
    researcher = Agent(
        "researcher", "Research the topic.", output_type=Findings, output_mode="native"
    )
    lead = Agent("lead", "Lead the research.", model=model, subagents=[researcher])
    result = await run(lead, "How does trio order tasks?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.children[0].output == FINDINGS
    child_bodies = [b for b in server.bodies if "output_config" in b]
    assert len(child_bodies) == 1 and child_bodies[0]["output_config"] == expected_format(Findings)
    last = server.bodies[-1]["messages"][-1]["content"][0]
    assert last["type"] == "tool_result" and not last.get("is_error")
    assert (
        json.loads(
            last["content"] if isinstance(last["content"], str) else last["content"][0]["text"]
        )
        == FINDINGS.model_dump()
    )


class Loose(BaseModel):
    anything: Any


class Tagged(BaseModel):
    tags: dict[str, int]


@pytest.mark.parametrize(
    ("output_type", "said"),
    [(Loose, "Schema must have a 'type'"), (Tagged, "tags is a map with free keys")],
)
async def test_a_type_claudes_structured_output_cannot_take_ends_the_run_naming_it(
    server: FakeMessagesServer, output_type: type, said: str
) -> None:
    agent = Agent(
        "r", "Answer.", model=model_for(server), output_type=output_type, output_mode="native"
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.ERROR
    error = result.error or ""
    assert output_type.__name__ in error and said in error and "output_mode='tool'" in error
    assert server.bodies == []  # refused before anything was sent


async def test_a_tool_mode_typed_agent_completes_with_final_result_over_http(
    server: FakeMessagesServer,
) -> None:
    server.push(tool_use("final_result", FINDINGS.model_dump(), id="toolu_final"))
    agent = Agent("researcher", "Answer.", model=model_for(server), output_type=Findings)
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    body = server.bodies[0]
    assert "output_config" not in body
    (final,) = [t for t in body["tools"] if t["name"] == "final_result"]
    assert final["input_schema"] == TypeAdapter(Findings).json_schema()
    check_transcript(result.messages)


def test_the_fake_server_refuses_a_schema_with_an_open_object_as_the_api_does(
    server: FakeMessagesServer,
) -> None:
    with (
        anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0) as client,
        pytest.raises(anthropic.BadRequestError, match="additionalProperties"),
    ):
        client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            output_config={
                "format": {"type": "json_schema", "schema": Findings.model_json_schema()}
            },
        )
