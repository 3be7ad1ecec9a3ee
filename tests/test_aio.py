"""orchestrator.aio from plain ``asyncio.run`` programs: trio hosted as a guest on the loop.

Each test is a sync function that runs its own asyncio loop (``asyncio.run``), as a program
would. Spans go to an in-memory exporter through a provider passed to the run.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator import Agent, ConfigurationError, RunStatus, aio, run, run_sync, tool
from orchestrator.core.events import AgentFinished, AgentStarted
from orchestrator.models import FunctionModel, ScriptedModel, text, tool_call

EXAMPLES = Path(__file__).parents[1] / "examples"


@tool
async def nap(ms: int) -> str:
    """Sleep on asyncio.

    Args:
        ms: How long, in milliseconds.
    """
    task = asyncio.current_task()  # a real asyncio task, so asyncio.timeout works
    assert task is not None
    async with asyncio.timeout(30):
        await asyncio.sleep(ms / 1000)
    return f"slept {ms}"


def napper(ms: int, name: str = "napper") -> Agent:
    return Agent(
        name,
        "Nap, then answer.",
        tools=[nap],
        model=ScriptedModel([tool_call("nap", {"ms": ms}), text(f"napped {ms}")]),
    )


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp, exporter


def test_a_tree_is_awaited_from_asyncio_and_its_asyncio_tool_runs_on_the_loop() -> None:
    async def main() -> Any:
        return await aio.run(napper(20), "nap")

    result = asyncio.run(main())
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "napped 20"
    [block] = result.messages[2].content
    assert block.content == "slept 20" and not block.is_error


def test_fifty_concurrent_runs_share_one_loop_and_overlap() -> None:
    # every run's tool waits until all fifty are in their tool at once: runs that did not
    # overlap would never get there (each gives up after 30 s, and the test fails)
    async def main() -> list[Any]:
        arrived = 0
        everyone = asyncio.Event()
        give_up_at = asyncio.get_running_loop().time() + 30

        @tool
        async def meet() -> str:
            """Wait for the other runs' tools."""
            nonlocal arrived
            arrived += 1
            if arrived == 50:
                everyone.set()
            async with asyncio.timeout_at(give_up_at):
                await everyone.wait()
            return "met"

        def meeter() -> Agent:
            model = ScriptedModel([tool_call("meet", {}), text("met")])
            return Agent("meeter", "Meet, then answer.", tools=[meet], model=model)

        return await asyncio.gather(*(aio.run(meeter(), "meet") for _ in range(50)))

    results = asyncio.run(main())
    assert {r.status for r in results} == {RunStatus.COMPLETED}
    assert {r.messages[2].content[0].content for r in results} == {"met"}


def test_the_loop_keeps_ticking_while_a_tree_runs() -> None:
    # the tree's tool waits for three beats of a heartbeat on the same loop: run_sync would
    # hold the loop, no beat would come, and the tool would give up after 30 s
    async def main() -> Any:
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        @tool
        async def listen() -> str:
            """Wait for three heartbeats."""
            until = ticks + 3
            async with asyncio.timeout(30):
                while ticks < until:
                    await asyncio.sleep(0.01)
            return "heard three beats"

        beat = asyncio.create_task(heartbeat())
        model = ScriptedModel([tool_call("listen", {}), text("done")])
        result = await aio.run(Agent("listener", "Listen.", tools=[listen], model=model), "go")
        beat.cancel()
        return result

    result = asyncio.run(main())
    assert result.status is RunStatus.COMPLETED, result.error
    [block] = result.messages[2].content
    assert block.content == "heard three beats" and not block.is_error


