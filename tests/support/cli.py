"""The ``orchestrator`` command in this process: ``main(argv)`` with its own working folder,
environment and standard streams, answered like ``subprocess.run`` answers.

In process costs no interpreter start-up nor imports, so the CLI's tests use it wherever a
signal, an exit after a kill, a crash, a terminal or a file descriptor is not the point (those
run ``python -m orchestrator.cli``). ``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` are
``io.StringIO`` objects while ``main`` runs: not terminals, as pipes are not, so the CLI's
``isatty()`` checks choose what a piped run does (plain progress, no approval questions). The
root logger has no handlers meanwhile, as in a process of its own: a warning logged during the
run reaches ``logging.lastResort`` (the CLI's, on its stderr), not pytest's log capture.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.cli.main import main


@dataclass(frozen=True)
class CliRun:
    """What ``subprocess.run(..., capture_output=True, text=True)`` answers, for one
    ``main(argv)`` in process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def cli_env(**extra: str) -> dict[str, str]:
    """The CLI tests' environment: without an API key or any OTLP exporter setting, colours or
    terminal sizes (traces go to OTLP/JSON lines under ``runs/``), 200 columns wide."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "ANTHROPIC_API_KEY"
        and not k.startswith("OTEL_")
        and k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES")
    }
    env.update(COLUMNS="200", PYTHONIOENCODING="utf-8", **extra)
    return env


@contextmanager
def standard_streams(stdin: str = "") -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """``sys.stdin`` reading ``stdin``, ``sys.stdout`` and ``sys.stderr`` writing to the two
    StringIOs yielded (stdout, stderr); the streams there before are back afterwards."""
    saved = sys.stdin, sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


@contextmanager
def unconfigured_logging() -> Iterator[None]:
    """The root logger without handlers, as a new process has it (pytest holds handlers of its
    own there while a test runs, which would take every record); its own afterwards."""
    root = logging.getLogger()
    saved = root.handlers
    root.handlers = []
    try:
        yield
    finally:
        root.handlers = saved


def run_main(args: list[str], *, stdin: str = "") -> CliRun:
    """``main(args)`` with the standard streams of :func:`standard_streams` and the logging
    of :func:`unconfigured_logging`."""
    with standard_streams(stdin) as (out, err), unconfigured_logging():
        code = main(args)
    return CliRun(args, code, out.getvalue(), err.getvalue())


class Cli:
    """``cli("run", "agents.py", "go")``: the command in this process, run in ``cwd`` (default:
    the folder given at construction) with the environment ``environ()`` builds, plus ``env``,
    and nothing else (the variables it leaves out are unset for the call); ``input`` is stdin.
    Everything is as it was after the call, the working folder and the environment included.

    ``environ`` is the function a test module's ``subprocess`` helper builds its ``env=`` with,
    so a test answers the same in process as in a subprocess.
    """

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        cwd: Path,
        environ: Callable[[], Mapping[str, str]] = cli_env,
    ) -> None:
        self.monkeypatch = monkeypatch
        self.cwd = cwd
        self.environ = environ

    def __call__(
        self,
        *args: str,
        cwd: Path | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CliRun:
        wanted = {**self.environ(), **(env or {})}
        with self.monkeypatch.context() as patch:
            patch.chdir(cwd if cwd is not None else self.cwd)
            for name in [n for n in os.environ if n not in wanted]:
                patch.delenv(name)
            for name, value in wanted.items():
                if os.environ.get(name) != value:
                    patch.setenv(name, value)
            return run_main(list(args), stdin=input or "")
