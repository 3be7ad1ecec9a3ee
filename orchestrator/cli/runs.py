"""``orchestrator runs``: the runs of a runs folder (id, started, status, tree), and ``runs
prune --older-than DURATION``, which deletes old runs' journals, traces and MCP logs.

Both read the folder through :func:`.runindex.run_index`, the index ``trace list`` uses. Prune
keeps a run that is running (its journal locked) whatever the options, and one awaiting
approval unless ``--include-pending``; ``--dry-run`` lists what it would delete.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.redact import secret_values
from ..core.terminal import terminal_safe
from .runindex import AWAITING, RUNNING, RunEntry, run_index, shown_status

__all__ = ["cmd_runs"]


def cmd_runs(args: argparse.Namespace) -> int:
    runs_dir = Path(args.runs_dir)
    entries = run_index(runs_dir)
    if getattr(args, "runs_command", None) == "prune":
        return _prune(entries, args)
    out = sys.stdout
    if not entries:
        out.write(f"no runs in {runs_dir}\n")
        return 0
    secrets = secret_values()
    rows = [
        (
            e.run_id,
            e.started.astimezone().strftime("%Y-%m-%d %H:%M") if e.started else "",
            shown_status(e.status),
            e.tree or "",
        )
        for e in entries
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]
    for row in [_HEADERS, *rows]:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        out.write(terminal_safe(line, secrets=secrets) + "\n")
    return 0


_HEADERS = ("run", "started", "status", "tree")


def _last_touched(entry: RunEntry) -> float:
    """When the run's files last changed (a resume or an approval counts)."""
    times = []
    for path in entry.files:
        if path.name.endswith(("-wal", "-shm")):  # a reader of the journal touches these
            continue
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    if times:
        return max(times)
    return entry.started.timestamp() if entry.started else 0.0


def _prune(entries: list[RunEntry], args: argparse.Namespace) -> int:
    cutoff = time.time() - args.older_than
    out = sys.stdout
    deleted = kept = 0
    for entry in entries:
        if _last_touched(entry) > cutoff:
            continue
        if entry.status == RUNNING or (entry.status == AWAITING and not args.include_pending):
            kept += 1
            why = "running" if entry.status == RUNNING else "awaiting approval"
            out.write(f"kept {entry.run_id} ({why})\n")
            continue
        for path in entry.files:
            if args.dry_run:
                out.write(f"would delete {path}\n")
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            out.write(f"deleted {path}\n")
        deleted += 1
    verb = "would delete" if args.dry_run else "deleted"
    out.write(f"{verb} {deleted} run{'s' if deleted != 1 else ''}, kept {kept} pending\n")
    return 0
