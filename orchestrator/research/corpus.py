"""The research corpus: ranked full-text search and sandboxed reads over one SQLite FTS5 index.

A research agent needs to find the passages that bear on a question (:meth:`Corpus.search`) and
to read one in full (:meth:`Corpus.read`). FTS5 ships inside the ``sqlite3`` of nearly every
Python build: no server, no extra dependency, BM25 ranking and highlighted snippets built in.
This module owns the :class:`Corpus`: opening, incremental refresh, search, read and the id
sandbox. Around it: the values it returns (:mod:`.results`), the index file's place and schema
(:mod:`.index_file`), how a query is phrased and places shared out (:mod:`.ranking`), and the
documents themselves (:mod:`.sources`).
"""

from __future__ import annotations

import contextlib
import re
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import TracebackType
from typing import TYPE_CHECKING

from ..core.messages import is_text
from .index_file import default_index_path, prepare_schema, root_key
from .ranking import fts_query, spread_per_doc
from .results import CorpusError as CorpusError
from .results import Document as Document
from .results import RefreshStats as RefreshStats
from .results import SearchHit as SearchHit
from .sources import (
    FOLDER_SUFFIXES,
    MAX_FILE_BYTES,
    Source,
    folder_sources,
    stdlib_sources,
    topic_sources,
)

if TYPE_CHECKING:  # loaded when a corpus opens: `from orchestrator import *` never needs it
    import sqlite3

__all__ = ["Corpus", "CorpusError", "Document", "RefreshStats", "SearchHit"]

_TITLE_WEIGHT, _BODY_WEIGHT = 8.0, 1.0
_MAX_LIMIT = 50
_FTS5_PROBE = "CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)"


class Corpus:
    """A searchable, sandboxed corpus backed by an on-disk SQLite FTS5 index.

    Open one with :meth:`Corpus.open`; it is refreshed on open and can be refreshed again with
    :meth:`refresh`. Close it with :meth:`close` or use it as a context manager.

    Two kinds of corpus:

    * **The default corpus** (``Corpus.open()``), which every Python installation already has:
      the language reference topics shipped with the interpreter (``pydoc_data/topics.py``, ids
      like ``topic:for``) and the standard library's docstrings (ids like ``stdlib:json`` and
      ``stdlib:json#JSONDecoder``). Both are read from source with :mod:`ast`; no standard
      library module is imported, so indexing runs no third-party or platform code.
    * **A folder** (``Corpus.open(path)``) of ``.md``/``.markdown``/``.txt``/``.rst``/``.html``/
      ``.htm`` files. Ids are paths relative to the root (``guide/intro.md``), and headings split
      a file into sections (``guide/intro.md#installation``) so a read can return just the part
      that matters.

    The index lives on disk (a cache directory unless ``index_path`` is given) and is refreshed
    incrementally whenever a corpus is opened: folder files are compared by content hash
    (SHA-256), the standard library by ``(mtime, size)`` (it changes only when Python is
    upgraded), so reopening an unchanged corpus reads no document twice. Ids given to
    :meth:`read` are checked before any lookup: ``..``, absolute paths, NUL bytes and symlinks
    that lead outside the root are refused, and symlinks that escape the root are never indexed
    in the first place.

    One corpus may be used from several threads at once (the agent loop runs sync tools in
    worker threads): a single connection opened with ``check_same_thread=False`` is guarded by a
    lock. Queries are short, so serialising them is simpler than a pool and costs little.
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
            index_path = default_index_path(root_key(root, stdlib))
        index_path = Path(index_path).expanduser()
        try:
            index_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CorpusError(
                f"cannot create the index folder {str(index_path.parent)!r}: {exc}"
            ) from exc
        import sqlite3

        conn = sqlite3.connect(
            index_path, check_same_thread=False, isolation_level=None, timeout=60
        )
        try:
            prepare_schema(conn, index_path, root_key(root, stdlib))
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
        expression = fts_query(query)
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


def _require_fts5() -> None:
    import sqlite3

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


def _one_line(text: str) -> str:
    return " ".join(text.split())
