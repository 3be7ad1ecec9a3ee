"""Compatibility path: the same names as :mod:`orchestrator.research.corpus`, where they now live."""

from __future__ import annotations

from .research.corpus import Corpus as Corpus
from .research.corpus import CorpusError as CorpusError
from .research.corpus import Document as Document
from .research.corpus import RefreshStats as RefreshStats
from .research.corpus import SearchHit as SearchHit

__all__ = [
    "Corpus",
    "CorpusError",
    "Document",
    "RefreshStats",
    "SearchHit",
]
