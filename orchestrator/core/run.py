"""Running a tree: :func:`open_run`, :func:`run`, :func:`run_sync`.

A run owns everything its agents share for its lifetime: the model clients (one per provider,
base URL and key, closed explicitly when the run ends), the budgets, the event channel and the
cancel scope. ``open_run`` starts the root agent in a nursery and hands back a
:class:`RunHandle`; leaving the ``async with`` block cancels a run that has not finished and
waits for it to wind down, so no task outlives the block.

Ctrl-C in a program that runs trees (not the CLI, which handles its signals itself): trio
raises ``KeyboardInterrupt`` in the task that called ``run()`` at its next checkpoint, or right
inside a tool that is computing (the runtime's own code is protected from it: see
:mod:`.cancellation`). Either way the tree is cancelled and winds down (every agent ``cancelled``
with a valid transcript) before the ``KeyboardInterrupt`` leaves ``run()`` / ``open_run``; the
handle's result holds the cut tree.
"""

from __future__ import annotations

import logging
import math
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import trio
from opentelemetry import trace

from ..models.base import ClientPool, Model, resolve_model
from ..tracing import spans
from ..tracing.content import content_capture_enabled
from ..tracing.flush import flush_tracer_provider
from .agent import Agent, AgentTree
from .approvals import ApprovalJournal
from .compaction import ContextPolicy
from .errors import ConfigurationError
from .events import Event, EventSink
from .hosted import check_hosted_tools
from .inprocess import IN_PROCESS, InProcessRun
from .journal import Journal, NullJournal
from .limits import Limits
from .loop import run_agent
from .messages import Message, is_blank, transcript_problem, well_formed
from .output import check_native_models
from .policy import Policy
from .redact import RUN_SECRETS, redact, secret_values
from .result import OutputT, RunResult, RunStatus
from .runner import ChildRunner
from .spawn import make_root
from .state import AgentNode, RunState
from .tools import describe_exception
from .toolset import end_before_start, open_toolsets

__all__ = ["RunHandle", "open_run", "run", "run_sync"]

T = TypeVar("T")
_CLOSE_TIMEOUT = 5.0
_logger = logging.getLogger(__name__)
DEFAULT_TOOL_THREADS = 32
"""Worker threads a run's sync tools may use at once, unless ``tool_threads`` says otherwise."""


class RunHandle(Generic[OutputT]):
    """A running tree: its events, a way to stop it, and its result (a ``RunResult`` of the
    root agent's output type)."""

    def __init__(self, state: RunState, root: AgentNode) -> None:
        self._state = state
        self._root = root
        self._done = trio.Event()
        self._result: RunResult[OutputT] | None = None
        self._token = trio.lowlevel.current_trio_token()

    @property
    def run_id(self) -> str:
        """The run's id (also ``gen_ai.conversation.id`` on every span)."""
        return self._state.run_id

    @property
    def events(self) -> trio.MemoryReceiveChannel[Event]:
        """Run events; the channel ends when the run does. Never slows the run (see EventSink)."""
        return self._state.events.receive_channel

    @property
    def dropped_events(self) -> int:
        """Events dropped because the buffer was full."""
        return self._state.events.dropped

    @property
    def abandoned_threads(self) -> int:
        """Worker threads of timed-out sync tools that were abandoned, not waited for."""
        return self._state.abandoned_threads

    @property
    def deadline(self) -> float:
        """When the run's timeout ends it, on trio's clock (``trio.current_time()``); ``inf`` if
        it has none. A watchdog outside trio may need it: a tool that never awaits holds the
        event loop past it (see README, "Design notes")."""
        return self._state.deadline

    @property
    def startup_failure(self) -> str | None:
        """Why the run ends before its first model call because a toolset (an MCP server) did
        not start, else ``None``; known as soon as ``open_run`` yields."""
        return self._state.toolset_failure

    @property
    def done(self) -> bool:
        """True once the result is available."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Stop the whole tree now; the result has status ``cancelled`` and valid transcripts.

        Safe from any thread (a sync tool or an approver runs in a worker thread, a GUI in its
        own): from outside the run's trio thread the cancellation is handed to that thread and
        takes effect when it gets to it, so a run about to end may still end ``completed``.
        """
        try:
            here = trio.lowlevel.current_trio_token()
        except RuntimeError:  # not in any trio run: a worker or foreign thread
            here = None
        if here is self._token:
            self._cancel_now()
        else:  # trio's scopes may only be touched from their own thread
            with suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._cancel_now)

    def _cancel_now(self) -> None:
        if not self._done.is_set():
            self._state.cancel_requested = True
            self._state.scope.cancel()

    async def result(self) -> RunResult[OutputT]:
        """Wait for the run to end and return its result tree."""
        await self._done.wait()
        assert self._result is not None
        return self._result

    @trio.lowlevel.enable_ki_protection  # the run's bookkeeping: a Ctrl-C waits for a checkpoint
    async def _drive(self) -> None:
        state = self._state
        # everything the run redacts (tool results, span text, reasons) uses one snapshot;
        # set in this task's own context, so it reaches every agent and worker thread of the run
        RUN_SECRETS.set(state.secrets)
        try:
            with state.scope:
                state.scope.deadline = state.deadline
                if state.toolset_failure is not None:  # an MCP server did not start
                    end_before_start(state, self._root, state.toolset_failure)
                else:
                    await run_agent(self._root, state)
        finally:
            if state.toolsets is not None:  # close the servers on every way out (bounded)
                await state.toolsets.aclose()
            if state.journal is not None:  # on every way out, bounded
                await _journal_end(state, self._root.status or RunStatus.ERROR)
            self._result = self._root.to_result(state.run_id)
            if state.parking is not None and state.awaiting_approval:
                self._result.pending_approvals = state.parking.pending_list()
            state.events.close()
            self._done.set()


