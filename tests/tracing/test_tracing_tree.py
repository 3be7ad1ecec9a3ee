"""Real trees, traced: the spans a run makes, checked against the run's own result.

Each test runs a tree through the public API (``run`` / ``open_run`` with a FunctionModel):
a lead spawns two researchers and a writer in one turn and searches itself; the first
researcher spawns a checker (the grandchild), which compacts its context. The spans go to an
InMemorySpanExporter, to the real OTLP receiver of ``tests/support`` (HTTP/protobuf and gRPC,
through ``configure_tracing``), or to the OTLP/JSON trace file, and are read back as plain
records. What is checked, always against the ``RunResult`` (never against hard-coded trees):

* span names, and parent links that rebuild the agent tree exactly: each child's
  ``invoke_agent`` → the spawn's ``execute_tool spawn_subagent`` (with the call id from the
  parent's transcript) → the parent's ``turn`` (the turn that asked) → the parent's
  ``invoke_agent``; one trace per run, nested under the caller's current span;
* GenAI attributes (operation, provider, request/response model, agent name, conversation id
  = run id, tool name and call id, finish reasons), ``gen_ai.usage.*`` on chat spans only and
  equal to what the model reported, ``orchestrator.usage.*`` roll-ups on agent spans equal to
  ``RunResult.usage`` of the subtree, the outcome on every agent span, ``service.name``;
* cancellation, a run timeout and a fatal model error: every started span ended (a counting
  SpanProcessor), every one delivered, cancelled agent spans UNSET + ``orchestrator.cancelled``,
  failed ones ERROR + ``error.type``;
* content capture off by default and on with the standard variable; an environment secret in
  prompts, tool arguments, tool output, errors and answers redacted on every attribute, status
  message and in the trace file;
* a saved trace file sent to the receiver later arrives intact with the tree's links.

Tests named ``*_bug_*`` pin behaviour DESIGN.md asks for that the code does not do yet.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.otlp_receiver import OtlpReceiver, ReceivedSpan

from orchestrator import (
    Agent,
    Limits,
    ModelError,
    RunResult,
    RunStatus,
    ToolContext,
    Usage,
    open_run,
    run,
    tool,
)
from orchestrator.core.compaction import ContextPolicy
from orchestrator.core.messages import text_of
from orchestrator.core.redact import REDACTED
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call
from orchestrator.models.base import ModelRequest, ModelResponse
from orchestrator.tracing import configure_tracing
from orchestrator.tracing.direct import DirectTracer
from orchestrator.tracing.export import export_trace
from orchestrator.tracing.spans import get_tracer
from orchestrator.tracing.tracefiles import SpanRecord, load_trace

MODEL = "tree-fm"
PROVIDER = "function"  # FunctionModel.provider
SERVICE = "tree-tests-svc"
CANARY = "canary-secret-123456"
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
SPAN_KINDS = ("invoke_agent", "turn", "chat", "execute_tool", "compact")
TRANSPORTS = ["memory", "http/protobuf", "grpc", "direct file", "direct http/protobuf"]
"""The last two: ``configure_tracing``'s own provider with no processor added, so the run's
spans take the direct road (``orchestrator.tracing.direct``); the others see them through a
counting processor of the test's, so they take the SDK's."""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL_* variable (content capture included) or canary from the shell leaks in."""
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)
    monkeypatch.delenv("MY_SERVICE_TOKEN", raising=False)


# ---------------------------------------------------------------------------------------------
# Spans as plain records, whichever way they travelled


@dataclass(frozen=True)
class Rec:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str  # INTERNAL / CLIENT / ...
    status: str  # UNSET / OK / ERROR
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    start: int
    end: int

    @property
    def op(self) -> str:
        return self.name.split(" ", 1)[0]

    @property
    def target(self) -> str:
        return self.name.split(" ", 1)[1] if " " in self.name else ""


_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def from_sdk(span: ReadableSpan) -> Rec:
    ctx = span.context
    assert ctx is not None
    return Rec(
        name=span.name,
        trace_id=f"{ctx.trace_id:032x}",
        span_id=f"{ctx.span_id:016x}",
        parent_id=f"{span.parent.span_id:016x}" if span.parent else None,
        kind=span.kind.name,
        status=span.status.status_code.name,
        status_message=span.status.description or "",
        attributes={k: _plain(v) for k, v in (span.attributes or {}).items()},
        resource=dict(span.resource.attributes),
        start=span.start_time or 0,
        end=span.end_time or 0,
    )


def from_wire(span: ReceivedSpan) -> Rec:
    return Rec(
        name=span.name,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_span_id,
        kind=_KINDS[span.kind],
        status=_STATUS[span.status_code],
        status_message=span.status_message,
        attributes=span.attributes,
        resource=span.resource,
        start=span.start_time_unix_nano,
        end=span.end_time_unix_nano,
    )


def from_file(span: SpanRecord) -> Rec:
    return Rec(
        name=span.name,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_span_id,
        kind=_KINDS[span.kind],
        status=span.status,
        status_message=span.status_message,
        attributes={k: _plain(v) for k, v in span.attributes.items()},
        resource=dict(span.resource),
        start=span.start_ns,
        end=span.end_ns,
    )


