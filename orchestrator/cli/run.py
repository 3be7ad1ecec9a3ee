"""``orchestrator run FILE.py[:NAME] "prompt"``: load an agent, run its tree, print the answer.

:func:`load_agent` loads an :class:`~orchestrator.Agent` (default name ``agent``); the run shows
live progress, prints the final answer and one summary line, and writes the trace (OTLP when
``OTEL_EXPORTER_OTLP_*`` is set, else OTLP/JSON lines under ``runs/``). Agents whose provider
has neither a key nor a base URL (``ANTHROPIC_API_KEY``; ``OPENAI_API_KEY`` or
``OPENAI_BASE_URL``) run on the offline model (:func:`offline_providers`). ``--dry-run`` prints the tree's worst case instead (:mod:`.dryrun`).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import trio

from ..core.agent import Agent, model_label
from ..core.cancellation import SignalInterrupt, in_tool_code
from ..core.errors import ConfigurationError
from ..core.limits import Limits
from ..core.redact import redact, secret_values
from ..core.result import RunResult, RunStatus
from ..core.terminal import terminal_safe
from ._common import EXIT_CODES, UsageError, stdout_to_devnull, without_userinfo

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ..core.journal_sqlite import SQLiteJournal
    from ..core.runner import ChildRunner
    from ..models.base import Model
    from ..toolsets.mcp import MCPServer
    from ..tracing.setup import TracingSetup

__all__ = [
    "cmd_approve",
    "cmd_resume",
    "cmd_run",
    "load_agent",
    "offline_fallback",
    "offline_providers",
]


def load_agent(target: str) -> Agent:
    """The Agent named by ``FILE.py[:NAME]`` (default name ``agent``): see
    :func:`~orchestrator.core.treeref.load_tree_file`; what is wrong is a usage error."""
    from ..core.treeref import load_tree_file

    try:
        return load_tree_file(target)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


_OFFLINE_WHEN: dict[str, tuple[str, ...]] = {
    # provider: the variables any one of which lets its models reach an endpoint
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
}


def _unreachable(provider: str) -> bool:
    """Whether the CLI runs ``provider``'s models offline: none of its variables is set."""
    names = _OFFLINE_WHEN.get(provider)
    return names is not None and not any(os.environ.get(n, "").strip() for n in names)


def _provider_of(spec: str) -> str:
    return spec.partition(":")[0] if ":" in spec else ""


def _reachable_part(spec: str, swapped: set[str]) -> str:
    """``spec`` with the models of unreachable providers left out of a fallback chain
    (``"a|b"``), or ``offline`` when none is left; the providers left out go in ``swapped``."""
    kept = []
    for part in spec.split("|"):
        provider = _provider_of(part.strip())
        if _unreachable(provider):
            swapped.add(provider)
        else:
            kept.append(part.strip())
    return "|".join(kept) if kept else "offline"


def offline_providers(
    agent: Agent, default_model: str | None
) -> tuple[Agent, str | None, tuple[str, ...]]:
    """Swap the models of providers that have neither a key nor a base URL for the offline
    model, per provider; return the tree, the default model and the providers swapped.

    ``anthropic`` needs ``ANTHROPIC_API_KEY``; ``openai`` needs ``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL`` (a local server may need no key); ``ollama`` needs nothing. A model
    object given its own key or base URL (``AnthropicModel(api_key=...)``, say from a secret
    store, or ``OpenAIModel(base_url=...)``) is kept: it can call its API, and a run that quietly
    answered offline would still "succeed". A default model of ``None`` becomes ``offline``
    when the anthropic provider is offline (the CLI's default provider). A fallback chain
    (``"anthropic:a|openai:b"``) keeps the models it can reach, and is offline only when it
    can reach none.
    """
    swapped: set[str] = set()

    def swap_one(model: Model | str) -> Model | str:
        if isinstance(model, str):
            return _reachable_part(model, swapped)
        provider = str(getattr(model, "provider", ""))
        keyed = getattr(model, "has_endpoint", getattr(model, "has_api_key", False))
        if _unreachable(provider) and not keyed:
            swapped.add(provider)
            return "offline"
        return model

    def swap(a: Agent) -> Agent:
        if a.models:  # a menu: each model swapped, two that became one listed once
            menu: dict[str, Model | str] = {}
            for m in map(swap_one, a.models):
                menu.setdefault(model_label(m), m)
            new = tuple(menu.values())
            return a if new == a.models else a.replace(models=new)
        if a.model is None:
            return a
        model = swap_one(a.model)
        return a if model is a.model or model == a.model else a.replace(model=model)

    agent = agent.map_tree(swap)
    if default_model is None:
        if _unreachable("anthropic"):
            default_model = "offline"
    else:
        default_model = _reachable_part(default_model, swapped)
    return agent, default_model, tuple(sorted(swapped))


def offline_fallback(agent: Agent, default_model: str | None) -> tuple[Agent, str | None, bool]:
    """:func:`offline_providers`, reporting only whether anything was swapped."""
    agent, default_model, swapped = offline_providers(agent, default_model)
    return agent, default_model, bool(swapped)


