"""The journal behind ``resume``: one SQLite file per run, written per event.

What it holds: a header (the schema version, the run's id, the tree's reference and the
fingerprint of its definitions, the prompt, the run-wide options that can be written down, the
root span's ids), every model response keyed by (agent path, turn), and every tool call keyed
by (agent path, turn, tool_use_id): a row when it starts, its result when it is known.

Durability: WAL mode with ``synchronous=NORMAL``; every record is one committed transaction
before the runtime acts on it, so a killed process (SIGKILL, an OOM kill, a crash) loses
nothing recorded. A power loss may lose the last transactions (the WAL is not synced at each
commit): durable against a killed process, not against the machine going down. SQLite's WAL
mode needs a local disk (not a network filesystem).

The file is created with mode 0600 (it holds prompts and tool results unredacted, which replay
needs) and held with an exclusive lock while a run or a resume writes it: a second writer is
refused. A failed write (a full disk, a file size limit) raises, which ends the run with
status ``error`` before it acts on what could not be recorded; everything recorded before the
failure stays, so the run can be resumed once the cause is fixed.

Writes are made on the event loop's thread: a commit in WAL mode without a sync is tens of
microseconds (``docs/performance.md`` has the measured cost per model call: about 130 µs for a
model call's three records), short enough not to hold the other agents up for long.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanContext, TraceFlags

from ..models.base import ModelResponse
from .errors import ConfigurationError
from .journal import RecordedCall
from .messages import ToolResultBlock, Usage, block_from_wire, to_wire
from .result import PendingApproval

if TYPE_CHECKING:  # loaded by the functions that open a journal: a run without one never needs it
    import sqlite3

__all__ = ["JournalHeader", "SQLiteJournal", "parked_calls", "read_header", "read_parked"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS header (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS responses (
    path TEXT NOT NULL, turn INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (path, turn)
);
CREATE TABLE IF NOT EXISTS parked (
    path TEXT NOT NULL, turn INTEGER NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL,
    input TEXT NOT NULL, seq INTEGER NOT NULL, decision INTEGER, decided_at REAL,
    PRIMARY KEY (path, turn, call_id)
);
CREATE TABLE IF NOT EXISTS calls (
    path TEXT NOT NULL, turn INTEGER NOT NULL, call_id TEXT NOT NULL,
    idempotent INTEGER NOT NULL, result TEXT, is_error INTEGER,
    PRIMARY KEY (path, turn, call_id)
);
"""


_PARKED_TABLE = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS parked") :].split(";")[0]


@dataclass(frozen=True)
class JournalHeader:
    """What a journal says about its run, besides the record itself.

    ``tree_ref`` is where the tree was loaded from (``FILE.py[:NAME]`` or ``module:attr``;
    empty when it cannot be named: resume then needs ``agent=``). ``fingerprint`` is a digest
    of the tree's definitions, ``fingerprint_parts`` the parts it was made of (to name the
    first difference). ``options`` are the run-wide options that can be written down
    (``model`` as a string, ``limits``). ``trace_id`` / ``span_id``: the first run's root span
    (0 if untraced). ``status``: the last recorded end (empty: the run never ended).
    """

    run_id: str
    prompt: str
    tree_ref: str = ""
    fingerprint: str = ""
    fingerprint_parts: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    trace_id: int = 0
    span_id: int = 0
    status: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0
    schema_version: int = SCHEMA_VERSION


_HEADER_JSON = ("fingerprint_parts", "options")
_HEADER_INT = ("trace_id", "span_id", "schema_version")
_HEADER_FLOAT = ("started_at", "ended_at")


def _connect(path: Path) -> sqlite3.Connection:
    import sqlite3

    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


def _header_of(connection: sqlite3.Connection, path: Path) -> JournalHeader:
    import sqlite3

    try:
        rows = dict(connection.execute("SELECT key, value FROM header").fetchall())
    except sqlite3.DatabaseError as exc:
        raise ConfigurationError(f"{path} is not a run journal: {exc}") from None
    if not rows:
        raise ConfigurationError(f"{path} is not a run journal (it has no header)")
    try:
        version = int(rows.get("schema_version", "0"))
    except ValueError:
        version = -1  # refused below, naming the version it reads
    if version != SCHEMA_VERSION:
        raise ConfigurationError(
            f"{path} is a journal of schema version {version}; this version of orchestrator "
            f"reads version {SCHEMA_VERSION} only"
        )
    values: dict[str, Any] = {}
    for name in JournalHeader.__dataclass_fields__:
        if name not in rows:
            continue
        raw = rows[name]
        try:
            values[name] = _header_value(name, raw)
        except (ValueError, TypeError):  # json.JSONDecodeError is a ValueError
            shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
            raise ConfigurationError(
                f"{path}: the journal's header has a bad value for {name} ({shown!r})"
            ) from None
    return JournalHeader(**values)


