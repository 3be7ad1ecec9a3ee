"""The fault-injection harness: tree builders, the guarantee checker, and the outcome matrix.

Every fault test builds a chain ``root -> mid -> faulty`` cut to the depth under test (depth 0:
the faulty agent *is* the root; depth 1: ``root -> faulty``; depth 2: ``root -> mid -> faulty``).
Each relay above the faulty agent is a :class:`FunctionModel` agent that, on its first turn,
spawns the next agent of the chain *and* a quick ``helper`` sibling in parallel, and on its
second turn answers with what both spawns returned (so anything that leaks out of a child, a
secret for instance, would travel up into the relay's transcript and answer too).

:class:`Observer` runs one tree through ``open_run`` and :meth:`Observer.verify` asserts the
guarantees of issue 8 on the outcome: the documented status (faulty agent and root) and what
the parent saw; the run within its limits plus a small slack (time, turns, depth, children,
agents, token budget) and, when cut from outside, ended at once; every transcript valid; no
trio task left; every worker thread still running counted in ``handle.abandoned_threads`` and
the thread count back to its baseline once they are released; every span ended, agent and
failed tool spans with the right status; no exception out of ``run()``; denied or declined
handlers never called; the canary key nowhere (results, errors, transcripts, events, span
attributes, the OTLP/JSON trace file, log records). The outcome is recorded into
:data:`MATRIX`, from which :func:`write_matrix` writes ``docs/faults.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import threading
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode
from support.trees import live_tasks

from orchestrator import (
    DEFAULT_LIMITS,
    Agent,
    Limits,
    Message,
    Policy,
    RunHandle,
    RunResult,
    RunStatus,
    open_run,
)
from orchestrator.models import FunctionModel, text, tool_call
from orchestrator.tracing import configure_tracing

CANARY = "sk-ant-canary-0123456789abcdef"
"""The value of ANTHROPIC_API_KEY during the suite: it must never appear in any output."""
DEPTHS = (0, 1, 2)
FAULTY = "faulty"
SPAWN_NEXT_ID = "spawn-next"
RELAY_NAMES = ("root", "mid")

# ---------------------------------------------------------------------------------------------
# small helpers


def turn_of(request: Any) -> int:
    """How many assistant turns the request's transcript already holds (0 on the first call)."""
    return sum(1 for m in request.messages if m.role == "assistant")


def last_results(request: Any) -> list[Any]:
    """The tool results of the request's last user message."""
    if not request.messages:
        return []
    return [b for b in request.messages[-1].content if b.type == "tool_result"]


def spawn(agent: str, task: str, tools: list[str] | None = None, id: str | None = None) -> Any:
    args: dict[str, Any] = {"agent": agent, "task": task}
    if tools is not None:
        args["tools"] = tools
    return tool_call("spawn_subagent", args, id=id)


def nodes(result: RunResult) -> Iterator[RunResult]:
    yield from result.walk()


def one_line(value: str, limit: int = 170) -> str:
    """``value`` on one line for the matrix: no request ids, no long filler, never the canary
    (an escaped exception may carry it: the document must not)."""
    value = " ".join(str(value).split()).replace(CANARY, "⟨canary⟩")
    value = re.sub(r"req_fake\d+", "req_…", value)
    value = re.sub(r"(.)\1{19,}", lambda m: m.group(1) * 3 + "…", value)
    value = value.replace("|", "\\|")
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _counted_thread(t: threading.Thread) -> bool:
    """Threads the suite accounts for: not trio's idle cached workers (named ``Trio thread N``
    while idle; they exit by themselves after 10 s), not the fake Messages server's per-connection
    handlers (they end when the client hangs up)."""
    return not t.name.startswith("Trio thread ") and "process_request_thread" not in t.name


def counted_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if _counted_thread(t)}


def counted_active_count() -> int:
    """``threading.active_count()`` minus idle cached trio workers and fake-server handlers."""
    return threading.active_count() - sum(
        1 for t in threading.enumerate() if not _counted_thread(t)
    )


# ---------------------------------------------------------------------------------------------
# trees


