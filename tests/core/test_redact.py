"""Redaction: secret values and key-shaped tokens never leave as they are."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.redact import _PATTERNS, REDACTED, redact

KEY_SHAPED = [
    "sk-ant-api03-AbCdEf012345",
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
                ["sk-", "sk-ant-", "SK-ANT-", "x-", "api-key", "X-API-KEY=", "Bearer ", "bEARER\t"]
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
