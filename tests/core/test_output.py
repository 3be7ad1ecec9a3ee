"""Typed results: agents and children that answer with checked data (core/output.py)."""

from __future__ import annotations

import dataclasses
import json
from typing import Literal

import pytest
from pydantic import BaseModel
from support.transcripts import check_transcript as valid_transcript
from typing_extensions import TypedDict

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    OutputContext,
    OutputRejected,
    Policy,
    RunStatus,
    run,
    tool,
)
from orchestrator.core.output import FINAL_RESULT
from orchestrator.models import FunctionModel, ModelRequest, ScriptedModel, text, tool_call
from orchestrator.testing import final, recording_spans


class Claim(BaseModel):
    text: str
    sources: list[str]


class Findings(BaseModel):
    summary: str
    claims: list[Claim]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


FINDINGS = Findings(summary="s", claims=[Claim(text="t", sources=["doc1"])])

side_effects: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note down (a side effect the tests count)."""
    side_effects.append(text)
    return "noted"


@pytest.fixture(autouse=True)
def _clear_side_effects() -> None:
    side_effects.clear()


def tools_seen(requests: list[ModelRequest]) -> dict[str, dict[str, object]]:
    return {t.name: dict(t.input_schema) for t in requests[0].tools}


async def test_an_agent_with_a_model_output_type_returns_the_validated_instance():
    agent = Agent("r", "research", output_type=Findings)
    result = await run(agent, "go", model=ScriptedModel([final(FINDINGS)]))
    assert result.status is RunStatus.COMPLETED
    assert isinstance(result.output, Findings)
    assert result.output == FINDINGS
    assert result.output_json == '{"summary":"s","claims":[{"text":"t","sources":["doc1"]}]}'
    assert result.to_dict()["output"] == {
        "summary": "s",
        "claims": [{"text": "t", "sources": ["doc1"]}],
    }
    valid_transcript(result.messages)


@pytest.mark.parametrize(
    ("output_type", "value", "wrapped"),
    [
        (Point, Point(1, 2), False),
        (Movie, Movie(title="Up", year=2009), False),
        (list[Claim], [Claim(text="a", sources=[])], True),
        (int, 42, True),
        (Literal["yes", "no"], "no", True),
        (Findings | Point, Point(3, 4), True),
    ],
)
async def test_any_type_pydantic_validates_is_an_output_type_and_non_objects_are_wrapped(
    output_type: object, value: object, wrapped: bool
):
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest):
        requests.append(request)
        return final(value)

    agent = Agent("a", "answer", output_type=output_type)
    result = await run(agent, "go", model=FunctionModel(answer))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == value
    schema = tools_seen(requests)[FINAL_RESULT]
    assert schema["type"] == "object"
    assert (schema.get("required") == ["result"]) is wrapped


class Node(BaseModel):
    name: str
    children: list[Node] = []


async def test_a_recursive_model_is_an_object_answer_not_a_wrapped_one():
    requests: list[ModelRequest] = []
    tree = Node(name="root", children=[Node(name="leaf")])

    def answer(request: ModelRequest):
        requests.append(request)
        return final(tree)

    result = await run(Agent("a", "x", output_type=Node), "go", model=FunctionModel(answer))
    assert result.output == tree
    schema = tools_seen(requests)[FINAL_RESULT]
    assert schema["type"] == "object" and "name" in schema["properties"]  # type: ignore[operator]
    assert requests[0].output is not None and not requests[0].output.wrapped


async def test_a_text_agent_is_unchanged_and_has_no_final_result_tool():
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest):
        requests.append(request)
        return text("plain")

    result = await run(Agent("a", "x"), "go", model=FunctionModel(answer))
    assert result.output == "plain"
    assert result.output_json is None
    assert requests[0].output is None
    assert FINAL_RESULT not in tools_seen(requests)


async def test_invalid_output_is_sent_back_with_each_problems_field_path_and_the_agent_retries():
    bad = {"summary": "s", "claims": [{"text": "t"}]}  # a claim without sources
    model = ScriptedModel([tool_call(FINAL_RESULT, bad), final(FINDINGS)])
    result = await run(Agent("r", "x", output_type=Findings), "go", model=model)
    assert result.status is RunStatus.COMPLETED
    rejection = result.messages[2].content[0]
    assert rejection.is_error
    assert "claims.0.sources: Field required" in rejection.content
    valid_transcript(result.messages)


async def test_past_output_retries_the_agent_ends_invalid_output_with_its_last_output():
    bad = {"summary": "x" * 3000, "claims": "none"}
    model = ScriptedModel([tool_call(FINAL_RESULT, bad)] * 5)
    agent = Agent("r", "x", output_type=Findings, limits=Limits(output_retries=1))
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.INVALID_OUTPUT
    assert result.output is None
    assert result.turns == 2  # the first answer and one retry
    assert result.error is not None and "rejected 2 times" in result.error
    assert '"claims": "none"' not in result.error  # cut to 1,000 characters of the output
    assert len(result.error) < 1200
    valid_transcript(result.messages)


async def test_output_retries_zero_ends_the_agent_at_the_first_rejection():
    model = ScriptedModel([tool_call(FINAL_RESULT, {}), final(FINDINGS)])
    agent = Agent("r", "x", output_type=Findings, limits=Limits(output_retries=0))
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.INVALID_OUTPUT
    assert result.turns == 1


async def test_a_text_reply_is_not_an_answer_for_a_typed_agent_and_counts_as_a_retry():
    model = ScriptedModel(["here is my answer", final(FINDINGS)])
    result = await run(Agent("r", "x", output_type=Findings), "go", model=model)
    assert result.status is RunStatus.COMPLETED
    assert FINAL_RESULT in result.messages[2].content[0].text
    only_text = ScriptedModel(["a", "b", "c", "d"])
    result = await run(Agent("r", "x", output_type=Findings), "go", model=only_text)
    assert result.status is RunStatus.INVALID_OUTPUT


async def test_calls_beside_a_valid_final_result_are_answered_but_never_run():
    model = ScriptedModel([[tool_call("note", {"text": "late"}), final(FINDINGS)]])
    agent = Agent("r", "x", tools=[note], output_type=Findings)
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.COMPLETED
    assert side_effects == []
    results = result.messages[-1].content
    assert results[0].is_error and "not run: the agent gave its final result" in results[0].content
    assert not results[1].is_error
    valid_transcript(result.messages)


async def test_calls_beside_a_rejected_final_result_run_and_the_turn_is_no_failing_turn():
    turn = [tool_call("note", {"text": "one"}), tool_call(FINAL_RESULT, {"summary": 1})]
    model = ScriptedModel([turn, turn, final(FINDINGS)])
    agent = Agent(
        "r", "x", tools=[note], output_type=Findings, limits=Limits(max_consecutive_errors=1)
    )
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    assert side_effects == ["one", "one"]


async def test_a_final_result_on_the_last_turn_is_still_an_answer():
    model = ScriptedModel([final(FINDINGS)])
    agent = Agent("r", "x", output_type=Findings, limits=Limits(max_turns=1))
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.COMPLETED


async def test_an_invalid_answer_on_the_last_turn_ends_the_agent_at_max_turns():
    model = ScriptedModel([tool_call(FINAL_RESULT, {})])
    agent = Agent("r", "x", output_type=Findings, limits=Limits(max_turns=1))
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.MAX_TURNS
    valid_transcript(result.messages)


async def test_final_result_is_never_gated_by_a_policy():
    agent = Agent("r", "x", output_type=Findings, policy=Policy(default="deny"))
    result = await run(agent, "go", model=ScriptedModel([final(FINDINGS)]))
    assert result.status is RunStatus.COMPLETED


async def test_validators_see_the_agents_tool_results_and_may_reject_or_change_the_value():
    seen: list[OutputContext] = []

    async def sources_were_read(ctx: OutputContext, value: Findings) -> Findings:
        seen.append(ctx)
        read = {r.content for _, r in ctx.tool_results}
        for claim in value.claims:
            missing = [s for s in claim.sources if s not in read]
            if missing:
                raise OutputRejected(f"claim {claim.text!r} cites {missing}, which you never read")
        return value

    def shout(ctx: OutputContext, value: Findings) -> Findings:
        return value.model_copy(update={"summary": value.summary.upper()})

    @tool
    def read(doc: str) -> str:
        """Read a document."""
        return doc

    model = ScriptedModel(
        [
            tool_call("read", {"doc": "doc2"}),
            final(FINDINGS),  # cites doc1, never read
            tool_call("read", {"doc": "doc1"}),
            final(FINDINGS),
        ]
    )
    agent = Agent(
        "r",
        "x",
        tools=[read],
        output_type=Findings,
        output_validators=[sources_were_read, shout],
    )
    result = await run(agent, "go", model=model, deps={"k": 1})
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output.summary == "S"
    assert "which you never read" in result.messages[4].content[0].content
    assert seen[0].agent_path == "r" and seen[0].deps == {"k": 1}
    assert [call.name for call, _ in seen[-1].tool_results] == ["read", "read"]


async def test_a_validator_that_raises_anything_else_ends_the_agent_with_error_naming_it():
    calls = 0

    def buggy(ctx: OutputContext, value: Findings) -> Findings:
        nonlocal calls
        calls += 1
        raise KeyError("oops")

    agent = Agent("r", "x", output_type=Findings, output_validators=[buggy])
    result = await run(agent, "go", model=ScriptedModel([final(FINDINGS)] * 3))
    assert result.status is RunStatus.ERROR
    assert "buggy" in (result.error or "") and "KeyError" in (result.error or "")
    assert calls == 1  # a bug in the validator is not the model's fault: no retry
    valid_transcript(result.messages)


async def test_a_text_agents_validators_judge_its_final_text_and_may_reject_or_change_it():
    seen: list[OutputContext] = []

    def no_shouting(ctx: OutputContext, answer: str) -> str:
        seen.append(ctx)
        if answer.isupper():
            raise OutputRejected("do not shout")
        return answer

    def signed(ctx: OutputContext, answer: str) -> str:
        return answer + " (checked)"

    model = ScriptedModel([text("HELLO"), text("hello")])
    agent = Agent("a", "x", output_validators=[no_shouting, signed])
    result = await run(agent, "go", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "hello (checked)"
    assert result.output_json is None  # text stays text
    rejection = result.messages[2]
    assert rejection.role == "user" and "do not shout" in rejection.content[0].text
    assert "Answer again." in rejection.content[0].text
    assert [ctx.messages[-1].content[0].text for ctx in seen] == ["HELLO", "hello"]
    valid_transcript(result.messages)


async def test_a_text_answer_rejected_past_output_retries_ends_invalid_output():
    def never(ctx: OutputContext, answer: str) -> str:
        raise OutputRejected("no")

    agent = Agent("a", "x", limits=Limits(output_retries=1), output_validators=[never])
    result = await run(agent, "go", model=ScriptedModel([text("one"), text("two")]))
    assert result.status is RunStatus.INVALID_OUTPUT
    assert "rejected 2 times" in (result.error or "") and "two" in (result.error or "")


async def test_a_text_validator_that_returns_no_str_is_a_bug_that_ends_the_agent_with_error():
    def to_int(ctx: OutputContext, answer: str) -> int:
        return len(answer)

    agent = Agent("a", "x", output_validators=[to_int])
    result = await run(agent, "go", model=ScriptedModel([text("hello")] * 2))
    assert result.status is RunStatus.ERROR
    assert "to_int" in (result.error or "") and "not the answer's str" in (result.error or "")


async def test_a_text_childs_rejected_answer_is_asked_again_before_the_parent_reads_it():
    def cited(ctx: OutputContext, answer: str) -> str:
        if "[" not in answer:
            raise OutputRejected("cite a source in brackets")
        return answer

    child = Agent("child", "c", description="answers", output_validators=[cited])
    lead = Agent("lead", "l", subagents=[child])
    scripts = {
        "lead": [tool_call("spawn_subagent", {"agent": "child", "task": "t"}), text("done")],
        "child": [text("plain"), text("with [doc1]")],
    }
    model = ScriptedModel(scripts)
    result = await run(lead, "go", model=model)
    assert result.status is RunStatus.COMPLETED, result.error
    (kid,) = result.children
    assert kid.status is RunStatus.COMPLETED and kid.output == "with [doc1]"
    assert kid.turns == 2


async def test_a_typed_child_answers_its_parent_with_json_and_the_program_with_the_instance():
    seen: list[ModelRequest] = []
    researcher = Agent("researcher", "find", description="finds things", output_type=Findings)
    lead = Agent("lead", "lead", subagents=[researcher])

    def model(request: ModelRequest):
        if request.agent.name == "researcher":
            return final(FINDINGS)
        seen.append(request)
        if request.turn_index() == 0:
            return tool_call("spawn_subagent", {"agent": "researcher", "task": "t"})
        return text("done")

    result = await run(lead, "go", model=FunctionModel(model))
    assert result.status is RunStatus.COMPLETED
    child = result.children[0]
    assert isinstance(child.output, Findings) and child.output == FINDINGS
    spawn_result = seen[1].messages[-1].content[0]
    assert json.loads(spawn_result.content) == FINDINGS.model_dump()
    assert spawn_result.content == FINDINGS.model_dump_json()  # compact, in field order
    spawn_tool = next(t for t in seen[0].tools if t.name == "spawn_subagent")
    assert "Returns Findings {summary, claims} (as JSON)" in spawn_tool.description


async def test_a_child_that_ends_invalid_output_comes_back_as_an_error_envelope():
    seen: list[ModelRequest] = []
    researcher = Agent("researcher", "find", output_type=int, limits=Limits(output_retries=0))
    lead = Agent("lead", "lead", subagents=[researcher])

    def model(request: ModelRequest):
        if request.agent.name == "researcher":
            return tool_call(FINAL_RESULT, {"result": "many"})
        seen.append(request)
        if request.turn_index() == 0:
            return tool_call("spawn_subagent", {"agent": "researcher", "task": "t"})
        return text("done")

    result = await run(lead, "go", model=FunctionModel(model))
    assert result.children[0].status is RunStatus.INVALID_OUTPUT
    envelope = seen[1].messages[-1].content[0]
    assert envelope.is_error and "invalid_output" in envelope.content


async def test_native_mode_asks_for_the_schema_and_the_final_text_is_the_json():
    requests: list[ModelRequest] = []
    steps = ["not json at all", json.dumps({"x": 1}), final(Point(1, 2))]

    def answer(request: ModelRequest):
        requests.append(request)
        return steps[request.turn_index()]

    agent = Agent("p", "x", output_type=Point, output_mode="native")
    result = await run(agent, "go", model=FunctionModel(answer))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == Point(1, 2)
    assert requests[0].output is not None and requests[0].output.native
    assert FINAL_RESULT not in tools_seen(requests)
    assert "not JSON" in result.messages[2].content[0].text
    assert "y: Field required" in result.messages[4].content[0].text


async def test_native_mode_with_a_model_that_does_not_declare_it_is_refused_before_the_run():
    class PlainModel:
        name = "plain-1"
        provider = "plain"

        def cost(self, usage: object) -> float:
            return 0.0

        async def request(self, request: ModelRequest, ctx: object) -> object:
            raise AssertionError("never called")

    agent = Agent("p", "x", output_type=Point, output_mode="native")
    with pytest.raises(ConfigurationError, match=r"plain-1.*supports_native_output"):
        await run(agent, "go", model=PlainModel())  # type: ignore[arg-type]


def test_an_output_type_pydantic_cannot_describe_is_a_configuration_error_naming_it():
    class Opaque:
        pass

    with pytest.raises(ConfigurationError, match="output_type Opaque"):
        Agent("a", "x", output_type=Opaque)


def test_a_typed_agent_may_not_hold_a_tool_named_final_result():
    @tool
    def final_result(x: int) -> int:
        """Clash."""
        return x

    Agent("plain", "x", tools=[final_result])  # a text agent may
    with pytest.raises(ConfigurationError, match="final_result"):
        Agent("typed", "x", tools=[final_result], output_type=int)


def test_native_mode_needs_an_output_type_and_validators_must_be_functions():
    with pytest.raises(ConfigurationError, match="output_validators must be functions"):
        Agent("a", "x", output_validators=["not a function"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="output_mode"):
        Agent("a", "x", output_mode="native")
    with pytest.raises(ConfigurationError, match="output_mode"):
        Agent("a", "x", output_type=int, output_mode="prompted")  # type: ignore[arg-type]


def test_replace_keeps_the_output_type():
    agent = Agent("a", "x", output_type=Findings)
    assert agent.replace(instructions="y").output_type is Findings


async def test_traced_typed_chat_spans_say_json_and_a_rejection_is_an_event():
    model = ScriptedModel([tool_call(FINAL_RESULT, {}), final(FINDINGS)])
    with recording_spans() as recorder:
        result = await run(
            Agent("r", "x", output_type=Findings),
            "go",
            model=model,
            tracer_provider=recorder.tracer_provider,
        )
    assert result.ok
    spans = recorder.spans
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert chats and all(s.attributes.get("gen_ai.output.type") == "json" for s in chats)
    events = [e for s in spans for e in s.events if e.name == "orchestrator.output.rejected"]
    assert len(events) == 1


async def test_a_rejected_text_answer_is_a_span_event_and_an_async_validator_may_judge_it():
    async def polite(ctx: OutputContext, answer: str) -> str:
        if "please" not in answer:
            raise OutputRejected("say please")
        return answer

    model = ScriptedModel([text("give"), text("give, please")])
    with recording_spans() as recorder:
        result = await run(
            Agent("a", "x", output_validators=[polite]),
            "go",
            model=model,
            tracer_provider=recorder.tracer_provider,
        )
    assert result.status is RunStatus.COMPLETED and result.output == "give, please"
    events = [
        e for s in recorder.spans for e in s.events if e.name == "orchestrator.output.rejected"
    ]
    assert len(events) == 1
    assert events[0].attributes["orchestrator.output.rejections"] == 1
    chats = [s for s in recorder.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert chats and all(s.attributes.get("gen_ai.output.type") != "json" for s in chats)


async def test_a_text_child_past_its_output_retries_reaches_its_parent_as_an_error_envelope():
    def never(ctx: OutputContext, answer: str) -> str:
        raise OutputRejected("not good enough")

    child = Agent(
        "child",
        "c",
        description="answers",
        limits=Limits(output_retries=0),
        output_validators=[never],
    )
    lead = Agent("lead", "l", subagents=[child])
    scripts = {
        "lead": [tool_call("spawn_subagent", {"agent": "child", "task": "t"}), text("done")],
        "child": [text("my answer")],
    }
    result = await run(lead, "go", model=ScriptedModel(scripts))
    assert result.status is RunStatus.COMPLETED, result.error
    (kid,) = result.children
    assert kid.status is RunStatus.INVALID_OUTPUT and kid.output == ""  # as any failed text agent
    assert "my answer" in (kid.error or "")
    (spawned,) = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert spawned.is_error and "invalid_output" in spawned.content
    valid_transcript(result.messages)