def relay_model(next_name: str, latency: float = 0.0) -> FunctionModel:
    """A relay: spawn ``next_name`` and the helper in parallel, then report what came back."""

    async def fn(request: Any) -> Any:
        if latency:
            await trio.sleep(latency)
        if turn_of(request) == 0:
            return [
                spawn(next_name, "Do your task.", id=SPAWN_NEXT_ID),
                spawn("helper", "Say hello.", id="spawn-helper"),
            ]
        seen = [f"{'ERROR ' if r.is_error else ''}{r.content[:300]}" for r in last_results(request)]
        return text(f"{request.agent.name} got: " + " || ".join(seen))

    return FunctionModel(fn, name="relay")


def helper_agent(latency: float = 0.0) -> Agent:
    async def fn(request: Any) -> Any:
        if latency:
            await trio.sleep(latency)
        return text("hello from the helper")

    return Agent(
        "helper",
        "Answer quickly.",
        description="a quick helper",
        model=FunctionModel(fn, name="helper"),
        tools=[],
    )


def chain(
    faulty: Agent,
    depth: int,
    *,
    root_policy: Policy | None = None,
    relay_latency: float = 0.0,
    helper_latency: float = 0.0,
) -> Agent:
    """The tree with ``faulty`` at ``depth`` (see the module docstring).

    ``root_policy`` goes on the root's definition (so at depth >= 1 the faulty agent only has it
    by inheritance).
    """
    assert faulty.name == FAULTY
    if depth == 0:
        if root_policy is None:
            return faulty
        return faulty.replace(policy=(faulty.policy or Policy()).combine(root_policy))
    helper = helper_agent(helper_latency)
    below = faulty
    for level in reversed(range(depth)):
        below = Agent(
            RELAY_NAMES[level],
            f"Relay at depth {level}: delegate, then report.",
            description=f"relay at depth {level}",
            model=relay_model(below.name, relay_latency),
            tools=[],
            subagents=[below, helper],
            policy=root_policy if level == 0 else None,
        )
    return below


def scripted(*steps: Any, then: Any = None, latency: float = 0.0) -> FunctionModel:
    """A FunctionModel answering ``steps[turn]`` (a value or ``fn(request)``); past the end it
    answers ``then`` (default: a text reporting the last tool results)."""

    async def fn(request: Any) -> Any:
        if latency:
            await trio.sleep(latency)
        turn = turn_of(request)
        step = steps[turn] if turn < len(steps) else then
        if callable(step):
            step = step(request)
        if step is None:
            seen = [
                f"{'ERROR ' if r.is_error else ''}{r.content[:300]}" for r in last_results(request)
            ]
            return text("I saw: " + " || ".join(seen))
        return step

    return FunctionModel(fn, name="faulty-model")


# ---------------------------------------------------------------------------------------------
# spans


class SpanLog(SpanProcessor):
    """Counts span starts and ends and keeps the ended spans for inspection."""

    def __init__(self, keep: bool = True) -> None:
        self.started = 0
        self.ended = 0
        self.keep = keep
        self.spans: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self._lock:
            self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
            if self.keep:
                self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _span_texts(s: ReadableSpan) -> Iterator[str]:
    yield s.name
    if s.status.description:
        yield s.status.description
    for value in (s.attributes or {}).values():
        yield repr(value)
    for ev in s.events:
        yield ev.name
        for value in (ev.attributes or {}).values():
            yield repr(value)


# ---------------------------------------------------------------------------------------------
# the matrix


@dataclass
class Expect:
    """The documented outcome of one fault at one depth."""

    faulty: RunStatus | frozenset[RunStatus]
    root: RunStatus | frozenset[RunStatus]
    parent_error: bool | None = None
    """Whether the faulty agent's parent got an ``is_error`` result for its spawn (depth >= 1)."""


