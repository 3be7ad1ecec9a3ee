"""Compatibility path: the same names as :mod:`orchestrator.research.offline`, where they now live."""

from __future__ import annotations

from ..research.offline import OfflineModel as OfflineModel
from ..research.offline import example_arguments as example_arguments
from ..research.offline import keywords as keywords
from ..research.offline import search_query as search_query
from ..research.offline import select_passages as select_passages
from ..research.offline import split_question as split_question

__all__ = [
    "OfflineModel",
    "example_arguments",
    "keywords",
    "search_query",
    "select_passages",
    "split_question",
]
