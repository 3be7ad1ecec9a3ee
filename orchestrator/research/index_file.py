"""The corpus index file: where it lives, its schema, and which files it will not touch.

The schema carries a version (bumped when the tables or the way documents are split change,
forcing a rebuild) and an application id, so an ``index_path`` that names someone else's SQLite
file is refused rather than overwritten. Building happens under a write lock, so processes
opening one index at once build it once.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .results import CorpusError

if TYPE_CHECKING:  # loaded when a corpus opens
    import sqlite3

__all__ = ["default_index_path", "prepare_schema", "root_key"]

_SCHEMA_VERSION = 4  # bump when the schema or the way documents are split changes: forces a rebuild
_APPLICATION_ID = 0x4F524350  # "ORCP": marks a SQLite file as ours before we write to it


def root_key(root: Path | None, stdlib: Path) -> str:
    if root is None:
        return f"python-docs:{sys.implementation.cache_tag}:{sys.version}:{stdlib}"
    return f"folder:{root}"


def default_index_path(key: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(base) / "orchestrator" / f"corpus-{digest}.sqlite"


def prepare_schema(conn: sqlite3.Connection, path: Path, key: str) -> None:
    """Create the tables, or rebuild them when the schema or root changed; refuse foreign files."""
    import sqlite3

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
