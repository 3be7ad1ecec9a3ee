"""The ``orchestrator`` command: run agent trees defined in Python, and look at their traces.

This module holds the parser and :func:`main`, which keeps a failing stderr from ending the run;
the subcommands are :mod:`.run` and :mod:`.trace`, each imported only when it runs. What they
share with this module (the exit codes, the usage error, the stream helpers) is in
:mod:`._common`, so no command imports this one.

Exit codes: 0 completed; 1 error; 2 bad usage or input (file, name, tree); 3 max_turns;
4 timeout; 5 budget_exceeded; 6 repeat_guard; 7 error_threshold; 8 refusal;
9 context_exceeded; 10 invalid_output; 11 awaiting_approval; 130 cancelled (Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO, cast

from .. import __version__
from ..core.terminal import terminal_safe
from ._common import DEFAULT_RUNS_DIR, EXIT_CODES, EXIT_USAGE, UsageError, to_devnull

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["EXIT_CODES", "main"]


class _Diagnostics:
    """``sys.stderr`` while the CLI runs: progress, notices and the summary are diagnostics,
    so a stderr that fails (``2>&1 >out | head -1``: its reader went away; ``2>&-``: closed)
    silences them instead of raising in the middle of the run, which would cancel it."""

    def __init__(self, stream: TextIO | None) -> None:
        self._devnull: TextIO | None = None  # opened here (closed by close_own)
        self._stream: TextIO = stream if stream is not None else self._null()

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as exc:
            self._failed(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """Silence a stream that is gone; a passing failure (a full non-blocking pipe, an
        unencodable character) costs only the text that failed."""
        gone = isinstance(exc, BrokenPipeError) or (
            isinstance(exc, OSError) and exc.errno == errno.EBADF
        )
        if gone or (type(exc) is ValueError and "closed file" in str(exc)):
            self._silence()

    def _silence(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # (a closed stream has no fd left)
            to_devnull(self._stream)
        self._stream = self._null()

    def _null(self) -> TextIO:
        if self._devnull is None:
            self._devnull = open(os.devnull, "w")  # noqa: SIM115
        return self._devnull

    def close_own(self) -> None:
        """Close what this wrapper opened (the null device), never the stream it wraps: when
        :func:`main` returns, ``sys.stderr`` is that stream again."""
        if self._devnull is not None:
            self._devnull.close()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ... as the stream's
        return getattr(self._stream, name)


class _Parser(argparse.ArgumentParser):
    """argparse's messages (usage, ``unrecognized arguments: ...``) quote the command line as
    it was typed: they reach the terminal through :func:`terminal_safe` like every other
    diagnostic."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            super()._print_message(terminal_safe(message, multiline=True), file)


