"""The ChildRunner seam: every child goes through the run's runner as a plain-data ChildSpec."""

from __future__ import annotations

import math
import pickle

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import Agent, ConfigurationError, Limits, RunStatus, run, tool
from orchestrator.core.inprocess import InProcessRunner
from orchestrator.core.messages import Usage
from orchestrator.core.runner import ChildOutcome, ChildRunner, ChildSpec, Parent
from orchestrator.models import FunctionModel, ScriptedModel, text, tool_call


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


WORKER = Agent("worker", "w", description="works", tools=[lookup])
LEAD = Agent("lead", "l", subagents=[WORKER], tools=[lookup])


def spawning_model(n: int = 2) -> ScriptedModel:
    calls = [
        tool_call("spawn_subagent", {"agent": "worker", "task": f"t{i}", "tools": ["lookup"]})
        for i in range(n)
    ]
    return ScriptedModel({"lead": [calls, text("all done")], "worker": [text("worked")]})


class RecordingRunner:
    """Runs children in process, keeping each spec it was handed."""

    def __init__(self) -> None:
        self.specs: list[ChildSpec] = []
        self.inner = InProcessRunner()

    async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
        self.specs.append(spec)
        return await self.inner.run(spec, parent)


async def test_every_child_goes_through_the_runner_as_a_spec_that_pickles():
    runner = RecordingRunner()
    assert isinstance(runner, ChildRunner)
    result = await run(
        LEAD, "go", model=spawning_model(), runner=runner, limits=Limits(token_budget=100_000)
    )
    assert result.status is RunStatus.COMPLETED
    assert sorted(s.path for s in runner.specs) == ["lead/worker#1", "lead/worker#2"]
    for spec in runner.specs:
        assert pickle.loads(pickle.dumps(spec)) == spec
        assert (spec.tree, spec.agent, spec.depth, spec.tools) == ("lead", "worker", 1, ("lookup",))
        assert spec.task in {"t0", "t1"}
        assert 0 < spec.lease.tokens <= 100_000 and spec.lease.cost_usd == math.inf
        assert spec.deadline > 0  # the run's default timeout, on the wall clock
        assert spec.trace_context == ()  # not traced
    assert [c.path for c in result.children] == ["lead/worker#1", "lead/worker#2"]


async def test_a_traced_spec_carries_the_spawn_spans_trace_context():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runner = RecordingRunner()
    await run(LEAD, "go", model=spawning_model(1), runner=runner, tracer_provider=provider)
    [spec] = runner.specs
    spawn = next(
        s for s in exporter.get_finished_spans() if s.name == "execute_tool spawn_subagent"
    )
    trace_id = format(spawn.context.trace_id, "032x")
    span_id = format(spawn.context.span_id, "016x")
    assert dict(spec.trace_context)["traceparent"].startswith(f"00-{trace_id}-{span_id}-")


async def test_the_parent_sees_only_the_outcome_a_runner_returns():
    class Elsewhere:
        """A runner that runs nothing here: the answer comes from 'another machine'."""

        async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
            return ChildOutcome(
                spec.path,
                RunStatus.COMPLETED,
                f"remote answer to {spec.task}",
                None,
                Usage(),
                1,
                "",
            )

    seen = []

    def lead_answer(request):
        if len(request.messages) == 1:
            return [tool_call("spawn_subagent", {"agent": "worker", "task": "t"})]
        seen.append(request.messages[-1].content[0].content)
        return text("done")

    result = await run(LEAD, "go", model=FunctionModel(lead_answer), runner=Elsewhere())
    assert result.status is RunStatus.COMPLETED
    assert seen == ["remote answer to t"]


async def test_a_child_that_failed_elsewhere_is_an_error_result_with_its_summary():
    class Failing:
        async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
            return ChildOutcome(
                spec.path, RunStatus.TIMEOUT, "", "deadline reached", Usage(), 3, "It took 3 turns."
            )

    model = ScriptedModel(
        {"lead": [[tool_call("spawn_subagent", {"agent": "worker", "task": "t"})], text("ok")]}
    )
    result = await run(LEAD, "go", model=model, runner=Failing())
    [res] = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert res.is_error
    assert (
        "lead/worker#1 ended with status timeout: deadline reached. It took 3 turns." in res.content
    )


async def test_a_runner_that_is_not_one_is_refused():
    with pytest.raises(ConfigurationError, match="ChildRunner"):
        await run(LEAD, "go", model=spawning_model(), runner=object())
