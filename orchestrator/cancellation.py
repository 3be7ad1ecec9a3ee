"""Telling a cancellation apart from a failure.

A nursery whose children were all cancelled raises a group of ``trio.Cancelled``; code that
records how an agent or a span ended must treat that group as the cancellation it is.
"""

from __future__ import annotations

import trio

__all__ = ["is_cancellation"]


def is_cancellation(exc: BaseException) -> bool:
    """True for ``trio.Cancelled`` and for exception groups made only of cancellations."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(is_cancellation(e) for e in exc.exceptions)
    return False
