"""Tool.from_schema: tools described by a JSON schema, their arguments checked before they run."""

from __future__ import annotations

import sys

import pytest
import trio

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    Policy,
    RunStatus,
    Tool,
    ToolContext,
    open_run,
    run,
    tool,
)
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
        await trio.lowlevel.checkpoint()
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


# -- nothing a schema says can crash or hang a run (issue 39, part 1) -----------------------


async def run_calls(schema, calls):
    paid = []
    pay = Tool.from_schema("pay", "Pay.", schema, lambda a: paid.append(a) or "paid")
    model = ScriptedModel([*[[tool_call("pay", c)] for c in calls], text("done")])
    result = await run(Agent("a", "x", tools=[pay]), "go", model=model)
    return result, paid


CYCLE = {
    "type": "object",
    "properties": {"who": {"type": "string"}, "memo": {"$ref": "#/$defs/a"}},
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
}


def test_a_ref_cycle_that_never_reaches_a_value_is_refused_when_the_tool_is_built():
    with pytest.raises(
        ConfigurationError, match=r"\$ref cycle .*#/\$defs/a -> #/\$defs/b -> #/\$defs/a"
    ):
        Tool.from_schema("pay", "Pay.", CYCLE, lambda a: "paid")


async def test_a_ref_cycle_through_the_value_s_parts_is_a_recursive_schema_and_checks():
    linked = {
        "type": "object",
        "properties": {"next": {"$ref": "#/$defs/node"}},
        "$defs": {"node": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}},
    }
    deep = None
    for _ in range(60):
        deep = {"next": deep}
    result, paid = await run_calls(linked, [deep, {"next": {"next": 3}}])
    assert paid == [deep]
    second = results_of(result)[1]
    assert second.is_error and "next: " in second.content and "anyOf" in second.content


async def test_multiple_of_never_overflows_and_judges_decimals_as_written():
    schema = {"type": "object", "properties": {"n": {"multipleOf": 0.123456789}}}
    result, paid = await run_calls(schema, [{"n": 1e308}, {"n": 0.370370367}])
    assert result.status is RunStatus.COMPLETED  # no OverflowError out of run()
    first = results_of(result)[0]
    assert first.is_error and "multipleOf" in first.content
    assert paid == [{"n": 0.370370367}]  # three steps, as written
    assert problems({"multipleOf": 0.0001}, 0.0075) == []  # 75 steps, as the decimals say
    assert problems({"multipleOf": 0.0001}, 0.00751)
    assert problems({"multipleOf": 2}, 1e308) == []  # an integral float is a multiple of 2
    assert problems({"multipleOf": 1.5}, float("inf"))


def test_references_that_multiply_one_value_s_checks_are_refused_but_sharing_is_not():
    def doubling(levels):
        defs = {f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}] * 2} for i in range(levels)}
        defs[f"l{levels}"] = {"type": "string"}
        return {"type": "object", "properties": {"x": {"$ref": "#/$defs/l0"}}, "$defs": defs}

    with pytest.raises(ConfigurationError, match="more than 10,000 checks"):
        Tool.from_schema("t", "d", doubling(30), lambda a: "x")  # 2**30 checks of x
    shared = Tool.from_schema("t", "d", doubling(8), lambda a: "x")  # 256: a real schema's size
    assert shared.validate({"x": "s"}) == {"x": "s"}


async def test_a_check_that_fails_itself_refuses_the_call_and_the_run_goes_on():
    # a reference the fallback cannot resolve (it never fetches): only calls that reach it fail
    schema = {
        "type": "object",
        "properties": {"who": {"type": "string"}, "memo": {"$ref": "http://127.0.0.1:9/m.json"}},
    }
    result, paid = await run_calls(schema, [{"who": "alice", "memo": "x"}, {"who": "bob"}])
    assert result.status is RunStatus.COMPLETED
    first, second = results_of(result)
    assert first.is_error and "could not be checked" in first.content and "not run" in first.content
    assert not second.is_error
    assert paid == [{"who": "bob"}]


@pytest.mark.parametrize(
    "schema, why",
    [
        ({"type": "object", "properties": {"a": {"minLength": "3"}}}, "minLength"),
        ({"type": "object", "properties": {"a": {"minimum": "3"}}}, "minimum"),
        ({"type": "object", "properties": {"a": {"multipleOf": 0}}}, "multipleOf"),
        ({"type": "object", "required": "abc"}, "required"),
        ({"type": "object", "properties": {"a": {"type": [{"x": 1}]}}}, "unknown type"),
        ({"type": "object", "properties": {"a": {"enum": 3}}}, "enum"),
        ({"type": "object", "patternProperties": {"(": {}}}, "pattern"),
        ({"type": "object", "properties": {"a": {"$ref": 7}}}, r"\$ref"),
    ],
)
def test_a_keyword_with_a_value_of_the_wrong_kind_is_refused_when_the_tool_is_built(schema, why):
    with pytest.raises(ConfigurationError, match=why):
        Tool.from_schema("t", "d", schema, lambda a: "x")


def test_a_schema_nested_past_the_interpreter_s_depth_is_refused_not_a_crash():
    schema: dict = {"type": "string"}
    for _ in range(5_000):
        schema = {"not": {"not": schema}}
    with pytest.raises(ConfigurationError, match="nested too deeply"):
        Tool.from_schema("t", "d", {"type": "object", "properties": {"a": schema}}, lambda a: 1)


