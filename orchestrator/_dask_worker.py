"""The task a Dask worker runs for one remote child: its whole subtree, in a trio run of its own.

:func:`run_child` is what :class:`~orchestrator.dask.DaskRunner` submits. It takes two
pickles (:mod:`._dask_wire`): the run's part (:class:`RunPart`: the tree's definitions, the
run's limits, policy, default model and deps; the same bytes for every child of a run, so a
worker unpickles them once) and the child's (:class:`ChildPart`: its :class:`ChildSpec`, the
model and policy it inherits, where its tools come from, the names of its Dask events). It
builds the child's state as the in-process runner would under its parent, but on a ledger of
its own sized to the lease, with the run's deadline on this machine's clock, and runs it to its
end with :func:`~orchestrator.core.loop.run_agent`; its own children run in process here.

A child never runs twice: the task sets a Dask event named for the child before it starts, and
a task that finds it set (the scheduler re-ran it after its worker died) refuses to run it
again. A second Dask event is the parent's way to stop it: a thread of the run waits on it, and
when it is set the run is cancelled (within ~25 ms: a running Dask task cannot be stopped by
``future.cancel()``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
import uuid
from collections import OrderedDict
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from opentelemetry import context as otel_context
from opentelemetry import propagate

from . import __version__
from ._dask_spans import SpanCollector
from ._dask_wire import loads
from .core.agent import Agent, AgentTree
from .core.compaction import ContextPolicy
from .core.events import AgentFinished, AgentStarted, EventSink
from .core.ledger import Ledger
from .core.limits import Limits, Slots, tree_wide_limits
from .core.loop import run_agent
from .core.messages import Message, well_formed
from .core.policy import Policy
from .core.redact import RUN_SECRETS, secret_values
from .core.result import RunResult
from .core.runner import ChildSpec
from .core.spawn import DEFAULT_CONTEXT, add_spawn_tool
from .core.state import AgentNode, Limiters, Quota, RunState, make_runtime
from .core.tools import Tool
from .models.base import ClientPool, Model

__all__ = ["AskParent", "ChildPart", "RemoteResult", "RunPart", "as_json", "run_child"]

LOST = "lost"
"""``RemoteResult.refused`` of a child whose first run was lost with its worker."""


@dataclass(frozen=True, slots=True)
class RunPart:
    """What every remote child of one run shares."""

    version: str
    run_id: str
    root: Agent
    run_limits: Limits
    run_policy: Policy | None
    default_model: Model | None
    deps: Any
    context: ContextPolicy | None
    capture: bool
    tool_threads: int
    events_queue: str | None
    """The Dask queue remote agents' events go to (``None``: nobody reads the run's events)."""


ToolRef = tuple[str, int] | Tool
"""Where a child's tool comes from: (agent, index) in the definitions' ``tools``, or itself."""


@dataclass(frozen=True, slots=True)
class ChildPart:
    """One remote child: its spec and what it inherits from its parent."""

    spec: ChildSpec
    model: Model
    policy: Policy
    tools: tuple[ToolRef, ...]
    agents_room: int | None
    """How many more agents its subtree may start (``max_agents``), ``None``: no limit."""
    stop_event: str
    started_event: str
    secede: bool


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """What comes back: the child's result tree and its spans, or why it did not run."""

    result: RunResult | None
    spans: str
    refused: str | None
    worker: str
    seconds: float


_CLIENT: Any = None
"""This worker process's Dask client (set by each task: the same one for all)."""


