"""``orchestrator run FILE.py[:NAME] "prompt"``: load an agent, run its tree, print the answer.

:func:`load_agent` loads an :class:`~orchestrator.Agent` (default name ``agent``); the run shows
live progress, prints the final answer and one summary line, and writes the trace (OTLP when
``OTEL_EXPORTER_OTLP_*`` is set, else OTLP/JSON lines under ``runs/``). Without
``ANTHROPIC_API_KEY``, agents that name an anthropic model run on the offline model
(:func:`offline_fallback`). ``--dry-run`` prints the tree's worst case instead (:mod:`.dryrun`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

import trio

from ..core.agent import Agent
from ..core.cancellation import SignalInterrupt, in_tool_code
from ..core.errors import ConfigurationError
from ..core.limits import Limits
from ..core.redact import redact, secret_values
from ..core.result import RunResult, RunStatus
from ..core.terminal import terminal_safe
from .main import EXIT_CODES, UsageError, _stdout_to_devnull, without_userinfo

__all__ = ["cmd_run", "load_agent", "offline_fallback"]


def load_agent(target: str) -> Agent:
    """The Agent named by ``FILE.py[:NAME]`` (default name ``agent``)."""
    path_text, name = target, ""
    if not os.path.exists(target):  # NAME after the last ":" (a folder or a drive may hold one)
        head, _, tail = target.rpartition(":")
        if head and (os.path.isfile(head) or tail.isidentifier()):
            path_text, name = head, tail
            if name and not name.isidentifier():
                raise UsageError(f"{name!r} is not a Python name (in {target})")
    name = name or "agent"
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    # one name per file, so two files of one stem loaded in one process stay apart
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_orchestrator_user_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    # registered like any import: dataclasses and pydantic resolve string annotations
    # (``from __future__ import annotations``) through sys.modules
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    loaded = False
    try:
        spec.loader.exec_module(module)
        loaded = True
    except ConfigurationError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:
        raise UsageError(f"{path} called sys.exit({exc.code!r}) while being imported") from None
    finally:
        sys.path.pop(0)
        if not loaded:  # a file that failed to load leaves no module behind
            sys.modules.pop(module_name, None)
    if not hasattr(module, name):
        agents = [k for k, v in vars(module).items() if isinstance(v, Agent)]
        raise UsageError(
            f"{path} has no {name!r} (agents defined there: {', '.join(agents) or 'none'})"
        )
    obj = getattr(module, name)
    if not isinstance(obj, Agent):
        raise UsageError(f"{path}:{name} is a {type(obj).__name__}, not an Agent")
    return obj


def offline_fallback(agent: Agent, default_model: str | None) -> tuple[Agent, str | None, bool]:
    """Without an API key, swap anthropic models for the offline model; report whether it did.

    A model object given its own key (``AnthropicModel(api_key=...)``, say from a secret store)
    is kept: it can call the API, and a run that quietly answered offline would still "succeed".
    """
    if os.environ.get("ANTHROPIC_API_KEY"):
        return agent, default_model, False
    swapped = False

    def swap(a: Agent) -> Agent:
        nonlocal swapped
        if isinstance(a.model, str) and a.model.startswith("anthropic:"):
            swapped = True
            return a.replace(model="offline")
        if (
            a.model is not None
            and getattr(a.model, "provider", "") == "anthropic"
            and not getattr(a.model, "has_api_key", False)
        ):
            swapped = True
            return a.replace(model="offline")
        return a

    agent = agent.map_tree(swap)
    if default_model is None or default_model.startswith("anthropic:"):
        swapped = swapped or default_model is not None
        default_model = "offline"
    return agent, default_model, swapped


def _limits_from(args: argparse.Namespace) -> Limits | None:
    values = {
        "max_turns": args.max_turns,
        "timeout": args.timeout,
        "max_depth": args.max_depth,
        "max_concurrency": args.concurrency,
        "token_budget": args.budget_tokens,
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
) -> RunResult:
    from ..core.run import open_run
    from .progress import follow_events

    with _SignalGuard(live=progress == "live") as guard:
        async with open_run(
            agent,
            prompt,
            model=model,
            limits=limits,
            run_id=run_id,
            event_buffer=4096 if progress != "none" else 0,
        ) as handle:
            guard.watch(handle)
            async with trio.open_nursery() as nursery:
                if progress != "none":  # ends by itself when the run closes its event channel
                    nursery.start_soon(
                        lambda: follow_events(
                            handle.events,
                            live=progress == "live",
                            stream=out,
                            outcome=handle.result,
                        )
                    )
                result = await handle.result()
        return result


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

    def __enter__(self) -> _SignalGuard:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only: nothing to guard here
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_alarm)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._previous:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)

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
    from ..tracing.setup import configure_tracing

    # read by the research tools when they first open the corpus; a folder asked for by name
    # (the option, or the variable set on purpose) must exist, or every search would fail
    # and the run would still "complete"
    if args.corpus is not None:
        if not args.corpus.strip():  # an unset $DOCS: Path("") is the current folder
            raise UsageError("--corpus: empty path; name a folder")
        corpus = Path(args.corpus)
        if not corpus.is_dir():
            raise UsageError(f"--corpus: no such folder: {corpus}")
        os.environ["ORCHESTRATOR_CORPUS"] = str(corpus.resolve())
    elif os.environ.get("ORCHESTRATOR_CORPUS"):
        corpus = Path(os.environ["ORCHESTRATOR_CORPUS"]).expanduser()  # as the corpus reads it
        if not corpus.is_dir():
            raise UsageError(f"ORCHESTRATOR_CORPUS: no such folder: {corpus}")
    agent = load_agent(args.target)
    try:
        limits = _limits_from(args)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    model = _model_spec(args.model)
    if args.override_model is not None:  # every agent, whatever its definition names
        forced = _model_spec(args.override_model)
        agent = agent.map_tree(lambda a: a.replace(model=forced))
    agent, model, offline = offline_fallback(agent, model)
    err = sys.stderr
    if offline and not (args.json or args.quiet):
        err.write(
            "No ANTHROPIC_API_KEY set: running on the offline model (deterministic, no LLM).\n"
        )
    if args.dry_run:
        return _dry_run(agent, model, limits, args)
    run_id = uuid.uuid4().hex
    runs_dir = Path(args.runs_dir)
    try:
        setup = configure_tracing(run_file=runs_dir / f"{run_id}.jsonl")
    except ConfigurationError as exc:  # e.g. an OTEL_* variable with a value we cannot use
        raise UsageError(f"tracing: {exc}") from None
    quiet = args.quiet or args.json
    progress = "none" if quiet else ("live" if sys.stderr.isatty() else "plain")
    started = time.perf_counter()
    result: RunResult | None = None
    try:
        result = trio.run(
            lambda: _run_tree(
                agent,
                args.prompt,
                model=model,
                limits=limits,
                run_id=run_id,
                progress=progress,
                out=err,
            )
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if result is None:  # no answer to keep safe first
            setup.shutdown()
    wall = time.perf_counter() - started
    # an endpoint's user and password (https://user:token@host) are not for a log
    where = without_userinfo(setup.endpoint) if setup.endpoint else "not exported"
    trace = str(setup.trace_file) if setup.trace_file else where
    # The answer goes out before the spans are flushed: a slow or dead collector can hold the
    # flush for seconds, and a Ctrl-C then must not cost the answer (only unsent spans).
    code = EXIT_CODES[result.status]
    try:
        _write_answer(result, args, wall, trace, offline)
        setup.shutdown()
    except KeyboardInterrupt:
        err.write("trace export interrupted: spans not yet sent are lost\n")
        code = EXIT_CODES[RunStatus.CANCELLED]
    if result.status is not RunStatus.COMPLETED and not args.json:
        err.write(terminal_safe(f"run ended with {result.status.value}: {result.error}") + "\n")
    if not (args.quiet or args.json):
        err.write(terminal_safe(_summary(result, wall, trace)) + "\n")
    return code


def _write_answer(
    result: RunResult, args: argparse.Namespace, wall: float, trace: str, offline: bool
) -> None:
    """The run's answer on stdout: its text, or (``--json``) the whole result.

    Secrets are redacted from both (the answer is written as the model wrote it otherwise: no
    character of it is escaped); JSON escapes every control character itself.
    """
    secrets = secret_values()
    if args.json:
        payload = {
            "run_id": result.run_id,
            "status": result.status.value,
            "output": result.output,
            "error": result.error,
            "agents": result.agents,
            "turns": result.total_turns,
            "usage": result.usage.to_dict(),
            "wall_s": round(wall, 3),
            "trace": trace,
            "offline": offline,
            "tree": result.to_dict(),
        }
        _write_stdout(json.dumps(_redacted(payload, secrets)) + "\n")
    elif result.output:
        _write_stdout(redact(result.output, secrets).rstrip() + "\n")


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
        _stdout_to_devnull()  # later flushes (at exit too) must not raise again
    except (OSError, ValueError):  # closed or unusable: nothing more to do with it
        pass


def _model_spec(name: str | None) -> str | None:
    """``claude-haiku-5-5`` means ``anthropic:claude-haiku-5-5``; full specs pass through."""
    if name is not None and ":" not in name and name != "offline":
        return f"anthropic:{name}"
    return name


def _dry_run(
    agent: Agent, model: str | None, limits: Limits | None, args: argparse.Namespace
) -> int:
    from .dryrun import worst_case

    try:
        report = worst_case(agent, limits, default_model=model)
    except ConfigurationError as exc:  # an invalid tree: one line, exit 2, like a real run
        raise UsageError(str(exc)) from None
    if args.json:  # JSON has no Infinity (strict parsers refuse it): unbounded is null
        finite = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in report.items()
        }
        sys.stdout.write(json.dumps(_redacted(finite, secret_values()), allow_nan=False) + "\n")
    else:
        for key, value in report.items():
            sys.stdout.write(terminal_safe(f"{key}: {value}") + "\n")
    return 0