class SpanCounter(SpanProcessor):
    """Counts spans started and ended, and remembers which are still open."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0
        self.open: dict[int, str] = {}
        self._lock = threading.Lock()

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        with self._lock:
            self.started += 1
            self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
            assert span.context is not None
            self.open.pop(span.context.span_id, None)


class Sink:
    """A tracer provider for one test, and the way back to the spans it made.

    ``memory``: an SDK provider with a SimpleSpanProcessor over an InMemorySpanExporter.
    ``http/protobuf`` / ``grpc``: ``configure_tracing`` (``set_global=False``, service name from
    ``OTEL_SERVICE_NAME``) exporting to a real local OTLP receiver. ``file``:
    ``configure_tracing(run_file=...)``. A :class:`SpanCounter` sees every span in all cases.
    """

    def __init__(self, transport: str, tmp_path: Path) -> None:
        self.transport = transport
        direct = transport.startswith("direct ")
        transport = transport.removeprefix("direct ")
        self.counter: SpanCounter | None = None if direct else SpanCounter()
        self.receiver: OtlpReceiver | None = None
        self.setup: Any = None
        self.exporter: InMemorySpanExporter | None = None
        self.run_file = tmp_path / "runs" / "run.jsonl"
        if transport == "memory":
            self.exporter = InMemorySpanExporter()
            self.provider = TracerProvider()
            self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        elif transport == "file":
            self.setup = configure_tracing(run_file=self.run_file, set_global=False)
            self.provider = self.setup.tracer_provider
        else:
            self.receiver = OtlpReceiver().start()
            endpoint = (
                self.receiver.grpc_endpoint if transport == "grpc" else self.receiver.http_endpoint
            )
            self.setup = configure_tracing(endpoint=endpoint, protocol=transport, set_global=False)
            assert self.setup.exporters == ("otlp",)
            self.provider = self.setup.tracer_provider
        if self.counter is not None:
            self.provider.add_span_processor(self.counter)
        assert isinstance(get_tracer(self.provider), DirectTracer) is direct

    def delivered(self) -> int:
        """How many spans ended: the counting processor's count, or on the direct road (no
        processor of ours to see them) what reached the setup's exporters."""
        if self.counter is not None:
            return self.counter.started
        return int(self.setup.ended_spans)

    def collect(self) -> list[Rec]:
        """Every span (after a flush / shutdown), as records."""
        if self.exporter is not None:
            return [from_sdk(s) for s in self.exporter.get_finished_spans()]
        assert self.setup.shutdown(timeout=10.0)
        assert self.setup.dropped_spans == 0 and self.setup.failed_spans == 0
        if self.receiver is not None:
            got = self.receiver.wait_for_spans(self.delivered(), timeout=10.0)
            return [from_wire(s) for s in got]
        return [from_file(s) for s in load_trace(self.run_file)]

    def close(self) -> None:
        if self.setup is not None:
            self.setup.shutdown(timeout=2.0)
        if self.receiver is not None:
            self.receiver.stop()


@pytest.fixture
def sinks(tmp_path: Path) -> Iterator[Callable[[str], Sink]]:
    made: list[Sink] = []

    def make(transport: str) -> Sink:
        sink = Sink(transport, tmp_path / f"sink{len(made)}")
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.close()


# ---------------------------------------------------------------------------------------------
# The tree and its scripted model


@dataclass
class Reply:
    path: str
    stop_reason: str
    usage: Usage


@dataclass
class TreeScript:
    """The FunctionModel body for the tree.

    ``mode``: ``ok`` (everything completes), ``stall`` (the writer's model call and the
    checker's tool call never return; researcher B completes) or ``fatal`` (the writer's call
    and researcher B's tool stall; then the checker's first call raises a fatal ModelError).
    ``secret`` is woven into prompts, tool arguments and answers when given.
    """

    mode: str = "ok"
    secret: str = ""
    replies: list[Reply] = field(default_factory=list)
    gates: dict[str, trio.Event] = field(default_factory=dict)

    def gate(self, name: str) -> trio.Event:
        return self.gates.setdefault(name, trio.Event())

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        step = await self.step(request)
        assert isinstance(step, ModelResponse)
        self.replies.append(Reply(request.agent.path, step.stop_reason, step.usage))
        return step

    def usage(self, request: ModelRequest, turn: int) -> Usage:
        estimate = request.input_tokens_estimate
        out = 7 + 3 * request.agent.depth + turn
        return Usage(
            input_tokens=estimate,
            output_tokens=out,
            cache_read_tokens=estimate // 3,
            cache_write_tokens=turn + 1,
            cost_usd=estimate * 3e-6 + out * 15e-6,
        )

    async def step(self, request: ModelRequest) -> ModelResponse:
        agent = request.agent
        turn = sum(1 for m in request.messages if m.role == "assistant")
        task = text_of(request.messages[0].content)
        last = text_of(request.messages[-1].content)
        u = self.usage(request, turn)
        s = f" {self.secret}" if self.secret else ""

        def reply(*blocks: Any) -> ModelResponse:
            return response(*blocks, usage=u)

        if agent.name == "lead":
            if turn == 0:
                return reply(
                    spawn("researcher", "Find A"),
                    spawn("researcher", "Find B"),
                    spawn("writer", f"Draft the report{s}"),
                    tool_call("search", {"query": f"overview{s}"}),
                )
            return reply(text(f"final report{s}"))
        if agent.name == "researcher":
            if turn == 0:
                name = "slow_search" if self.mode == "fatal" and "B" in task else "search"
                return reply(tool_call(name, {"query": task}))
            if turn == 1 and "A" in task:
                return reply(spawn("checker", "Verify A"))
            return reply(text(f"{task}: found"))
        if agent.name == "checker":
            if "Context checkpoint:" in last:  # the compaction's summary request
                return reply(text("Goal: verify A. Evidence: search(big) returned 4000 x."))
            if "Checkpoint of the work so far" in task:  # continuing after compaction
                return reply(text("A verified"))
            if self.mode == "fatal":
                await self.gate("writer_chat").wait()
                await self.gate("slow_tool").wait()
                raise ModelError(f"invalid x-api-key{s}", fatal=True, kind="authentication")
            return reply(
                tool_call("slow_search" if self.mode == "stall" else "search", {"query": "big"})
            )
        if agent.name == "writer":
            if self.mode != "ok":
                self.gate("writer_chat").set()
                await trio.sleep_forever()
            return reply(text(f"draft{s}"))
        raise AssertionError(f"unexpected agent {agent.path}")


def spawn(agent: str, task: str) -> Any:
    return tool_call("spawn_subagent", {"agent": agent, "task": task})


def build_tree(script: TreeScript, *, instructions_secret: str = "") -> Agent:
    @tool
    async def search(query: str) -> str:
        """Search the corpus.

        Args:
            query: what to look for
        """
        if query == "big":
            return "x" * 4000
        return f"result for {query}"

    @tool
    async def slow_search(ctx: ToolContext, query: str) -> str:
        """Search the slow corpus.

        Args:
            query: what to look for
        """
        script.gate("slow_tool").set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    tools = [search, slow_search]
    checker = Agent(
        "checker",
        "You verify one claim.",
        description="Verifies a claim.",
        tools=tools,
        context=ContextPolicy(compact_at_tokens=600),
    )
    researcher = Agent(
        "researcher",
        "You research one question.",
        description="Researches a question.",
        tools=tools,
        subagents=[checker],
    )
    writer = Agent("writer", "You write drafts.", description="Writes drafts.", tools=[])
    return Agent(
        "lead",
        f"You lead the research.{instructions_secret}",
        tools=tools,
        subagents=[researcher, writer],
    )


def model_for(script: TreeScript) -> FunctionModel:
    return FunctionModel(script, name=MODEL)


