"""Secrets: a secret value from the environment never reaches an output, whichever string a
model or a user put it in.

The canaries are the values of ``ANTHROPIC_API_KEY`` and of ``DEPLOY_TOKEN``, shaped like no
known key (only the environment says they are secrets). The agents' model "knows" them and uses
them everywhere it chooses a string: as a tool name, a tool call id, a tool argument, a
subagent's task, a stop reason, an error type, the reply's model name and id, and the answer;
the user puts them in the prompt and an agent's description. The real ``orchestrator`` command
runs the tree, in this process (:mod:`support.cli`) but for the live view, which needs a
terminal (a subprocess on a pseudo-terminal); the canaries must appear in none of: the trace
file (span names and attributes, with content capture on and off), the plain progress lines on
a stderr that is not a terminal (CI logs), the live view on a terminal, the diagnostics,
``--json``, the answer, ``trace show``, ``trace list`` and ``trace export``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from support.cli import Cli, CliRun

KEY = "canary-api-key-Zq8w3Xy7Vb5n"
TOKEN = "canary-deploy-tok-Pm4k2Jh9"
CANARIES = (KEY, TOKEN)

AGENTS = textwrap.dedent(
    '''
    """A tree whose model writes the environment's secrets into every string it chooses."""

    import dataclasses
    import os

    import trio

    from orchestrator import Agent, ModelError, tool
    from orchestrator.models import FunctionModel, response, text, tool_call

    KEY = os.environ["ANTHROPIC_API_KEY"]
    TOKEN = os.environ["DEPLOY_TOKEN"]
    PAUSE = float(os.environ.get("SECRETS_TREE_PAUSE", "0"))  # seconds per tool call's start


    def turn(request):
        return sum(1 for m in request.messages if m.role == "assistant")


    class Streaming(FunctionModel):
        """Reports each tool call as it starts, as a streaming provider does, and takes a
        moment over it when told to (so the live view draws it)."""

        async def request(self, request, ctx):
            reply = await super().request(request, ctx)
            for block in reply.content:
                if block.type == "tool_use":
                    ctx.on_tool_call_start(block.id, block.name)
                    await trio.sleep(PAUSE)
            return reply


    @tool
    def lookup(query: str) -> str:
        """Look something up.

        Args:
            query: what to look up
        """
        return "nothing found"


    def lead_steps(request):
        if turn(request) == 0:
            return [
                tool_call(KEY, {"q": TOKEN}, id="call-" + KEY),  # a tool that does not exist
                tool_call("lookup", {"query": KEY}, id="call-" + TOKEN),
                tool_call("spawn_subagent", {"agent": "odd", "task": "use " + KEY}),
                tool_call("spawn_subagent", {"agent": "broken", "task": "and " + TOKEN}),
            ]
        reply = response(text("the answer is " + KEY))
        return dataclasses.replace(reply, model="model-" + KEY, id="msg-" + TOKEN)


    def odd_steps(request):
        return response(text("stopping"), stop_reason="stop-" + KEY)


    def broken_steps(request):
        raise ModelError("the provider failed for " + TOKEN, kind="kind-" + KEY)


    odd = Agent(
        "odd", "Stop oddly.", description="holds " + TOKEN, model=FunctionModel(odd_steps)
    )
    broken = Agent("broken", "Break.", description="Breaks.", model=FunctionModel(broken_steps))
    lead = Agent(
        "lead", "Lead.", model=Streaming(lead_steps), tools=[lookup], subagents=[odd, broken]
    )
    alone = Agent("alone", "Stop oddly.", model=FunctionModel(odd_steps))
    '''
)


def cli_env(capture: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "ANTHROPIC_"))
        and k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES")
    }
    env.update(
        ANTHROPIC_API_KEY=KEY,
        DEPLOY_TOKEN=TOKEN,
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true" if capture else "false",
        COLUMNS="250",
        PYTHONIOENCODING="utf-8",
        TERM="xterm-256color",
    )
    return env


def leaked(*outputs: str) -> list[str]:
    return [c for c in CANARIES for out in outputs if c in out]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "agents.py").write_text(AGENTS)
    return tmp_path


@pytest.fixture
def orchestrator(work: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliRun]:
    """``orchestrator(*args)``: the command in this process, in ``work``, in the environment
    :func:`cli_env` builds (content capture as ``capture`` says), plus ``env``."""

    def run(*args: str, capture: bool = False, env: Mapping[str, str] | None = None) -> CliRun:
        return Cli(monkeypatch, work, lambda: cli_env(capture))(*args, env=env)

    return run


def the_trace(work: Path) -> Path:
    (trace,) = (work / "runs").glob("*.jsonl")
    return trace


@pytest.mark.parametrize("capture", [False, True], ids=["content-off", "content-on"])
def test_no_secret_in_the_trace_file_the_plain_progress_the_answer_or_the_summary(
    orchestrator: Callable[..., CliRun], work: Path, capture: bool
) -> None:
    proc = orchestrator("run", "agents.py:lead", "prompt with " + KEY, capture=capture)
    assert proc.returncode == 0, proc.stderr
    # what the model chose really was used: the run did what the leak needs
    assert proc.stdout == "the answer is [REDACTED]\n"
    starts = [line for line in proc.stderr.splitlines() if line.startswith("start ")]
    assert starts[0] == "start  lead: 'prompt with [REDACTED]'", proc.stderr
    assert "start  lead/odd#1: 'use [REDACTED]'" in starts
    assert leaked(proc.stdout, proc.stderr) == []
    trace = the_trace(work)
    raw = trace.read_text()
    assert leaked(raw) == []
    spans = [
        span
        for line in raw.splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    names = {span["name"] for span in spans}
    assert "execute_tool [REDACTED]" in names  # the model's tool name, redacted in the name
    tool_names = {
        a["value"].get("stringValue")
        for span in spans
        for a in span["attributes"]
        if a["key"] == "gen_ai.tool.name"
    }
    assert "[REDACTED]" in tool_names  # and in gen_ai.tool.name
    attributes = {(a["key"], a["value"].get("stringValue")) for s in spans for a in s["attributes"]}
    assert ("gen_ai.tool.call.id", "call-[REDACTED]") in attributes
    assert ("error.type", "kind-[REDACTED]") in attributes
    assert ("orchestrator.stop_reason", "stop-[REDACTED]") in attributes
    assert ("gen_ai.response.model", "model-[REDACTED]") in attributes
    assert ("gen_ai.agent.description", "holds [REDACTED]") in attributes

    for args in (["trace", "show"], ["trace", "list"]):
        shown = orchestrator(*args)
        assert shown.returncode == 0, shown.stderr
        assert leaked(shown.stdout, shown.stderr) == []


def test_no_secret_in_json_output(orchestrator: Callable[..., CliRun]) -> None:
    proc = orchestrator("run", "agents.py:lead", "prompt with " + KEY, "--json")
    assert proc.returncode == 0, proc.stderr
    assert leaked(proc.stdout, proc.stderr) == []
    result = json.loads(proc.stdout)
    assert result["output"] == "the answer is [REDACTED]"
    errors = [child["error"] for child in result["tree"]["children"]]
    assert any("[REDACTED]" in (error or "") for error in errors), errors


def test_no_secret_in_the_run_ended_diagnostic(orchestrator: Callable[..., CliRun]) -> None:
    proc = orchestrator("run", "agents.py:alone", "go")
    assert proc.returncode == 1, proc.stderr
    assert "run ended with error: " in proc.stderr
    assert "[REDACTED]" in proc.stderr
    assert leaked(proc.stdout, proc.stderr) == []


def test_no_secret_on_the_live_view_of_a_terminal(work: Path) -> None:
    # a terminal of its own: the command in a subprocess on the pseudo-terminal of script(1)
    command = shlex.join(
        [sys.executable, "-m", "orchestrator.cli", "run", "agents.py:lead", "with " + KEY]
    )
    proc = subprocess.run(
        ["script", "-qefc", f"{command} > stdout.txt", "/dev/null"],
        cwd=work,
        env={**cli_env(capture=False), "SECRETS_TREE_PAUSE": "0.3"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    terminal = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, terminal
    assert "\x1b[" in terminal and "[failed]" in terminal  # the live tree was drawn
    assert "model is calling [REDACTED]" in terminal  # with the model's tool name in it
    assert leaked(terminal, (work / "stdout.txt").read_text()) == []


def test_an_otlp_endpoints_password_is_not_shown_in_the_summary_json_or_trace_export(
    orchestrator: Callable[..., CliRun], work: Path
) -> None:
    from support.otlp_receiver import OtlpReceiver

    password = "endpoint-password-Xk29"
    with OtlpReceiver() as receiver:
        host = receiver.http_endpoint.split("://", 1)[1]
        endpoint = f"http://collector:{password}@{host}"
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        outputs = []
        for extra in ([], ["--json"]):
            proc = orchestrator("run", "agents.py:lead", "go", *extra, env=env)
            assert proc.returncode == 0, proc.stderr
            outputs += [proc.stdout, proc.stderr]
        assert f"trace=http://***@{host}" in outputs[1]
        assert json.loads(outputs[2])["trace"].startswith(f"http://***@{host}")
        for kept in (work / "runs").glob("*.jsonl"):  # the OTLP runs kept their files too
            kept.unlink()
        assert orchestrator("run", "agents.py:lead", "go", "--quiet").returncode == 0
        sent = orchestrator("trace", "export", str(the_trace(work)), "--endpoint", endpoint)
        # sent, or refused (urllib cannot send to a URL holding a user): named without it
        assert f"http://***@{host}" in sent.stdout + sent.stderr
        outputs += [sent.stdout, sent.stderr]
    assert [out for out in outputs if password in out] == []
