"""A real language model through a real server: SmolLM2-135M on llama.cpp's OpenAI-compatible
server, driven by :class:`OpenAIModel` (see conftest.py for the server).

A 135M model is not smart. What these tests prove is that real model output through a real
server does not break the runtime: each run ends with one of the statuses documented for small
models (docs/models.md), at least one tool call reaches its tool, every other call reaches it or
comes back as an ``is_error`` result, every transcript is valid and the trace is one tree.
Output is capped at 256 tokens a call and tool results at 1,500 characters, so that a run cannot
"pass" by ending ``context_exceeded`` everywhere (the server's window is 8,192 tokens).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from support.local_model import LocalServer
from support.trace_tree import assert_one_tree
from support.transcripts import check_transcript

from orchestrator import Agent, Limits, RunResult, RunStatus, run, tool
from orchestrator.cli.main import EXIT_CODES
from orchestrator.core.messages import ToolResultBlock, message_from_wire
from orchestrator.models import ModelRequest, OpenAIModel
from orchestrator.tracing.tracefiles import load_trace

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).parents[2]
DOCUMENTED = {
    RunStatus.COMPLETED,
    RunStatus.MAX_TURNS,
    RunStatus.REPEAT_GUARD,
    RunStatus.ERROR_THRESHOLD,
}
"""How a run on a 135M model may end (docs/models.md): never ``error`` or ``context_exceeded``."""
RESEARCH_DEADLINE = 300
"""The research tree's ``--timeout``: it may end ``timeout`` too. llama-cpp-python's
``chatml-function-calling`` handler generates tool call after tool call in one answer, each up
to the cap, so one answer can run past ``max_tokens`` (seen on 2026-12-07: one answer of about
5,000 tokens that took 8 minutes on the loaded 2-core CI machine); the deadline bounds the step."""
OVER_THE_CAP_CHARS = 4 * 4 * 256
"""An answer this long (about four times the 256-token cap) is the server's, past the cap."""
OUTPUT_CAP = 256
RESULT_CAP = 1500


def tree_of(exporter: InMemorySpanExporter) -> list[Any]:
    """The exported spans in the shape ``assert_one_tree`` reads."""
    return [
        SimpleNamespace(
            trace_id=f"{s.context.trace_id:032x}",
            span_id=f"{s.context.span_id:016x}",
            parent_span_id=f"{s.parent.span_id:016x}" if s.parent else None,
            name=s.name,
            end_ns=s.end_time,
            attributes=dict(s.attributes or {}),
        )
        for s in exporter.get_finished_spans()
    ]


def check_tree(result: RunResult) -> list[ToolResultBlock]:
    """Every agent's transcript is valid and its status documented; the tool results."""
    results = []
    for node in result.walk():
        check_transcript(node.messages)
        assert node.status in DOCUMENTED or node is not result, (node.path, node.status, node.error)
        assert node.status is not RunStatus.CONTEXT_EXCEEDED, node.path
        results += [b for m in node.messages for b in m.content if isinstance(b, ToolResultBlock)]
    return results


