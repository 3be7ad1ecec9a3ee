"""run / run_sync / open_run: events, cancellation, results, deps, history, configuration errors."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    Message,
    Policy,
    RunFailedError,
    RunResult,
    RunStatus,
    TextBlock,
    ToolContext,
    ToolResultBlock,
    ToolUseBlock,
    open_run,
    run,
    run_sync,
    tool,
)
from orchestrator.models import FunctionModel, ScriptedModel, text, tool_call


@tool
async def nap(seconds: float, label: str) -> str:
    """Sleep, then say which call this was."""
    await trio.sleep(seconds)
    return label


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def kind(event) -> str:
    return type(event).__name__


def agent_for(model, tools=(nap, add), **kw):
    return Agent("runner", "You run things.", model=model, tools=list(tools), **kw)


async def collect(handle):
    return [ev async for ev in handle.events if kind(ev) != "ModelTextDelta"]


# --- run, run_sync, open_run ------------------------------------------------------------------


async def test_run_returns_the_result_of_the_root_agent():
    result = await run(agent_for(ScriptedModel([text("hello")])), "hi")
    assert isinstance(result, RunResult)
    assert result.agent_name == "runner"
    assert result.status is RunStatus.COMPLETED
    assert result.output == "hello"
    assert result.children == []
    assert result.run_id


def test_run_sync_runs_the_loop_under_trio_run():
    model = ScriptedModel([tool_call("add", {"a": 5, "b": 10}), text("15")])
    result = run_sync(agent_for(model), "What is 5 + 10?")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "15"


async def test_a_run_level_model_serves_an_agent_without_one():
    agent = Agent("plain", "x")
    result = await run(agent, "hi", model=ScriptedModel([text("from the run's model")]))
    assert result.output == "from the run's model"


async def test_the_agents_own_model_comes_before_the_runs():
    agent = Agent("plain", "x", model=ScriptedModel([text("mine")]))
    result = await run(agent, "hi", model=ScriptedModel([text("the run's")]))
    assert result.output == "mine"


async def test_one_agent_definition_can_run_many_times_at_once(autojump_clock):
    model = ScriptedModel([tool_call("nap", {"seconds": 1, "label": "z"}), text("done")])
    agent = agent_for(model)
    results = []

    async def one():
        results.append(await run(agent, "go"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(one)
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 5
    assert len({r.run_id for r in results}) == 5
    assert all(len(r.messages) == 4 for r in results)


async def test_open_run_streams_events_in_a_sane_order():
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}, id="toolu_1"), text("3")])
    async with open_run(agent_for(model), "go") as handle:
        events = await collect(handle)
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED
    assert [kind(e) for e in events] == [
        "AgentStarted",
        "TurnStarted",
        "ToolStarted",
        "ToolFinished",
        "TurnStarted",
        "AgentFinished",
    ]
    started, turn1, tool_started, tool_finished, turn2, finished = events
    assert started.name == "runner" and started.depth == 0 and started.parent_path is None
    assert started.task == "go"
    assert (turn1.turn, turn2.turn) == (1, 2)
    assert tool_started.tool == "add" and tool_started.call_id == "toolu_1"
    assert tool_finished.call_id == "toolu_1" and tool_finished.is_error is False
    assert finished.status == "completed"
    assert finished.turns == 2
    assert len({e.path for e in events}) == 1


async def test_a_failed_tool_is_reported_as_an_error_in_its_finished_event():
    model = ScriptedModel([tool_call("add", {"a": "x", "b": 2}), text("oops")])
    async with open_run(agent_for(model), "go") as handle:
        events = await collect(handle)
    (finished,) = [e for e in events if kind(e) == "ToolFinished"]
    assert finished.is_error is True


async def test_the_result_is_available_after_the_block_and_handle_says_done():
    async with open_run(agent_for(ScriptedModel([text("x")])), "go") as handle:
        result = await handle.result()
        assert handle.done
    assert await handle.result() is result
    assert result.run_id == handle.run_id


# --- cancellation ---------------------------------------------------------------------------


async def test_cancel_mid_tool_ends_with_cancelled_and_a_valid_transcript(
    autojump_clock, valid_transcript
):
    calls = [
        tool_call("nap", {"seconds": 1, "label": "fast"}, id="toolu_fast"),
        tool_call("nap", {"seconds": 1000, "label": "slow"}, id="toolu_slow"),
    ]
    model = ScriptedModel([calls, text("never")])
    async with open_run(agent_for(model), "go") as handle:
        async for ev in handle.events:
            if kind(ev) == "ToolFinished":
                handle.cancel()
        result = await handle.result()
    assert trio.current_time() < 10
    assert result.status is RunStatus.CANCELLED
    assert result.error
    valid_transcript(result.messages)
    last = result.messages[-1]
    assert last.role == "user"
    fast, slow = (b for b in last.content if b.type == "tool_result")
    assert (fast.tool_use_id, fast.content, fast.is_error) == ("toolu_fast", "fast", False)
    assert slow.tool_use_id == "toolu_slow" and slow.is_error


async def test_cancel_during_a_single_tool_call_gives_it_a_synthetic_result(
    autojump_clock, valid_transcript
):
    model = ScriptedModel(
        [tool_call("nap", {"seconds": 1000, "label": "x"}, id="toolu_1"), text("")]
    )
    async with open_run(agent_for(model), "go") as handle:
        async for ev in handle.events:
            if kind(ev) == "ToolStarted":
                handle.cancel()
        result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    valid_transcript(result.messages)
    (cut,) = [b for b in result.messages[-1].content if b.type == "tool_result"]
    assert cut.tool_use_id == "toolu_1" and cut.is_error


async def test_cancel_before_the_first_model_call_still_gives_a_result():
    async with open_run(agent_for(ScriptedModel([text("x")])), "go") as handle:
        handle.cancel()
        result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    assert result.messages[0].text == "go"


async def test_cancel_from_a_worker_thread_stops_the_run(valid_transcript):
    # a sync tool (or a sync approver) runs in a worker thread: trio's scopes belong to the
    # run's thread, and a cancel() that touched them from there left the run unstoppable
    @tool
    def stop(ctx: ToolContext) -> str:
        """Ask the run to stop."""
        ctx.deps["handle"].cancel()
        return "asked"

    model = ScriptedModel(
        [tool_call("stop", {}), tool_call("nap", {"seconds": 1000, "label": "x"}), text("never")]
    )
    agent = Agent("w", "x", model=model, tools=[stop, nap])
    deps: dict[str, Any] = {}
    with trio.fail_after(30):  # the nap takes 1,000 s: a cancel that works ends it long before
        async with open_run(agent, "go", deps=deps) as handle:
            deps["handle"] = handle
            result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    assert result.error == "the run was cancelled"
    valid_transcript(result.messages)
    await trio.to_thread.run_sync(handle.cancel)  # after the end: nothing to do, no error


async def _events_of_a_run_cancelled_during_its_tool_call() -> list[Any]:
    model = ScriptedModel([tool_call("nap", {"seconds": 1000, "label": "x"}), text("never")])
    async with open_run(agent_for(model), "go") as handle:
        events = []
        async for ev in handle.events:
            events.append(ev)
            if kind(ev) == "ToolStarted":
                handle.cancel()
    return events


async def test_cancel_emits_a_final_agent_finished_event_with_status_cancelled(autojump_clock):
    events = await _events_of_a_run_cancelled_during_its_tool_call()
    assert kind(events[-1]) == "AgentFinished"
    assert events[-1].status == "cancelled"


async def test_a_tool_call_cut_by_a_cancel_still_gets_its_tool_finished_event(autojump_clock):
    events = await _events_of_a_run_cancelled_during_its_tool_call()
    (started,) = [e for e in events if kind(e) == "ToolStarted"]
    (finished,) = [e for e in events if kind(e) == "ToolFinished"]
    assert (finished.call_id, finished.is_error) == (started.call_id, True)


async def test_leaving_open_run_early_cancels_the_run_and_keeps_its_result(autojump_clock):
    model = ScriptedModel([tool_call("nap", {"seconds": 1000, "label": "x"}), text("never")])
    async with open_run(agent_for(model), "go") as handle:
        await trio.sleep(5)
    assert trio.current_time() < 10
    result = await handle.result()
    assert result.status is RunStatus.CANCELLED


async def test_an_enclosing_cancel_scope_cancels_the_run(autojump_clock):
    cleaned_up = []

    @tool
    async def wait_forever() -> str:
        """Wait forever."""
        try:
            await trio.sleep_forever()
        finally:
            cleaned_up.append(True)
        return "never"  # pragma: no cover

    model = ScriptedModel([tool_call("wait_forever"), text("never")])
    with trio.move_on_after(5) as scope:
        await run(agent_for(model, tools=[wait_forever]), "go")
    assert scope.cancelled_caught
    assert cleaned_up == [True]
    assert trio.current_time() == pytest.approx(5, abs=0.1)


async def test_an_enclosing_cancel_scope_leaves_a_valid_cancelled_result(
    autojump_clock, valid_transcript
):
    model = ScriptedModel([tool_call("nap", {"seconds": 1000, "label": "x"}), text("never")])
    with trio.move_on_after(5):
        async with open_run(agent_for(model), "go") as handle:
            await handle.result()
    result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    valid_transcript(result.messages)


# --- results -----------------------------------------------------------------------------------


async def test_raise_for_status_returns_a_completed_result():
    result = await run(agent_for(ScriptedModel([text("ok")])), "go")
    assert result.raise_for_status() is result


async def test_raise_for_status_raises_run_failed_error_for_any_other_status():
    model = FunctionModel(lambda r: tool_call("add", {"a": len(r.messages), "b": 0}))
    result = await run(agent_for(model), "go", limits=Limits(max_turns=2))
    assert result.status is RunStatus.MAX_TURNS
    with pytest.raises(RunFailedError) as info:
        result.raise_for_status()
    assert info.value.result is result
    assert "max_turns" in str(info.value)
    assert "runner" in str(info.value)
    # it travels to another process (pickled) and copies like any exception
    import copy
    import pickle

    for again in (pickle.loads(pickle.dumps(info.value)), copy.deepcopy(info.value)):
        assert isinstance(again, RunFailedError) and str(again) == str(info.value)
        assert again.result.status is RunStatus.MAX_TURNS


# --- deps and history ------------------------------------------------------------------------


async def test_deps_reach_the_tools_through_the_tool_context():
    seen = []

    class Database:
        pass

    db = Database()

    @tool
    def query(ctx: ToolContext, sql: str) -> str:
        """Run a query."""
        seen.append(ctx.deps)
        return "rows"

    model = ScriptedModel([tool_call("query", {"sql": "select 1"}), text("done")])
    await run(agent_for(model, tools=[query]), "go", deps=db)
    assert seen == [db] and seen[0] is db


async def test_message_history_is_prepended_to_the_transcript(valid_transcript):
    history = [
        Message.user("My name is Ada."),
        Message.assistant("Nice to meet you, Ada."),
    ]
    seen = []

    def fn(request):
        seen.append(list(request.messages))
        return text("Your name is Ada.")

    result = await run(agent_for(FunctionModel(fn)), "What is my name?", message_history=history)
    first = seen[0]
    assert first[:2] == history
    assert first[2].role == "user" and first[2].text == "What is my name?"
    assert result.messages[:3] == first
    valid_transcript(result.messages)


async def test_a_prompt_or_task_holding_a_lone_surrogate_reaches_the_model_as_unicode():
    # argv bytes that are not UTF-8 arrive as lone surrogates, which no HTTP body can carry:
    # the first real model call failed ("surrogates not allowed") while the offline one passed
    seen: list[str] = []

    def fn(request):
        seen.append(request.messages[0].text)
        if request.agent.depth == 0 and len(request.messages) == 1:
            return tool_call("spawn_subagent", {"agent": "worker", "task": "t\udce9che"})
        return text("done")

    worker = Agent("worker", "Work.", description="works")
    root = Agent("root", "Lead.", model=FunctionModel(fn), subagents=[worker])
    result = await run(root, "caf\udce9 au lait")
    assert result.status is RunStatus.COMPLETED
    assert seen[:2] == ["caf\ufffd au lait", "t\ufffdche"]
    for message_text in seen:
        message_text.encode("utf-8")


async def test_a_message_history_holding_a_lone_surrogate_is_refused_before_any_call():
    history = [Message.user("My name is Ada."), Message.assistant("Hello, \ud800Ada.")]
    with pytest.raises(ConfigurationError, match="message 1 holds a lone surrogate"):
        await run(agent_for(ScriptedModel([text("x")])), "go on", message_history=history)


async def test_message_history_with_tool_calls_is_kept_intact(valid_transcript):
    history = [
        Message.user("add 1 and 2"),
        Message.assistant(ToolUseBlock("toolu_old", "add", {"a": 1, "b": 2})),
        Message.user(ToolResultBlock("toolu_old", "3")),
        Message.assistant("It is 3."),
    ]
    result = await run(
        agent_for(ScriptedModel([text("still 3")] * 3)), "and again?", message_history=history
    )
    assert result.messages[:4] == history
    assert result.output == "still 3"
    valid_transcript(result.messages)


async def test_message_history_ending_with_a_user_turn_still_alternates_roles(valid_transcript):
    history = [Message.user("Context: the sky is green here.")]
    result = await run(
        agent_for(ScriptedModel([text("Green.")])),
        "What colour is the sky?",
        message_history=history,
    )
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert "green" in result.messages[0].text and "colour" in result.messages[0].text
    valid_transcript(result.messages)


# --- events never slow the run -------------------------------------------------------------------


async def test_an_absent_event_reader_never_blocks_the_run_and_drops_are_counted(autojump_clock):
    model = FunctionModel(
        lambda r: (
            tool_call("add", {"a": len(r.messages), "b": 0})
            if len(r.messages) < 20
            else text("done")
        )
    )
    start = trio.current_time()
    async with open_run(agent_for(model), "go", event_buffer=2) as handle:
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED
    assert trio.current_time() == start
    assert handle.dropped_events > 0


async def test_a_slow_event_reader_never_blocks_the_run(autojump_clock):
    model = FunctionModel(
        lambda r: (
            tool_call("add", {"a": len(r.messages), "b": 0})
            if len(r.messages) < 20
            else text("done")
        )
    )
    finished_at = []
    start = trio.current_time()
    async with open_run(agent_for(model), "go", event_buffer=1) as handle:

        async def wait_result():
            await handle.result()
            finished_at.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_result)
            received = []
            async for ev in handle.events:
                received.append(ev)
                await trio.sleep(10)  # a very slow display
    assert finished_at == [start], "the run waited for its event reader"
    assert handle.dropped_events > 0
    assert len(received) >= 1


# --- configuration errors --------------------------------------------------------------------------


async def test_run_without_any_model_raises_a_configuration_error_naming_the_agent():
    with pytest.raises(ConfigurationError, match="plain"):
        await run(Agent("plain", "x"), "hi")


@pytest.mark.parametrize("threads", [0, -1, 2.5, True, "8"])
async def test_tool_threads_must_be_a_positive_integer(threads: object) -> None:
    agent = Agent("plain", "x", model=ScriptedModel([text("never")]))
    with pytest.raises(ConfigurationError, match="tool_threads must be an integer >= 1"):
        await run(agent, "hi", tool_threads=threads)  # type: ignore[arg-type]


def test_run_sync_without_any_model_raises_a_configuration_error():
    with pytest.raises(ConfigurationError):
        run_sync(Agent("plain", "x"), "hi")


async def test_open_run_without_any_model_raises_before_yielding():
    with pytest.raises(ConfigurationError):
        async with open_run(Agent("plain", "x"), "hi"):
            pytest.fail("open_run yielded a handle for an agent with no model")


async def test_an_unknown_model_string_is_a_configuration_error_naming_it():
    with pytest.raises(ConfigurationError, match="nonsense"):
        await run(Agent("plain", "x"), "hi", model="nonsense")


@pytest.mark.parametrize("prompt", ["", "  \n\t"])
async def test_a_blank_prompt_is_a_configuration_error(prompt: str) -> None:
    # the Messages API refuses a blank text block with a 400 that would end the run as an error
    agent = Agent("plain", "x", model=ScriptedModel([text("never")]))
    with pytest.raises(ConfigurationError, match="prompt is empty"):
        await run(agent, prompt)


async def test_run_rejects_something_that_is_not_an_agent():
    with pytest.raises(ConfigurationError):
        await run("not an agent", "hi")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"event_buffer": -1}, "event_buffer"),
        ({"event_buffer": 1.5}, "event_buffer"),
        ({"event_buffer": True}, "event_buffer"),
        ({"run_id": 5}, "run_id"),
        ({"run_id": " "}, "run_id"),
        ({"model": "anthropic: "}, "unknown model"),
        ({"model": "offline:extra"}, "unknown model"),
    ],
)
async def test_bad_run_options_are_a_configuration_error_before_any_call(
    options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        async with open_run(Agent("plain", "x"), "hi", **options):
            pytest.fail("open_run yielded a handle for bad options")


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: Agent("a", "x", tools=add), "tools must be a list"),
        (lambda: Agent("a", "x", tools="add"), "tools must be a list"),
        (lambda: Agent("a", "x", subagents="researcher"), "subagents must be a list"),
        (lambda: Agent("a", "x", description=5), "description must be a string"),
        (lambda: Policy(rules=["search"]), "rules must map"),
        (lambda: Agent("a", "x").replace(instruction="y"), r"no field\(s\) \['instruction'\]"),
    ],
)
def test_a_definition_with_a_value_of_the_wrong_kind_is_a_configuration_error(
    make: Any, problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        make()


def test_replace_changes_only_the_fields_it_is_given() -> None:
    agent = Agent("a", "x", description="d", max_output_tokens=100)
    copy = agent.replace(instructions="y", max_output_tokens=200)
    assert (copy.name, copy.instructions, copy.description, copy.max_output_tokens) == (
        "a",
        "y",
        "d",
        200,
    )
    assert (agent.instructions, agent.max_output_tokens) == ("x", 100)


async def test_an_unbounded_event_buffer_and_an_agent_without_description_are_accepted() -> None:
    import math

    agent = Agent("a", "i", description=None, model=ScriptedModel([text("hi")]))  # type: ignore[arg-type]
    async with open_run(agent, "go", event_buffer=math.inf, run_id="") as handle:
        events = [event async for event in handle.events]
        result = await handle.result()
    assert result.output == "hi" and events and handle.dropped_events == 0
    assert result.run_id  # empty: a random id


def test_run_called_outside_trio_says_it_needs_trio() -> None:
    import asyncio

    from orchestrator.models import ScriptedModel, text

    agent = Agent("a", "i", model=ScriptedModel([text("hi")]))
    with pytest.raises(ConfigurationError, match="runs under trio"):
        asyncio.run(run(agent, "go"))


async def test_an_exception_raised_in_the_open_run_block_comes_out_as_itself() -> None:
    from orchestrator.models import ScriptedModel, text

    agent = Agent("a", "i", model=ScriptedModel([text("hi")]))
    with pytest.raises(KeyError, match="mine"):
        async with open_run(agent, "go"):
            raise KeyError("mine")


async def test_a_message_history_that_cannot_be_continued_is_refused_before_any_call() -> None:
    from orchestrator import ConfigurationError, Message, ToolUseBlock
    from orchestrator.models import ScriptedModel, text

    agent = Agent("a", "i", model=ScriptedModel([text("hi")]))
    unanswered = [Message.user("go"), Message("assistant", (ToolUseBlock("t1", "x", {}),))]
    with pytest.raises(ConfigurationError, match="not answered"):
        await run(agent, "next", message_history=unanswered)
    with pytest.raises(ConfigurationError, match="first message"):
        await run(agent, "next", message_history=[Message.assistant("hello")])


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([{"role": "user", "content": "hi"}], "item 0 is a dict, not a Message"),
        (["hello"], "item 0 is a str, not a Message"),
        ([Message("user", "hello")], "content is not a tuple of content blocks"),  # type: ignore[arg-type]
        ([Message.user("a"), Message("system", (TextBlock("b"),))], "role 'system'"),  # type: ignore[arg-type]
        # the API refuses an empty message (a fatal 400 at the first call)
        ([Message.user("a"), Message("assistant", ()), Message.user("b")], "message 1 is empty"),
        ([Message.user(" \n"), Message.assistant("hi")], "first message is blank"),
    ],
)
async def test_a_message_history_of_the_wrong_shape_is_a_configuration_error(
    history: list[Any], problem: str
) -> None:
    agent = Agent("a", "i", model=ScriptedModel([text("hi")]))
    with pytest.raises(ConfigurationError, match=problem):
        await run(agent, "next", message_history=history)


async def test_the_open_run_blocks_own_exception_keeps_its_chain() -> None:
    from orchestrator.models import ScriptedModel, text

    agent = Agent("a", "i", model=ScriptedModel([text("hi")]))
    with pytest.raises(RuntimeError) as info:
        async with open_run(agent, "go"):
            try:
                raise KeyError("inner")
            except KeyError as inner:
                raise RuntimeError("outer") from inner
    assert isinstance(info.value.__cause__, KeyError)


async def test_a_history_of_consecutive_user_messages_is_accepted() -> None:
    from orchestrator import Message
    from orchestrator.models import ScriptedModel, text

    agent = Agent("a", "i", model=ScriptedModel([text("hi")]))
    result = await run(agent, "next", message_history=[Message.user("doc"), Message.user("q")])
    assert result.output == "hi"


async def test_a_client_that_fails_to_close_is_logged_and_the_result_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from contextlib import asynccontextmanager

    from orchestrator.models import response

    class PooledModel:
        provider = "pooled"
        name = "pooled-1"

        def cost(self, usage: Any) -> float:
            return 0.0

        async def request(self, request: Any, ctx: Any) -> Any:
            @asynccontextmanager
            async def client() -> Any:
                yield object()
                raise RuntimeError("close failed")

            await ctx.clients.get("pooled", client)
            return response(text("answer"))

    result = await run(Agent("a", "x", model=PooledModel()), "go")  # type: ignore[arg-type]
    assert result.status is RunStatus.COMPLETED and result.output == "answer"
    assert "close failed" in caplog.text


async def test_run_sync_inside_trio_says_to_await_run() -> None:
    agent = Agent("a", "x", model=ScriptedModel([text("hi")]))
    with pytest.raises(ConfigurationError, match="await run"):
        run_sync(agent, "go")


def test_copying_an_agent_gives_the_same_immutable_definition() -> None:
    import copy

    agent = Agent("a", "x", model=ScriptedModel([text("hi")]))
    assert copy.copy(agent) is agent and copy.deepcopy({"k": agent})["k"] is agent


async def test_agent_finished_events_carry_the_run_status() -> None:
    from orchestrator.core.events import AgentFinished

    agent = Agent("a", "x", model=ScriptedModel([text("hi")]))
    finished: list[AgentFinished] = []
    async with open_run(agent, "go") as handle:
        async for event in handle.events:
            if isinstance(event, AgentFinished):
                finished.append(event)
    (event,) = finished
    assert event.status is RunStatus.COMPLETED and event.status == "completed"