def _offline_note(providers: tuple[str, ...]) -> str:
    """One line saying which variables were missing (the CLI says it once)."""
    missing = [" or ".join(_OFFLINE_WHEN[p]) for p in providers if p in _OFFLINE_WHEN]
    return (
        f"No {', no '.join(missing)} set: running on the offline model (deterministic, no LLM).\n"
    )


def _limits_from(args: argparse.Namespace) -> Limits | None:
    values = {
        "max_turns": args.max_turns,
        "timeout": args.timeout,
        "max_depth": args.max_depth,
        "max_concurrency": args.concurrency,
        "token_budget": args.budget_tokens,
        "max_result_chars": args.max_result_chars,
    }
    set_values = {k: v for k, v in values.items() if v is not None}
    return Limits(**set_values) if set_values else None


async def _run_tree(
    agent: Agent,
    prompt: str,
    *,
    model: str | None,
    limits: Limits | None,
    run_id: str,
    progress: str,
    out: TextIO,
    log_dir: Path | None = None,
    journal: SQLiteJournal | None = None,
    runner: ChildRunner | None = None,
    approve: str = "none",
    tracer_provider: TracerProvider | None = None,
) -> RunResult:
    from ..core.policy import Policy
    from ..core.run import open_run
    from .progress import LiveControl, TerminalApprover, follow_events

    control = LiveControl() if progress == "live" else None
    policy = None  # "none": a confirm rule without an approver declines (the library's rule)
    if approve == "ask":
        policy = Policy(approver=TerminalApprover(out, control=control))
    elif approve == "all":
        policy = Policy(approver=_approve_every_call)
    elif approve == "defer":  # parked for `orchestrator approve`, in another process
        from ..core.policy import DEFER

        policy = Policy(approver=DEFER)
    with _SignalGuard(live=progress == "live") as guard:
        async with open_run(
            agent,
            prompt,
            model=model,
            limits=limits,
            policy=policy,
            run_id=run_id,
            journal=journal,
            event_buffer=4096 if progress != "none" else 0,
            runner=runner,
            log_dir=log_dir,
            tracer_provider=tracer_provider,
        ) as handle:
            guard.watch(handle)
            async with trio.open_nursery() as nursery:
                # (no display for a run that ends before it starts: its reason is the output)
                if progress != "none" and handle.startup_failure is None:
                    # ends by itself when the run closes its event channel
                    nursery.start_soon(
                        lambda: follow_events(
                            handle.events,
                            live=progress == "live",
                            stream=out,
                            outcome=handle.result,
                            control=control,
                        )
                    )
                result = await handle.result()
        return result


def _approve_every_call(call: object) -> bool:
    """``--approve all``."""
    return True


_GRACE = 5.0
"""Seconds a run may take to wind down after a signal (or after the tool holding the event loop
was interrupted) before the process exits at once."""
_STALL = 1.0
"""Seconds past the run's deadline before a tool still holding the event loop is interrupted."""