class AskParent:
    """An approver that asks the parent's: the call goes back to the parent process through the
    run's approvals queue, and its verdict comes back in a Dask variable. It stands in for every
    approver of a remote child's policies (approvers never cross the wire: one holding a
    terminal could not, and the person to ask is where the run was started)."""

    __slots__ = ("index", "queue")

    def __init__(self, queue: str, index: int) -> None:
        self.queue = queue
        self.index = index

    def __reduce__(self) -> tuple[Any, ...]:
        return AskParent, (self.queue, self.index)

    async def __call__(self, call: Any) -> bool:
        import importlib

        distributed: Any = importlib.import_module("distributed")
        client = _CLIENT
        answer = f"orchestrator-answer-{uuid.uuid4().hex}"
        queue = distributed.Queue(self.queue, client=client)
        await trio.to_thread.run_sync(queue.put, (self.index, answer, call))
        variable = distributed.Variable(answer, client=client)
        while True:
            try:
                verdict = await trio.to_thread.run_sync(
                    partial(variable.get, timeout=0.5), abandon_on_cancel=True
                )
            except Exception:  # not answered yet (the wait is bounded by the run's deadline)
                continue
            with suppress(Exception):
                await trio.to_thread.run_sync(variable.delete)
            return verdict is True


_RUNS: OrderedDict[bytes, RunPart] = OrderedDict()
_RUNS_KEPT = 8


def _run_part(blob: bytes) -> RunPart:
    """The run's part, unpickled once per worker process (the last few runs are kept)."""
    digest = hashlib.sha256(blob).digest()
    part = _RUNS.get(digest)
    if part is None:
        part = loads(blob)
        assert isinstance(part, RunPart)
        _RUNS[digest] = part
        while len(_RUNS) > _RUNS_KEPT:
            _RUNS.popitem(last=False)
    else:
        _RUNS.move_to_end(digest)
    return part


def worker_version() -> str:
    """The orchestrator version a worker runs (asked once per run by the parent)."""
    return __version__


def run_child(run_blob: bytes, child_blob: bytes) -> RemoteResult:
    """Run one remote child to its end (the Dask task)."""
    import importlib

    distributed: Any = importlib.import_module("distributed")  # untyped: as plain objects
    started_at = time.perf_counter()
    worker = distributed.get_worker()
    here = str(worker.address)
    run = _run_part(run_blob)
    if run.version != __version__:
        return RemoteResult(
            None,
            "",
            f"the worker at {here} runs orchestrator {__version__}, the parent "
            f"{run.version}: install the same version on both",
            here,
            0.0,
        )
    child = loads(child_blob)
    assert isinstance(child, ChildPart)
    client = distributed.get_client()
    global _CLIENT
    _CLIENT = client
    started = distributed.Event(child.started_event, client=client)
    if started.is_set():  # the scheduler re-ran it: its first run was lost with a worker
        return RemoteResult(None, "", LOST, here, 0.0)
    started.set()
    stop = distributed.Event(child.stop_event, client=client)
    queue = distributed.Queue(run.events_queue, client=client) if run.events_queue else None
    if child.secede:  # a child waits on model I/O: its thread is not one CPU work needs
        distributed.secede()
    collector = SpanCollector() if child.spec.trace_context else None
    result = trio.run(_run_subtree, run, child, stop, queue, collector)
    spans = collector.encode() if collector is not None else ""
    return RemoteResult(as_json(result), spans, None, here, time.perf_counter() - started_at)


def as_json(result: RunResult) -> RunResult:
    """``result`` with every typed answer as its JSON only (``output`` ``None``): a value crosses
    the wire, and goes into a journal, as JSON; the parent validates it again with its own
    definition (:func:`~orchestrator.dask.DaskRunner`), so no instance of a class defined in a
    tree file is ever unpickled by the parent."""
    return dataclasses.replace(
        result,
        output=None if result.output_json is not None else result.output,
        children=[as_json(c) for c in result.children],
    )


