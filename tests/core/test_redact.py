"""Redaction: secret values and key-shaped tokens never leave as they are."""

from __future__ import annotations

import secrets

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.redact import (
    _PATTERNS,
    REDACTED,
    hold_secrets,
    looks_secret,
    redact,
    secret_values,
    shown_url,
    url_secrets,
)

KEY_SHAPED = [
    "sk-ant-api03-AbCdEf012345",
    "sk-proj-AbCdEf0123456789_-xyz",
    "sk-svcacct-AbCdEf0123456789",
    "sk-admin-AbCdEf0123456789",
    "sk-AbCdEf0123456789AbCdEf0123456789AbCdEf01234567",
    "Bearer abcdef0123456789ABCDEF",
    "bEaReR   0123456789abcdefXYZ/+=",
    "x-api-key: 'abcdefgh12345678'",
    'x-api-key"="ABCDEFGH_1234',
    "X-Api-Key: abcdefgh12345678",
]


def test_key_shaped_tokens_are_redacted_in_any_case_of_their_marker() -> None:
    for token in KEY_SHAPED:
        out = redact(f"before {token} after", ())
        assert REDACTED in out and out.startswith("before ") and out.endswith(" after"), out


@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.sampled_from(KEY_SHAPED),
            st.sampled_from(
                [
                    "sk-",
                    "sk-ant-",
                    "SK-ANT-",
                    "sk-proj-",
                    "task-",
                    "x-",
                    "api-key",
                    "X-API-KEY=",
                    "Bearer ",
                    "bEARER\t",
                ]
            ),
            st.text(alphabet="abcdefXYZ0123456789_-=:'\" ", min_size=8, max_size=24),
        ),
        max_size=8,
    ).map("".join)
)
def test_the_quick_check_never_skips_a_match_of_the_patterns(text: str) -> None:
    """Text is only searched with the full patterns when it holds a marker: that shortcut must
    never let through anything the patterns would have caught."""
    assert redact(text, ()) == _PATTERNS.sub(REDACTED, text)


def test_words_that_only_resemble_keys_are_kept() -> None:
    for kept in ("task-abcdefghijklmnopqrstuvwxyz", "sk-short", "ask-AbCdEf0123456789AbCdEf01"):
        assert redact(f"see {kept}.", ()) == f"see {kept}.", kept


def test_held_secrets_are_redacted_like_the_environments_from_then_on() -> None:
    held, short = f"held-{secrets.token_hex(8)}", "tiny7ch"
    assert redact(f"x {held} y") == f"x {held} y"
    hold_secrets(held, short)
    assert redact(f"x {held} y") == f"x {REDACTED} y"
    assert held in secret_values() and short not in secret_values()  # 8 characters at least


def test_names_that_say_secret_are_told_from_names_that_do_not() -> None:
    for name in ("API_KEY", "Authorization", "X-Api-Key", "DB_PASS", "github_token", "Cookie"):
        assert looks_secret(name), name
    for name in ("LOG_LEVEL", "PATH", "HOME", "Accept", "User-Agent", "REGION"):
        assert not looks_secret(name), name


def test_a_urls_password_and_secret_query_values_are_found_and_hidden() -> None:
    url = "https://bob:hunter2hunter2@h.example:8443/mcp?api_key=K123&sig=S9&region=eu&page=2"
    assert url_secrets(url) == ["hunter2hunter2", "bob:hunter2hunter2", "K123", "S9"]
    assert shown_url(url) == (
        f"https://***@h.example:8443/mcp?api_key={REDACTED}&sig={REDACTED}&region=eu&page=2"
    )
    plain = "http://127.0.0.1:9/mcp?region=eu"
    assert url_secrets(plain) == [] and shown_url(plain) == plain