class _SignalGuard:
    """SIGINT and SIGTERM while a tree runs, and a watchdog on its deadline.

    Plain ``signal.signal`` handlers and ``setitimer``, not a trio task: they run in the main
    thread between two bytecodes even while a tool holds the event loop (an ``async def`` that
    computes without awaiting), where no trio task can run. The first signal cancels the tree
    (from the event loop, when it next runs); if it interrupted a tool's own code, that tool is
    also stopped in place with a :class:`SignalInterrupt`, as plain Python's Ctrl-C would, and
    the runtime takes that as the cancellation. The second signal, or a run still not done
    ``_GRACE`` seconds after the first, exits at once (130). The run's deadline gets the same:
    ``_STALL`` seconds past it, a tool holding the loop is interrupted (the run ends
    ``timeout``); if it is still not done ``_GRACE`` seconds later, the process exits with 4.

    Exiting at once is ``os._exit`` after one line written straight to fd 2: a signal handler
    may have interrupted a write to ``sys.stderr`` or a span export holding a lock, so nothing
    buffered is flushed. Given up: the partial result, the summary and the spans not yet written
    (the trace file keeps every line written so far; the run shows as interrupted).
    """

    def __init__(self, live: bool) -> None:
        self._live = live
        self._token = trio.lowlevel.current_trio_token()
        self._handle: Any = None
        self._first: int | None = None  # the first signal's number
        self._signals = 0
        self._alarms = 0
        self._stopped_tool = False
        self._previous: dict[int, Any] = {}
        self._timer = (0.0, 0.0)  # the interval timer as it was: (seconds left, interval)
        self._entered = 0.0

    def __enter__(self) -> _SignalGuard:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only: nothing to guard here
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._on_signal)
            self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_alarm)
            # the program's own timer (main() may run inside one) pauses while ours is used
            self._timer = signal.setitimer(signal.ITIMER_REAL, 0)
            self._entered = time.monotonic()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Everything as it was before the run: the timer stopped, the handlers put back, and
        a timer the program had set going again with the time it had left."""
        if not self._previous:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        left, interval = self._timer
        if left > 0:  # due while the run went on: at once (setitimer takes 0 as "off")
            due = left - (time.monotonic() - self._entered)
            signal.setitimer(signal.ITIMER_REAL, max(due, 1e-6), interval)

    def watch(self, handle: Any) -> None:
        """Guard ``handle``'s run: arm the deadline watchdog (a signal before it started
        cancels it now)."""
        self._handle = handle
        if self._signals:
            handle.cancel()
            return
        remaining = handle.deadline - trio.current_time()
        if remaining < math.inf and self._previous:
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 0.0) + _STALL)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            self._exit_now("interrupted again: exiting at once", RunStatus.CANCELLED)
        self._first = signum
        # at the event loop's next chance (the one call that is safe from a signal handler)
        self._token.run_sync_soon(self._cancel, signum)
        signal.setitimer(signal.ITIMER_REAL, _GRACE)  # the deadline's watchdog is moot now
        if in_tool_code(frame):  # a tool is computing: stop it where it is
            self._stop_tool()

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self._alarms += 1
        if self._handle is None or self._handle.done:  # only closing its clients (bounded)
            return
        if not self._stopped_tool and in_tool_code(frame):  # a tool holds the event loop
            signal.setitimer(signal.ITIMER_REAL, _GRACE)
            self._stop_tool()
        if not self._signals and self._alarms == 1:  # past the deadline: maybe winding down
            signal.setitimer(signal.ITIMER_REAL, _GRACE)
            return
        if self._signals:
            what = "Ctrl-C" if self._first == signal.SIGINT else "SIGTERM"
            self._exit_now(
                f"the run did not stop within {_GRACE:g}s of the {what} (a tool is holding "
                "the event loop, or will not be cancelled): exiting at once",
                RunStatus.CANCELLED,
            )
        self._exit_now(
            f"the run did not stop within {_STALL + _GRACE:g}s of its deadline (a tool is "
            "holding the event loop, or will not be cancelled): exiting at once",
            RunStatus.TIMEOUT,
        )

    def _stop_tool(self) -> None:
        """Raise into the tool's frame (safe there: the tool could raise it itself); cancel
        first, so the runtime takes it as this cancellation, not as a Ctrl-C of its own."""
        self._stopped_tool = True
        if self._signals and self._handle is not None:
            self._handle.cancel()
        raise SignalInterrupt

    def _cancel(self, signum: int) -> None:
        """In the trio thread, at a safe point: say so, and cancel the tree."""
        # sys.stderr at this moment, not the stream saved before: while the live view is up
        # it is rich's proxy, which prints above the tree instead of under it (where the next
        # redraw would erase the line)
        again = "Ctrl-C again" if signum == signal.SIGINT else "send it again"
        sys.stderr.write(f"\ncancelling the run ({again} to exit at once)...\n")
        sys.stderr.flush()
        if self._handle is not None:
            self._handle.cancel()

    def _exit_now(self, message: str, status: RunStatus) -> NoReturn:
        show_cursor = "\x1b[?25h" if self._live else ""  # the live view hides it until it ends
        note = f"{show_cursor}\n{message}; the result and spans not yet written are lost\n"
        with contextlib.suppress(OSError):
            os.write(2, note.encode(errors="replace"))
        os._exit(EXIT_CODES[status])


def _summary(result: RunResult, wall: float, trace: str) -> str:
    u = result.usage
    return (
        f"status={result.status.value} agents={result.agents} turns={result.total_turns} "
        f"tokens={u.billed_tokens:,} (input {u.input_tokens:,}, cache read {u.cache_read_tokens:,}, "
        f"output {u.output_tokens:,}) cost=${u.cost_usd:.4f} wall={wall:.2f}s trace={trace} "
        f"run={result.run_id}"
    )


def cmd_run(args: argparse.Namespace) -> int:
    with _corpus_for(args):
        defined = load_agent(args.target)
        run_id = uuid.uuid4().hex
        journal = None
        if not (args.no_journal or args.dry_run):
            journal = _JournalPlan(Path(args.runs_dir) / f"{run_id}.db", _tree_ref(args.target))
        return _launch(args, defined, args.prompt, run_id, journal)


def cmd_resume(args: argparse.Namespace) -> int:
    """``orchestrator resume RUN``: the run's journal replayed, then the run goes on; the
    answer, summary and exit codes as for ``orchestrator run``. A journal that cannot be
    resumed (missing, in use, of another tree) exits 2 with one line."""
    with _corpus_for(args):
        return _resume(args)


def cmd_approve(args: argparse.Namespace) -> int:
    """``orchestrator approve RUN [--allow ID ...] [--deny ID ...] [--allow-all]``: decide a
    run's parked calls (recorded in its journal before anything acts on them), then go on as
    ``resume`` does; calls not named stay parked. Without a decision, it lists the pending
    calls (exit 11). A run that is not awaiting approval, or an id that names no pending call,
    is one line, exit 2."""
    from ..core.approvals import pending_of, resolve_approvals
    from ..core.journal_sqlite import read_header, read_parked

    with _corpus_for(args):
        path = _journal_path(args.run, Path(args.runs_dir))
        try:
            header = read_header(path)
            parked = read_parked(path)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        pending = pending_of(parked)
        if not pending:  # (a run killed while a call was parked has one: it may be decided)
            raise UsageError(
                f"run {header.run_id} has no call waiting for approval (it ended "
                f"{header.status or 'without recording its end'})"
            )
        wanted: dict[str, bool] = {}
        if args.allow_all:
            wanted.update((c.id, True) for c in pending)
        wanted.update((i, True) for i in args.allow)
        wanted.update((i, False) for i in args.deny)
        if not wanted:
            _print_pending(header.run_id, pending, sys.stdout, limit=None)
            return EXIT_CODES[RunStatus.AWAITING_APPROVAL]
        try:
            decisions = resolve_approvals(wanted, parked)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        return _resume(args, decisions)


_SHOWN_PENDING = 20
"""Parked calls a run's end lists on stderr (``orchestrator approve RUN`` lists them all)."""


