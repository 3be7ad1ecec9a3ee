"""Secrets handed to an MCP server (issue 39, part 5): ``env`` values, ``headers`` and a URL's
credentials are redacted like the environment's wherever they come back (a server echoing them,
an error naming the URL, the trace file, ``--json``), and a server's stderr log is private.

Each test makes its own secrets (random): a held secret is held for the rest of the process.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.cli import Cli
from support.mcp_servers import SERVER, free_port
from support.trees import Script, tool_results

from orchestrator import Agent, RunStatus, run
from orchestrator.mcp import MCPServer
from orchestrator.models import text, tool_call


def fresh(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


async def test_env_values_a_server_echoes_are_redacted_for_the_model_and_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    key, plain = fresh("svc-key"), fresh("verbose")
    server = MCPServer.stdio(
        "test",
        sys.executable,
        [str(SERVER), "--marker-dir", str(tmp_path)],
        env={"SERVICE_API_KEY": key, "LOG_STYLE": plain},
    )
    script = Script(
        {
            "root": [
                [
                    tool_call("test__env", {"name": "SERVICE_API_KEY"}),
                    tool_call("test__env", {"name": "LOG_STYLE"}),
                ],
                text("done"),
            ]
        }
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent("root", "Read the env.", tools=[server], model=script.model)
    result = await run(agent, "Go.", log_dir=tmp_path, tracer_provider=provider)
    assert result.status is RunStatus.COMPLETED, result.error
    # the secret is gone; a value under a name that says nothing secret is kept
    assert [r.content for r in tool_results(result.messages)] == ["[REDACTED]", plain]
    assert key not in repr(script.requests[1].messages)
    spans = json.dumps([s.to_json() for s in exporter.get_finished_spans()])
    assert key not in spans and plain in spans


async def test_a_servers_stderr_log_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    server = MCPServer.stdio("test", sys.executable, [str(SERVER), "--marker-dir", str(tmp_path)])
    script = Script({"root": [text("done")]})
    agent = Agent("root", "Go.", tools=[server], model=script.model)
    result = await run(agent, "Go.", log_dir=tmp_path / "runs", run_id="r1")
    assert result.status is RunStatus.COMPLETED
    log = tmp_path / "runs" / "r1.mcp-test.stderr.log"
    assert "test server default starting" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_an_mcp_url_shows_neither_its_password_nor_its_key_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password, key = fresh("pw"), fresh("k")
    port = free_port()  # nothing listens there: the run fails naming the URL
    (tmp_path / "agents.py").write_text(
        "from orchestrator import Agent\n"
        "from orchestrator.models import ScriptedModel, text\n"
        "agent = Agent('root', 'Go.', model=ScriptedModel([text('done')]))\n"
    )
    cli = Cli(monkeypatch, tmp_path, lambda: dict(os.environ))
    url = f"http://bob:{password}@127.0.0.1:{port}/mcp?api_key={key}&region=eu"
    for extra in ((), ("--json",)):
        proc = cli("run", "agents.py", "Go.", "--mcp", f"web={url}", *extra)
        shown = proc.stdout + proc.stderr
        assert proc.returncode == 2, shown
        assert password not in shown and key not in shown, shown
        # what is not secret is still shown: where it tried
        assert f"http://***@127.0.0.1:{port}/mcp?api_key=[REDACTED]&region=eu" in shown, shown
    for path in (tmp_path / "runs").glob("*") if (tmp_path / "runs").exists() else ():
        written = path.read_bytes()
        assert password.encode() not in written and key.encode() not in written, path


async def test_a_servers_stderr_log_keeps_its_last_mebibyte_and_says_what_it_left_out(
    tmp_path: Path,
) -> None:
    server = MCPServer.stdio(
        "test", sys.executable, [str(SERVER), "--variant", "chatty", "--marker-dir", str(tmp_path)]
    )
    script = Script({"root": [tool_call("test__die", {}), text("done")]})
    agent = Agent("root", "Go.", tools=[server], model=script.model)
    result = await run(agent, "Go.", log_dir=tmp_path / "runs", run_id="r1")
    assert result.status is RunStatus.COMPLETED, result.error
    log = (tmp_path / "runs" / "r1.mcp-test.stderr.log").read_bytes()
    assert len(log) <= 2 * 2**20 + 200  # the server wrote over 4.5 MB
    first, _, rest = log.partition(b"\n")
    assert first.startswith(b"[") and b"earlier bytes of stderr left out" in first
    assert rest.startswith(b"chatter line ")  # the kept part starts at a line's start
    assert rest.endswith(b"chatty server ready\ndying now: the test asked for it\n")
    # the last line reached the log before the call's error named it
    assert "dying now: the test asked for it" in tool_results(result.messages)[0].content