def expect(
    faulty: str | Iterable[str],
    root_deeper: str | Iterable[str] | None = None,
    *,
    parent_error: bool | None = None,
) -> Callable[[int], Expect]:
    """Expectation by depth: at depth 0 the root *is* the faulty agent; deeper, the root ends
    ``root_deeper`` (default: completed) and the parent sees ``is_error`` per ``parent_error``
    (default: whether the faulty agent did not complete)."""

    def status(v: str | Iterable[str]) -> RunStatus | frozenset[RunStatus]:
        return RunStatus(v) if isinstance(v, str) else frozenset(RunStatus(x) for x in v)

    f = status(faulty)

    def by_depth(depth: int) -> Expect:
        if depth == 0:
            return Expect(f, f, None)
        root = status(root_deeper if root_deeper is not None else "completed")
        pe = parent_error
        if pe is None:
            pe = f != RunStatus.COMPLETED
        return Expect(f, root, pe)

    return by_depth


@dataclass
class Row:
    fault: str
    depth: int
    faulty: str
    root: str
    parent_saw: str
    expected: str
    ok: bool = True
    notes: str = ""
    runs: int = 1
    seen: set[str] = field(default_factory=set)


MATRIX: dict[tuple[str, int], Row] = {}
"""(fault, depth) -> what the suite observed; written to docs/faults.md by write_matrix()."""
FAULTS: dict[str, tuple[int, str]] = {}
"""fault -> (position in the document, one-line description)."""
FAILURES: list[str] = []


def describe(fault: str, description: str, order: int) -> str:
    """Register a fault for the document (``order`` places it; ties keep registration order)."""
    FAULTS.setdefault(fault, (order, description))
    return fault


def _fmt(s: RunStatus | frozenset[RunStatus]) -> str:
    if isinstance(s, RunStatus):
        return s.value
    return " or ".join(sorted(x.value for x in s))


def _matches(actual: RunStatus | None, wanted: RunStatus | frozenset[RunStatus]) -> bool:
    if isinstance(wanted, RunStatus):
        return actual is wanted
    return actual in wanted


# ---------------------------------------------------------------------------------------------
# running and checking


@dataclass
class Outcome:
    """One run as the observer saw it."""

    result: RunResult | None
    handle: RunHandle | None
    elapsed: float
    started_at: float
    escaped: BaseException | None = None
    cut_at: float | None = None
    """When the outside cancellation fired (``None``: it did not, or there was none)."""
    events: list[Any] = field(default_factory=list)