async def _journal_end(state: RunState, status: RunStatus) -> None:
    """Tell the journal how the run ended, even while it is being cancelled (shielded, and
    bounded: a journal that hangs cannot keep the run from ending)."""
    assert state.journal is not None
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + _CLOSE_TIMEOUT
        try:
            await state.journal.run_ended(state.run_id, status.value)
        except Exception as exc:
            _logger.warning("the run's journal failed at the end: %s", describe_exception(exc))
    if scope.cancelled_caught:
        _logger.warning("the run's journal did not record the run's end within %ss", _CLOSE_TIMEOUT)


@asynccontextmanager
async def open_run(
    agent: Agent[T],
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
) -> AsyncIterator[RunHandle[T]]:
    """Start ``agent`` on ``prompt`` and yield a :class:`RunHandle`.

    ``model`` is the default for agents that name none; ``limits`` and ``policy`` apply to the
    whole run, filling what definitions leave unset and never loosening them. ``deps`` reaches
    tools as ``ToolContext.deps``. ``message_history`` is prepended to the root's transcript.
    ``event_buffer=0`` turns events off (``math.inf``: never drop one). ``run_id`` names the
    run (a random hex id by default; it is ``gen_ai.conversation.id`` on every span).
    ``context`` overrides every agent's :class:`~orchestrator.ContextPolicy`.
    ``tool_threads`` is how many worker threads the run's sync tools may use at once (a
    timed-out sync tool keeps its thread until it returns, so a run whose sync tools hang needs
    room for them). ``journal`` records the run as it goes: a path for a new SQLite journal
    that :func:`~orchestrator.resume` can continue (see :mod:`.resume`), or any
    :class:`~orchestrator.Journal` (none by default). ``runner`` runs the children (in this process by default; see :mod:`.runner`).
    ``log_dir`` is where toolsets write their logs (a stdio MCP server's stderr; default: a
    folder under the system's temporary one); the run opens its tree's toolsets (MCP servers)
    before the root's first model call, and closes them when it ends.
    Raises :class:`~orchestrator.errors.ConfigurationError` before any model call if the tree
    cannot run.
    """
    stack = AsyncExitStack()  # closes the run's clients
    state, root = _prepare(
        agent,
        prompt,
        model,
        limits,
        policy,
        deps,
        message_history,
        tracer_provider,
        event_buffer,
        run_id,
        context,
        tool_threads,
        ClientPool(stack),
        journal,
        runner,
    )
    handle = RunHandle(state, root)
    try:
        session = getattr(runner, "session", None)
        if session is not None:  # a runner's own set-up for the run (a Dask client), first
            await stack.enter_async_context(session(InProcessRun(state)))
        async with trio.open_nursery() as nursery:
            if state.tree.toolsets:  # before any model call; raises a ConfigurationError
                await open_toolsets(state, root, nursery, Path(log_dir) if log_dir else None)
            nursery.start_soon(handle._drive)
            try:
                yield handle
            finally:
                if not handle.done:  # the block was left early: not a cancel() by the caller
                    state.scope.cancel()
                with trio.CancelScope(shield=True):
                    await handle._done.wait()
    except BaseExceptionGroup as group:
        # The caller's own exception from the block comes out as itself, not wrapped in the
        # group our nursery makes (the run task itself never raises, but for bugs).
        if len(group.exceptions) == 1:
            exc = group.exceptions[0]
            chain = exc.__cause__, exc.__context__, exc.__suppress_context__
            try:
                raise exc
            finally:  # keep the caller's own exception chain as it was
                exc.__cause__, exc.__context__, exc.__suppress_context__ = chain
        raise
    else:
        if state.interrupted is not None:  # a Ctrl-C trio raised in a tool cancelled the run
            interrupt, state.interrupted = state.interrupted, None
            raise interrupt
    finally:
        # close every client even when the caller is being cancelled, but never hang on it
        with trio.CancelScope(shield=True) as close_scope:
            close_scope.deadline = trio.current_time() + _CLOSE_TIMEOUT
            try:
                await stack.aclose()
            except Exception as exc:  # a client failing to close must not cost the result
                _logger.warning(
                    "closing the run's model clients failed: %s", redact(describe_exception(exc))
                )
        if state.owned_journal is not None:
            state.owned_journal.close()


