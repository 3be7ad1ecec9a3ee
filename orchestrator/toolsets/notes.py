"""External memory: the ``notes`` toolset, backed by SQLite.

Clearing and compaction keep a long run's input small by forgetting; a note is where an agent
parks what it must not forget. It lives outside the transcript, so it costs nothing per turn,
survives both, and lets a child hand its parent a long finding by id instead of pasting it.
This module owns the store (:class:`NoteStore`: notes scoped per run and agent path, an agent
reading its own and its descendants' only) and ``notes_tools(path)``, the four tools over one
store. docs/context.md ("External memory") is the user-facing reference: scope, search, limits.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import ConfigurationError, ToolError
from ..core.messages import is_text
from ..core.tools import Tool, ToolContext

if TYPE_CHECKING:  # loaded when a store opens: `from orchestrator import *` never needs it
    import sqlite3

__all__ = ["MAX_NOTE_CHARS", "MAX_TITLE_CHARS", "Note", "NoteStore", "notes_tools"]

MAX_TITLE_CHARS = 200
"""Titles are listed every time: keep them short."""
MAX_NOTE_CHARS = 200_000
"""A note is meant to hold a finding, not a corpus."""
MAX_LISTED = 200
"""``list_notes`` shows at most this many (the newest); ``search_notes`` narrows."""
MAX_HITS = 20
READ_PAGE_CHARS = 50_000
"""``read_note`` returns a long note in pages of this many characters (a whole 200,000-character
note would be cut by the runtime's result cap, and the model could not ask for the rest)."""
_SNIPPET_CHARS = 160
_WORD = re.compile(r"[^\W_]+")  # letters and digits, as the docs say (and as the corpus reads)
_MAX_QUERY_WORDS = 64
"""Words of a search query used (the LIKE fallback's score is one expression per word, and
SQLite refuses expressions deeper than 1,000)."""
_APPLICATION_ID = 0x4E4F5445  # "NOTE": marks a database this module made

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    agent_path TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS notes_run_path ON notes (run_id, agent_path);
"""
_FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS notes_fts USING fts5(
    title, text, content='notes', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS notes_fts_insert AFTER INSERT ON notes BEGIN
    INSERT INTO notes_fts (rowid, title, text) VALUES (new.id, new.title, new.text);
END;
"""
# Visible to an agent: same run, and its own path or a path under it. ``substr`` rather than
# LIKE because agent names may contain ``_`` and ``%``, which LIKE treats as wildcards; the
# trailing "/" keeps ``lead/r#1`` from seeing ``lead/r#10``.
_VISIBLE = "run_id = ? AND (agent_path = ? OR substr(agent_path, 1, ?) = ?)"


@dataclass(frozen=True, slots=True)
class Note:
    """One stored note."""

    id: int
    run_id: str
    agent_path: str
    title: str
    text: str
    created_at: float


def _visible_args(run_id: str, agent_path: str) -> tuple[str, str, int, str]:
    prefix = agent_path + "/"
    return (run_id, agent_path, len(prefix), prefix)


def _is_visible(note: Note, run_id: str, agent_path: str) -> bool:
    return note.run_id == run_id and (
        note.agent_path == agent_path or note.agent_path.startswith(agent_path + "/")
    )


class NoteStore:
    """The SQLite database behind one notes toolset.

    One connection, opened with ``check_same_thread=False`` and guarded by a lock: the tools are
    sync functions, which the runtime runs in worker threads, several at once when a turn asks
    for parallel calls or sibling agents write together. A single serialized connection is what
    makes ``:memory:`` work at all (each new connection to ``:memory:`` is a new, empty
    database), and notes are small enough that serializing costs nothing measurable.

    ``use_fts=None`` uses FTS5 when this SQLite has it; ``False`` forces the ``LIKE`` fallback
    (for SQLite builds without FTS5, and for testing that path).
    """

    def __init__(self, path: Path | str | None = None, *, use_fts: bool | None = None) -> None:
        import sqlite3

        self.path = str(path) if path is not None else ":memory:"
        self._lock = threading.Lock()
        try:
            if path is not None:
                Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            self._conn.row_factory = sqlite3.Row
            # the LIKE fallback folds case with Python (SQLite's LIKE folds ASCII only)
            self._conn.create_function("fold", 1, _fold, deterministic=True)
            with self._lock, self._conn:
                _prepare(self._conn, self.path)
        except (OSError, sqlite3.Error, ConfigurationError) as exc:
            conn = getattr(self, "_conn", None)
            if conn is not None:
                conn.close()
            if isinstance(exc, ConfigurationError):
                raise
            raise ConfigurationError(f"notes database {self.path!r}: {exc}") from exc
        self.fts = False
        if use_fts is not False:
            self.fts = self._open_fts(required=bool(use_fts))

    def _open_fts(self, *, required: bool) -> bool:
        """Create the FTS5 index (and its insert trigger) if this SQLite has FTS5.

        A file first written without FTS5 gets its index rebuilt here, so notes written then
        are searchable now. Without FTS5, a trigger left by a build that had it is dropped:
        every insert would fail on it.
        """
        import sqlite3

        with self._lock, self._conn:
            had_trigger = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'notes_fts_insert'"
            ).fetchone()
        try:
            with self._lock, self._conn:
                self._conn.executescript(_FTS_SCHEMA)
                if not had_trigger:
                    self._conn.execute("INSERT INTO notes_fts (notes_fts) VALUES ('rebuild')")
        except sqlite3.OperationalError:  # no FTS5 in this SQLite build
            if required:
                raise
            with self._lock, self._conn:
                self._conn.execute("DROP TRIGGER IF EXISTS notes_fts_insert")
            return False
        return True

    def close(self) -> None:
        """Close the connection (the tools stop working)."""
        with self._lock:
            self._conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._conn:
            yield self._conn

    # -- operations (all scoped by run and agent path) ------------------------------------------

    def write(self, run_id: str, agent_path: str, title: str, text: str) -> int:
        """Store a note and return its id."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO notes (run_id, agent_path, title, text, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, agent_path, title, text, time.time()),
            )
            note_id = cursor.lastrowid
        assert note_id is not None
        return note_id

    def get(self, note_id: int) -> Note | None:
        """The note with this id, whoever wrote it (callers check visibility)."""
        with self._transaction() as conn:
            row = conn.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchone()
        return _note(row) if row is not None else None

    def visible(self, run_id: str, agent_path: str, limit: int = MAX_LISTED) -> list[Note]:
        """The newest ``limit`` notes this agent may read, oldest first."""
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT * FROM notes WHERE {_VISIBLE} ORDER BY id DESC LIMIT ?",
                (*_visible_args(run_id, agent_path), limit),
            ).fetchall()
        return [_note(r) for r in reversed(rows)]

    def count(self, run_id: str, agent_path: str) -> int:
        """How many notes this agent may read."""
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT count(*) FROM notes WHERE {_VISIBLE}", _visible_args(run_id, agent_path)
            ).fetchone()
        return int(row[0])

    def search(self, run_id: str, agent_path: str, query: str, limit: int = MAX_HITS) -> list[Note]:
        """Visible notes matching any word of ``query`` (its first 64), best first."""
        words = query_words(query)
        if not words:
            return []
        if self.fts:
            # every word quoted: the model's query is data, never FTS5 syntax (AND, *, quotes)
            match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
            sql = (
                "SELECT notes.* FROM notes_fts JOIN notes ON notes.id = notes_fts.rowid "
                f"WHERE notes_fts MATCH ? AND {_VISIBLE} "
                "ORDER BY bm25(notes_fts, 5.0, 1.0), notes.id LIMIT ?"
            )
            params: tuple[object, ...] = (match, *_visible_args(run_id, agent_path), limit)
        else:
            # rank by how many words match; the words' own % and _ are escaped, not wildcards
            term = "(fold(title) LIKE ? ESCAPE '\\' OR fold(text) LIKE ? ESCAPE '\\')"
            score = " + ".join([term] * len(words))
            sql = (
                f"SELECT *, ({score}) AS score FROM notes WHERE {_VISIBLE} AND ({score}) > 0 "
                "ORDER BY score DESC, id LIMIT ?"
            )
            # fold() on both sides: casefold, which the FTS branch must not use ("straße" is
            # indexed as "straße", its casefold is "strasse")
            patterns = [f"%{_escape_like(w.casefold())}%" for w in words]
            pairs = [p for pattern in patterns for p in (pattern, pattern)]
            params = (*pairs, *_visible_args(run_id, agent_path), *pairs, limit)
        with self._transaction() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_note(r) for r in rows]


def query_words(query: str) -> list[str]:
    """The distinct words of a search query, lowercased (as the FTS index does), at most 64."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:_MAX_QUERY_WORDS]


