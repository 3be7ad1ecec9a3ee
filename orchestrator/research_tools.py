"""Compatibility path: the same names as :mod:`orchestrator.research.tools`, where they now live."""

from __future__ import annotations

from .research.tools import CORPUS_ENV as CORPUS_ENV
from .research.tools import corpus_tools as corpus_tools
from .research.tools import rerank as rerank

__all__ = [
    "CORPUS_ENV",
    "corpus_tools",
    "rerank",
]
