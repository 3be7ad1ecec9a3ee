"""Siblings share the cache: in a turn spawning several children of one definition, tool set and
model, on a provider with prompt caching, the first child's first call goes out alone and the
others' first calls wait for its response to start (or ``Limits.cache_warmup_wait``). Orders of
events on trio's virtual clock, never wall-clock windows."""

from __future__ import annotations

from typing import Any

import trio

from orchestrator import Agent, Limits, RunStatus, Usage, run, tool
from orchestrator.models import FunctionModel, response, text, tool_call
from orchestrator.models.base import ModelContext, ModelRequest, ModelResponse


@tool
def look(query: str) -> str:
    """Look something up.

    Args:
        query: what to look up
    """
    return "found"


class CachingModel:
    """A model declaring prompt caching: each call logs when it is sent and when its response
    starts (after ``first_token`` virtual seconds; ``None``: never says so), then answers."""

    provider = "test"
    prompt_caching = True

    def __init__(self, log: list[tuple[str, str, int]], first_token: float | None = 1.0) -> None:
        self.log = log
        self.first_token = first_token

    @property
    def name(self) -> str:
        return "caching"

    def cost(self, usage: Usage) -> float:
        return 0.0

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        turn = request.turn_index()
        self.log.append(("sent", request.agent.path, turn))
        await trio.sleep(self.first_token if self.first_token is not None else 100.0)
        if self.first_token is not None:
            self.log.append(("started", request.agent.path, turn))
            ctx.on_response_start()
        await trio.sleep(1.0)
        if turn == 0 and request.tools:
            return response(tool_call(request.tools[0].name, {"query": "q"}))
        return response(text(f"answer of {request.agent.path}"))


def _lead(calls: list[dict[str, Any]]) -> FunctionModel:
    def body(request: Any) -> Any:
        if any(b.type == "tool_result" for m in request.messages for b in m.content):
            return text("done")
        return [tool_call("spawn_subagent", c, id=f"s{i}") for i, c in enumerate(calls)]

    return FunctionModel(body)


def _first_calls(log: list[tuple[str, str, int]]) -> list[tuple[str, str]]:
    return [(event, path) for event, path, turn in log if turn == 0]


async def test_siblings_first_calls_wait_for_the_first_ones_response_to_start(
    autojump_clock: Any,
) -> None:
    log: list[tuple[str, str, int]] = []
    researcher = Agent("researcher", "R.", model=CachingModel(log), tools=[look])
    calls = [{"agent": "researcher", "task": f"part {i}"} for i in range(4)]
    lead = Agent("lead", "L.", subagents=[researcher], model=_lead(calls))

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    first = _first_calls(log)
    leader = first[0][1]
    assert first[:2] == [("sent", leader), ("started", leader)]  # alone until it responds
    assert sorted(p for e, p in first[2:] if e == "sent") == sorted(
        f"lead/researcher#{i}" for i in range(1, 5) if f"lead/researcher#{i}" != leader
    )
    # later calls are never held: every child's second call follows its own first
    seconds = [p for e, p, turn in log if e == "sent" and turn == 1]
    assert len(seconds) == 4


async def test_the_others_go_after_cache_warmup_wait_when_the_first_never_starts_responding(
    autojump_clock: Any,
) -> None:
    log: list[tuple[str, str, int]] = []
    researcher = Agent("researcher", "R.", model=CachingModel(log, first_token=None))
    calls = [{"agent": "researcher", "task": f"part {i}"} for i in range(3)]
    lead = Agent("lead", "L.", subagents=[researcher], model=_lead(calls))
    times: list[float] = []
    model = researcher.model
    assert isinstance(model, CachingModel)
    original = model.request

    async def timed(request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        times.append(trio.current_time())
        return await original(request, ctx)

    model.request = timed  # type: ignore[method-assign]

    start = trio.current_time()
    result = await run(lead, "q", limits=Limits(cache_warmup_wait=7.0))

    assert result.status is RunStatus.COMPLETED
    assert [round(t - start, 3) for t in sorted(times)] == [0.0, 7.0, 7.0]


async def test_different_definitions_tool_sets_or_a_provider_without_caching_change_nothing(
    autojump_clock: Any,
) -> None:
    log: list[tuple[str, str, int]] = []
    caching = CachingModel(log)
    a = Agent("a", "A.", model=caching, tools=[look])
    b = Agent("b", "B.", model=caching, tools=[look])
    calls = [
        {"agent": "a", "task": "t"},
        {"agent": "b", "task": "t"},  # another definition
        {"agent": "a", "task": "t", "tools": []},  # a's tools narrowed: another tool set
    ]
    lead = Agent("lead", "L.", subagents=[a, b], model=_lead(calls))

    await run(lead, "q")

    first = _first_calls(log)
    assert [e for e, _ in first[:3]] == ["sent", "sent", "sent"]  # all at once

    sent: list[float] = []

    async def answer(request: ModelRequest) -> Any:
        sent.append(trio.current_time())
        await trio.sleep(1.0)
        return text("x")

    plain = FunctionModel(answer)
    c = Agent("c", "C.", model=plain)
    lead = Agent("lead", "L.", subagents=[c], model=_lead([{"agent": "c", "task": "t"}] * 3))
    start = trio.current_time()

    await run(lead, "q")

    assert [t - start for t in sent] == [0.0, 0.0, 0.0]  # no prompt caching: none held
