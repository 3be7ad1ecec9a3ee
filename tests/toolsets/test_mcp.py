"""MCP servers as toolsets, against real servers written with the ``mcp`` SDK (tests/support).

The tests run the server of ``tests/support/mcp_server.py`` as a real process: one of their
own (stdio, or streamable HTTP on a free 127.0.0.1 port) where the process or state it keeps is
the point, else the worker's shared one over HTTP (``shared_server_url``). They drive an agent
through the public API with scripted models: names, narrowing, policy, argument checks,
timeouts, cancellation reaching the server, results, failures at start and mid-run, the spans
and the trace context in ``_meta``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.mcp_servers import SERVER, free_port, http_test_server
from support.trees import Script, assert_valid_transcript, spawn, tool_results

from orchestrator import Agent, ConfigurationError, Limits, Policy, RunStatus, open_run, run, tool
from orchestrator.mcp import MCPServer
from orchestrator.models import text, tool_call


def server(
    tmp_path: Path, variant: str = "default", name: str = "test", timeout: float = 30
) -> MCPServer:
    return MCPServer.stdio(
        name,
        sys.executable,
        [str(SERVER), "--variant", variant, "--marker-dir", str(tmp_path)],
        timeout=timeout,
    )


def results_of(result: Any) -> list[Any]:
    return tool_results(result.messages)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_for(path: Path, seconds: float = 10.0) -> bool:
    with trio.move_on_after(seconds):
        while not path.exists():
            await trio.sleep(0.02)
        return True
    return False


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with http_test_server(tmp_path) as server:
        yield server


# -- names, order, narrowing ---------------------------------------------------------------


@tool
def local_note(text: str) -> str:
    """Keep a note.

    Args:
        text: the note
    """
    return f"noted {text}"


async def test_tools_are_named_server__tool_sorted_after_the_agents_own_and_work(
    tmp_path: Path, shared_server_url: str
) -> None:
    script = Script(
        {
            "root": [
                [
                    tool_call("test__echo", {"text": "hello"}),
                    tool_call("test__add", {"a": 2, "b": 40}),
                    tool_call("local_note", {"text": "x"}),
                ],
                text("done"),
            ]
        }
    )
    agent = Agent(
        "root",
        "Use the tools.",
        tools=[local_note, MCPServer.http("test", shared_server_url)],
        model=script.model,
    )
    result = await run(agent, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    names = [t.name for t in script.requests[0].tools]
    assert names[0] == "local_note"
    mcp_names = names[1:]
    assert mcp_names == sorted(mcp_names)
    assert {"test__echo", "test__add", "test__sleep", "test__mixed"} <= set(mcp_names)
    assert [r.content for r in results_of(result)] == ["hello", "42", "noted x"]
    # the model sees the server's own schema and description
    echo = next(t for t in script.requests[0].tools if t.name == "test__echo")
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    assert "Say the text back" in echo.description


async def test_characters_outside_the_name_alphabet_become_underscores(
    tmp_path: Path, shared_server_url: str
) -> None:
    script = Script({"root": [tool_call("my_srv__echo", {"text": "hi"}), text("done")]})
    agent = Agent(
        "root", "Echo.", tools=[MCPServer.http("my.srv", shared_server_url)], model=script.model
    )
    result = await run(agent, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    assert "my_srv__echo" in {t.name for t in script.requests[0].tools}
    assert results_of(result)[0].content == "hi"


async def test_two_server_tools_with_one_exposed_name_are_left_out_unless_only_picks_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # without only(): neither is offered, a warning names both, the run goes on
    script = Script({"root": [text("done")]})
    agent = Agent("root", "Read.", tools=[server(tmp_path, "collide")], model=script.model)
    with caplog.at_level(logging.WARNING, logger="orchestrator.mcp"):
        result = await run(agent, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    assert script.requests[0].tools == []
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert any("'read.file'" in m and "'read_file'" in m and "only()" in m for m in warned)
    # the advice holds: only() naming one by the server's name gets that one
    script = Script({"root": [tool_call("test__read_file", {"path": "a"}), text("done")]})
    picked = server(tmp_path, "collide").only("read.file")
    result = await run(
        Agent("root", "Read.", tools=[picked], model=script.model), "Go.", log_dir=tmp_path
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert [t.name for t in script.requests[0].tools] == ["test__read_file"]
    assert results_of(result)[0].content == "dot a"
    # naming the shared name, or both, is refused saying which
    for names in (("test__read_file",), ("read.file", "read_file")):
        script = Script({"root": [text("done")]})
        narrowed = server(tmp_path, "collide").only(*names)
        with pytest.raises(ConfigurationError) as caught:
            await run(
                Agent("root", "Read.", tools=[narrowed], model=script.model),
                "Go.",
                log_dir=tmp_path,
            )
        message = str(caught.value)
        assert "'read.file'" in message and "'read_file'" in message, message
        assert "'test__read_file'" in message and script.requests == []


async def test_a_local_tool_and_a_server_tool_with_one_name_are_refused_naming_both(
    tmp_path: Path,
) -> None:
    @tool
    def test__echo(text: str) -> str:
        """A local tool shadowing the server's."""
        return text

    script = Script({"root": [text("done")]})
    agent = Agent("root", "Echo.", tools=[test__echo, server(tmp_path)], model=script.model)
    with pytest.raises(ConfigurationError) as caught:
        await run(agent, "Go.", log_dir=tmp_path)
    message = str(caught.value)
    assert "the tool 'test__echo' of agent 'root'" in message
    assert "the tool 'echo' of MCP server 'test'" in message
    assert script.requests == []