def _print_pending(
    run_id: str, pending: list[Any], out: TextIO, limit: int | None = _SHOWN_PENDING
) -> None:
    """The parked calls, one a line (the first ``limit``), and how to decide them."""
    secrets = secret_values()
    for call in pending[:limit]:
        shown = json.dumps(call.input, ensure_ascii=False)
        if len(shown) > 600:
            shown = f"{shown[:300]} … ({len(shown) - 500:,} characters not shown) … {shown[-200:]}"
        line = f"  {call.id}  {call.agent_path}  {call.tool} {shown}"
        out.write(terminal_safe(redact(line, secrets)) + "\n")
    if limit is not None and len(pending) > limit:
        out.write(
            f"  ... and {len(pending) - limit:,} more (orchestrator approve {run_id} lists "
            "them all)\n"
        )
    out.write(f"decide with: orchestrator approve {run_id} --allow ID | --deny ID | --allow-all\n")


def _resume(args: argparse.Namespace, approvals: dict[Any, bool] | None = None) -> int:
    from ..core.journal_sqlite import read_header
    from ..core.treeref import check_tree

    path = _journal_path(args.run, Path(args.runs_dir))
    try:
        header = read_header(path)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    if not header.tree_ref:
        raise UsageError(f"the journal {path} does not say which tree it ran")
    defined = load_agent(header.tree_ref)
    try:
        check_tree(header, defined, path)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    recorded = header.options.get("cli")
    if isinstance(recorded, dict):
        _reapply(args, recorded, path)
    elif args.model is None and isinstance(header.options.get("model"), str):
        args.model = header.options["model"]  # a journal from Python: its model, if a string
    plan = _JournalPlan(path, header.tree_ref, resume=True, recorded_limits=header.options)
    plan.approvals = approvals or {}
    return _launch(args, defined, header.prompt, header.run_id, plan)


_RECORDED: dict[str, type | tuple[type, ...]] = {
    # the options of `run` that change what runs, as the journal's header keeps them
    "model": str,
    "override_model": str,
    "max_output_tokens": int,
    "max_result_chars": int,
    "max_turns": int,
    "timeout": (int, float),
    "max_depth": int,
    "concurrency": int,
    "budget_tokens": int,
    "dask": str,
    "approve": str,
}
_HIDDEN = "[REDACTED]"
_SECRET_QUERY = re.compile(
    r"([?&][^=&#]*(?:key|token|secret|password|passwd|pwd|auth|sig|signature|credential)"
    r"[^=&#]*=)([^&#]*)",
    re.IGNORECASE,
)
_USERINFO = re.compile(r"(?<=://)[^\s/@]+@")