class Observer:
    """Runs one tree and checks the guarantees. Use one per run (the hypothesis test makes one
    per example)."""

    def __init__(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, *, keep_spans: bool = True
    ):
        self.tmp_path = tmp_path
        self.caplog = caplog
        self.keep_spans = keep_spans
        self.trace_file = tmp_path / "trace.jsonl"
        self.spans = SpanLog(keep=keep_spans)
        self.setup: Any = None
        self.tasks_before = 0
        self.threads_before: set[threading.Thread] = set()
        self.active_before = 0

    async def run(
        self,
        tree: Agent,
        prompt: str = "Begin.",
        *,
        cancel_after: float | None = None,
        cancel_when: Callable[[], Awaitable[None]] | None = None,
        scope_after: float | None = None,
        **options: Any,
    ) -> Outcome:
        """Run ``tree`` through ``open_run``; ``cancel_after`` calls ``handle.cancel()`` after
        that many seconds, ``cancel_when`` once it returns (a moment of the run, on the real
        clock: a wait for something to happen, never a duration), ``scope_after`` cancels an
        enclosing cancel scope instead."""
        self.caplog.set_level(logging.DEBUG)
        self.tasks_before = live_tasks()
        self.threads_before = counted_threads()
        self.active_before = counted_active_count()
        self.setup = configure_tracing(run_file=self.trace_file, set_global=False)
        self.setup.tracer_provider.add_span_processor(self.spans)
        start = trio.current_time()
        handle: RunHandle | None = None
        outcome = Outcome(None, None, 0.0, start)
        try:
            with trio.CancelScope() as outer:
                if scope_after is not None:
                    outer.deadline = start + scope_after
                async with open_run(
                    tree, prompt, tracer_provider=self.setup.tracer_provider, **options
                ) as handle:
                    if cancel_after is None and cancel_when is None:
                        outcome.result = await handle.result()
                    else:
                        async with trio.open_nursery() as nursery:

                            async def canceller(h: RunHandle = handle) -> None:
                                if cancel_when is not None:
                                    await cancel_when()
                                else:
                                    await trio.sleep(cancel_after or 0.0)
                                if not h.done:
                                    outcome.cut_at = trio.current_time()
                                h.cancel()

                            nursery.start_soon(canceller)
                            outcome.result = await handle.result()
                            nursery.cancel_scope.cancel()
            if outer.cancelled_caught:
                outcome.cut_at = start + scope_after if scope_after is not None else None
        except BaseException as exc:  # anything but a caught cancellation is a guarantee broken
            outcome.escaped = exc
        outcome.elapsed = trio.current_time() - start
        outcome.handle = handle
        if handle is not None and handle.done:
            outcome.result = await handle.result()
            async for event in handle.events:  # buffered events (the channel is closed by now)
                outcome.events.append(event)
        return outcome

    # -- the guarantees ---------------------------------------------------------------------

    def verify(
        self,
        fault: str,
        depth: int,
        out: Outcome,
        want: Expect | None,
        *,
        limits: Limits | None = None,
        max_elapsed: float,
        faulty_limits: Limits | None = None,
        abandoned: int | None = 0,
        release: Callable[[], None] | None = None,
        wait_released: Callable[[], bool] | None = None,
        never_called: Mapping[str, Sequence[Any]] = {},
        record: bool = True,
        promptly: float = 0.0,
        error_span_kinds: Iterable[str] = (),
    ) -> None:
        """Record the outcome into the matrix, then assert every guarantee."""
        verified = False
        try:
            if record:
                self._record(fault, depth, out, want)
            self._verify(
                depth,
                out,
                want,
                limits=limits,
                max_elapsed=max_elapsed,
                faulty_limits=faulty_limits,
                abandoned=abandoned,
                never_called=never_called,
                error_span_kinds=tuple(error_span_kinds),
                promptly=promptly,
            )
            verified = True
            self._finish(release, wait_released)
        except BaseException as exc:
            FAILURES.append(f"{fault} @ depth {depth}")
            if record:
                mark_failed(fault, depth, exc)
            if not verified:  # still release hung threads and shut tracing down; the first
                with contextlib.suppress(BaseException):  # failure is the one to report
                    self._finish(release, wait_released)
            raise

    def _record(self, fault: str, depth: int, out: Outcome, want: Expect | None) -> None:
        faulty = find_faulty(out.result, depth)
        root = out.result
        if out.escaped is not None:
            root_s = f"EXCEPTION {describe_exception(out.escaped)}"
        else:
            root_s = root.status.value if root else "(no result)"
        faulty_s = faulty.status.value if faulty else "(never started)"
        row = Row(
            fault,
            depth,
            faulty_s,
            root_s,
            parent_saw(out.result, depth),
            f"{_fmt(want.faulty)} / {_fmt(want.root)}" if want else "",
        )
        if want is not None:
            row.ok = (
                out.escaped is None
                and faulty is not None
                and _matches(faulty.status, want.faulty)
                and root is not None
                and _matches(root.status, want.root)
            )
        MATRIX[(fault, depth)] = row

    def _verify(
        self,
        depth: int,
        out: Outcome,
        want: Expect | None,
        *,
        limits: Limits | None,
        max_elapsed: float,
        faulty_limits: Limits | None,
        abandoned: int | None,
        never_called: Mapping[str, Sequence[Any]],
        error_span_kinds: tuple[str, ...],
        promptly: float,
    ) -> None:
        # no exception escapes run()
        if out.escaped is not None:
            tb = "".join(traceback.format_exception(out.escaped))
            pytest.fail(f"an exception escaped the run: {describe_exception(out.escaped)}\n{tb}")
        result = out.result
        assert result is not None and out.handle is not None and out.handle.done

        # the documented status
        if want is not None:
            faulty = find_faulty(result, depth)
            assert faulty is not None, "the faulty agent never started"
            assert _matches(faulty.status, want.faulty), (
                f"faulty agent {faulty.path} ended {faulty.status.value} ({faulty.error}), "
                f"documented: {_fmt(want.faulty)}"
            )
            assert _matches(result.status, want.root), (
                f"root ended {result.status.value} ({result.error}), documented: {_fmt(want.root)}"
            )
            if depth > 0 and want.parent_error is not None:
                seen = spawn_result(result, depth)
                assert seen is not None, (
                    "the parent has no result for its spawn of the faulty agent"
                )
                assert seen.is_error is want.parent_error, seen
        for node in nodes(result):
            assert isinstance(node.status, RunStatus)
            if node.status is not RunStatus.COMPLETED:
                assert node.error and "\n" not in node.error, (node.path, node.error)

        # within the limits, plus a small slack
        eff = (limits or Limits()).fill(DEFAULT_LIMITS)
        assert out.elapsed <= max_elapsed + 0.05, f"the run took {out.elapsed:.3f}s > {max_elapsed}"
        assert out.elapsed <= (eff.timeout or math.inf) + 0.05
        if out.cut_at is not None:  # an outside cancellation stops the tree promptly
            late = out.started_at + out.elapsed - out.cut_at
            assert late <= promptly + 1e-9, f"the run outlived its cancellation by {late:.3f}s"
        all_nodes = list(nodes(result))
        assert len(all_nodes) <= (eff.max_agents or math.inf)
        for node in all_nodes:
            own = faulty_limits if node.agent_name == FAULTY and faulty_limits else Limits()
            node_limits = own.fill(eff)
            assert node.turns <= (node_limits.max_turns or math.inf), (node.path, node.turns)
            assert node.depth <= (eff.max_depth or 0), node.path
            assert len(node.children) <= (node_limits.max_children or math.inf), node.path
        if eff.token_budget is not None:
            assert result.usage.billed_tokens <= eff.token_budget, result.usage

        # every tool_use has exactly one tool_result, in the next message, at every node
        for node in all_nodes:
            check_transcript(node.messages, node.path)

        # no trio task survives the run
        assert live_tasks() == self.tasks_before, "a trio task outlived the run"

        # no worker thread is left unreported: the threads still running a job after the run
        # are exactly the ones reported as abandoned (polled briefly: a job handed to a cached
        # worker thread an instant before it was abandoned may not have started yet)
        if abandoned is not None:
            assert out.handle.abandoned_threads == abandoned, (
                f"abandoned_threads={out.handle.abandoned_threads}, expected {abandoned}"
            )
        else:
            abandoned = out.handle.abandoned_threads

        def still_running() -> list[threading.Thread]:
            extra = counted_threads() - self.threads_before
            return [t for t in extra if t.is_alive() and t.name not in _TRACING_THREADS]

        settle = time.monotonic() + 10.0  # a bound, generous for a loaded machine
        while len(still_running()) != abandoned and time.monotonic() < settle:
            time.sleep(0.005)
        running = still_running()
        assert len(running) == out.handle.abandoned_threads, (
            f"{len(running)} thread(s) still running after the run "
            f"({dict(Counter(t.name for t in running))}), reported as abandoned: "
            f"{out.handle.abandoned_threads}"
        )

        # every span is ended, with ERROR status where something failed
        assert self.spans.started == self.spans.ended, (
            f"{self.spans.started - self.spans.ended} span(s) never ended"
        )
        if self.keep_spans:
            check_spans(self.spans.spans, result, error_span_kinds)

        # a denied or declined handler is never called
        for name, calls in never_called.items():
            assert not calls, f"the handler of {name!r} ran: {calls}"

        # the canary appears nowhere
        assert_no_canary(result, out.events, self.spans.spans, self.caplog)

    def _finish(
        self, release: Callable[[], None] | None, wait_released: Callable[[], bool] | None
    ) -> None:
        """Shut tracing down (the trace file then holds every span), release hung threads,
        and check that the process is back to its thread baseline."""
        if self.setup is not None:
            self.setup.shutdown(timeout=5)
        if release is not None:
            release()
        if wait_released is not None:
            assert wait_released(), "a released tool thread did not finish"
        deadline = time.monotonic() + 30  # a bound, generous for a loaded machine
        while counted_active_count() > self.active_before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert counted_active_count() == self.active_before, (
            "threads left behind: "
            f"{sorted(t.name for t in counted_threads() - self.threads_before)}"
        )
        if self.trace_file.exists():
            content = self.trace_file.read_text()
            assert CANARY not in content, "the canary reached the trace file"
            if self.keep_spans and self.spans.ended:
                assert content.strip(), "the trace file is empty"
                exported = sum(
                    len(ss.get("spans", ()))
                    for line in content.splitlines()
                    for rs in json.loads(line).get("resourceSpans", ())
                    for ss in rs.get("scopeSpans", ())
                )
                assert exported == self.spans.ended, (exported, self.spans.ended)


