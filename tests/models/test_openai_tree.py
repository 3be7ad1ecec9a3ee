"""Over real HTTP: the real openai SDK against the local fake Chat Completions server, whole trees.

The tree example gives the same output as with its ScriptedModel; the CLI (in this process,
:mod:`support.cli`) runs the research tree with ``--override-model openai:...`` against the
server, and falls back to the offline model per provider.
"""

from __future__ import annotations

import json
import os
import runpy
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli, CliRun
from support.fake_chat_server import Completion, FakeChatServer, Reply
from support.fake_chat_server import text as reply_text
from support.fake_chat_server import tool_calls as reply_calls
from support.trace_tree import assert_one_tree
from support.transcripts import check_transcript

from orchestrator import Agent, RunStatus, run
from orchestrator.cli.run import offline_providers
from orchestrator.core.messages import TextBlock, ToolUseBlock, message_from_wire
from orchestrator.models import AnthropicModel, OpenAIModel
from orchestrator.models.scripted import response
from orchestrator.tracing.tracefiles import load_trace

ROOT = Path(__file__).parents[2]
EXAMPLE = runpy.run_path(str(ROOT / "examples" / "research_team.py"))
SCRIPTED_TREE: Agent = EXAMPLE["agent"]
SCRIPT: dict[str, list[Any]] = EXAMPLE["model"]._by_agent


def bridge(body: dict[str, Any]) -> Reply:
    """Answer like the example's ScriptedModel: the agent from its system prompt, the step from
    the number of assistant turns in the request."""
    system = body["messages"][0]["content"]
    agent = "lead" if system.startswith("Split the question") else "researcher"
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    step = SCRIPT[agent][turn]
    resp = response(*(step if isinstance(step, list) else [step]))
    texts = "".join(b.text for b in resp.content if isinstance(b, TextBlock))
    calls = tuple((b.name, dict(b.input)) for b in resp.content if isinstance(b, ToolUseBlock))
    ids = tuple(f"call_{agent}_{turn}_{i}" for i in range(len(calls)))
    return Completion(content=texts or None, calls=calls, ids=ids)


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer(responder=bridge) as fake:
        yield fake
    assert not fake.errors, fake.errors


async def test_the_tree_example_gives_the_same_output_over_http_as_with_the_scripted_model(
    server: FakeChatServer,
) -> None:
    scripted = await run(SCRIPTED_TREE, "How does trio keep concurrent tasks in order?")
    model = OpenAIModel("gpt-4.1-mini", api_key="sk-test-key-0000000000", base_url=server.url)
    over_http = await run(
        SCRIPTED_TREE.map_tree(lambda a: a.replace(model=model)),
        "How does trio keep concurrent tasks in order?",
    )
    assert over_http.status is RunStatus.COMPLETED, over_http.error
    assert over_http.output == scripted.output
    assert [c.output for c in over_http.children] == [c.output for c in scripted.children]
    assert len(server.requests) == 2 + 3 * 2
    assert all("traceparent" not in r.headers for r in server.requests)
    for node in over_http.walk():
        check_transcript(node.messages)
    assert over_http.usage.input_tokens == sum(r.own_usage.input_tokens for r in over_http.walk())
    assert over_http.usage.cost_usd > 0


async def test_streamed_text_and_tool_calls_reach_the_runs_events(server: FakeChatServer) -> None:
    from orchestrator import open_run
    from orchestrator.core.events import ModelTextDelta, ModelToolCallStarted

    server.responder = None
    server.push(
        reply_calls(("lookup", {"topic": "nursery"}), ids=["call_L"], content="Looking it up."),
        reply_text("A nursery owns its child tasks."),
    )
    model = OpenAIModel("gpt-4.1-mini", api_key="sk-test-key-0000000000", base_url=server.url)
    researcher = SCRIPTED_TREE.subagents[0]
    assert isinstance(researcher, Agent)
    events: list[Any] = []
    async with open_run(researcher.replace(model=model), "What is a nursery?") as handle:
        async for event in handle.events:  # ends when the run closes its channel
            events.append(event)
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED, result.error
    texts = [e.text for e in events if isinstance(e, ModelTextDelta)]
    assert len(texts) > 2 and "".join(texts) == "Looking it up.A nursery owns its child tasks."
    starts = [(e.tool, e.call_id) for e in events if isinstance(e, ModelToolCallStarted)]
    assert starts == [("lookup", "call_L")]


