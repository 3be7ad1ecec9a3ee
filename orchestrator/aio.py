"""Running trees from asyncio programs: ``await aio.run(...)``, ``async with aio.open_run(...)``.

FastAPI under uvicorn, Jupyter, aiohttp and ``asyncio.run`` programs cannot ``await`` trio code.
This module hosts trio as a *guest* on the running asyncio loop
(:func:`trio.lowlevel.start_guest_run`): trio's tasks run as callbacks on the loop's own
thread, so there is no thread per call and no second event loop to manage. trio allows one
guest run per thread at a time, so one shared guest run per asyncio loop hosts every run
started from that loop; it starts with the first run and ends when the last one does (nothing
of trio is left behind on the thread when the loop closes). Each run is a task of its own in
that guest run: one run's failure or cancellation never touches another.

What crosses between the two loops:

- the caller's context variables, the OpenTelemetry context among them, are copied into the
  run, so its root span nests under the caller's current span (a FastAPI request's, say);
- cancelling the asyncio task that awaits :func:`run` (a client gone, an ``asyncio.timeout``)
  cancels the run: every agent ends ``cancelled`` with a valid transcript, every span ends,
  and the ``CancelledError`` reaches the caller once the tree has wound down;
- an ``async def`` tool (or a ``Tool.from_schema`` handler) runs as an asyncio task on the host
  loop, in a copy of the tool call's context, so aiohttp, asyncpg, an ``asyncio.timeout`` or a
  client the application already holds work in it; cancelling the call (its ``tool_timeout``,
  the run's cancel) cancels that task. The runtime's own tools (``spawn_subagent``, MCP servers)
  stay on trio, and so do models (a ``FunctionModel``'s function is awaited under trio) and
  approvers. A tool written with anyio works either way; sync tools run in worker threads as
  under trio.

The handle of :func:`open_run` mirrors :class:`orchestrator.RunHandle`, awaited from asyncio:
``async for event in handle.events``, ``handle.cancel()``, ``await handle.result()``.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import contextvars
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import outcome
import trio
from opentelemetry import trace

from .core import execute as _execute
from .core.agent import Agent
from .core.compaction import ContextPolicy
from .core.errors import ConfigurationError
from .core.events import Event
from .core.journal import Journal
from .core.limits import Limits
from .core.messages import Message
from .core.policy import Policy
from .core.result import OutputT, RunResult
from .core.run import DEFAULT_TOOL_THREADS
from .core.run import RunHandle as _TrioHandle
from .core.run import open_run as _trio_open_run
from .core.runner import ChildRunner
from .models.base import Model

__all__ = ["AioEvents", "AioRunHandle", "open_run", "resume", "run"]

_logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_O = TypeVar("_O")  # the root agent's output type
_Job = Callable[[], Awaitable[None]]
_CANCELLED_TOOL_GRACE = 1.0
"""Seconds a cancelled asyncio tool task is waited for before it is left to finish alone."""


# --------------------------------------------------------------------------------------------
# The shared guest run of one asyncio loop


class _Host:
    """One asyncio loop's trio guest run, shared by every run started from that loop.

    Everything here runs on the loop's thread (asyncio callbacks and trio's guest ticks take
    turns on it), so the bookkeeping needs no lock. ``active`` counts the jobs submitted and
    not finished; the guest's main task leaves when it drops to zero, and the next submission
    starts a new guest run (queued in ``backlog`` until that run accepts jobs).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None
        self.accepting = False  # the guest's nursery takes jobs through the token
        self.running = False  # a guest run exists (until its done callback)
        self.active = 0
        self.backlog: list[_Job] = []
        self.idle = trio.Event()
        self.settled: list[asyncio.Future[None]] = []  # waiting for the guest to wind down

    def submit(self, job: _Job) -> None:
        """Start ``job`` as a task of the guest run (asyncio side)."""
        self.active += 1
        self._release_settled()  # this job's owner now waits for the guest, not theirs
        if self.accepting:
            assert self.token is not None
            self.token.run_sync_soon(self._spawn, job)
            return
        self.backlog.append(job)
        if not self.running:
            self._start()

    def _start(self) -> None:
        self.running = True
        _watch_abandoned_runs()
        try:
            trio.lowlevel.start_guest_run(
                self._main,
                run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=self.loop.call_soon,
                done_callback=self._done,
                host_uses_signal_set_wakeup_fd=threading.current_thread()
                is threading.main_thread(),
                strict_exception_groups=True,
            )
        except BaseException:
            self.running = False
            self.active -= len(self.backlog)
            self.backlog.clear()
            raise

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        _execute.ASYNCIO_HOST.set(_run_on_host)  # the async tools of this guest's runs
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self.accepting = True
            backlog, self.backlog = self.backlog, []
            for job in backlog:
                nursery.start_soon(self._wrap, job)
            while True:
                await self.idle.wait()
                if self.active == 0:
                    break
                self.idle = trio.Event()
            self.accepting = False  # in the same tick as the check: no job slips in between
        self.nursery = None

    def _spawn(self, job: _Job) -> None:
        assert self.nursery is not None
        self.nursery.start_soon(self._wrap, job)

    async def _wrap(self, job: _Job) -> None:
        try:
            await job()
        finally:
            self.active -= 1
            if self.active == 0:
                self.idle.set()

    def _done(self, result: outcome.Outcome[None]) -> None:
        self.running = False
        self.token = None
        self.idle = trio.Event()
        self._release_settled()
        if self.backlog:  # submitted while the last guest run wound down
            self._start()
        if isinstance(result, outcome.Error):
            if isinstance(result.error, KeyboardInterrupt | SystemExit):
                raise result.error  # asyncio re-raises these out of its loop
            _logger.error("orchestrator's trio guest run failed", exc_info=result.error)

    def _release_settled(self) -> None:
        waiting, self.settled = self.settled, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)

    async def wait_settled(self) -> None:
        """When no job is left, wait for the guest run to end (asyncio side): a program that
        closes its loop right after its last run leaves no trio run behind on the thread."""
        if self.active or not self.running:
            return
        fut = self.loop.create_future()
        self.settled.append(fut)
        await _uncancellable(fut)

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the guest run (asyncio side); dropped if the guest is gone."""
        if self.token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self.token.run_sync_soon(fn)


_hosts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Host] = weakref.WeakKeyDictionary()
_watching = False


def _watch_abandoned_runs() -> None:
    """Register the exit check once, when the first guest run starts: after the tracer
    providers a program made first, so it runs before their own exit hooks (last in, first
    out) and a program's log handlers are still there."""
    global _watching
    if not _watching:
        _watching = True
        atexit.register(_warn_abandoned_runs)


