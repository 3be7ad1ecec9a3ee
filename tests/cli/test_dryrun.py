"""The dry run's worst case (orchestrator.dryrun) bounds what a real run of the tree can do."""

from __future__ import annotations

from orchestrator import Agent, Limits, run, tool
from orchestrator.cli.dryrun import worst_case
from orchestrator.core.compaction import ContextPolicy
from orchestrator.models import FunctionModel, ModelRequest, response, text, tool_call


@tool
def echo(x: str) -> str:
    """Echo, at length.

    Args:
        x: what to echo
    """
    return x * 50


async def test_retries_and_compactions_stay_within_the_worst_case() -> None:
    caps: list[int] = []

    def every_tool_call_cut_once(request: ModelRequest) -> object:
        caps.append(request.max_tokens)
        if "Context checkpoint" in " ".join(
            getattr(b, "text", "") for b in request.messages[-1].content
        ):
            return text("Goal: echo. Work left: more echoes.")
        if request.max_tokens == 100:  # the first try of each turn is cut; the retry is whole
            return response(tool_call("echo", {"x": "a"}), stop_reason="max_tokens")
        return tool_call("echo", {"x": f"b{len(caps)}"})

    agent = Agent(
        "echoer",
        "Echo.",
        tools=[echo],
        model=FunctionModel(every_tool_call_cut_once),
        max_output_tokens=100,
        limits=Limits(max_turns=3, repeat_limit=10),
        context=ContextPolicy(compact_at_tokens=50),  # compacts before every turn
    )
    bound = worst_case(agent)
    await run(agent, "go")
    assert len(caps) > 2 * 3  # more than two calls per turn: the old bound was not one
    assert len(caps) <= bound["worst_case_model_calls"]
    assert sum(caps) <= bound["worst_case_output_tokens"]


def _lead_of(*subagents: Agent) -> Agent:
    """A lead of one turn that may start one child."""
    return Agent(
        "lead",
        "L.",
        subagents=list(subagents),
        model=FunctionModel(lambda request: text("unused")),
        limits=Limits(max_children=1, max_depth=1, max_turns=1),
    )


def test_every_spawn_is_counted_as_the_costliest_subagent() -> None:
    cheap = Agent("cheap", "C.", description="cheap", limits=Limits(max_turns=1))
    dear = Agent(
        "dear", "D.", description="dear", limits=Limits(max_turns=50), max_output_tokens=8000
    )
    bound = worst_case(_lead_of(cheap, dear))
    assert bound["worst_case_agents"] == 2
    # the lead's one turn and dear's fifty, each a call and a retry (no compaction: no window)
    assert bound["worst_case_model_calls"] == 2 * 1 + 2 * 50
    assert bound["worst_case_output_tokens"] >= 2 * 50 * 8000


async def test_the_bound_holds_when_max_agents_is_spent_breadth_first() -> None:
    calls = 0

    @tool
    def note(i: int) -> str:
        """Record a number.

        Args:
            i: the number
        """
        return "ok"

    def answer(request: ModelRequest) -> object:
        nonlocal calls
        calls += 1
        if request.agent.name == "root":
            if request.turn_index() == 0:
                return [
                    tool_call("spawn_subagent", {"agent": "a", "task": "one"}),
                    tool_call("spawn_subagent", {"agent": "a", "task": "two"}),
                ]
            return text("done")
        # each of a's turns: a tool call cut by max_tokens, then its retry
        stop = "max_tokens" if request.max_tokens == 4096 else "tool_use"
        return response(tool_call("note", {"i": calls}), stop_reason=stop)

    b = Agent("b", "B.", description="b", limits=Limits(max_turns=1))
    a = Agent("a", "A.", description="a", tools=[note], subagents=[b], limits=Limits(max_turns=10))
    root = Agent(
        "root",
        "R.",
        model=FunctionModel(answer),
        subagents=[a],
        limits=Limits(max_turns=2, max_agents=3, max_children=2, max_depth=2),
    )
    bound = worst_case(root)  # a walk into root -> a -> b would count 26 calls
    await run(root, "go")
    assert calls == 42
    assert calls <= bound["worst_case_model_calls"]


def test_calls_and_tokens_each_take_their_own_costliest_subagent() -> None:
    many_turns = Agent(
        "many", "M.", description="m", limits=Limits(max_turns=10), max_output_tokens=100
    )
    big_output = Agent(
        "big", "B.", description="b", limits=Limits(max_turns=5), max_output_tokens=32_000
    )
    bound = worst_case(_lead_of(many_turns, big_output))
    assert bound["worst_case_model_calls"] == 2 * 1 + 2 * 10  # the lead, then "many"
    assert bound["worst_case_output_tokens"] >= 5 * (32_000 + 64_000)  # "big": cap and retry


def test_agents_that_list_each_other_are_bounded_without_walking_every_path() -> None:
    names = [f"w{i}" for i in range(6)]
    workers = [Agent(n, "W.", description=n, subagents=names) for n in names]
    lead = Agent(
        "lead",
        "L.",
        subagents=workers,
        model=FunctionModel(lambda request: text("unused")),
        limits=Limits(max_depth=12, max_children=6, max_agents=1_000),
    )
    bound = worst_case(lead)  # 6 ** 12 paths: a walk of each would not finish
    assert bound["worst_case_agents"] == 1_000