def test_cancelling_the_awaiting_task_cancels_the_run_and_ends_its_spans() -> None:
    tp, exporter = provider()
    seen: list[Any] = []

    async def main() -> None:
        started: list[asyncio.Event] = []  # one per run: its tool is napping

        @tool
        async def nap(ms: int) -> str:
            """Sleep on asyncio, saying so first.

            Args:
                ms: How long, in milliseconds.
            """
            started[-1].set()
            await asyncio.sleep(ms / 1000)
            return f"slept {ms}"

        def long_napper() -> Agent:  # a fresh run's agent, and its "started" event
            started.append(asyncio.Event())
            model = ScriptedModel([tool_call("nap", {"ms": 60_000}), text("napped")])
            return Agent("napper", "Nap, then answer.", tools=[nap], model=model)

        async def napping() -> None:  # each cut lands while its run's tool naps
            async with asyncio.timeout(30):
                await started[-1].wait()

        async with aio.open_run(long_napper(), "nap", tracer_provider=tp) as handle:
            seen.append(handle)
            await napping()
            handle.cancel()
            seen.append(await handle.result())

        task = asyncio.create_task(aio.run(long_napper(), "nap", tracer_provider=tp))
        await napping()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        expiry: asyncio.Task[None] | None = None
        third = long_napper()
        with pytest.raises(TimeoutError):  # asyncio.timeout cancels the task that awaits
            async with asyncio.timeout(None) as deadline:

                async def expire_once_napping() -> None:
                    await napping()
                    deadline.reschedule(asyncio.get_running_loop().time())

                expiry = asyncio.create_task(expire_once_napping())
                await aio.run(third, "nap", tracer_provider=tp)
        assert expiry is not None
        await expiry

    started = time.perf_counter()
    asyncio.run(main())
    assert time.perf_counter() - started < 30  # nobody waited out a 60 s nap
    result = seen[1]
    assert result.status is RunStatus.CANCELLED
    [block] = result.messages[-1].content
    assert block.is_error and block.error_type == "cut_off"  # the transcript stays valid
    spans = exporter.get_finished_spans()
    agents = [s for s in spans if s.name == "invoke_agent napper"]
    assert len(agents) == 3  # every run's spans ended, the cancelled ones included
    assert all(s.attributes and s.attributes.get("orchestrator.cancelled") for s in agents)
    tools = [s for s in spans if s.name == "execute_tool nap"]
    assert len(tools) == 3 and all(s.end_time for s in tools)


def test_leaving_the_block_early_cancels_the_run_and_waits_for_it() -> None:
    async def main() -> Any:
        async with aio.open_run(napper(10_000), "nap") as handle:
            await asyncio.sleep(0.1)
        return handle

    handle = asyncio.run(main())
    assert handle.done


def test_one_runs_failure_never_touches_another() -> None:
    def broken(request: Any) -> Any:
        raise RuntimeError("a bug in this model")

    bad = Agent("bad", "x", model=FunctionModel(broken))

    async def main() -> tuple[Any, Any, Any]:
        return await asyncio.gather(
            aio.run(napper(300), "nap"),
            aio.run(bad, "go"),
            aio.run(Agent("empty", "x"), "no model anywhere"),
            return_exceptions=True,
        )

    good, failed, refused = asyncio.run(main())
    assert good.status is RunStatus.COMPLETED
    assert failed.status is RunStatus.ERROR and "a bug in this model" in (failed.error or "")
    assert isinstance(refused, ConfigurationError)


def test_events_are_read_with_async_for() -> None:
    async def main() -> list[Any]:
        async with aio.open_run(napper(30), "nap") as handle:
            events = [event async for event in handle.events]
            assert (await handle.result()).status is RunStatus.COMPLETED
        return events

    events = asyncio.run(main())
    assert isinstance(events[0], AgentStarted) and isinstance(events[-1], AgentFinished)
    assert any(type(e).__name__ == "ToolFinished" for e in events)


def test_the_callers_opentelemetry_context_is_carried_into_the_run() -> None:
    tp, exporter = provider()

    async def main() -> None:
        with tp.get_tracer("app").start_as_current_span("handle request"):
            await aio.run(napper(10), "nap", tracer_provider=tp)

    asyncio.run(main())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    outer, root = spans["handle request"], spans["invoke_agent napper"]
    assert root.parent is not None and root.parent.span_id == outer.context.span_id
    assert root.context.trace_id == outer.context.trace_id
    assert spans["execute_tool nap"].context.trace_id == outer.context.trace_id


def test_an_asyncio_tool_sees_the_tool_calls_span_as_current() -> None:
    tp, exporter = provider()
    inner: list[Any] = []

    @tool
    async def traced() -> str:
        """Report the current span."""
        await asyncio.sleep(0)
        inner.append(trace.get_current_span().get_span_context().span_id)
        return "ok"

    agent = Agent(
        "a", "x", tools=[traced], model=ScriptedModel([tool_call("traced", {}), text("done")])
    )
    asyncio.run(aio.run(agent, "go", tracer_provider=tp))
    [tool_span] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool traced"]
    assert inner == [tool_span.context.span_id]


def test_an_asyncio_tool_under_plain_trio_fails_saying_why() -> None:
    result = run_sync(napper(10), "nap")
    [block] = result.messages[2].content
    assert block.is_error and block.error_type == "asyncio_tool"
    assert "written for asyncio" in block.content and "orchestrator.aio" in block.content
    assert "Check the arguments" not in block.content


