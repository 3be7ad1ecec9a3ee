"""Children on a Dask cluster: :class:`DaskRunner` (optional extra ``orchestrator[dask]``).

``run(agent, prompt, runner=DaskRunner("tcp://scheduler:8786"))`` runs every child at
``depth`` (1: the root's children) as a task on a Dask distributed cluster, with its whole
subtree, in a trio run of its own on the worker (:mod:`._dask_worker`). The parent stays here
and keeps the tree's books:

- **budget**: a remote child runs on a lease, reserved on its parent's ledger when it starts
  (the room left, shared evenly among the spawns of that turn) and settled to what its subtree
  really spent when it ends; a spent lease ends it ``budget_exceeded`` there;
- **deadline and cancellation**: the run's deadline travels as wall-clock time; cancelling the
  run (or the parent) sets the child's Dask event, which its worker waits on: it ends
  ``cancelled`` within a second, and its cut result tree comes back;
- **trace**: the worker records the child's spans in memory, under the spawn span's W3C
  context, and they come back with the result to be ended here through the run's tracer
  provider (:mod:`._dask_spans`): one trace, whether or not the workers have an exporter;
- **faults**: a child whose worker died comes back as an ``error`` result ("worker lost"),
  never run twice (the task sets a Dask event before it runs; a re-run finds it set);
- **journal**: a journaled run records each remote child's whole result tree as it ends, so a
  resume replays it; a remote child in flight when the run stopped is not run again on resume
  (an ``error`` result saying its outcome is unknown);
- **the wire** (:mod:`._dask_wire`): definitions, models, tools and ``deps`` travel by
  cloudpickle (a tree file the CLI loaded by value); one that cannot is refused before the
  first model call, named; workers running another orchestrator version are refused.

``DaskRunner("local:N")`` starts a LocalCluster of N worker processes on 127.0.0.1 for the
run and closes it at the end. See docs/distributed.md.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import logging
import math
import pickle
import sys
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

from . import __version__
from ._dask_spans import emit
from ._dask_wire import by_value, check_picklable, dumps
from ._dask_worker import (
    LOST,
    AskParent,
    ChildPart,
    RemoteResult,
    RunPart,
    as_json,
    run_child,
    worker_version,
)
from .core.cancellation import is_cancellation
from .core.errors import ConfigurationError
from .core.events import AgentFinished, AgentStarted
from .core.ledger import BudgetExceeded, Calibration, Reservation
from .core.messages import ToolResultBlock, Usage
from .core.policy import Policy, ask_approver
from .core.result import RunResult, RunStatus
from .core.runner import IN_PROCESS, BudgetLease, ChildOutcome, ChildSpec, ParentSide
from .core.spawn import SPAWN_TOOL
from .core.tools import describe_exception

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

    from .core.agent import AgentTree
    from .core.state import AgentNode, Quota, RunState
    from .core.tools import Tool

__all__ = ["DaskRunner", "parse_address"]

_logger = logging.getLogger(__name__)

JOURNAL_KEY = "dask:subtree"
"""The journal's call id for a remote child's result tree (under the child's path, turn 0)."""
WORKER_LOST = "worker lost"
_STOP_PREFIX = "orchestrator-stop-"
_USER_MODULES = "_orchestrator_user_"
"""How the CLI names the module of a tree file it loaded (sent by value to workers)."""


def parse_address(value: str) -> tuple[str, int]:
    """``("local", N)`` for ``local:N``, else ``(address, 0)`` for ``tcp://`` / ``tls://``
    (and the other Dask schemes); a :class:`ConfigurationError` in one line otherwise."""
    text = value.strip()
    if text.startswith("local:"):
        count = text[len("local:") :]
        if not count.isdigit() or int(count) < 1:
            raise ConfigurationError(
                f"--dask {value!r}: local:N needs a number of worker processes >= 1"
            )
        return "local", int(count)
    scheme, sep, rest = text.partition("://")
    if not sep or not scheme or not rest:
        raise ConfigurationError(
            f"--dask {value!r}: give a scheduler address with its scheme "
            "(tcp://HOST:PORT, tls://HOST:PORT) or local:N"
        )
    if scheme not in ("tcp", "tls", "inproc", "ucx", "ws", "wss"):
        raise ConfigurationError(f"--dask {value!r}: unknown scheme {scheme!r} (tcp or tls)")
    return text, 0


@dataclass(eq=False)
class _Session:
    """One run's connection: the client, the run's pickled part, the books of its leases."""

    client: Any
    run_blob: bytes
    tool_index: dict[int, tuple[str, int]]
    leased: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    finished_events: list[str] = field(default_factory=list)
    asking: _Approvals | None = None
    limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(64))