_TRACING_THREADS = {"OtelBatchSpanRecordProcessor", "orchestrator-span-export"}


def mark_failed(fault: str, depth: int, exc: BaseException) -> None:
    """Mark a recorded row as a bug, quoting the first line of the failure."""
    row = MATRIX.get((fault, depth))
    if row is None:
        return
    row.ok = False
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    row.notes = row.notes or one_line(reason, 170)


def record_row(fault: str, depth: int, faulty: str, root: str, saw: str, expected: str) -> None:
    """Record a case that is not a run (a definition refused before it starts)."""
    MATRIX[(fault, depth)] = Row(fault, depth, faulty, one_line(root), saw, expected)


def record_many(fault: str, depth: int, out: Outcome, expected: str = "") -> None:
    """Merge one of many runs of a fault (a property test's examples) into its matrix row:
    every status seen, and every distinct thing the parent saw."""
    faulty = find_faulty(out.result, depth)
    f = faulty.status.value if faulty else "(never started)"
    r = (
        f"EXCEPTION {describe_exception(out.escaped)}"
        if out.escaped
        else (out.result.status.value if out.result else "(no result)")
    )
    saw = parent_saw(out.result, depth)
    row = MATRIX.get((fault, depth))
    if row is None:
        MATRIX[(fault, depth)] = Row(fault, depth, f, r, saw, expected, seen={saw})
        return
    row.runs += 1
    row.faulty = " / ".join(sorted({*row.faulty.split(" / "), f}))
    row.root = " / ".join(sorted({*row.root.split(" / "), r}))
    if saw not in row.seen:
        row.seen.add(saw)
        row.parent_saw = "<br>".join(sorted(row.seen))