def _warn_abandoned_runs() -> None:
    """At exit, say in one line that runs were still running when their loop closed.

    A loop closed under a running ``aio.run`` (``loop.close()`` after ``run_until_complete``,
    a test framework's loop torn down) drops the guest run's pending callbacks: its runs never
    resume, their spans never end, and nothing would say so. ``asyncio.run`` cancels leftover
    tasks before closing, so its runs wind down (cancelled) and are not counted here.
    """
    runs = sum(h.active for h in list(_hosts.values()) if h.running and h.loop.is_closed())
    if runs:
        _logger.warning(
            "orchestrator.aio: %d run%s still running when %s asyncio loop closed; %s spans "
            "were never ended (await or cancel every aio run before closing the loop)",
            runs,
            "" if runs == 1 else "s",
            "its" if runs == 1 else "their",
            "its" if runs == 1 else "their",
        )


def _host() -> _Host:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "orchestrator.aio runs trees from asyncio code: await it in a coroutine that asyncio "
            "runs (from trio, use orchestrator.run; from sync code, orchestrator.run_sync)"
        ) from None
    if _in_trio_task():
        raise ConfigurationError(
            "orchestrator.aio was awaited inside trio (a trio program, or code a run hosted by "
            "orchestrator.aio awaits under trio): use `await orchestrator.run(...)` there"
        )
    host = _hosts.get(loop)
    if host is None:
        host = _hosts[loop] = _Host(loop)
    return host


def _in_trio_task() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


