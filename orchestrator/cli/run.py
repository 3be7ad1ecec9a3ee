"""``orchestrator run FILE.py[:NAME] "prompt"``: load an agent, run its tree, print the answer.

:func:`load_agent` loads an :class:`~orchestrator.Agent` (default name ``agent``); the run shows
live progress, prints the final answer and one summary line, and writes the trace (OTLP when
``OTEL_EXPORTER_OTLP_*`` is set, else OTLP/JSON lines under ``runs/``). Without
``ANTHROPIC_API_KEY``, agents that name an anthropic model run on the offline model
(:func:`offline_fallback`). ``--dry-run`` prints the tree's worst case instead (:mod:`.dryrun`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

import trio

from ..core.agent import Agent
from ..core.errors import ConfigurationError
from ..core.limits import Limits
from ..core.result import RunResult, RunStatus
from .main import EXIT_CODES, UsageError, _stdout_to_devnull

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

    async with open_run(
        agent,
        prompt,
        model=model,
        limits=limits,
        run_id=run_id,
        event_buffer=4096 if progress != "none" else 0,
    ) as handle:
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
            async with trio.open_nursery() as watcher:
                watcher.start_soon(_watch_sigint, handle)
                result = await handle.result()
                watcher.cancel_scope.cancel()
        return result


async def _watch_sigint(handle: Any) -> None:
    """First Ctrl-C (or SIGTERM: a timeout, docker stop, a CI cancel) cancels the tree,
    keeping what finished and ending every span; a second exits at once."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        count = 0
        async for signum in signals:
            count += 1
            if count == 1:
                # sys.stderr at this moment, not the stream saved before: while the live view
                # is up it is rich's proxy, which prints above the tree instead of under it
                # (where the next redraw would erase the line)
                again = "Ctrl-C again" if signum == signal.SIGINT else "send it again"
                sys.stderr.write(f"\ncancelling the run ({again} to exit at once)...\n")
                sys.stderr.flush()
                handle.cancel()
            else:
                os._exit(EXIT_CODES[RunStatus.CANCELLED])


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
    trace = str(setup.trace_file) if setup.trace_file else (setup.endpoint or "not exported")
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
        err.write(f"run ended with {result.status.value}: {result.error}\n")
    if not (args.quiet or args.json):
        err.write(_summary(result, wall, trace) + "\n")
    return code


def _write_answer(
    result: RunResult, args: argparse.Namespace, wall: float, trace: str, offline: bool
) -> None:
    """The run's answer on stdout: its text, or (``--json``) the whole result."""
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
        _write_stdout(json.dumps(payload) + "\n")
    elif result.output:
        _write_stdout(result.output.rstrip() + "\n")


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
        sys.stdout.write(json.dumps(finite, allow_nan=False) + "\n")
    else:
        for key, value in report.items():
            sys.stdout.write(f"{key}: {value}\n")
    return 0