def describe_exception(exc: BaseException) -> str:
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        else:
            leaves.append(e)

    walk(exc)
    parts = []
    for e in leaves:
        try:
            msg = str(e)
        except Exception:
            msg = "<unprintable>"
        parts.append(f"{type(e).__name__}: {msg}")
    return one_line("; ".join(parts), 120)


def find_faulty(result: RunResult | None, depth: int) -> RunResult | None:
    if result is None:
        return None
    for node in nodes(result):
        if node.agent_name == FAULTY and node.depth == depth:
            return node
    return None


def _parent_of_faulty(result: RunResult | None, depth: int) -> RunResult | None:
    if result is None or depth == 0:
        return None
    node = result
    for _ in range(depth - 1):
        nxt = [c for c in node.children if c.agent_name in RELAY_NAMES]
        if not nxt:
            return None
        node = nxt[0]
    return node


def spawn_result(result: RunResult | None, depth: int) -> Any:
    parent = _parent_of_faulty(result, depth)
    if parent is None:
        return None
    for m in parent.messages:
        for b in m.content:
            if b.type == "tool_result" and b.tool_use_id == SPAWN_NEXT_ID:
                return b
    return None


def parent_saw(result: RunResult | None, depth: int) -> str:
    if result is None:
        return "(no result)"
    if depth == 0:
        err = f": {result.error}" if result.error else f": {result.output}"
        return one_line(f"(caller) RunResult {result.status.value}{err}")
    seen = spawn_result(result, depth)
    if seen is None:
        return "(cut before the spawn)"
    return one_line(f"{'is_error' if seen.is_error else 'ok'}: {seen.content}")


