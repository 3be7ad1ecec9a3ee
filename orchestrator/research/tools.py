"""The research tools: ``search`` and ``read`` over a :class:`~.corpus.Corpus`.

The corpus opens lazily, on the first call, in the tool's worker thread: defining a tree (or
``--dry-run``) never builds an index. Errors (an unknown id, a path escaping the corpus root)
come back to the model as ``is_error`` results with the corpus's own explanation. ``search``
re-ranks the corpus's BM25 hits by the query words their titles hold (:func:`rerank`).

The corpus root is the ``root`` argument, else the ``ORCHESTRATOR_CORPUS`` environment variable
(the CLI's ``--corpus DIR`` sets it), else the default corpus: the Python documentation that
ships with the interpreter.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import ToolError
from ..core.tools import Tool, tool
from .corpus import Corpus, CorpusError, SearchHit
from .ranking import STOPWORDS, spread_per_doc
from .words import fold

__all__ = ["CORPUS_ENV", "corpus_tools", "rerank"]

CORPUS_ENV = "ORCHESTRATOR_CORPUS"
READ_CHARS = 6000
#: Candidates fetched per requested hit before re-ranking by title words.
POOL_FACTOR = 4

_TERM = re.compile(r"[A-Za-z0-9]+")


class _OpenedOnFirstUse:
    """The corpus the two tools share, opened on first use.

    It pickles as where the corpus is (not the open index, nor the lock), so a tree holding
    the tools can be sent to another process (a Dask worker), which opens its own index there.
    """

    def __init__(self, root: Path | str | None, index_path: Path | None) -> None:
        self._root = root
        self._index_path = index_path
        self._lock = threading.Lock()
        self._opened: Corpus | None = None

    def __call__(self) -> Corpus:
        with self._lock:
            if self._opened is None:
                where = self._root if self._root is not None else os.environ.get(CORPUS_ENV)
                self._opened = Corpus.open(
                    Path(where) if where else None, index_path=self._index_path
                )
            return self._opened

    def __getstate__(self) -> tuple[Path | str | None, Path | None]:
        return self._root, self._index_path

    def __setstate__(self, state: tuple[Path | str | None, Path | None]) -> None:
        self.__init__(*state)  # type: ignore[misc]


def corpus_tools(root: Path | str | None = None, *, index_path: Path | None = None) -> list[Tool]:
    """``[search, read]`` over one corpus, opened on first use and shared by both tools."""
    corpus = _OpenedOnFirstUse(root, index_path)

    @tool(idempotent=True)
    def search(query: str, limit: int = 5) -> str:
        """Search the document corpus (BM25 ranking). Each hit starts with its id in brackets.

        Args:
            query: Words to look for; plain words work best.
            limit: How many hits to return (1-20).
        """
        limit = max(1, min(limit, 20))
        try:
            hits = rerank(query, corpus().search(query, limit=limit * POOL_FACTOR + 10), limit)
        except CorpusError as exc:
            raise ToolError(str(exc)) from None
        if not hits:
            skipped = corpus().last_refresh.skipped
            files = (
                "1 file of the folder is" if skipped == 1 else f"{skipped} files of the folder are"
            )
            note = (
                f" ({files} not indexed: over 8 MiB, a name holding '#' or '\\' or not "
                "UTF-8, unreadable, or a link out of the folder.)"
                if skipped
                else ""
            )
            return f"No documents match {query!r}. Try other or fewer words.{note}"
        return "\n".join(f"[{h.id}] {h.title}\n    {h.snippet}" for h in hits)

    @tool(idempotent=True)
    def read(doc_id: str, start: int = 0) -> str:
        """Read a document, or one section of it (``id#section``), by the id search gave.

        Args:
            doc_id: A document id from search, such as ``topic:for`` or ``stdlib:json#loads``.
            start: Where to start, in characters (for the rest of a long text).
        """
        try:
            doc = corpus().read(doc_id)
        except CorpusError as exc:
            raise ToolError(str(exc)) from None
        total = len(doc.text)
        if not 0 <= start < max(total, 1):
            raise ToolError(f"{doc.id} has {total} characters; start must be 0 to {total - 1}")
        end = min(total, start + READ_CHARS)
        parts = [f"# {doc.title} [{doc.id}]", "", doc.text[start:end]]
        if start or end < total:  # a long text: its pages, the way to the next
            rest = f"; read({doc.id!r}, start={end}) for the rest" if end < total else ""
            parts.append(f"\n[characters {start}-{end} of {total}{rest}]")
        if doc.sections:
            parts.append("\n[sections: " + ", ".join(doc.sections[:40]) + "]")
        return "\n".join(parts)

    return [search, read]


def _terms(text: str) -> list[str]:
    return list(dict.fromkeys(fold(w) for w in _TERM.findall(text)))


def rerank(query: str, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
    """The best ``limit`` of ``hits`` (BM25-ranked) once titles that hold the query's words as
    written are preferred; ties keep the BM25 order.

    ``search`` ranks with the corpus's BM25 (titles weigh more, words match by their Porter
    stem), then re-ranks a wider pool of candidates by how many of the query's words the hit's
    id and title hold *as written* (plural and -ed/-ing endings folded, nothing more): Porter
    stemming conflates "generators" with "generic" and "generate", and a title that merely
    shares a stem outranks the section actually named after the word. A hit's score is
    multiplied by ``1 + share`` of the query words its title holds, so the body match still
    decides between hits whose titles hold as many. No document takes more than two of the
    places while others are left.
    """
    words = [w for w in _terms(query) if w not in STOPWORDS] or _terms(query)
    scored = []
    for order, hit in enumerate(hits):
        _, _, name = hit.id.partition(":")  # "stdlib:json#loads" -> "json#loads"
        in_title = set(_terms(f"{name} {hit.title}"))
        share = sum(w in in_title for w in words) / len(words) if words else 0.0
        scored.append((-hit.score * (1 + share), order, hit))
    scored.sort(key=lambda s: (s[0], s[1]))
    kept, spare = spread_per_doc((hit for _, _, hit in scored), lambda h: h.id.split("#", 1)[0])
    return (kept + spare)[:limit]
