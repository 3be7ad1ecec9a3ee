"""Word folding shared by search re-ranking and the offline model.

A light stemmer: the corpus index uses Porter stemming, which conflates words that a reader
keeps apart ("generators" and "generic"); these helpers fold only the endings that never change
a word's meaning.
"""

from __future__ import annotations

__all__ = ["fold"]


def fold(word: str) -> str:
    """A word lower-cased with a plural, -ed, -ing, -er or -e ending dropped: "raised" meets
    "raise" and "classes" meets "class", but "generators" does not meet "generic" (Porter stems
    both to "gener"). Shared with the offline model's passage scoring."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    for suffix in ("ing", "ers", "er", "ed", "es", "s", "e"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)]
    return w
