"""Typed results through OpenAIModel: the real openai SDK, over real HTTP, against the fake Chat
Completions server (which checks a ``response_format`` as OpenAI does: a name it takes, an object
at the root, and in strict mode every object closed with every property required).

Native mode sends ``response_format`` with the output type's schema rewritten for strict mode
(what strict mode cannot take is sent with ``strict: false``); tool mode needs nothing of the
adapter (``final_result`` is one more tool). Streamed and whole answers both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field, TypeAdapter
from support.fake_chat_server import Completion, Error, FakeChatServer, Reply, text, tool_calls
from support.transcripts import check_transcript

from orchestrator import Agent, Limits, RunStatus, run, tool
from orchestrator.core.messages import Message
from orchestrator.models.base import AgentInfo, ModelRequest, OutputFormat
from orchestrator.models.openai import OpenAIModel, ollama

KEY = "sk-test-key-0000000000"
MODEL = "gpt-4.1-mini"


class Claim(BaseModel):
    text: str
    sources: list[str]


class Findings(BaseModel):
    summary: str
    claims: list[Claim]
    confidence: float = 0.5


FINDINGS = Findings(summary="trio orders tasks", claims=[Claim(text="nurseries", sources=["d1"])])

FINDINGS_STRICT = {
    "$defs": {
        "Claim": {
            "properties": {
                "text": {"title": "Text", "type": "string"},
                "sources": {"items": {"type": "string"}, "title": "Sources", "type": "array"},
            },
            "required": ["text", "sources"],
            "title": "Claim",
            "type": "object",
            "additionalProperties": False,
        }
    },
    "properties": {
        "summary": {"title": "Summary", "type": "string"},
        "claims": {"items": {"$ref": "#/$defs/Claim"}, "title": "Claims", "type": "array"},
        "confidence": {"title": "Confidence", "type": "number"},
    },
    "required": ["summary", "claims", "confidence"],
    "title": "Findings",
    "type": "object",
    "additionalProperties": False,
}
"""Findings' schema as strict mode takes it, written out: closed objects, every property
required, the default gone."""


@tool
def search(query: str) -> str:
    """Search the corpus.

    Args:
        query: Plain keywords.
    """
    return f"d1: notes on {query}"


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


def model_for(server: FakeChatServer, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel(MODEL, api_key=KEY, base_url=server.url, **kwargs)


def native(output_type: Any, name: str | None = None) -> OutputFormat:
    """The output format a native-mode agent of ``output_type`` sends (as core builds it)."""
    agent = Agent("a", "x", output_type=output_type, output_mode="native")
    assert agent.output_spec is not None
    form = agent.output_spec.format
    return form if name is None else OutputFormat(name, form.schema, native=True)


def response_format(output: OutputFormat, **kwargs: Any) -> dict[str, Any]:
    request = ModelRequest(
        "x", [Message.user("go")], [], 256, AgentInfo("a", "a", 0), output=output
    )
    form: dict[str, Any] = OpenAIModel(MODEL, api_key=KEY, **kwargs).request_params(request)[
        "response_format"
    ]
    return form


def last_user_text(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


# --------------------------------------------------------------------------------------------
# The parameter


def test_the_openai_model_and_ollama_declare_native_output() -> None:
    assert OpenAIModel.supports_native_output is True
    assert ollama("llama3.2").supports_native_output is True


def test_native_output_asks_for_the_strict_json_schema_of_the_type() -> None:
    assert response_format(native(Findings)) == {
        "type": "json_schema",
        "json_schema": {"name": "Findings", "schema": FINDINGS_STRICT, "strict": True},
    }


def test_the_agents_own_schema_is_left_as_it_was() -> None:
    output = native(Findings)
    before = json.dumps(output.schema)
    response_format(output)
    assert json.dumps(output.schema) == before
    assert "additionalProperties" not in output.schema  # the tool-mode schema is pydantic's


def test_a_request_without_native_output_sends_no_response_format() -> None:
    agent = Agent("a", "x", output_type=Findings)  # tool mode
    assert agent.output_spec is not None
    request = ModelRequest(
        "x", [Message.user("go")], [], 256, AgentInfo("a", "a", 0), output=agent.output_spec.format
    )
    assert "response_format" not in OpenAIModel(MODEL, api_key=KEY).request_params(request)


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("Findings", "Findings"),
        ("list[Claim]", "list_Claim"),
        ("Literal['a', 'b']", "Literal_a_b"),
        ("???", "output"),
        ("R" * 80, "R" * 64),
    ],
)
def test_the_format_name_is_one_the_api_takes(name: str, sent: str) -> None:
    assert response_format(native(Findings, name))["json_schema"]["name"] == sent


class Node(BaseModel):
    label: str
    parent: Node | None = None
    first: Annotated[Claim, Field(description="the first claim")]
    children: list[Node] = Field(default_factory=list, description="the node's children")


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Pet(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]


def walk(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from walk(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from walk(value)


def test_a_reference_with_a_description_is_inlined_and_a_recursive_one_stays_a_reference() -> None:
    form = response_format(native(Node))["json_schema"]
    assert form["strict"] is True
    first = form["schema"]["$defs"]["Node"]["properties"]["first"]
    assert "$ref" not in first  # a $ref must stand alone in strict mode: Claim inlined
    assert first["description"] == "the first claim" and first["additionalProperties"] is False
    for node in walk(form["schema"]):
        if "$ref" in node:
            assert list(node) == ["$ref"]
        assert "default" not in node


def test_a_self_reference_with_a_description_is_inlined_once_then_left_bare() -> None:
    chain = {"$ref": "#/$defs/Link", "description": "the next link"}
    link = {"type": "object", "properties": {"next": chain, "n": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"head": chain}, "$defs": {"Link": link}}
    form = response_format(OutputFormat("Chain", schema, native=True))["json_schema"]
    head = form["schema"]["properties"]["head"]
    assert head["description"] == "the next link" and head["required"] == ["next", "n"]
    assert head["properties"]["next"] == {"$ref": "#/$defs/Link"}
    assert form["schema"]["$defs"]["Link"]["properties"]["next"]["properties"]["next"] == {
        "$ref": "#/$defs/Link"
    }


def test_a_discriminated_union_becomes_any_of_without_the_discriminator() -> None:
    form = response_format(native(Pet))["json_schema"]
    assert form["strict"] is True
    pet = form["schema"]["properties"]["pet"]
    assert "oneOf" not in pet and "discriminator" not in pet
    assert [v["$ref"] for v in pet["anyOf"]] == ["#/$defs/Cat", "#/$defs/Dog"]


class Tagged(BaseModel):
    tags: dict[str, int]


class Loose(BaseModel):
    anything: Any


@pytest.mark.parametrize("output_type", [Tagged, Loose])
def test_a_schema_strict_mode_cannot_take_is_sent_without_strict(output_type: type) -> None:
    assert response_format(native(output_type))["json_schema"]["strict"] is False


class Open(BaseModel, extra="allow"):
    name: str


def test_a_model_that_allows_extra_keys_is_asked_for_its_own_fields_strictly() -> None:
    form = response_format(native(Open))["json_schema"]
    assert form["strict"] is True
    assert form["schema"]["additionalProperties"] is False
    assert form["schema"]["required"] == ["name"]


@pytest.mark.parametrize(
    ("output_type", "value"),
    [
        (Findings, FINDINGS),
        (Node, Node(label="a", first=Claim(text="t", sources=[]), children=[])),
        (Pet, Pet(pet=Dog(kind="dog", good=True))),
        (list[Claim], [Claim(text="t", sources=["d1"])]),
        (int, 3),
        (Literal["yes", "no"], "no"),
    ],
)
def test_the_strict_schema_accepts_every_whole_value_of_the_type(
    output_type: Any, value: Any
) -> None:
    form = response_format(native(output_type))["json_schema"]
    instance = json.loads(TypeAdapter(output_type).dump_json(value))
    if native(output_type).wrapped:
        instance = {"result": instance}
    jsonschema.Draft202012Validator(form["schema"]).validate(instance)


# --------------------------------------------------------------------------------------------
# Over HTTP


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_native_typed_agent_asks_for_its_schema_and_ends_with_the_json_over_http(
    server: FakeChatServer, stream: bool
) -> None:
    server.push(
        tool_calls(("search", {"query": "trio"})),
        text(FINDINGS.model_dump_json()),
    )
    agent = Agent(
        "researcher",
        "Research, then answer.",
        model=model_for(server, stream=stream),
        tools=[search],
        output_type=Findings,
        output_mode="native",
    )
    result = await run(agent, "How does trio order tasks?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    assert len(server.bodies) == 2
    for body in server.bodies:
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Findings", "schema": FINDINGS_STRICT, "strict": True},
        }
        assert body.get("stream", False) is stream
        assert [t["function"]["name"] for t in body["tools"]] == ["search"]
    check_transcript(result.messages)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_server_that_ignores_the_format_gets_the_problems_back_and_is_asked_again(
    server: FakeChatServer, stream: bool
) -> None:
    server.push(
        text("Trio orders tasks with nurseries."),  # as a server ignoring response_format may
        text(json.dumps({"summary": "s", "claims": [{"text": "t"}]})),
        text(FINDINGS.model_dump_json()),
    )
    agent = Agent(
        "researcher",
        "Answer.",
        model=model_for(server, stream=stream),
        output_type=Findings,
        output_mode="native",
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    bodies = server.bodies
    assert len(bodies) == 3
    assert "not JSON" in last_user_text(bodies[1])
    assert "claims.0.sources: Field required" in last_user_text(bodies[2])
    check_transcript(result.messages)


async def test_a_server_that_refuses_json_schema_is_asked_for_json_object_with_the_schema(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeChatServer(json_schema_format=False) as server:  # llama-cpp-python's server
        server.push(
            tool_calls(("search", {"query": "trio"})),
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
        with caplog.at_level("INFO", logger="orchestrator.models.openai"):
            result = await run(agent, "go")
    assert not server.errors, server.errors
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    assert result.usage.requests == 2  # the refused request is not an answer
    forms = [b["response_format"] for b in server.bodies]
    assert [f["type"] for f in forms] == ["json_schema", "json_object", "json_object"]
    assert forms[1] == forms[2] == {"type": "json_object", "schema": FINDINGS_STRICT}
    assert [r.reply for r in server.requests] == ["Error 500", "Completion", "Completion"]
    (said,) = [r.getMessage() for r in caplog.records if "json_object" in r.getMessage()]
    assert "does not take response_format json_schema" in said


async def test_an_openai_refusal_of_the_schema_itself_is_not_taken_for_a_server_quirk(
    server: FakeChatServer,
) -> None:
    server.push(
        Error(
            400,
            "Invalid schema for response_format 'Findings': In context=(), 'required' is "
            "required to be supplied and to be an array including every key in properties.",
        )
    )
    agent = Agent(
        "r", "Answer.", model=model_for(server), output_type=Findings, output_mode="native"
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.ERROR
    assert "Invalid schema for response_format" in (result.error or "")
    assert len(server.bodies) == 1


async def test_a_refusal_in_native_mode_ends_the_agent_refusal_over_http(
    server: FakeChatServer,
) -> None:
    server.push(Completion(refusal="I can't help with that."))
    agent = Agent(
        "r", "Answer.", model=model_for(server), output_type=Findings, output_mode="native"
    )
    result = await run(agent, "go")
    assert result.status is RunStatus.REFUSAL
    assert len(server.bodies) == 1


async def test_a_native_agent_that_never_answers_valid_json_ends_invalid_output_over_http(
    server: FakeChatServer,
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
    assert len(server.bodies) == 2
    assert "no JSON here" in (result.error or "")


async def test_a_type_strict_mode_cannot_take_still_completes_over_http(
    server: FakeChatServer,
) -> None:
    server.push(text(json.dumps({"tags": {"a": 1}})))
    agent = Agent("r", "Answer.", model=model_for(server), output_type=Tagged, output_mode="native")
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == Tagged(tags={"a": 1})
    assert server.bodies[0]["response_format"]["json_schema"]["strict"] is False


async def test_a_native_child_returns_its_json_to_the_parent_over_http(
    server: FakeChatServer,
) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"].startswith("Research"):
            return text(FINDINGS.model_dump_json())
        if sum(1 for m in body["messages"] if m["role"] == "assistant") == 0:
            return tool_calls(("spawn_subagent", {"agent": "researcher", "task": "trio"}))
        return text("Trio orders tasks with nurseries.")

    server.responder = answer
    researcher = Agent(
        "researcher", "Research the topic.", output_type=Findings, output_mode="native"
    )
    lead = Agent("lead", "Lead the research.", model=model_for(server), subagents=[researcher])
    result = await run(lead, "How does trio order tasks?")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.children[0].output == FINDINGS
    assert [("response_format" in b) for b in server.bodies] == [False, True, False]
    answered = server.bodies[-1]["messages"][-1]
    assert answered["role"] == "tool"
    assert json.loads(answered["content"]) == FINDINGS.model_dump()


async def test_a_tool_mode_typed_agent_completes_with_final_result_over_http(
    server: FakeChatServer,
) -> None:
    server.push(tool_calls(("final_result", FINDINGS.model_dump())))
    agent = Agent("researcher", "Answer.", model=model_for(server), output_type=Findings)
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == FINDINGS
    body = server.bodies[0]
    assert "response_format" not in body
    (final,) = [t for t in body["tools"] if t["function"]["name"] == "final_result"]
    assert final["function"]["parameters"] == TypeAdapter(Findings).json_schema()
    check_transcript(result.messages)


def test_the_fake_server_refuses_a_strict_schema_strict_mode_cannot_take(
    server: FakeChatServer,
) -> None:
    with (
        openai.OpenAI(api_key=KEY, base_url=server.url, max_retries=0) as client,
        pytest.raises(openai.BadRequestError, match="additionalProperties"),
    ):
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "Findings",
                    "schema": Findings.model_json_schema(),
                    "strict": True,
                },
            },
        )