def _check_defer(journal: object, runner: ChildRunner | None) -> None:
    """``DEFER`` parks calls in the run's journal, and runs its agents in this process."""
    if journal is None:
        raise ConfigurationError(
            "DEFER parks calls in the run's journal, and this run has none: pass "
            "run(..., journal=PATH) (the command line keeps one unless --no-journal)"
        )
    if not isinstance(journal, str | os.PathLike | ApprovalJournal):
        raise ConfigurationError(
            f"DEFER needs a journal that can hold parked calls (the SQLite journal of "
            f"journal=PATH), got a {type(journal).__name__}"
        )
    if runner is not None and runner is not IN_PROCESS:
        raise ConfigurationError(
            f"DEFER runs its agents in this process only, for now: not with a "
            f"{type(runner).__name__}"
        )


def _prepare(  # noqa: C901 - one check per run option, each with its own message
    agent: Agent,
    prompt: str,
    model: Model | str | None,
    limits: Limits | None,
    policy: Policy | None,
    deps: Any,
    history: Sequence[Message] | None,
    tracer_provider: trace.TracerProvider | None,
    event_buffer: int | float,
    run_id: str | None,
    context: ContextPolicy | None,
    tool_threads: int,
    clients: ClientPool,
    journal: Journal | str | os.PathLike[str] | None = None,
    runner: ChildRunner | None = None,
) -> tuple[RunState, AgentNode]:
    if not _in_trio():  # asyncio's loop, or no loop at all
        raise ConfigurationError(
            "orchestrator runs under trio: from asyncio code (FastAPI, Jupyter, aiohttp) use "
            "`await orchestrator.aio.run(...)` or `orchestrator.aio.open_run(...)`; from trio, "
            "`await run(...)`; from sync code, run_sync()"
        )
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"run() needs an Agent, got {type(agent).__name__}")
    if not isinstance(prompt, str):
        raise ConfigurationError("the prompt must be a string")
    if is_blank(prompt):
        raise ConfigurationError("the prompt is empty: give the root agent a task")
    # a lone surrogate (argv bytes that are not UTF-8, a bad \u escape) cannot go into an
    # HTTP body: the first model call would fail; U+FFFD in its place, as in tool results
    prompt = well_formed(prompt)
    if limits is not None and not isinstance(limits, Limits):
        raise ConfigurationError(f"limits must be a Limits, got {limits!r}")
    if policy is not None and not isinstance(policy, Policy):
        raise ConfigurationError(f"policy must be a Policy, got {policy!r}")
    if isinstance(tool_threads, bool) or not isinstance(tool_threads, int) or tool_threads < 1:
        raise ConfigurationError(f"tool_threads must be an integer >= 1, got {tool_threads!r}")
    if event_buffer != math.inf and (
        isinstance(event_buffer, bool) or not isinstance(event_buffer, int) or event_buffer < 0
    ):
        raise ConfigurationError(
            f"event_buffer must be an integer >= 0 or math.inf, got {event_buffer!r}"
        )
    if run_id is not None and (not isinstance(run_id, str) or (run_id and not run_id.strip())):
        raise ConfigurationError(f"run_id must be a string (empty: a random id), got {run_id!r}")
    if journal is not None and not isinstance(journal, Journal | str | os.PathLike):
        raise ConfigurationError(
            f"journal must be a path or a Journal, got {type(journal).__name__}"
        )
    if runner is not None and not isinstance(runner, ChildRunner):
        raise ConfigurationError(f"runner must be a ChildRunner, got {type(runner).__name__}")
    messages = list(history or ())
    problem = transcript_problem(messages)
    if problem is not None:
        raise ConfigurationError(f"message_history cannot be continued: {problem}")
    tree = AgentTree(agent, run_limits=limits, run_policy=policy)
    state = RunState(
        run_id=run_id or uuid.uuid4().hex,
        tree=tree,
        default_model=resolve_model(model) if model is not None else None,
        run_limits=limits or Limits(),
        run_policy=policy,
        deps=deps,
        events=EventSink(event_buffer),
        tracer=spans.get_tracer(tracer_provider) if spans.tracing_live(tracer_provider) else None,
        clients=clients,
        thread_limiter=trio.CapacityLimiter(tool_threads),
        context=context,
        capture=content_capture_enabled(),
        secrets=secret_values(),
        journal=journal
        if isinstance(journal, Journal) and not isinstance(journal, NullJournal)
        else None,
        runner=runner,
    )
    defers = (policy is not None and policy.defers) or any(
        a.policy is not None and a.policy.defers for a in tree.by_name.values()
    )
    if defers:  # refused before a journal file is made
        _check_defer(journal, runner)
    state.models = tree.models()  # once per agent, before any call
    state.menus = tree.menus(state.models)
    check_native_models(tree, state.models, state.default_model, state.menus)
    check_hosted_tools(tree, state.models, state.default_model, state.menus, policy)
    # The SQLite journal's modules (and sqlite3) load here, for a run that keeps a journal only.
    if isinstance(journal, str | os.PathLike):  # a new journal file, closed when the run ends
        from .treeref import open_journal

        state.journal = state.owned_journal = open_journal(
            journal, agent, prompt, state.run_id, model, limits, defer=defers
        )
    if state.journal is not None:
        from .journal_sqlite import SQLiteJournal

        if isinstance(state.journal, SQLiteJournal) and state.journal.resuming:
            state.resumed_from = state.journal.resumed_from()
            if not defers and state.journal.parked():  # parked calls wait on, decided or not
                _check_defer(state.journal, runner)
                defers = True
    if defers:
        from .approvals import Parking

        assert isinstance(state.journal, ApprovalJournal)
        state.parking = Parking(state, state.journal)
    root = make_root(state, agent, prompt, messages)
    return state, root


async def run(
    agent: Agent[T],
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
) -> RunResult[T]:
    """Run ``agent`` on ``prompt`` to its end and return the result tree.

    The options are :func:`open_run`'s; no events are published (nobody could read them).
    """
    async with open_run(
        agent,
        prompt,
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
    ) as handle:
        return await handle.result()


def run_sync(
    agent: Agent[T],
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
) -> RunResult[T]:
    """:func:`run` under ``trio.run``, then a bounded flush of the tracer provider's spans."""
    if _in_trio():
        raise ConfigurationError(
            "run_sync() was called inside trio (a trio program, a test or a tool): "
            "use `await run(...)` there"
        )
    result = trio.run(
        partial(
            run,
            agent,
            prompt,
            model=model,
            limits=limits,
            policy=policy,
            deps=deps,
            message_history=message_history,
            tracer_provider=tracer_provider,
            run_id=run_id,
            context=context,
            tool_threads=tool_threads,
            journal=journal,
            runner=runner,
            log_dir=log_dir,
        )
    )
    flush_tracer_provider(tracer_provider, timeout=2.0)
    return result


def _in_trio() -> bool:
    """Whether this code runs in a trio task."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