async def _uncancellable(fut: asyncio.Future[_T]) -> _T:
    """Wait for ``fut`` even while the awaiting task is being cancelled, then re-raise that
    cancellation (asyncio side). Used where the trio side is already winding down and leaving
    early would break the run's structure (a run outliving the code that awaited it)."""
    cancelled: asyncio.CancelledError | None = None
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError as exc:
            if fut.done() and fut.cancelled():
                raise
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    return fut.result()


def _enter_context(ctx: contextvars.Context) -> None:
    """Give this trio task the asyncio caller's context variables (OpenTelemetry's included)."""
    for var, value in ctx.items():
        var.set(value)


# --------------------------------------------------------------------------------------------
# asyncio tools, run on the host loop


async def _run_on_host(
    fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run one ``async def`` tool call as an asyncio task on the host loop (trio side), in a
    copy of this trio task's context (its span, the run's secrets), and wait for it. A trio
    cancellation (the tool's timeout, the run's cancel) cancels the task; it is waited for a
    moment to unwind, then left to finish alone."""
    loop = asyncio.get_running_loop()  # guest mode: the host loop runs on this thread
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    async def call() -> Any:
        return await fn(*args, **kwargs)

    task = loop.create_task(call(), context=contextvars.copy_context())

    def wake(_: asyncio.Task[Any]) -> None:
        with contextlib.suppress(trio.RunFinishedError):  # an abandoned task ending late
            token.run_sync_soon(done.set)

    task.add_done_callback(wake)
    try:
        await done.wait()
    except BaseException:
        task.cancel()
        with trio.move_on_after(_CANCELLED_TOOL_GRACE, shield=True):
            await done.wait()
        if not task.done():  # its exception, if it ever raises one, is retrieved then
            task.add_done_callback(_retrieve)
        raise
    return task.result()


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


# --------------------------------------------------------------------------------------------
# One run's two sides


class _Bridge:
    """One run's two sides: the trio task that holds it, the asyncio code that awaits it."""

    __slots__ = ("cancel_requested", "finished", "handle", "leave", "leave_requested", "opened")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.opened: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[RunResult] = loop.create_future()
        self.handle: _TrioHandle | None = None
        self.leave: trio.CancelScope | None = None  # cancelled when the asyncio side leaves
        self.cancel_requested = False  # asked before the run had opened: done when it does
        self.leave_requested = False

    async def settle(self, work: Callable[[], Awaitable[RunResult[Any]]]) -> None:
        """Run ``work`` in the guest and hand its result, or what it raised, to the asyncio
        side; an interrupt or exit is passed on after that, to end the guest too."""
        try:
            result = await work()
        except (KeyboardInterrupt, SystemExit) as exc:
            self.fail(exc)
            raise
        except BaseException as exc:  # this run's alone: no other run of the guest sees it
            self.fail(exc)
        else:
            if not self.finished.done():
                self.finished.set_result(result)

    def fail(self, exc: BaseException) -> None:
        for fut in (self.opened, self.finished):
            if fut.done():
                continue
            if isinstance(exc, trio.Cancelled):  # the guest itself was cancelled
                fut.cancel()
            else:
                fut.set_exception(exc)
                fut.exception()  # the caller awaits it; no "never retrieved" warning if not


def _start(host: _Host, agent: Agent, prompt: str, kwargs: dict[str, Any]) -> _Bridge:
    bridge = _Bridge(host.loop)
    ctx = contextvars.copy_context()

    async def work() -> RunResult[Any]:
        async with _trio_open_run(agent, prompt, **kwargs) as handle:
            bridge.handle = handle
            if bridge.cancel_requested:
                handle.cancel()
            with trio.CancelScope() as leave:
                bridge.leave = leave
                if bridge.leave_requested:
                    leave.cancel()
                if not bridge.opened.done():
                    bridge.opened.set_result(None)
                await handle.result()
        return await handle.result()  # the block has ended: the tree has wound down

    async def job() -> None:
        _enter_context(ctx)
        await bridge.settle(work)

    host.submit(job)
    return bridge


