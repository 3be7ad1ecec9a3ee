"""Context control through the public API: result caps, clearing, compaction, window overflow.

Every model here is a FunctionModel that decides from the transcript it is sent, never from a
counter of its own, so compaction (which replaces the transcript) cannot confuse it: progress is
read from the ``read`` calls still in the transcript (clearing keeps every ``tool_use``) or from
the ``docs read: N`` line of a checkpoint summary. A request is a checkpoint request when its
last user message holds the loop's "Context checkpoint" text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import trio
from hypothesis import event, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.transcripts import check_transcript

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    Message,
    ModelError,
    RunStatus,
    Usage,
    run,
    tool,
)
from orchestrator.core.compaction import CLEARED_PREFIX, RESUME_HEADER, ContextPolicy
from orchestrator.models import (
    FunctionModel,
    ModelRequest,
    ModelResponse,
    response,
    text,
    tool_call,
)

TASK = "Read the documents in order, one per turn, and report the code word."
DOC_CHARS = 2_000
CODE_WORD = "HELIOTROPE"
CODE_DOC = 3
CHECKPOINT = "Context checkpoint"
BUDGET = 16_000
"""The fixed input budget (estimated tokens) every 200-turn run with a strategy stays under."""
BIG = Limits(max_turns=400, repeat_limit=400, token_budget=10**9)


@tool
async def read(doc: int) -> str:
    """Read one document.

    Args:
        doc: the document's number
    """
    head = f"doc {doc}: " + (f"the code word is {CODE_WORD}. " if doc == CODE_DOC else "")
    return head + ("filler about structured concurrency " * 80)[: DOC_CHARS - len(head)]


# --------------------------------------------------------------------------------------------
# Reading the transcript


def block_chars(message: Message) -> int:
    """Characters of a message's content, counted independently of the loop's estimator."""
    n = 0
    for b in message.content:
        if b.type == "text":
            n += len(b.text)
        elif b.type == "tool_result":
            n += len(b.content)
        elif b.type == "tool_use":
            n += len(b.name) + len(str(b.input))
    return n


def request_tokens(request: ModelRequest) -> int:
    """Our own measure of a request's input: characters of system and messages, / 4."""
    return (len(request.system) + sum(block_chars(m) for m in request.messages)) // 4


def is_checkpoint(request: ModelRequest) -> bool:
    last = request.messages[-1]
    return last.role == "user" and any(
        b.type == "text" and CHECKPOINT in b.text for b in last.content
    )


def texts(request: ModelRequest) -> list[str]:
    out = []
    for m in request.messages:
        for b in m.content:
            if b.type == "text":
                out.append(b.text)
            elif b.type == "tool_result":
                out.append(b.content)
    return out


def docs_read(request: ModelRequest) -> int:
    """The highest document read: from ``read`` calls, or from a checkpoint's ``docs read: N``."""
    n = 0
    for m in request.messages:
        for b in m.content:
            if b.type == "tool_use" and b.name == "read":
                n = max(n, int(b.input["doc"]))
            elif b.type == "text":
                for found in re.findall(r"docs read: (\d+)", b.text):
                    n = max(n, int(found))
    return n


def known_code_word(request: ModelRequest) -> str | None:
    for t in texts(request):
        found = re.search(r"code word is ([A-Z]+)", t)
        if found:
            return found.group(1)
    return None


def noted(request: ModelRequest, code: str) -> bool:
    return any(m.role == "assistant" and f"code word is {code}" in m.text for m in request.messages)


def results_in(request: ModelRequest) -> int:
    """Tool results in the request (uncleared ones)."""
    return sum(
        1
        for m in request.messages
        for b in m.content
        if b.type == "tool_result" and not b.content.startswith(CLEARED_PREFIX)
    )


# --------------------------------------------------------------------------------------------
# The reader model


@dataclass
class Reader:
    """Reads documents 1..total, one per turn, then answers with the code word.

    Like a real model, it repeats a finding in its own words once (assistant text is never
    cleared), so clearing old results does not lose the code word.

    Answers a checkpoint request with a summary naming the facts it knows. ``overflow(request)``
    may return a reply (or raise) to simulate a context window; checkpoint requests go through
    it too when ``window_applies_to_checkpoints``.
    """

    total: int
    overflow: Callable[[ModelRequest], Any] | None = None
    window_applies_to_checkpoints: bool = False
    requests: list[ModelRequest] = field(default_factory=list)
    usage: Callable[[ModelRequest], Usage] | None = None

    def __call__(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        checkpoint = is_checkpoint(request)
        if self.overflow is not None and (self.window_applies_to_checkpoints or not checkpoint):
            reply = self.overflow(request)
            if reply is not None:
                return reply
        done = docs_read(request)
        code = known_code_word(request)
        if checkpoint:
            evidence = f"the code word is {code} (doc {CODE_DOC}); " if code else ""
            return text(
                f"Goal: {TASK}\nDecisions so far: read in order.\n"
                f"Evidence: {evidence}docs read: {done}\nOpen questions: none\n"
                f"Work left: docs {done + 1} to {self.total}."
            )
        extra = {"usage": self.usage(request)} if self.usage else {}
        if done >= self.total:
            return response(text(f"Read all {done} docs. The code word is {code}."), **extra)
        said = f"Reading doc {done + 1}."
        if code and not noted(request, code):  # a finding goes into the model's own words once
            said = f"Noted: the code word is {code}. {said}"
        return response(
            text(said),
            tool_call("read", {"doc": done + 1}, id=f"call_{done + 1}"),
            **extra,
        )

    @property
    def main_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if not is_checkpoint(r)]

    @property
    def checkpoints(self) -> list[ModelRequest]:
        return [r for r in self.requests if is_checkpoint(r)]


