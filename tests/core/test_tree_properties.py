"""Property tests over random agent trees and random scripts (hypothesis).

A tree has depth at most 3 and fan-out at most 3; each agent has a random tool list (or none:
its parent's), random per-agent limits and a random plan; the run has random tree-wide limits.
One FunctionModel plays every agent, deciding from the request (agent name, turn count), with
random latencies on trio's virtual clock. Whatever happens, at every node:

- the transcript is valid (each tool_use answered by exactly one tool_result in the next message);
- a child's tools are exactly its definition's (or its parent's) narrowed to what was asked, never
  more, and a spawn asking for more is refused before any child starts;
- the run ends within its limits (turns, children, depth, agents, concurrency, deadline);
- the ledger is never overshot (total billed tokens <= token_budget, per run and per sub-budget);
- usage adds up over the result tree, and children appear in spawn order.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator import Agent, Limits, Message, ModelError, RunResult, RunStatus, Usage, run, tool
from orchestrator.models import FunctionModel, response, text, tool_call

DEFAULTS = {
    "max_turns": 20,
    "timeout": 900.0,
    "token_budget": 2_000_000,
    "max_depth": 3,
    "max_children": 10,
    "max_agents": 100,
    "max_concurrency": 16,
}
SPAWN = "spawn_subagent"
OUTPUT_CAP = 200


# ---------------------------------------------------------------------------------------------
# tools


@tool
async def fast(x: int = 0) -> str:
    """Answer at once.

    Args:
        x: anything
    """
    return f"fast {x}"


@tool
async def slow(x: int = 0) -> str:
    """Answer after three seconds.

    Args:
        x: anything
    """
    await trio.sleep(3)
    return f"slow {x}"


@tool
async def boom(x: int = 0) -> str:
    """Always fail.

    Args:
        x: anything
    """
    raise RuntimeError("boom")


@tool
async def hang(x: int = 0) -> str:
    """Never return.

    Args:
        x: anything
    """
    await trio.sleep_forever()
    return "unreachable"


TOOLS = {t.name: t for t in (fast, slow, boom, hang)}
TOOL_NAMES = sorted(TOOLS)


# ---------------------------------------------------------------------------------------------
# random trees


@dataclass
class Spec:
    name: str
    tools: tuple[str, ...] | None
    limits: dict[str, Any]
    plan: list[tuple[Any, ...]]
    latency: float
    usage: str  # "worst": bill the whole reservation; "estimate": the model's default usage
    children: list[Spec] = field(default_factory=list)


def tool_step() -> st.SearchStrategy[tuple[Any, ...]]:
    names = st.lists(st.sampled_from([*TOOL_NAMES, "not_a_tool"]), min_size=1, max_size=3)
    return st.tuples(st.just("tools"), names.map(tuple))


def spawn_step(targets: list[str]) -> st.SearchStrategy[tuple[Any, ...]]:
    subset = st.none() | st.lists(st.sampled_from(TOOL_NAMES), unique=True, max_size=3).map(tuple)
    one = st.tuples(st.sampled_from(targets), subset)
    return st.tuples(st.just("spawn"), st.lists(one, min_size=1, max_size=3).map(tuple))


@st.composite
def specs(draw: Any, depth: int = 0, counter: Any = None) -> Spec:
    counter = counter if counter is not None else itertools.count()
    name = f"a{next(counter)}"
    n_children = draw(st.integers(1 if depth == 0 else 0, 3)) if depth < 3 else 0
    children = [draw(specs(depth + 1, counter)) for _ in range(n_children)]
    targets = [c.name for c in children] + ["ghost"]
    # a plan: usually a spawn first (when there is someone to spawn), then a few tool turns,
    # then an ending (an answer, a refusal, a model error, or none: the default answer).
    # At most one spawn turn per agent keeps trees small (at most 1 + 3 + 9 + 27 agents).
    plan: list[tuple[Any, ...]] = []
    if children and draw(st.integers(0, 9)) < 8:
        plan.append(draw(spawn_step(targets)))
    middle = tool_step() if children else (tool_step() | spawn_step(["ghost"]))
    plan.extend(draw(st.lists(middle, max_size=2)))
    ending = st.sampled_from(
        [(), (), ("answer",), ("answer",), ("refusal",), ("model_error",), ("spawn_late",)]
    )
    last = draw(ending)
    if last == ("spawn_late",):
        if children and not any(step[0] == "spawn" for step in plan):
            plan.append(draw(spawn_step(targets)))
    elif last:
        plan.append(last)
    tools = (
        None
        if depth == 0 and draw(st.booleans())
        else draw(
            st.none() | st.lists(st.sampled_from(TOOL_NAMES), unique=True, max_size=4).map(tuple)
        )
    )
    limits = {
        "max_turns": draw(st.sampled_from([None, None, None, 2, 3] + ([1] if depth else []))),
        "timeout": draw(st.sampled_from([None, None, None, 3.0])),
        "token_budget": draw(st.sampled_from([None, None, None, 2500])),
        "max_children": draw(st.sampled_from([None, None, 1, 2])),
        "max_depth": draw(st.sampled_from([None, None, None, 1, 2])),
    }
    return Spec(
        name=name,
        tools=tools,
        limits={k: v for k, v in limits.items() if v is not None},
        plan=plan,
        latency=draw(st.sampled_from([0.0, 0.1, 1.0])),
        usage=draw(st.sampled_from(["worst", "estimate"])),
        children=children,
    )


run_limits_strategy = st.fixed_dictionaries(
    {
        "timeout": st.sampled_from([None, 2.0, 10.0, 50.0]),
        "token_budget": st.sampled_from([None, 1500, 3000, 8000]),
        "max_agents": st.sampled_from([None, None, 3, 8]),
        "max_concurrency": st.sampled_from([None, 1, 2, 4]),
        "max_depth": st.sampled_from([None, None, 1, 2]),
        "max_children": st.sampled_from([None, None, 1, 2]),
        "tool_timeout": st.sampled_from([None, 5.0]),
    }
).map(lambda d: {k: v for k, v in d.items() if v is not None})


def all_specs(spec: Spec) -> Iterator[Spec]:
    yield spec
    for child in spec.children:
        yield from all_specs(child)


def build(spec: Spec, model: FunctionModel | None = None) -> Agent:
    return Agent(
        spec.name,
        f"You are {spec.name}.",
        description=f"agent {spec.name}",
        model=model,
        tools=None if spec.tools is None else [TOOLS[n] for n in spec.tools],
        subagents=[build(c) for c in spec.children],
        limits=Limits(**spec.limits) if spec.limits else None,
        max_output_tokens=OUTPUT_CAP,
    )


# ---------------------------------------------------------------------------------------------
# the model that plays every agent


class Player:
    def __init__(self, by_name: dict[str, Spec]) -> None:
        self.by_name = by_name
        self.requests: dict[str, list[Any]] = defaultdict(list)
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, req: Any) -> Any:
        spec = self.by_name[req.agent.name]
        self.requests[req.agent.path].append(
            {"depth": req.agent.depth, "tools": {t.name for t in req.tools}}
        )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if spec.latency:
                await trio.sleep(spec.latency)
            turn = sum(1 for m in req.messages if m.role == "assistant")
            step = spec.plan[turn] if turn < len(spec.plan) else ("answer",)
            kind = step[0]
            if kind == "model_error":
                raise ModelError(f"{req.agent.path} failed", kind="overloaded")
            if kind == "refusal":
                blocks: list[Any] = [text("I will not.")]
                stop = "refusal"
            elif kind == "answer":
                blocks, stop = [text(f"answer of {req.agent.path}")], "end_turn"
            elif kind == "tools":
                blocks = [tool_call(n, {"x": i}) for i, n in enumerate(step[1])]
                stop = "tool_use"
            else:  # spawn
                blocks = []
                for target, subset in step[1]:
                    args: dict[str, Any] = {"agent": target, "task": f"task from {req.agent.path}"}
                    if subset is not None:
                        args["tools"] = list(subset)
                    blocks.append(tool_call(SPAWN, args))
                stop = "tool_use"
            if spec.usage == "worst":
                usage = Usage(input_tokens=req.input_tokens_estimate, output_tokens=req.max_tokens)
                return response(*blocks, stop_reason=stop, usage=usage)
            return response(*blocks, stop_reason=stop)
        finally:
            self.in_flight -= 1


# ---------------------------------------------------------------------------------------------
# checks


def nodes(result: RunResult) -> Iterator[RunResult]:
    yield result
    for child in result.children:
        yield from nodes(child)


def assert_valid_transcript(messages: list[Message], where: str) -> None:
    assert messages and messages[0].role == "user", where
    for i, m in enumerate(messages):
        uses = [b.id for b in m.content if b.type == "tool_use"]
        results = [b.tool_use_id for b in m.content if b.type == "tool_result"]
        if i:
            assert m.role != messages[i - 1].role, f"{where}: roles do not alternate at {i}"
        if m.role == "assistant":
            assert not results, f"{where}: tool_result in assistant message {i}"
        if uses:
            assert i + 1 < len(messages), f"{where}: tool_use {uses} never answered"
            answered = [b.tool_use_id for b in messages[i + 1].content if b.type == "tool_result"]
            assert answered == uses, f"{where}: message {i + 1} answers {answered}, not {uses}"
        if results:
            asked = [b.id for b in messages[i - 1].content if b.type == "tool_use"]
            assert results == asked, f"{where}: message {i} answers {results}, asked {asked}"


def billed(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens


def effective(spec: Spec, parent_value: Any, run_limits: dict[str, Any], field: str) -> Any:
    """A per-agent field: own value, else the nearest ancestor's, else the run's, else default."""
    if field in spec.limits:
        return spec.limits[field]
    if parent_value is not None:
        return parent_value
    return run_limits.get(field, DEFAULTS[field])


PER_AGENT = ("max_turns", "max_children", "max_depth")


def check_tree(
    root_spec: Spec,
    by_name: dict[str, Spec],
    run_limits: dict[str, Any],
    result: RunResult,
    player: Player,
    elapsed: float,
) -> None:
    everything = list(nodes(result))
    paths = [n.path for n in everything]
    assert len(paths) == len(set(paths))
    assert set(player.requests) <= set(paths), "a model call from an agent missing in the tree"

    # tree-wide limits: the run's, tightened by the root's own
    def tree_wide(field: str) -> Any:
        values = [v for v in (run_limits.get(field), root_spec.limits.get(field)) if v is not None]
        return min(values) if values else DEFAULTS[field]

    assert billed(result.usage) <= tree_wide("token_budget"), "token budget overshot"
    assert len(everything) <= tree_wide("max_agents")
    assert player.max_in_flight <= tree_wide("max_concurrency")
    assert elapsed <= tree_wide("timeout") + 1e-6

    def visit(node: RunResult, spec: Spec, inherited: dict[str, Any], parent_tools: set[str]):
        where = node.path
        assert node.agent_name == spec.name
        eff = {f: effective(spec, inherited.get(f), run_limits, f) for f in PER_AGENT}
        assert_valid_transcript(node.messages, where)
        assert node.status is not RunStatus.CANCELLED, where  # nobody cancelled anything
        requests = player.requests.get(node.path, [])
        assert len(requests) <= eff["max_turns"], where
        if node.status is RunStatus.COMPLETED:
            assert node.error is None
            assert node.messages[-1].role == "assistant"
        else:
            assert node.error, f"{where}: {node.status} without a reason"
        if node.status is RunStatus.ERROR:
            # the only errors scripted here are model errors on the agent's own last turn
            last = len(requests) - 1
            assert 0 <= last < len(spec.plan) and spec.plan[last][0] == "model_error", (
                f"{where}: unexpected error {node.error!r}"
            )
        if "token_budget" in spec.limits:
            assert billed(node.usage) <= spec.limits["token_budget"], f"{where}: sub-budget"

        # tools: what the definition fixes (or the parent's), nothing more; spawn tool by depth
        own_tools = set(spec.tools) if spec.tools is not None else None
        held = set()
        for r in requests:
            assert r["depth"] == node.path.count("/"), where
            held = r["tools"] - {SPAWN}
            has_spawn = SPAWN in r["tools"]
            assert has_spawn == (bool(spec.children) and r["depth"] < eff["max_depth"]), where
            if node.path == result.path:
                assert held == (own_tools or set()), where
            else:
                assert held <= (own_tools if own_tools is not None else parent_tools), where

        # usage adds up
        for f in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            total = getattr(node.own_usage, f) + sum(getattr(c.usage, f) for c in node.children)
            assert getattr(node.usage, f) == total, f"{where}: usage.{f}"

        # children: one per started spawn, in call order, each narrowed as asked
        assert len(node.children) <= eff["max_children"], where
        if node.children:
            assert node.path.count("/") < eff["max_depth"], where
        results = {
            b.tool_use_id: b for m in node.messages for b in m.content if b.type == "tool_result"
        }
        ordinals: dict[str, int] = defaultdict(int)
        expected_order = []
        by_path = {c.path: c for c in node.children}
        for m in node.messages:
            for call in (b for b in m.content if b.type == "tool_use" and b.name == SPAWN):
                target = call.input.get("agent")
                outcome = results[call.id]
                if target not in by_name or by_name[target] not in spec.children:
                    assert outcome.is_error, f"{where}: spawn of unknown {target!r} not refused"
                    continue
                child_spec = by_name[target]
                base = set(child_spec.tools) if child_spec.tools is not None else held
                asked = call.input.get("tools")
                if asked is not None and not set(asked) <= base:
                    # refused before starting: no child (the order check below would see an
                    # extra one) and no number taken
                    assert outcome.is_error, f"{where}: a wide request to {target!r} not refused"
                    continue
                ordinals[target] += 1
                child_path = f"{node.path}/{target}#{ordinals[target]}"
                child = by_path.get(child_path)
                if child is None:
                    assert outcome.is_error, f"{where}: {child_path} missing but not refused"
                    continue
                expected_order.append(child_path)
                if child.status is RunStatus.COMPLETED:
                    assert not outcome.is_error and outcome.content == child.output
                else:
                    assert outcome.is_error and child.status.value in outcome.content
                allowed = base if asked is None else set(asked)
                for r in player.requests.get(child_path, []):
                    assert r["tools"] - {SPAWN} == allowed, f"{child_path}: tools not narrowed"
        assert [c.path for c in node.children] == expected_order, f"{where}: children order"
        for child in node.children:
            visit(child, by_name[child.agent_name], eff, held)

    visit(result, root_spec, {}, set())


# ---------------------------------------------------------------------------------------------
# the properties


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(root_spec=specs(), run_limits=run_limits_strategy)
def test_random_trees_keep_every_invariant(root_spec: Spec, run_limits: dict[str, Any]) -> None:
    by_name = {s.name: s for s in all_specs(root_spec)}
    player = Player(by_name)
    agent = build(root_spec, FunctionModel(player))
    out: dict[str, Any] = {}

    async def main() -> None:
        start = trio.current_time()
        with trio.fail_after(100_000):  # virtual seconds: a hang fails instead of blocking
            out["result"] = await run(agent, "the question", limits=Limits(**run_limits))
        out["elapsed"] = trio.current_time() - start

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    result = out["result"]
    event(
        f"agents: {min(sum(1 for _ in nodes(result)), 5)}{'+' if sum(1 for _ in nodes(result)) >= 5 else ''}"
    )
    for status in sorted({n.status.value for n in nodes(result)}):
        event(f"status seen: {status}")
    check_tree(root_spec, by_name, run_limits, result, player, out["elapsed"])


@settings(max_examples=30, deadline=None, database=None)
@given(
    fanout=st.integers(1, 3),
    depth=st.integers(1, 3),
    budget=st.integers(1500, 6000),
    concurrency=st.sampled_from([None, 1, 2, 3]),
)
def test_ledger_is_never_overshot_by_full_parallel_trees(
    fanout: int, depth: int, budget: int, concurrency: int | None
) -> None:
    """Every agent spawns ``fanout`` children (while it may) and then keeps calling a tool;
    every call bills its whole reservation. However the budget is split, it holds."""
    requests: dict[str, int] = defaultdict(int)

    async def play(req: Any) -> Any:
        requests[req.agent.path] += 1
        await trio.sleep(0.5)
        turn = sum(1 for m in req.messages if m.role == "assistant")
        if turn == 0 and any(t.name == SPAWN for t in req.tools):
            blocks = [
                tool_call(SPAWN, {"agent": "worker", "task": f"part {i}"}) for i in range(fanout)
            ]
        else:
            blocks = [tool_call("fast", {"x": turn})]
        usage = Usage(input_tokens=req.input_tokens_estimate, output_tokens=req.max_tokens)
        return response(*blocks, usage=usage)

    worker = Agent("worker", "W.", tools=[fast], subagents=["worker"], max_output_tokens=150)
    out: dict[str, Any] = {}

    async def main() -> None:
        limits = Limits(token_budget=budget, max_depth=depth, max_concurrency=concurrency)
        with trio.fail_after(100_000):
            out["result"] = await run(worker, "go", model=FunctionModel(play), limits=limits)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    result = out["result"]
    assert billed(result.usage) <= budget
    assert sum(requests.values()) == sum(n.own_usage.requests for n in nodes(result))
    for node in nodes(result):
        assert_valid_transcript(node.messages, node.path)
        assert node.status in (
            RunStatus.BUDGET_EXCEEDED,
            RunStatus.COMPLETED,
            RunStatus.MAX_TURNS,
            RunStatus.REPEAT_GUARD,
        ), (node.path, node.status, node.error)
    assert any(n.status is RunStatus.BUDGET_EXCEEDED for n in nodes(result))