def test_a_tool_timeout_cancels_the_asyncio_task() -> None:
    from orchestrator import Limits

    cancelled: list[bool] = []

    @tool
    async def hang() -> str:
        """Hang."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    agent = Agent(
        "a", "x", tools=[hang], model=ScriptedModel([tool_call("hang", {}), text("gave up")])
    )
    result = asyncio.run(aio.run(agent, "go", limits=Limits(tool_timeout=0.2)))
    [block] = result.messages[2].content
    assert block.error_type == "timeout" and cancelled == [True]


def test_run_from_asyncio_points_at_orchestrator_aio() -> None:
    async def main() -> None:
        await run(napper(1), "nap")

    with pytest.raises(ConfigurationError, match=r"orchestrator\.aio\.run"):
        asyncio.run(main())


def test_aio_refuses_to_run_outside_asyncio() -> None:
    async def main() -> None:
        await aio.run(napper(1), "nap")

    with pytest.raises(ConfigurationError, match=r"from trio, use orchestrator\.run"):
        trio.run(main)


def test_trio_runs_again_on_the_thread_after_the_loop_closes() -> None:
    asyncio.run(aio.run(napper(1), "nap"))
    assert trio.run(trio.sleep, 0) is None  # no guest run was left behind on the thread


def test_the_asyncio_example_runs() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "asyncio_script.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 runs (completed, completed, completed) in 0." in proc.stdout
    assert "It is sunny in Lyon." in proc.stdout


@pytest.mark.parametrize("name", ["open_run", "run"])
def test_the_asyncio_entry_points_take_exactly_the_trio_ones_arguments(name):
    import inspect

    import orchestrator
    from orchestrator import aio

    def parameters(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert parameters(getattr(aio, name)) == parameters(getattr(orchestrator, name))


def test_a_typed_tree_awaited_from_asyncio_returns_the_validated_instance() -> None:
    from pydantic import BaseModel

    from orchestrator.models import final

    class Nap(BaseModel):
        slept_ms: int
        said: str

    def answer(request: Any) -> Any:  # nap on the loop, then answer what the tool said
        if len(request.messages) == 1:
            return tool_call("nap", {"ms": 5})
        return final(Nap(slept_ms=5, said=request.messages[-1].content[0].content))

    agent = Agent("napper", "Nap.", tools=[nap], model=FunctionModel(answer), output_type=Nap)

    async def main() -> Nap:
        result = await aio.run(agent, "nap")
        assert result.status is RunStatus.COMPLETED, result.error
        return result.output  # a Nap to mypy, without a cast

    assert asyncio.run(main()) == Nap(slept_ms=5, said="slept 5")


CLOSES_ITS_LOOP = """
import asyncio, sys
from orchestrator import Agent, aio, tool
from orchestrator.models import ScriptedModel, text, tool_call
from orchestrator.testing import recording_spans

@tool
async def nap(ms: int) -> str:
    '''Sleep on asyncio.

    Args:
        ms: How long, in milliseconds.
    '''
    await asyncio.sleep(ms / 1000)
    return "slept"

agent = Agent("napper", "Nap.", tools=[nap],
              model=ScriptedModel([tool_call("nap", {"ms": 60_000}), text("napped")]))
with recording_spans() as spans:
    loop = asyncio.new_event_loop()
    async def main():
        task = asyncio.ensure_future(aio.run(agent, "go", tracer_provider=spans.tracer_provider))
        while not spans.spans:  # the model call is done: the tool is napping
            await asyncio.sleep(0.01)
        if sys.argv[1] == "cancel":
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    loop.run_until_complete(main())
    loop.close()
    print(sorted(s.name for s in spans.spans))
"""


@pytest.mark.parametrize("ending", ["close", "cancel"])
def test_a_loop_closed_under_a_running_run_is_reported_in_one_line_at_exit(
    tmp_path: Path, ending: str
) -> None:
    script = tmp_path / "closes_its_loop.py"
    script.write_text(CLOSES_ITS_LOOP)
    proc = subprocess.run(
        [sys.executable, str(script), ending], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    if ending == "close":  # the run's spans are lost: the exit says so, in one line
        assert "invoke_agent napper" not in proc.stdout
        assert proc.stderr.splitlines() == [
            "orchestrator.aio: 1 run still running when its asyncio loop closed; its spans "
            "were never ended (await or cancel every aio run before closing the loop)"
        ]
    else:  # a run cancelled before the close wound down: every span ended, nothing to say
        assert "invoke_agent napper" in proc.stdout
        assert proc.stderr == ""
