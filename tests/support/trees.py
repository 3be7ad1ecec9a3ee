"""Helpers for tree tests: a scriptable FunctionModel body, and checks over result trees."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import trio

from orchestrator import Message, RunResult
from orchestrator.models import FunctionModel, text, tool_call


def turn_of(request: Any) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def spawn(agent: str, task: str, tools: list[str] | None = None, id: str | None = None) -> Any:
    args: dict[str, Any] = {"agent": agent, "task": task}
    if tools is not None:
        args["tools"] = tools
    return tool_call("spawn_subagent", args, id=id)


class Script:
    """A FunctionModel body: ``plans[agent_name]`` is a list of steps (by turn) or a function
    ``(request, turn) -> step``; past the end of a list the agent answers ``done <path>``.
    Records a snapshot of every request and the model calls in flight (overall and by agent
    name)."""

    def __init__(
        self,
        plans: dict[str, Any],
        latency: float | Callable[[Any], float] = 0.0,
    ) -> None:
        self.plans = plans
        self.latency = latency
        self.requests: list[Any] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.in_flight_by: dict[str, int] = defaultdict(int)
        self.max_in_flight_by: dict[str, int] = defaultdict(int)

    async def __call__(self, request: Any) -> Any:
        name = request.agent.name
        self.requests.append(
            SimpleNamespace(
                agent=request.agent,
                system=request.system,
                tools=list(request.tools),
                max_tokens=request.max_tokens,
                messages=list(request.messages),
            )
        )
        self.in_flight += 1
        self.in_flight_by[name] += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.max_in_flight_by[name] = max(self.max_in_flight_by[name], self.in_flight_by[name])
        try:
            delay = self.latency(request) if callable(self.latency) else self.latency
            if delay:
                await trio.sleep(delay)
            plan = self.plans.get(name, [])
            turn = turn_of(request)
            if callable(plan):
                return plan(request, turn)
            if turn < len(plan):
                step = plan[turn]
                return step(request) if callable(step) else step
            return text(f"done {request.agent.path}")
        finally:
            self.in_flight -= 1
            self.in_flight_by[name] -= 1

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)

    def calls(self, agent_name: str) -> int:
        return sum(1 for r in self.requests if r.agent.name == agent_name)

    def calls_at(self, path: str) -> int:
        return sum(1 for r in self.requests if r.agent.path == path)

    def tool_names(self, path: str) -> set[str]:
        return {t.name for t in self.first_request(path).tools}

    def first_request(self, path: str) -> Any:
        return next(r for r in self.requests if r.agent.path == path)

    def paths(self) -> list[str]:
        return sorted({r.agent.path for r in self.requests})


def nodes(result: RunResult) -> Iterator[RunResult]:
    yield result
    for child in result.children:
        yield from nodes(child)


def assert_valid_transcript(messages: list[Message]) -> None:
    """Every tool_use is answered by exactly one tool_result, all in the next user message, in
    call order; no tool_result answers anything else."""
    for i, m in enumerate(messages):
        uses = [b.id for b in m.content if b.type == "tool_use"]
        results = [b.tool_use_id for b in m.content if b.type == "tool_result"]
        if m.role == "assistant":
            assert not results, f"message {i}: tool_result in an assistant message"
        if uses:
            assert m.role == "assistant"
            assert i + 1 < len(messages), f"message {i}: tool_use {uses} never answered"
            nxt = messages[i + 1]
            assert nxt.role == "user"
            answered = [b.tool_use_id for b in nxt.content if b.type == "tool_result"]
            assert answered == uses, f"message {i + 1} answers {answered}, expected {uses}"
        if results:
            assert i > 0
            asked = [b.id for b in messages[i - 1].content if b.type == "tool_use"]
            assert results == asked, f"message {i} answers {results}, asked were {asked}"


def tool_results(messages: list[Message]) -> list[Any]:
    return [b for m in messages for b in m.content if b.type == "tool_result"]


def result_for(messages: list[Message], call_id: str) -> Any:
    return next(b for b in tool_results(messages) if b.tool_use_id == call_id)


def live_tasks() -> int:
    """How many trio tasks exist right now (the whole task tree)."""
    count = 0
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count