def check_transcript(messages: Sequence[Message], where: str = "") -> None:
    """The DESIGN.md invariant: each tool_use answered by exactly one tool_result, all in the
    next user message, in call order; no orphan results; roles alternate."""
    assert messages, f"{where}: empty transcript"
    assert messages[0].role == "user", where
    for i, m in enumerate(messages):
        assert m.content, f"{where}: message {i} is empty"
        results = [b for b in m.content if b.type == "tool_result"]
        if m.role == "assistant":
            assert not results, f"{where}: assistant message {i} holds a tool_result"
        if i == 0:
            assert not results, where
            continue
        prev = messages[i - 1]
        assert prev.role != m.role, f"{where}: messages {i - 1} and {i} are both {m.role}"
        calls = [b for b in prev.content if b.type == "tool_use"]
        if prev.role == "assistant" and calls:
            assert [r.tool_use_id for r in results] == [c.id for c in calls], (
                f"{where}: message {i} does not answer message {i - 1}'s calls one to one"
            )
            assert len({c.id for c in calls}) == len(calls), f"{where}: duplicate call ids"
        else:
            assert not results, f"{where}: message {i} holds results that answer no call"
    last = messages[-1]
    assert not (last.role == "assistant" and any(b.type == "tool_use" for b in last.content)), (
        f"{where}: the transcript ends with unanswered tool calls"
    )


def check_spans(
    spans: Sequence[ReadableSpan], result: RunResult, error_span_kinds: tuple[str, ...]
) -> None:
    """One ended ``invoke_agent`` span per agent, whose status states the agent's outcome; the
    ``execute_tool`` span of every failed call has ERROR status (or is marked cancelled)."""
    by_id = {s.context.span_id: s for s in spans}
    agent_spans: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        if s.name.startswith("invoke_agent "):
            agent_spans.setdefault(
                str((s.attributes or {}).get("orchestrator.agent.path")), []
            ).append(s)

    def owner(s: ReadableSpan) -> str | None:
        p = s.parent
        while p is not None:
            parent = by_id.get(p.span_id)
            if parent is None:
                return None
            if parent.name.startswith("invoke_agent "):
                return str((parent.attributes or {}).get("orchestrator.agent.path"))
            p = parent.parent
        return None

    tool_spans: dict[tuple[str | None, str], ReadableSpan] = {}
    chat_errors: list[ReadableSpan] = []
    for s in spans:
        if s.name.startswith("execute_tool "):
            call_id = str((s.attributes or {}).get("gen_ai.tool.call.id"))
            key = (owner(s), call_id)
            assert key not in tool_spans, f"two execute_tool spans for {key}"
            tool_spans[key] = s
        elif s.name.startswith("chat ") and s.status.status_code is StatusCode.ERROR:
            chat_errors.append(s)

    for node in nodes(result):
        found = agent_spans.get(node.path, [])
        assert len(found) == 1, f"{node.path}: {len(found)} invoke_agent spans"
        s = found[0]
        attrs = s.attributes or {}
        assert attrs.get("orchestrator.outcome") == node.status.value, (node.path, attrs)
        if node.status is RunStatus.COMPLETED:
            assert s.status.status_code is StatusCode.OK, node.path
        elif node.status is RunStatus.CANCELLED:
            assert s.status.status_code is StatusCode.UNSET, node.path
            assert attrs.get("orchestrator.cancelled") is True, node.path
        else:
            assert s.status.status_code is StatusCode.ERROR, (node.path, s.status)
            assert attrs.get("error.type") == node.status.value, (node.path, attrs)
        for m in node.messages:
            for b in m.content:
                if b.type != "tool_result":
                    continue
                ts = tool_spans.get((node.path, b.tool_use_id))
                if ts is None:
                    continue  # a call the agent never executed (cut by a bound before EXECUTE)
                tattrs = ts.attributes or {}
                if b.is_error:
                    assert (
                        ts.status.status_code is StatusCode.ERROR
                        or tattrs.get("orchestrator.cancelled") is True
                    ), (node.path, b.tool_use_id, ts.status)
                else:
                    assert ts.status.status_code is StatusCode.OK, (node.path, b.tool_use_id)
    if error_span_kinds:
        kinds = {str((s.attributes or {}).get("error.type")) for s in chat_errors}
        assert kinds & set(error_span_kinds), f"no failed chat span of {error_span_kinds}: {kinds}"


def _result_texts(result: RunResult) -> Iterator[str]:
    for node in nodes(result):
        if node.output_json is not None:  # a typed answer: its JSON holds every string of it
            yield node.output_json
        elif isinstance(node.output, str):
            yield node.output
        if node.error:
            yield node.error
        for m in node.messages:
            for b in m.content:
                yield repr(b)


