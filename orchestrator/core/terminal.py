"""Text fit for a terminal: the one function every writer of the command line and the trace
view passes text through before it reaches a screen (only a run's answer on stdout is written
as the model wrote it).

A tool name the model made up, a tool's error, a provider's error body, a span name or an
agent name read from a trace file can carry escape sequences: ``ESC [ 2 J`` clears the screen,
``ESC ] 0 ; ... BEL`` retitles the window, ``ESC ] 8 ; ; URL ESC \\`` turns text into a link to
somewhere else, U+202E shows the rest of a line backwards, and a zero-width character hides
inside a name. :func:`terminal_safe` redacts secrets (:func:`~.redact.redact`) and then shows
every such character as a visible escape (``\\x1b``, ``\\x9b``, ``\\u202e``) instead of
writing it: nothing is dropped silently, and no sequence can start, since every one begins
with a control character.

What is kept: printable text in any script, spaces of every width, private-use glyphs
(icon fonts), and the joiners U+200C/U+200D between two non-ASCII characters (emoji
sequences, Persian and Indic scripts need them; between ASCII letters they only disguise a
name). ``multiline`` keeps newlines and tabs for texts meant to span lines (a traceback);
a carriage return is always escaped (it would let a line overwrite itself).
"""

from __future__ import annotations

import unicodedata
from typing import Final

from .redact import redact

__all__ = ["terminal_safe"]

_JOINERS: Final = frozenset("\u200c\u200d")
_KEPT_CATEGORIES: Final = frozenset({"Zs", "Co"})  # spaces, private use: nothing to hide
_LINE_BREAKS: Final = frozenset("\n\t")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(ch: str) -> str:
    """``ch`` as Python writes it in a string literal (``\\n``, ``\\x1b``, ``\\u202e``)."""
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _joinable(ch: str) -> bool:
    """Whether a joiner next to ``ch`` joins something (an emoji, a letter of a script that
    needs one) rather than hiding between ASCII letters or next to an escaped character."""
    return not ch.isascii() and ch.isprintable()


def _neutralized(text: str, multiline: bool) -> str:
    out: list[str] = []
    last = len(text) - 1
    for i, ch in enumerate(text):
        if ch.isprintable() or (multiline and ch in _LINE_BREAKS):
            out.append(ch)
        elif ch in _JOINERS:
            joins = 0 < i < last and _joinable(text[i - 1]) and _joinable(text[i + 1])
            out.append(ch if joins else _escaped(ch))
        elif unicodedata.category(ch) in _KEPT_CATEGORIES:
            out.append(ch)
        else:  # C0, DEL, C1, format (bidi, zero-width), surrogates, unassigned, U+2028/9
            out.append(_escaped(ch))
    return "".join(out)


def terminal_safe(
    text: object,
    *,
    multiline: bool = False,
    limit: int | None = None,
    secrets: tuple[str, ...] | None = None,
) -> str:
    """``text`` (``str()`` of anything else) fit to write to a terminal.

    Secrets are redacted first (``secrets`` is a :func:`~.redact.secret_values` snapshot;
    without one, the running run's or the environment's), then cut to ``limit`` characters
    (``…`` marks the cut; redacting first, so a secret cut in half is still found), then every
    control, format and unassigned character is shown as a backslash escape. ``multiline``
    keeps ``\\n`` and ``\\t``; otherwise they are escaped too, so the text stays one line.
    """
    value = text if isinstance(text, str) else str(text)
    value = redact(value, secrets)
    if limit is not None and len(value) > limit:
        value = value[:limit] + "…"
    if value.isprintable():  # the common case: nothing to look at character by character
        return value
    return _neutralized(value, multiline)
