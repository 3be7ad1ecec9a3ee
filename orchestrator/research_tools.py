"""The research tools: ``search`` and ``read`` over a :class:`~orchestrator.corpus.Corpus`.

The corpus opens lazily, on the first call, in the tool's worker thread: defining a tree (or
``--dry-run``) never builds an index. Errors (an unknown id, a path escaping the corpus root)
come back to the model as ``is_error`` results with the corpus's own explanation.

The corpus root is the ``root`` argument, else the ``ORCHESTRATOR_CORPUS`` environment variable
(the CLI's ``--corpus DIR`` sets it), else the default corpus: the Python documentation that
ships with the interpreter.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .corpus import Corpus, CorpusError
from .errors import ToolError
from .tools import Tool, tool

__all__ = ["CORPUS_ENV", "corpus_tools"]

CORPUS_ENV = "ORCHESTRATOR_CORPUS"
READ_CHARS = 6000


def corpus_tools(root: Path | str | None = None, *, index_path: Path | None = None) -> list[Tool]:
    """``[search, read]`` over one corpus, opened on first use and shared by both tools."""
    lock = threading.Lock()
    opened: list[Corpus] = []

    def corpus() -> Corpus:
        with lock:
            if not opened:
                where = root if root is not None else os.environ.get(CORPUS_ENV) or None
                opened.append(Corpus.open(Path(where) if where else None, index_path=index_path))
            return opened[0]

    @tool(idempotent=True)
    def search(query: str, limit: int = 5) -> str:
        """Search the document corpus (BM25 ranking). Each hit starts with its id in brackets.

        Args:
            query: Words to look for; plain words work best.
            limit: How many hits to return (1-20).
        """
        try:
            hits = corpus().search(query, limit=max(1, min(limit, 20)))
        except CorpusError as exc:
            raise ToolError(str(exc)) from None
        if not hits:
            return f"No documents match {query!r}. Try other or fewer words."
        return "\n".join(f"[{h.id}] {h.title}\n    {h.snippet}" for h in hits)

    @tool(idempotent=True)
    def read(doc_id: str) -> str:
        """Read a document, or one section of it (``id#section``), by the id search gave.

        Args:
            doc_id: A document id from search, such as ``topic:for`` or ``stdlib:json#loads``.
        """
        try:
            doc = corpus().read(doc_id, max_chars=READ_CHARS)
        except CorpusError as exc:
            raise ToolError(str(exc)) from None
        parts = [f"# {doc.title} [{doc.id}]", "", doc.text]
        if doc.truncated:
            parts.append(
                f"\n[truncated at {READ_CHARS} of {doc.total_chars} characters; read a section instead]"
            )
        if doc.sections:
            parts.append("\n[sections: " + ", ".join(doc.sections[:40]) + "]")
        return "\n".join(parts)

    return [search, read]