class _TerminalLogHandler(logging.Handler):
    """The handler of last resort while the CLI runs (log records when the program configured
    no logging: the library's warnings, a flush that failed): as Python's own, the message of
    each WARNING or worse on the current ``sys.stderr``, but redacted and neutralized."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(terminal_safe(self.format(record), multiline=True) + "\n")
        except Exception:
            self.handleError(record)


_TREE_MODULES = "_orchestrator_user_"  # the names load_tree_file gives the files it loads


@contextlib.contextmanager
def _tree_modules_unloaded() -> Iterator[None]:
    """The tree files a command loads are modules of their own in ``sys.modules`` (so string
    annotations resolve while they run): gone again when it returns, and one the program had
    loaded before is back as it was, so a program calling :func:`main` again and again does not
    keep every tree it ran (and all they hold) alive."""
    before = {n: m for n, m in list(sys.modules.items()) if n.startswith(_TREE_MODULES)}
    try:
        yield
    finally:
        for name in [n for n in list(sys.modules) if n.startswith(_TREE_MODULES)]:
            if name in before:
                sys.modules[name] = before[name]
            else:
                del sys.modules[name]


@contextlib.contextmanager
def _safe_last_resort() -> Iterator[None]:
    saved = logging.lastResort
    logging.lastResort = _TerminalLogHandler()
    try:
        yield
    finally:
        logging.lastResort = saved


def _exit_codes_text() -> str:
    """The exit codes, from the table the command uses (a new status is listed at once)."""
    codes = sorted([*((c, s.value) for s, c in EXIT_CODES.items()), (EXIT_USAGE, "bad usage")])
    return "exit codes: " + ", ".join(f"{code} {name}" for code, name in codes)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="orchestrator", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"orchestrator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="run an agent tree defined in a Python file", epilog=_exit_codes_text()
    )
    run.add_argument("target", help="FILE.py or FILE.py:NAME (default NAME: agent)")
    run.add_argument("prompt", help="the task for the root agent")
    resume = sub.add_parser(
        "resume",
        help="continue a run that was killed, cancelled or timed out, from its journal",
        epilog=_exit_codes_text(),
    )
    resume.add_argument("run", help="run id (a unique prefix of one) or journal file (.db)")
    approve = sub.add_parser(
        "approve",
        help="decide the calls a run parked (--approve defer), then go on as resume does",
    )
    approve.add_argument("run", help="run id (a unique prefix of one) or journal file (.db)")
    approve.add_argument(
        "--allow", action="append", default=[], metavar="ID", help="run this parked call"
    )
    approve.add_argument(
        "--deny", action="append", default=[], metavar="ID", help="decline this parked call"
    )
    approve.add_argument("--allow-all", action="store_true", help="run every parked call")
    for p in (run, resume, approve):
        _add_run_options(p)

    trace = sub.add_parser("trace", help="look at saved traces")
    _add_trace_commands(trace)
    _add_runs_commands(sub)
    return parser


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``resume`` share (given to ``resume``, they apply from then on)."""
    run.add_argument(
        "--model",
        help="default model for agents without one (e.g. claude-sonnet-5-5, openai:gpt-4.1-mini, "
        "ollama:llama3.2, offline)",
    )
    run.add_argument(
        "--override-model",
        help="model for every agent, replacing what the definitions name (e.g. offline, "
        "openai:MODEL with OPENAI_BASE_URL for a local server)",
    )
    run.add_argument(
        "--max-output-tokens",
        type=int,
        help="cap on every agent's output tokens per call (for small local models)",
    )
    run.add_argument(
        "--max-result-chars",
        type=int,
        help="characters per tool result (for agents that set none)",
    )
    run.add_argument(
        "--max-turns", type=int, help="model turns per agent (for agents that set none)"
    )
    run.add_argument("--timeout", type=float, help="seconds for the whole run")
    run.add_argument(
        "--max-depth", type=int, help="deepest depth a subagent may have (where not set)"
    )
    run.add_argument("--concurrency", type=int, help="model calls in flight")
    run.add_argument("--budget-tokens", type=int, help="billed tokens for the whole tree")
    run.add_argument("--json", action="store_true", help="print one JSON result object on stdout")
    run.add_argument(
        "--transcripts",
        action="store_true",
        help="with --json: every agent's transcript in the tree (secrets redacted, nothing else)",
    )
    run.add_argument("--quiet", action="store_true", help="print only the answer")
    run.add_argument(
        "--approve",
        choices=["ask", "all", "none", "defer"],
        help="calls behind a 'confirm' policy: ask on the terminal, one call at a time (the "
        "default when stdin is a terminal), approve all, decline all (the default otherwise), "
        "or defer: park them, end the run awaiting approval (exit 11), and decide later with "
        "`orchestrator approve`",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="validate the tree and print its worst case"
    )
    run.add_argument(
        "--corpus",
        help="folder of .md/.txt/.rst/.html files for the research tools to search (files over "
        "8 MiB and names holding '#' are not indexed)",
    )
    run.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="[AGENT:]NAME=COMMAND|URL",
        help="an MCP server whose tools an agent gets: AGENT (every agent of that name), or the "
        "root without AGENT:, and the subagents that inherit its tools; NAME=COMMAND starts it "
        "over stdio (split as a shell would), NAME=URL connects over streamable HTTP; "
        "repeatable",
    )
    run.add_argument(
        "--runs-dir", default=str(DEFAULT_RUNS_DIR), help="where trace files and journals go"
    )
    run.add_argument(
        "--no-journal",
        action="store_true",
        help="do not journal the run (runs/<run id>.db), so it cannot be resumed",
    )
    run.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run the root's children (and their subtrees) on a Dask cluster: tcp://HOST:PORT, "
        "tls://HOST:PORT, or local:N for N worker processes on 127.0.0.1 (needs "
        "orchestrator[dask])",
    )


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _duration(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` (or a bare number of seconds) as seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 7d, 12h, 30m or 45s, got {text!r}"
        )
    return float(m[1]) * _UNITS[m[2] or "s"]


def _add_runs_commands(sub: Any) -> None:
    runs = sub.add_parser(
        "runs", help="list the runs of the runs folder (journals and traces): id, status, tree"
    )
    runs.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))
    rsub = runs.add_subparsers(dest="runs_command")
    prune = rsub.add_parser(
        "prune", help="delete old runs' journals, traces and MCP logs, saying what it deleted"
    )
    prune.add_argument(
        "--older-than",
        type=_duration,
        required=True,
        metavar="DURATION",
        help="runs whose files last changed longer ago than this (7d, 12h, 30m, 45s)",
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    prune.add_argument(
        "--include-pending",
        action="store_true",
        help="delete runs awaiting approval too (a running run is always kept)",
    )
    prune.add_argument("--runs-dir", default=argparse.SUPPRESS)  # either side of "prune"


def _add_trace_commands(trace: argparse.ArgumentParser) -> None:
    tsub = trace.add_subparsers(dest="trace_command", required=True)
    tlist = tsub.add_parser("list", help="list saved runs, newest first")
    tshow = tsub.add_parser("show", help="draw a run's trace as a tree with a waterfall")
    tshow.add_argument("run", nargs="?", help="run id (prefix) or trace file; default: newest")
    tshow.add_argument(
        "--depth",
        type=_depth,
        metavar="N",
        help="fold agents at depth N (the root is 0) into one row each",
    )
    tshow.add_argument(
        "--span",
        metavar="ID|PATH",
        help="show one span whole (attributes, events, captured messages): a span id or a "
        "unique prefix of one, or an agent's path (lead/researcher#2)",
    )
    texport = tsub.add_parser("export", help="send a saved trace to an OTLP endpoint")
    texport.add_argument("run", help="run id (prefix) or trace file")
    texport.add_argument(
        "--endpoint",
        "--to",
        dest="endpoint",
        required=True,
        help="OTLP endpoint, e.g. http://127.0.0.1:4318 (--to is the same option)",
    )
    texport.add_argument(
        "--protocol",
        choices=["http/protobuf", "grpc"],
        help="default: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else http/protobuf",
    )
    for p in (tlist, tshow, texport):
        p.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR))


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The subcommand's entry point, imported only when it runs (``run`` needs no trace reader,
    ``--help`` neither)."""
    if name == "run":
        from .run import cmd_run

        return cmd_run
    if name == "resume":
        from .run import cmd_resume

        return cmd_resume
    if name == "approve":
        from .run import cmd_approve

        return cmd_approve
    if name == "runs":
        from .runs import cmd_runs

        return cmd_runs
    from .trace import cmd_trace

    return cmd_trace


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``orchestrator`` console script: the exit code.

    Re-entrant, so a program (or a test) may call it again and again in one process: it
    returns argparse's exit code (``--help``, ``--version``, bad usage) instead of raising
    SystemExit, and leaves the process as it found it: ``sys.stderr``, ``logging.lastResort``,
    signal handlers and the interval timer (:class:`~.run._SignalGuard`), the environment
    (``--corpus``), the global tracer provider (a run's spans go through a provider of its
    own), and ``sys.modules`` as to the tree files it loaded (:func:`_tree_modules_unloaded`).
    Not restored: a stdout or stderr whose reader went away, whose file descriptor points at
    the null device from then on (see :func:`._common.to_devnull`).
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else EXIT_USAGE
    stderr = sys.stderr
    diagnostics = _Diagnostics(stderr)
    sys.stderr = cast(TextIO, diagnostics)
    try:
        with _safe_last_resort(), _tree_modules_unloaded():
            code = _command(args.command)(args)
    except UsageError as exc:
        sys.stderr.write(terminal_safe(f"orchestrator: {exc}") + "\n")
        return EXIT_USAGE
    except Exception as exc:  # a bug: its traceback, as Python prints it, but fit for a terminal
        text = "".join(traceback.format_exception(exc))
        sys.stderr.write(terminal_safe(text, multiline=True))
        return 1
    finally:
        sys.stderr = stderr
        diagnostics.close_own()
    return code


if __name__ == "__main__":
    sys.exit(main())
