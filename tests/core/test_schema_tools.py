"""Tool.from_schema: tools described by a JSON schema, their arguments checked before they run."""

from __future__ import annotations

import pytest
import trio

from orchestrator import Agent, ConfigurationError, Policy, RunStatus, Tool, ToolContext, run
from orchestrator.core.schema import compile_schema
from orchestrator.models import ScriptedModel, text, tool_call

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "unit": {"enum": ["C", "F"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def results_of(result):
    return [b for m in result.messages for b in m.content if b.type == "tool_result"]


def problems(schema, value):
    found: list = []
    compile_schema(schema)(value, (), found)
    return found


async def test_a_schema_tool_gets_its_checked_arguments_as_one_dict():
    seen = []

    def forecast(arguments):
        seen.append(arguments)
        return f"sunny in {arguments['city']}"

    weather = Tool.from_schema("weather", "The forecast.", WEATHER_SCHEMA, forecast)
    model = ScriptedModel([[tool_call("weather", {"city": "Oslo", "days": 2})], text("done")])
    result = await run(Agent("a", "x", tools=[weather]), "go", model=model)

    assert result.status is RunStatus.COMPLETED
    assert seen == [{"city": "Oslo", "days": 2}]
    [res] = results_of(result)
    assert not res.is_error and res.content == "sunny in Oslo"


async def test_the_model_sees_the_schema_as_given():
    weather = Tool.from_schema("weather", "The forecast.", WEATHER_SCHEMA, lambda a: "x")
    assert weather.spec.input_schema == WEATHER_SCHEMA
    assert weather.spec.input_schema is not WEATHER_SCHEMA  # a copy: the caller's may change
    assert weather.spec.description == "The forecast."


async def test_arguments_that_fail_the_schema_are_an_error_result_and_the_handler_never_runs():
    calls = []
    weather = Tool.from_schema("weather", "d", WEATHER_SCHEMA, lambda a: calls.append(a) or "ok")
    bad = {"unit": "K", "days": 9, "extra": 1}
    model = ScriptedModel([[tool_call("weather", bad)], text("done")])
    result = await run(Agent("a", "x", tools=[weather]), "go", model=model)

    [res] = results_of(result)
    assert res.is_error
    assert calls == []
    for words in (
        "city",
        "required",
        "unit",
        "'K'",
        "days",
        "maximum",
        "extra",
        "no such argument",
    ):
        assert words in res.content
    assert result.status is RunStatus.COMPLETED  # the model could try again


async def test_an_async_handler_with_context_runs_under_the_tool_timeout_and_policy():
    got = []

    async def handler(ctx, arguments):
        await trio.sleep(0)
        got.append((ctx.agent_name, ctx.tool_call_id, arguments))
        return "ok"

    t = Tool.from_schema("look", "d", {"type": "object"}, handler, takes_context=True)
    assert isinstance(t, Tool) and t.takes_context
    assert isinstance(got, list)
    model = ScriptedModel([[tool_call("look", {"any": [1, 2]}, id="c1")], text("done")])
    result = await run(Agent("a", "x", tools=[t]), "go", model=model)
    assert got == [("a", "c1", {"any": [1, 2]})]
    assert results_of(result)[0].content == "ok"

    refused = await run(
        Agent("a", "x", tools=[t], policy=Policy(rules={"look": "deny"})), "go", model=model
    )
    assert results_of(refused)[0].is_error
    assert len(got) == 1
    assert ToolContext  # the context type the handler receives


async def test_an_idempotent_schema_tool_is_retried_after_an_exception():
    attempts = []

    def flaky(arguments):
        attempts.append(arguments)
        if len(attempts) < 2:
            raise RuntimeError("transient")
        return "ok"

    t = Tool.from_schema("flaky", "d", {"type": "object"}, flaky, idempotent=True)
    model = ScriptedModel([[tool_call("flaky", {})], text("done")])
    result = await run(Agent("a", "x", tools=[t]), "go", model=model)
    assert len(attempts) == 2
    assert results_of(result)[0].content == "ok"


@pytest.mark.parametrize(
    "name, schema, why",
    [
        ("bad name!", {"type": "object"}, "letters, digits"),
        ("spawn_subagent", {"type": "object"}, "reserved"),
        ("t", {"type": "string"}, "describe an object"),
        ("t", ["not", "a", "schema"], "JSON schema object"),
        ("t", {"type": "object", "properties": {"a": {"type": "strnig"}}}, "unknown type"),
        (
            "t",
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            "points nowhere",
        ),
        ("t", {"type": "object", "properties": {"a": {"pattern": "("}}}, "pattern"),
    ],
)
def test_a_schema_or_name_the_runtime_cannot_use_is_refused_when_the_tool_is_built(
    name, schema, why
):
    with pytest.raises(ConfigurationError, match=why):
        Tool.from_schema(name, "d", schema, lambda a: "x")


def test_types_follow_json_not_python():
    assert problems({"type": "integer"}, 3.0) == []
    assert problems({"type": "integer"}, True)  # a bool is not a number in JSON
    assert problems({"type": "number"}, False)
    assert problems({"type": ["string", "null"]}, None) == []
    assert problems({"enum": [1]}, True)  # 1 and true differ in JSON
    assert problems({"const": {"a": [1]}}, {"a": [1]}) == []


def test_nested_arrays_refs_and_combinators_are_checked_with_their_paths():
    schema = {
        "type": "object",
        "$defs": {
            "point": {"type": "object", "required": ["x"], "properties": {"x": {"type": "number"}}}
        },
        "properties": {
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3},
            "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "mode": {"oneOf": [{"const": "a"}, {"const": "b"}]},
            "tags": {"type": "array", "uniqueItems": True},
            "name": {"not": {"const": "root"}},
        },
    }
    found = problems(
        schema,
        {
            "points": [{"x": 1}, {"x": "far"}, {}],
            "id": [1],
            "mode": "c",
            "tags": [1, 1],
            "name": "root",
        },
    )
    where = [path for path, _ in found]
    assert ("points", 1, "x") in where and ("points", 2, "x") in where
    assert ("id",) in where and ("mode",) in where and ("tags",) in where and ("name",) in where
    assert problems(schema, {"points": [{"x": 1}], "id": 3, "mode": "a", "tags": [1, 2]}) == []


def test_a_recursive_schema_compiles_and_checks_every_level():
    tree = {
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#"}},
        },
    }
    assert problems(tree, {"value": 1, "children": [{"value": 2, "children": []}]}) == []
    [(path, _)] = problems(tree, {"value": 1, "children": [{"value": "two"}]})
    assert path == ("children", 0, "value")
