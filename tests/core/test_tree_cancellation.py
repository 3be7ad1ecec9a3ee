"""Stopping a tree through the public API: ``handle.cancel()``, an enclosing cancel scope,
leaving ``open_run`` early, a deadline, and a fatal model error. Every way keeps the tree's
transcripts valid, stops promptly, and leaves no task running.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from support.trees import (
    Script,
    assert_valid_transcript,
    live_tasks,
    nodes,
    spawn,
    tool_results,
)

from orchestrator import (
    Agent,
    Limits,
    ModelError,
    RunStatus,
    open_run,
    run,
    tool,
)
from orchestrator.models import text, tool_call

# ---------------------------------------------------------------------------------------------
# helpers


@tool
async def search(query: str) -> str:
    """Search the corpus.

    Args:
        query: what to look for
    """
    return f"hits for {query}"


@tool
async def hang() -> str:
    """Wait for something that never comes."""
    await trio.sleep_forever()
    return "unreachable"


def busy_tree(script: Script) -> Agent:
    """lead -> stuck_in_tool (searched once, now hangs in a tool), stuck_in_model (a model
    call that takes 1000 s), delegator -> stuck_in_tool; plus quick, which completes."""
    stuck_in_tool = Agent("stuck_in_tool", "T.", tools=[search, hang])
    stuck_in_model = Agent("stuck_in_model", "M.")
    delegator = Agent("delegator", "D.", subagents=[stuck_in_tool])
    quick = Agent("quick", "Q.")
    return Agent(
        "lead",
        "L.",
        subagents=[stuck_in_tool, stuck_in_model, delegator, quick],
        model=script.model,
    )


BUSY_PLANS: dict[str, Any] = {
    "lead": [
        [
            spawn("stuck_in_tool", "a", id="s-tool"),
            spawn("stuck_in_model", "b", id="s-model"),
            spawn("delegator", "c", id="s-deleg"),
            spawn("quick", "d", id="s-quick"),
        ],
        text("lead should never get here"),
    ],
    "stuck_in_tool": [
        tool_call("search", {"query": "first"}, id="search-1"),
        [text("now waiting"), tool_call("hang", {}, id="hang-1")],
    ],
    "delegator": [spawn("stuck_in_tool", "deeper", id="s-deeper")],
    "quick": [text("quick answer")],
}


def busy_latency(req: Any) -> float:
    return 1000.0 if req.agent.name == "stuck_in_model" else 0.5


# ---------------------------------------------------------------------------------------------
# handle.cancel()


async def test_handle_cancel_returns_cancelled_result_with_every_started_child_present(
    autojump_clock,
) -> None:
    script = Script(BUSY_PLANS, latency=busy_latency)
    lead = busy_tree(script)
    tasks_before = live_tasks()

    async with open_run(lead, "q") as handle:
        await trio.sleep(10)
        cancelled_at = trio.current_time()
        handle.cancel()
        result = await handle.result()
        assert trio.current_time() - cancelled_at < 0.01  # promptly

    assert result.status is RunStatus.CANCELLED
    assert result.error and "\n" not in result.error
    assert [c.path for c in result.children] == [
        "lead/stuck_in_tool#1",
        "lead/stuck_in_model#1",
        "lead/delegator#1",
        "lead/quick#1",
    ]
    assert [c.path for c in result.children[2].children] == ["lead/delegator#1/stuck_in_tool#1"]
    statuses = {n.path: n.status for n in nodes(result)}
    assert statuses == {
        "lead": RunStatus.CANCELLED,
        "lead/stuck_in_tool#1": RunStatus.CANCELLED,
        "lead/stuck_in_model#1": RunStatus.CANCELLED,
        "lead/delegator#1": RunStatus.CANCELLED,
        "lead/delegator#1/stuck_in_tool#1": RunStatus.CANCELLED,
        "lead/quick#1": RunStatus.COMPLETED,
    }
    for node in nodes(result):
        assert_valid_transcript(node.messages)
    assert live_tasks() == tasks_before


async def test_cancelled_children_keep_their_transcripts_up_to_the_cut(autojump_clock) -> None:
    script = Script(BUSY_PLANS, latency=busy_latency)

    async with open_run(busy_tree(script), "q") as handle:
        await trio.sleep(10)
        handle.cancel()
        result = await handle.result()

    stuck = result.children[0]
    # prompt, search call, its result, the hang call, a synthetic result for it
    assert [m.role for m in stuck.messages] == ["user", "assistant", "user", "assistant", "user"]
    first, cut = tool_results(stuck.messages)
    assert (first.tool_use_id, first.content, first.is_error) == (
        "search-1",
        "hits for first",
        False,
    )
    assert cut.tool_use_id == "hang-1" and cut.is_error
    # the lead's spawns in flight got synthetic results too; the finished one kept its answer
    by_id = {b.tool_use_id: b for b in tool_results(result.messages)}
    assert set(by_id) == {"s-tool", "s-model", "s-deleg", "s-quick"}
    assert by_id["s-quick"].content == "quick answer" and not by_id["s-quick"].is_error
    assert all(by_id[i].is_error for i in ("s-tool", "s-model", "s-deleg"))
    # the child stuck in its first model call has only its task
    model_child = result.children[1]
    assert [m.role for m in model_child.messages] == ["user"]
    assert script.calls("lead") == 1


async def test_handle_cancel_from_another_task_stops_the_tree(autojump_clock) -> None:
    script = Script(BUSY_PLANS, latency=busy_latency)

    async with open_run(busy_tree(script), "q") as handle:
        async with trio.open_nursery() as nursery:

            async def canceller() -> None:
                await trio.sleep(7)
                handle.cancel()

            nursery.start_soon(canceller)
            result = await handle.result()
        assert trio.current_time() == pytest.approx(7.0, abs=0.01)

    assert result.status is RunStatus.CANCELLED
    assert len(list(nodes(result))) == 6


async def test_handle_cancel_while_the_root_waits_for_its_model_keeps_a_valid_transcript(
    autojump_clock,
) -> None:
    script = Script({"lead": [text("too late")]}, latency=100.0)
    lead = Agent("lead", "L.", model=script.model)

    async with open_run(lead, "q") as handle:
        await trio.sleep(1)
        handle.cancel()
        result = await handle.result()

    assert result.status is RunStatus.CANCELLED
    assert [m.role for m in result.messages] == ["user"]
    assert result.output == ""


async def test_handle_cancel_after_the_run_finished_changes_nothing(autojump_clock) -> None:
    script = Script({"lead": [spawn("quick", "t")], "quick": [text("fine")]})
    lead = Agent("lead", "L.", subagents=[Agent("quick", "Q.")], model=script.model)

    async with open_run(lead, "q") as handle:
        result = await handle.result()
        handle.cancel()
        again = await handle.result()

    assert result.status is RunStatus.COMPLETED
    assert again.status is RunStatus.COMPLETED
    assert again.children[0].status is RunStatus.COMPLETED


async def test_leaving_open_run_early_cancels_the_tree_and_leaves_no_task(autojump_clock) -> None:
    script = Script(BUSY_PLANS, latency=busy_latency)
    tasks_before = live_tasks()

    async with open_run(busy_tree(script), "q") as handle:
        await trio.sleep(10)
    left_at = trio.current_time()

    assert handle.done
    assert live_tasks() == tasks_before
    result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    assert len(list(nodes(result))) == 6
    for node in nodes(result):
        assert_valid_transcript(node.messages)
    assert left_at == pytest.approx(10.0, abs=0.01)


# ---------------------------------------------------------------------------------------------
# an enclosing cancel scope


async def test_enclosing_cancel_scope_stops_the_whole_tree_promptly(autojump_clock) -> None:
    script = Script(BUSY_PLANS, latency=busy_latency)
    tasks_before = live_tasks()
    nurseries_before = list(trio.lowlevel.current_task().child_nurseries)

    start = trio.current_time()
    with trio.move_on_after(3) as scope:
        await run(busy_tree(script), "q")
    stopped = trio.current_time() - start

    assert scope.cancelled_caught
    assert stopped == pytest.approx(3.0, abs=0.01)
    assert live_tasks() == tasks_before
    assert trio.lowlevel.current_task().child_nurseries == nurseries_before
    assert script.calls("lead") == 1


async def test_enclosing_cancel_scope_with_real_clock_returns_at_once() -> None:
    script = Script(BUSY_PLANS, latency=lambda req: 1000.0 if req.agent.depth else 0.0)
    tasks_before = live_tasks()

    # the children's calls take 1,000 s: "at once" is well under that, whatever the load (the
    # test itself fails rather than hangs)
    with trio.fail_after(30):
        with trio.move_on_after(0.2) as scope:
            await run(busy_tree(script), "q")

    assert scope.cancelled_caught
    assert live_tasks() == tasks_before


async def test_enclosing_cancel_scope_around_open_run_ends_the_run(autojump_clock) -> None:
    script = Script(BUSY_PLANS, latency=busy_latency)
    tasks_before = live_tasks()

    with trio.move_on_after(4) as scope:
        async with open_run(busy_tree(script), "q") as handle:
            await handle.result()

    assert scope.cancelled_caught
    assert handle.done
    assert live_tasks() == tasks_before


# ---------------------------------------------------------------------------------------------
# the deadline stops a wide tree


async def test_deadline_stops_a_wide_tree_with_every_node_valid_and_no_task_left(
    autojump_clock,
) -> None:
    script = Script(
        {
            "lead": [[spawn("researcher", f"r{i}") for i in range(5)]],
            "researcher": [[spawn("reader", "x"), spawn("reader", "y"), tool_call("hang", {})]],
            "reader": [tool_call("hang", {})],
        },
        latency=0.1,
    )
    reader = Agent("reader", "Read.", tools=[hang])
    researcher = Agent("researcher", "R.", tools=[hang], subagents=[reader])
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)
    tasks_before = live_tasks()

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(timeout=1))

    assert trio.current_time() - start == pytest.approx(1.0, abs=0.01)
    assert result.status is RunStatus.TIMEOUT
    all_nodes = list(nodes(result))
    assert len(all_nodes) == 1 + 5 + 10
    for node in all_nodes:
        assert node.status is RunStatus.TIMEOUT, node.path
        assert_valid_transcript(node.messages)
    assert live_tasks() == tasks_before


# ---------------------------------------------------------------------------------------------
# a fatal model error ends the whole run


def fatal_in(agent_name: str, plans: dict[str, Any]) -> dict[str, Any]:
    def fail(req: Any, turn: int) -> Any:
        raise ModelError("invalid x-api-key", fatal=True, kind="authentication")

    return {**plans, agent_name: fail}


async def test_fatal_model_error_in_a_child_ends_the_whole_run_with_error(autojump_clock) -> None:
    plans = fatal_in(
        "broken",
        {
            "lead": [
                [spawn("broken", "a", id="s-broken"), spawn("slow", "b", id="s-slow")],
                spawn("broken", "try again"),
                text("never"),
            ],
            "slow": [text("slow answer")],
        },
    )
    script = Script(plans, latency=lambda req: 100.0 if req.agent.name == "slow" else 1.0)
    lead = Agent(
        "lead",
        "L.",
        subagents=[Agent("broken", "B."), Agent("slow", "S.")],
        model=script.model,
    )
    tasks_before = live_tasks()

    start = trio.current_time()
    result = await run(lead, "q")

    assert result.status is RunStatus.ERROR
    assert "x-api-key" in (result.error or "")
    assert script.calls("lead") == 1  # the lead was not allowed to spawn again
    assert script.calls("broken") == 1
    assert trio.current_time() - start < 10  # the slow sibling was stopped, not waited for
    assert [c.path for c in result.children] == ["lead/broken#1", "lead/slow#1"]
    assert result.children[0].status is RunStatus.ERROR
    assert result.children[1].status in (RunStatus.ERROR, RunStatus.CANCELLED)
    for node in nodes(result):
        assert_valid_transcript(node.messages)
    assert live_tasks() == tasks_before


async def test_fatal_model_error_in_a_grandchild_ends_the_whole_run_with_error(
    autojump_clock,
) -> None:
    plans = fatal_in(
        "leaf",
        {
            "lead": [spawn("mid", "a"), spawn("mid", "again"), text("never")],
            "mid": [spawn("leaf", "b"), spawn("leaf", "again"), text("never")],
        },
    )
    script = Script(plans, latency=0.5)
    leaf = Agent("leaf", "Leaf.")
    lead = Agent("lead", "L.", subagents=[Agent("mid", "M.", subagents=[leaf])], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.ERROR
    assert script.calls("lead") == 1
    assert script.calls("mid") == 1
    assert script.calls("leaf") == 1
    assert len(list(nodes(result))) == 3
    for node in nodes(result):
        assert node.status is RunStatus.ERROR, node.path
        assert_valid_transcript(node.messages)


async def test_non_fatal_model_error_in_a_child_lets_the_parent_go_on(autojump_clock) -> None:
    def flaky(req: Any, turn: int) -> Any:
        raise ModelError("overloaded after retries", kind="overloaded")

    script = Script({"lead": [spawn("flaky", "a"), text("answered without it")], "flaky": flaky})
    lead = Agent("lead", "L.", subagents=[Agent("flaky", "F.")], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert result.children[0].status is RunStatus.ERROR
    assert script.calls("lead") == 2