def reader_agent(reader: Reader, **kw: Any) -> Agent:
    return Agent("reader", "You read documents.", model=FunctionModel(reader), tools=[read], **kw)


def in_memory_tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def by_id(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans if s.context is not None}


def parent_of(span: ReadableSpan, index: dict[int, ReadableSpan]) -> ReadableSpan | None:
    return index.get(span.parent.span_id) if span.parent is not None else None


# --------------------------------------------------------------------------------------------
# 200 turns under a fixed budget


STRATEGIES = {
    "clearing": ContextPolicy(clear_results_after=5, clear_batch=4),
    "compaction": ContextPolicy(compact_at_tokens=8_000),
    "result_caps": ContextPolicy(result_caps={"read": 100}),
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
async def test_a_200_turn_run_stays_under_a_fixed_input_budget(strategy: str) -> None:
    reader = Reader(total=200)
    result = await run(reader_agent(reader), TASK, limits=BIG, context=STRATEGIES[strategy])
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == f"Read all 200 docs. The code word is {CODE_WORD}."
    assert result.turns == 201
    biggest = max(request_tokens(r) for r in reader.requests)
    biggest_estimate = max(r.input_tokens_estimate for r in reader.requests)
    assert biggest < BUDGET, (strategy, biggest)
    # the runtime's estimate errs high on digits and punctuation (core.ledger.text_units)
    assert biggest_estimate < BUDGET * 1.25, (strategy, biggest_estimate)
    assert max(t.input_tokens_estimate for t in result.turn_log) < BUDGET * 1.25
    check_transcript(result.messages)
    for r in reader.requests:
        check_transcript(r.messages)
    if strategy == "compaction":
        assert len(reader.checkpoints) >= 5
    else:
        assert not reader.checkpoints


async def test_without_a_strategy_the_same_run_grows_past_the_budget() -> None:
    reader = Reader(total=200)
    result = await run(reader_agent(reader), TASK, limits=BIG)  # default policy: no window known
    assert result.status is RunStatus.COMPLETED, result.error
    sizes = [request_tokens(r) for r in reader.requests]
    assert sizes == sorted(sizes)  # nothing is ever taken out
    assert sizes[-1] > 5 * BUDGET
    assert max(t.input_tokens_estimate for t in result.turn_log) > 5 * BUDGET
    assert not reader.checkpoints
    assert all(t.cleared_results == 0 and not t.compacted for t in result.turn_log)


# --------------------------------------------------------------------------------------------
# Pairing stays valid (property test)


@tool
async def fetch(step: int, i: int, size: int, fail: bool) -> str:
    """Fetch a piece of data (fails on request).

    Args:
        step: the step number
        i: the call's position in its turn
        size: how many characters to return
        fail: raise instead
    """
    if fail:
        raise ValueError(f"fetch {step}.{i} failed")
    return f"piece {step}.{i} " + "x" * size


call_st = st.tuples(st.integers(0, 1_500), st.booleans())  # (size, fail)
script_st = st.lists(st.lists(call_st, min_size=1, max_size=3), min_size=1, max_size=25)
policy_st = st.builds(
    ContextPolicy,
    result_caps=st.one_of(st.just({}), st.builds(lambda n: {"fetch": n}, st.integers(20, 600))),
    clear_results_after=st.one_of(st.none(), st.integers(1, 4)),
    clear_batch=st.integers(1, 5),
    compact_at_tokens=st.one_of(st.none(), st.integers(150, 2_500)),
    compact_at_fraction=st.none(),
)
overflow_st = st.one_of(
    st.none(), st.tuples(st.sampled_from(["stop_reason", "error"]), st.integers(300, 3_000))
)


def steps_done(request: ModelRequest) -> int:
    n = 0
    for m in request.messages:
        for b in m.content:
            if b.type == "tool_use":
                n = max(n, int(b.input["step"]) + 1)
            elif b.type == "text":
                for found in re.findall(r"steps done: (\d+)", b.text):
                    n = max(n, int(found))
    return n


def scripted_worker(
    script: list[list[tuple[int, bool]]],
    overflow: tuple[str, int] | None,
    seen: list[ModelRequest],
) -> Callable[[ModelRequest], Any]:
    def respond(request: ModelRequest) -> Any:
        seen.append(request)
        done = steps_done(request)
        if is_checkpoint(request):
            return text(f"Goal: run the script. Evidence: steps done: {done}. Work left: more.")
        if overflow is not None and request.input_tokens_estimate > overflow[1]:
            if overflow[0] == "error":
                raise ModelError.from_kind("prompt is too long", kind="context_exceeded")
            return response(text("cut"), stop_reason="model_context_window_exceeded")
        if done >= len(script):
            return text(f"done after {done} steps")
        return response(
            *[
                tool_call(
                    "fetch",
                    {"step": done, "i": i, "size": size, "fail": fail},
                    id=f"s{done}_{i}",
                )
                for i, (size, fail) in enumerate(script[done])
            ]
        )

    return respond


@settings(max_examples=30, deadline=None)
@given(script=script_st, policy=policy_st, overflow=overflow_st)
def test_pairing_stays_valid_after_clearing_and_compaction(
    script: list[list[tuple[int, bool]]],
    policy: ContextPolicy,
    overflow: tuple[str, int] | None,
) -> None:
    seen: list[ModelRequest] = []
    agent = Agent(
        "worker",
        "You run a script.",
        model=FunctionModel(scripted_worker(script, overflow, seen)),
        tools=[fetch],
    )
    limits = Limits(max_turns=80, repeat_limit=80, max_consecutive_errors=80, token_budget=10**9)
    result = trio.run(partial(run, agent, "go", limits=limits, context=policy))

    for request in seen:  # what the model was sent, checkpoint requests included
        check_transcript(request.messages)
    check_transcript(result.messages)
    calls = {
        b.id: b
        for m in result.messages
        if m.role == "assistant"
        for b in m.content
        if b.type == "tool_use"
    }
    for m in result.messages:
        for b in m.content:
            if b.type == "tool_result" and b.content.startswith(CLEARED_PREFIX):
                origin = calls[b.tool_use_id]
                assert "result of fetch(" in b.content and f'"step":{origin.input["step"]}' in (
                    b.content
                )
    compactions = sum(1 for r in seen if is_checkpoint(r))
    event(f"status {result.status.value}")
    event("compacted" if compactions else "not compacted")
    event("cleared" if any(t.cleared_results for t in result.turn_log) else "not cleared")
    if policy.compact_at_tokens is None:
        assert compactions == 0
    if overflow is None:
        assert result.status is RunStatus.COMPLETED, result.error
        assert result.output == f"done after {len(script)} steps"
    else:
        assert result.status in (RunStatus.COMPLETED, RunStatus.CONTEXT_EXCEEDED), result.error
        if policy.compact_at_tokens is None and result.status is RunStatus.CONTEXT_EXCEEDED:
            assert compactions == 0
    if policy.clear_results_after is not None:
        cleared = [t.cleared_results for t in result.turn_log if t.cleared_results]
        assert all(n >= policy.clear_batch for n in cleared)


# --------------------------------------------------------------------------------------------
# Clearing


async def test_clearing_happens_in_batches_and_keeps_the_cached_prefix_between_batches() -> None:
    reader = Reader(total=40)
    policy = ContextPolicy(clear_results_after=3, clear_batch=4)
    result = await run(reader_agent(reader), TASK, limits=BIG, context=policy)
    assert result.status is RunStatus.COMPLETED, result.error
    log = result.turn_log
    assert len(log) == 41
    events = [t for t in log if t.cleared_results]
    assert all(t.cleared_results >= 4 for t in events)
    assert sum(1 for t in log if t.cleared_results == 0) > 0.7 * len(log)
    # 40 results; the last 3 are never old enough: 37 due, cleared 4 at a time
    assert len(events) == 9 and sum(t.cleared_results for t in events) == 36
    # between clearings a request extends the previous one (the prompt cache's prefix holds)
    requests = reader.main_requests
    for before, after, entry in zip(requests, requests[1:], log[1:], strict=False):
        extends = tuple(after.messages[: len(before.messages)]) == tuple(before.messages)
        assert extends == (entry.cleared_results == 0), entry


async def test_placeholders_name_the_call_and_keep_the_pair() -> None:
    reader = Reader(total=8)
    policy = ContextPolicy(clear_results_after=2, clear_batch=1)
    result = await run(reader_agent(reader), TASK, limits=BIG, context=policy)
    assert result.status is RunStatus.COMPLETED, result.error
    check_transcript(result.messages)
    results = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert len(results) == 8
    cleared = [b for b in results if b.content.startswith(CLEARED_PREFIX)]
    assert len(cleared) == 6  # all but the last two
    for b in cleared:
        doc = int(b.tool_use_id.removeprefix("call_"))
        assert f'result of read("doc":{doc})' in b.content
        assert "call again if needed" in b.content
        assert len(b.content) < 120
    assert [b.content[:6] for b in results[-2:]] == ["doc 7:", "doc 8:"]
    assert [t.cleared_results for t in result.turn_log][:4] == [0, 0, 0, 1]


async def test_clearing_keeps_the_error_flag_of_a_failed_call() -> None:
    @tool
    async def flaky(n: int) -> str:
        """Fails on odd numbers."""
        if n % 2:
            raise ValueError("odd")
        return "even " * 50

    def respond(request: ModelRequest) -> Any:
        n = sum(1 for m in request.messages if m.role == "assistant")
        if n >= 6:
            return text("done")
        return tool_call("flaky", {"n": n}, id=f"c{n}")

    agent = Agent("a", "x", model=FunctionModel(respond), tools=[flaky])
    policy = ContextPolicy(clear_results_after=1, clear_batch=1)
    result = await run(agent, "go", context=policy, limits=BIG)
    results = {
        b.tool_use_id: b for m in result.messages for b in m.content if b.type == "tool_result"
    }
    assert [results[f"c{n}"].is_error for n in range(6)] == [False, True] * 3
    assert [results[f"c{n}"].error_type for n in range(6)] == [None, "ValueError"] * 3
    assert all(results[f"c{n}"].content.startswith(CLEARED_PREFIX) for n in range(5))


# --------------------------------------------------------------------------------------------
# Result caps


async def test_result_caps_cut_with_a_visible_marker_and_a_hint() -> None:
    @tool
    async def other(n: int) -> str:
        """Returns a long text."""
        return "y" * 1_000

    def respond(request: ModelRequest) -> Any:
        if any(m.role == "assistant" for m in request.messages):
            return text("done")
        return [tool_call("read", {"doc": 1}, id="r"), tool_call("other", {"n": 1}, id="o")]

    agent = Agent("a", "x", model=FunctionModel(respond), tools=[read, other])
    result = await run(agent, "go", context=ContextPolicy(result_caps={"read": 100}))
    capped, untouched = (b for b in result.messages[2].content if b.type == "tool_result")
    assert capped.content.startswith("doc 1: ")
    body, marker = capped.content.split("\n", 1)
    assert len(body) == 100
    assert marker.startswith(f"[truncated: showing 100 of {DOC_CHARS} characters")
    assert "ask for a narrower range" in marker
    assert untouched.content == "y" * 1_000  # only the capped tool is cut


# --------------------------------------------------------------------------------------------
# Compaction


async def test_compaction_keeps_the_facts_the_summary_names_and_is_its_own_span() -> None:
    provider, exporter = in_memory_tracing()
    reader = Reader(total=12)
    policy = ContextPolicy(compact_at_tokens=2_500)
    result = await run(
        reader_agent(reader), TASK, limits=BIG, context=policy, tracer_provider=provider
    )
    assert result.status is RunStatus.COMPLETED, result.error
    # the code word was read at doc 3, long compacted away, and is still in the answer
    assert result.output == f"Read all 12 docs. The code word is {CODE_WORD}."
    assert len(reader.checkpoints) >= 2
    for i, request in enumerate(reader.requests[:-1]):
        if not is_checkpoint(request):
            continue
        summary = reader.requests[i + 1]  # the request right after a checkpoint
        assert not is_checkpoint(summary)
        assert len(summary.messages) == 1
        first = summary.messages[0]
        assert first.role == "user"
        assert first.text.startswith(TASK)
        assert f"the code word is {CODE_WORD} (doc {CODE_DOC})" in first.text
        assert f"docs read: {docs_read(request)}" in first.text
        assert "Work left:" in first.text
    assert result.messages[0].text.startswith(TASK)
    compacted_turns = [t for t in result.turn_log if t.compacted]
    assert len(compacted_turns) == len(reader.checkpoints)

    spans = exporter.get_finished_spans()
    index = by_id(spans)
    compacts = [s for s in spans if s.name == "compact reader"]
    assert len(compacts) == len(reader.checkpoints)
    for s in compacts:
        parent = parent_of(s, index)
        assert parent is not None and parent.name == "turn reader"
        children = [c for c in spans if parent_of(c, index) is s]
        assert [c.name for c in children] == ["chat function"]
        attrs = s.attributes or {}
        assert (
            attrs["orchestrator.context.tokens_before"] > attrs["orchestrator.context.tokens_after"]
        )
    flagged = [
        s
        for s in spans
        if s.name == "turn reader" and (s.attributes or {}).get("orchestrator.context.compacted")
    ]
    assert {parent_of(s, index) for s in compacts} == set(flagged)


async def test_a_resumed_run_replays_its_checkpoint_summaries_and_does_not_compact_again(
    tmp_path: Any,
) -> None:
    from orchestrator import resume

    reader = Reader(total=12)
    policy = ContextPolicy(compact_at_tokens=2_500)
    agent = reader_agent(reader)
    journal = tmp_path / "run.db"
    first = await run(agent, TASK, limits=BIG, context=policy, journal=journal)
    assert first.status is RunStatus.COMPLETED, first.error
    assert len(reader.checkpoints) >= 2
    asked = len(reader.requests)
    again = await resume(journal, agent=agent, limits=BIG, context=policy)
    assert again.status is RunStatus.COMPLETED and again.output == first.output
    assert len(reader.requests) == asked  # no model call: turns and summaries replayed
    assert [t.compacted for t in again.turn_log] == [t.compacted for t in first.turn_log]


class WindowedModel(FunctionModel):
    """A FunctionModel whose context window is known, for ``compact_at_fraction``."""

    context_window = 4_000


async def test_compact_at_fraction_uses_the_models_context_window() -> None:
    reader = Reader(total=20)
    agent = Agent("reader", "You read.", model=WindowedModel(reader), tools=[read])
    result = await run(agent, TASK, limits=BIG, context=ContextPolicy(compact_at_fraction=0.5))
    assert result.status is RunStatus.COMPLETED, result.error
    assert reader.checkpoints
    assert max(r.input_tokens_estimate for r in reader.main_requests) <= 2_000
    # the default policy compacts at 80% of a known window
    reader = Reader(total=20)
    agent = Agent("reader", "You read.", model=WindowedModel(reader), tools=[read])
    result = await run(agent, TASK, limits=BIG)
    assert reader.checkpoints
    assert max(r.input_tokens_estimate for r in reader.main_requests) <= 3_200


async def test_a_checkpoint_without_text_ends_with_context_exceeded() -> None:
    def respond(request: ModelRequest) -> Any:
        if is_checkpoint(request):
            return text("")
        n = docs_read(request)
        return tool_call("read", {"doc": n + 1}, id=f"c{n}")

    provider, exporter = in_memory_tracing()
    agent = Agent("a", "x", model=FunctionModel(respond), tools=[read])
    result = await run(
        agent,
        "go",
        limits=BIG,
        context=ContextPolicy(compact_at_tokens=2_000),
        tracer_provider=provider,
    )
    assert result.status is RunStatus.CONTEXT_EXCEEDED
    assert "no checkpoint summary" in (result.error or "")
    check_transcript(result.messages)
    (compact,) = [s for s in exporter.get_finished_spans() if s.name == "compact a"]
    assert compact.attributes is not None
    assert compact.attributes["orchestrator.outcome"] == "context_exceeded"
    assert compact.status.status_code.name == "ERROR"


# --------------------------------------------------------------------------------------------
# The context window


def too_long(kind: str, max_results: int) -> Callable[[ModelRequest], Any]:
    """Overflow when the transcript holds more than ``max_results`` tool results."""

    def overflow(request: ModelRequest) -> Any:
        if results_in(request) <= max_results:
            return None
        if kind == "error":
            raise ModelError.from_kind(
                "prompt is too long: 210000 tokens > 200000", kind="context_exceeded"
            )
        return response(text("I was cut"), stop_reason="model_context_window_exceeded")

    return overflow


def always(kind: str) -> Callable[[ModelRequest], Any]:
    def overflow(request: ModelRequest) -> Any:
        if kind == "error":
            raise ModelError.from_kind("prompt is too long", kind="context_exceeded")
        return response(text("I was cut"), stop_reason="model_context_window_exceeded")

    return overflow


@pytest.mark.parametrize("kind", ["stop_reason", "error"])
async def test_hitting_the_window_compacts_and_recovers(kind: str) -> None:
    provider, exporter = in_memory_tracing()
    reader = Reader(total=12, overflow=too_long(kind, 5))
    policy = ContextPolicy(compact_at_tokens=10**9)  # compaction on, never proactive
    result = await run(
        reader_agent(reader), TASK, limits=BIG, context=policy, tracer_provider=provider
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == f"Read all 12 docs. The code word is {CODE_WORD}."
    # 5 results fit: the 6th overflows, is compacted; again after the 12th
    assert len(reader.checkpoints) == 2
    check_transcript(result.messages)
    assert "I was cut" not in " ".join(m.text for m in result.messages)
    compacts = [s for s in exporter.get_finished_spans() if s.name == "compact reader"]
    assert len(compacts) == 2
    # the turn log says where compaction happened, whatever triggered it
    assert sum(t.compacted for t in result.turn_log) == 2


async def test_turn_log_estimate_is_the_estimate_of_the_answered_request() -> None:
    reader = Reader(total=8, overflow=too_long("error", 5))
    result = await run(
        reader_agent(reader), TASK, limits=BIG, context=ContextPolicy(compact_at_tokens=10**9)
    )
    assert result.status is RunStatus.COMPLETED, result.error
    # the overflowing request raised: the answered one after compaction is the turn's request
    answered = [r for r in reader.main_requests if results_in(r) <= 5]
    assert [t.input_tokens_estimate for t in result.turn_log] == [
        r.input_tokens_estimate for r in answered
    ]


@pytest.mark.parametrize("kind", ["stop_reason", "error"])
async def test_hitting_the_window_again_without_progress_stops(kind: str) -> None:
    reader = Reader(total=12, overflow=always(kind))
    result = await run(
        reader_agent(reader), TASK, limits=BIG, context=ContextPolicy(compact_at_tokens=10**9)
    )
    assert result.status is RunStatus.CONTEXT_EXCEEDED
    assert "context window" in (result.error or "")
    assert len(reader.checkpoints) == 1  # compacted once, retried once, then stopped
    assert len(reader.main_requests) == 2
    check_transcript(result.messages)


@pytest.mark.parametrize("kind", ["stop_reason", "error"])
@pytest.mark.parametrize(
    "policy",
    [None, ContextPolicy(), ContextPolicy(compact_at_fraction=None)],
    ids=["no-policy", "default", "off"],
)
async def test_without_a_threshold_the_window_stops_the_agent_at_once(
    kind: str, policy: ContextPolicy | None
) -> None:
    reader = Reader(total=12, overflow=too_long(kind, 2))
    result = await run(reader_agent(reader), TASK, limits=BIG, context=policy)
    assert result.status is RunStatus.CONTEXT_EXCEEDED
    assert not reader.checkpoints
    assert len(reader.main_requests) == 4  # 2 results fit, the request with 3 overflows
    check_transcript(result.messages)


async def test_overflow_recovery_works_with_a_window_that_applies_to_every_request() -> None:
    """A real provider refuses the checkpoint request too when it is as long as the one it
    just refused: recovery must summarize something that fits in the window.

    The estimator counts characters / 4; this model counts characters / 3 (as real tokenizers
    often do on code and JSON), so a threshold at 90% of the window in estimated tokens is
    passed by real tokens first and the provider refuses the request.
    """
    window = 6_000

    def overflow(request: ModelRequest) -> Any:
        real_tokens = (len(request.system) + sum(block_chars(m) for m in request.messages)) // 3
        if real_tokens > window:
            raise ModelError.from_kind("prompt is too long", kind="context_exceeded")
        return None

    reader = Reader(total=30, overflow=overflow, window_applies_to_checkpoints=True)
    policy = ContextPolicy(compact_at_tokens=int(window * 0.9))
    result = await run(reader_agent(reader), TASK, limits=BIG, context=policy)
    assert result.status is RunStatus.COMPLETED, result.error


async def test_a_proactive_checkpoint_refused_as_too_long_is_made_again_as_after_an_overflow() -> (
    None
):
    # one large result jumps past both the threshold and the real window: the checkpoint
    # request (the whole transcript) is refused too, and must be retried cut down
    window = 6_000

    @tool
    def fetch(doc: int) -> str:
        """Fetch a document."""
        return f"doc {doc}: " + "z" * (16_000 if doc == 4 else 2_000)

    def respond(request: ModelRequest) -> Any:
        if request_tokens(request) * 4 // 3 > window:  # real tokens: characters / 3
            raise ModelError.from_kind("prompt is too long", kind="context_exceeded")
        if is_checkpoint(request):
            return text("Goal: fetch docs 0-5. Work left: the rest, then answer.")
        if RESUME_HEADER in request.messages[0].text:
            return text("done after the checkpoint")
        fetched = sum(1 for m in request.messages for b in m.content if b.type == "tool_use")
        return tool_call("fetch", {"doc": fetched}, id=f"c{fetched}")

    agent = Agent("a", "x", model=FunctionModel(respond), tools=[fetch])
    policy = ContextPolicy(compact_at_tokens=int(window * 0.9))
    result = await run(agent, "go", limits=BIG, context=policy)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "done after the checkpoint"


@pytest.mark.parametrize(
    "reply",
    [
        response(text("I can't help with that."), stop_reason="refusal"),
        response(text("<partial"), stop_reason="brand_new_reason"),
    ],
    ids=["refusal", "unknown"],
)
async def test_a_refusal_or_an_unknown_reply_never_becomes_the_checkpoint(
    reply: ModelResponse,
) -> None:
    def respond(request: ModelRequest) -> Any:
        if is_checkpoint(request):
            return reply
        n = docs_read(request)
        return tool_call("read", {"doc": n + 1}, id=f"c{n}")

    agent = Agent("a", "x", model=FunctionModel(respond), tools=[read])
    result = await run(agent, "go", limits=BIG, context=ContextPolicy(compact_at_tokens=2_000))
    assert result.status is RunStatus.CONTEXT_EXCEEDED
    assert f"stop_reason {reply.stop_reason!r}" in (result.error or "")
    assert RESUME_HEADER not in result.messages[0].text  # the transcript was not replaced
    check_transcript(result.messages)


@pytest.mark.parametrize(
    "reply",
    [
        response(text("Goal: go on. Evidence: docs read: 3"), tool_call("read", {"doc": 4})),
        response(text("Goal: go on. Evidence: docs read: 3"), stop_reason="max_tokens"),
    ],
    ids=["then a tool call", "cut by max_tokens"],
)
async def test_a_summary_followed_by_a_tool_call_or_cut_short_is_kept(reply: ModelResponse) -> None:
    def respond(request: ModelRequest) -> Any:
        if is_checkpoint(request):
            return reply
        if RESUME_HEADER in request.messages[0].text:
            return text("resumed")
        n = docs_read(request)
        return tool_call("read", {"doc": n + 1}, id=f"c{n}")

    agent = Agent("a", "x", model=FunctionModel(respond), tools=[read])
    result = await run(agent, "go", limits=BIG, context=ContextPolicy(compact_at_tokens=2_000))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "resumed"
    assert "docs read: 3" in result.messages[0].text


async def test_a_cut_answer_compacted_away_is_not_glued_to_the_answer_after_the_checkpoint() -> (
    None
):
    def respond(request: ModelRequest) -> Any:
        if is_checkpoint(request):
            return text("Goal: write the report. Work left: write it from scratch.")
        if RESUME_HEADER in request.messages[0].text:
            return text("FRESH REPORT.")
        return response(text("DRAFT " + "blah " * 1_000), stop_reason="max_tokens")

    agent = Agent("a", "x", model=FunctionModel(respond))
    result = await run(agent, "go", limits=BIG, context=ContextPolicy(compact_at_tokens=1_000))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "FRESH REPORT."


async def test_a_lead_whose_transcript_is_mostly_subagent_answers_recovers_from_an_overflow() -> (
    None
):
    """Clearing keeps subagent answers (they cannot be had again by calling again); the
    checkpoint request after an overflow cuts them to fit instead of sending them whole."""
    window = 6_000  # real tokens, counted as characters / 3 on every request
    checkpoints: list[ModelRequest] = []

    def answer(request: ModelRequest) -> Any:
        real_tokens = (len(request.system) + sum(block_chars(m) for m in request.messages)) // 3
        if real_tokens > window:
            raise ModelError.from_kind("prompt is too long", kind="context_exceeded")
        if request.agent.name == "worker":
            return text("finding: " + "evidence " * 450)  # ~4,000 characters
        if is_checkpoint(request):
            checkpoints.append(request)
            return text("Goal: gather findings. Evidence: every worker answered. Work left: none.")
        if any(RESUME_HEADER in t for t in texts(request)):  # continuing after compaction
            return text("All workers answered.")
        spawned = sum(len(m.tool_uses) for m in request.messages if m.role == "assistant")
        return tool_call("spawn_subagent", {"agent": "worker", "task": f"batch {spawned}"})

    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker], model=FunctionModel(answer))
    policy = ContextPolicy(compact_at_tokens=int(window * 0.9))

    result = await run(lead, "gather", limits=BIG, context=policy)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "All workers answered."
    assert len(checkpoints) == 1
    assert "[cut to" in " ".join(
        b.content for m in checkpoints[0].messages for b in m.content if b.type == "tool_result"
    )
    check_transcript(result.messages)


