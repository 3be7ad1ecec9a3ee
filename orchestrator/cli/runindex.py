"""The runs of a runs folder, from their trace files and their journals: one index, read by
``orchestrator trace list`` and ``orchestrator runs``.

A run may have a trace and no journal (``--no-journal``), a journal and no trace (killed
before its first span was written), or both. Its status is the journal's when it has one (the
journal records how the run ended, a resume's end included): ``running`` while a process holds
its lock, ``interrupted`` when it never recorded an end, else the status it recorded; without a
journal, the trace's outcome.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..core.errors import ConfigurationError
from ..core.journal_sqlite import JournalHeader, read_header
from ..tracing.tracefiles import INTERRUPTED, RunSummary, list_runs

__all__ = ["RUNNING", "RunEntry", "journal_status", "run_index", "shown_status"]

RUNNING = "running"
AWAITING = "awaiting_approval"


@dataclass(frozen=True)
class RunEntry:
    """One run of the folder: its id, when it started, its status, the tree (root agent), and
    the files that hold it (journal, traces, MCP logs)."""

    run_id: str
    started: datetime | None
    status: str
    tree: str | None
    journal: Path | None = None
    header: JournalHeader | None = None
    traces: tuple[RunSummary, ...] = ()
    logs: tuple[Path, ...] = field(default=())

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file of the run (a journal with its WAL and shared memory, traces, logs)."""
        out: list[Path] = []
        if self.journal is not None:
            out.append(self.journal)
            out += [
                p for p in (Path(f"{self.journal}-wal"), Path(f"{self.journal}-shm")) if p.exists()
            ]
        out += [t.path for t in self.traces]
        out += list(self.logs)
        return tuple(out)


def shown_status(status: str) -> str:
    """A status as a person reads it (``awaiting_approval`` is ``awaiting approval``)."""
    return "awaiting approval" if status == AWAITING else status


def journal_status(path: Path, header: JournalHeader) -> str:
    """The status a journal says: ``running`` while locked, ``interrupted`` when it recorded
    no end, else the recorded status."""
    if _locked(path):
        return RUNNING
    return header.status or INTERRUPTED


def _locked(path: Path) -> bool:
    """Whether a process holds the journal's lock (a run or a resume writing it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # (closing releases a lock taken here)
    return False


def _root_of(header: JournalHeader) -> str | None:
    """The root agent's name: the first agent of the journal's fingerprint parts."""
    for key in header.fingerprint_parts:
        return key.partition(".")[0]
    return None


def run_index(runs_dir: Path) -> list[RunEntry]:
    """The runs under ``runs_dir``, newest first: every journal (``*.db``), and every trace
    file, grouped by run id (a resume's trace, ``ID.resumed2.jsonl``, joins its run). A
    journal that cannot be read is left out, as a file that is not a trace is."""
    if not runs_dir.is_dir():
        return []
    traces: dict[str, list[RunSummary]] = {}
    for summary in list_runs(runs_dir):
        traces.setdefault(summary.run_id, []).append(summary)
    journals: dict[str, tuple[Path, JournalHeader]] = {}
    for path in sorted(runs_dir.rglob("*.db")):
        try:
            read = read_header(path)
        except (ConfigurationError, OSError, ValueError):
            continue
        journals[read.run_id or path.stem] = (path, read)
    logs: dict[str, list[Path]] = {}
    for log in runs_dir.rglob("*.log"):
        logs.setdefault(log.name.partition(".")[0], []).append(log)
    entries = []
    for run_id in {*traces, *journals}:
        summaries = tuple(traces.get(run_id, ()))
        first = min(
            summaries, key=lambda s: s.start or datetime.max.replace(tzinfo=UTC), default=None
        )
        journal: Path | None = None
        header: JournalHeader | None = None
        if run_id in journals:
            journal, header = journals[run_id]
        started = first.start if first is not None else None
        if header is not None and journal is not None:
            status = journal_status(journal, header)
            if header.started_at:
                started = datetime.fromtimestamp(header.started_at, tz=UTC)
            elif started is None:
                started = datetime.fromtimestamp(journal.stat().st_mtime, tz=UTC)
            tree = _root_of(header) or (first.root_agent if first else None)
        else:
            assert first is not None
            newest = max(summaries, key=lambda s: s.start or datetime.min.replace(tzinfo=UTC))
            status = newest.outcome or newest.status
            tree = first.root_agent
        entries.append(
            RunEntry(
                run_id,
                started,
                status,
                tree,
                journal,
                header,
                summaries,
                tuple(sorted(logs.get(run_id, ()))),
            )
        )
    epoch = datetime.fromtimestamp(0, tz=UTC)
    entries.sort(key=lambda e: e.started or epoch, reverse=True)
    return entries


def journal_only_summaries(entries: list[RunEntry]) -> list[RunSummary]:
    """``trace list``'s rows for runs that have a journal and no trace (killed before their
    first span was written): listed too, with their journal's status."""
    out = []
    for e in entries:
        if e.traces or e.journal is None:
            continue
        out.append(
            RunSummary(
                run_id=e.run_id,
                path=e.journal,
                root_agent=e.tree,
                start=e.started,
                duration_s=0.0,
                span_count=0,
                status="UNSET" if e.status == RUNNING else "ERROR",
                outcome=e.status,
                trace_id=None,
                service_name=None,
                interrupted=e.status == INTERRUPTED,
            )
        )
    return out
