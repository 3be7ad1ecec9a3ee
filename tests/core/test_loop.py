"""The single-agent loop: the stop-reason table, parallel calls, bounds, errors, requests."""

from __future__ import annotations

import itertools

import pytest
import trio

from orchestrator import (
    DEFAULT_LIMITS,
    Agent,
    ConfigurationError,
    Limits,
    ModelError,
    RunStatus,
    ToolError,
    Usage,
    run,
    tool,
)
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
async def fail(reason: str = "boom") -> str:
    """Always fails."""
    raise ToolError(f"failed: {reason}")


def agent_for(model, *, tools=(add, fail), **kw):
    return Agent("solver", "You solve arithmetic.", model=model, tools=list(tools), **kw)


def roles(result):
    return [m.role for m in result.messages]


def tool_results(message):
    return [b for b in message.content if b.type == "tool_result"]


class Recorder:
    """A FunctionModel body that answers from a list and keeps a snapshot of every request."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.requests = []
        self.snapshots = []

    def __call__(self, request):
        self.requests.append(request)
        self.snapshots.append(list(request.messages))
        step = self.steps.pop(0)
        return step(request) if callable(step) else step


# --- the stop-reason table --------------------------------------------------------------------


async def test_end_turn_completes_with_the_text_as_output(valid_transcript):
    result = await run(agent_for(ScriptedModel([text("15")])), "What is 5 + 10?")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "15"
    assert result.error is None
    assert result.ok
    assert roles(result) == ["user", "assistant"]
    assert result.turns == 1
    valid_transcript(result.messages)


async def test_the_seed_loop_uses_a_tool_and_answers_with_its_result(valid_transcript):
    model = ScriptedModel([tool_call("add", {"a": 5, "b": 10}), text("5 + 10 = 15")])
    result = await run(agent_for(model), "What is 5 + 10?")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "5 + 10 = 15"
    assert roles(result) == ["user", "assistant", "user", "assistant"]
    (res,) = tool_results(result.messages[2])
    assert res.content == "15" and not res.is_error
    assert result.turns == 2
    valid_transcript(result.messages)


async def test_stop_sequence_completes_with_the_text_as_output(valid_transcript):
    model = ScriptedModel([response(text("the answer is 15"), stop_reason="stop_sequence")])
    result = await run(agent_for(model), "go")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "the answer is 15"
    valid_transcript(result.messages)


async def test_max_tokens_on_text_appends_a_continue_message_and_the_loop_goes_on(valid_transcript):
    rec = Recorder(
        response(text("The answer is"), stop_reason="max_tokens"),
        text(" 15."),
    )
    result = await run(agent_for(FunctionModel(rec)), "go")
    assert result.status is RunStatus.COMPLETED
    assert "15" in result.output
    second = rec.snapshots[1]
    assert [m.role for m in second] == ["user", "assistant", "user"]
    assert second[1].text == "The answer is"
    assert "continue" in second[2].text.lower()
    assert roles(result) == ["user", "assistant", "user", "assistant"]
    valid_transcript(result.messages)


async def test_an_empty_reply_cut_by_max_tokens_never_leaves_two_user_messages_in_a_row(
    valid_transcript,
):
    rec = Recorder(response(stop_reason="max_tokens"), text("15"))
    result = await run(agent_for(FunctionModel(rec)), "go")
    assert result.status is RunStatus.COMPLETED
    for snapshot in rec.snapshots:
        assert all(a.role != b.role for a, b in itertools.pairwise(snapshot))
    valid_transcript(result.messages)


async def test_a_tool_call_cut_by_max_tokens_is_dropped_and_retried_once_with_a_larger_cap(
    valid_transcript,
):
    rec = Recorder(
        response(text("let me add"), tool_call("add", {"a": 1}), stop_reason="max_tokens"),
        tool_call("add", {"a": 1, "b": 2}),
        text("3"),
    )
    result = await run(agent_for(FunctionModel(rec), max_output_tokens=1000), "go")
    assert result.status is RunStatus.COMPLETED
    caps = [r.max_tokens for r in rec.requests]
    assert caps[0] == 1000
    assert caps[1] > 1000
    # the retry saw the same transcript: the cut reply was dropped, not appended
    assert [m.role for m in rec.snapshots[1]] == ["user"]
    assert all("let me add" not in m.text for m in result.messages)
    calls = [c for m in result.messages for c in m.tool_uses]
    assert [dict(c.input) for c in calls] == [{"a": 1, "b": 2}]
    valid_transcript(result.messages)


async def test_a_tool_call_cut_by_max_tokens_twice_ends_the_agent_with_error(valid_transcript):
    cut = response(tool_call("add", {"a": 1}), stop_reason="max_tokens")
    rec = Recorder(cut, cut, text("never reached"))
    result = await run(agent_for(FunctionModel(rec), max_output_tokens=1000), "go")
    assert result.status is RunStatus.ERROR
    assert "max_tokens" in result.error
    assert len(rec.requests) == 2
    assert rec.requests[1].max_tokens > rec.requests[0].max_tokens
    assert not any(m.tool_uses for m in result.messages)
    valid_transcript(result.messages)


async def test_pause_turn_sends_the_transcript_back_as_it_is(valid_transcript):
    rec = Recorder(
        response(text("searching the web..."), stop_reason="pause_turn"),
        text("found it"),
    )
    result = await run(agent_for(FunctionModel(rec)), "go")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "searching the web...found it"  # one turn, paused and resumed
    second = rec.snapshots[1]
    assert [m.role for m in second] == ["user", "assistant"]
    assert second[1].text == "searching the web..."
    assert roles(result) == ["user", "assistant", "assistant"]
    valid_transcript(result.messages, allow_assistant_pairs=True)


async def test_refusal_stops_with_status_refusal_and_is_not_retried(valid_transcript):
    rec = Recorder(response(text("I can't help with that."), stop_reason="refusal"), text("x"))
    result = await run(agent_for(FunctionModel(rec)), "go")
    assert result.status is RunStatus.REFUSAL
    assert result.error
    assert len(rec.requests) == 1
    valid_transcript(result.messages)


async def test_context_window_exceeded_stops_with_status_context_exceeded(valid_transcript):
    model = ScriptedModel([response(text("..."), stop_reason="model_context_window_exceeded")])
    result = await run(agent_for(model), "go")
    assert result.status is RunStatus.CONTEXT_EXCEEDED
    assert result.error
    valid_transcript(result.messages)


async def test_an_unknown_stop_reason_ends_with_error_naming_it_and_never_passes_for_an_answer(
    valid_transcript,
):
    model = ScriptedModel([response(text("looks final"), stop_reason="brand_new_reason")])
    result = await run(agent_for(model), "go")
    assert result.status is RunStatus.ERROR
    assert "brand_new_reason" in result.error
    assert result.output != "looks final"
    valid_transcript(result.messages)


# --- parallel tool calls ------------------------------------------------------------------------


@tool
async def nap(seconds: float, label: str) -> str:
    """Sleep, then say which call this was."""
    await trio.sleep(seconds)
    return label


async def test_parallel_tool_calls_run_concurrently(autojump_clock):
    model = ScriptedModel(
        [
            [
                tool_call("nap", {"seconds": 1, "label": "a"}),
                tool_call("nap", {"seconds": 1, "label": "b"}),
            ],
            text("both done"),
        ]
    )
    start = trio.current_time()
    result = await run(agent_for(model, tools=[nap]), "go")
    elapsed = trio.current_time() - start
    assert result.status is RunStatus.COMPLETED
    assert 1 <= elapsed < 1.5


async def test_parallel_results_come_back_in_one_user_message_in_call_order(
    autojump_clock, valid_transcript
):
    calls = [
        tool_call("nap", {"seconds": 3, "label": "slow"}, id="toolu_a"),
        tool_call("nap", {"seconds": 1, "label": "fast"}, id="toolu_b"),
        tool_call("nap", {"seconds": 2, "label": "mid"}, id="toolu_c"),
    ]
    result = await run(agent_for(ScriptedModel([calls, text("ok")]), tools=[nap]), "go")
    assert roles(result) == ["user", "assistant", "user", "assistant"]
    results = tool_results(result.messages[2])
    assert [r.tool_use_id for r in results] == ["toolu_a", "toolu_b", "toolu_c"]
    assert [r.content for r in results] == ["slow", "fast", "mid"]
    valid_transcript(result.messages)


async def test_a_failing_call_does_not_cancel_its_parallel_siblings(autojump_clock):
    calls = [
        tool_call("nap", {"seconds": 1, "label": "survived"}),
        tool_call("fail", {"reason": "nope"}),
    ]
    result = await run(agent_for(ScriptedModel([calls, text("ok")]), tools=[nap, fail]), "go")
    ok, bad = tool_results(result.messages[2])
    assert ok.content == "survived" and not ok.is_error
    assert bad.is_error and bad.content == "failed: nope"


# --- bounds ---------------------------------------------------------------------------------------


def counting_calls(request):
    """A model that never stops calling tools (different arguments each turn)."""
    n = sum(1 for m in request.messages if m.role == "assistant")
    return tool_call("add", {"a": n, "b": 1})


async def test_max_turns_stops_the_agent_with_a_valid_transcript(valid_transcript):
    result = await run(agent_for(FunctionModel(counting_calls)), "go", limits=Limits(max_turns=4))
    assert result.status is RunStatus.MAX_TURNS
    assert result.turns == 4
    assert sum(1 for m in result.messages if m.role == "assistant") == 4
    assert "4" in result.error
    valid_transcript(result.messages)


async def test_the_last_turn_may_still_answer_at_max_turns():
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 1}), text("2")])
    result = await run(agent_for(model), "go", limits=Limits(max_turns=2))
    assert result.status is RunStatus.COMPLETED


async def test_the_default_max_turns_is_20(valid_transcript):
    result = await run(agent_for(FunctionModel(counting_calls)), "go")
    assert result.status is RunStatus.MAX_TURNS
    assert result.turns == 20
    valid_transcript(result.messages)


async def test_an_agents_own_limits_come_before_the_runs():
    agent = agent_for(FunctionModel(counting_calls), limits=Limits(max_turns=3))
    result = await run(agent, "go", limits=Limits(max_turns=7))
    assert result.turns == 3
    agent = agent_for(FunctionModel(counting_calls))
    result = await run(agent, "go", limits=Limits(max_turns=7))
    assert result.turns == 7


async def test_the_repeat_guard_stops_on_the_nth_identical_turn(valid_transcript):
    calls = []

    @tool
    async def lookup(word: str) -> str:
        """Look a word up."""
        calls.append(word)
        return "no entry"

    model = FunctionModel(lambda request: tool_call("lookup", {"word": "zyx"}))
    result = await run(agent_for(model, tools=[lookup]), "go", limits=Limits(repeat_limit=3))
    assert result.status is RunStatus.REPEAT_GUARD
    assert result.turns == 3
    assert calls == ["zyx", "zyx"]  # the third identical request is not executed
    assert "lookup" in result.error
    valid_transcript(result.messages)


async def test_the_repeat_guard_compares_a_turns_calls_as_a_set():
    steps = [
        [tool_call("add", {"a": 1, "b": 2}), tool_call("add", {"a": 3, "b": 4})],
        [tool_call("add", {"a": 3, "b": 4}), tool_call("add", {"a": 1, "b": 2})],
        text("done"),
    ]
    result = await run(agent_for(ScriptedModel(steps)), "go", limits=Limits(repeat_limit=2))
    assert result.status is RunStatus.REPEAT_GUARD
    assert result.turns == 2


async def test_different_arguments_reset_the_repeat_guard():
    steps = [
        tool_call("add", {"a": 1, "b": 2}),
        tool_call("add", {"a": 1, "b": 2}),
        tool_call("add", {"a": 9, "b": 9}),
        tool_call("add", {"a": 1, "b": 2}),
        tool_call("add", {"a": 1, "b": 2}),
        text("done"),
    ]
    result = await run(agent_for(ScriptedModel(steps)), "go", limits=Limits(repeat_limit=3))
    assert result.status is RunStatus.COMPLETED


async def test_consecutive_failing_turns_stop_the_agent_at_the_error_threshold(valid_transcript):
    def model(request):
        n = sum(1 for m in request.messages if m.role == "assistant")
        return tool_call("fail", {"reason": f"attempt {n}"})

    result = await run(
        agent_for(FunctionModel(model)), "go", limits=Limits(max_consecutive_errors=3)
    )
    assert result.status is RunStatus.ERROR_THRESHOLD
    assert result.turns == 3
    assert "attempt 2" in result.error
    valid_transcript(result.messages)


async def test_a_successful_call_resets_the_consecutive_error_count():
    steps = [
        tool_call("fail", {"reason": "1"}),
        tool_call("fail", {"reason": "2"}),
        tool_call("add", {"a": 1, "b": 1}),
        tool_call("fail", {"reason": "3"}),
        tool_call("fail", {"reason": "4"}),
        text("done"),
    ]
    result = await run(
        agent_for(ScriptedModel(steps)), "go", limits=Limits(max_consecutive_errors=3)
    )
    assert result.status is RunStatus.COMPLETED


async def test_a_turn_with_one_successful_call_is_not_a_failing_turn():
    steps = [
        [tool_call("fail", {"reason": str(i)}), tool_call("add", {"a": i, "b": 0})]
        for i in range(4)
    ] + [text("done")]
    result = await run(
        agent_for(ScriptedModel(steps)), "go", limits=Limits(max_consecutive_errors=2)
    )
    assert result.status is RunStatus.COMPLETED


async def test_the_run_timeout_stops_a_hanging_tool_with_status_timeout(
    autojump_clock, valid_transcript
):
    model = ScriptedModel([tool_call("nap", {"seconds": 10_000, "label": "x"}), text("late")])
    start = trio.current_time()
    result = await run(agent_for(model, tools=[nap]), "go", limits=Limits(timeout=30))
    assert result.status is RunStatus.TIMEOUT
    assert trio.current_time() - start == pytest.approx(30, abs=0.5)
    (res,) = tool_results(result.messages[-1])
    assert res.is_error
    valid_transcript(result.messages)


async def test_the_run_timeout_during_parallel_tool_calls_ends_with_status_timeout(
    autojump_clock, valid_transcript
):
    calls = [
        tool_call("nap", {"seconds": 1, "label": "quick"}),
        tool_call("nap", {"seconds": 10_000, "label": "slow"}),
    ]
    model = ScriptedModel([calls, text("late")])
    result = await run(agent_for(model, tools=[nap]), "go", limits=Limits(timeout=30))
    assert result.status is RunStatus.TIMEOUT, result.error
    quick, slow = tool_results(result.messages[-1])
    assert quick.content == "quick" and not quick.is_error
    assert slow.is_error
    valid_transcript(result.messages)


async def test_a_tool_timeout_lets_the_loop_go_on(autojump_clock, valid_transcript):
    model = ScriptedModel([tool_call("nap", {"seconds": 10_000, "label": "x"}), text("moved on")])
    result = await run(agent_for(model, tools=[nap]), "go", limits=Limits(tool_timeout=2))
    assert result.status is RunStatus.COMPLETED
    assert result.output == "moved on"
    (res,) = tool_results(result.messages[2])
    assert res.is_error and "timed out" in res.content
    valid_transcript(result.messages)


async def test_a_token_budget_that_runs_out_ends_with_budget_exceeded(valid_transcript):
    model = FunctionModel(
        lambda request: response(
            tool_call("add", {"a": len(request.messages), "b": 0}),
            usage=Usage(input_tokens=1500, output_tokens=500),
        )
    )
    result = await run(
        agent_for(model, max_output_tokens=1000), "go", limits=Limits(token_budget=5000)
    )
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert result.usage.input_tokens + result.usage.output_tokens <= 5000
    valid_transcript(result.messages)


def test_the_default_limits_are_the_pinned_ones():
    pinned = Limits(
        max_turns=20,
        timeout=900,
        token_budget=2_000_000,
        cost_budget_usd=None,
        max_depth=3,
        max_children=10,
        max_agents=100,
        max_concurrency=16,
        max_consecutive_errors=3,
        repeat_limit=3,
        tool_timeout=120,
        max_result_chars=100_000,
        output_retries=2,
        cache_warmup_wait=5.0,
    )
    assert pinned == DEFAULT_LIMITS


def test_limits_hold_only_what_they_set():
    limits = Limits(max_turns=5)
    assert limits.max_turns == 5
    assert limits.timeout is None and limits.tool_timeout is None


@pytest.mark.parametrize(
    "bad", [{"max_turns": 0}, {"timeout": -1}, {"tool_timeout": 0}, {"max_result_chars": "many"}]
)
def test_limits_reject_values_that_cannot_bound_anything(bad):
    (field,) = bad
    with pytest.raises(ConfigurationError, match=field):
        Limits(**bad)


# --- model failures --------------------------------------------------------------------------------


async def test_a_model_error_ends_the_agent_with_error_and_the_reason(valid_transcript):
    def broken(request):
        raise ModelError("overloaded after 5 retries", kind="overloaded")

    result = await run(agent_for(FunctionModel(broken)), "go")
    assert result.status is RunStatus.ERROR
    assert "overloaded after 5 retries" in result.error
    valid_transcript(result.messages)


async def test_a_model_error_after_a_tool_turn_keeps_the_transcript_valid(valid_transcript):
    def model(request):
        if len(request.messages) > 1:
            raise ModelError("connection lost")
        return tool_call("add", {"a": 1, "b": 2})

    result = await run(agent_for(FunctionModel(model)), "go")
    assert result.status is RunStatus.ERROR
    assert "connection lost" in result.error
    valid_transcript(result.messages)


async def test_an_exhausted_script_is_an_error_naming_the_agent_and_the_step(valid_transcript):
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2})])
    result = await run(agent_for(model), "go")
    assert result.status is RunStatus.ERROR
    assert "solver" in result.error
    assert "1" in result.error and "step" in result.error
    valid_transcript(result.messages)


async def test_a_per_agent_script_is_used_by_the_agent_it_names():
    model = ScriptedModel({"solver": [text("from my script")], "other": [text("not mine")]})
    result = await run(agent_for(model), "go")
    assert result.output == "from my script"


async def test_a_per_agent_script_without_the_agent_is_an_error_naming_it():
    model = ScriptedModel({"other": [text("not mine")]})
    result = await run(agent_for(model), "go")
    assert result.status is RunStatus.ERROR
    assert "solver" in result.error


# --- what the model sees ---------------------------------------------------------------------------


async def test_the_model_request_carries_system_messages_tools_cap_and_agent():
    rec = Recorder(text("ok"))
    agent = Agent(
        "solver",
        "You solve arithmetic.",
        model=FunctionModel(rec),
        tools=[add, fail],
        max_output_tokens=777,
    )
    await run(agent, "What is 5 + 10?")
    (request,) = rec.requests
    (messages,) = rec.snapshots
    assert request.system == "You solve arithmetic."
    assert [m.role for m in messages] == ["user"]
    assert messages[0].content[0].type == "text"
    assert messages[0].text == "What is 5 + 10?"
    assert [t.name for t in request.tools] == ["add", "fail"]
    assert request.max_tokens == 777
    assert request.agent.name == "solver"
    assert request.agent.path == "solver"
    assert request.agent.depth == 0


async def test_the_default_output_cap_is_4096():
    rec = Recorder(text("ok"))
    await run(agent_for(FunctionModel(rec)), "go")
    assert rec.requests[0].max_tokens == 4096


async def test_the_model_sees_each_tool_result_in_the_next_request():
    rec = Recorder(tool_call("add", {"a": 2, "b": 3}, id="toolu_x"), text("5"))
    await run(agent_for(FunctionModel(rec)), "go")
    second = rec.snapshots[1]
    assert [m.role for m in second] == ["user", "assistant", "user"]
    (res,) = tool_results(second[2])
    assert res.tool_use_id == "toolu_x" and res.content == "5"


async def test_a_request_holds_a_snapshot_of_the_transcript_not_a_live_view():
    rec = Recorder(tool_call("add", {"a": 2, "b": 3}), text("5"))
    await run(agent_for(FunctionModel(rec)), "go")
    first = rec.requests[0]
    assert len(first.messages) == 1, "the first request's transcript changed after the call"


async def test_an_async_function_model_is_awaited():
    async def fn(request):
        await trio.lowlevel.checkpoint()
        return text("async answer")

    result = await run(agent_for(FunctionModel(fn)), "go")
    assert result.output == "async answer"


async def test_usage_adds_up_over_the_agents_model_calls():
    model = ScriptedModel(
        [
            response(
                tool_call("add", {"a": 1, "b": 1}), usage=Usage(input_tokens=100, output_tokens=10)
            ),
            response(
                text("2"), usage=Usage(input_tokens=120, output_tokens=5, cache_read_tokens=90)
            ),
        ]
    )
    result = await run(agent_for(model), "go")
    assert result.usage.input_tokens == 220
    assert result.usage.output_tokens == 15
    assert result.usage.cache_read_tokens == 90
    assert result.own_usage == result.usage


async def test_a_call_cut_off_while_running_says_it_may_have_partly_run(autojump_clock) -> None:
    sent: list[str] = []

    @tool
    async def send(to: str) -> str:
        """Send a message.

        Args:
            to: Recipient.
        """
        sent.append(to)
        await trio.sleep(10)
        return "sent"

    agent = Agent(
        "mailer",
        "Send.",
        tools=[send],
        model=ScriptedModel([tool_call("send", {"to": "bob"}), text("done")]),
    )
    result = await run(agent, "go", limits=Limits(timeout=1))
    assert result.status is RunStatus.TIMEOUT and sent == ["bob"]
    cut = result.messages[-1].content[0]
    assert cut.is_error and "may have partly run" in cut.content  # type: ignore[union-attr]


def test_limits_refuse_fractions_where_a_count_is_meant() -> None:
    with pytest.raises(ConfigurationError, match="max_concurrency"):
        Limits(max_concurrency=2.0)  # type: ignore[arg-type]
    assert Limits(timeout=0.5, tool_timeout=1.5).timeout == 0.5


async def test_a_call_id_used_again_in_a_later_turn_is_not_taken_for_a_cut_call() -> None:
    @tool
    async def ping() -> str:
        """Ping."""
        return "pong"

    script = [tool_call("ping", {}, id="call"), tool_call("ping", {}, id="call")]
    agent = Agent("p", "Ping.", tools=[ping], model=ScriptedModel(script))
    result = await run(agent, "go", limits=Limits(max_turns=2, repeat_limit=5))
    assert result.status is RunStatus.MAX_TURNS
    last = result.messages[-1].content[0]
    assert "not run" in last.content  # type: ignore[union-attr]