def _recorded_options(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's options that change what runs, for the journal's header: given
    again by ``resume`` and ``approve`` unless the command gives them anew. A secret in them
    (an ``--mcp`` URL's password, a query key, a value of the environment's secrets) is not
    written down: it is kept as ``[REDACTED]``, and resuming asks for the option again."""
    out: dict[str, Any] = {}
    for name in _RECORDED:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = _hidden(value) if isinstance(value, str) else value
    if args.mcp:
        out["mcp"] = [_hidden(spec) for spec in args.mcp]
    return out


def _hidden(text: str) -> str:
    """``text`` with the secrets a command line may hold replaced by ``[REDACTED]``."""
    text = _USERINFO.sub(f"{_HIDDEN}@", text)
    text = _SECRET_QUERY.sub(lambda m: f"{m.group(1)}{_HIDDEN}", text)
    return redact(text)


def _reapply(args: argparse.Namespace, recorded: dict[str, Any], path: Path) -> None:
    """The options a journal recorded, on ``args`` where the command did not give them anew
    (``--mcp`` per server name); a value of the wrong type is one line, exit 2."""
    for name, kind in _RECORDED.items():
        if name not in recorded or getattr(args, name, None) is not None:
            continue
        value = recorded[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(
                f"{path}: the journal's header has a bad value for --{name.replace('_', '-')} "
                f"({value!r:.60})"
            )
        if isinstance(value, str) and _HIDDEN in value:
            raise UsageError(
                f"the run's --{name.replace('_', '-')} held a secret, which the journal does "
                "not keep: give the option again"
            )
        setattr(args, name, value)
    specs = recorded.get("mcp", [])
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        raise UsageError(f"{path}: the journal's header has a bad value for --mcp")
    from ..toolsets.mcp import option_server_name

    given = {option_server_name(spec) for spec in args.mcp}  # given anew, to any agent
    for spec in specs:
        if option_server_name(spec) in given:
            continue
        if _HIDDEN in spec:
            head = spec.partition("=")[0].strip()
            raise UsageError(
                f"the run's --mcp {head} held a secret, which the journal does not keep: give "
                f"--mcp {head}=... again"
            )
        args.mcp.append(spec)


class _JournalPlan:
    """The journal a CLI run writes: a new one at ``path``, or (``resume``) the one there."""

    def __init__(
        self,
        path: Path,
        tree_ref: str,
        *,
        resume: bool = False,
        recorded_limits: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self.tree_ref = tree_ref
        self.resume = resume
        self.options = recorded_limits or {}
        self.approvals: dict[Any, bool] = {}
        """A person's decisions on parked calls, recorded when the journal opens."""

    def open(
        self,
        defined: Agent,
        prompt: str,
        run_id: str,
        model: str | None,
        limits: Limits | None,
        cli: dict[str, Any] | None = None,
    ) -> SQLiteJournal:
        from ..core.journal_sqlite import SQLiteJournal
        from ..core.treeref import journal_header

        try:
            if self.resume:
                journal = SQLiteJournal.open(self.path)
                if self.approvals:  # on record before they act: never asked again
                    try:
                        journal.record_decisions(self.approvals)
                    except BaseException:
                        journal.close()
                        raise
                return journal
            header = journal_header(
                defined, prompt, run_id, tree_ref=self.tree_ref, model=model, limits=limits
            )
            if cli:
                header.options["cli"] = cli
            return SQLiteJournal.create(self.path, header)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None


def _tree_ref(target: str) -> str:
    """``FILE.py[:NAME]`` with the file's absolute path (a resume may run from elsewhere)."""
    if os.path.exists(target):
        return str(Path(target).resolve())
    head, _, name = target.rpartition(":")
    return f"{Path(head).resolve()}:{name}"


def _journal_path(run: str, runs_dir: Path) -> Path:
    """The journal ``run`` names: a file, a run id, or a unique prefix of one."""
    as_path = Path(run).expanduser()
    if as_path.is_file():
        return as_path
    found = sorted(runs_dir.glob(f"{glob.escape(run)}*.db")) if runs_dir.is_dir() else []
    if not found:
        raise UsageError(f"no journal of a run {run!r} in {runs_dir}")
    if len(found) > 1:
        names = ", ".join(p.stem for p in found[:8])
        raise UsageError(f"{run!r} matches {len(found)} journals ({names}); be more specific")
    return found[0]


_CORPUS_ENV = "ORCHESTRATOR_CORPUS"  # research.tools.CORPUS_ENV (not imported: loads the corpus)


@contextlib.contextmanager
def _corpus_for(args: argparse.Namespace) -> Iterator[None]:
    """``--corpus DIR`` as ``ORCHESTRATOR_CORPUS`` while the command runs (the research tools
    read it when they first open the corpus; a ``local:N`` Dask worker inherits it), and the
    variable as it was afterwards. A folder asked for by name (the option, or the variable set
    on purpose) must exist, or every search would fail and the run would still "complete"."""
    if args.corpus is None:
        if os.environ.get(_CORPUS_ENV):
            corpus = Path(os.environ[_CORPUS_ENV]).expanduser()  # as the corpus reads it
            if not corpus.is_dir():
                raise UsageError(f"{_CORPUS_ENV}: no such folder: {corpus}")
        yield
        return
    if not args.corpus.strip():  # an unset $DOCS: Path("") is the current folder
        raise UsageError("--corpus: empty path; name a folder")
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        raise UsageError(f"--corpus: no such folder: {corpus}")
    before = os.environ.get(_CORPUS_ENV)
    os.environ[_CORPUS_ENV] = str(corpus.resolve())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_CORPUS_ENV, None)
        else:
            os.environ[_CORPUS_ENV] = before


def _tree_with_options(
    args: argparse.Namespace, defined: Agent, journal_plan: _JournalPlan | None
) -> tuple[Agent, str | None, Limits | None, tuple[str, ...]]:
    """The tree, default model and limits the command line's options make of ``defined``, and
    the providers swapped for the offline model (a usage error for a bad option)."""
    agent = defined
    if args.mcp:  # the named agents' (or the root's), and so their inheriting descendants'
        agent = _with_mcp_servers(agent, args.mcp)
    try:
        limits = _limits_from(args)
        if (
            journal_plan is not None
            and journal_plan.resume
            and limits is None
            and "cli" not in journal_plan.options  # a journal from Python: its limits
        ):
            from ..core.treeref import recorded_limits

            limits = recorded_limits(journal_plan.options)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    model = _model_spec(args.model)
    if args.override_model is not None:  # every agent, whatever its definition names
        forced = _model_spec(args.override_model, "--override-model")
        agent = agent.map_tree(lambda a: a.replace(model=forced))
    if args.max_output_tokens is not None:  # a cap: it never raises a definition's own
        cap = args.max_output_tokens
        if cap < 1:
            raise UsageError(f"--max-output-tokens must be a positive integer, got {cap}")
        agent = agent.map_tree(lambda a: a.replace(max_output_tokens=min(a.max_output_tokens, cap)))
    agent, model, swapped = offline_providers(agent, model)
    return agent, model, limits, swapped


