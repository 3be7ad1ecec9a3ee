"""Compatibility path: the same names as :mod:`orchestrator.toolsets.notes`, where they now live."""

from __future__ import annotations

from .toolsets.notes import MAX_NOTE_CHARS as MAX_NOTE_CHARS
from .toolsets.notes import MAX_TITLE_CHARS as MAX_TITLE_CHARS
from .toolsets.notes import Note as Note
from .toolsets.notes import NoteStore as NoteStore
from .toolsets.notes import notes_tools as notes_tools

__all__ = [
    "MAX_NOTE_CHARS",
    "MAX_TITLE_CHARS",
    "Note",
    "NoteStore",
    "notes_tools",
]
