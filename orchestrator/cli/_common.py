"""What the ``orchestrator`` commands share: the exit codes, the usage error, the runs folder's
default, and the stream and URL helpers that keep a diagnostic from failing or leaking.

:mod:`.main` (the parser and the entry point) and the commands (:mod:`.run`, :mod:`.trace`)
import it; it imports none of them, so a command never imports :mod:`.main`. Light on purpose:
``orchestrator --help`` loads it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TextIO

from ..core.result import RunStatus

__all__ = [
    "DEFAULT_RUNS_DIR",
    "EXIT_CODES",
    "EXIT_USAGE",
    "UsageError",
    "stdout_to_devnull",
    "to_devnull",
    "without_userinfo",
]

EXIT_CODES: dict[RunStatus, int] = {
    RunStatus.COMPLETED: 0,
    RunStatus.ERROR: 1,
    RunStatus.MAX_TURNS: 3,
    RunStatus.TIMEOUT: 4,
    RunStatus.BUDGET_EXCEEDED: 5,
    RunStatus.REPEAT_GUARD: 6,
    RunStatus.ERROR_THRESHOLD: 7,
    RunStatus.REFUSAL: 8,
    RunStatus.CONTEXT_EXCEEDED: 9,
    RunStatus.INVALID_OUTPUT: 10,
    RunStatus.AWAITING_APPROVAL: 11,
    RunStatus.CANCELLED: 130,
}
EXIT_USAGE = 2
DEFAULT_RUNS_DIR = Path("runs")


class UsageError(Exception):
    """A problem with the command line or the file it names: one line, exit code 2."""


def to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at the null device: later writes and flushes (the
    interpreter's at exit included: exit code 120 if that one fails) go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def stdout_to_devnull() -> None:
    to_devnull(sys.stdout)


_USERINFO = re.compile(r"(?<=://)[^\s/@]+@")


def without_userinfo(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with the user and password a URL may hold
    (``https://user:token@host``) shown as ``***``: :func:`~orchestrator.core.redact.redact`
    knows only the environment's secrets and key-shaped tokens."""
    return _USERINFO.sub("***@", text) if "@" in text else text