# --------------------------------------------------------------------------------------------
# The command line


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_", "OLLAMA_"))
    }
    env.update(COLUMNS="200", PYTHONIOENCODING="utf-8", **extra)
    return env


@pytest.fixture
def orchestrator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliRun]:
    """``orchestrator(*args, env=...)``: the command in this process (:mod:`support.cli`), in
    ``tmp_path``, with exactly the environment ``env``."""

    def command(*args: str, env: Mapping[str, str]) -> CliRun:
        return Cli(monkeypatch, tmp_path, lambda: env)(*args)

    return command


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The agents of a ``--json`` result tree."""
    yield node
    for child in node["children"]:
        yield from walk(child)


def research_responder(body: dict[str, Any]) -> Reply:
    """A tiny stand-in for a model driving the research tree: the lead spawns one researcher,
    the researcher searches once, reads the first hit, then gives its findings (a call of
    final_result, citing what it read); the lead answers."""
    system = body["messages"][0]["content"]
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if "lead a research team" in system:
        if turn == 0:
            task = {"agent": "researcher", "task": "What does a for statement do?"}
            return reply_calls(("spawn_subagent", task))
        findings = json.loads(body["messages"][-1]["content"])  # the researcher's, as JSON
        claim = findings["claims"][0]
        return reply_text(f"Final answer: {claim['text']} [{claim['sources'][0]}]")
    if turn == 0:
        return reply_calls(("search", {"query": "for statement"}))
    if turn == 1:
        return reply_calls(("read", {"doc_id": "topic:for"}))
    findings = {
        "summary": "A for statement iterates over a sequence.",
        "claims": [{"text": "A for statement iterates over a sequence.", "sources": ["topic:for"]}],
    }
    return reply_calls(("final_result", findings))


def test_the_research_tree_runs_on_an_openai_compatible_server_from_the_cli(
    tmp_path: Path, orchestrator: Callable[..., CliRun]
) -> None:
    with FakeChatServer(responder=research_responder) as server:
        proc = orchestrator(
            "run",
            str(ROOT / "agents" / "research.py"),
            "How does a for statement work?",
            "--override-model",
            "openai:tiny-local",
            "--max-output-tokens",
            "256",
            "--max-result-chars",
            "1500",
            "--json",
            "--transcripts",
            env=cli_env(OPENAI_BASE_URL=server.url),  # a local server: no key needed
        )
        assert not server.errors, server.errors
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["offline"] is False and (out["status"], out["agents"]) == ("completed", 2)
    assert out["output"] == "Final answer: A for statement iterates over a sequence. [topic:for]"
    (researcher,) = out["tree"]["children"]
    assert researcher["output"]["claims"][0]["sources"] == ["topic:for"]  # checked findings
    for node in walk(out["tree"]):
        check_transcript([message_from_wire(m) for m in node["messages"]])
    bodies = server.bodies
    assert {b["model"] for b in bodies} == {"tiny-local"}
    assert {b["max_tokens"] for b in bodies} == {256}
    read_result = next(
        m["content"]
        for b in bodies
        for m in b["messages"]
        if m["role"] == "tool" and "for" in m["content"]
    )
    assert len(read_result) <= 1500 + 200  # capped (with its visible marker)
    spans = load_trace(next((tmp_path / "runs").glob("*.jsonl")))
    assert_one_tree(spans)
    chats = [s for s in spans if s.name.startswith("chat")]
    assert {s.attributes.get("gen_ai.provider.name") for s in chats} == {"openai"}
    assert len(chats) == len(bodies)


OPENAI_TREE = textwrap.dedent(
    """
    from orchestrator import Agent

    helper = Agent("helper", "Help.", description="Helps.", model="anthropic:claude-haiku-5-5")
    agent = Agent("lead", "Lead.", model="openai:gpt-4.1-mini", subagents=[helper])
    """
)


@pytest.mark.parametrize(
    ("env", "said", "offline"),
    [
        ({}, "No ANTHROPIC_API_KEY, no OPENAI_API_KEY or OPENAI_BASE_URL set", True),
        ({"ANTHROPIC_API_KEY": "sk-ant-x"}, "No OPENAI_API_KEY or OPENAI_BASE_URL set", True),
    ],
    ids=["neither", "anthropic-key-only"],
)
def test_the_offline_fallback_is_per_provider_and_said_once(
    tmp_path: Path,
    orchestrator: Callable[..., CliRun],
    env: dict[str, str],
    said: str,
    offline: bool,
) -> None:
    (tmp_path / "tree.py").write_text(OPENAI_TREE)
    proc = orchestrator("run", "tree.py", "hello", "--dry-run", env=cli_env(**env))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("offline") == 1 and said in proc.stderr, proc.stderr


def test_offline_providers_keeps_models_that_can_reach_their_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    kept = [
        Agent("a", "x", model=OpenAIModel("m", base_url="http://127.0.0.1:1/v1")),
        Agent("b", "x", model=OpenAIModel("m", api_key="sk-from-a-vault")),
        Agent("c", "x", model="ollama:llama3.2"),
    ]
    swapped = [
        Agent("d", "x", model=OpenAIModel("m")),
        Agent("e", "x", model="openai:gpt-4.1"),
        Agent("f", "x", model=AnthropicModel()),
    ]
    lead = Agent("lead", "x", model="ollama:llama3.2", subagents=[*kept, *swapped])
    tree, default, providers = offline_providers(lead, "openai:gpt-4.1")
    assert default == "offline" and providers == ("anthropic", "openai")
    models = {a.name: a.model for a in tree.subagents if isinstance(a, Agent)}
    assert all(models[a.name] is a.model for a in kept)
    assert all(models[a.name] == "offline" for a in swapped)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")  # a local server, no key
    tree, default, providers = offline_providers(lead, "openai:gpt-4.1")
    assert default == "openai:gpt-4.1" and providers == ("anthropic",)


def test_a_fallback_chain_keeps_the_models_it_can_reach_and_is_offline_only_without_any(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    chain = "anthropic:claude-sonnet-5-5|openai:gpt-4.1"
    lead = Agent("lead", "x", model=chain)
    tree, default, providers = offline_providers(lead, chain)
    assert tree.model == "offline" and default == "offline"
    assert providers == ("anthropic", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    tree, default, providers = offline_providers(lead, chain)
    assert tree.model == "openai:gpt-4.1" and default == "openai:gpt-4.1"
    assert providers == ("anthropic",)


def test_bad_cli_values_for_the_new_options_are_one_line_errors(
    tmp_path: Path, orchestrator: Callable[..., CliRun]
) -> None:
    (tmp_path / "tree.py").write_text(OPENAI_TREE)
    for option, value in (("--max-output-tokens", "0"), ("--max-result-chars", "-3")):
        proc = orchestrator("run", "tree.py", "hi", option, value, env=cli_env())
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    bad = orchestrator(
        "run",
        "tree.py",
        "hi",
        "--model",
        "openai:",
        "--dry-run",
        env=cli_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1", ANTHROPIC_API_KEY="sk-ant-x"),
    )
    assert bad.returncode == 2 and "unknown model" in bad.stderr, bad.stderr


async def test_chat_spans_record_the_providers_own_finish_reasons(server: FakeChatServer) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = OpenAIModel("gpt-4.1-mini", api_key="sk-test-key-0000000000", base_url=server.url)
    result = await run(
        SCRIPTED_TREE.map_tree(lambda a: a.replace(model=model)),
        "How does trio keep concurrent tasks in order?",
        tracer_provider=provider,
    )
    assert result.status is RunStatus.COMPLETED
    reasons = {
        s.attributes["gen_ai.response.finish_reasons"][0]
        for s in exporter.get_finished_spans()
        if s.name.startswith("chat ")
    }
    assert reasons == {"tool_calls", "stop"}  # Chat Completions' words, not the transcript's
