"""Tree-wide limits through the public API: the deadline children inherit and an agent's own
sub-deadline, the token and cost ledger with reservations, max_depth, max_children, max_agents,
max_concurrency, the layering of run options under definitions, and policies combining across
the tree with the stricter rule winning.

Time is trio's virtual clock (the ``autojump_clock`` fixture) except in the one real-clock
sanity check of the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from support.trees import (
    Script,
    assert_valid_transcript,
    live_tasks,
    nodes,
    result_for,
    spawn,
    tool_results,
)

from orchestrator import (
    Agent,
    Limits,
    Policy,
    RunStatus,
    Usage,
    open_run,
    run,
    tool,
)
from orchestrator.core.limits import DEFAULT_LIMITS, TREE_WIDE_FIELDS, Slots, tree_wide_limits
from orchestrator.core.state import Limiters
from orchestrator.models import FunctionModel, response, text, tool_call

# ---------------------------------------------------------------------------------------------
# helpers


def billed(usage: Usage) -> int:
    """What the token budget counts: all input (cache reads and writes included) plus output."""
    return usage.input_tokens + usage.output_tokens


def keep_searching(req: Any, turn: int) -> Any:
    """Never answers: a new search every turn (distinct arguments, so no repeat guard)."""
    return tool_call("search", {"query": f"{req.agent.path} turn {turn}"})


def worst_case(step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """Bill each call its whole reservation: the estimated input plus the full output cap."""

    def fn(req: Any, turn: int) -> Any:
        out = step(req, turn)
        blocks = out if isinstance(out, list) else [out]
        usage = Usage(input_tokens=req.input_tokens_estimate, output_tokens=req.max_tokens)
        return response(*blocks, usage=usage)

    return fn


def tiny_usage(step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    def fn(req: Any, turn: int) -> Any:
        out = step(req, turn)
        blocks = out if isinstance(out, list) else [out]
        return response(*blocks, usage=Usage(input_tokens=1, output_tokens=1))

    return fn


@tool
async def search(query: str) -> str:
    """Search the corpus.

    Args:
        query: what to look for
    """
    return f"hits for {query}"


@tool
async def fetch(url: str) -> str:
    """Fetch a page.

    Args:
        url: the address
    """
    return f"page {url}"


@tool
async def hang() -> str:
    """Wait for something that never comes."""
    await trio.sleep_forever()
    return "unreachable"


def chain_to_a_hung_grandchild(script_model: Any, hang_tool: Any) -> Agent:
    leaf = Agent("leaf", "Leaf.", tools=[hang_tool])
    mid = Agent("mid", "Mid.", subagents=[leaf])
    return Agent("lead", "Lead.", subagents=[mid], model=script_model)


CHAIN_PLANS: dict[str, Any] = {
    "lead": [spawn("mid", "go")],
    "mid": [spawn("leaf", "go")],
    "leaf": [tool_call("hang", {})],
}


# ---------------------------------------------------------------------------------------------
# the deadline


async def test_hung_tool_in_a_grandchild_ends_the_run_with_timeout_at_the_inherited_deadline(
    autojump_clock,
) -> None:
    script = Script(CHAIN_PLANS)
    lead = chain_to_a_hung_grandchild(script.model, hang)
    tasks_before = live_tasks()

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(timeout=1))
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.TIMEOUT
    assert result.error
    assert 1.0 <= elapsed < 2.0
    all_nodes = list(nodes(result))
    assert [n.path for n in all_nodes] == ["lead", "lead/mid#1", "lead/mid#1/leaf#1"]
    for node in all_nodes:
        assert node.status is RunStatus.TIMEOUT, node.path
        assert_valid_transcript(node.messages)
    hung = tool_results(all_nodes[2].messages)
    assert len(hung) == 1 and hung[0].is_error
    assert live_tasks() == tasks_before


async def test_a_hung_sync_tool_in_a_grandchild_does_not_hold_the_run_past_its_deadline() -> None:
    """Real clock: a worker thread that never returns does not hold the run past its deadline."""
    release, hung, returned = threading.Event(), threading.Event(), threading.Event()

    @tool
    def hang_in_thread() -> str:
        """Block a worker thread."""
        hung.set()
        release.wait(60)
        returned.set()
        return "released"

    plans = {**CHAIN_PLANS, "leaf": [tool_call("hang_in_thread", {})]}
    script = Script(plans)
    lead = chain_to_a_hung_grandchild(script.model, hang_in_thread)
    try:
        start = time.monotonic()
        async with open_run(lead, "q", limits=Limits(timeout=1)) as handle:
            result = await handle.result()
        elapsed = time.monotonic() - start
        # the run ended while the thread still hung (it returns only when released, or after
        # 60 s): at the deadline (never before it), not when the thread was done
        assert hung.is_set() and not returned.is_set()
    finally:
        release.set()

    assert result.status is RunStatus.TIMEOUT
    assert elapsed >= 0.9
    for node in nodes(result):
        assert node.status is RunStatus.TIMEOUT
        assert_valid_transcript(node.messages)


async def test_agents_own_timeout_is_a_sub_deadline_the_parent_survives(autojump_clock) -> None:
    script = Script(
        {
            "lead": [spawn("researcher", "t", id="s1"), text("went on without it")],
            "researcher": [tool_call("hang", {})],
        }
    )
    researcher = Agent("researcher", "R.", tools=[hang], limits=Limits(timeout=5))
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q")
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.COMPLETED
    assert result.output == "went on without it"
    assert elapsed == pytest.approx(5.0, abs=0.1)
    child = result.children[0]
    assert child.status is RunStatus.TIMEOUT
    assert child.error == "agent timeout reached after 5.0s"  # its own limit, not the run's
    assert_valid_transcript(child.messages)
    failed = result_for(result.messages, "s1")
    assert failed.is_error
    assert "timeout" in failed.content


async def test_a_childs_own_timeout_does_not_stop_its_siblings(autojump_clock) -> None:
    script = Script(
        {
            "lead": [[spawn("quick", "t"), spawn("slow", "t")]],
            "quick": [tool_call("hang", {})],
            "slow": [text("finished after 3 s")],
        },
        latency=lambda req: 3.0 if req.agent.name == "slow" else 0.0,
    )
    quick = Agent("quick", "Q.", tools=[hang], limits=Limits(timeout=1))
    lead = Agent("lead", "L.", subagents=[quick, Agent("slow", "S.")], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert [c.status for c in result.children] == [RunStatus.TIMEOUT, RunStatus.COMPLETED]
    assert result.children[1].output == "finished after 3 s"


async def test_agents_own_timeout_cannot_extend_the_runs_deadline(autojump_clock) -> None:
    script = Script({"lead": [spawn("researcher", "t")], "researcher": [tool_call("hang", {})]})
    researcher = Agent("researcher", "R.", tools=[hang], limits=Limits(timeout=100))
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(timeout=2))

    assert result.status is RunStatus.TIMEOUT
    assert trio.current_time() - start == pytest.approx(2.0, abs=0.1)
    assert result.children[0].status is RunStatus.TIMEOUT


@pytest.mark.parametrize(("own", "run_timeout"), [(2.0, 100.0), (100.0, 2.0)])
async def test_run_deadline_is_the_lesser_of_the_runs_and_the_roots_timeout(
    autojump_clock, own: float, run_timeout: float
) -> None:
    script = Script({"lead": [tool_call("hang", {})]})
    lead = Agent("lead", "L.", tools=[hang], limits=Limits(timeout=own), model=script.model)

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(timeout=run_timeout))

    assert result.status is RunStatus.TIMEOUT
    assert trio.current_time() - start == pytest.approx(2.0, abs=0.1)


async def test_deadline_counts_time_spent_waiting_for_the_model(autojump_clock) -> None:
    script = Script(
        {"lead": [spawn("researcher", "t")], "researcher": [text("late")]},
        latency=lambda req: 50.0 if req.agent.name == "researcher" else 0.0,
    )
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(timeout=3))

    assert result.status is RunStatus.TIMEOUT
    assert trio.current_time() - start == pytest.approx(3.0, abs=0.1)
    assert result.children[0].status is RunStatus.TIMEOUT
    for node in nodes(result):
        assert_valid_transcript(node.messages)


# ---------------------------------------------------------------------------------------------
# the ledger


async def test_call_that_does_not_fit_the_token_budget_ends_the_agent_with_budget_exceeded() -> (
    None
):
    script = Script({"solo": worst_case(keep_searching)})
    solo = Agent("solo", "S.", tools=[search], model=script.model, max_output_tokens=200)

    result = await run(solo, "q", limits=Limits(token_budget=1000))

    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert "token budget" in (result.error or "")
    assert billed(result.usage) <= 1000
    assert 1 <= script.calls("solo") <= 4  # every call reserves more than 200 tokens
    assert result.own_usage.requests == script.calls("solo")
    assert_valid_transcript(result.messages)


async def test_parallel_children_cannot_overshoot_the_token_budget_together(
    autojump_clock,
) -> None:
    budget = 6000
    script = Script(
        {
            "lead": worst_case(
                lambda req, turn: (
                    [spawn("researcher", f"r{i}") for i in range(5)]
                    if turn == 0
                    else text("summary")
                )
            ),
            "researcher": worst_case(keep_searching),
        },
        latency=1.0,
    )
    researcher = Agent("researcher", "R.", tools=[search], max_output_tokens=1000)
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model, max_output_tokens=100)

    result = await run(lead, "q", limits=Limits(token_budget=budget))

    total = billed(result.usage)
    assert total <= budget
    assert total >= budget // 2  # the budget was really used, not refused up front
    assert len(result.children) == 5
    statuses = [c.status for c in result.children]
    assert RunStatus.BUDGET_EXCEEDED in statuses
    assert script.max_in_flight_by["researcher"] >= 2  # they did run in parallel
    for node in nodes(result):
        assert_valid_transcript(node.messages)
        if node.status is RunStatus.BUDGET_EXCEEDED:
            assert node.error


async def test_call_that_does_not_fit_waits_for_outstanding_reservations_instead_of_failing(
    autojump_clock,
) -> None:
    """Two children each reserve ~1000 tokens of a 1600 budget: the second waits until the
    first settles (billing 2 tokens), then runs; nobody is refused."""
    script = Script(
        {
            "lead": tiny_usage(
                lambda req, turn: (
                    [spawn("researcher", "a"), spawn("researcher", "b")]
                    if turn == 0
                    else text("both answered")
                )
            ),
            "researcher": tiny_usage(lambda req, turn: text("answer")),
        },
        latency=1.0,
    )
    researcher = Agent("researcher", "R.", max_output_tokens=1000)
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model, max_output_tokens=100)

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(token_budget=1600))
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.COMPLETED
    assert [c.status for c in result.children] == [RunStatus.COMPLETED] * 2
    assert script.max_in_flight_by["researcher"] == 1
    assert elapsed == pytest.approx(4.0, abs=0.1)  # lead, a, b (after a), lead


async def test_a_call_cut_while_waiting_for_a_concurrency_slot_gives_its_reservation_back(
    autojump_clock,
) -> None:
    """Workers whose own timeout ends them while they queue for the one slot never sent a
    request: their reservations must not stay on the budget and starve the lead."""

    async def respond(req: Any) -> Any:
        small = Usage(input_tokens=10, output_tokens=10)
        if req.agent.name == "worker":
            await trio.sleep(4)  # a slow call holding the only slot
            return response(text("w"), usage=small)
        if req.turn_index() == 0:
            spawns = [spawn("worker", f"t{i}") for i in range(4)]
            return response(*spawns, usage=small)
        return response(text("lead done"), usage=small)

    worker = Agent("worker", "W.", max_output_tokens=1000, limits=Limits(timeout=5))
    lead = Agent("lead", "L.", subagents=[worker], max_output_tokens=1000)
    limits = Limits(max_concurrency=1, token_budget=3_500)
    result = await run(lead, "go", model=FunctionModel(respond), limits=limits)
    assert result.status is RunStatus.COMPLETED, result.error
    statuses = sorted(c.status.value for c in result.children)
    assert statuses == ["completed", "timeout", "timeout", "timeout"]
    # the worker that got the slot second sent its call before its timeout: that one may be
    # billed; the last two never sent anything
    assert sum(c.usage.requests for c in result.children) == 1


async def test_usage_reported_as_negative_gives_no_budget_back() -> None:
    def respond(req: Any) -> Any:
        turn = req.turn_index()
        if turn == 0:
            return response(tool_call("search", {"query": "a"}), usage=Usage(input_tokens=-5_000))
        return response(tool_call("search", {"query": f"q{turn}"}), usage=Usage(input_tokens=900))

    @tool
    async def search(query: str) -> str:
        """Search."""
        return "hit"

    agent = Agent("a", "A.", model=FunctionModel(respond), tools=[search], max_output_tokens=100)
    result = await run(agent, "go", limits=Limits(token_budget=3_000, max_turns=50))
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert result.own_usage.requests <= 5  # about 3,000 billed, not 8,000


async def test_a_large_reservation_is_not_overtaken_by_smaller_ones_arriving_after_it(
    autojump_clock,
) -> None:
    """Budget reservations are served in arrival order: four small agents keep reserving
    6,000 of 26,000 tokens, staggered so that room for a 9,000 one never opens while newcomers
    may take it first; the large one (with a timeout of its own) must get its call."""
    small_usage = Usage(input_tokens=1, output_tokens=1)

    async def respond(req: Any) -> Any:
        name, turn = req.agent.name, req.turn_index()
        if name == "small":
            if turn == 0:
                await trio.sleep(0.25 * int(req.agent.path.split("#")[-1]))
            await trio.sleep(1.0)
            step = text("done") if turn >= 12 else tool_call("noop", {"i": turn})
            return response(step, usage=small_usage)
        if name == "lead" and turn == 0:
            spawns = [spawn("small", f"s{i}") for i in range(4)]
            return response(*spawns, spawn("waiter", "w"), usage=small_usage)
        if name == "waiter" and turn == 0:
            return response(tool_call("noop", {"i": 200}), usage=small_usage)
        if name == "waiter" and turn == 1:
            return response(spawn("big", "b"), usage=small_usage)
        return response(text("done"), usage=small_usage)

    @tool
    async def noop(i: int) -> str:
        """Wait a little."""
        await trio.sleep(i / 100)
        return "ok"

    small = Agent("small", "S.", tools=[noop], max_output_tokens=6_000)
    big = Agent("big", "B.", max_output_tokens=9_000, limits=Limits(timeout=8))
    waiter = Agent("waiter", "W.", tools=[noop], subagents=[big], max_output_tokens=100)
    lead = Agent("lead", "L.", subagents=[small, waiter], max_output_tokens=100)
    limits = Limits(token_budget=26_000, repeat_limit=100, max_turns=30)
    result = await run(lead, "go", model=FunctionModel(respond), limits=limits)
    big_result = result.children[4].children[0]
    assert big_result.status is RunStatus.COMPLETED, big_result.error


async def test_agents_own_token_budget_is_a_sub_budget_for_its_subtree(autojump_clock) -> None:
    script = Script(
        {
            "lead": [spawn("researcher", "t", id="s1"), text("done anyway")],
            "researcher": worst_case(
                lambda req, turn: spawn("reader", f"p{turn}") if turn < 3 else text("ok")
            ),
            "reader": worst_case(keep_searching),
        }
    )
    reader = Agent("reader", "Read.", tools=[search], max_output_tokens=300)
    researcher = Agent(
        "researcher",
        "R.",
        subagents=[reader],
        limits=Limits(token_budget=2500),
        max_output_tokens=300,
    )
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q", limits=Limits(token_budget=100_000))

    assert result.status is RunStatus.COMPLETED
    child = result.children[0]
    assert billed(child.usage) <= 2500
    assert any(n.status is RunStatus.BUDGET_EXCEEDED for n in nodes(child))
    assert result_for(result.messages, "s1").is_error


_OPTIONAL_LIMITS = st.none() | st.builds(
    Limits,
    timeout=st.none() | st.floats(0.5, 2000),
    token_budget=st.none() | st.integers(1, 10**7),
    cost_budget_usd=st.none() | st.floats(0.01, 100),
    max_agents=st.none() | st.integers(1, 500),
    max_concurrency=st.none() | st.integers(1, 64),
    max_turns=st.none() | st.integers(1, 50),
    max_depth=st.none() | st.integers(0, 6),
)


@settings(max_examples=200, deadline=None)
@given(run_limits=_OPTIONAL_LIMITS, root_limits=_OPTIONAL_LIMITS)
def test_tree_wide_limits_are_the_stricter_set_value_of_run_and_root_else_the_default(
    run_limits: Limits | None, root_limits: Limits | None
) -> None:
    budgets = tree_wide_limits(run_limits, root_limits)
    for name in TREE_WIDE_FIELDS:
        given_values = [
            getattr(layer, name)
            for layer in (run_limits, root_limits)
            if layer is not None and getattr(layer, name) is not None
        ]
        expected = min(given_values) if given_values else getattr(DEFAULT_LIMITS, name)
        assert getattr(budgets, name) == expected, name
    per_agent = [f for f in Limits.__dataclass_fields__ if f not in TREE_WIDE_FIELDS]
    assert all(getattr(budgets, f) == getattr(DEFAULT_LIMITS, f) for f in per_agent)


@pytest.mark.parametrize(("own", "run_budget"), [(1200, 1_000_000), (1_000_000, 1200)])
async def test_token_budget_is_the_lesser_of_the_runs_and_the_roots(
    own: int, run_budget: int
) -> None:
    script = Script({"solo": worst_case(keep_searching)})
    solo = Agent(
        "solo",
        "S.",
        tools=[search],
        model=script.model,
        max_output_tokens=200,
        limits=Limits(token_budget=own),
    )

    result = await run(solo, "q", limits=Limits(token_budget=run_budget))

    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert billed(result.usage) <= 1200


async def test_parallel_children_cannot_overshoot_the_cost_budget_together(autojump_clock) -> None:
    def price(u: Usage) -> float:
        return (u.input_tokens + u.output_tokens) * 1e-4  # $0.0001 per token

    script = Script(
        {
            "lead": worst_case(
                lambda req, turn: (
                    [spawn("researcher", f"r{i}") for i in range(4)] if turn == 0 else text("ok")
                )
            ),
            "researcher": worst_case(keep_searching),
        },
        latency=1.0,
    )
    researcher = Agent("researcher", "R.", tools=[search], max_output_tokens=500)
    lead = Agent(
        "lead",
        "L.",
        subagents=[researcher],
        model=FunctionModel(script, prices=price),
        max_output_tokens=100,
    )

    result = await run(lead, "q", limits=Limits(cost_budget_usd=0.5))

    assert result.usage.cost_usd <= 0.5 + 1e-9
    assert result.usage.cost_usd >= 0.25
    assert any(n.status is RunStatus.BUDGET_EXCEEDED for n in nodes(result))
    assert "cost" in next(n.error for n in nodes(result) if n.status is RunStatus.BUDGET_EXCEEDED)


# ---------------------------------------------------------------------------------------------
# max_depth, max_children, max_agents


def spawn_if_possible(child: str) -> Callable[[Any, int], Any]:
    def fn(req: Any, turn: int) -> Any:
        if turn == 0 and any(t.name == "spawn_subagent" for t in req.tools):
            return spawn(child, "t")
        return text(f"done {req.agent.path}")

    return fn


async def test_max_depth_from_the_run_removes_the_spawn_tool_below_that_depth() -> None:
    script = Script(
        {"lead": spawn_if_possible("researcher"), "researcher": spawn_if_possible("reader")}
    )
    reader = Agent("reader", "Read.")
    researcher = Agent("researcher", "R.", subagents=[reader])
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q", limits=Limits(max_depth=1))

    assert result.status is RunStatus.COMPLETED
    assert "spawn_subagent" in script.tool_names("lead")
    assert "spawn_subagent" not in script.tool_names("lead/researcher#1")
    assert result.children[0].children == []
    assert script.calls("reader") == 0


async def test_max_depth_zero_gives_the_root_no_spawn_tool() -> None:
    script = Script({"lead": spawn_if_possible("researcher")})
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    result = await run(lead, "q", limits=Limits(max_depth=0))

    assert result.status is RunStatus.COMPLETED
    assert "spawn_subagent" not in script.tool_names("lead")
    assert result.children == []


async def test_max_depth_set_on_a_definition_is_inherited_by_its_subtree() -> None:
    script = Script(
        {
            "lead": spawn_if_possible("researcher"),
            "researcher": spawn_if_possible("reader"),
            "reader": spawn_if_possible("scribe"),
        }
    )
    scribe = Agent("scribe", "Sc.")
    reader = Agent("reader", "Read.", subagents=[scribe])
    researcher = Agent("researcher", "R.", subagents=[reader], limits=Limits(max_depth=2))
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q", limits=Limits(max_depth=3))

    assert result.status is RunStatus.COMPLETED
    assert "spawn_subagent" in script.tool_names("lead/researcher#1")
    assert "spawn_subagent" not in script.tool_names("lead/researcher#1/reader#1")
    assert script.calls("scribe") == 0


async def test_spawn_beyond_max_children_in_one_turn_is_refused_as_is_error() -> None:
    script = Script({"lead": [[spawn("researcher", f"r{i}", id=f"s{i}") for i in range(3)]]})
    lead = Agent(
        "lead",
        "L.",
        subagents=[Agent("researcher", "R.")],
        model=script.model,
        limits=Limits(max_children=2),
    )

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert len(result.children) == 2
    outcomes = [result_for(result.messages, f"s{i}") for i in range(3)]
    refused = [r for r in outcomes if r.is_error]
    assert len(refused) == 1
    assert "max_children" in refused[0].content
    assert script.calls("researcher") == 2


async def test_max_children_counts_spawns_over_the_agents_whole_run() -> None:
    script = Script(
        {"lead": [spawn("researcher", f"r{i}", id=f"s{i}") for i in range(3)]},
    )
    lead = Agent(
        "lead",
        "L.",
        subagents=[Agent("researcher", "R.")],
        model=script.model,
        limits=Limits(max_children=2),
    )

    result = await run(lead, "q")

    assert [c.path for c in result.children] == ["lead/researcher#1", "lead/researcher#2"]
    assert not result_for(result.messages, "s1").is_error
    third = result_for(result.messages, "s2")
    assert third.is_error and "max_children" in third.content


async def test_max_children_from_the_run_applies_to_every_agent_in_the_tree() -> None:
    script = Script(
        {
            "lead": [[spawn("researcher", "a"), spawn("researcher", "b")]],
            "researcher": [[spawn("reader", "x"), spawn("reader", "y")]],
        }
    )
    reader = Agent("reader", "Read.")
    lead = Agent(
        "lead",
        "L.",
        subagents=[Agent("researcher", "R.", subagents=[reader])],
        model=script.model,
    )

    result = await run(lead, "q", limits=Limits(max_children=1))

    assert len(result.children) == 1
    assert len(result.children[0].children) == 1


async def test_max_agents_counts_the_root_and_every_child_across_levels() -> None:
    script = Script(
        {
            "lead": [[spawn("researcher", "a"), spawn("researcher", "b")]],
            "researcher": [[spawn("reader", "x"), spawn("reader", "y")]],
        }
    )
    reader = Agent("reader", "Read.")
    lead = Agent(
        "lead",
        "L.",
        subagents=[Agent("researcher", "R.", subagents=[reader])],
        model=script.model,
    )

    result = await run(lead, "q", limits=Limits(max_agents=4))

    assert result.status is RunStatus.COMPLETED
    all_nodes = list(nodes(result))
    assert len(all_nodes) == 4
    assert len({r.agent.path for r in script.requests}) == 4
    refusals = [b for n in all_nodes for b in tool_results(n.messages) if b.is_error]
    assert len(refusals) == 3  # six spawns were asked for, three started
    assert all("max_agents" in b.content for b in refusals)


async def test_which_spawns_max_agents_refuses_follows_call_order_not_scheduling() -> None:
    for _ in range(12):  # trio starts a turn's calls in a different order each time
        script = Script({"lead": [[spawn("worker", f"t{i}") for i in range(5)]]})
        lead = Agent("lead", "L.", subagents=[Agent("worker", "W.")], model=script.model)

        result = await run(lead, "q", limits=Limits(max_agents=3))

        assert [c.path for c in result.children] == ["lead/worker#1", "lead/worker#2"]
        refused = [b.is_error for b in tool_results(result.messages)]
        assert refused == [False, False, True, True, True]


async def test_an_agent_allowance_a_declined_spawn_held_is_given_back_after_its_step() -> None:
    script = Script(
        {"lead": [[spawn("worker", "declined"), spawn("worker", "a")], [spawn("worker", "b")]]}
    )
    lead = Agent("lead", "L.", subagents=[Agent("worker", "W.")], model=script.model)
    policy = Policy(
        rules={"spawn_subagent": "confirm"}, approver=lambda call: call.input["task"] != "declined"
    )

    result = await run(lead, "q", limits=Limits(max_agents=3), policy=policy)

    # the lead and two workers: the declined call's allowance went back when its turn ended
    assert [c.path for c in result.children] == ["lead/worker#2", "lead/worker#3"]
    assert all(c.status is RunStatus.COMPLETED for c in result.children)


async def test_a_declined_spawn_gives_its_agent_allowance_back_before_its_siblings_spawn() -> None:
    script = Script(
        {
            "lead": [[spawn("mid", "declined"), spawn("mid", "a")]],
            "mid": [[spawn("leaf", "g")]],
        }
    )
    leaf = Agent("leaf", "Leaf.")
    lead = Agent("lead", "L.", subagents=[Agent("mid", "M.", subagents=[leaf])], model=script.model)

    policy = Policy(
        rules={"spawn_subagent": "confirm"}, approver=lambda call: call.input["task"] != "declined"
    )
    result = await run(lead, "q", limits=Limits(max_agents=3), policy=policy)

    # the lead, mid and leaf: the declined call's allowance did not wait for the lead's step
    assert [c.path for c in result.children] == ["lead/mid#2"]
    assert [c.path for c in result.children[0].children] == ["lead/mid#2/leaf#1"]
    assert result.children[0].children[0].status is RunStatus.COMPLETED


# ---------------------------------------------------------------------------------------------
# max_concurrency


async def test_max_concurrency_caps_model_calls_in_flight_and_queues_the_rest(
    autojump_clock,
) -> None:
    script = Script({"lead": [[spawn("researcher", f"r{i}") for i in range(6)]]}, latency=1.0)
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(max_concurrency=2))
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.COMPLETED
    assert [c.status for c in result.children] == [RunStatus.COMPLETED] * 6
    assert script.max_in_flight == 2
    assert elapsed == pytest.approx(1 + 3 + 1, abs=0.1)  # lead, 6 children two at a time, lead


async def test_agents_own_max_concurrency_limits_its_subtree_inside_the_runs(
    autojump_clock,
) -> None:
    script = Script(
        {
            "lead": [[spawn("researcher", "a"), spawn("free", "b")]],
            "researcher": [[spawn("reader", f"p{i}") for i in range(3)]],
            "free": [[spawn("skimmer", f"q{i}") for i in range(3)]],
        },
        latency=1.0,
    )
    researcher = Agent(
        "researcher", "R.", subagents=[Agent("reader", "Read.")], limits=Limits(max_concurrency=1)
    )
    free = Agent("free", "F.", subagents=[Agent("skimmer", "Skim.")])
    lead = Agent("lead", "L.", subagents=[researcher, free], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q")
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.COMPLETED
    assert len(result.children[0].children) == 3
    assert script.max_in_flight_by["reader"] == 1  # the limited subtree, one call at a time
    assert script.max_in_flight_by["skimmer"] == 3  # its sibling's subtree is not limited
    # lead, researcher, three readers one by one, researcher, lead
    assert elapsed == pytest.approx(7.0, abs=0.1)


async def test_a_call_that_finds_an_outer_limit_full_takes_no_slot_of_the_inner_one() -> None:
    # an agent's own limit (3) has room, the run's (1) does not: the slot taken from the first
    # must go back, or every such try would shrink the agent's limit for good
    agent_slots, run_slots = Slots(3), Slots(1)
    chain = Limiters((agent_slots, run_slots))
    assert run_slots.try_take()  # another agent's call holds the run's only slot

    assert not chain.try_acquire()
    assert (agent_slots.free, run_slots.free) == (3, 0)

    run_slots.give_back()
    assert chain.try_acquire()
    assert (agent_slots.free, run_slots.free) == (2, 0)
    chain.release()
    assert (agent_slots.free, run_slots.free) == (3, 1)


async def test_concurrency_slots_go_to_waiters_in_arrival_order_and_survive_a_cancelled_waiter(
    autojump_clock,
) -> None:
    slots = Slots(1)
    order: list[str] = []

    async def holder(name: str, hold: float) -> None:
        await slots.take()
        order.append(name)
        await trio.sleep(hold)
        slots.give_back()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder, "first", 1.0)
        await trio.sleep(0.1)
        with trio.move_on_after(0.1):  # a waiter that gives up leaves no slot behind
            await slots.take()
        for name in ("second", "third"):
            nursery.start_soon(holder, name, 1.0)
            await trio.sleep(0.1)
        assert not slots.try_take()  # two are waiting: a newcomer does not overtake them

    assert order == ["first", "second", "third"]
    assert slots.free == slots.total == 1


# ---------------------------------------------------------------------------------------------
# layering: run options fill what definitions leave unset, never loosen them


async def test_definitions_max_turns_is_not_raised_by_the_runs() -> None:
    script = Script({"solo": keep_searching})
    solo = Agent("solo", "S.", tools=[search], model=script.model, limits=Limits(max_turns=2))

    result = await run(solo, "q", limits=Limits(max_turns=10))

    assert result.status is RunStatus.MAX_TURNS
    assert script.calls("solo") == 2
    assert_valid_transcript(result.messages)


async def test_runs_max_turns_fills_a_definition_that_leaves_it_unset() -> None:
    script = Script({"solo": keep_searching})
    solo = Agent("solo", "S.", tools=[search], model=script.model)

    result = await run(solo, "q", limits=Limits(max_turns=3))

    assert result.status is RunStatus.MAX_TURNS
    assert script.calls("solo") == 3


async def test_default_max_turns_is_twenty() -> None:
    script = Script({"solo": keep_searching})
    solo = Agent("solo", "S.", tools=[search], model=script.model)

    result = await run(solo, "q")

    assert result.status is RunStatus.MAX_TURNS
    assert script.calls("solo") == 20


async def test_child_takes_its_nearest_ancestors_per_agent_limit_before_the_runs() -> None:
    script = Script({"lead": [spawn("researcher", "t")], "researcher": keep_searching})
    researcher = Agent("researcher", "R.", tools=[search])
    lead = Agent(
        "lead", "L.", subagents=[researcher], model=script.model, limits=Limits(max_turns=4)
    )

    result = await run(lead, "q", limits=Limits(max_turns=10))

    assert result.status is RunStatus.COMPLETED
    assert result.children[0].status is RunStatus.MAX_TURNS
    assert script.calls("researcher") == 4


async def test_childs_own_per_agent_limit_wins_over_its_ancestors() -> None:
    script = Script({"lead": [spawn("researcher", "t")], "researcher": keep_searching})
    researcher = Agent("researcher", "R.", tools=[search], limits=Limits(max_turns=2))
    lead = Agent(
        "lead", "L.", subagents=[researcher], model=script.model, limits=Limits(max_turns=6)
    )

    await run(lead, "q")

    assert script.calls("researcher") == 2


async def test_runs_tool_timeout_reaches_children_and_a_definitions_is_not_loosened(
    autojump_clock,
) -> None:
    script = Script(
        {
            "lead": [[spawn("patient", "t", id="p"), spawn("strict", "t", id="s")]],
            "patient": [tool_call("hang", {}, id="h1"), text("patient done")],
            "strict": [tool_call("hang", {}, id="h2"), text("strict done")],
        }
    )
    patient = Agent("patient", "P.", tools=[hang])
    strict = Agent("strict", "S.", tools=[hang], limits=Limits(tool_timeout=1))
    lead = Agent("lead", "L.", subagents=[patient, strict], model=script.model)

    async with open_run(lead, "q", limits=Limits(tool_timeout=5)) as handle:
        result = await handle.result()
        finished_at = trio.current_time()

    assert result.status is RunStatus.COMPLETED
    patient_r, strict_r = result.children
    assert result_for(patient_r.messages, "h1").is_error
    assert result_for(strict_r.messages, "h2").is_error
    assert "after 5s" in result_for(patient_r.messages, "h1").content
    assert "after 1s" in result_for(strict_r.messages, "h2").content
    assert finished_at == pytest.approx(5.0, abs=0.1)


# ---------------------------------------------------------------------------------------------
# policies combine across the tree, the stricter rule winning


def counted_search() -> tuple[Any, list[str]]:
    ran: list[str] = []

    @tool
    async def search(ctx_free_query: str) -> str:
        """Search.

        Args:
            ctx_free_query: what to look for
        """
        ran.append(ctx_free_query)
        return "hits"

    return search, ran


def search_then_answer(req: Any, turn: int) -> Any:
    if turn == 0:
        return tool_call("search", {"ctx_free_query": req.agent.path}, id=f"q-{req.agent.name}")
    return text("done")


async def test_run_policy_deny_applies_in_children() -> None:
    counted, ran = counted_search()
    script = Script({"lead": [spawn("researcher", "t")], "researcher": search_then_answer})
    lead = Agent(
        "lead", "L.", tools=[counted], subagents=[Agent("researcher", "R.")], model=script.model
    )

    result = await run(lead, "q", policy=Policy(rules={"search": "deny"}))

    assert result.status is RunStatus.COMPLETED
    denied = result_for(result.children[0].messages, "q-researcher")
    assert denied.is_error and "denied" in denied.content
    assert ran == []


async def test_child_policy_cannot_loosen_a_parents_deny() -> None:
    counted, ran = counted_search()
    script = Script({"lead": [spawn("researcher", "t")], "researcher": search_then_answer})
    researcher = Agent("researcher", "R.", policy=Policy(rules={"search": "allow"}))
    lead = Agent(
        "lead",
        "L.",
        tools=[counted],
        subagents=[researcher],
        model=script.model,
        policy=Policy(rules={"search": "deny"}),
    )

    result = await run(lead, "q")

    assert result_for(result.children[0].messages, "q-researcher").is_error
    assert ran == []


async def test_child_policy_cannot_loosen_a_run_policys_default_deny() -> None:
    counted, ran = counted_search()
    script = Script({"lead": [spawn("researcher", "t")], "researcher": search_then_answer})
    researcher = Agent("researcher", "R.", policy=Policy(rules={"search": "allow"}))
    lead = Agent(
        "lead",
        "L.",
        tools=[counted],
        subagents=[researcher],
        model=script.model,
        policy=Policy(rules={"spawn_subagent": "allow"}),
    )

    result = await run(lead, "q", policy=Policy(rules={"spawn_subagent": "allow"}, default="deny"))

    assert len(result.children) == 1
    assert result_for(result.children[0].messages, "q-researcher").is_error
    assert ran == []


async def test_childs_stricter_rule_applies_to_it_but_not_to_its_parent() -> None:
    counted, ran = counted_search()
    script = Script(
        {
            "lead": lambda req, turn: (
                [
                    tool_call("search", {"ctx_free_query": "lead"}, id="q-lead"),
                    spawn("researcher", "t"),
                ]
                if turn == 0
                else text("done")
            ),
            "researcher": search_then_answer,
        }
    )
    researcher = Agent("researcher", "R.", policy=Policy(rules={"search": "deny"}))
    lead = Agent("lead", "L.", tools=[counted], subagents=[researcher], model=script.model)

    result = await run(lead, "q")

    assert not result_for(result.messages, "q-lead").is_error
    assert result_for(result.children[0].messages, "q-researcher").is_error
    assert ran == ["lead"]


async def test_ancestors_confirm_beats_a_childs_allow_and_asks_the_approver() -> None:
    counted, ran = counted_search()
    asked: list[tuple[str, str]] = []

    def approver(call: Any) -> bool:
        asked.append((call.name, call.agent_path))
        return True

    script = Script({"lead": [spawn("researcher", "t")], "researcher": search_then_answer})
    researcher = Agent("researcher", "R.", policy=Policy(rules={"search": "allow"}))
    lead = Agent("lead", "L.", tools=[counted], subagents=[researcher], model=script.model)

    result = await run(lead, "q", policy=Policy(rules={"search": "confirm"}, approver=approver))

    assert not result_for(result.children[0].messages, "q-researcher").is_error
    assert asked == [("search", "lead/researcher#1")]
    assert ran == ["lead/researcher#1"]


async def test_spawn_subagent_is_gated_by_policy_like_any_tool() -> None:
    script = Script({"lead": [spawn("researcher", "t", id="s1")]})
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    result = await run(lead, "q", policy=Policy(rules={"spawn_subagent": "deny"}))

    assert result_for(result.messages, "s1").is_error
    assert result.children == []
    assert script.calls("researcher") == 0