def _header_value(name: str, raw: str) -> Any:
    """One header value as its field's type; ValueError or TypeError if it is not one."""
    if name in _HEADER_JSON:
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise TypeError(name)
        return value
    if name in _HEADER_INT:
        return int(raw)
    if name in _HEADER_FLOAT:
        return float(raw)
    return raw


def read_header(path: str | os.PathLike[str]) -> JournalHeader:
    """The header of the journal at ``path`` (read only; no lock taken)."""
    where = Path(path)
    if not where.is_file():
        raise ConfigurationError(f"no journal at {where}")
    import sqlite3

    connection = sqlite3.connect(f"file:{where}?mode=ro", uri=True)
    try:
        return _header_of(connection, where)
    finally:
        connection.close()


def _response_to_json(response: ModelResponse) -> str:
    usage = response.usage
    return json.dumps(
        {
            "content": [to_wire(b) for b in response.content],
            "stop_reason": response.stop_reason,
            "usage": [
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                usage.cost_usd,
                usage.requests,
                usage.web_search_requests,
                usage.web_fetch_requests,
            ],
            "model": response.model,
            "id": response.id,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def _response_from_json(body: str) -> ModelResponse:
    data = json.loads(body)
    i, o, r, w, c, n, *hosted = data["usage"]  # journals before hosted tools have six
    s, f = (int(hosted[0]), int(hosted[1])) if len(hosted) == 2 else (0, 0)
    return ModelResponse(
        tuple(block_from_wire(b) for b in data["content"]),
        str(data["stop_reason"]),
        Usage(int(i), int(o), int(r), int(w), float(c), int(n), s, f),
        str(data.get("model") or ""),
        str(data.get("id") or ""),
    )


@dataclass
class ReplayCounts:
    """What a resume did with the journal: model responses and tool results it replayed, tool
    calls it found in flight (an idempotent one runs again; any other's outcome is unknown),
    and model responses and tool results that are new."""

    responses: int = 0
    results: int = 0
    in_flight: int = 0
    new_responses: int = 0
    new_results: int = 0

    def describe(self) -> str:
        """One line for the command line's stderr."""
        return (
            f"resumed: replayed {self.responses} model responses and {self.results} tool "
            f"results; {self.in_flight} calls were in flight (run again if idempotent, else "
            f"answered 'outcome unknown'); new: {self.new_responses} model responses, "
            f"{self.new_results} tool results (children's answers included)"
        )


class SQLiteJournal:
    """A run's journal in one SQLite file (see the module docstring).

    :meth:`create` starts the journal of a new run; :meth:`open` continues one (a resume).
    Close it with :meth:`close` (the runtime does, when the run that opened it ends).
    """

    def __init__(
        self,
        path: Path,
        connection: sqlite3.Connection,
        lock: int,
        header: JournalHeader,
        resuming: bool,
    ) -> None:
        self.path = path
        self.header = header
        self._db = connection
        self._lock = lock
        self.resuming = resuming
        """Whether the journal already held a run when it was opened (a resume)."""
        self.replay = ReplayCounts()
        """What a resume replayed, found in flight and ran new (counted when resuming)."""
        self._had_result: set[tuple[str, int, str]] = set()

    @classmethod
    def create(cls, path: str | os.PathLike[str], header: JournalHeader) -> SQLiteJournal:
        """A new journal at ``path`` for the run ``header`` describes; a file already there is
        refused (a run id names one run)."""
        where = Path(path)
        if where.exists():
            raise ConfigurationError(
                f"a journal already exists at {where}: resume it, or give the run another id"
            )
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:  # a folder that cannot hold it (or a file created meanwhile)
            raise ConfigurationError(f"cannot write the run's journal to {where}: {exc}") from None
        lock = _locked(fd, where)
        connection: sqlite3.Connection | None = None
        try:
            connection = _connect(where)
            connection.executescript(_SCHEMA)
            rows = {"schema_version": str(SCHEMA_VERSION)}
            for name in JournalHeader.__dataclass_fields__:
                value = getattr(header, name)
                if name in ("schema_version", "started_at"):
                    continue
                rows[name] = json.dumps(value) if name in _HEADER_JSON else str(value)
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(
                    "INSERT OR REPLACE INTO header (key, value) VALUES (?, ?)", rows.items()
                )
        except BaseException as exc:
            # a full disk, a file size limit (ulimit -f), a folder that went away: nothing
            # half-made is left behind to block the next run or resume under this id
            if connection is not None:
                connection.close()
            os.close(lock)
            _remove(where)
            if isinstance(exc, OSError) or type(exc).__module__ == "sqlite3":
                raise ConfigurationError(
                    f"cannot write the run's journal to {where}: {exc}"
                ) from None
            raise
        return cls(where, connection, lock, header, resuming=False)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> SQLiteJournal:
        """The journal at ``path``, to continue its run; refused if another process writes it."""
        where = Path(path)
        if not where.is_file():
            raise ConfigurationError(f"no journal at {where}")
        try:
            fd = os.open(where, os.O_RDWR)
        except OSError as exc:
            raise ConfigurationError(f"cannot open the journal {where}: {exc}") from None
        lock = _locked(fd, where)
        connection: sqlite3.Connection | None = None
        try:
            connection = _connect(where)
            header = _header_of(connection, where)
            connection.execute(_PARKED_TABLE)  # a journal written before parking existed
        except BaseException as exc:
            if connection is not None:
                connection.close()
            os.close(lock)
            if isinstance(exc, OSError) or type(exc).__module__ == "sqlite3":
                raise ConfigurationError(f"{where} is not a run journal: {exc}") from None
            raise
        return cls(where, connection, lock, header, resuming=True)

    def resumed_from(self) -> SpanContext | None:
        """The root span of the run this journal recorded first (``None`` if untraced)."""
        if not self.header.trace_id:
            return None
        return SpanContext(
            self.header.trace_id,
            self.header.span_id,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )

    def close(self) -> None:
        """Close the file and release its lock."""
        try:
            self._db.close()
        finally:
            os.close(self._lock)

    def discard(self) -> None:
        """Delete the (closed) file of a run that never started: there is nothing to resume."""
        _remove(self.path)

    def _write(self, sql: str, parameters: tuple[Any, ...]) -> None:
        self._db.execute(sql, parameters)  # autocommit: one transaction per record

    def _set(self, key: str, value: str) -> None:
        self._write("INSERT OR REPLACE INTO header (key, value) VALUES (?, ?)", (key, value))

    # -- the Journal protocol ---------------------------------------------------------------

    def _set_all(self, values: tuple[tuple[str, str], ...]) -> None:
        """Header values, in one transaction."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR REPLACE INTO header (key, value) VALUES (?, ?)", values)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # SQLite rolls back itself after an I/O error
                self._db.execute("ROLLBACK")
            raise

    async def run_started(self, run_id: str, trace_id: int, span_id: int) -> None:
        if self.resuming:  # the first run's root span stays the one a resumed trace links to
            self._set("resumed_at", repr(time.time()))
            return
        self._set_all(
            (
                ("trace_id", str(trace_id)),
                ("span_id", str(span_id)),
                ("started_at", repr(time.time())),
            )
        )

    async def lookup_response(self, path: str, turn: int) -> ModelResponse | None:
        if not self.resuming:
            return None
        row = self._db.execute(
            "SELECT body FROM responses WHERE path = ? AND turn = ?", (path, turn)
        ).fetchone()
        if row is None:
            return None
        self.replay.responses += 1
        return _response_from_json(row[0])

    async def record_response(self, path: str, turn: int, response: ModelResponse) -> None:
        if self.resuming:
            self.replay.new_responses += 1
        self._write(
            "INSERT OR REPLACE INTO responses (path, turn, body) VALUES (?, ?, ?)",
            (path, turn, _response_to_json(response)),
        )

    async def lookup_call(self, path: str, turn: int, call_id: str) -> RecordedCall | None:
        if not self.resuming:
            return None
        row = self._db.execute(
            "SELECT result, is_error FROM calls WHERE path = ? AND turn = ? AND call_id = ?",
            (path, turn, call_id),
        ).fetchone()
        if row is None:
            return None
        result, is_error = row
        if result is None:
            self.replay.in_flight += 1
            return RecordedCall(None)
        self.replay.results += 1
        self._had_result.add((path, turn, call_id))
        return RecordedCall(ToolResultBlock(call_id, result, bool(is_error)))

    async def tool_started(self, path: str, turn: int, call_id: str, idempotent: bool) -> None:
        self._write(
            "INSERT OR REPLACE INTO calls (path, turn, call_id, idempotent, result, is_error) "
            "VALUES (?, ?, ?, ?, NULL, NULL)",
            (path, turn, call_id, int(idempotent)),
        )

    async def record_result(
        self, path: str, turn: int, call_id: str, result: ToolResultBlock
    ) -> None:
        if self.resuming and (path, turn, call_id) not in self._had_result:
            self.replay.new_results += 1
        self._write(
            "INSERT INTO calls (path, turn, call_id, idempotent, result, is_error) "
            "VALUES (?, ?, ?, 0, ?, ?) ON CONFLICT (path, turn, call_id) "
            "DO UPDATE SET result = excluded.result, is_error = excluded.is_error",
            (path, turn, call_id, result.content, int(result.is_error)),
        )

    async def run_ended(self, run_id: str, status: str) -> None:
        self._set_all((("status", status), ("ended_at", repr(time.time()))))

    # -- parked calls (DEFER) ---------------------------------------------------------------

    def parked(self) -> list[tuple[PendingApproval, bool | None]]:
        """Every call parked in the run (by agent path, turn and id), with its decision."""
        return parked_calls(self._db)

    def record_parked(self, call: PendingApproval) -> None:
        """A call parked for a person (kept as it is if it was parked before)."""
        self._write(
            "INSERT OR IGNORE INTO parked (path, turn, call_id, tool, input, seq) "
            "VALUES (?, ?, ?, ?, ?, (SELECT count(*) FROM parked))",
            (
                call.agent_path,
                call.turn,
                call.id,
                call.tool,
                json.dumps(call.input, ensure_ascii=False, default=str),
            ),
        )

    def record_decisions(self, decisions: Mapping[tuple[str, int, str], bool]) -> None:
        """A person's decisions on parked calls, in one transaction, before they act."""
        now = time.time()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                "UPDATE parked SET decision = ?, decided_at = ? "
                "WHERE path = ? AND turn = ? AND call_id = ? AND decision IS NULL",
                [
                    (int(allow), now, path, turn, cid)
                    for (path, turn, cid), allow in decisions.items()
                ],
            )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    # -- reading it -----------------------------------------------------------------------

    def counts(self) -> Mapping[str, int]:
        """How many responses and tool calls (with and without a result) it holds."""
        responses = self._db.execute("SELECT count(*) FROM responses").fetchone()[0]
        done, open_ = self._db.execute(
            "SELECT count(result), count(*) - count(result) FROM calls"
        ).fetchone()
        return {"responses": int(responses), "results": int(done), "in_flight": int(open_)}


def parked_calls(connection: sqlite3.Connection) -> list[tuple[PendingApproval, bool | None]]:
    """The parked calls a journal holds, by agent path, turn and id (the order concurrent
    agents parked them in is the scheduler's), with their decisions (none in a journal
    written before parking existed)."""
    import sqlite3

    try:
        rows = connection.execute(
            "SELECT path, turn, call_id, tool, input, decision FROM parked "
            "ORDER BY path, turn, call_id"
        ).fetchall()
    except sqlite3.OperationalError:  # no such table
        return []
    out: list[tuple[PendingApproval, bool | None]] = []
    for path, turn, call_id, tool, raw, decision in rows:
        value = json.loads(raw)
        call = PendingApproval(
            str(call_id), str(path), str(tool), value if isinstance(value, dict) else {}, int(turn)
        )
        out.append((call, None if decision is None else bool(decision)))
    return out


def read_parked(path: str | os.PathLike[str]) -> list[tuple[PendingApproval, bool | None]]:
    """The parked calls of the journal at ``path`` (read only; no lock taken)."""
    import sqlite3

    connection = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        return parked_calls(connection)
    finally:
        connection.close()


def _remove(where: Path) -> None:
    """A journal's files (the database, its WAL and its shared memory), where they exist."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{where}{suffix}").unlink(missing_ok=True)


def _locked(fd: int, where: Path) -> int:
    """``fd`` holding an exclusive lock on the journal (released when it is closed)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigurationError(
            f"the journal {where} is in use by another run or resume (it is locked)"
        ) from None
    return fd