def _check_hosted_offline(agent: Agent, model: str | None) -> None:
    """Refuse (a usage error) a tree whose hosted tools fell to the offline model, before the
    offline note: the web research tree cannot run offline, and says what it needs."""
    from ..core.agent import AgentTree
    from ..core.hosted import check_hosted_tools, hosted_names
    from ..models.base import resolve_model

    try:
        tree = AgentTree(agent)
        if not any(hosted_names(a.tools or ()) for a in tree.by_name.values()):
            return
        models = tree.models()
        default = resolve_model(model) if model is not None else None
        check_hosted_tools(tree, models, default, tree.menus(models))
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


def _trace_name(run_id: str, runs_dir: Path, journal_plan: _JournalPlan | None) -> str:
    """The run's trace file: ``RUN_ID.jsonl``; a resumed run's goes beside the first."""
    if journal_plan is None or not journal_plan.resume:
        return f"{run_id}.jsonl"
    n = 2
    while (runs_dir / f"{run_id}.resumed{n}.jsonl").exists():
        n += 1
    return f"{run_id}.resumed{n}.jsonl"


def _launch(
    args: argparse.Namespace,
    defined: Agent,
    prompt: str,
    run_id: str,
    journal_plan: _JournalPlan | None,
) -> int:
    """Run (or resume) the tree ``defined`` with the command line's options applied."""
    from ..toolsets.mcp import option_server_name
    from ..tracing.setup import configure_tracing

    mcp_names = [option_server_name(spec) for spec in args.mcp]
    agent, model, limits, swapped = _tree_with_options(args, defined, journal_plan)
    offline = bool(swapped)
    err = sys.stderr
    if offline and not args.dry_run:  # one line, not the offline note and then the refusal
        _check_hosted_offline(agent, model)
    if offline and not (args.json or args.quiet):
        err.write(_offline_note(swapped))
    if args.dry_run:
        return _dry_run(agent, model, limits, args)
    runner = _dask_runner(getattr(args, "dask", None))
    runs_dir = Path(args.runs_dir)
    trace_name = _trace_name(run_id, runs_dir, journal_plan)
    try:
        # a provider of the run's own, not the global one: main() may run again in this
        # process, and a program's global provider (and its processors) is not the CLI's
        setup = configure_tracing(run_file=runs_dir / trace_name, keep_file=True, set_global=False)
    except ConfigurationError as exc:  # e.g. an OTEL_* variable with a value we cannot use
        raise UsageError(f"tracing: {exc}") from None
    try:  # the setup shut down on every way out (a second shutdown does nothing)
        # after the runs folder was checked (its trace file goes there too)
        journal = (
            None
            if journal_plan is None
            else journal_plan.open(defined, prompt, run_id, model, limits, _recorded_options(args))
        )
        quiet = args.quiet or args.json
        progress = "none" if quiet else ("live" if sys.stderr.isatty() else "plain")
        started = time.perf_counter()
        result: RunResult | None = None
        crash: BaseException | None = None
        kept = False
        try:
            result = trio.run(
                lambda: _run_tree(
                    agent,
                    prompt,
                    model=model,
                    limits=limits,
                    run_id=run_id,
                    journal=journal,
                    progress=progress,
                    out=err,
                    log_dir=runs_dir,  # an MCP server's stderr log beside the trace
                    runner=runner,
                    approve=_approve_mode(args),
                    tracer_provider=setup.tracer_provider,
                )
            )
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a bug, ours or a BaseException of user code: reported
            crash = exc
        finally:
            if journal is not None:
                if journal.resuming and not quiet:  # what it replayed, re-ran and ran new
                    err.write(journal.replay.describe() + "\n")
                kept = bool(journal_plan and journal_plan.resume) or _recorded(journal)
                journal.close()
                if result is None and not kept:
                    journal.discard()  # nothing recorded: nothing to resume
        if crash is not None or result is None:
            return _crashed(crash, args, run_id, journal.path if journal and kept else None)
        wall = time.perf_counter() - started
        if _mcp_did_not_start(result, mcp_names):  # bad input on the command line: exit 2
            raise UsageError(str(result.error))
        return _report(result, args, wall, setup, offline)

    finally:
        setup.shutdown()


def _recorded(journal: SQLiteJournal) -> bool:
    """Whether the journal recorded anything of the run (a response or a tool call): then a
    crash must not delete it. Kept when it cannot be read (better a journal too many)."""
    try:
        return any(journal.counts().values())
    except Exception:
        return True


def _crashed(
    crash: BaseException | None, args: argparse.Namespace, run_id: str, journal: Path | None
) -> int:
    """A run that ended by an internal error: its traceback (for a bug report), then one line
    saying so and what became of the journal; the exit code of status ``error``."""
    import traceback

    err = sys.stderr
    secrets = secret_values()
    if crash is not None:
        text = "".join(traceback.format_exception(crash))
        err.write(terminal_safe(redact(text, secrets), multiline=True))
    what = f"{type(crash).__name__}: {crash}" if crash is not None else "no result"
    reason = f"internal error ({what})"
    if journal is not None:
        where = f"the journal is kept: resume with `orchestrator resume {run_id}`"
    else:
        where = "nothing was recorded, so no journal is kept"
    if args.json:
        payload = {"run_id": run_id, "status": RunStatus.ERROR.value, "error": reason}
        _write_stdout(json.dumps(_redacted(payload, secrets)) + "\n")
    err.write(terminal_safe(redact(f"run ended with error: {reason}; {where}", secrets)) + "\n")
    return EXIT_CODES[RunStatus.ERROR]