def _leave(host: _Host, bridge: _Bridge) -> None:
    """The asyncio side is done with the run: leave the trio block (which cancels a run that
    has not ended, as leaving :func:`orchestrator.open_run`'s block does)."""

    def leave() -> None:
        if bridge.leave is not None:
            bridge.leave.cancel()

    bridge.leave_requested = True
    host.call_soon(leave)


def _cancel(host: _Host, bridge: _Bridge) -> None:
    def cancel() -> None:
        if bridge.handle is not None:
            bridge.handle.cancel()

    bridge.cancel_requested = True
    host.call_soon(cancel)


async def _wind_down(host: _Host, bridge: _Bridge) -> None:
    """Wait for the run to end after a cancellation or an error (its own result or error is
    not the caller's concern any more)."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await _uncancellable(bridge.finished)


# --------------------------------------------------------------------------------------------
# The public API


class AioEvents:
    """A run's events, read from asyncio: ``async for event in handle.events`` (ends with the
    run), or ``await handle.events.receive()``. Buffered as under trio: the run never waits for
    a slow reader (see :attr:`AioRunHandle.dropped_events`)."""

    def __init__(self, host: _Host, channel: trio.MemoryReceiveChannel[Event]) -> None:
        self._host = host
        self._channel = channel
        self._kept: collections.deque[Event] = collections.deque()  # read for a reader who left

    def __aiter__(self) -> AioEvents:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def receive_nowait(self) -> Event:
        """The next buffered event; ``trio.WouldBlock`` if there is none yet,
        ``trio.EndOfChannel`` once the run has ended and every event was read."""
        if self._kept:
            return self._kept.popleft()
        return self._channel.receive_nowait()

    async def receive(self) -> Event:
        """The next event, waiting for one; ``trio.EndOfChannel`` once the run has ended."""
        with contextlib.suppress(trio.WouldBlock):
            return self.receive_nowait()
        fut: asyncio.Future[Event] = self._host.loop.create_future()
        scope = trio.CancelScope()

        async def wait() -> None:
            with scope:
                try:
                    event = await self._channel.receive()
                except Exception as exc:  # EndOfChannel, ClosedResourceError
                    if not fut.done():
                        fut.set_exception(exc)
                    return
                if fut.done():  # the reader gave up: keep the event for the next read
                    self._kept.append(event)
                else:
                    fut.set_result(event)

        self._host.submit(wait)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._kept.append(fut.result())
            fut.cancel()
            self._host.call_soon(scope.cancel)
            raise


class AioRunHandle(Generic[OutputT]):
    """A running tree seen from asyncio: :class:`orchestrator.RunHandle`'s events, ``cancel()``
    and ``result()``, awaited from asyncio code."""

    def __init__(self, host: _Host, bridge: _Bridge) -> None:
        assert bridge.handle is not None
        self._host = host
        self._bridge = bridge
        self._trio = bridge.handle
        self._events: AioEvents | None = None

    @property
    def run_id(self) -> str:
        """The run's id (also ``gen_ai.conversation.id`` on every span)."""
        return self._trio.run_id

    @property
    def events(self) -> AioEvents:
        """Run events, as an asyncio async iterator that ends when the run does."""
        if self._events is None:
            self._events = AioEvents(self._host, self._trio.events)
        return self._events

    @property
    def dropped_events(self) -> int:
        """Events dropped because the buffer was full."""
        return self._trio.dropped_events

    @property
    def abandoned_threads(self) -> int:
        """Worker threads of timed-out sync tools that were abandoned, not waited for."""
        return self._trio.abandoned_threads

    @property
    def startup_failure(self) -> str | None:
        """Why the run ends before its first model call (an MCP server did not start)."""
        return self._trio.startup_failure

    @property
    def done(self) -> bool:
        """True once the result is available."""
        return self._bridge.finished.done()

    def cancel(self) -> None:
        """Stop the whole tree now; the result has status ``cancelled`` and valid transcripts."""
        _cancel(self._host, self._bridge)

    async def result(self) -> RunResult[OutputT]:
        """Wait for the run to end and return its result tree. Cancelling the task that waits
        here does not cancel the run (leaving the ``async with`` block does)."""
        return await asyncio.shield(self._bridge.finished)