# --------------------------------------------------------------------------------------------
# The turn log and span attributes


async def test_turn_log_holds_the_retried_call_after_a_tool_call_cut_by_max_tokens() -> None:
    def respond(request: ModelRequest) -> Any:
        if request.turn_index() == 0 and request.max_tokens <= 4096:  # cut, dropped, retried
            return response(
                tool_call("read", {}), stop_reason="max_tokens", usage=Usage(input_tokens=100)
            )
        if request.turn_index() == 0:
            return response(
                tool_call("read", {"doc": 1}), usage=Usage(input_tokens=100, cache_read_tokens=90)
            )
        return response(text("done"), usage=Usage(input_tokens=120, cache_read_tokens=100))

    agent = Agent("a", "x", model=FunctionModel(respond), tools=[read])
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert [(t.turn, t.cache_read_tokens) for t in result.turn_log] == [(1, 90), (2, 100)]


async def test_turn_log_records_estimate_clearing_compaction_and_cache_reads() -> None:
    provider, exporter = in_memory_tracing()

    def usage(request: ModelRequest) -> Usage:
        return Usage(
            input_tokens=request.input_tokens_estimate,
            output_tokens=10,
            cache_read_tokens=request.input_tokens_estimate // 2,
        )

    reader = Reader(total=30, usage=usage)
    policy = ContextPolicy(clear_results_after=3, clear_batch=3, compact_at_tokens=3_000)
    result = await run(
        reader_agent(reader), TASK, limits=BIG, context=policy, tracer_provider=provider
    )
    assert result.status is RunStatus.COMPLETED, result.error
    log = result.turn_log
    main = reader.main_requests
    assert [t.turn for t in log] == list(range(1, 32))
    assert [t.input_tokens_estimate for t in log] == [r.input_tokens_estimate for r in main]
    assert [t.input_tokens for t in log] == [r.input_tokens_estimate for r in main]
    assert [t.cache_read_tokens for t in log] == [r.input_tokens_estimate // 2 for r in main]
    assert any(t.cleared_results for t in log) and any(t.compacted for t in log)
    assert sum(t.compacted for t in log) == len(reader.checkpoints)
    for before, after, entry in zip(main, main[1:], log[1:], strict=False):
        if entry.compacted:
            assert len(after.messages) == 1 and after.input_tokens_estimate < 1_000
        elif entry.cleared_results:
            assert after.input_tokens_estimate < before.input_tokens_estimate
    turns = sorted(
        (s for s in exporter.get_finished_spans() if s.name == "turn reader"),
        key=lambda s: (s.attributes or {})["orchestrator.turn.index"],
    )
    assert len(turns) == 31
    for s, entry in zip(turns, log, strict=True):
        attrs = s.attributes or {}
        assert attrs["orchestrator.context.input_tokens_estimate"] == entry.input_tokens_estimate
        assert attrs["orchestrator.context.cleared_results"] == entry.cleared_results
        assert attrs["orchestrator.context.compacted"] == entry.compacted
        assert attrs["orchestrator.context.cache_read_tokens"] == entry.cache_read_tokens


# --------------------------------------------------------------------------------------------
# Configuration


async def test_the_runs_policy_overrides_every_agents() -> None:
    reader = Reader(total=6)
    agent = reader_agent(reader, context=ContextPolicy(clear_results_after=1, clear_batch=1))
    result = await run(agent, TASK, limits=BIG)
    assert sum(t.cleared_results for t in result.turn_log) == 5
    reader = Reader(total=6)
    agent = reader_agent(reader, context=ContextPolicy(clear_results_after=1, clear_batch=1))
    result = await run(agent, TASK, limits=BIG, context=ContextPolicy())
    assert sum(t.cleared_results for t in result.turn_log) == 0


async def test_a_childs_policy_is_its_own() -> None:
    def respond(request: ModelRequest) -> Any:
        if request.agent.name == "lead":
            if any(m.role == "assistant" for m in request.messages):
                return text("ok")
            return tool_call("spawn_subagent", {"agent": "reader", "task": TASK}, id="sp")
        return Reader(total=6)(request)

    child = Agent(
        "reader",
        "You read.",
        tools=[read],
        context=ContextPolicy(clear_results_after=1, clear_batch=1),
    )
    lead = Agent("lead", "You lead.", model=FunctionModel(respond), subagents=[child])
    result = await run(lead, "go", limits=BIG)
    assert result.status is RunStatus.COMPLETED, result.error
    [child_result] = result.children
    assert sum(t.cleared_results for t in child_result.turn_log) == 5
    assert sum(t.cleared_results for t in result.turn_log) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"clear_results_after": 0},
        {"clear_batch": 0},
        {"compact_at_tokens": 0},
        {"compact_at_fraction": 0.0},
        {"compact_at_fraction": 1.5},
        {"result_caps": {"read": 0}},
        # wrong types: each would fail (or do something else) only in the middle of a run
        {"result_caps": {"read": 2.5}},
        {"result_caps": {"read": True}},
        {"result_caps": ["read"]},
        {"result_caps": None},
        {"clear_results_after": 2.0},
        {"clear_batch": True},
        {"compact_at_tokens": float("nan")},
        {"compact_at_tokens": "1000"},
        {"compact_at_fraction": float("nan")},
        {"compact_at_fraction": True},
        {"compact_at_fraction": "0.5"},
    ],
)
def test_invalid_policies_are_refused_when_built(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="ContextPolicy"):
        ContextPolicy(**kwargs)


def test_defaults() -> None:
    p = ContextPolicy()
    assert (p.result_caps, p.clear_results_after, p.clear_batch) == ({}, None, 4)
    assert (p.compact_at_tokens, p.compact_at_fraction) == (None, 0.8)
    assert p.compaction_threshold(None) is None
    assert p.compaction_threshold(200_000) == 160_000
    assert ContextPolicy(compact_at_tokens=50_000).compaction_threshold(200_000) == 50_000