async def test_a_name_past_64_characters_is_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script({"root": [text("done")]})
    agent = Agent("root", "Look.", tools=[server(tmp_path, "long")], model=script.model)
    with caplog.at_level(logging.WARNING, logger="orchestrator.mcp"):
        result = await run(agent, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED
    names = {t.name for t in script.requests[0].tools}
    assert "test__echo" in names and not any("tttt" in n for n in names)
    assert any("left out" in r.getMessage() and "t" * 70 in r.getMessage() for r in caplog.records)


async def test_only_narrows_and_an_unknown_name_is_refused_before_any_call(
    tmp_path: Path, shared_server_url: str
) -> None:
    srv = MCPServer.http("test", shared_server_url)
    script = Script({"root": [text("done")]})
    agent = Agent(
        "root", "Add.", tools=[srv.only("add", "test__echo")], model=script.model
    )  # its own name, or the exposed one
    assert (await run(agent, "Go.", log_dir=tmp_path)).status is RunStatus.COMPLETED
    assert [t.name for t in script.requests[0].tools] == ["test__add", "test__echo"]
    with pytest.raises(ConfigurationError, match=r"offers no tool named 'ad'.*its tools: add"):
        await run(agent.replace(tools=[srv.only("ad")]), "Go.", log_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="can narrow, not widen"):
        srv.only("add").only("echo")


async def test_children_share_one_connection_inherit_narrow_and_spawn_may_name_mcp_tools(
    tmp_path: Path,
) -> None:
    srv = server(tmp_path)
    script = Script(
        {
            "lead": [
                [
                    spawn("helper", "echo once", tools=["test__echo", "test__pid"]),
                    spawn("adder", "add"),
                    spawn("helper", "widen", tools=["test__fail", "spawn_subagent"]),
                ],
                text("done"),
            ],
            "helper": [tool_call("test__pid", {}), text("helped")],
            "adder": [tool_call("test__pid", {}), text("added")],
        }
    )
    helper = Agent("helper", "Help.", description="helps")  # tools=None: the lead's
    adder = Agent("adder", "Add.", description="adds", tools=[srv.only("add", "pid")])
    lead = Agent("lead", "Lead.", tools=[srv], subagents=[helper, adder], model=script.model)
    result = await run(lead, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    assert script.tool_names("lead/helper#1") == {"test__echo", "test__pid"}
    assert script.tool_names("lead/adder#1") == {"test__add", "test__pid"}
    spawned = results_of(result)
    assert spawned[2].is_error and "test__fail" not in spawned[2].content.split("may only use")[0]
    pids = {results_of(child)[0].content for child in result.children}
    assert len(pids) == 1  # one server process for the whole run, shared by every agent
    assert not alive(int(pids.pop()))  # and closed when the run ended


async def test_every_server_of_the_tree_is_connected_concurrently_before_the_first_call(
    tmp_path: Path,
) -> None:
    script = Script({"lead": [text("done")]})
    one = server(tmp_path, "slow-start", name="one")
    two = server(tmp_path, "slow-start", name="two")
    child = Agent("child", "Help.", description="helps", tools=[two])
    lead = Agent("lead", "Lead.", tools=[one], subagents=[child], model=script.model)
    result = await run(lead, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    # both started before the lead's first call, the child's server too (never spawned)
    assert {"one__echo"} <= {t.name for t in script.requests[0].tools}
    assert len(list(tmp_path.glob("*.mcp-two.stderr.log"))) == 1
    # each starts only once the other is starting too: one after the other, the first would
    # give up waiting (after 20 s) and say so
    assert sorted(p.read_text() for p in tmp_path.glob("ready-*")) == ["together", "together"]


def test_replacing_an_agents_fields_keeps_its_servers(tmp_path: Path) -> None:
    srv = server(tmp_path)
    agent = Agent("a", "x", tools=[local_note, srv.only("echo")])
    changed = agent.replace(model="offline")
    assert changed.toolsets == agent.toolsets and changed.tools == (local_note,)
    assert agent.replace(tools=None).toolsets == ()
    with pytest.raises(ConfigurationError, match="tools must be a list"):
        Agent("a", "x", tools=srv)  # type: ignore[arg-type]


# -- policy ----------------------------------------------------------------------------------


async def test_policy_patterns_exact_rules_win_and_the_stricter_pattern_wins(
    tmp_path: Path, shared_server_url: str
) -> None:
    calls = [
        tool_call("test__echo", {"text": "allowed"}),
        tool_call("test__add", {"a": 1, "b": 2}),
        tool_call("test__echo_count", {}),
    ]
    script = Script({"root": [calls, text("done")]})
    policy = Policy({"test__*": "deny", "test__echo": "allow", "*count": "confirm"})
    agent = Agent(
        "root",
        "Go.",
        tools=[MCPServer.http("test", shared_server_url)],
        model=script.model,
        policy=policy,
    )
    result = await run(agent, "Go.", log_dir=tmp_path)
    echo, add, count = results_of(result)
    assert not echo.is_error and echo.content == "allowed"  # exact beats the pattern
    assert add.is_error and "denied by policy" in add.content
    assert count.is_error and "denied by policy" in count.content  # deny beats confirm
    # a run's pattern combines with the agent's exact rule: the stricter wins
    result = await run(
        agent.replace(policy=Policy({"test__echo": "allow"})),
        "Go.",
        policy=Policy({"test__e*": "deny"}),
        log_dir=tmp_path,
    )
    assert all(r.is_error for r in results_of(result)[::2])


async def test_an_exact_rule_naming_no_tool_of_the_tree_is_refused_a_pattern_is_not(
    tmp_path: Path, shared_server_url: str
) -> None:
    script = Script({"root": [text("done")]})
    agent = Agent(
        "root",
        "Go.",
        tools=[MCPServer.http("test", shared_server_url).only("echo")],
        model=script.model,
    )
    with pytest.raises(ConfigurationError, match="did you mean 'test__echo'"):
        await run(agent, "Go.", policy=Policy({"test__ech": "deny"}), log_dir=tmp_path)
    assert script.requests == []
    # a pattern matching nothing (the narrowed server has no add) is fine
    result = await run(agent, "Go.", policy=Policy({"test__add*": "deny"}), log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED


# -- calls -----------------------------------------------------------------------------------


async def test_arguments_are_checked_against_the_input_schema_before_the_server_is_called(
    tmp_path: Path,
) -> None:
    script = Script(
        {
            "root": [
                tool_call("test__echo", {"text": 5}),
                tool_call("test__echo", {"txt": "x"}),
                tool_call("test__echo_count", {}),
                text("done"),
            ]
        }
    )
    agent = Agent("root", "Go.", tools=[server(tmp_path)], model=script.model)
    result = await run(agent, "Go.", log_dir=tmp_path)
    wrong_type, missing, count = results_of(result)
    assert wrong_type.is_error and wrong_type.error_type == "invalid_arguments"
    assert "text" in wrong_type.content and "string" in wrong_type.content
    assert missing.is_error and missing.error_type == "invalid_arguments"
    assert count.content == "0"  # the server's echo never ran


async def test_results_text_parts_in_order_other_parts_one_line_errors_and_the_cap(
    tmp_path: Path, shared_server_url: str
) -> None:
    script = Script(
        {
            "root": [
                [
                    tool_call("test__mixed", {}),
                    tool_call("test__fail", {"message": "the disk is full"}),
                    tool_call("test__big", {"n": 5000}),
                ],
                text("done"),
            ]
        }
    )
    agent = Agent(
        "root", "Go.", tools=[MCPServer.http("test", shared_server_url)], model=script.model
    )
    result = await run(agent, "Go.", limits=Limits(max_result_chars=300), log_dir=tmp_path)
    mixed, failed, big = results_of(result)
    assert mixed.content.splitlines() == [
        "first part",
        "[image: image/png, 72 bytes, not shown]",
        "second part",
        "[resource link: notes <file:///notes.txt>, text/plain]",
    ]
    assert failed.is_error and "the disk is full" in failed.content
    assert not big.is_error and big.content.startswith("x" * 300)
    assert "[truncated: showing 300 of 5000 characters" in big.content


async def test_annotations_make_tools_idempotent(tmp_path: Path, shared_server_url: str) -> None:
    tools = {
        t.name: t
        for t in await MCPServer.http("test", shared_server_url).list_tools(log_dir=tmp_path)
    }
    assert tools["test__add"].idempotent  # readOnlyHint
    assert tools["test__pid"].idempotent  # idempotentHint
    assert not tools["test__echo"].idempotent


async def test_a_call_past_tool_timeout_is_an_error_and_the_server_is_told_to_cancel(
    tmp_path: Path,
) -> None:
    script = Script(
        {
            "root": [
                tool_call("test__sleep", {"seconds": 30, "marker": "timed-out"}),
                tool_call("test__echo", {"text": "still here"}),
                text("done"),
            ]
        }
    )
    agent = Agent("root", "Go.", tools=[server(tmp_path)], model=script.model)
    # 3 s: the call reaches the server before its timeout even on a loaded machine (a cancel
    # for a call the server never started leaves no marker); well under the 30 s sleep
    result = await run(agent, "Go.", limits=Limits(tool_timeout=3), log_dir=tmp_path)
    slept, echoed = results_of(result)
    assert slept.is_error and slept.error_type == "timeout"
    assert echoed.content == "still here"  # the session survived
    assert (tmp_path / "timed-out.started").exists()
    assert (tmp_path / "timed-out").read_text() == "cancelled"


async def test_cancelling_the_run_cancels_the_call_on_the_server_and_stops_the_server(
    tmp_path: Path,
) -> None:
    script = Script(
        {
            "root": [
                tool_call("test__pid", {}),
                tool_call("test__sleep", {"seconds": 30, "marker": "cut"}),
                text("never"),
            ]
        }
    )
    agent = Agent("root", "Go.", tools=[server(tmp_path)], model=script.model)
    async with open_run(agent, "Go.", log_dir=tmp_path) as handle:
        assert await wait_for(tmp_path / "cut.started", 30)  # the sleep call is on the server
        handle.cancel()
        result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    assert_valid_transcript(result.messages)
    assert (tmp_path / "cut").read_text() == "cancelled"
    assert not alive(int(results_of(result)[0].content))


async def test_sampling_requests_are_refused_and_a_changed_tool_list_is_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(
        {
            "root": [
                tool_call("test__sample", {}),
                tool_call("test__grow", {}),
                tool_call("test__extra", {}),
                text("done"),
            ]
        }
    )
    agent = Agent("root", "Go.", tools=[server(tmp_path)], model=script.model)
    with caplog.at_level(logging.INFO, logger="orchestrator.mcp"):
        result = await run(agent, "Go.", log_dir=tmp_path)
    sampled, grown, extra = results_of(result)
    assert sampled.content.startswith("sampling refused")
    assert grown.content == "grew"
    assert extra.is_error and "not available" in extra.content
    assert all("test__extra" not in {t.name for t in r.tools} for r in script.requests)
    assert any("says its tools changed" in r.getMessage() for r in caplog.records)


# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "timeout", "expected"),
    [
        ("fail-start", 30, "its last stderr line: error: cannot open the database"),
        ("mute", 3, "did not start within 3s; its last stderr line: test server mute"),
    ],
    ids=["exits", "never-answers"],
)
async def test_a_server_that_does_not_start_ends_the_run_before_any_model_call(
    tmp_path: Path, variant: str, timeout: float, expected: str
) -> None:
    script = Script({"root": [text("done")]})
    agent = Agent(
        "root", "Go.", tools=[server(tmp_path, variant, timeout=timeout)], model=script.model
    )
    started = time.monotonic()
    result = await run(agent, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert result.error.startswith("MCP server 'test' ")
    assert expected in result.error
    assert script.requests == []
    # a bound load cannot break: the server that exits is not waited for until its 30 s start
    # timeout, the mute one no longer than its 3 s one (the message above says so), not forever
    assert time.monotonic() - started < 30


async def test_a_command_that_is_not_found_is_named(tmp_path: Path) -> None:
    script = Script({"root": [text("done")]})
    missing = MCPServer.stdio("gone", "no-such-mcp-server-command")
    result = await run(Agent("root", "Go.", tools=[missing], model=script.model), "Go.")
    assert result.status is RunStatus.ERROR
    assert result.error == (
        "MCP server 'gone' failed to start: its command 'no-such-mcp-server-command' was not found"
    )
    assert script.requests == []


async def test_a_server_dying_mid_run_turns_calls_into_errors_naming_it_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    script = Script(
        {
            "root": [
                tool_call("test__die", {}),
                tool_call("test__echo", {"text": "anyone?"}),
                tool_call("local_note", {"text": "still working"}),
                text("done without the server"),
            ]
        }
    )
    agent = Agent("root", "Go.", tools=[local_note, server(tmp_path)], model=script.model)
    result = await run(agent, "Go.", log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED
    died, later, local = results_of(result)
    for r in (died, later):
        assert r.is_error
        assert "MCP server 'test'" in r.content
        assert "its last stderr line: dying now: the test asked for it" in r.content
    assert local.content == "noted still working"


async def test_stderr_goes_to_a_log_file_beside_the_run_not_to_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = Script({"root": [text("done")]})
    agent = Agent("root", "Go.", tools=[server(tmp_path)], model=script.model)
    result = await run(agent, "Go.", log_dir=tmp_path / "runs", run_id="r1")
    assert result.status is RunStatus.COMPLETED
    log = tmp_path / "runs" / "r1.mcp-test.stderr.log"
    assert "test server default starting" in log.read_text()
    out, err = capfd.readouterr()
    assert "test server default starting" not in out + err


# -- tracing ---------------------------------------------------------------------------------


def memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_calls_are_execute_tool_spans_with_mcp_attributes_and_traceparent_in_meta(
    tmp_path: Path,
) -> None:
    provider, exporter = memory_provider()
    script = Script({"root": [tool_call("test__meta", {"name": "stdio-meta"}), text("done")]})
    agent = Agent("root", "Go.", tools=[server(tmp_path)], model=script.model)
    result = await run(agent, "Go.", tracer_provider=provider, log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool test__meta"]
    attrs = dict(span.attributes or {})
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["network.transport"] == "pipe"
    assert attrs["gen_ai.tool.name"] == "test__meta"
    assert attrs["orchestrator.mcp.server"] == "test" and attrs["orchestrator.mcp.tool"] == "meta"
    assert attrs["mcp.protocol.version"]
    meta = json.loads((tmp_path / "stdio-meta").read_text())
    _, trace_id, parent_id, _ = meta["traceparent"].split("-")
    assert trace_id == f"{span.context.trace_id:032x}"
    ours = {f"{s.context.span_id:016x}" for s in exporter.get_finished_spans()}
    # the execute_tool span, or the SDK's own span under it when a global provider is set
    assert parent_id == f"{span.context.span_id:016x}" or parent_id not in ours


async def test_over_http_calls_work_are_traced_and_a_dead_server_ends_only_its_calls(
    tmp_path: Path, http_server: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = http_server
    provider, exporter = memory_provider()

    def kill_then_sleep(request: Any) -> Any:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return tool_call("web__echo", {"text": "after"})

    script = Script(
        {
            "root": [
                [
                    tool_call("web__meta", {"name": "http-meta"}),
                    tool_call("web__add", {"a": 1, "b": 1}),
                ],
                kill_then_sleep,
                tool_call("local_note", {"text": "go on"}),
                text("done"),
            ]
        }
    )
    web = MCPServer.http("web", url)
    agent = Agent("root", "Go.", tools=[local_note, web], model=script.model)
    result = await run(agent, "Go.", tracer_provider=provider, log_dir=tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    wrote, added, after, local = results_of(result)
    assert wrote.content == "written" and added.content == "2"
    assert after.is_error and "MCP server 'web'" in after.content
    assert local.content == "noted go on"
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool web__meta"]
    attrs = dict(span.attributes or {})
    assert attrs["network.transport"] == "tcp" and attrs["mcp.method.name"] == "tools/call"
    assert attrs["server.address"] == "127.0.0.1"
    meta = json.loads((tmp_path / "http-meta").read_text())
    assert meta["traceparent"].split("-")[1] == f"{span.context.trace_id:032x}"


async def test_a_url_that_does_not_answer_ends_the_run_naming_it(tmp_path: Path) -> None:
    script = Script({"root": [text("done")]})
    url = f"http://127.0.0.1:{free_port()}/mcp"
    agent = Agent("root", "Go.", tools=[MCPServer.http("web", url, timeout=5)], model=script.model)
    result = await run(agent, "Go.")
    assert result.status is RunStatus.ERROR
    assert result.error == f"MCP server 'web' failed to start: nothing answered at {url}"
    assert script.requests == []