@asynccontextmanager
async def open_run(
    agent: Agent[_O],
    prompt: str,
    *,
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    message_history: Sequence[Message] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    event_buffer: int | float = 4096,
    run_id: str | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int = DEFAULT_TOOL_THREADS,
    journal: Journal | str | os.PathLike[str] | None = None,
    runner: ChildRunner | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> AsyncIterator[AioRunHandle[_O]]:
    """:func:`orchestrator.open_run` for asyncio code: ``async with aio.open_run(...) as h:``.

    The same arguments. Leaving the block before the run ends cancels it and waits for it to
    wind down (also when the block is left by a cancellation of the task); a configuration
    error is raised here, before any model call.
    """
    host = _host()
    kwargs = dict(
        model=model,
        limits=limits,
        policy=policy,
        deps=deps,
        message_history=message_history,
        tracer_provider=tracer_provider,
        event_buffer=event_buffer,
        run_id=run_id,
        context=context,
        tool_threads=tool_threads,
        journal=journal,
        runner=runner,
        log_dir=log_dir,
    )
    bridge = _start(host, agent, prompt, kwargs)
    try:
        await _uncancellable(bridge.opened)
    except BaseException:
        _leave(host, bridge)
        await _wind_down(host, bridge)
        await host.wait_settled()
        raise
    try:
        yield AioRunHandle(host, bridge)
    finally:
        _leave(host, bridge)
        try:
            await _uncancellable(bridge.finished)
        finally:
            await host.wait_settled()


async def run(
    agent: Agent[_O],
    prompt: str,
    *,
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    message_history: Sequence[Message] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    run_id: str | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int = DEFAULT_TOOL_THREADS,
    journal: Journal | str | os.PathLike[str] | None = None,
    runner: ChildRunner | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> RunResult[_O]:
    """:func:`orchestrator.run` for asyncio code: ``result = await aio.run(agent, prompt)``.

    The same arguments and result. Cancelling the awaiting task cancels the run; the
    ``CancelledError`` is raised once the tree has wound down (every agent ``cancelled``, every
    span ended).
    """
    host = _host()
    bridge = _start(
        host,
        agent,
        prompt,
        dict(
            model=model,
            limits=limits,
            policy=policy,
            deps=deps,
            message_history=message_history,
            tracer_provider=tracer_provider,
            event_buffer=0,
            run_id=run_id,
            context=context,
            tool_threads=tool_threads,
            journal=journal,
            runner=runner,
            log_dir=log_dir,
        ),
    )
    try:
        try:
            return await asyncio.shield(bridge.finished)
        except asyncio.CancelledError:
            if bridge.finished.done():
                raise  # the run itself was cancelled from outside (the guest's)
            _cancel(host, bridge)
            _leave(host, bridge)
            await _wind_down(host, bridge)
            raise
    finally:
        await host.wait_settled()


async def resume(
    journal_path: str | os.PathLike[str],
    *,
    agent: Agent | None = None,
    approvals: Mapping[str, bool] | None = None,
    **options: Any,
) -> RunResult[Any]:
    """:func:`orchestrator.resume` for asyncio code: ``await aio.resume(path, approvals=...)``.

    The same arguments and result (a web application deciding a parked call answers its
    request with this). Cancelling the awaiting task cancels the resumed run; the
    ``CancelledError`` is raised once the tree has wound down.
    """
    from .core.resume import resume as trio_resume

    host = _host()
    bridge = _Bridge(host.loop)
    ctx = contextvars.copy_context()

    async def work() -> RunResult[Any]:
        with trio.CancelScope() as leave:
            bridge.leave = leave
            if bridge.leave_requested:
                leave.cancel()
            result = await trio_resume(journal_path, agent=agent, approvals=approvals, **options)
        return result

    async def job() -> None:
        _enter_context(ctx)
        await bridge.settle(work)

    host.submit(job)
    try:
        try:
            return await asyncio.shield(bridge.finished)
        except asyncio.CancelledError:
            if bridge.finished.done():
                raise
            _leave(host, bridge)  # cancels the resumed run, which winds down
            await _wind_down(host, bridge)
            raise
    finally:
        await host.wait_settled()
