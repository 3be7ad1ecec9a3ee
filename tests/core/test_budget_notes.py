"""Budgets the model can see: the note on spawn results (a text block of its own, only when a
budget was set explicitly), ``budget_tokens`` as a child's sub-budget, and a prefix (system
prompt and tools) byte-identical with and without budgets. FunctionModels decide by agent and
by what the transcript holds, so nothing depends on the order siblings run in."""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic
from support.trees import result_for, tool_results

from orchestrator import Agent, Limits, RunStatus, run, tool
from orchestrator.core.messages import (
    Message,
    ToolResultBlock,
    message_from_wire,
    message_to_wire,
)
from orchestrator.models import FunctionModel, final, response, text, tool_call


@tool
def jot(line: str) -> str:
    """Write a line down.

    Args:
        line: the line
    """
    return "noted"


def _tree(calls: list[dict[str, Any]], child: Agent | None = None, **lead: Any) -> Any:
    """A lead making ``calls`` (spawn inputs) in its first turn, and the requests it got."""
    seen: list[Any] = []

    def body(request: Any) -> Any:
        seen.append(request)
        if request.agent.depth:
            return response(text("an answer"), usage={"input_tokens": 100, "output_tokens": 20})
        if tool_results(list(request.messages)):
            return text("done")
        return [tool_call("spawn_subagent", c, id=f"s{i}") for i, c in enumerate(calls)]

    model = FunctionModel(body, prices=lambda u: u.billed_tokens * 1e-3)
    researcher = child or Agent("researcher", "R.")
    return Agent("lead", "L.", subagents=[researcher], model=model, **lead), seen


async def test_with_a_token_budget_a_spawn_result_ends_with_what_is_left_in_a_block_of_its_own() -> (
    None
):
    lead, _ = _tree([{"agent": "researcher", "task": "t"}])

    result = await run(lead, "q", limits=Limits(token_budget=500_000))

    block = result_for(result.messages, "s0")
    assert block.content == "an answer"  # the answer alone
    [note] = block.notes
    spent = result.children[0].usage.billed_tokens + result.own_usage.billed_tokens
    assert spent > 0
    # what the lead had left when the result came back (its own first call counted)
    assert note.startswith("[budget left: ") and note.endswith(" tokens]")
    left = int(note.removeprefix("[budget left: ").removesuffix(" tokens]").replace(",", ""))
    assert 500_000 - spent <= left < 500_000 - result.children[0].usage.billed_tokens
    wire = message_to_wire(next(m for m in result.messages if block in m.content))
    [part] = [p for p in wire["content"] if p["type"] == "tool_result"]
    assert part["content"] == [
        {"type": "text", "text": "an answer"},
        {"type": "text", "text": note},
    ]


async def test_a_cost_budget_shows_dollars_and_tokens() -> None:
    lead, _ = _tree([{"agent": "researcher", "task": "t"}])

    result = await run(lead, "q", limits=Limits(cost_budget_usd=5.0))

    [note] = result_for(result.messages, "s0").notes
    shown = re.fullmatch(r"\[budget left: [\d,]+ tokens, \$(\d+\.\d\d)\]", note)
    assert shown is not None, note
    spent = result.usage.cost_usd
    assert spent > 0.1
    assert float(shown.group(1)) <= round(5.0 - result.children[0].usage.cost_usd, 2)


async def test_a_definitions_own_budget_shows_the_lesser_of_it_and_the_runs() -> None:
    lead, _ = _tree([{"agent": "researcher", "task": "t"}], limits=Limits(token_budget=50_000))

    result = await run(lead, "q")

    [note] = result_for(result.messages, "s0").notes
    left = int(note.removeprefix("[budget left: ").removesuffix(" tokens]").replace(",", ""))
    assert left < 50_000


async def test_the_default_token_budget_alone_adds_no_note() -> None:
    lead, _ = _tree([{"agent": "researcher", "task": "t"}])

    result = await run(lead, "q")

    block = result_for(result.messages, "s0")
    assert block.content == "an answer" and block.notes == ()
    assert message_to_wire(Message("user", (block,)))["content"][0]["content"] == "an answer"


