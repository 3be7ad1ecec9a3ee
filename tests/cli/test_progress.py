"""The progress display (orchestrator.progress): driven by events, settled by the result."""

from __future__ import annotations

import io
from pathlib import Path

import trio
from support.cli import Cli

from orchestrator import Agent, RunResult, run
from orchestrator.cli.progress import follow_events
from orchestrator.core.events import AgentStarted, Event
from orchestrator.models import ScriptedModel, text, tool_call


async def _team_result() -> RunResult:
    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker])
    spawns = [tool_call("spawn_subagent", {"agent": "worker", "task": f"t{i}"}) for i in range(3)]
    model = ScriptedModel({"lead": [spawns, text("all done")], "worker": [text("ok")]})
    return await run(lead, "go", model=model)


async def _show(result: RunResult, events: list[Event], *, live: bool) -> str:
    """What the display writes when only ``events`` reached it (the rest were dropped)."""
    send, receive = trio.open_memory_channel[Event](len(events) + 1)
    for event in events:
        send.send_nowait(event)
    send.close()
    stream = io.StringIO()

    async def outcome() -> RunResult:
        return result

    await follow_events(receive, live=live, stream=stream, outcome=outcome)
    return stream.getvalue()


async def test_plain_progress_prints_the_finishes_whose_events_were_dropped() -> None:
    result = await _team_result()
    only_the_start = [AgentStarted("lead", "lead", 0, None, "go")]
    lines = (await _show(result, only_the_start, live=False)).splitlines()
    assert lines[0] == "start  lead: 'go'"
    finishes = sorted(line.split(":")[0] for line in lines[1:])
    assert finishes == [
        "finish lead",
        "finish lead/worker#1",
        "finish lead/worker#2",
        "finish lead/worker#3",
    ]
    assert all("completed" in line for line in lines[1:])


async def test_the_live_trees_last_frame_shows_every_agent_as_it_ended() -> None:
    result = await _team_result()
    last_frame = await _show(result, [AgentStarted("lead", "lead", 0, None, "go")], live=True)
    assert "[waiting]" not in last_frame and "[running]" not in last_frame
    assert last_frame.count("[done] completed") == 4


async def test_every_model_wait_is_shown_in_the_plain_and_the_live_progress() -> None:
    from orchestrator.core.events import ModelWaiting

    result = await _team_result()
    events: list[Event] = [
        AgentStarted("lead", "lead", 0, None, "go"),
        ModelWaiting("lead", 30.0, "rate limited by the provider"),
    ]
    plain = (await _show(result, events, live=False)).splitlines()
    assert plain[1] == "wait   lead: rate limited by the provider; model call again in 30.0s"

    send, receive = trio.open_memory_channel[Event](len(events) + 1)
    for event in events:
        send.send_nowait(event)
    send.close()
    stream = io.StringIO()
    await follow_events(receive, live=True, stream=stream)  # the frame as the events left it
    assert "waiting 30.0s (rate limited by the provider)" in stream.getvalue()


REFUSALS_TREE = '''
from orchestrator import Agent, Policy, tool
from orchestrator.models import FunctionModel, ScriptedModel, text, tool_call


@tool
def remove(name: str) -> str:
    """Remove a file.

    Args:
        name: The file.
    """
    return "removed " + name


@tool
def wipe() -> str:
    """Wipe everything."""
    return "wiped"


def broken(request):
    raise RuntimeError("the adapter fell over")


worker = Agent("worker", "Work.", description="works", model=FunctionModel(broken))
agent = Agent(
    "lead",
    "Lead.",
    tools=[remove, wipe],
    subagents=[worker],
    policy=Policy({"remove": "confirm", "wipe": "deny"}),
    model=ScriptedModel(
        [
            [
                tool_call("nope", {}),
                tool_call("wipe", {}),
                tool_call("remove", {"name": "a.txt"}),
                tool_call("spawn_subagent", {"agent": "worker", "task": "work"}),
            ],
            text("done"),
        ]
    ),
)
'''


def test_plain_progress_says_declined_only_for_a_no_and_what_any_other_refusal_was(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(REFUSALS_TREE)
    proc = cli("run", "tree.py", "go", "--approve", "none")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "refused lead: nope (unknown tool; not run)" in lines
    assert "refused lead: wipe (denied by policy; not run)" in lines
    assert "declined lead: remove (not run)" in lines  # --approve none said no
    assert [line for line in lines if line.startswith("declined")] == [
        "declined lead: remove (not run)"
    ]
    # an errored child's finish line says why; a completed one's does not change
    (finish,) = [line for line in lines if line.startswith("finish lead/worker#1")]
    assert finish.startswith("finish lead/worker#1: error (") and "the adapter fell over" in finish
    (lead,) = [line for line in lines if line.startswith("finish lead:")]
    assert lead.startswith("finish lead: completed (") and lead.endswith(" tokens)")