# -- schemas checked right (part 2) ----------------------------------------------------------


async def test_pattern_properties_admit_what_they_match_beside_additional_properties_false():
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    result, paid = await run_calls(schema, [{"id": 1, "x-tag": "a"}, {"id": 1, "x-tag": 2, "y": 1}])
    first, second = results_of(result)
    assert not first.is_error and paid == [{"id": 1, "x-tag": "a"}]
    assert second.is_error and "x-tag" in second.content and "y: " in second.content


def test_the_newer_keywords_are_enforced():
    assert problems({"propertyNames": {"maxLength": 3}}, {"long": 1})
    assert problems({"minProperties": 2}, {"a": 1})
    assert problems({"dependentRequired": {"card": ["cvv"]}}, {"card": 1})
    assert problems({"dependentRequired": {"card": ["cvv"]}}, {"card": 1, "cvv": 2}) == []
    assert problems({"contains": {"type": "string"}, "maxContains": 1}, ["a", "b"])
    assert problems({"contains": {"type": "string"}}, [1, "a"]) == []
    schema = {"if": {"required": ["card"]}, "then": {"required": ["cvv"]}}
    assert problems(schema, {"card": 1}) and problems(schema, {"cash": 1}) == []


def test_a_schema_the_built_in_checker_does_not_compile_is_checked_by_jsonschema():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "unevaluatedProperties": False,
    }
    t = Tool.from_schema("t", "d", schema, lambda a: "x")
    assert t.validate({"a": "s"}) == {"a": "s"}
    with pytest.raises(Exception, match="Unevaluated properties"):
        t.validate({"a": "s", "b": 1})


def test_without_jsonschema_such_a_schema_is_refused_naming_the_keyword_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as if it were not installed
    schema = {"type": "object", "properties": {"a": {"$anchor": "x"}}}
    with pytest.raises(ConfigurationError, match=r"\$anchor.*pip install 'orchestrator\[mcp\]'"):
        Tool.from_schema("t", "d", schema, lambda a: "x")
    Tool.from_schema("t", "d", WEATHER_SCHEMA, lambda a: "x")  # the built-in checker's: fine


async def test_an_argument_error_names_the_problem_and_not_a_huge_schema():
    cities = [f"city-{i:05d}" for i in range(20_000)]
    schema = {"type": "object", "properties": {"city": {"enum": cities}}, "required": ["city"]}
    result, paid = await run_calls(schema, [{"city": "Atlantis"}, {"city": "city-00042"}])
    bad, good = results_of(result)
    assert bad.is_error and "'Atlantis' is not one of" in bad.content
    assert "19,990 more" in bad.content and len(bad.content) < 1_500
    assert not good.is_error and paid == [{"city": "city-00042"}]


async def test_an_argument_error_quotes_a_short_schema_to_fix_the_call_against():
    result, _ = await run_calls(WEATHER_SCHEMA, [{"city": 3}])
    [bad] = results_of(result)
    assert bad.is_error and '"additionalProperties":false' in bad.content


def test_patterns_that_backtrack_for_long_in_re_are_judged_in_linear_time():
    # re takes seconds on ^(a+)+$ with 25 a's and a '!' (doubling per a), and on \d+$ with
    # 20,000 digits and an 'x'; a model chooses the string
    assert problems({"pattern": "^(a+)+$"}, "a" * 5_000 + "!")
    assert problems({"pattern": "^(a+)+$"}, "a" * 5_000) == []
    assert problems({"pattern": "\\d+$"}, "1" * 20_000 + "x")
    assert problems({"pattern": "\\d+$"}, "x" + "1" * 20_000) == []
    assert problems({"patternProperties": {"^(a|aa)+$": False}}, {"a" * 3_000 + "b": 1}) == []


async def test_a_check_longer_than_the_tool_timeout_refuses_the_call_while_the_run_goes_on():
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^[a-z]*$"}}}
    check = Tool.from_schema("check", "d", schema, lambda a: "ran")
    assert check.checks_in_thread

    @tool
    async def other() -> str:
        """A sibling call."""
        return "sibling ran"

    huge = "a" * 3_000_000  # seconds of matching, linear, in a thread: the loop goes on
    model = ScriptedModel(
        [[tool_call("check", {"text": huge}), tool_call("other", {})], text("done")]
    )
    async with open_run(
        Agent("a", "x", tools=[check, other]), "go", model=model, limits=Limits(tool_timeout=0.2)
    ) as handle:
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED
    bad, sibling = results_of(result)
    assert bad.is_error and "could not be checked against its schema within 0.2s" in bad.content
    assert sibling.content == "sibling ran"
    assert handle.abandoned_threads == 1  # the match ends in its thread, in linear time


async def test_a_pattern_checked_in_a_thread_still_admits_and_refuses_as_it_should():
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["code"],
    }
    result, paid = await run_calls(schema, [{"code": "ABC"}, {"code": "abc"}])
    good, bad = results_of(result)
    assert not good.is_error and paid == [{"code": "ABC"}]
    assert bad.is_error and "does not match the pattern" in bad.content
    assert not Tool.from_schema("t", "d", WEATHER_SCHEMA, lambda a: 1).checks_in_thread
