"""MCP servers that answer in ways a well-behaved one does not (issue 39, part 4): an error
answer coded like a closed connection, replies the SDK cannot parse, a tool listed twice, tool
definitions the SDK's models refuse. A hand-written server (tests/support/mcp_raw_server.py, a
real process speaking JSON-RPC over stdio) sends what the SDK's own server never would; the
SDK's server (tests/support/mcp_server.py) shows the same over streamable HTTP where it can.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from support.trees import Script, tool_results

from orchestrator import Agent, ConfigurationError, Limits, RunStatus, run
from orchestrator.mcp import MCPServer
from orchestrator.models import text, tool_call

RAW = Path(__file__).parents[1] / "support" / "mcp_raw_server.py"


def raw(variant: str = "default") -> MCPServer:
    return MCPServer.stdio("raw", sys.executable, [str(RAW), "--variant", variant])


def calls(*names: str) -> Script:
    turns: list[Any] = [
        tool_call(f"raw__{n}", {"text": "hi"} if n == "echo" else {}) for n in names
    ]
    return Script({"root": [*turns, text("done")]})


async def results(tmp_path: Path, server: MCPServer, script: Script) -> list[tuple[bool, str]]:
    agent = Agent("root", "Use the tools.", tools=[server], model=script.model)
    # a minute per call: a call left waiting would say "timed out", never pass
    result = await run(agent, "Go.", log_dir=tmp_path, limits=Limits(tool_timeout=60))
    assert result.status is RunStatus.COMPLETED, result.error
    return [(r.is_error, r.content) for r in tool_results(result.messages)]


# -- an error answer is not a dead server --------------------------------------------------


async def test_an_error_answer_coded_like_a_closed_connection_leaves_the_server_usable(
    tmp_path: Path,
) -> None:
    got = await results(tmp_path, raw(), calls("refuse", "echo", "refuse"))
    assert got[0][0] and "quota exhausted for today" in got[0][1] and "-32000" in got[0][1]
    assert "not running" not in got[0][1]
    assert got[1] == (False, "hi")
    assert got[2][0] and "quota exhausted" in got[2][1]


async def test_over_http_an_error_answer_coded_like_a_closed_connection_is_an_answer(
    tmp_path: Path, shared_server_url: str
) -> None:
    script = Script(
        {"root": [tool_call("t__refuse", {}), tool_call("t__echo", {"text": "hi"}), text("ok")]}
    )
    got = await results(tmp_path, MCPServer.http("t", shared_server_url), script)
    assert got[0][0] and "quota exhausted for today" in got[0][1], got
    assert got[1] == (False, "hi")


async def test_a_server_whose_connection_really_closed_is_still_taken_as_stopped(
    tmp_path: Path,
) -> None:
    got = await results(tmp_path, raw(), calls("die", "echo"))
    assert got[0][0] and "its connection closed" in got[0][1]
    assert got[1][0] and "is not running" in got[1][1]
    assert "dying now" in got[1][1]  # its last stderr line


# -- replies the SDK cannot parse ---------------------------------------------------------


async def test_a_reply_the_sdk_cannot_parse_fails_the_call_at_once_and_the_server_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="orchestrator.mcp"):
        got = await results(tmp_path, raw(), calls("surrogate", "echo"))
    assert got[0][0], got
    assert "cannot read" in got[0][1] and "still running" in got[0][1]
    assert "timed out" not in got[0][1]
    assert got[1] == (False, "hi")
    assert any("cannot be read" in r.getMessage() for r in caplog.records)


async def test_bytes_that_are_not_utf8_are_read_as_replacement_characters(
    tmp_path: Path,
) -> None:
    got = await results(tmp_path, raw(), calls("bad_utf8", "echo"))
    assert got[0] == (False, "\ufffd\ufffd not utf-8")
    assert got[1] == (False, "hi")


# -- one tool's definition does not take the others down ----------------------------------


async def test_a_tool_the_sdks_model_check_refuses_is_left_out_and_the_others_work(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = calls("echo")
    with caplog.at_level(logging.WARNING, logger="orchestrator.mcp"):
        got = await results(tmp_path, raw("bad-schema"), script)
    assert got == [(False, "hi")]
    offered = {t.name for t in script.requests[0].tools}
    assert {"raw__echo", "raw__refuse"} <= offered
    assert not offered & {"raw__stringly", "raw__schemaless"}
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "'stringly' is left out" in warned and "'schemaless' is left out" in warned


async def test_a_server_whose_tools_all_pass_lists_them_all_without_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = calls("echo")
    with caplog.at_level(logging.WARNING, logger="orchestrator.mcp"):
        await results(tmp_path, raw(), script)
    offered = {t.name for t in script.requests[0].tools}
    assert offered == {f"raw__{n}" for n in ("echo", "refuse", "surrogate", "bad_utf8", "die")}
    assert not [r for r in caplog.records if "left out" in r.getMessage()]


# -- a tool listed twice -----------------------------------------------------------------


async def test_a_tool_listed_twice_alike_is_one_tool(tmp_path: Path) -> None:
    script = calls("echo")
    assert await results(tmp_path, raw("duplicate"), script) == [(False, "hi")]
    assert [t.name for t in script.requests[0].tools].count("raw__echo") == 1


async def test_a_tool_listed_twice_unlike_is_left_out_and_only_cannot_pick_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = calls("refuse")
    with caplog.at_level(logging.WARNING, logger="orchestrator.mcp"):
        got = await results(tmp_path, raw("duplicate-unlike"), script)
    assert "quota exhausted" in got[0][1]  # the server's other tools work
    assert "raw__echo" not in {t.name for t in script.requests[0].tools}
    assert any("'echo' 2 times" in r.getMessage() for r in caplog.records)
    agent = Agent("root", "Go.", tools=[raw("duplicate-unlike").only("echo")], model=calls().model)
    with pytest.raises(ConfigurationError, match="more than once"):
        await run(agent, "Go.", log_dir=tmp_path)
