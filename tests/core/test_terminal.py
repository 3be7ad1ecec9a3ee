"""``terminal_safe``: what every writer of the command line passes text through."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.terminal import terminal_safe

DANGEROUS = {"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"}


def unsafe_characters(text: str, multiline: bool = False) -> list[str]:
    """Characters a terminal could act on or that could disguise text, joiners between two
    non-ASCII characters excepted."""
    out = []
    for i, ch in enumerate(text):
        if multiline and ch in "\n\t":
            continue
        if unicodedata.category(ch) not in DANGEROUS:
            continue
        joins = 0 < i < len(text) - 1 and all(
            not c.isascii() and c.isprintable() for c in (text[i - 1], text[i + 1])
        )
        if ch in "\u200c\u200d" and joins:
            continue
        out.append(ch)
    return out


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("clear\x1b[2Jscreen", "clear\\x1b[2Jscreen"),  # CSI
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC title, BEL-terminated
        (
            "\x1b]8;;https://e.x/\x1b\\link\x1b]8;;\x1b\\",
            "\\x1b]8;;https://e.x/\\x1b\\link\\x1b]8;;\\x1b\\",
        ),
        ("c1\x9b31m", "c1\\x9b31m"),  # 8-bit CSI
        ("del\x7f", "del\\x7f"),
        ("nul\x00bs\x08", "nul\\x00bs\\x08"),
        ("one\ntwo\tthree\rfour", "one\\ntwo\\tthree\\rfour"),
        ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override
        ("\u2066isolate\u2069", "\\u2066isolate\\u2069"),
        ("rm\u200b-rf", "rm\\u200b-rf"),  # zero-width space
        ("delete\u200dall", "delete\\u200dall"),  # a joiner between ASCII letters disguises
        ("👨\u200d\u202e", "👨\\u200d\\u202e"),  # ... and next to what is escaped, joins nothing
        ("tag\U000e0041", "tag\\U000e0041"),  # tag characters ("ASCII smuggling")
        ("bom\ufeff", "bom\\ufeff"),
        ("line\u2028sep", "line\\u2028sep"),
        ("lone\ud800", "lone\\ud800"),
        ("new\U0010fffe", "new\\U0010fffe"),  # unassigned
    ],
)
def test_control_and_format_characters_are_shown_as_escapes(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii, with [brackets] and \\backslashes\\",
        "日本語のテキスト　全角スペース",  # ideographic space
        "prix\u00a0net",  # no-break space
        "👨\u200d👩\u200d👧 family",  # emoji joined by ZWJ
        "می\u200cخواهم",  # Persian with ZWNJ
        "icon \ue0b0",  # private use (icon fonts)
        "combining e\u0301",
    ],
)
def test_text_in_any_script_is_kept_as_written(text: str) -> None:
    assert terminal_safe(text) == text


def test_multiline_keeps_newlines_and_tabs_but_not_carriage_returns() -> None:
    assert terminal_safe("a\n\tb\r\x1b[1A", multiline=True) == "a\n\tb\\r\\x1b[1A"


def test_secrets_are_redacted_before_the_text_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-1234567890")
    assert terminal_safe("use tok-1234567890 now") == "use [REDACTED] now"
    # the cut falls inside the secret: it is redacted first, so no part of it is shown
    assert terminal_safe("x" * 5 + "tok-1234567890", limit=10) == "xxxxx[REDA…"
    assert terminal_safe("use tok-1234567890", secrets=()) == "use tok-1234567890"


def test_anything_not_a_string_is_shown_as_its_str() -> None:
    assert terminal_safe(42) == "42"
    assert terminal_safe(["a\x1b"]) == "['a\\x1b']"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=60), st.booleans())
def test_no_output_holds_a_character_a_terminal_acts_on(text: str, multiline: bool) -> None:
    shown = terminal_safe(text, multiline=multiline, secrets=())
    assert unsafe_characters(shown, multiline) == []
    # nothing is dropped: every character is there, as itself or as its escape
    assert len(shown) >= len(text)