async def _run_subtree(
    part: RunPart, child: ChildPart, stop: Any, queue: Any, collector: SpanCollector | None
) -> RunResult:
    if collector is not None:  # the spawn span is the parent of everything here
        otel_context.attach(propagate.extract(dict(child.spec.trace_context)))
    async with AsyncExitStack() as stack:
        from .tracing import spans

        tree = AgentTree(part.root, run_limits=part.run_limits, run_policy=part.run_policy)
        state = RunState(
            run_id=part.run_id,
            tree=tree,
            default_model=part.default_model,
            run_limits=part.run_limits,
            run_policy=part.run_policy,
            deps=part.deps,
            events=EventSink(4096 if queue is not None else 0),
            tracer=spans.get_tracer(collector.provider) if collector is not None else None,
            clients=ClientPool(stack),
            thread_limiter=trio.CapacityLimiter(part.tool_threads),
            context=part.context,
            capture=part.capture,
            secrets=secret_values(),
        )
        state.models = tree.models()
        node = _node(state, part, child)
        RUN_SECRETS.set(state.secrets)
        async with trio.open_nursery() as forwarding:
            if queue is not None:
                forwarding.start_soon(_forward_events, state.events, queue, spec_path(child))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_stop, stop, state)
                with state.scope:
                    state.scope.deadline = state.deadline
                    await run_agent(node, state)
                nursery.cancel_scope.cancel()
            state.events.close()  # the forwarder sends what is left, then ends
    return node.to_result(part.run_id)


def spec_path(child: ChildPart) -> str:
    return child.spec.path


async def _forward_events(events: EventSink, queue: Any, top: str) -> None:
    """Send the subtree's events to the parent's queue, in batches, as they come (the child's
    own start and end the parent reports itself); the last batch before the task returns."""
    receive = events.receive_channel
    while True:
        try:
            batch = [await receive.receive()]
        except trio.EndOfChannel:
            return
        while True:
            try:
                batch.append(receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        batch = [
            e for e in batch if not (isinstance(e, AgentStarted | AgentFinished) and e.path == top)
        ]
        if batch:
            with suppress(Exception):  # events are best effort: the result is what counts
                await trio.to_thread.run_sync(queue.put, batch)


async def _watch_stop(stop: Any, state: RunState) -> None:
    """Cancel the run when the parent sets the child's stop event."""
    while True:
        # the wait returns as soon as the event is set; its timeout only renews it (one
        # scheduler call per child every few seconds)
        if await trio.to_thread.run_sync(stop.wait, 2.0, abandon_on_cancel=True):
            state.cancel_requested = True
            state.scope.cancel()
            return


def _node(state: RunState, part: RunPart, child: ChildPart) -> AgentNode:
    """The child's node, as :func:`~orchestrator.core.spawn.build_child` makes it under its
    parent, with the lease as its budget and no parent here."""
    spec = child.spec
    agent = state.tree.by_name[spec.agent]
    now = trio.current_time()
    left = spec.deadline - time.time()
    state.deadline = now + left if spec.deadline < math.inf else math.inf
    tree_wide = tree_wide_limits(part.run_limits, part.root.limits)
    own = agent.limits or Limits()
    chain = [Slots(tree_wide.max_concurrency or 16)]
    if own.max_concurrency is not None:
        chain.insert(0, Slots(own.max_concurrency))
    own_deadline = now + own.timeout if own.timeout is not None else math.inf
    lease = spec.lease
    tools: dict[str, Tool] = {}
    for ref in child.tools:
        t = ref if isinstance(ref, Tool) else state.tree.by_name[ref[0]].tools[ref[1]]  # type: ignore[index]
        tools[t.name] = t
    node = AgentNode(
        agent=agent,
        path=spec.path,
        depth=spec.depth,
        model=child.model if agent.model is None else state.models[agent.name],
        limits=spec.limits,
        policy=child.policy,
        tools=tools,
        ledger=Ledger(
            int(lease.tokens) if lease.tokens < math.inf else None,
            lease.cost_usd if lease.cost_usd < math.inf else None,
        ),
        limiters=Limiters(tuple(chain)),
        agent_quota=Quota(None if child.agents_room is None else child.agents_room + 1, used=1),
        deadline=min(state.deadline, own_deadline),
        own_deadline=own_deadline,
        context=state.context or agent.context or DEFAULT_CONTEXT,
        task=spec.task,
        runtime=make_runtime(spec.limits, state),
    )
    add_spawn_tool(node, state)
    node.append(Message.user(well_formed(spec.task)))
    return node