class DaskRunner:
    """Runs the children at ``depth`` (and their subtrees) as tasks on a Dask cluster.

    ``address_or_client``: a scheduler address (``tcp://HOST:PORT``, ``tls://HOST:PORT``), a
    ``distributed.Client`` (left open: it is the caller's), or ``local:N`` for a LocalCluster of
    N worker processes on 127.0.0.1 started for the run. An address is connected when the run
    opens (before its first model call) and closed when it ends. ``security``: a
    ``distributed.security.Security`` for ``tls://``. ``by_value``: modules whose code workers
    do not have (sent by value with each run; the CLI's tree file always is).
    ``connect_timeout``: seconds to reach the scheduler. ``secede``: a remote child leaves its
    Dask worker thread at once (it waits on model I/O; CPU tasks need the thread).
    ``cancel_grace``: seconds a cancelled remote child has to send back its cut result.
    """

    def __init__(
        self,
        address_or_client: str | Client,
        *,
        depth: int = 1,
        security: Security | None = None,
        by_value: Iterable[ModuleType | str] = (),
        connect_timeout: float = 10.0,
        secede: bool = True,
        cancel_grace: float = 3.0,
        worker_threads: int = 2,
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ConfigurationError(f"DaskRunner depth must be an integer >= 1, got {depth!r}")
        if isinstance(address_or_client, str):
            parse_address(address_or_client)  # a bad address fails here, in one line
        elif not hasattr(address_or_client, "submit"):
            raise ConfigurationError(
                "DaskRunner needs a scheduler address, 'local:N' or a distributed.Client, "
                f"got {type(address_or_client).__name__}"
            )
        self.target = address_or_client
        self.depth = depth
        self.security = security
        self.by_value = tuple(by_value)
        self.connect_timeout = connect_timeout
        self.secede = secede
        self.cancel_grace = cancel_grace
        self.worker_threads = worker_threads
        self._sessions: dict[int, _Session] = {}

    def __repr__(self) -> str:
        target = self.target if isinstance(self.target, str) else type(self.target).__name__
        return f"DaskRunner({target!r}, depth={self.depth})"

    # -- the run's session ---------------------------------------------------------------

    @asynccontextmanager
    async def session(self, run: RunState) -> AsyncIterator[None]:
        """Check that the run can cross the wire, connect, check the workers' version."""
        queue = f"orchestrator-events-{uuid.uuid4().hex}" if run.events.enabled else None
        asking = _Approvals(f"orchestrator-approvals-{uuid.uuid4().hex}")
        blob, index = self._run_part(run, queue, asking)
        client, cluster = await trio.to_thread.run_sync(self._connect)
        session = _Session(client, blob, index, asking=asking)
        try:
            if cluster is None or not isinstance(self.target, str):
                versions = await trio.to_thread.run_sync(client.run, worker_version)
                skewed = {w: v for w, v in versions.items() if v != __version__}
                if skewed:
                    where, version = next(iter(sorted(skewed.items())))
                    raise ConfigurationError(
                        f"the Dask worker at {where} runs orchestrator {version}, this process "
                        f"{__version__}: install the same version on every worker"
                    )
            self._sessions[id(run)] = session
            reading = trio.CancelScope()
            readers: list[tuple[str, trio.Event]] = []
            # system tasks: the session is left inside open_run's closing scope, where a
            # nursery of its own would not nest
            if queue is not None:  # remote agents' events into the run's stream
                readers.append((queue, trio.Event()))
                trio.lowlevel.spawn_system_task(
                    _read_events, client, queue, run, reading, readers[-1][1]
                )
            if asking.approvers:  # remote agents' approvals, asked here
                readers.append((asking.queue, trio.Event()))
                trio.lowlevel.spawn_system_task(
                    _answer_approvals, client, asking, run, reading, readers[-1][1]
                )
            try:
                yield
            finally:
                with trio.CancelScope(shield=True) as closing:
                    # each reader's queue ends with a mark, so that no wait is left open on
                    # the scheduler when it closes (it would log each as an error)
                    closing.deadline = trio.current_time() + 3.0
                    for name, _ in readers:
                        await trio.to_thread.run_sync(_end_queue, client, name)
                    for _, done in readers:
                        await done.wait()
                reading.cancel()
        finally:
            self._sessions.pop(id(run), None)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, session, cluster)

    def _run_part(
        self, run: RunState, events_queue: str | None, asking: _Approvals
    ) -> tuple[bytes, dict[int, tuple[str, int]]]:
        by_value([*self.by_value, *(m for m in sys.modules if m.startswith(_USER_MODULES))])
        named: list[tuple[str, Any]] = []
        index: dict[int, tuple[str, int]] = {}
        for agent in run.tree.by_name.values():
            if agent.model is not None and not isinstance(agent.model, str):
                named.append((f"the model of agent {agent.name!r}", agent.model))
            for i, t in enumerate(agent.tools or ()):
                named.append((f"tool {t.name!r} of agent {agent.name!r}", t))
                index.setdefault(id(t), (agent.name, i))
        if run.default_model is not None:
            named.append(("the run's model", run.default_model))
        if run.deps is not None:
            named.append(("the run's deps", run.deps))
        check_picklable(named)
        root = run.tree.root
        if any(a.policy is not None and a.policy.approver for a in run.tree.by_name.values()):
            root = root.map_tree(
                lambda a: a if a.policy is None else a.replace(policy=asking.proxy(a.policy))
            )
        part = RunPart(
            __version__,
            run.run_id,
            root,
            run.run_limits,
            None if run.run_policy is None else asking.proxy(run.run_policy),
            run.default_model,
            run.deps,
            run.context,
            run.capture,
            int(run.thread_limiter.total_tokens),
            events_queue,
        )
        check_picklable([("the tree", part)])
        return dumps(part), index

    def _connect(self) -> tuple[Any, Any]:
        """(client, cluster we started or None), blocking: run in a thread."""
        try:
            distributed: Any = importlib.import_module("distributed")  # untyped
            Client, LocalCluster = distributed.Client, distributed.LocalCluster
        except ImportError:
            raise ConfigurationError(
                "DaskRunner needs Dask: pip install 'orchestrator[dask]'"
            ) from None
        if not isinstance(self.target, str):
            return self.target, None
        address, workers = parse_address(self.target)
        cluster = None
        try:
            if address == "local":
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=self.worker_threads,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                )
                return Client(cluster, set_as_default=False), cluster
            return Client(
                address,
                timeout=self.connect_timeout,
                security=self.security,
                set_as_default=False,
            ), None
        except Exception as exc:
            if cluster is not None:
                with suppress(Exception):
                    cluster.close()
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigurationError(
                f"cannot connect to the Dask scheduler at {self.target}: {reason}"
            ) from None

    def _close(self, session: _Session, cluster: Any) -> None:
        client = session.client
        names = session.finished_events
        if names:  # the children's events, forgotten by the scheduler in one call
            with suppress(Exception):
                client.run_on_scheduler(_forget_events, names)
        if isinstance(self.target, str):
            with suppress(Exception):
                client.close()
            if cluster is not None:
                with suppress(Exception):
                    cluster.close()

    # -- one child -----------------------------------------------------------------------

    async def run(self, spec: ChildSpec, parent: ParentSide) -> ChildOutcome:
        """Run the child ``spec`` describes on the cluster (children above ``depth`` run here)."""
        if spec.depth < self.depth:
            return await IN_PROCESS.run(spec, parent)
        session = self._sessions.get(id(parent.run))
        if session is None:  # only open_run enters the session
            raise RuntimeError("a DaskRunner runs children only in a run it was given to")
        run = parent.run
        child = parent.start(spec)
        child.started_at = trio.current_time()
        if run.events.enabled:
            run.events.emit(
                AgentStarted(spec.path, spec.agent, spec.depth, parent.node.path, spec.task)
            )
        try:
            await self._run_remote(session, spec, parent, child)
        except BaseException as exc:
            if child.status is None and is_cancellation(exc):  # cut before it was sent
                child.finish(*run.cut_status(child))
            raise
        finally:
            if child.status is None:  # an orchestrator bug propagating: a valid node still
                child.finish(RunStatus.ERROR, "internal error")
            if run.events.enabled:
                run.events.emit(
                    AgentFinished(
                        child.path,
                        child.agent.name,
                        child.status or RunStatus.ERROR,
                        child.error,
                        child.subtree_usage(),
                        child.turns,
                    )
                )
        return parent.outcome(child)

    async def _run_remote(
        self, session: _Session, spec: ChildSpec, parent: ParentSide, child: AgentNode
    ) -> None:
        run = parent.run
        journal = run.journal
        if journal is not None:
            recorded = await run.journaled(journal.lookup_call(spec.path, 0, JOURNAL_KEY))
            if recorded is not None:
                if recorded.result is None:  # in flight when the run stopped: not run twice
                    child.finish(
                        RunStatus.ERROR,
                        "the run stopped while this child ran on a Dask worker: it is not "
                        "run again, and its outcome is unknown",
                    )
                else:
                    result = pickle.loads(base64.b64decode(recorded.result.content))
                    child.ledger.spend(result.usage)  # the budgets go on from what it spent
                    _adopt(child, result, run.tree)
                return
        try:
            reservation, lease = await self._lease(session, parent, child, spec)
        except BudgetExceeded as exc:
            child.finish(RunStatus.BUDGET_EXCEEDED, str(exc))
            return
        spec = dataclasses.replace(spec, lease=lease)
        names = (
            f"{_STOP_PREFIX}{uuid.uuid4().hex}",
            f"orchestrator-started-{uuid.uuid4().hex}",
        )
        try:
            blob = dumps(
                ChildPart(
                    spec,
                    child.model,
                    session.asking.proxy(child.policy) if session.asking else child.policy,
                    self._tool_refs(session, child.tools),
                    _agents_room(child),
                    *names,
                    self.secede,
                )
            )
        except Exception as exc:
            _release(child, reservation, Usage())
            reason = " ".join(str(exc).split()) or type(exc).__name__
            child.finish(RunStatus.ERROR, f"cannot be sent to a Dask worker: {reason}")
            return
        if journal is not None:
            await run.journaled(journal.tool_started(spec.path, 0, JOURNAL_KEY, False))
        try:
            await self._submit(session, names, blob, parent, child, reservation)
        finally:  # its tree on record (a cut one too, shielded): a resume replays it
            if journal is not None and child.remote_result is not None:
                recorded_tree = pickle.dumps(as_json(child.remote_result))  # values as JSON
                content = base64.b64encode(recorded_tree).decode("ascii")
                with trio.CancelScope(shield=True):
                    await run.journaled(
                        journal.record_result(
                            spec.path, 0, JOURNAL_KEY, ToolResultBlock(JOURNAL_KEY, content)
                        )
                    )

    async def _submit(
        self,
        session: _Session,
        part_names: tuple[str, str],
        blob: bytes,
        parent: ParentSide,
        child: AgentNode,
        reservation: Reservation | None,
    ) -> RemoteResult | None:
        """Submit the task and wait for it; cancelled, stop the child and take its cut tree."""
        client = session.client
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def on_done(_: Any) -> None:  # in a thread of the client's
            with suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future = client.submit(
            run_child,
            session.run_blob,
            blob,
            key=f"orchestrator-child-{uuid.uuid4().hex}",
            pure=False,
            retries=0,
        )
        future.add_done_callback(on_done)
        try:
            await done.wait()
        except BaseException as exc:
            if not is_cancellation(exc):
                raise
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + self.cancel_grace
                await trio.to_thread.run_sync(_set_event, client, part_names[0])
                await done.wait()
            remote = None
            if done.is_set():
                with trio.CancelScope(shield=True):
                    remote = await self._collect(
                        session, future, part_names, parent, child, reservation
                    )
                if remote is not None and child.remote_result is not None:
                    status, reason = parent.run.cut_status(child)
                    _recut(child.remote_result, status, reason)
                    _adopt(child, child.remote_result, parent.run.tree)
            else:
                with suppress(Exception):
                    future.cancel()
                _release(child, reservation, None)
            if child.status is None:
                child.finish(*parent.run.cut_status(child))
            raise
        return await self._collect(session, future, part_names, parent, child, reservation)

    async def _collect(
        self,
        session: _Session,
        future: Any,
        names: tuple[str, str],
        parent: ParentSide,
        child: AgentNode,
        reservation: Reservation | None,
    ) -> RemoteResult | None:
        """The finished task's result adopted by the child's node, its usage settled, its spans
        ended here; a lost worker or a failed task as an ``error`` result."""
        session.finished_events.extend(names)
        remote: RemoteResult | None = None
        problem = None
        try:
            remote = await trio.to_thread.run_sync(future.result, limiter=session.limiter)
        except Exception as exc:
            if type(exc).__name__ == "KilledWorker" or future.status in ("lost", "cancelled"):
                problem = f"{WORKER_LOST}: its Dask worker died while it ran; it is not run again"
            else:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                problem = f"its Dask task failed: {type(exc).__name__}: {reason}"
        if remote is not None and remote.refused is not None:
            problem = (
                f"{WORKER_LOST}: its Dask worker died while it ran; it is not run again"
                if remote.refused == LOST
                else remote.refused
            )
        if problem is not None or remote is None or remote.result is None:
            # what a lost child spent is unknown (its books went with its worker): the lease
            # goes back, or one lost child would take the whole budget with it
            _release(child, reservation, Usage())
            child.finish(RunStatus.ERROR, problem or "its Dask task returned nothing")
            return None
        _release(child, reservation, remote.result.usage)
        emit(remote.spans, parent.run.tracer)
        _adopt(child, remote.result, parent.run.tree)
        return remote

    async def _lease(
        self, session: _Session, parent: ParentSide, child: AgentNode, spec: ChildSpec
    ) -> tuple[Reservation | None, BudgetLease]:
        """Reserve the child's lease on its ledger: the room left, shared among this turn's
        spawns that have not taken theirs (siblings run at once and must not overshoot
        together); what it does not spend goes back when it ends."""
        tokens, cost = child.ledger.room()
        if tokens == math.inf and cost == math.inf:
            return None, BudgetLease()
        last = parent.node.messages[-1] if parent.node.messages else None
        spawns = sum(1 for c in last.tool_uses if c.name == SPAWN_TOOL) if last else 1
        taken = session.leased.setdefault((id(parent.node), spec.turn), set())
        share = max(1, spawns - len(taken))
        taken.add(spec.position)
        lease_tokens = math.floor(tokens / share) if tokens < math.inf else math.inf
        lease_cost = cost / share if cost < math.inf else math.inf
        if lease_tokens < 1 or lease_cost <= 0:
            raise BudgetExceeded(
                "budget exhausted: no room left to lease to a child on a Dask worker"
            )
        price = None if lease_cost == math.inf else (lambda _: lease_cost)
        r = Reservation(
            0, int(lease_tokens) if lease_tokens < math.inf else 0, Calibration(), False, price
        )
        if not child.ledger.try_reserve(r):
            await child.ledger.reserve(r)
        return r, BudgetLease(lease_tokens, lease_cost)

    def _tool_refs(self, session: _Session, tools: dict[str, Tool]) -> tuple[Any, ...]:
        return tuple(
            session.tool_index.get(id(t), t) for name, t in tools.items() if name != SPAWN_TOOL
        )