def _report(
    result: RunResult, args: argparse.Namespace, wall: float, setup: TracingSetup, offline: bool
) -> int:
    """Write the answer, flush the spans, then the summary; the exit code."""
    err = sys.stderr
    # an endpoint's user and password (https://user:token@host) are not for a log
    where = without_userinfo(setup.endpoint) if setup.endpoint else "not exported"
    trace = str(setup.trace_file) if setup.trace_file else where
    if setup.endpoint and setup.trace_file:  # sent, and kept for `trace export` to re-send
        trace = f"{where} file={setup.trace_file}"
    # The answer goes out before the spans are flushed: a slow or dead collector can hold the
    # flush for seconds, and a Ctrl-C then must not cost the answer (only unsent spans).
    code = EXIT_CODES[result.status]
    try:
        _write_answer(
            result,
            args,
            wall,
            trace.split(" file=", 1)[0],
            offline,
            str(setup.trace_file) if setup.trace_file else None,
        )
        setup.shutdown()
    except KeyboardInterrupt:
        err.write("trace export interrupted: spans not yet sent are lost\n")
        code = EXIT_CODES[RunStatus.CANCELLED]
    if result.status is not RunStatus.COMPLETED and not args.json:
        err.write(terminal_safe(f"run ended with {result.status.value}: {result.error}") + "\n")
        if result.pending_approvals:
            _print_pending(result.run_id, result.pending_approvals, err)
    if not (args.quiet or args.json):
        err.write(terminal_safe(_summary(result, wall, trace)) + "\n")
    return code


def _approve_mode(args: argparse.Namespace) -> str:
    """``--approve``: as given, else ``ask`` when stdin is a terminal, else ``none``."""
    mode = getattr(args, "approve", None)
    if isinstance(mode, str):
        return mode
    try:
        return "ask" if sys.stdin is not None and sys.stdin.isatty() else "none"
    except (OSError, ValueError):  # a closed stdin
        return "none"


def _dask_runner(address: str | None) -> ChildRunner | None:
    """``--dask ADDRESS``: the root's children on a Dask cluster (a bad value exits 2)."""
    if address is None:
        return None
    try:
        from ..dask import DaskRunner
    except ImportError:
        raise UsageError("--dask needs Dask: pip install 'orchestrator[dask]'") from None
    try:
        return DaskRunner(address)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


def _write_answer(
    result: RunResult,
    args: argparse.Namespace,
    wall: float,
    trace: str,
    offline: bool,
    trace_file: str | None = None,
) -> None:
    """The run's answer on stdout: its text (a typed answer's JSON, indented), or (``--json``)
    the whole result.

    Secrets are redacted from both. On a terminal the answer is neutralized as stderr is
    (control characters shown as escapes: a model's text must not drive the terminal); piped or
    redirected it is written as the model wrote it. JSON escapes every control character itself.
    """
    secrets = secret_values()
    typed = result.output_json
    if args.json:
        payload = {
            "run_id": result.run_id,
            "status": result.status.value,
            # a typed answer as its JSON value (an object, a list, a number...)
            "output": result.output if typed is None else json.loads(typed),
            "error": result.error,
            "agents": result.agents,
            "turns": result.total_turns,
            "usage": result.usage.to_dict(),
            "wall_s": round(wall, 3),
            "trace": trace,
            "trace_file": trace_file,  # kept also when the spans went to an OTLP endpoint
            "offline": offline,
            "tree": result.to_dict(messages=bool(getattr(args, "transcripts", False))),
        }
        if result.pending_approvals:
            payload["pending_approvals"] = [p.to_dict() for p in result.pending_approvals]
        _write_stdout(json.dumps(_redacted(payload, secrets)) + "\n")
    elif typed is not None:  # a typed answer: its JSON, indented for a reader
        value = _redacted(json.loads(typed), secrets)
        _write_stdout(_for_stdout(json.dumps(value, indent=2, ensure_ascii=False), secrets))
    elif result.output:
        _write_stdout(_for_stdout(redact(result.output, secrets).rstrip(), secrets))


