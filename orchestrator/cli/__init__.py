"""The ``orchestrator`` command: ``run``, ``trace show/list/export`` and ``--dry-run``.

:func:`main` is the console-script entry point; it imports the runtime, rich and the tracing
setup only when a subcommand needs them.
"""

from __future__ import annotations

from .main import main as main

__all__ = ["main"]
