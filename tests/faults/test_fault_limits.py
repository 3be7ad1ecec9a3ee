"""Bounds at depth 0, 1 and 2: a child that exceeds its turns, one that eats the tree's token
budget, and a spawn bomb (a model that spawns at every turn at every depth, recursing into its
own definition by name), which the default limits must contain in agents, depth, turns, time
and memory.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from faultkit import (
    DEPTHS,
    FAULTY,
    Observer,
    chain,
    describe,
    expect,
    find_faulty,
    live_tasks,
    nodes,
    record_row,
    scripted,
    spawn,
    turn_of,
)

from orchestrator import (
    DEFAULT_LIMITS,
    Agent,
    ConfigurationError,
    Limits,
    RunStatus,
    Usage,
    run,
    tool,
)
from orchestrator.models import FunctionModel, response, tool_call

HELPER_LATENCY = 1.0


@tool
async def search(query: str) -> str:
    """Search.

    Args:
        query: what to look for
    """
    return f"results for {query}"


def faulty_agent(model: Any, **kwargs: Any) -> Agent:
    return Agent(
        FAULTY, "The agent under test.", description="the faulty agent", model=model, **kwargs
    )


# ---------------------------------------------------------------------------------------------
# a child that exceeds its turns

MAX_TURNS = describe(
    "agent exceeds its turns",
    "the faulty agent (max_turns=3 on its definition) calls a tool every turn and never answers",
    order=301,
)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_agent_exceeding_its_turns(depth: int, obs: Observer, autojump_clock: Any) -> None:
    own = Limits(max_turns=3)
    model = scripted(then=lambda req: tool_call("search", {"query": f"try {turn_of(req)}"}))
    tree = chain(
        faulty_agent(model, tools=[search], limits=own), depth, helper_latency=HELPER_LATENCY
    )
    limits = Limits(timeout=60)
    out = await obs.run(tree, limits=limits)
    obs.verify(
        MAX_TURNS,
        depth,
        out,
        expect("max_turns")(depth),
        limits=limits,
        faulty_limits=own,
        max_elapsed=HELPER_LATENCY,
    )
    node = find_faulty(out.result, depth)
    assert node is not None and node.turns == 3
    # the 3rd turn's calls were not run: they got synthetic results saying why
    last = node.messages[-1].content
    assert all(b.is_error and "max_turns" in b.content for b in last)


# ---------------------------------------------------------------------------------------------
# a child that eats the tree's token budget

BUDGET = describe(
    "agent exhausts the tree's token budget",
    "token_budget=20,000 for the run; the faulty agent bills its whole reservation (input plus "
    "the 4,096-token output cap) every turn and never answers; the ledger refuses the call that "
    "would not fit, and the agents above cannot make another call either",
    order=302,
)


def hungry(request: Any) -> Any:
    return response(
        tool_call("search", {"query": f"page {turn_of(request)}"}),
        usage=Usage(input_tokens=request.input_tokens_estimate, output_tokens=request.max_tokens),
    )


@pytest.mark.parametrize("depth", DEPTHS)
async def test_agent_exhausting_the_token_budget(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    limits = Limits(timeout=60, token_budget=20_000)
    tree = chain(
        faulty_agent(scripted(then=hungry), tools=[search]), depth, helper_latency=HELPER_LATENCY
    )
    out = await obs.run(tree, limits=limits)
    obs.verify(
        BUDGET,
        depth,
        out,
        expect("budget_exceeded", "budget_exceeded")(depth),
        limits=limits,
        max_elapsed=HELPER_LATENCY,
    )
    assert out.result is not None
    assert out.result.usage.billed_tokens <= 20_000
    node = find_faulty(out.result, depth)
    assert node is not None and "token budget exhausted" in (node.error or "")


# ---------------------------------------------------------------------------------------------
# the spawn bomb

BOMB = describe(
    "spawn bomb",
    "every agent named faulty spawns three more faulty agents (its own definition, by name) plus "
    "a cheap tool call at every turn, with new task texts so the repeat guard never trips; "
    "only the limits contain it: max_agents=40 and max_turns=8 for the run, the defaults "
    "max_depth=3, max_children=10 and token_budget=2,000,000 (memory peak under 64 MiB)",
    order=303,
)
BOMB_LIMITS = Limits(max_agents=40, max_turns=8)
BOMB_MEMORY_LIMIT = 64 * 2**20  # bytes of Python allocations at the peak of the run


@tool
async def note(text: str) -> str:
    """Take a note."""
    return "noted"


def bomber(request: Any) -> Any:
    turn = turn_of(request)
    return [
        *(spawn(FAULTY, f"conquer {request.agent.path} turn {turn} part {i}") for i in range(3)),
        tool_call("note", {"text": f"turn {turn}"}),
    ]


@pytest.mark.parametrize("depth", DEPTHS)
async def test_spawn_bomb(depth: int, obs: Observer, autojump_clock: Any) -> None:
    faulty = faulty_agent(scripted(then=bomber), tools=[note], subagents=[FAULTY])
    tree = chain(faulty, depth, helper_latency=HELPER_LATENCY)
    tracemalloc.start()
    try:
        out = await obs.run(tree, limits=BOMB_LIMITS, event_buffer=256)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    obs.verify(
        BOMB, depth, out, expect("max_turns")(depth), limits=BOMB_LIMITS, max_elapsed=HELPER_LATENCY
    )
    assert out.result is not None
    everyone = list(nodes(out.result))
    bombers = [n for n in everyone if n.agent_name == FAULTY]
    assert len(everyone) <= BOMB_LIMITS.max_agents  # type: ignore[operator]
    if depth < 2:  # it used every agent it was allowed (at depth 2, max_children binds first)
        assert len(everyone) == BOMB_LIMITS.max_agents
    else:
        assert len(bombers) == 1 + DEFAULT_LIMITS.max_children  # type: ignore[operator]
    assert max(n.depth for n in bombers) == DEFAULT_LIMITS.max_depth
    assert all(n.status is RunStatus.MAX_TURNS for n in bombers), {
        n.path: n.status for n in bombers if n.status is not RunStatus.MAX_TURNS
    }
    assert peak < BOMB_MEMORY_LIMIT, f"peak {peak / 2**20:.1f} MiB"
    print(
        f"spawn bomb at depth {depth}: {len(everyone)} agents, "
        f"{sum(n.turns for n in everyone)} turns, peak {peak / 2**20:.1f} MiB"
    )


# ---------------------------------------------------------------------------------------------
# the one exception run() may raise: a definition that cannot run

DEFINITION = describe(
    "definition error",
    "the faulty agent lists a subagent name that no agent of the tree has: a programmer error, "
    "the one kind of exception run() raises (ConfigurationError), before any model call",
    order=304,
)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_definition_error_raises_before_any_model_call(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    called: list[Any] = []

    def model_fn(request: Any) -> Any:
        called.append(request.agent.path)
        return "never"

    faulty = faulty_agent(FunctionModel(model_fn), tools=[search], subagents=["nobody"])
    tree = chain(faulty, depth, helper_latency=HELPER_LATENCY)
    tasks = live_tasks()
    with pytest.raises(ConfigurationError, match="'nobody', which is not defined") as raised:
        await run(tree, "Begin.")
    assert not called and live_tasks() == tasks
    record_row(
        DEFINITION,
        depth,
        "(never started)",
        f"raises ConfigurationError: {raised.value}",
        "(nothing ran)",
        "raises ConfigurationError",
    )