async def run_tree(
    sink: Sink,
    script: TreeScript,
    *,
    caller: bool = True,
    prompt: str = "Research A and B.",
    **options: Any,
) -> tuple[RunResult, str | None, str | None]:
    """Run the tree, optionally inside a caller's span; returns (result, caller span, trace)."""
    agent = build_tree(script)
    if not caller:
        result = await run(
            agent, prompt, model=model_for(script), tracer_provider=sink.provider, **options
        )
        return result, None, None
    tracer = sink.provider.get_tracer("tests.caller")
    with tracer.start_as_current_span("caller request") as span:
        ctx = span.get_span_context()
        result = await run(
            agent, prompt, model=model_for(script), tracer_provider=sink.provider, **options
        )
    return result, f"{ctx.span_id:016x}", f"{ctx.trace_id:032x}"


def nodes(result: RunResult) -> Iterator[RunResult]:
    yield result
    for child in result.children:
        yield from nodes(child)


# ---------------------------------------------------------------------------------------------
# Checks shared by the tests


class Trace:
    """The spans of one run (the caller's span removed), indexed."""

    def __init__(self, spans: list[Rec], caller_span: str | None = None) -> None:
        self.all = spans
        self.spans = [s for s in spans if s.span_id != caller_span]
        self.by_id = {s.span_id: s for s in self.spans}
        assert len(self.by_id) == len(self.spans), "duplicate span ids"

    def parent(self, span: Rec) -> Rec | None:
        return self.by_id.get(span.parent_id) if span.parent_id else None

    def of(self, op: str) -> list[Rec]:
        return [s for s in self.spans if s.op == op]

    def agent(self, path: str) -> Rec:
        found = [
            s for s in self.of("invoke_agent") if s.attributes["orchestrator.agent.path"] == path
        ]
        assert len(found) == 1, f"{len(found)} invoke_agent spans for {path}"
        return found[0]

    def owner(self, span: Rec) -> Rec:
        """The invoke_agent span a span belongs to (itself for an agent span)."""
        node: Rec | None = span
        while node is not None and node.op != "invoke_agent":
            node = self.parent(node)
        assert node is not None, f"{span.name} is under no invoke_agent"
        return node

    def path_of(self, span: Rec) -> str:
        return str(self.owner(span).attributes["orchestrator.agent.path"])


def spawn_calls(parent: RunResult) -> dict[str, tuple[str, int, str]]:
    """child path → (spawn call id, parent turn, task), read from the parent's transcript.

    The n-th ``spawn_subagent`` call naming agent X (in call order) starts ``{path}/X#n``.
    """
    out: dict[str, tuple[str, int, str]] = {}
    seen: Counter[str] = Counter()
    turn = 0
    for message in parent.messages:
        if message.role != "assistant":
            continue
        turn += 1
        for call in message.tool_uses:
            if call.name == "spawn_subagent":
                name = call.input["agent"]
                seen[name] += 1
                out[f"{parent.path}/{name}#{seen[name]}"] = (call.id, turn, call.input["task"])
    return out


def check_tree(
    trace: Trace, result: RunResult, root_parent: str | None, trace_id: str | None
) -> None:
    """Names, one trace, nesting under the caller, and parent links = the agent tree."""
    assert trace.spans, "no spans"
    assert {s.op for s in trace.spans} <= set(SPAN_KINDS), sorted({s.name for s in trace.spans})
    trace_ids = {s.trace_id for s in trace.all}
    assert len(trace_ids) == 1, f"{len(trace_ids)} trace ids for one run"
    if trace_id is not None:
        assert trace_ids == {trace_id}, "the run is not in the caller's trace"

    # exactly one span hangs outside the run: the root agent, under the caller's span
    outside = [s for s in trace.spans if s.parent_id not in trace.by_id]
    assert [s.name for s in outside] == [f"invoke_agent {result.agent_name}"]
    assert outside[0].parent_id == root_parent
    assert outside[0].attributes["orchestrator.agent.path"] == result.path

    for s in trace.spans:
        parent = trace.parent(s)
        assert s.end >= s.start > 0, f"{s.name} has bad timestamps"
        if s.op == "turn" or s.op == "compact":
            assert parent is not None and parent.op in ("invoke_agent", "turn")
            assert trace.owner(s).target == s.target, f"{s.name} under {trace.owner(s).name}"
            if s.op == "turn":
                assert parent.op == "invoke_agent"
            else:
                assert parent.op == "turn"
        elif s.op == "chat":
            assert parent is not None and parent.op in ("turn", "compact"), s.name
            assert s.target == MODEL
        elif s.op == "execute_tool":
            assert parent is not None and parent.op == "turn", s.name
        elif parent is not None:  # a non-root invoke_agent
            assert parent.name == "execute_tool spawn_subagent", f"{s.name} under {parent.name}"
        if parent is not None:
            assert parent.start <= s.start and s.end <= parent.end, (
                f"{s.name} outlives {parent.name}"
            )

    # the agent tree, rebuilt from parent links only, equals the result tree
    results = {r.path: r for r in nodes(result)}
    agents = trace.of("invoke_agent")
    assert sorted(str(a.attributes["orchestrator.agent.path"]) for a in agents) == sorted(results)
    for r in results.values():
        span = trace.agent(r.path)
        assert span.name == f"invoke_agent {r.agent_name}"
        assert span.attributes["orchestrator.agent.depth"] == r.depth
        links = spawn_calls(r)
        kids = [
            s
            for s in agents
            if (tool_span := trace.parent(s)) is not None
            and (turn := trace.parent(tool_span)) is not None
            and trace.parent(turn) == span
        ]
        assert sorted(str(k.attributes["orchestrator.agent.path"]) for k in kids) == sorted(
            c.path for c in r.children
        ), f"children of {r.path}"
        for child in r.children:
            child_span = trace.agent(child.path)
            tool_span = trace.parent(child_span)
            assert tool_span is not None and tool_span.name == "execute_tool spawn_subagent"
            turn_span = trace.parent(tool_span)
            assert turn_span is not None and turn_span.name == f"turn {r.agent_name}"
            assert trace.parent(turn_span) == span
            call_id, turn_index, _task = links[child.path]
            assert tool_span.attributes["gen_ai.tool.call.id"] == call_id
            assert turn_span.attributes["orchestrator.turn.index"] == turn_index
            # one agent per spawn span
            assert [s.name for s in agents if s.parent_id == tool_span.span_id] == [child_span.name]

    # per agent: one turn span per turn, numbered 1..turns
    for r in results.values():
        turns = sorted(
            s.attributes["orchestrator.turn.index"]
            for s in trace.of("turn")
            if trace.path_of(s) == r.path
        )
        assert turns == list(range(1, r.turns + 1)), f"turn spans of {r.path}"


def usage_of(attrs: dict[str, Any], prefix: str) -> tuple[Any, ...]:
    return tuple(
        attrs.get(f"{prefix}.{k}")
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    )


