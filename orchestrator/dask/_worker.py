"""The task a Dask worker runs for one remote child: its whole subtree, in a trio run of its own.

:func:`run_child` is what :class:`~orchestrator.dask.DaskRunner` submits. It takes two
pickles (:mod:`._wire`): the run's part (:class:`RunPart`: the run's definitions, the same
bytes for every child of a run, so a worker unpickles them once) and the child's
(:class:`ChildPart`: its :class:`~orchestrator.core.runner.ChildSpec`, the model and policy it
inherits, where its tools come from, the names of its Dask events), and runs the child with
:func:`~orchestrator.core.host.host_child` (nothing else of core): its own children run in
process here.

A child never runs twice: the task sets a Dask event named for the child before it starts, and
a task that finds it set (the scheduler re-ran it after its worker died) refuses to run it
again. A second Dask event is the parent's way to stop it: a thread of the run waits on it, and
when it is set the run is cancelled (within ~25 ms: a running Dask task cannot be stopped by
``future.cancel()``).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import OrderedDict
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from .. import Policy, RunResult, __version__
from ..core.host import ToolRef, host_child
from ..core.runner import ChildSpec, RunDefinitions, as_json
from ..models import Model
from ._spans import SpanCollector
from ._wire import loads

__all__ = ["AskParent", "ChildPart", "RemoteResult", "RunPart", "run_child"]

LOST = "lost"
"""``RemoteResult.refused`` of a child whose first run was lost with its worker."""


@dataclass(frozen=True, slots=True)
class RunPart:
    """What every remote child of one run shares."""

    version: str
    definitions: RunDefinitions
    events_queue: str | None
    """The Dask queue remote agents' events go to (``None``: nobody reads the run's events)."""


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
    result = trio.run(
        partial(
            host_child,
            run.definitions,
            child.spec,
            model=child.model,
            policy=child.policy,
            tools=child.tools,
            agents_room=child.agents_room,
            tracer_provider=collector.provider if collector is not None else None,
            forward=None if queue is None else partial(_send_events, queue),
            stop=partial(_stopped, stop),
        )
    )
    spans = collector.encode() if collector is not None else ""
    return RemoteResult(as_json(result), spans, None, here, time.perf_counter() - started_at)


async def _send_events(queue: Any, batch: list[Any]) -> None:
    """A batch of the subtree's events to the parent's queue."""
    await trio.to_thread.run_sync(queue.put, batch)


async def _stopped(stop: Any) -> None:
    """Return when the parent sets the child's stop event."""
    while True:
        # the wait returns as soon as the event is set; its timeout only renews it (one
        # scheduler call per child every few seconds)
        if await trio.to_thread.run_sync(stop.wait, 2.0, abandon_on_cancel=True):
            return
