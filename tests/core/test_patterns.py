"""Schema patterns matched in linear time (orchestrator/core/patterns.py): the same verdicts as
``re.search``, on random patterns and strings, without its backtracking."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.patterns import compile_pattern

ATOMS = ["a", "b", ".", "[ab]", "[^a]", "\\d", "\\w", "\\s", "\\D", "[a-c0-9_]", "x", "\\n"]


def patterns(depth: int = 3) -> st.SearchStrategy[str]:
    atom = st.sampled_from(ATOMS)
    if depth == 0:
        return atom

    def build(parts: list[str]) -> st.SearchStrategy[str]:
        return st.just("".join(parts))

    inner = patterns(depth - 1)
    return st.one_of(
        atom,
        st.lists(inner, min_size=1, max_size=3).flatmap(build),
        st.tuples(
            inner, st.sampled_from(["*", "+", "?", "*?", "{2}", "{1,3}", "{0,2}?", "{2,}"])
        ).map(lambda t: f"(?:{t[0]}){t[1]}"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
    )


anchored = st.tuples(
    st.sampled_from(["", "^", "\\A", "\\b"]), patterns(), st.sampled_from(["", "$", "\\Z", "\\B"])
).map("".join)
texts = st.text(alphabet="ab1 x_\n-", max_size=12)


@given(anchored, texts)
def test_the_linear_matcher_finds_what_re_finds(pattern: str, text: str) -> None:
    matches = compile_pattern(pattern)
    assert matches is not None, pattern
    assert matches(text) == (re.search(pattern, text) is not None), (pattern, text)


def test_patterns_it_does_not_cover_are_left_to_re() -> None:
    for pattern in ("(?i)ab", "(a)\\1", "(?=a)b", "(?!a)b", "(?<=a)b", "(?>a+)b", "a++"):
        assert compile_pattern(pattern) is None, pattern
    assert compile_pattern("a{100000}") is None  # past the size it compiles
    assert compile_pattern("é\\w+ü") is not None


def test_classes_read_unicode_as_re_does() -> None:
    for pattern, text in (("^\\d$", "\u0660"), ("^\\w+$", "héllo_1"), ("^\\s$", "\u2003")):
        matches = compile_pattern(pattern)
        assert matches is not None and matches(text) == bool(re.search(pattern, text))
