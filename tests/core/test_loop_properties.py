"""Property tests over random scripts: the transcript stays valid and every run stays in bounds."""

from __future__ import annotations

from functools import partial

import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

from orchestrator import Agent, Limits, RunStatus, run, tool
from orchestrator.models import ScriptedModel, response, text, tool_call

SETTINGS = settings(max_examples=50, deadline=None)


@tool
async def ok(x: int) -> str:
    """Succeeds."""
    return f"ok {x}"


@tool
async def boom(x: int) -> str:
    """Fails."""
    raise ValueError(f"boom {x}")


@tool
async def nap(seconds: float) -> str:
    """Sleeps."""
    await trio.sleep(seconds)
    return "rested"


calls = st.lists(
    st.builds(
        lambda name, x: tool_call(name, {"x": x}),
        st.sampled_from(["ok", "boom", "nope"]),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=3,
)
text_step = st.builds(
    lambda words, stop: response(*([text(words)] if words else []), stop_reason=stop),
    st.sampled_from(["answer", "partial", "hmm", "answer", "partial", "hmm", ""]),  # "": empty
    st.sampled_from(
        [
            "end_turn",
            "stop_sequence",
            "max_tokens",
            "pause_turn",
            "refusal",
            "model_context_window_exceeded",
            "mystery_reason",
        ]
    ),
)
tool_step = st.builds(
    lambda cs, stop, lead: response(*([text("let me see")] if lead else []), *cs, stop_reason=stop),
    calls,
    st.sampled_from(["tool_use", "tool_use", "tool_use", "max_tokens", "pause_turn", "end_turn"]),
    st.booleans(),
)
scripts = st.lists(st.one_of(text_step, tool_step), min_size=1, max_size=8)
limits = st.builds(
    Limits,
    max_turns=st.integers(1, 6),
    repeat_limit=st.integers(2, 4),
    max_consecutive_errors=st.integers(1, 4),
)


def run_script(script, lim, **options):
    agent = Agent(
        "prop", "Property test agent.", model=ScriptedModel(script), tools=[ok, boom, nap]
    )
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(partial(run, agent, "go", limits=lim, **options), clock=clock)


@SETTINGS
@given(script=scripts, lim=limits)
@example(  # an empty reply cut by max_tokens
    script=[response(stop_reason="max_tokens"), text("answer")], lim=Limits(max_turns=3)
)
@example(  # pause_turn, then tools, then an answer
    script=[
        response(text("searching"), stop_reason="pause_turn"),
        [tool_call("ok", {"x": 1}), tool_call("nope", {"x": 2})],
        text("answer"),
    ],
    lim=Limits(max_turns=3),
)
@example(  # a tool call cut by max_tokens (the retry gets the same cut reply)
    script=[response(tool_call("ok", {"x": 1}), stop_reason="max_tokens"), text("answer")],
    lim=Limits(max_turns=3),
)
def test_random_scripts_keep_the_transcript_valid_and_the_run_in_bounds(
    valid_transcript, script, lim
):
    result = run_script(script, lim)
    messages = result.messages

    # every tool_use has exactly one tool_result, in the very next message, in call order
    valid_transcript(messages, allow_assistant_pairs=True)

    # roles alternate, except right after a pause_turn reply (sent back as it is)
    assistant_index = {}
    for i, m in enumerate(messages):
        if m.role == "assistant":
            assistant_index[i] = len(assistant_index)
    for i in range(1, len(messages)):
        if messages[i].role == messages[i - 1].role:
            assert messages[i].role == "assistant", f"two user messages in a row at {i}"
            step = script[assistant_index[i - 1]]
            assert step.stop_reason == "pause_turn", f"assistant pair at {i} not after pause_turn"

    # every run ends within its limits
    assert 1 <= result.turns <= lim.max_turns
    assert len(assistant_index) <= result.turns
    assert result.status in set(RunStatus)
    if result.status is RunStatus.COMPLETED:
        last = messages[-1]
        # an empty final reply is not recorded (the API rejects empty assistant messages);
        # an answer cut by max_tokens and continued is joined from its pieces
        assert result.output.endswith(last.text if last.role == "assistant" else "")
        assert not last.tool_uses
        assert result.error is None
    else:
        assert result.error
    assert result.status not in (RunStatus.TIMEOUT, RunStatus.CANCELLED)
    assert result.usage.requests <= 2 * result.turns  # a cut tool call is retried once


@SETTINGS
@given(
    durations=st.lists(
        st.lists(st.integers(0, 20), min_size=1, max_size=3), min_size=1, max_size=4
    ),
    timeout=st.integers(1, 60),
    tool_timeout=st.integers(1, 30),
)
def test_timeouts_at_random_moments_keep_the_transcript_valid(
    valid_transcript, durations, timeout, tool_timeout
):
    script = [[tool_call("nap", {"seconds": s}) for s in turn] for turn in durations]
    script.append(text("done"))
    lim = Limits(
        timeout=timeout, tool_timeout=tool_timeout, repeat_limit=10, max_consecutive_errors=10
    )

    async def timed():
        start = trio.current_time()
        agent = Agent("prop", "x", model=ScriptedModel(script), tools=[nap])
        result = await run(agent, "go", limits=lim)
        return result, trio.current_time() - start

    result, elapsed = trio.run(timed, clock=trio.testing.MockClock(autojump_threshold=0))
    valid_transcript(result.messages)
    assert elapsed <= timeout + 1e-6
    assert result.status in (RunStatus.COMPLETED, RunStatus.TIMEOUT), result.error
    expected = sum(min(max(turn), tool_timeout) for turn in durations)
    if expected < timeout:
        assert result.status is RunStatus.COMPLETED
    elif expected > timeout:
        assert result.status is RunStatus.TIMEOUT