def _for_stdout(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` as a line (or lines) for stdout: neutralized on a terminal, raw otherwise."""
    try:
        terminal = sys.stdout is not None and sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stdout
        terminal = False
    if terminal:
        text = terminal_safe(text, multiline=True, secrets=secrets)
    return text + "\n"


def _redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` (plain JSON data) with every string in it, keys included, redacted."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {redact(k, secrets): _redacted(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v, secrets) for v in value]
    return value


def _write_stdout(text: str) -> None:
    """Write the result; a reader that went away (``| head``) or a closed stdout (``>&-``)
    does not change the run's exit code nor lose the summary on stderr."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_to_devnull()  # later flushes (at exit too) must not raise again
    except (OSError, ValueError):  # closed or unusable: nothing more to do with it
        pass


def _model_spec(name: str | None, flag: str = "--model") -> str | None:
    """``claude-haiku-5-5`` means ``anthropic:claude-haiku-5-5``; full specs pass through. A
    bare name no provider claims (``gpt-4o``) is refused, listing what is known: it would
    otherwise become an Anthropic model the API refuses, after retries."""
    if name is None or ":" in name or name == "offline":
        return name
    if name.startswith("claude"):
        return f"anthropic:{name}"
    from ..models.anthropic import CURRENT_MODELS

    raise UsageError(
        f"{flag} {name}: no provider claims a bare model name like this one; name its "
        f"provider (openai:{name}, ollama:{name}, anthropic:<name>), or use a Claude model "
        f"({', '.join(CURRENT_MODELS)}) or offline"
    )


def _with_mcp_servers(agent: Agent, specs: list[str]) -> Agent:
    """The tree with the ``--mcp`` servers added to the tools of the agents they name (the
    root when a value names none): one server (one connection per run) per value, shared by
    its agent and the descendants that inherit its tools. An agent the tree does not have, or
    one that inherits its tools (a server of its own would replace them), is a usage error,
    found before any server starts."""
    from ..toolsets.mcp import parse_mcp_option

    try:
        parsed = [parse_mcp_option(spec) for spec in specs]
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    defined: dict[str, Agent] = {}  # not an AgentTree: its policy check needs the servers' tools
    pending = [agent]
    while pending:
        a = pending.pop()
        if defined.setdefault(a.name, a) is a:
            pending.extend(s for s in a.subagents if isinstance(s, Agent) and s.name not in defined)
    names = [server.name for _, server in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # one toolset name per tree (its tools' prefix, its log file)
        raise UsageError(f"--mcp {twice[0]}: two servers have this name")
    given: dict[str, list[MCPServer]] = {}
    for target, server in parsed:
        held_by = target or agent.name
        holder = defined.get(held_by)
        if holder is None:
            raise UsageError(
                f"--mcp {target}:{server.name}: the tree has no agent named {target!r} (its "
                f"agents: {', '.join(sorted(defined))})"
            )
        if holder is not agent and holder.tools is None:
            raise UsageError(
                f"--mcp {target}:{server.name}: agent {target!r} inherits its parent's tools "
                "(tools=None), which a server of its own would replace; name the agent it "
                "inherits them from, or give it a tools list in the tree's file"
            )
        given.setdefault(held_by, []).append(server)

    def add(a: Agent) -> Agent:
        servers = given.get(a.name)
        if not servers:
            return a
        return a.replace(tools=[*(a.tools or ()), *a.toolsets, *servers])

    try:
        return agent.map_tree(add)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


def _mcp_did_not_start(result: RunResult, names: list[str]) -> bool:
    """Whether the run ended before its first model call because a ``--mcp`` server did not
    start (the command line's input, like a file that is not there)."""
    return (
        result.status is RunStatus.ERROR
        and result.total_turns == 0
        and any((result.error or "").startswith(f"MCP server {n!r} ") for n in names)
    )


def _dry_run(
    agent: Agent, model: str | None, limits: Limits | None, args: argparse.Namespace
) -> int:
    from .dryrun import output_types, worst_case

    try:
        report = worst_case(agent, limits, default_model=model)
        report.update(_toolset_report(agent, Path(args.runs_dir), args.mcp))
        outputs = output_types(agent)
    except ConfigurationError as exc:  # an invalid tree: one line, exit 2, like a real run
        raise UsageError(str(exc)) from None
    if args.json:  # JSON has no Infinity (strict parsers refuse it): unbounded is null
        finite = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in report.items()
        }
        finite["outputs"] = outputs
        sys.stdout.write(json.dumps(_redacted(finite, secret_values()), allow_nan=False) + "\n")
    else:
        for key, value in report.items():
            sys.stdout.write(terminal_safe(f"{key}: {value}") + "\n")
        for name, output in outputs.items():  # "Findings {summary, claims} (tool mode)"
            shown = "text" if output["mode"] == "text" else output["type"]
            if output["fields"]:
                shown += f" {{{', '.join(output['fields'])}}}"
            if output["mode"] != "text":
                shown += f" ({output['mode']} mode)"
            if output["validators"]:
                shown += f", checked by {', '.join(output['validators'])}"
            sys.stdout.write(terminal_safe(f"output of {name}: {shown}") + "\n")
    return 0


def _toolset_report(agent: Agent, runs_dir: Path, specs: list[str]) -> dict[str, Any]:
    """Who holds what: each agent's tools and their policy, and the agents holding each MCP
    server (from the tree's file or an ``--mcp`` value). Listing a server's tools means
    starting it, as a run would (and stopping it)."""
    from ..core.agent import AgentTree
    from ..core.toolset import list_toolsets
    from ..toolsets.mcp import option_server_name
    from .dryrun import who_holds_what

    tree = AgentTree(agent)
    report: dict[str, Any] = {}
    resolved: dict[str, Any] = {}
    if tree.toolsets:
        resolved, failure = trio.run(list_toolsets, tree, runs_dir)
        if failure is not None:
            raise UsageError(failure)
        started = len({ts.source for ts in tree.toolsets})
        report["toolsets"] = f"started {started} to list their tools"
    flags = {option_server_name(s): s.partition("=")[0].strip() for s in specs}
    report.update(who_holds_what(tree, resolved, flags))
    return report
