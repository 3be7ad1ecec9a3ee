"""The progress display (orchestrator.progress): driven by events, settled by the result."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import trio
from support.cli import Cli
from support.fake_messages_server import (
    FakeMessagesServer,
    cited_text,
    server_tool_use,
    web_fetch_result,
    web_search_result,
)
from support.fake_messages_server import Message as Reply

from orchestrator import Agent, RunResult, WebFetch, WebSearch, open_run, run
from orchestrator.cli.progress import follow_events
from orchestrator.core.events import AgentStarted, Event, ModelTextDelta, ServerToolStarted
from orchestrator.models import ScriptedModel, text, tool_call
from orchestrator.models.anthropic import AnthropicModel


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


# ---------------------------------------------------------------------------------------------
# hosted tools: what the provider searches and fetches, as it streams

URL = "https://trio.readthedocs.io/en/stable/reference-core.html"

WEB_TREE = """
from orchestrator import Agent, WebFetch, WebSearch
from orchestrator.models.anthropic import AnthropicModel

agent = Agent(
    "researcher", "Research.", model=AnthropicModel(), tools=[WebSearch(), WebFetch()]
)
"""


def _searched_and_fetched() -> Reply:
    return Reply(
        (
            server_tool_use("web_search", {"query": "trio nursery"}, id="srvtoolu_1"),
            web_search_result("srvtoolu_1", (URL, "Trio core")),
            server_tool_use("web_fetch", {"url": URL}, id="srvtoolu_2"),
            web_fetch_result("srvtoolu_2", URL, "A nursery is a scope for child tasks."),
            cited_text("A nursery scopes child tasks.", (URL, "a scope for child tasks")),
        ),
        usage={"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 1}},
    )


async def test_a_runs_events_show_each_search_and_fetch_as_it_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with FakeMessagesServer() as server:
        server.push(_searched_and_fetched())
        agent = Agent(
            "researcher",
            "Research.",
            model=AnthropicModel(base_url=server.url),
            tools=[WebSearch(), WebFetch()],
        )
        async with open_run(agent, "What is a trio nursery?") as handle:
            result = await handle.result()
            events = [e async for e in handle.events]
    assert result.output == "A nursery scopes child tasks."
    streamed = [e for e in events if isinstance(e, ServerToolStarted | ModelTextDelta)]
    # the search and the fetch as the stream brought them, before the text that cites them
    assert isinstance(streamed[0], ServerToolStarted) and isinstance(streamed[1], ServerToolStarted)
    assert [(e.tool, e.call_id, dict(e.input)) for e in streamed[:2]] == [
        ("web_search", "srvtoolu_1", {"query": "trio nursery"}),
        ("web_fetch", "srvtoolu_2", {"url": URL}),
    ]
    assert all(isinstance(e, ModelTextDelta) for e in streamed[2:])

    plain = (await _show(result, events, live=False)).splitlines()
    assert [line for line in plain if line.startswith("web")] == [
        'web    researcher: searching "trio nursery"',
        f"web    researcher: fetching {URL}",
    ]
    # the live tree's row shows the step while the model call goes on
    upto_search = events[: events.index(streamed[0]) + 1]
    send, receive = trio.open_memory_channel[Event](len(upto_search) + 1)
    for event in upto_search:
        send.send_nowait(event)
    send.close()
    stream = io.StringIO()
    await follow_events(receive, live=True, stream=stream)  # the frame as the events left it
    assert 'researcher [running] searching "trio nursery"' in stream.getvalue()


async def test_a_search_query_reaches_the_terminal_redacted_and_on_one_line() -> None:
    result = await _team_result()
    events: list[Event] = [
        AgentStarted("lead", "lead", 0, None, "go"),
        ServerToolStarted("lead", "web_search", "srvtoolu_1", {"query": "a\nb\x1b[2J"}),
        ServerToolStarted("lead", "web_fetch", "srvtoolu_2", {"url": 7}),
    ]
    plain = (await _show(result, events, live=False)).splitlines()
    assert plain[1] == 'web    lead: searching "a\\nb\\x1b[2J"'
    assert plain[2] == "web    lead: provider runs web_fetch"  # no URL to show


def test_the_command_line_shows_the_researchers_searches_and_fetches(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(WEB_TREE)
    with FakeMessagesServer() as server:
        server.push(_searched_and_fetched())
        proc = cli(
            "run",
            "tree.py",
            "What is a trio nursery?",
            env={"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": server.url},
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "A nursery scopes child tasks."
    lines = proc.stderr.splitlines()
    assert 'web    researcher: searching "trio nursery"' in lines
    assert f"web    researcher: fetching {URL}" in lines
    assert lines.index('web    researcher: searching "trio nursery"') < lines.index(
        f"web    researcher: fetching {URL}"
    )
