"""How free text becomes a safe FTS5 query, and how the places of a ranking are shared out.

Used by :meth:`~.corpus.Corpus.search` (the BM25 query, no document taking every place) and by
the search tool's re-ranking in :mod:`.tools` (the same stopwords, the same spread).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["PER_DOC", "STOPWORDS", "fts_query", "spread_per_doc"]

T = TypeVar("T")

PER_DOC = 2  # hits from one document before others get a turn

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


def fts_query(text: str) -> str | None:
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
