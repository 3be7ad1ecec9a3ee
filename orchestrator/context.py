"""Compatibility path: the same names as :mod:`orchestrator.core.compaction`, where they now live."""

from __future__ import annotations

from .core.compaction import CLEARED_PREFIX as CLEARED_PREFIX
from .core.compaction import ContextPolicy as ContextPolicy
from .core.compaction import TurnContext as TurnContext

__all__ = [
    "CLEARED_PREFIX",
    "ContextPolicy",
    "TurnContext",
]