class _Approvals:
    """The approvers of one run, each replaced by an :class:`AskParent` in what is sent, and
    the queue their remote calls come back on."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.approvers: list[Any] = []
        self._proxies: dict[int, AskParent] = {}

    def proxy(self, policy: Policy) -> Policy:
        """``policy`` with every approver (its layers' too) asking the parent instead."""
        return policy.with_approvers(self._one)

    def _one(self, approver: Any) -> Any:
        if approver is None or isinstance(approver, AskParent):
            return approver
        proxy = self._proxies.get(id(approver))
        if proxy is None:
            self.approvers.append(approver)
            proxy = self._proxies[id(approver)] = AskParent(self.queue, len(self.approvers) - 1)
        return proxy


async def _answer_approvals(
    client: Any, asking: _Approvals, run: RunState, scope: trio.CancelScope, done: trio.Event
) -> None:
    """Ask the run's approvers about remote agents' calls, one at a time (as for local ones),
    and send each verdict back (never raises: it is a system task)."""
    distributed: Any = importlib.import_module("distributed")
    with scope, _setting(done):
        try:
            queue = await trio.to_thread.run_sync(
                partial(distributed.Queue, asking.queue, client=client), abandon_on_cancel=True
            )
        except Exception:
            return
        while True:
            try:
                item = await trio.to_thread.run_sync(
                    partial(queue.get, timeout=0.5), abandon_on_cancel=True
                )
            except Exception:
                await trio.sleep(0.05)
                continue
            if item == _END:
                return
            index, answer, call = item
            try:
                verdict = await ask_approver(
                    asking.approvers[index], call, run.approvals, run.abandoned
                )
            except Exception as exc:  # fail closed, as an approver failing here would
                _logger.warning(
                    "the approver raised on a call to %r by %s: it was not run (%s)",
                    call.name,
                    call.agent_path,
                    describe_exception(exc),
                )
                verdict = False
            variable = distributed.Variable(answer, client=client)
            with suppress(Exception):
                await trio.to_thread.run_sync(variable.set, verdict is True)


@contextmanager
def _setting(done: trio.Event) -> Iterator[None]:
    try:
        yield
    finally:
        done.set()


def _agents_room(child: AgentNode) -> int | None:
    room: int | None = None
    quota: Quota | None = child.agent_quota
    while quota is not None:
        if quota.limit is not None:
            left = max(0, quota.limit - quota.used)
            room = left if room is None else min(room, left)
        quota = quota.parent
    return room


def _release(child: AgentNode, reservation: Reservation | None, usage: Usage | None) -> None:
    """Settle the lease: give back what was not spent (``None``: it all stays spent)."""
    if reservation is not None:
        child.ledger.settle(reservation, None if usage is None else Usage())
    if usage is not None:
        child.ledger.spend(usage)


def _adopt(child: AgentNode, result: RunResult, tree: AgentTree) -> None:
    """The remote result tree becomes the child's (its node stands in for it here), each
    typed answer in it validated again."""
    _validate_again(result, tree)
    child.remote_result = result
    child.replace_messages(list(result.messages))
    child.own_usage = result.own_usage
    child.status = result.status
    child.error = result.error
    child.output = result.output
    child.output_json = result.output_json  # what the parent's model reads
    child.turns = result.turns
    child.turn_log = list(result.turn_log)
    more = result.agents - 1  # its subtree's agents count against the run's max_agents
    if more > 0:
        child.agent_quota.give_back(-more)


def _validate_again(result: RunResult, tree: AgentTree) -> None:
    """Each typed answer of a remote tree (JSON on the wire) made a value here by this
    process's definition of its agent: the worker's check is not taken on trust, and the value
    is an instance of the class the parent program knows. One that does not validate ends that
    agent ``invalid_output``, the problems named."""
    for r in result.walk():
        if r.output_json is None:
            continue
        agent = tree.by_name.get(r.agent_name)
        spec = agent.output_spec if agent is not None else None
        if spec is None:  # not typed here (definitions always match): left as the JSON
            r.output = r.output_json
            continue
        raw = json.loads(r.output_json)
        value, problems = spec.check({"result": raw} if spec.wrapped else raw)
        if not problems:
            r.output = value
            continue
        shown = r.output_json if len(r.output_json) <= 1_000 else r.output_json[:1_000] + "…"
        r.status = RunStatus.INVALID_OUTPUT
        r.error = (
            "its answer from the Dask worker does not validate here: "
            f"{'; '.join(problems[:10])}; the answer: {shown}"
        )
        r.output, r.output_json = None, None


_STOPPED = "the run was cancelled"
"""The reason a remote agent records when its stop event cut it (set by the parent)."""


def _recut(result: RunResult, status: RunStatus, reason: str) -> None:
    """A tree cut by its stop event gets the reason its parent was cut for (the deadline, a
    fatal error, cancel()), as the same tree cut in process would."""
    for r in result.walk():
        if r.status is RunStatus.CANCELLED and r.error == _STOPPED:
            r.status, r.error = status, reason


_END = "orchestrator:end"
"""The last item of a run's queues (its readers stop there)."""


def _end_queue(client: Any, name: str) -> None:
    distributed: Any = importlib.import_module("distributed")
    with suppress(Exception):
        distributed.Queue(name, client=client).put(_END)


async def _read_events(
    client: Any, name: str, run: RunState, scope: trio.CancelScope, done: trio.Event
) -> None:
    """Hand the events remote agents send to the run's event sink, until the run ends (never
    raises: it is a system task)."""
    distributed: Any = importlib.import_module("distributed")
    with scope, _setting(done):
        try:
            queue = await trio.to_thread.run_sync(
                partial(distributed.Queue, name, client=client), abandon_on_cancel=True
            )
        except Exception:
            return
        while True:
            try:
                batch = await trio.to_thread.run_sync(
                    partial(queue.get, timeout=0.5), abandon_on_cancel=True
                )
            except Exception:  # nothing came within the timeout (or the queue failed)
                await trio.sleep(0.05)
                continue
            if batch == _END:
                return
            for event in batch:
                run.events.emit(event)


def _set_event(client: Any, name: str) -> None:
    distributed: Any = importlib.import_module("distributed")
    distributed.Event(name, client=client).set()


def _forget_events(names: list[str], dask_scheduler: Any = None) -> None:
    """On the scheduler: drop the children's events. Their stop events are set first, which
    ends the waits their workers' watcher threads may still have open (a scheduler that
    closes with waits open logs each as an error)."""
    handlers = dask_scheduler.handlers if dask_scheduler is not None else {}
    set_event, clear = handlers.get("event_set"), handlers.get("event_clear")
    if set_event is None or clear is None:
        return
    for name in names:
        with suppress(Exception):
            if name.startswith(_STOP_PREFIX):
                set_event(name=name)
            clear(name=name)