async def test_a_tool_using_agent_runs_end_to_end_on_the_local_model(
    llama_server: LocalServer,
) -> None:
    reached: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city's name, such as Paris.
        """
        reached.append(city)
        return f"Sunny and 21 degrees Celsius in {city}."

    def first_call_forced(request: ModelRequest) -> Any:
        # as a user of a small model would: the first turn must call the tool
        if request.turn_index() == 0:
            return {"type": "function", "function": {"name": "get_weather"}}
        return "auto"

    model = OpenAIModel(
        llama_server.model,
        base_url=llama_server.url,
        tool_choice=first_call_forced,
        context_window=8192,
        timeout=300,
    )
    agent = Agent(
        "weather",
        "You answer questions about the weather. Use the get_weather tool, then answer in one "
        "short sentence.",
        model=model,
        tools=[get_weather],
        max_output_tokens=OUTPUT_CAP,
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    started = time.perf_counter()
    result = await run(
        agent,
        "What is the weather in Paris today?",
        limits=Limits(max_turns=4, max_result_chars=RESULT_CAP, timeout=300),
        tracer_provider=provider,
    )
    wall = time.perf_counter() - started
    print(
        f"\nlocal model, tool agent: status={result.status.value} turns={result.turns} "
        f"calls reached={reached} usage={result.usage.to_dict()} wall={wall:.1f}s "
        f"\nserver: ready in {llama_server.started_s:.1f}s, {llama_server.tokens_per_s:.0f} "
        f"tokens/s generating\nanswer: {result.output!r}"
    )
    assert result.status in DOCUMENTED, result.error
    assert reached, "no tool call reached its tool"
    results = check_tree(result)
    assert results and all(r.content for r in results)
    calls = [b for m in result.messages for b in m.tool_uses]
    assert len(results) == len(calls)
    assert sum(1 for r in results if not r.is_error) >= len(reached)
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    spans = tree_of(exporter)
    root = assert_one_tree(spans)
    assert root.name.startswith("invoke_agent")
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(chats) == result.turns
    assert {s.attributes["gen_ai.provider.name"] for s in chats} == {"openai"}


class Point(BaseModel):
    x: int
    y: int


async def test_a_native_typed_agent_gets_its_json_from_the_local_model(
    llama_server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    # llama-cpp-python's server refuses response_format json_schema (a 500): the adapter asks
    # for json_object with the schema beside it, from which the server builds a grammar
    model = OpenAIModel(llama_server.model, base_url=llama_server.url, timeout=300)
    agent = Agent(
        "point",
        "Answer with a point on a grid, as JSON.",
        model=model,
        output_type=Point,
        output_mode="native",
        max_output_tokens=OUTPUT_CAP,
    )
    started = time.perf_counter()
    with caplog.at_level("INFO", logger="orchestrator.models.openai"):
        result = await run(agent, "Give me a point.", limits=Limits(max_turns=4, timeout=300))
    print(
        f"\nlocal model, native typed agent: status={result.status.value} "
        f"output={result.output!r} turns={result.turns} wall={time.perf_counter() - started:.1f}s"
    )
    assert any("json_object" in r.getMessage() for r in caplog.records)
    # a grammar keeps the answer to the schema; a 135M model may still end it badly
    assert result.status in (RunStatus.COMPLETED, RunStatus.INVALID_OUTPUT), result.error
    if result.status is RunStatus.COMPLETED:
        assert isinstance(result.output, Point)
    check_transcript(result.messages)


def research_env(server: LocalServer) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_", "OLLAMA_"))
    }
    env.update(OPENAI_BASE_URL=server.url, PYTHONIOENCODING="utf-8", COLUMNS="200")
    return env


QUESTION = "How do for loops work in Python?"


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["children"]:
        yield from walk(child)


def test_the_research_tree_runs_from_the_cli_on_the_local_model(
    llama_server: LocalServer, tmp_path: Path
) -> None:
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(ROOT / "agents" / "research.py"),
            QUESTION,
            "--override-model",
            f"openai:{llama_server.model}",
            "--max-output-tokens",
            str(OUTPUT_CAP),
            "--max-result-chars",
            str(RESULT_CAP),
            "--timeout",
            str(RESEARCH_DEADLINE),
            "--json",
            "--transcripts",
        ],
        cwd=tmp_path,
        env=research_env(llama_server),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RESEARCH_DEADLINE + 100,
    )
    wall = time.perf_counter() - started
    assert "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    print(
        f"\nlocal model, research tree from the CLI: exit={proc.returncode} "
        f"status={out['status']} agents={out['agents']} turns={out['turns']} "
        f"usage={out['usage']} wall={wall:.1f}s\nanswer: {out['output']!r}"
    )
    assert RunStatus(out["status"]) in DOCUMENTED | {RunStatus.TIMEOUT}, out["error"]
    assert proc.returncode == EXIT_CODES[RunStatus(out["status"])], proc.stderr
    assert out["offline"] is False
    nodes = list(walk(out["tree"]))
    results = []
    for node in nodes:  # every agent's transcript, as the CLI's --transcripts gives it
        messages = [message_from_wire(m) for m in node["messages"]]
        check_transcript(messages)
        results += [b for m in messages for b in m.content if isinstance(b, ToolResultBlock)]
    for node in nodes:  # a window filled only by an answer the server let run past the cap
        if node["status"] == "context_exceeded":
            replies = [m for m in node["messages"] if m["role"] == "assistant"]
            longest = max((len(json.dumps(m["content"])) for m in replies), default=0)
            assert longest > OVER_THE_CAP_CHARS, (node["path"], longest)
    assert all(r.content for r in results)
    print(
        f"agents: {[(n['path'], n['status'], n['turns']) for n in nodes]}; tool results: "
        f"{len(results)}, of them is_error: {sum(r.is_error for r in results)}"
    )
    spans = load_trace(next((tmp_path / "runs").glob("*.jsonl")))
    assert_one_tree(spans)
    chats = [s for s in spans if s.name.startswith("chat")]
    assert chats and {s.attributes.get("gen_ai.provider.name") for s in chats} == {"openai"}