def assert_no_canary(
    result: RunResult,
    events: Sequence[Any],
    spans: Sequence[ReadableSpan],
    caplog: pytest.LogCaptureFixture,
) -> None:
    for where, texts in (
        ("a transcript, output or error", _result_texts(result)),
        ("a run event", (repr(e) for e in events)),
        ("a span", (t for s in spans for t in _span_texts(s))),
        ("a log line", (r.getMessage() for r in caplog.records)),
    ):
        for t in texts:
            assert CANARY not in t, f"the canary leaked into {where}: {one_line(t, 300)}"
    assert CANARY not in caplog.text


# ---------------------------------------------------------------------------------------------
# the document


GUARANTEES = Path(__file__).with_name("guarantees.md")
"""The guarantees checked outside the matrix (signals, terminals, trace files, ...), each naming
the test file that checks it; appended to the page as written."""


def write_matrix(path: Path) -> None:
    """Write docs/faults.md from :data:`MATRIX`."""
    lines = [
        "# Faults and what they do to a run",
        "",
        "<!-- Generated by the fault-injection suite (tests/faults/): do not edit by hand.",
        "     Regenerate with: ORCHESTRATOR_WRITE_FAULT_MATRIX=1 python -m pytest tests/faults -->",
        "",
        "Every fault below is injected into the agent named `faulty`, placed at depth 0 (it is the",
        "root), depth 1 (`root -> faulty`) or depth 2 (`root -> mid -> faulty`). Each relay above it",
        "spawns the next agent and a quick `helper` sibling in parallel, then answers with what the",
        "spawns returned. For every case the suite asserts:",
        "",
        "- the run ends within its limits (timeout, turns, depth, children, agents, token budget)",
        "  plus a small slack, with the status documented here;",
        "- every `tool_use` has exactly one `tool_result`, in the next message, at every node;",
        "- no trio task survives the run; every worker thread still running after it is counted",
        "  in `handle.abandoned_threads`, and the thread count returns to its baseline once the",
        "  abandoned threads finish;",
        "- every span is ended; agent spans carry the outcome (ERROR status for every non-completed,",
        "  non-cancelled agent), the `execute_tool` span of every failed call has ERROR status;",
        "- no exception escapes `run()`;",
        "- a denied or declined tool's handler is never called;",
        "- the value of `ANTHROPIC_API_KEY` (a canary) appears in no tool result, error message,",
        "  transcript, run event, span attribute, trace file or log line;",
        "- memory stays bounded under the spawn bomb.",
        "",
        "Columns: **faulty** is the status of the faulty agent, **run** the status of the root (what",
        "`run()` returns), **parent saw** the `tool_result` the faulty agent's parent got for its",
        "spawn (at depth 0: what the caller got), **documented** the outcome the suite asserts,",
        "**checks** whether every guarantee above held. A row marked ✗ is a bug to fix: the",
        "run broke a guarantee (the first failed check is quoted) or ended otherwise than",
        "documented. Property-test rows (cancellation) merge all their examples.",
        "",
    ]
    faults = sorted(FAULTS, key=lambda f: FAULTS[f][0])
    faults += sorted({f for f, _ in MATRIX} - set(FAULTS))
    lines += ["| fault | depth | faulty | run | parent saw | documented (faulty / run) | checks |"]
    lines += ["| --- | --- | --- | --- | --- | --- | --- |"]
    for fault in faults:
        for depth in DEPTHS:
            row = MATRIX.get((fault, depth))
            if row is None:
                continue
            mark = "" if row.ok else " ✗"
            runs = f" ({row.runs} runs)" if row.runs > 1 else ""
            checks = "all hold" if row.ok else f"✗ {row.notes or 'outcome differs'}"
            lines.append(
                f"| {fault}{mark} | {depth} | {row.faulty} | {row.root}{runs} | "
                f"{row.parent_saw} | {row.expected} | {checks} |"
            )
    lines += ["", "## The faults", ""]
    for fault in faults:
        lines.append(f"- **{fault}**: {FAULTS.get(fault, (0, ''))[1]}")
    lines += ["", GUARANTEES.read_text().strip(), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
