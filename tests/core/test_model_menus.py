"""Models per spawn: an Agent's ``models=(...)`` menu, the ``model`` a parent's spawn_subagent
picks from it, the refusals, the result and spans naming the model, the fingerprint and the dry
run. Every model is a FunctionModel (scripted by agent and turn), so nothing depends on the
order trio runs siblings in."""

from __future__ import annotations

from typing import Any

import pytest
from support.trees import result_for, tool_results

from orchestrator import Agent, ConfigurationError, Limits, RunStatus, run
from orchestrator.models import FunctionModel, text, tool_call


def _answering(name: str, answer: str, price: float = 0.0) -> FunctionModel:
    """A model named ``name`` that answers every request with ``answer`` (and records whom)."""
    seen: list[str] = []

    def body(request: Any) -> Any:
        seen.append(request.agent.path)
        return text(answer)

    model = FunctionModel(body, name=name, prices=lambda u: price * u.billed_tokens)
    model.seen = seen  # type: ignore[attr-defined]
    return model


def _lead(calls: list[dict[str, Any]]) -> FunctionModel:
    """A lead that makes ``calls`` (spawn inputs) in its first turn, then ends."""

    def body(request: Any) -> Any:
        if tool_results(list(request.messages)):
            return text("done")
        return [tool_call("spawn_subagent", c, id=f"s{i}") for i, c in enumerate(calls)]

    return FunctionModel(body, name="lead-model")


