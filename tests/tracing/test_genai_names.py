"""Every ``gen_ai.*`` attribute we write is one the OpenTelemetry GenAI conventions define (as
the installed ``opentelemetry-semantic-conventions`` lists them), and not one they withdrew
("Removed", "Replaced by ..."): names of our own go under ``orchestrator.*``. Checked twice: in
the source (every ``gen_ai.`` literal, so a path no test runs is covered too) and on the spans
of a traced typed tree (issue 34's ``gen_ai.output.type`` among them), with content capture on.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from functools import cache
from pathlib import Path

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GenAiOperationNameValues,
    GenAiOutputTypeValues,
)
from pydantic import BaseModel

import orchestrator
from orchestrator import Agent, Limits, RunStatus, run, tool
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.testing import final, recording_spans
from orchestrator.tracing.content import CONTENT_CAPTURE_ENV

PACKAGE = Path(orchestrator.__file__).parent
NAME = re.compile(r"gen_ai\.[a-z0-9_.]+")


@cache
def conventions() -> tuple[frozenset[str], frozenset[str]]:
    """(defined, withdrawn): the ``gen_ai.*`` names the installed conventions list, and those
    of them documented as removed or replaced (the rest are current, wherever they moved)."""
    module = ast.parse(inspect.getsource(gen_ai_attributes))
    defined, withdrawn = set(), set()
    for node, after in zip(module.body, [*module.body[1:], None], strict=True):
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        value = node.value
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        if not value.value.startswith("gen_ai."):
            continue
        defined.add(value.value)
        doc = (
            after.value.value
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            else ""
        )
        if re.match(r"\s*Deprecated: (Removed|Replaced by)", str(doc)):
            withdrawn.add(value.value)
    assert {"gen_ai.output.type", "gen_ai.operation.name"} <= defined  # the parse found them
    assert {"gen_ai.system", "gen_ai.usage.prompt_tokens"} <= withdrawn
    return frozenset(defined), frozenset(withdrawn)


def problem(name: str) -> str | None:
    defined, withdrawn = conventions()
    if name.endswith("."):  # a prefix names are built from (f"gen_ai.usage.{kind}")
        return None if any(d.startswith(name) for d in defined - withdrawn) else "no such prefix"
    if name in withdrawn:
        return "withdrawn by the conventions"
    if name not in defined:
        return "not defined by the conventions"
    return None


def test_every_gen_ai_name_in_the_source_is_one_the_conventions_define() -> None:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        if "gen_ai." not in source:  # most modules: no need to parse them
            continue
        for node in ast.walk(ast.parse(source, str(path))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if NAME.fullmatch(node.value) or (
                node.value.startswith("gen_ai.") and node.value.endswith(".")
            ):
                where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
                found.setdefault(node.value, []).append(where)
    assert "gen_ai.output.type" in found  # the scan sees the names written
    wrong = {name: (problem(name), where) for name, where in found.items() if problem(name)}
    assert wrong == {}


class Finding(BaseModel):
    topic: str
    sources: list[str]


class Report(BaseModel):
    title: str
    findings: int


@tool
def search(query: str) -> str:
    """Search.

    Args:
        query: what to look for
    """
    return f"doc-1 about {query}"


def answer(request: ModelRequest) -> object:
    """The lead spawns a typed researcher and a text helper, then reports; the researcher
    searches, gives an answer missing a field once, then a good one."""
    messages = request.messages
    name = request.agent.name
    if name == "lead":
        if len(messages) == 1:
            return [
                tool_call("spawn_subagent", {"agent": "researcher", "task": "trio"}),
                tool_call("spawn_subagent", {"agent": "helper", "task": "say hi"}),
            ]
        return final(Report(title="trio", findings=1))
    if name == "helper":
        return text("hi")
    if len(messages) == 1:
        return tool_call("search", {"query": "trio"})
    if len(messages) == 3:
        return tool_call("final_result", {"topic": "trio"})
    return final(Finding(topic="trio", sources=["doc-1"]))


RESEARCHER = Agent(
    "researcher", "Research.", description="researches", tools=[search], output_type=Finding
)
HELPER = Agent("helper", "Help.", description="helps")
LEAD = Agent("lead", "Lead.", subagents=[RESEARCHER, HELPER], output_type=Report)


async def test_a_traced_typed_trees_gen_ai_attributes_are_all_defined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CONTENT_CAPTURE_ENV, "true")
    with recording_spans() as recorder:
        result = await run(
            LEAD, "go", model=FunctionModel(answer), tracer_provider=recorder.tracer_provider
        )
    assert result.status is RunStatus.COMPLETED, result.error
    spans = recorder.spans
    seen: set[str] = set()
    for s in spans:
        named = [*(s.attributes or {}), *(k for e in s.events for k in (e.attributes or {}))]
        seen.update(k for k in named if k.startswith("gen_ai."))
    assert {"gen_ai.output.type", "gen_ai.input.messages", "gen_ai.tool.call.result"} <= seen
    assert {k: problem(k) for k in seen if problem(k)} == {}
    operations = {s.attributes.get("gen_ai.operation.name") for s in spans} - {None}
    assert operations <= {v.value for v in GenAiOperationNameValues}
    # typed agents' model calls say their answer is JSON; the text agent's say nothing
    by_id = {s.context.span_id: s for s in spans}
    output_types: dict[str, set[object]] = {}
    for s in spans:
        if s.attributes.get("gen_ai.operation.name") == "chat":
            turn = by_id[s.parent.span_id]  # "turn {agent}"
            agent = turn.name.split(" ", 1)[1]
            output_types.setdefault(agent, set()).add(s.attributes.get("gen_ai.output.type"))
    assert output_types == {"lead": {"json"}, "researcher": {"json"}, "helper": {None}}
    assert GenAiOutputTypeValues.JSON.value == "json"
    [root] = [s for s in spans if s.name == "invoke_agent lead"]
    assert json.loads(root.attributes["output.value"]) == {"title": "trio", "findings": 1}
    assert root.attributes["output.mime_type"] == "application/json"
    events = [e for s in spans for e in s.events if e.name == "orchestrator.output.rejected"]
    assert len(events) == 1 and not any(k.startswith("gen_ai.") for k in events[0].attributes)


async def test_an_agent_ending_invalid_output_says_so_on_its_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CONTENT_CAPTURE_ENV, "true")
    stubborn = Agent("stubborn", "Answer.", output_type=Report, limits=Limits(output_retries=0))
    with recording_spans() as recorder:
        result = await run(
            stubborn,
            "go",
            model=FunctionModel(lambda r: tool_call("final_result", {"title": "no count"})),
            tracer_provider=recorder.tracer_provider,
        )
    assert result.status is RunStatus.INVALID_OUTPUT
    [agent] = [s for s in recorder.spans if s.name == "invoke_agent stubborn"]
    assert agent.attributes["orchestrator.outcome"] == "invalid_output"
    assert agent.attributes["error.type"] == "invalid_output"
    assert agent.status.status_code.name == "ERROR"
    # no answer was given: nothing recorded as one (not "null")
    assert agent.attributes["output.value"] == ""
    assert agent.attributes["output.mime_type"] == "text/plain"
