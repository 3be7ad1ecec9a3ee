"""What a corpus hands back and what it raises: hits, documents, refresh counts, CorpusError.

Kept apart from :class:`~.corpus.Corpus` so that the index file's code (:mod:`.index_file`)
can raise :class:`CorpusError` without importing the corpus itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import OrchestratorError

__all__ = ["CorpusError", "Document", "RefreshStats", "SearchHit"]


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