async def test_a_spawn_runs_the_child_on_the_model_it_picked_from_the_menu() -> None:
    cheap, strong = _answering("cheap", "from cheap"), _answering("strong", "from strong")
    researcher = Agent("researcher", "R.", models=(cheap, strong))
    lead_model = _lead(
        [
            {"agent": "researcher", "task": "easy", "model": "function:cheap"},
            {"agent": "researcher", "task": "hard", "model": "function:strong"},
        ]
    )
    lead = Agent("lead", "L.", subagents=[researcher], model=lead_model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert result_for(result.messages, "s0").content == "from cheap"
    assert result_for(result.messages, "s1").content == "from strong"
    assert cheap.seen == ["lead/researcher#1"]  # type: ignore[attr-defined]
    assert strong.seen == ["lead/researcher#2"]  # type: ignore[attr-defined]
    assert [c.model for c in result.children] == ["function:cheap", "function:strong"]
    assert result.model == "function:lead-model"
    assert result.to_dict()["children"][1]["model"] == "function:strong"


async def test_a_spawn_without_a_model_runs_the_child_on_the_first_of_its_menu() -> None:
    cheap, strong = _answering("cheap", "from cheap"), _answering("strong", "from strong")
    researcher = Agent("researcher", "R.", models=(cheap, strong))
    lead = Agent(
        "lead", "L.", subagents=[researcher], model=_lead([{"agent": "researcher", "task": "t"}])
    )

    result = await run(lead, "q")

    assert result_for(result.messages, "s0").content == "from cheap"
    assert result.children[0].model == "function:cheap"
    assert strong.seen == []  # type: ignore[attr-defined]


async def test_a_model_outside_the_named_agents_menu_is_an_error_result_before_the_child_starts() -> (
    None
):
    cheap, strong = _answering("cheap", "c"), _answering("strong", "s")
    other = _answering("other", "o")
    researcher = Agent("researcher", "R.", models=(cheap,))
    writer = Agent("writer", "W.", models=(strong, other))
    plain = Agent("plain", "P.", model=other)
    lead_model = _lead(
        [
            {"agent": "researcher", "task": "t", "model": "function:strong"},  # writer's
            {"agent": "plain", "task": "t", "model": "function:other"},  # plain has no menu
            {"agent": "researcher", "task": "t"},
        ]
    )
    lead = Agent("lead", "L.", subagents=[researcher, writer, plain], model=lead_model)

    result = await run(lead, "q")

    refused = result_for(result.messages, "s0")
    assert refused.is_error
    assert "'researcher' cannot run on 'function:strong'" in refused.content
    assert "function:cheap" in refused.content
    no_menu = result_for(result.messages, "s1")
    assert no_menu.is_error and "has no menu of models" in no_menu.content
    assert strong.seen == [] and other.seen == []  # type: ignore[attr-defined]
    # the refused calls took no number: the one that started is researcher#1
    assert [c.path for c in result.children] == ["lead/researcher#1"]


async def test_spawn_tool_offers_the_union_of_the_menus_and_lists_each_agents_menu() -> None:
    seen: list[Any] = []

    def lead_body(request: Any) -> Any:
        seen.append(request)
        return text("no need")

    researcher = Agent("researcher", "R.", models=("offline", "anthropic:claude-haiku-5-5"))
    writer = Agent("writer", "W.", models=("anthropic:claude-haiku-5-5", "openai:gpt-4.1"))
    plain = Agent("plain", "P.")
    lead = Agent(
        "lead", "L.", subagents=[researcher, writer, plain], model=FunctionModel(lead_body)
    )

    await run(lead, "q")

    spec = next(t for t in seen[0].tools if t.name == "spawn_subagent")
    model = spec.input_schema["properties"]["model"]
    assert model["enum"] == ["offline", "anthropic:claude-haiku-5-5", "openai:gpt-4.1"]
    assert "model" not in spec.input_schema["required"]
    assert "- researcher: R. Models: offline, anthropic:claude-haiku-5-5 (default offline)." in (
        spec.description
    )
    assert "writer: W. Models: anthropic:claude-haiku-5-5, openai:gpt-4.1 (default" in (
        spec.description
    )
    assert "- plain: P.\n" in spec.description + "\n" and "plain: P. Models" not in spec.description


async def test_without_menus_the_spawn_tool_has_no_model_property_and_refuses_one() -> None:
    seen: list[Any] = []

    def lead_body(request: Any) -> Any:
        seen.append(request)
        if tool_results(list(request.messages)):
            return text("done")
        return tool_call(
            "spawn_subagent", {"agent": "plain", "task": "t", "model": "offline"}, id="s0"
        )

    lead = Agent("lead", "L.", subagents=[Agent("plain", "P.")], model=FunctionModel(lead_body))

    result = await run(lead, "q")

    spec = next(t for t in seen[0].tools if t.name == "spawn_subagent")
    assert set(spec.input_schema["properties"]) == {"agent", "task", "tools", "budget_tokens"}
    assert "model" not in spec.description
    assert result_for(result.messages, "s0").is_error
    assert result.children == []


def test_model_and_models_on_one_agent_are_exclusive() -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        Agent("r", "R.", model="offline", models=("offline",))
    with pytest.raises(ConfigurationError, match="twice"):
        Agent("r", "R.", models=("offline", "offline"))
    with pytest.raises(ConfigurationError, match="must be a list"):
        Agent("r", "R.", models="offline")  # type: ignore[arg-type]


def test_replace_with_a_model_drops_the_menu_and_with_a_menu_drops_the_model() -> None:
    menu = Agent("r", "R.", models=("offline", "anthropic:claude-haiku-5-5"))
    assert menu.model == "offline"  # the first is its default
    assert menu.replace(instructions="R2.").models == menu.models
    forced = menu.replace(model="openai:gpt-4.1")  # as --override-model does
    assert forced.models == () and forced.model == "openai:gpt-4.1"
    back = forced.replace(models=("offline",))
    assert back.models == ("offline",) and back.model == "offline"


def test_the_fingerprint_changes_with_the_menu_and_not_for_a_tree_without_one() -> None:
    from orchestrator.core.treeref import fingerprint

    a = Agent("r", "R.", models=("offline", "anthropic:claude-haiku-5-5"))
    b = Agent("r", "R.", models=("offline", "anthropic:claude-sonnet-5-5"))
    assert fingerprint(a)[0] != fingerprint(b)[0]
    assert "r.models" in fingerprint(a)[1]
    assert "r.models" not in fingerprint(Agent("r", "R.", model="offline"))[1]


async def test_a_native_output_agent_needs_every_model_of_its_menu_to_answer_natively() -> None:
    import pydantic

    class Answer(pydantic.BaseModel):
        value: int

    native = FunctionModel(lambda r: text("{}"), name="native")
    native.supports_native_output = True  # type: ignore[attr-defined]
    plain = FunctionModel(lambda r: text("{}"), name="plain")
    plain.supports_native_output = False  # type: ignore[misc]
    typed = Agent("typed", "T.", models=(native, plain), output_type=Answer, output_mode="native")
    lead = Agent("lead", "L.", subagents=[typed], model=native)

    with pytest.raises(ConfigurationError, match="'plain'"):
        await run(lead, "q")


def test_the_dry_run_prices_a_menu_agent_on_its_costliest_model() -> None:
    from orchestrator.cli.dryrun import worst_case

    cheap = FunctionModel(lambda r: text("x"), name="cheap", prices=lambda u: 0.0)
    dear = FunctionModel(lambda r: text("x"), name="dear", prices=lambda u: u.output_tokens * 1e-5)

    def tree(**researcher: Any) -> Agent:
        r = Agent("researcher", "R.", **researcher)
        return Agent("lead", "L.", subagents=[r], model=cheap, limits=Limits(max_children=2))

    on_menu = worst_case(tree(models=(cheap, dear)))
    on_dear = worst_case(tree(model=dear))
    on_cheap = worst_case(tree(model=cheap))

    assert on_menu["worst_case_output_cost_usd"] > 0
    assert on_menu["worst_case_output_cost_usd"] == on_dear["worst_case_output_cost_usd"]
    assert on_cheap["worst_case_output_cost_usd"] == 0


async def test_the_childs_agent_and_chat_spans_name_the_model_it_picked(
    orchestrator_spans: Any,
) -> None:
    cheap, strong = _answering("cheap", "c"), _answering("strong", "s")
    researcher = Agent("researcher", "R.", models=(cheap, strong))
    lead_model = _lead([{"agent": "researcher", "task": "t", "model": "function:strong"}])
    lead = Agent("lead", "L.", subagents=[researcher], model=lead_model)

    await run(lead, "q", tracer_provider=orchestrator_spans.tracer_provider)

    child = [
        s
        for s in orchestrator_spans.spans
        if (s.attributes or {}).get("orchestrator.agent.path") == "lead/researcher#1"
        and s.name.split(" ")[0] in ("invoke_agent", "chat")
    ]
    assert {s.name.split(" ")[0] for s in child} == {"invoke_agent", "chat"}
    assert {s.attributes["gen_ai.request.model"] for s in child} == {"strong"}