async def test_a_failed_childs_error_result_carries_the_note_too() -> None:
    child = Agent("researcher", "R.", limits=Limits(max_turns=1))

    def body(request: Any) -> Any:
        if request.agent.depth:
            return tool_call("spawn_subagent", {"agent": "x", "task": "t"})  # no such tool
        if tool_results(list(request.messages)):
            return text("done")
        return tool_call("spawn_subagent", {"agent": "researcher", "task": "t"}, id="s0")

    lead = Agent("lead", "L.", subagents=[child], model=FunctionModel(body))

    result = await run(lead, "q", limits=Limits(token_budget=400_000))

    block = result_for(result.messages, "s0")
    assert block.is_error and "ended with status" in block.content
    assert len(block.notes) == 1 and block.notes[0].startswith("[budget left: ")


async def test_a_typed_childs_json_stays_pure_json_in_its_own_block() -> None:
    class Finding(pydantic.BaseModel):
        claim: str

    typed = Agent("researcher", "R.", output_type=Finding)

    def body(request: Any) -> Any:
        if request.agent.depth:
            return final(Finding(claim="water is wet"))
        if tool_results(list(request.messages)):
            return text("done")
        return tool_call("spawn_subagent", {"agent": "researcher", "task": "t"}, id="s0")

    lead = Agent("lead", "L.", subagents=[typed], model=FunctionModel(body))

    result = await run(lead, "q", limits=Limits(token_budget=400_000))

    block = result_for(result.messages, "s0")
    assert json.loads(block.content) == {"claim": "water is wet"}
    assert len(block.notes) == 1


async def test_the_system_prompt_and_tools_are_byte_identical_with_and_without_budgets() -> None:
    def prefix(seen: list[Any], depth: int) -> list[bytes]:
        return [
            json.dumps(
                [r.system, [t.to_wire() for t in r.tools]], sort_keys=True, ensure_ascii=False
            ).encode()
            for r in seen
            if r.agent.depth == depth
        ]

    calls = [{"agent": "researcher", "task": "t"}]
    plain, plain_seen = _tree(calls)
    budgeted, budgeted_seen = _tree(calls, limits=Limits(token_budget=300_000))

    await run(plain, "q")
    await run(budgeted, "q", limits=Limits(token_budget=400_000, cost_budget_usd=50.0))

    for depth in (0, 1):
        with_budgets = prefix(budgeted_seen, depth)
        without = prefix(plain_seen, depth)
        assert with_budgets and with_budgets == without


async def test_budget_tokens_gives_the_child_a_sub_budget_it_cannot_exceed() -> None:
    def body(request: Any) -> Any:
        if request.agent.depth:  # the child keeps calling: only its sub-budget stops it
            return response(
                text(f"working, step {request.turn_index()}"),
                tool_call("jot", {"line": str(request.turn_index())}),
                usage={"input_tokens": 1_000, "output_tokens": 100},
            )
        if tool_results(list(request.messages)):
            return text("done")
        return tool_call(
            "spawn_subagent",
            {"agent": "researcher", "task": "t", "budget_tokens": 12_000},
            id="s0",
        )

    child = Agent("researcher", "R.", max_output_tokens=100, tools=[jot])
    lead = Agent("lead", "L.", subagents=[child], model=FunctionModel(body))

    result = await run(lead, "q", limits=Limits(token_budget=1_000_000))

    [researcher] = result.children
    assert researcher.status is RunStatus.BUDGET_EXCEEDED
    assert researcher.usage.billed_tokens <= 12_000 * 1.05
    assert result.status is RunStatus.COMPLETED


async def test_budget_tokens_above_what_is_left_is_refused_before_the_child_starts() -> None:
    lead, seen = _tree(
        [
            {"agent": "researcher", "task": "t", "budget_tokens": 2_000_000},
            {"agent": "researcher", "task": "t", "budget_tokens": 0},
            {"agent": "researcher", "task": "t", "budget_tokens": 5_000},
        ]
    )

    result = await run(lead, "q", limits=Limits(token_budget=100_000))

    too_much = result_for(result.messages, "s0")
    assert too_much.is_error and "budget_tokens=2,000,000 cannot be given" in too_much.content
    assert "tokens left" in too_much.content
    assert result_for(result.messages, "s1").is_error
    assert not result_for(result.messages, "s2").is_error
    assert [c.path for c in result.children] == ["lead/researcher#1"]  # no number taken
    assert sum(1 for r in seen if r.agent.depth) == 1


def test_a_results_notes_survive_the_wire_form_and_a_provider_taking_one_text_gets_them_joined() -> (
    None
):
    block = ToolResultBlock("t1", '{"claim":"x"}', notes=("[budget left: 1,000 tokens]",))
    message = Message("user", (block,))

    assert message_from_wire(message_to_wire(message)) == message
    assert block.full_text == '{"claim":"x"}\n\n[budget left: 1,000 tokens]'