def totals(u: Usage) -> tuple[int, ...]:
    return (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)


def check_usage(trace: Trace, result: RunResult) -> None:
    """gen_ai.usage.* only on chat spans; agent roll-ups equal RunResult.usage per subtree."""
    for s in trace.spans:
        usage_keys = sorted(k for k in s.attributes if k.startswith("gen_ai.usage."))
        if s.op != "chat":
            assert not usage_keys, f"{s.name} carries {usage_keys}"
    for r in nodes(result):
        attrs = trace.agent(r.path).attributes
        assert usage_of(attrs, "orchestrator.usage") == totals(r.usage), r.path
        assert attrs["orchestrator.usage.cost_usd"] == pytest.approx(r.usage.cost_usd, abs=1e-12)
        assert usage_of(attrs, "orchestrator.own_usage") == totals(r.own_usage), r.path
        assert attrs["orchestrator.own_usage.cost_usd"] == pytest.approx(
            r.own_usage.cost_usd, abs=1e-12
        )
        # the chat spans of this agent add up to its own usage
        chats = [
            s
            for s in trace.of("chat")
            if trace.path_of(s) == r.path and "gen_ai.usage.input_tokens" in s.attributes
        ]
        summed = tuple(
            sum(int(c.attributes[k]) for c in chats)
            for k in (
                "gen_ai.usage.input_tokens",
                "gen_ai.usage.output_tokens",
                "gen_ai.usage.cache_read.input_tokens",
                "gen_ai.usage.cache_creation.input_tokens",
            )
        )
        assert summed == totals(r.own_usage), f"chat spans of {r.path}"
        assert len(chats) == r.own_usage.requests


def check_agent_outcomes(trace: Trace, result: RunResult) -> None:
    """The outcome on every agent span; status by outcome (the brief's contract)."""
    for r in nodes(result):
        s = trace.agent(r.path)
        assert s.attributes["orchestrator.outcome"] == r.status.value, r.path
        if r.status is RunStatus.COMPLETED:
            assert s.status == "OK", r.path
            assert "error.type" not in s.attributes
            assert "orchestrator.cancelled" not in s.attributes
        elif r.status is RunStatus.CANCELLED:
            assert s.status == "UNSET", f"{r.path}: a cancelled agent span must stay UNSET"
            assert s.attributes.get("orchestrator.cancelled") is True, r.path
            assert "error.type" not in s.attributes, r.path
        else:
            assert s.status == "ERROR", (
                f"{r.path} ended {r.status.value} but its span is {s.status}"
            )
            assert isinstance(s.attributes.get("error.type"), str) and s.attributes["error.type"]
            assert s.status_message, r.path
        assert s.attributes["orchestrator.turns"] == r.turns
        assert s.attributes["orchestrator.children"] == len(r.children)


def check_genai_attributes(trace: Trace, result: RunResult, script: TreeScript) -> None:
    """Operation, provider, models, agent, conversation id, tool name and call id, finish reasons."""
    results = {r.path: r for r in nodes(result)}
    for s in trace.spans:
        a = s.attributes
        owner = trace.owner(s)
        if s.op in ("invoke_agent", "chat", "execute_tool"):
            assert a["gen_ai.operation.name"] == s.op, s.name
            assert a["gen_ai.conversation.id"] == result.run_id, s.name
            assert a["gen_ai.agent.name"] == owner.target, s.name
        if s.op == "invoke_agent":
            path = a["orchestrator.agent.path"]
            assert s.kind == "INTERNAL"
            assert a["gen_ai.provider.name"] == PROVIDER
            assert a["gen_ai.request.model"] == MODEL
            assert a["gen_ai.agent.id"] == f"{result.run_id}/{path}"
            assert a["gen_ai.agent.name"] == results[path].agent_name
        elif s.op == "chat":
            assert s.kind == "CLIENT"
            assert a["gen_ai.provider.name"] == PROVIDER
            assert a["gen_ai.request.model"] == MODEL
            assert a["orchestrator.agent.path"] == trace.path_of(s)
            if s.status == "OK":
                assert a["gen_ai.response.model"] == MODEL
                reasons = a["gen_ai.response.finish_reasons"]
                assert isinstance(reasons, list) and len(reasons) == 1, reasons
        elif s.op == "execute_tool":
            assert s.kind == "INTERNAL"
            assert a["gen_ai.tool.name"] == s.target
            assert isinstance(a["gen_ai.tool.call.id"], str) and a["gen_ai.tool.call.id"]
    # finish reasons and usage per chat span are exactly what the model said, agent by agent
    said = Counter((r.path, r.stop_reason, totals(r.usage)) for r in script.replies)
    seen = Counter(
        (
            trace.path_of(s),
            s.attributes["gen_ai.response.finish_reasons"][0],
            (
                s.attributes["gen_ai.usage.input_tokens"],
                s.attributes["gen_ai.usage.output_tokens"],
                s.attributes["gen_ai.usage.cache_read.input_tokens"],
                s.attributes["gen_ai.usage.cache_creation.input_tokens"],
            ),
        )
        for s in trace.of("chat")
        if "gen_ai.response.finish_reasons" in s.attributes
    )
    assert seen == said
    # tool spans: (name, call id) per agent = the calls in its transcript (unless compacted)
    for r in results.values():
        spans_calls = Counter(
            (s.target, s.attributes["gen_ai.tool.call.id"])
            for s in trace.of("execute_tool")
            if trace.path_of(s) == r.path
        )
        transcript_calls = Counter(
            (c.name, c.id) for m in r.messages if m.role == "assistant" for c in m.tool_uses
        )
        if any(t.compacted for t in r.turn_log):
            assert transcript_calls <= spans_calls, r.path
        else:
            assert spans_calls == transcript_calls, r.path


def check_all_ended(sink: Sink, spans: list[Rec]) -> None:
    """Nothing left open, nothing lost between the SDK and where the spans were read."""
    if sink.counter is not None:
        open_spans = sorted(sink.counter.open.values())
        assert sink.counter.open == {}, f"spans never ended: {open_spans}"
        assert sink.counter.started == sink.counter.ended
    # (on the direct road a span that never ended is missing here, and its children's parent
    # links with it: check_tree finds them)
    assert len(spans) == sink.delivered(), (
        f"{sink.delivered()} spans ended, {len(spans)} arrived via {sink.transport}"
    )


