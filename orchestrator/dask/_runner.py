"""Children on a Dask cluster: :class:`DaskRunner` (optional extra ``orchestrator[dask]``).

``run(agent, prompt, runner=DaskRunner("tcp://scheduler:8786"))`` runs every child at
``depth`` (1: the root's children) as a task on a Dask distributed cluster, with its whole
subtree, in a trio run of its own on the worker (:mod:`._worker`, through :func:`~orchestrator.core.host.host_child`). The parent stays here
and keeps the tree's books:

- **budget**: a remote child runs on a lease, reserved on its parent's ledger when it starts
  (the room left, shared evenly among the spawns of that turn) and settled to what its subtree
  really spent when it ends; a spent lease ends it ``budget_exceeded`` there;
- **deadline and cancellation**: the run's deadline travels as wall-clock time; cancelling the
  run (or the parent) sets the child's Dask event, which its worker waits on: it ends
  ``cancelled`` within a second, and its cut result tree comes back;
- **trace**: the worker records the child's spans in memory, under the spawn span's W3C
  context, and they come back with the result to be ended here through the run's tracer
  provider (:mod:`._spans`): one trace, whether or not the workers have an exporter;
- **faults**: a child whose worker died comes back as an ``error`` result ("worker lost"),
  never run twice (the task sets a Dask event before it runs; a re-run finds it set);
- **journal**: a journaled run records each remote child's whole result tree as it ends, so a
  resume replays it; a remote child in flight when the run stopped is not run again on resume
  (an ``error`` result saying its outcome is unknown);
- **the wire** (:mod:`._wire`): definitions, models, tools and ``deps`` travel by
  cloudpickle (a tree file the CLI loaded by value); one that cannot is refused before the
  first model call, named; workers running another orchestrator version are refused.

``DaskRunner("local:N")`` starts a LocalCluster of N worker processes on 127.0.0.1 for the
run and closes it at the end. See docs/distributed.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

from .. import (
    Agent,
    ConfigurationError,
    InProcessRunner,
    Policy,
    RunResult,
    RunStatus,
    Usage,
    __version__,
)
from ..core.runner import ChildOutcome, ChildSpec, Parent, RunDefinitions, RunSide
from ._spans import emit
from ._wire import by_value, check_picklable, dumps
from ._worker import (
    LOST,
    AskParent,
    ChildPart,
    RemoteResult,
    RunPart,
    run_child,
    worker_version,
)

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

__all__ = ["DaskRunner", "parse_address"]

_logger = logging.getLogger(__name__)

_HERE = InProcessRunner()
"""Runs the children above the runner's depth (in their parent's process)."""
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
        self._sessions: dict[RunSide, _Session] = {}

    def __repr__(self) -> str:
        target = self.target if isinstance(self.target, str) else type(self.target).__name__
        return f"DaskRunner({target!r}, depth={self.depth})"

    # -- the run's session ---------------------------------------------------------------

    @asynccontextmanager
    async def session(self, run: RunSide) -> AsyncIterator[None]:
        """Check that the run can cross the wire, connect, check the workers' version."""
        queue = f"orchestrator-events-{uuid.uuid4().hex}" if run.events_enabled else None
        asking = _Approvals(f"orchestrator-approvals-{uuid.uuid4().hex}")
        blob, index = self._run_part(run.definitions(), queue, asking)
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
            self._sessions[run] = session
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
            self._sessions.pop(run, None)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, session, cluster)

    def _run_part(
        self, run: RunDefinitions, events_queue: str | None, asking: _Approvals
    ) -> tuple[bytes, dict[int, tuple[str, int]]]:
        by_value([*self.by_value, *(m for m in sys.modules if m.startswith(_USER_MODULES))])
        named: list[tuple[str, Any]] = []
        index: dict[int, tuple[str, int]] = {}
        agents = _definitions(run.root)
        for agent in agents:
            if agent.model is not None and not isinstance(agent.model, str):
                named.append((f"the model of agent {agent.name!r}", agent.model))
            for i, t in enumerate(agent.tools or ()):
                named.append((f"tool {t.name!r} of agent {agent.name!r}", t))
                index.setdefault(id(t), (agent.name, i))
        if run.model is not None:
            named.append(("the run's model", run.model))
        if run.deps is not None:
            named.append(("the run's deps", run.deps))
        check_picklable(named)
        root = run.root
        if any(a.policy is not None and a.policy.approver for a in agents):
            root = root.map_tree(
                lambda a: a if a.policy is None else a.replace(policy=asking.proxy(a.policy))
            )
        definitions = dataclasses.replace(
            run, root=root, policy=None if run.policy is None else asking.proxy(run.policy)
        )
        part = RunPart(__version__, definitions, events_queue)
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
        if address == "local":
            _check_main_guard(self.target)
        try:
            if address == "local":
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=self.worker_threads,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    # no dashboard, but the scheduler's HTTP server (health, metrics) still
                    # starts, on 8787 unless told: a free port, and no "Port 8787 is already
                    # in use" warning when another cluster holds it
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
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

    async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
        """Run the child ``spec`` describes on the cluster (children above ``depth`` run here)."""
        if spec.depth < self.depth:
            return await _HERE.run(spec, parent)
        session = self._sessions.get(parent.run)
        if session is None:  # only open_run enters the session
            raise RuntimeError("a DaskRunner runs children only in a run it was given to")
        parent.start(spec)
        try:
            await self._run_remote(session, spec, parent)
        except BaseException as exc:
            await parent.end(exc)
            raise
        return await parent.end()

    async def _run_remote(self, session: _Session, spec: ChildSpec, parent: Parent) -> None:
        if await parent.replayed():
            return
        lease = await parent.lease()
        if lease is None:  # no room: the child ended budget_exceeded
            return
        spec = dataclasses.replace(spec, lease=lease)
        inherited = parent.inherited()
        names = (
            f"{_STOP_PREFIX}{uuid.uuid4().hex}",
            f"orchestrator-started-{uuid.uuid4().hex}",
        )
        try:
            blob = dumps(
                ChildPart(
                    spec,
                    inherited.model,
                    session.asking.proxy(inherited.policy) if session.asking else inherited.policy,
                    tuple(session.tool_index.get(id(t), t) for t in inherited.tools),
                    inherited.agents_room,
                    *names,
                    self.secede,
                )
            )
        except Exception as exc:
            parent.settle(Usage())
            reason = " ".join(str(exc).split()) or type(exc).__name__
            parent.fail(RunStatus.ERROR, f"cannot be sent to a Dask worker: {reason}")
            return
        await parent.sent()
        await self._submit(session, names, blob, parent)

    async def _submit(
        self, session: _Session, part_names: tuple[str, str], blob: bytes, parent: Parent
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
        except trio.Cancelled:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + self.cancel_grace
                await trio.to_thread.run_sync(_set_event, client, part_names[0])
                await done.wait()
            if done.is_set():
                with trio.CancelScope(shield=True):
                    remote = await self._collect(session, future, part_names, parent)
                if remote is not None and remote.result is not None:
                    status, reason = parent.cut_status()
                    _recut(remote.result, status, reason)
                    parent.adopt(remote.result)
            else:
                with suppress(Exception):
                    future.cancel()
                parent.settle(None)
            raise
        return await self._collect(session, future, part_names, parent)

    async def _collect(
        self, session: _Session, future: Any, names: tuple[str, str], parent: Parent
    ) -> RemoteResult | None:
        """The finished task's result adopted by the child, its usage settled, its spans ended
        here; a lost worker or a failed task as an ``error`` result."""
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
            parent.settle(Usage())
            parent.fail(RunStatus.ERROR, problem or "its Dask task returned nothing")
            return None
        parent.settle(remote.result.usage)
        emit(remote.spans, parent.run.tracer)
        parent.adopt(remote.result)
        return remote


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
    client: Any, asking: _Approvals, run: RunSide, scope: trio.CancelScope, done: trio.Event
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
                # no timeout (see _read_events): the end mark ends the wait
                item = await trio.to_thread.run_sync(queue.get, abandon_on_cancel=True)
            except Exception:  # the queue failed
                await trio.sleep(0.05)
                continue
            if item == _END:
                return
            index, answer, call = item
            try:
                verdict = await run.ask(asking.approvers[index], call)
            except Exception as exc:  # fail closed, as an approver failing here would
                _logger.warning(
                    "the approver raised on a call to %r by %s: it was not run (%s)",
                    call.name,
                    call.agent_path,
                    f"{type(exc).__name__}: {' '.join(str(exc).split())}",
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


def _definitions(root: Agent) -> list[Agent]:
    """Every agent of the tree, each once, in the order first met."""
    seen: dict[int, Agent] = {}
    pending = [root]
    while pending:
        agent = pending.pop(0)
        if id(agent) not in seen:
            seen[id(agent)] = agent
            pending.extend(s for s in agent.subagents if isinstance(s, Agent))
    return list(seen.values())


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
    client: Any, name: str, run: RunSide, scope: trio.CancelScope, done: trio.Event
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
            try:  # no timeout: one that expires is logged by the scheduler as an ERROR with a
                # traceback (on the CLI's stderr, for local:N); the end mark ends the wait
                batch = await trio.to_thread.run_sync(queue.get, abandon_on_cancel=True)
            except Exception:  # the queue failed
                await trio.sleep(0.05)
                continue
            if batch == _END:
                return
            for event in batch:
                run.emit(event)


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


def _check_main_guard(target: str) -> None:
    """Refuse a local cluster started by a script without ``if __name__ == "__main__":``.

    Dask starts a local cluster's workers as new processes that import the script again (as
    ``__mp_main__``): without the guard each would run the script's tree too and start a
    cluster of its own, and Dask's only words for it are "Nanny failed to start".
    """
    import ast

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py") or getattr(main, "__spec__", None):
        return  # an interactive session, python -c, python -m: not a script run again
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return
    raise ConfigurationError(
        f"DaskRunner({target!r}) starts worker processes that import {path} again, and it has "
        "no 'if __name__ == \"__main__\":' guard: each worker would run the tree again. Put "
        "the code that runs the tree under that guard (see docs/distributed.md)"
    )
