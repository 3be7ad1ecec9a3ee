"""Research tools over a document corpus: ranked full-text search and sandboxed reads.

A research agent needs two things from a body of text: find the passages that bear on a question
(:meth:`Corpus.search`) and read one of them in full (:meth:`Corpus.read`). Both are backed by one
SQLite database with an FTS5 table, because FTS5 ships inside the ``sqlite3`` of nearly every
Python build: no server, no extra dependency, BM25 ranking and highlighted snippets built in.

Two kinds of corpus:

* **The default corpus** (``Corpus.open()``), which every Python installation already has: the
  language reference topics shipped with the interpreter (``pydoc_data/topics.py``, ids like
  ``topic:for``) and the standard library's docstrings (ids like ``stdlib:json`` and
  ``stdlib:json#JSONDecoder``). Both are read from source with :mod:`ast`; no standard library
  module is imported, so indexing runs no third-party or platform code.
* **A folder** (``Corpus.open(path)``) of ``.md``/``.markdown``/``.txt``/``.rst``/``.html``/``.htm``
  files. Ids are paths relative to the root (``guide/intro.md``), and headings split a file into
  sections (``guide/intro.md#installation``) so a read can return just the part that matters.

Reading and splitting the documents is :mod:`orchestrator.corpus_sources`'s job; this module
owns the index, the ranking and the sandbox.

The index lives on disk (a cache directory unless ``index_path`` is given) and is refreshed
incrementally whenever a corpus is opened: folder files are compared by content hash (SHA-256),
the standard library by ``(mtime, size)`` (it changes only when Python is upgraded), so reopening
an unchanged corpus reads no document twice. Ids given to :meth:`Corpus.read` are checked before
any lookup: ``..``, absolute paths, NUL bytes and symlinks that lead outside the root are refused,
and symlinks that escape the root are never indexed in the first place.

One :class:`Corpus` may be used from several threads at once (the agent loop runs sync tools in
worker threads): a single connection opened with ``check_same_thread=False`` is guarded by a lock.
Queries take milliseconds, so serialising them costs nothing worth the complexity of a pool.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import sqlite3
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import TracebackType
from typing import TypeVar

from ..core.errors import OrchestratorError
from ..core.messages import is_text
from .sources import (
    FOLDER_SUFFIXES,
    MAX_FILE_BYTES,
    Source,
    folder_sources,
    stdlib_sources,
    topic_sources,
)

__all__ = ["Corpus", "CorpusError", "Document", "RefreshStats", "SearchHit"]

T = TypeVar("T")

_SCHEMA_VERSION = 4  # bump when the schema or the way documents are split changes: forces a rebuild
_APPLICATION_ID = 0x4F524350  # "ORCP": marks a SQLite file as ours before we write to it
_TITLE_WEIGHT, _BODY_WEIGHT = 8.0, 1.0
_MAX_LIMIT = 50
PER_DOC = 2  # hits from one document before others get a turn
_FTS5_PROBE = "CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)"

# fmt: off
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
    "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "so",
    "than", "that", "the", "their", "then", "there", "these", "this", "to", "was", "were", "what",
    "when", "where", "which", "who", "why", "will", "with", "you", "your",
})
# fmt: on
_ARTICLES = frozenset({"a", "an", "the"})  # too common to make a phrase worth boosting
_WORD = re.compile(r"[^\W_]+")


class CorpusError(OrchestratorError):
    """A corpus cannot be opened, or a search or read cannot be answered as asked.

    The message says why and what to do instead, phrased for the model reading it as a tool
    result: an unknown id suggests searching, a refused path says which rule it broke.
    """


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked result: enough for a reader to decide whether to :meth:`Corpus.read` it.

    ``score`` is the negated BM25 rank, so higher is better; it only compares hits of one query.
    ``snippet`` is a short excerpt of the body with the matched terms in ``**bold**``.
    """

    id: str
    title: str
    snippet: str
    score: float