def _fold(value: str | None) -> str | None:
    return value.casefold() if isinstance(value, str) else value


def _prepare(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables in a new database, accept one this module made; refuse any other
    (adding tables to someone else's database, or failing later on a foreign ``notes``)."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    columns = {r[1] for r in conn.execute("PRAGMA table_info(notes)")}
    ours = app == _APPLICATION_ID or (  # or a notes file written before files were marked
        app == 0 and {"id", "run_id", "agent_path", "title", "text", "created_at"} <= columns
    )
    if not ours and (tables or app):
        raise ConfigurationError(
            f"notes database {path!r} is another program's SQLite file; "
            "give notes_tools a path of its own"
        )
    conn.executescript(_SCHEMA)
    if not tables:  # a new database: marked as ours (never someone else's, never re-marked)
        conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")


def _escape_like(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _note(row: sqlite3.Row) -> Note:
    return Note(
        int(row["id"]),
        str(row["run_id"]),
        str(row["agent_path"]),
        str(row["title"]),
        str(row["text"]),
        float(row["created_at"]),
    )


def _parse_id(note_id: int | str) -> int:
    """Accept ``12``, ``"12"``, ``"note 12"`` or ``"#12"``: models quote ids in many ways."""
    if isinstance(note_id, int):
        return note_id
    # at most 30 digits: no id is that long, and int() refuses thousands of them
    found = re.fullmatch(r"\s*(?:note\s*)?#?\s*(\d{1,30})\s*", note_id, re.IGNORECASE)
    if found is None:
        raise ToolError(
            f"{note_id!r} is not a note id; ids are integers such as 12 (see list_notes)"
        )
    return int(found.group(1))


def _owner(note: Note, agent_path: str) -> str:
    return "you" if note.agent_path == agent_path else note.agent_path


def _matcher(words: list[str]) -> re.Pattern[str]:
    """One pattern for a query's words and their stems' starts (the index matches
    "nurseries" for "nursery"), searched in the text itself: lower() may change a text's
    length ("İ"), so positions found in a lowered copy can miss the word."""
    stems = {w if len(w) <= 4 else w[: max(4, len(w) - 3)] for w in words}
    return re.compile("|".join(re.escape(w) for w in sorted(stems, key=len)), re.IGNORECASE)


def _snippet(text: str, matcher: re.Pattern[str]) -> str:
    """A one-line excerpt around the first match."""
    flat = " ".join(text.split())
    found = matcher.search(flat)
    start = max(0, found.start() - 40) if found else 0
    piece = flat[start : start + _SNIPPET_CHARS]
    return ("..." if start else "") + piece + ("..." if start + _SNIPPET_CHARS < len(flat) else "")


def notes_tools(path: Path | str | None = None) -> list[Tool]:  # noqa: C901 - four tools' bodies
    """The notes toolset: ``write_note``, ``list_notes``, ``read_note``, ``search_notes``.

    ``path`` is an SQLite file (created if missing; notes stay scoped by run id, so runs sharing
    it do not see each other's notes) or ``None`` for an in-memory database shared by these four
    tools. Build the list once and give it to the agents that should share notes: two calls make
    two separate stores.
    """
    store = NoteStore(path)

    def write_note(ctx: ToolContext, title: str, text: str) -> str:
        """Save a finding outside your transcript, to read back later by id.

        Use notes for anything you will need again (facts with their sources, partial
        results): old tool results may be cleared and the transcript compacted, notes are
        not. A subagent can hand a long result to its parent as "see note <id>".

        Args:
            title: a short title (shown by list_notes and search_notes)
            text: the content to keep, with sources
        """
        title = " ".join(title.split())
        if not title:
            raise ToolError("write_note needs a non-empty title")
        if len(title) > MAX_TITLE_CHARS:
            raise ToolError(
                f"the title has {len(title)} characters; keep it under {MAX_TITLE_CHARS} "
                "and put the details in text"
            )
        if not text.strip():
            raise ToolError("write_note needs some text to keep")
        if not is_text(title + text):
            raise ToolError(
                "the note holds a lone surrogate (an escape like \\ud800 without its pair), "
                "which is not text; remove it and write the note again"
            )
        if len(text) > MAX_NOTE_CHARS:
            raise ToolError(
                f"the note has {len(text)} characters, more than {MAX_NOTE_CHARS}; "
                "keep the findings and their sources, or split it into several notes"
            )
        return str(store.write(ctx.run_id, ctx.agent_path, title, text))

    def list_notes(ctx: ToolContext) -> str:
        """List the notes you can read (yours and your subagents'): one line per note.

        Each line is: id, title, size, and who wrote it when it was not you.
        """
        notes = store.visible(ctx.run_id, ctx.agent_path)
        if not notes:
            return "(no notes yet)"
        lines = [
            f"{n.id}: {n.title} ({len(n.text)} chars"
            + (f", by {n.agent_path})" if n.agent_path != ctx.agent_path else ")")
            for n in notes
        ]
        total = store.count(ctx.run_id, ctx.agent_path)
        if total > len(notes):
            lines.insert(0, f"(showing the newest {len(notes)} of {total}; use search_notes)")
        return "\n".join(lines)

    def read_note(
        ctx: ToolContext, note_id: int | str, start: int = 0, length: int = READ_PAGE_CHARS
    ) -> str:
        """Read one note by id: its title, then its text (a long one in pages).

        Args:
            note_id: the note's id, as write_note, list_notes or a subagent gave it
            start: where to start reading, in characters (for the next page of a long note)
            length: at most this many characters (a smaller page, if a page came back cut)
        """
        wanted = _parse_id(note_id)
        note = store.get(wanted) if 0 <= wanted < 2**63 else None  # SQLite ids are 64-bit
        if note is None or note.run_id != ctx.run_id:
            raise ToolError(f"there is no note {wanted}; list_notes shows the ids you can read")
        if not _is_visible(note, ctx.run_id, ctx.agent_path):
            raise ToolError(
                f"note {wanted} belongs to {note.agent_path}, which is not you "
                f"({ctx.agent_path}) or one of your subagents; an agent can read only its own "
                "notes and those of its subagents"
            )
        header = f"note {note.id}: {note.title} (by {_owner(note, ctx.agent_path)})"
        total = len(note.text)
        page = max(1, min(length, READ_PAGE_CHARS))
        if start == 0 and total <= page:
            return f"{header}\n\n{note.text}"
        if not 0 <= start < total:
            raise ToolError(f"note {wanted} has {total} characters; start must be 0 to {total - 1}")
        end = min(total, start + page)
        more = f"; read_note({wanted}, start={end}) for the rest" if end < total else ""
        return f"{header} [characters {start}-{end} of {total}{more}]\n\n{note.text[start:end]}"

    def search_notes(ctx: ToolContext, query: str) -> str:
        """Search the notes you can read (yours and your subagents') by words.

        Returns one line per matching note, best match first: id, title and an excerpt.

        Args:
            query: words to look for (a note matching more of them ranks higher)
        """
        words = query_words(query)
        if not words:
            raise ToolError("search_notes needs at least one word to look for")
        hits = store.search(ctx.run_id, ctx.agent_path, query)
        matcher = _matcher(words)
        if not hits:
            return f"(no notes match {query!r})"
        return "\n".join(
            f"{n.id}: {n.title}"
            + (f" (by {n.agent_path})" if n.agent_path != ctx.agent_path else "")
            + f" - {_snippet(n.text, matcher)}"
            for n in hits
        )

    return [
        Tool(write_note),
        Tool(list_notes),
        Tool(read_note),
        Tool(search_notes),
    ]