# ---------------------------------------------------------------------------------------------
# A completed tree, over every transport


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_completed_tree_spans_rebuild_the_agent_tree(
    transport: str, sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", SERVICE)
    sink = sinks(transport)
    script = TreeScript()
    result, caller_span, trace_id = await run_tree(sink, script)
    assert result.status is RunStatus.COMPLETED, result.error
    assert [r.path for r in nodes(result)] == [
        "lead",
        "lead/researcher#1",
        "lead/researcher#1/checker#1",
        "lead/researcher#2",
        "lead/writer#1",
    ]
    assert all(r.status is RunStatus.COMPLETED for r in nodes(result))

    spans = sink.collect()
    check_all_ended(sink, spans)
    trace = Trace(spans, caller_span)
    assert len(trace.spans) == len(spans) - 1  # the caller's own span is the only other one
    check_tree(trace, result, caller_span, trace_id)
    check_usage(trace, result)
    check_agent_outcomes(trace, result)
    check_genai_attributes(trace, result, script)

    names = Counter(s.name for s in trace.spans)
    assert names["invoke_agent researcher"] == 2
    assert names["invoke_agent checker"] == names["invoke_agent writer"] == 1
    assert names["execute_tool spawn_subagent"] == 4
    assert names["execute_tool search"] == 4  # lead, both researchers, checker
    assert names["compact checker"] == 1
    assert names[f"chat {MODEL}"] == len(script.replies) == result.usage.requests
    # the compaction's own model call sits under its compact span
    compact = next(s for s in trace.spans if s.op == "compact")
    assert [s.name for s in trace.spans if s.parent_id == compact.span_id] == [f"chat {MODEL}"]
    assert any(t.compacted for r in nodes(result) for t in r.turn_log)

    if transport != "memory":
        assert {s.resource.get("service.name") for s in spans} == {SERVICE}
    if sink.receiver is not None:
        assert {s.transport for s in sink.receiver.spans} == {
            "grpc" if transport == "grpc" else "http"
        }


async def test_run_without_a_caller_span_is_one_root_trace(sinks: Callable[[str], Sink]) -> None:
    sink = sinks("memory")
    script = TreeScript()
    result, _, _ = await run_tree(sink, script, caller=False)
    assert result.ok
    spans = sink.collect()
    check_all_ended(sink, spans)
    trace = Trace(spans)
    check_tree(trace, result, None, None)


async def test_concurrent_runs_get_separate_traces(sinks: Callable[[str], Sink]) -> None:
    """Two runs side by side in one trio program and one provider: contexts never mix."""
    sink = sinks("memory")
    scripts = [TreeScript(), TreeScript()]
    results: list[RunResult] = []

    async def one(script: TreeScript) -> None:
        result, _, _ = await run_tree(sink, script, caller=False)
        results.append(result)

    async with trio.open_nursery() as nursery:
        for script in scripts:
            nursery.start_soon(one, script)
    spans = sink.collect()
    check_all_ended(sink, spans)
    by_trace: dict[str, list[Rec]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    assert len(by_trace) == 2
    for result in results:
        assert result.ok
        mine = [
            spans_
            for spans_ in by_trace.values()
            if any(s.attributes.get("gen_ai.conversation.id") == result.run_id for s in spans_)
        ]
        assert len(mine) == 1
        trace = Trace(mine[0])
        check_tree(trace, result, None, None)
        check_usage(trace, result)


async def test_open_run_nests_under_the_callers_span(sinks: Callable[[str], Sink]) -> None:
    sink = sinks("memory")
    script = TreeScript()
    tracer = sink.provider.get_tracer("tests.caller")
    with (
        tracer.start_as_current_span("caller") as outer,
        tracer.start_as_current_span("inner") as span,
    ):
        async with open_run(
            build_tree(script), "go", model=model_for(script), tracer_provider=sink.provider
        ) as handle:
            result = await handle.result()
    assert result.ok
    spans = sink.collect()
    check_all_ended(sink, spans)
    inner = f"{span.get_span_context().span_id:016x}"
    outer_id = f"{outer.get_span_context().span_id:016x}"
    trace = Trace([s for s in spans if s.span_id != outer_id], inner)
    check_tree(trace, result, inner, f"{span.get_span_context().trace_id:032x}")


# ---------------------------------------------------------------------------------------------
# Cancelled, timed out, failed: every span ended, delivered, and telling the truth


async def _cancelled(sink: Sink, script: TreeScript) -> tuple[RunResult, str, str]:
    tracer = sink.provider.get_tracer("tests.caller")
    with tracer.start_as_current_span("caller request") as span:
        async with open_run(
            build_tree(script),
            "Research A and B.",
            model=model_for(script),
            tracer_provider=sink.provider,
        ) as handle:
            with trio.fail_after(10):
                await script.gate("writer_chat").wait()
                await script.gate("slow_tool").wait()
            handle.cancel()
            result = await handle.result()
    ctx = span.get_span_context()
    return result, f"{ctx.span_id:016x}", f"{ctx.trace_id:032x}"


async def _timed_out(sink: Sink, script: TreeScript) -> tuple[RunResult, str, str]:
    # on the virtual clock (the tree is trio code only; its spans leave through exporter
    # threads): the deadline passes once the tree has stalled, however slow the machine
    with trio.fail_after(20):
        result, caller, trace_id = await run_tree(sink, script, limits=Limits(timeout=1.0))
    assert script.gate("writer_chat").is_set() and script.gate("slow_tool").is_set()
    assert caller is not None and trace_id is not None
    return result, caller, trace_id


async def _failed(sink: Sink, script: TreeScript) -> tuple[RunResult, str, str]:
    with trio.fail_after(20):
        result, caller, trace_id = await run_tree(sink, script)
    assert caller is not None and trace_id is not None
    return result, caller, trace_id


ENDINGS = {
    "cancel": ("stall", _cancelled, RunStatus.CANCELLED),
    "timeout": ("stall", _timed_out, RunStatus.TIMEOUT),
    "fatal": ("fatal", _failed, RunStatus.ERROR),
}


async def _ended_run(sink: Sink, ending: str) -> tuple[RunResult, Trace, str, str, TreeScript]:
    mode, how, status = ENDINGS[ending]
    script = TreeScript(mode=mode)
    result, caller_span, trace_id = await how(sink, script)
    assert result.status is status, (result.status, result.error)
    statuses = {r.path: r.status for r in nodes(result)}
    assert set(statuses) == {
        "lead",
        "lead/researcher#1",
        "lead/researcher#1/checker#1",
        "lead/researcher#2",
        "lead/writer#1",
    }
    if ending == "fatal":
        assert all(s is RunStatus.ERROR for s in statuses.values()), statuses
    else:
        assert statuses.pop("lead/researcher#2") is RunStatus.COMPLETED
        assert set(statuses.values()) == {status}, statuses
    spans = sink.collect()
    check_all_ended(sink, spans)
    return result, Trace(spans, caller_span), caller_span, trace_id, script


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_cut_runs_end_and_deliver_every_span(
    ending: str, transport: str, sinks: Callable[[str], Sink], autojump_clock: Any
) -> None:
    sink = sinks(transport)
    result, trace, caller_span, trace_id, script = await _ended_run(sink, ending)
    check_tree(trace, result, caller_span, trace_id)
    check_usage(trace, result)
    check_agent_outcomes(trace, result)
    check_genai_attributes(trace, result, script)

    # the spans that were cut record why: a cancellation (UNSET + flag), or the deadline or
    # the fatal error that cut them (ERROR + error.type), findable in a search for errors
    outcome = {"cancel": "cancelled", "timeout": "timeout", "fatal": "error"}[ending]
    for s in trace.spans:
        if s.op in ("chat", "execute_tool") and s.status == "UNSET":
            assert s.attributes.get("orchestrator.cancelled") is True, s.name
        if s.status == "ERROR":
            assert s.attributes.get("error.type"), s.name
    cut_ops = {s.op for s in trace.spans if s.attributes.get("orchestrator.outcome") == outcome}
    assert {"chat", "execute_tool"} <= cut_ops
    # turns state how their agent ended, like the agent spans (a cut turn says why it was cut)
    assert all(s.attributes.get("orchestrator.outcome") for s in trace.of("turn"))
    writer_chat = [s for s in trace.of("chat") if trace.path_of(s) == "lead/writer#1"]
    slow = [s for s in trace.spans if s.name == "execute_tool slow_search"]
    assert len(writer_chat) == 1 and len(slow) == 1
    for cut in (writer_chat[0], slow[0]):
        assert cut.attributes["orchestrator.outcome"] == outcome, cut.name
        if ending == "cancel":
            assert cut.status == "UNSET" and cut.attributes["orchestrator.cancelled"] is True
        else:
            assert cut.status == "ERROR" and cut.attributes["error.type"] == outcome
            assert "orchestrator.cancelled" not in cut.attributes
    if ending == "fatal":
        failing = [s for s in trace.of("chat") if trace.path_of(s) == "lead/researcher#1/checker#1"]
        assert len(failing) == 1
        assert failing[0].status == "ERROR"
        assert failing[0].attributes["error.type"] == "authentication"
        assert not any(k.startswith("gen_ai.usage.") for k in failing[0].attributes)
        assert trace.agent("lead/researcher#1/checker#1").attributes["error.type"]
    else:  # the researcher that finished before the cut kept its success
        assert trace.agent("lead/researcher#2").status == "OK"
    if ending == "timeout":
        for r in nodes(result):
            if r.status is RunStatus.TIMEOUT:
                assert trace.agent(r.path).attributes["error.type"] == "timeout"


@pytest.mark.parametrize("ending", ["timeout", "fatal"])
async def test_bug_failed_agent_spans_do_not_claim_cancellation(
    ending: str, sinks: Callable[[str], Sink], autojump_clock: Any
) -> None:
    """spans.py: cancellation is UNSET + ``orchestrator.cancelled=true`` + outcome cancelled;
    "every other outcome but success sets status ERROR and error.type". An agent that timed out
    or was stopped by a fatal error is a failure, so its span must not also say cancelled=true
    (a backend query for cancelled runs would count timeouts and crashes)."""
    sink = sinks("memory")
    result, trace, *_ = await _ended_run(sink, ending)
    wrong = [
        r.path
        for r in nodes(result)
        if r.status not in (RunStatus.COMPLETED, RunStatus.CANCELLED)
        and trace.agent(r.path).attributes.get("orchestrator.cancelled") is True
    ]
    assert not wrong, f"agent spans with outcome {ending} but orchestrator.cancelled=true: {wrong}"


# ---------------------------------------------------------------------------------------------
# Content capture and redaction


@pytest.mark.parametrize(
    "transport", ["file", "http/protobuf", "direct file", "direct http/protobuf"]
)
async def test_a_tool_name_holding_a_lone_surrogate_costs_no_span(
    sinks: Callable[[str], Sink], transport: str
) -> None:
    # a made-up tool name with a broken escape failed the encoding of the whole export batch:
    # every span of it was lost (other agents' too), the trace file never written
    sink = sinks(transport)
    model = ScriptedModel([[tool_call("look\ud83dup", {"q": "x"})], text("done")])
    result = await run(Agent("a", "i", model=model), "go", tracer_provider=sink.provider)
    assert result.status is RunStatus.COMPLETED
    spans = sink.collect()  # asserts that no span was dropped or failed
    assert len(spans) == sink.delivered() == 6
    (tool_span,) = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool_span.name == "execute_tool look\ufffdup"
    assert tool_span.attributes["gen_ai.tool.name"] == "look\ufffdup"


async def test_retries_show_as_events_on_the_tool_span(
    sinks: Callable[[str], Sink], autojump_clock: Any
) -> None:
    # a tool that failed twice showed one OK span whose time silently held two backoffs
    sink = sinks("memory")
    failures = [ConnectionError("reset"), TimeoutError("slow")]

    @tool(idempotent=True)
    async def fetch(url: str) -> str:
        """Fetch a page."""
        if failures:
            raise failures.pop(0)
        return "page"

    model = ScriptedModel([[tool_call("fetch", {"url": "u"})], text("done")])
    agent = Agent("a", "i", model=model, tools=[fetch])
    result = await run(agent, "go", tracer_provider=sink.provider)
    assert result.status is RunStatus.COMPLETED
    assert sink.exporter is not None
    (span,) = [s for s in sink.exporter.get_finished_spans() if s.name == "execute_tool fetch"]
    retries = [dict(e.attributes or {}) for e in span.events if e.name == "orchestrator.retry"]
    assert [(r["orchestrator.retry.attempt"], r["error.type"]) for r in retries] == [
        (1, "ConnectionError"),
        (2, "TimeoutError"),
    ]
    assert all(r["orchestrator.retry.delay_s"] > 0 for r in retries)
    assert span.status.status_code.name != "ERROR"  # the third attempt succeeded


async def test_content_capture_is_off_by_default(sinks: Callable[[str], Sink]) -> None:
    sink = sinks("memory")
    result, *_ = await run_tree(sink, TreeScript())
    assert result.ok
    for s in sink.collect():
        present = [k for k in CONTENT_KEYS if k in s.attributes]
        assert not present, f"{s.name} captured {present} without opting in"


async def test_captured_content_holding_a_lone_surrogate_is_kept_with_a_replacement(
    sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a model's text with a lone surrogate: the exporter dropped the captured attribute and
    # logged a traceback for every batch
    monkeypatch.setenv(CAPTURE, "true")
    sink = sinks("file")
    model = ScriptedModel([text("caf\udce9 au lait")])
    result = await run(Agent("a", "i", model=model), "go", tracer_provider=sink.provider)
    assert result.status is RunStatus.COMPLETED
    (chat,) = [s for s in sink.collect() if s.op == "chat"]
    outputs = json.loads(chat.attributes["gen_ai.output.messages"])
    assert outputs[0]["parts"][0]["content"] == "caf\ufffd au lait"


async def test_content_capture_on_with_the_standard_variable(
    sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE, "true")
    sink = sinks("memory")
    result, caller_span, _ = await run_tree(sink, TreeScript(), prompt="Research A and B, please.")
    assert result.ok
    trace = Trace(sink.collect(), caller_span)
    tasks = {"lead": "Research A and B, please."}
    for r in nodes(result):
        tasks.update({path: task for path, (_, _, task) in spawn_calls(r).items()})
    part_keys = {
        "text": {"type", "content"},
        "tool_call": {"type", "id", "name", "arguments"},
        "tool_call_response": {"type", "id", "response"},
    }
    roles: set[str] = set()
    for s in trace.of("chat"):
        # the GenAI conventions' shape: {role, parts}, tool results in "tool" messages
        inputs = json.loads(s.attributes["gen_ai.input.messages"])
        roles.update(m["role"] for m in inputs)
        assert inputs[0]["role"] == "user"
        # the agent's task opens its first message (a compacted transcript restates it)
        assert inputs[0]["parts"][0]["content"].startswith(tasks[trace.path_of(s)]), s.attributes
        outputs = json.loads(s.attributes["gen_ai.output.messages"])
        assert outputs[0]["role"] == "assistant"
        assert outputs[0]["finish_reason"] in ("stop", "tool_call")
        for message in inputs + outputs:
            assert message["role"] in ("user", "assistant", "tool")
            for part in message["parts"]:
                assert part_keys[part["type"]] <= set(part), part
                assert (part["type"] == "tool_call_response") == (message["role"] == "tool")
        system = json.loads(s.attributes["gen_ai.system_instructions"])
        assert system[0]["content"].startswith("You ")
    assert roles == {"user", "assistant", "tool"}
    lead_chat = min(
        (s for s in trace.of("chat") if trace.path_of(s) == "lead"), key=lambda s: s.start
    )
    assert "Research A and B, please." in lead_chat.attributes["gen_ai.input.messages"]
    assert "You lead the research." in lead_chat.attributes["gen_ai.system_instructions"]
    for s in trace.of("execute_tool"):
        assert isinstance(json.loads(s.attributes["gen_ai.tool.call.arguments"]), dict)
        assert "gen_ai.tool.call.result" in s.attributes
    lead_search = next(
        s for s in trace.of("execute_tool") if s.target == "search" and trace.path_of(s) == "lead"
    )
    assert json.loads(lead_search.attributes["gen_ai.tool.call.arguments"]) == {"query": "overview"}
    assert lead_search.attributes["gen_ai.tool.call.result"] == "result for overview"


async def test_a_captured_tool_result_is_capped_like_other_captured_content(
    sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE, "true")
    sink = sinks("memory")

    @tool
    async def dump() -> str:
        """Return a long document."""
        return "x" * 40_000

    agent = Agent("reader", "You read.", tools=[dump])
    result = await run(
        agent,
        "read",
        model=ScriptedModel([tool_call("dump"), text("done")]),
        tracer_provider=sink.provider,
    )
    assert result.ok
    assert len(result.messages[2].content[0].content) == 40_000  # the model still got it all
    (span,) = [s for s in sink.collect() if s.name == "execute_tool dump"]
    captured = span.attributes["gen_ai.tool.call.result"]
    assert captured.startswith("x" * 16_384) and captured.endswith("[23616 chars truncated]")


def leaks(value: Any, secret: str) -> bool:
    """Whether ``secret`` is readable in ``value``, also inside JSON held in strings."""
    if isinstance(value, str):
        if secret in value:
            return True
        try:
            decoded = json.loads(value)
        except ValueError:
            return False
        return not isinstance(decoded, str) and leaks(decoded, secret)
    if isinstance(value, dict):
        return any(leaks(k, secret) or leaks(v, secret) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(leaks(v, secret) for v in value)
    return False


async def _leaky_run(sink: Sink, secret: str) -> tuple[RunResult, TreeScript]:
    """The tree with ``secret`` in the prompt, instructions, tool arguments and output, a spawn
    task, a tool's exception, a model error and the answers."""
    script = TreeScript(secret=secret)

    @tool
    async def leaky(ctx: ToolContext) -> str:
        """Read the service configuration."""
        raise RuntimeError(f"connection refused; config token={os.environ['MY_SERVICE_TOKEN']}")

    @tool
    async def echo_env() -> str:
        """Show the service token (a badly written tool)."""
        return f"MY_SERVICE_TOKEN={os.environ['MY_SERVICE_TOKEN']}"

    base = build_tree(script, instructions_secret=f" Service token: {secret}")
    lead = base.replace(tools=[*(base.tools or ()), leaky, echo_env])

    async def model(request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if request.agent.name == "lead" and turn == 0:
            reply = await script(request)
            return response(
                *reply.content,
                tool_call("leaky", {}),
                tool_call("echo_env", {}),
                usage=reply.usage,
            )
        if request.agent.name == "writer":
            raise ModelError(f"upstream rejected the key {secret}", kind="invalid_request")
        return await script(request)

    result = await run(
        lead,
        f"Research A and B. Use the token {secret} for the API.",
        model=FunctionModel(model, name=MODEL),
        tracer_provider=sink.provider,
    )
    return result, script


def _assert_no_leak(spans: list[Rec], secret: str) -> None:
    for s in spans:
        for key, value in s.attributes.items():
            assert not leaks(value, secret), f"{s.name}: {key} holds the secret: {str(value)[:300]}"
        assert not leaks(s.status_message, secret), f"{s.name}: status message holds the secret"
        assert secret not in s.name


@pytest.mark.parametrize("capture", [True, False])
async def test_a_failing_tools_error_text_reaches_spans_only_with_content_capture(
    capture: bool, sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error text quotes the call's input (a file name, a record): it is content too, in the
    tool's span and in the reason the turn and agent spans give for an error_threshold end."""
    if capture:
        monkeypatch.setenv(CAPTURE, "true")
    private = "Jane Doe diagnosis"

    @tool
    async def open_record(name: str) -> str:
        """Open a record.

        Args:
            name: the record's name
        """
        raise FileNotFoundError(f"no such record: {name!r}")

    calls = [tool_call("open_record", {"name": f"{private} {i}"}) for i in range(3)]
    agent = Agent("clerk", "You file records.", tools=[open_record])
    sink = sinks("memory")
    result = await run(
        agent,
        "Open the records.",
        model=ScriptedModel([*calls, text("never")]),
        limits=Limits(max_consecutive_errors=3),
        tracer_provider=sink.provider,
    )
    assert result.status is RunStatus.ERROR_THRESHOLD
    assert private in (result.error or "")  # the run's own result says what failed
    spans = sink.collect()
    holding = {
        s.name
        for s in spans
        if private in s.status_message or private in json.dumps(s.attributes, default=str)
    }
    if capture:
        assert {"execute_tool open_record", "turn clerk", "invoke_agent clerk"} <= holding
    else:
        assert holding == set()
        tool_spans = [s for s in spans if s.name == "execute_tool open_record"]
        assert [s.status for s in tool_spans] == ["ERROR"] * 3
        # the kind of failure is not content: it stays, and tells a crash from a timeout
        assert all(s.attributes["error.type"] == "FileNotFoundError" for s in tool_spans)


@pytest.mark.parametrize("capture", [True, False])
async def test_secret_redacted_on_every_attribute_and_in_the_trace_file(
    capture: bool, sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", CANARY)
    if capture:
        monkeypatch.setenv(CAPTURE, "true")
    sink = sinks("file")
    result, _ = await _leaky_run(sink, CANARY)
    assert result.ok, result.error
    assert result.children[-1].status is RunStatus.ERROR  # the writer's model refused
    spans = sink.collect()
    check_all_ended(sink, spans)
    check_tree(Trace(spans), result, None, None)
    _assert_no_leak(spans, CANARY)
    raw = sink.run_file.read_text(encoding="utf-8")
    assert CANARY not in raw
    for line in raw.splitlines():
        assert not leaks(json.loads(line), CANARY)
    # the secret was there to leak: it shows up redacted
    everything = json.dumps([s.attributes for s in spans] + [s.status_message for s in spans])
    assert REDACTED in everything
    if capture:
        trace = Trace(spans)
        tools = {s.target: s for s in trace.of("execute_tool") if trace.path_of(s) == "lead"}
        assert REDACTED in tools["echo_env"].attributes["gen_ai.tool.call.result"]
        assert json.loads(tools["search"].attributes["gen_ai.tool.call.arguments"]) == {
            "query": f"overview {REDACTED}"
        }
        assert (
            tools["search"].attributes["gen_ai.tool.call.result"]
            == f"result for overview {REDACTED}"
        )
        assert tools["leaky"].status == "ERROR" and REDACTED in tools["leaky"].status_message
        lead_chats = [s for s in trace.of("chat") if trace.path_of(s) == "lead"]
        assert all(REDACTED in s.attributes["gen_ai.input.messages"] for s in lead_chats)
        assert all(REDACTED in s.attributes["gen_ai.system_instructions"] for s in lead_chats)


@pytest.mark.parametrize(
    "secret",
    ['canary"pa\\ss-2024-xyz', "canary-pässwörd-2024"],
    ids=["json-escaped-chars", "non-ascii"],
)
async def test_bug_secret_with_json_escaped_characters_is_redacted(
    secret: str, sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spans.py redacts *after* ``json.dumps``: a secret holding a quote, a backslash or (with
    the default ``ensure_ascii=True``) any non-ASCII character is written escaped, the plain
    value is no longer in the text, and the secret survives in gen_ai.input.messages,
    gen_ai.output.messages and gen_ai.tool.call.arguments (anyone decoding the JSON reads it)."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    monkeypatch.setenv(CAPTURE, "true")
    sink = sinks("memory")
    result, _ = await _leaky_run(sink, secret)
    assert result.ok, result.error
    _assert_no_leak(sink.collect(), secret)


# ---------------------------------------------------------------------------------------------
# A saved trace, sent later


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_saved_trace_exported_later_keeps_the_tree(
    protocol: str, sinks: Callable[[str], Sink], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", SERVICE)
    sink = sinks("file")
    result, caller_span, trace_id = await run_tree(sink, TreeScript())
    assert result.ok
    saved = sink.collect()
    check_all_ended(sink, saved)
    check_tree(Trace(saved, caller_span), result, caller_span, trace_id)

    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        sent = await trio.to_thread.run_sync(export_trace, sink.run_file, endpoint, protocol)
        assert sent == len(saved)
        arrived = [from_wire(s) for s in receiver.wait_for_spans(sent, timeout=10.0)]
    assert len(arrived) == len(saved)
    trace = Trace(arrived, caller_span)
    check_tree(trace, result, caller_span, trace_id)
    check_usage(trace, result)
    check_agent_outcomes(trace, result)
    by_id = {s.span_id: s for s in saved}
    for s in arrived:
        assert s == by_id[s.span_id], s.name  # ids, links, times, status, attributes, resource
    assert {s.resource["service.name"] for s in arrived} == {SERVICE}


# ---------------------------------------------------------------------------------------------
# What DESIGN.md asks for beyond the brief's list


async def test_bug_spawn_spans_carry_the_child_subtree_roll_up(
    sinks: Callable[[str], Sink],
) -> None:
    """DESIGN.md, Tracing: "subtree and cumulative roll-ups go under orchestrator.* names on
    agent and spawn spans". The spawn's execute_tool span should say what its child's subtree
    cost (same names as the agent span's ``orchestrator.usage.*``)."""
    sink = sinks("memory")
    result, caller_span, _ = await run_tree(sink, TreeScript())
    assert result.ok
    trace = Trace(sink.collect(), caller_span)
    missing = []
    for r in nodes(result):
        if r.depth == 0:
            continue
        spawn_span = trace.parent(trace.agent(r.path))
        assert spawn_span is not None
        if usage_of(spawn_span.attributes, "orchestrator.usage") != totals(r.usage):
            missing.append(r.path)
    assert not missing, f"spawn spans without their child's subtree usage: {missing}"


async def test_bug_conversation_id_on_every_span(sinks: Callable[[str], Sink]) -> None:
    """run.py documents the run id as "``gen_ai.conversation.id`` on every span"; the turn and
    compact spans do not carry it, so filtering a backend by conversation id loses them."""
    sink = sinks("memory")
    result, caller_span, _ = await run_tree(sink, TreeScript())
    assert result.ok
    trace = Trace(sink.collect(), caller_span)
    without = sorted(
        {s.name for s in trace.spans if s.attributes.get("gen_ai.conversation.id") != result.run_id}
    )
    assert not without, f"spans without gen_ai.conversation.id: {without}"