@dataclass(frozen=True, slots=True)
class Document:
    """The text of a whole document or of one section, as :meth:`Corpus.read` returns it.

    ``sections`` lists the section ids of a whole document (empty for a section), so a reader
    can ask for just the part it needs. ``truncated`` says that ``max_chars`` cut ``text``
    short of its ``total_chars``.
    """

    id: str
    title: str
    text: str
    sections: tuple[str, ...] = ()
    truncated: bool = False
    total_chars: int = 0


@dataclass(frozen=True, slots=True)
class RefreshStats:
    """What one refresh of the index did, counted in source files.

    ``added``, ``updated`` and ``removed`` files were (re-)indexed or dropped; ``unchanged`` ones
    were skipped because their hash matched; ``skipped`` ones could not be indexed (unreadable,
    too large, not parseable, or a symlink out of the root). ``sections`` is the number of
    searchable rows in the index afterwards: one per document plus one per section.
    """

    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: int = 0
    sections: int = 0
    seconds: float = 0.0

    @property
    def changed(self) -> int:
        """Files whose index entries were written or deleted; 0 means the refresh did no work."""
        return self.added + self.updated + self.removed


class Corpus:
    """A searchable, sandboxed corpus backed by an on-disk SQLite FTS5 index.

    Open one with :meth:`Corpus.open`; it is refreshed on open and can be refreshed again with
    :meth:`refresh`. Close it with :meth:`close` or use it as a context manager.
    """

    def __init__(
        self, conn: sqlite3.Connection, *, root: Path | None, index_path: Path, stdlib: Path
    ) -> None:
        """Wrap an open index; use :meth:`Corpus.open`, which creates and refreshes it."""
        self._conn = conn
        self._lock = threading.Lock()
        self._root = root
        self._stdlib = stdlib
        self.index_path = index_path
        self.last_refresh = RefreshStats()

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path | None = None, *, index_path: Path | None = None) -> Corpus:
        """Open the corpus at ``root`` (None: the default Python corpus) and bring its index up to date.

        The index goes to ``index_path``, or by default to
        ``$XDG_CACHE_HOME/orchestrator/corpus-<hash of root>.sqlite`` (``~/.cache`` when the
        variable is unset). ``last_refresh`` reports what the refresh on open did.

        Raises:
            CorpusError: the root is not a directory, this Python's SQLite lacks FTS5, or
                ``index_path`` is not an index this module wrote.
        """
        _require_fts5()
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        if root is not None:
            root = Path(root).expanduser().resolve()
            if not root.is_dir():
                raise CorpusError(f"corpus root {str(root)!r} is not a directory")
        if index_path is None:
            index_path = _default_index_path(_root_key(root, stdlib))
        index_path = Path(index_path).expanduser()
        try:
            index_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CorpusError(
                f"cannot create the index folder {str(index_path.parent)!r}: {exc}"
            ) from exc
        conn = sqlite3.connect(
            index_path, check_same_thread=False, isolation_level=None, timeout=60
        )
        try:
            _prepare_schema(conn, index_path, _root_key(root, stdlib))
            corpus = cls(conn, root=root, index_path=index_path, stdlib=stdlib)
            corpus.refresh()
        except BaseException:
            conn.close()
            raise
        return corpus

    @property
    def root(self) -> Path | None:
        """The folder this corpus indexes (resolved), or None for the default Python corpus."""
        return self._root

    @property
    def name(self) -> str:
        """A short human description of the corpus, for tool descriptions and logs."""
        if self._root is None:
            version = ".".join(map(str, sys.version_info[:2]))
            return f"Python {version} language reference and standard library docstrings"
        return f"documents under {self._root}"

    def close(self) -> None:
        """Close the index; the corpus cannot be used afterwards."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Corpus:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Corpus {self.name!r} index={str(self.index_path)!r}>"

    # -- indexing --------------------------------------------------------------------------------

    def refresh(self) -> RefreshStats:
        """Re-index files whose hash changed, drop deleted ones, skip the rest; return the counts.

        Everything happens in one write transaction, so a concurrent reader (or another process
        sharing the index) sees either the old index or the new one, never half of each.
        """
        with self._lock:
            started = time.perf_counter()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                stats = self._refresh_locked(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if stats.changed >= 50:  # after a big rebuild, merge FTS segments for faster queries
                conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
            sections = conn.execute("SELECT count(*) FROM sections").fetchone()[0]
            stats = RefreshStats(
                stats.added,
                stats.updated,
                stats.removed,
                stats.unchanged,
                stats.skipped,
                sections,
                round(time.perf_counter() - started, 4),
            )
            self.last_refresh = stats
            return stats

    def _refresh_locked(self, conn: sqlite3.Connection) -> RefreshStats:
        stored: dict[str, str] = dict(conn.execute("SELECT key, signature FROM sources"))
        next_n: int = (conn.execute("SELECT max(n) FROM sections").fetchone()[0] or 0) + 1
        added = updated = unchanged = skipped = 0
        seen: set[str] = set()
        stale: list[tuple[str]] = []
        upserts: list[tuple[str, str]] = []
        section_rows: list[tuple[int, str, str, str, str]] = []
        fts_rows: list[tuple[int, str, str]] = []
        new_ids: set[str] = set()
        for source in self._sources():
            if source is None:  # a file that cannot be indexed
                skipped += 1
                continue
            seen.add(source.key)
            old = stored.get(source.key)
            if old == source.signature:
                unchanged += 1
                continue
            if old is not None:
                stale.append((source.key,))
            try:
                sections = source.load()
            except (SyntaxError, ValueError, UnicodeError, OSError, RecursionError, MemoryError):
                sections = []  # recorded with its hash so it is not re-parsed on every open
                skipped += 1
            else:
                if old is None:
                    added += 1
                else:
                    updated += 1
            upserts.append((source.key, source.signature))
            for section in sections:
                if section.id in new_ids:
                    continue
                new_ids.add(section.id)
                section_rows.append((next_n, section.id, section.doc, source.key, section.title))
                fts_rows.append((next_n, section.heading, section.body))
                next_n += 1
        removed = [(key,) for key in stored.keys() - seen]
        stale += removed
        conn.executemany(
            "DELETE FROM fts WHERE rowid IN (SELECT n FROM sections WHERE source = ?)", stale
        )
        conn.executemany("DELETE FROM sections WHERE source = ?", stale)
        conn.executemany("DELETE FROM sources WHERE key = ?", removed)
        conn.executemany(
            "INSERT INTO sections(n, id, doc, source, title) VALUES (?,?,?,?,?)", section_rows
        )
        conn.executemany("INSERT INTO fts(rowid, title, body) VALUES (?,?,?)", fts_rows)
        conn.executemany("INSERT OR REPLACE INTO sources(key, signature) VALUES (?,?)", upserts)
        return RefreshStats(added, updated, len(removed), unchanged, skipped)

    def _sources(self) -> Iterator[Source | None]:
        if self._root is None:
            yield from topic_sources(self._stdlib)
            yield from stdlib_sources(self._stdlib)
        else:
            yield from folder_sources(self._root)

    # -- searching and reading -------------------------------------------------------------------

    def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        """Return up to ``limit`` sections ranked by BM25 relevance to the free-text ``query``.

        The query is turned into a safe FTS5 expression (each word quoted, words ORed, common
        English stopwords dropped unless nothing else is left), so punctuation or FTS5 syntax
        in the query can never cause an error; a query without any word returns no hits.
        Titles weigh more than bodies, words match by stem ("decoding" finds "decode"), and no
        document takes more than two of the places while others match too.
        """
        if not isinstance(limit, int) or limit < 1:
            raise CorpusError(f"limit must be a positive integer, got {limit!r}")
        if not is_text(query):
            raise CorpusError("the query holds a lone surrogate, which is not text")
        expression = _fts_query(query)
        if expression is None:
            return []
        # Rank inside FTS5 and join the ids, fetching extra rows so one long document cannot
        # fill every slot; snippets (the costly part) only for the rows finally chosen.
        ranked_sql = (
            "SELECT s.n, s.id, s.doc, s.title, f.rank FROM ("
            "  SELECT rowid, rank FROM fts WHERE fts MATCH ? AND rank MATCH ? ORDER BY rank LIMIT ?"
            ") AS f JOIN sections AS s ON s.n = f.rowid ORDER BY f.rank"
        )
        rank = f"bm25({_TITLE_WEIGHT}, {_BODY_WEIGHT})"
        limit = min(limit, _MAX_LIMIT)
        with self._lock, self._snapshot():
            rows = self._conn.execute(ranked_sql, (expression, rank, limit * 4 + 10)).fetchall()
            kept, spare = spread_per_doc(rows, lambda row: row[2])
            chosen = sorted(kept[:limit] + spare[: max(0, limit - len(kept))], key=lambda r: r[4])
            snippets = dict(
                self._conn.execute(
                    "SELECT rowid, snippet(fts, 1, '**', '**', ' … ', 24) FROM fts "
                    f"WHERE fts MATCH ? AND rowid IN ({','.join('?' * len(chosen))})",
                    (expression, *(row[0] for row in chosen)),
                ).fetchall()
            )
        return [
            SearchHit(
                id=hit_id, title=title, snippet=_one_line(snippets[n]), score=round(-score, 4)
            )
            for n, hit_id, _, title, score in chosen
        ]

    def read(self, doc_id: str, *, max_chars: int | None = None) -> Document:
        """Return a whole document (``guide/intro.md``) or one section (``guide/intro.md#setup``).

        ``max_chars`` caps the returned text (``truncated`` then says so). Ids come from
        :meth:`search`. For a folder corpus the id is a path relative to the root and is checked
        before any lookup, so it can never name a file outside the root.

        Raises:
            CorpusError: the id is refused by the sandbox, or names nothing in the corpus.
        """
        if max_chars is not None and (not isinstance(max_chars, int) or max_chars < 1):
            raise CorpusError(f"max_chars must be a positive integer, got {max_chars!r}")
        doc_id = self._check_id(doc_id)
        with self._lock, self._snapshot():
            found = self._conn.execute(
                "SELECT doc FROM sections WHERE id = ?", (doc_id,)
            ).fetchone()
            if found is None:
                raise CorpusError(self._unknown_id_message(doc_id))
            if found[0] == doc_id:
                rows = self._conn.execute(
                    "SELECT s.id, s.title, fts.body FROM sections AS s JOIN fts ON fts.rowid = s.n "
                    "WHERE s.doc = ? ORDER BY s.n",
                    (doc_id,),
                ).fetchall()
            else:  # the section and the parts a long one was indexed in (``<id>~2``, ...)
                parts = doc_id + "~"
                rows = self._conn.execute(
                    "SELECT s.id, s.title, fts.body FROM sections AS s JOIN fts ON fts.rowid = s.n "
                    "WHERE s.doc = ? AND (s.id = ? OR substr(s.id, 1, ?) = ?) ORDER BY s.n",
                    (found[0], doc_id, len(parts), parts),
                ).fetchall()
        title = rows[0][1]
        text = "\n\n".join(row[2] for row in rows if row[2])
        sections = tuple(row[0] for row in rows[1:])
        total = len(text)
        truncated = max_chars is not None and total > max_chars
        if truncated:
            text = text[:max_chars]
        return Document(doc_id, title, text, sections, truncated, total)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction around a method's queries: a refresh committed by another
        process between two of them (the ranking and the snippets, an id and its rows) would
        otherwise pair rows of the old index with rows of the new one."""
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            if self._conn.in_transaction:  # (an SQLite error may have rolled it back)
                self._conn.execute("COMMIT")

    def _check_id(self, doc_id: str) -> str:
        """Refuse ids that could name something outside the corpus; return the normalized id."""
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise CorpusError("empty document id: use search to find ids")
        if "\x00" in doc_id:
            raise CorpusError("refused: the document id contains a NUL byte")
        if not is_text(doc_id):
            raise CorpusError("refused: the document id holds a lone surrogate, which is not text")
        doc_id = doc_id.strip()
        if self._root is None:
            return doc_id  # ids of the default corpus are names, never paths
        path, sep, section = doc_id.partition("#")
        windows = PureWindowsPath(path)
        if path.startswith(("/", "\\")) or PurePosixPath(path).is_absolute() or windows.drive:
            raise CorpusError(
                f"refused {doc_id!r}: absolute paths are not allowed; ids are paths relative to "
                "the corpus root, as search returns them"
            )
        parts = re.split(r"[\\/]", path)
        if ".." in parts:
            raise CorpusError(f"refused {doc_id!r}: '..' would leave the corpus root")
        parts = [part for part in parts if part not in ("", ".")]
        if not parts:
            raise CorpusError(f"no document id in {doc_id!r}: use search to find ids")
        root = self._root
        try:
            resolved = root.joinpath(*parts).resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops
            raise CorpusError(f"refused {doc_id!r}: the path cannot be resolved ({exc})") from exc
        if not resolved.is_relative_to(root):
            raise CorpusError(
                f"refused {doc_id!r}: it resolves outside the corpus root through a symlink"
            )
        return "/".join(parts) + sep + section

    def _unknown_id_message(self, doc_id: str) -> str:
        doc, sep, section = doc_id.partition("#")
        if sep:
            names = [
                row[0]
                for row in self._conn.execute(
                    "SELECT id FROM sections WHERE doc = ? AND id != doc ORDER BY n LIMIT 30",
                    (doc,),
                )
            ]
            if (
                names
                or self._conn.execute("SELECT 1 FROM sections WHERE id = ?", (doc,)).fetchone()
            ):
                listed = ", ".join(names) if names else "none (read the whole document)"
                return f"document {doc!r} has no section {section!r}; its sections: {listed}"
        if self._root is None:
            for prefix in ("stdlib:", "topic:"):
                if self._conn.execute(
                    "SELECT 1 FROM sections WHERE id = ?", (prefix + doc_id,)
                ).fetchone():
                    return f"no document {doc_id!r}; did you mean {prefix + doc_id!r}?"
            example = "ids look like 'topic:for', 'stdlib:json' or 'stdlib:json#JSONDecoder'"
        else:
            on_disk = self._root / doc
            if on_disk.is_file() and on_disk.suffix.lower() not in FOLDER_SUFFIXES:
                kinds = ", ".join(sorted(FOLDER_SUFFIXES))
                return f"{doc!r} is not part of the corpus: only {kinds} files are indexed"
            if on_disk.is_file() and _size(on_disk) > MAX_FILE_BYTES:
                return (
                    f"{doc!r} is not part of the corpus: files over {MAX_FILE_BYTES // 2**20} MiB "
                    "are not indexed"
                )
            if on_disk.is_file():
                return (
                    f"{doc!r} is not indexed yet (it is newer than the index): refresh the corpus"
                )
            example = "ids are paths relative to the corpus root, like 'guide/intro.md#setup'"
        return f"no document {doc_id!r} in this corpus: use search to find ids ({example})"


def _size(path: Path) -> int:
    """The file's size, 0 if it went away meanwhile."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


# -- the index file ------------------------------------------------------------------------------


def _require_fts5() -> None:
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(_FTS5_PROBE)
    except sqlite3.OperationalError as exc:
        raise CorpusError(
            f"this Python's SQLite ({sqlite3.sqlite_version}) was built without the FTS5 "
            f"full-text extension ({exc}), which corpus search needs; use a Python whose sqlite3 "
            "includes FTS5 (python.org, pyenv, Homebrew and most Linux distributions' builds do)"
        ) from exc
    finally:
        probe.close()


def _root_key(root: Path | None, stdlib: Path) -> str:
    if root is None:
        return f"python-docs:{sys.implementation.cache_tag}:{sys.version}:{stdlib}"
    return f"folder:{root}"


def _default_index_path(key: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(base) / "orchestrator" / f"corpus-{digest}.sqlite"


def _prepare_schema(conn: sqlite3.Connection, path: Path, key: str) -> None:
    """Create the tables, or rebuild them when the schema or root changed; refuse foreign files."""
    try:
        conn.execute("BEGIN")  # one snapshot: another process may be creating the index right now
        try:
            current = _stored_key(conn, path) == key
        finally:
            conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise CorpusError(
            f"{str(path)!r} is not a readable corpus index ({exc}); delete it to rebuild"
        ) from exc
    if current:
        return
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _stored_key(conn, path) == key:  # another process built it while we waited
            conn.execute("COMMIT")
            return
        for table in ("fts", "sections", "sources", "meta"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("CREATE TABLE sources(key TEXT PRIMARY KEY, signature TEXT NOT NULL)")
        conn.execute(
            "CREATE TABLE sections(n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
            "doc TEXT NOT NULL, source TEXT NOT NULL, title TEXT NOT NULL)"
        )
        conn.execute("CREATE INDEX sections_doc ON sections(doc)")
        conn.execute("CREATE INDEX sections_source ON sections(source)")
        conn.execute(
            "CREATE VIRTUAL TABLE fts USING fts5(title, body, "
            "tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        conn.execute("INSERT INTO meta(key, value) VALUES ('root', ?)", (key,))
        conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _stored_key(conn: sqlite3.Connection, path: Path) -> str | None:
    """The root key of a current-schema index, or None when it must be (re)built.

    Raises CorpusError for a database that has tables but was not written by this module, so a
    mistyped ``index_path`` never destroys someone else's data.
    """
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
    if tables and app_id != _APPLICATION_ID:
        raise CorpusError(
            f"{str(path)!r} is a SQLite database this module did not write; "
            "choose another index_path"
        )
    if not tables or conn.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA_VERSION:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'root'").fetchone()
    return str(row[0]) if row else None


def _fts_query(text: str) -> str | None:
    """Turn free text into an FTS5 expression that cannot be a syntax error.

    Every word becomes a quoted term and the terms are ORed, so BM25 ranks by how many (and how
    rare) of them a section holds. Stopwords are dropped unless nothing else is left, and each
    pair of adjacent words becomes a quoted phrase as well: phrases are rare, so a section that
    says "with statement" outranks one that merely contains both words.
    """
    words = [word.lower() for word in _WORD.findall(text)][:64]
    if not words:
        return None
    terms = [word for word in words if word not in STOPWORDS] or words
    pairs = [
        f"{a} {b}"
        for a, b in itertools.pairwise(words)
        if a != b and not (a in STOPWORDS and b in STOPWORDS) and not {a, b} & _ARTICLES
    ]
    unique = list(dict.fromkeys(terms))[:24] + list(dict.fromkeys(pairs))[:12]
    return " OR ".join(f'"{term}"' for term in unique)


def spread_per_doc(items: Iterable[T], doc_of: Callable[[T], str]) -> tuple[list[T], list[T]]:
    """``items`` split, in order, into the first :data:`PER_DOC` of each document and the rest,
    so one long document cannot take every place while others match too."""
    kept: list[T] = []
    spare: list[T] = []
    per_doc: dict[str, int] = {}
    for item in items:
        doc = doc_of(item)
        seen = per_doc.get(doc, 0)
        per_doc[doc] = seen + 1
        (kept if seen < PER_DOC else spare).append(item)
    return kept, spare


def _one_line(text: str) -> str:
    return " ".join(text.split())
