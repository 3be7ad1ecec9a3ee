"""Which search hits to read and which passages of what was read to quote.

The offline model's research step: :func:`choose_reads` picks the best-ranked hits of distinct
documents that bear on the question, and :func:`select_passages` picks the whole sentences of
prose that answer it best, quoted verbatim so that every citation can be checked against the
document it names. Scoring is by shared content words (:mod:`.questions`), folded as
:mod:`.words` folds them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .questions import DETERMINERS, WORD, keywords
from .words import fold

__all__ = ["choose_reads", "select_passages"]

READS_PER_SEARCH = 3
PASSAGES_PER_ANSWER = 3
PASSAGES_PER_DOC = 2
MIN_SHARE = 0.7  # below this share of the best score, a passage may not bring in a new document
PASSAGE_CHARS = 420  # a passage grows sentence by sentence up to this many characters
SENTENCE_CHARS = 480  # a longer first sentence is cut at a word boundary and marked with "..."

# words of any script split at "_" too: an identifier's parts ("lru_cache": "lru", "cache")
_PART = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*`])")


def _folded(text: str) -> set[str]:
    """The folded words of ``text``: identifiers whole and split at underscores and dots."""
    out = {fold(w) for w in WORD.findall(text)}
    out.update(fold(w) for w in _PART.findall(text))
    return out


# -- research: which hits to read, which passages to quote --------------------------------------


def choose_reads(
    task: str, hits: Sequence[tuple[str, str]], *, already: set[str] | frozenset[str] = frozenset()
) -> list[str]:
    """The ids to read: the best-ranked hits of distinct documents that bear on ``task``.

    Hits are taken in the search's rank order (BM25 already weighs how rare each word is). A
    hit whose id, title and snippet share no content word with the task (as written, plurals
    folded: the index stems harder, so "generic" can answer "generators") waits behind the
    others, and so does a second section of a document already chosen; a hit repeating the text
    of one already chosen (the same section shipped twice) is skipped. Only when no hit shares
    a word are the top two read anyway.
    """
    words = {fold(w) for w in keywords(task)}
    seen_text: set[str] = set()
    first: list[str] = []
    second: list[str] = []
    unrelated: list[str] = []
    docs: set[str] = set()
    for hit_id, text in hits:
        if hit_id in already or hit_id in first or hit_id in second or hit_id in unrelated:
            continue
        key = " ".join(_PART.findall(_strip_title(text).lower()))[:160]
        if key and key in seen_text:
            continue
        seen_text.add(key)
        if words and not words & _folded(f"{hit_id} {text}"):
            unrelated.append(hit_id)
            continue
        doc = hit_id.split("#", 1)[0]
        (second if doc in docs else first).append(hit_id)
        docs.add(doc)
    return (first + second)[:READS_PER_SEARCH] or unrelated[:2]


def _strip_title(text: str) -> str:
    """The snippet part of a hit (the line after its title)."""
    _, _, rest = text.partition("\n")
    return rest or text


def select_passages(
    question: str, documents: Sequence[tuple[str, str]], limit: int = PASSAGES_PER_ANSWER
) -> list[tuple[str, str]]:
    """Up to ``limit`` (doc id, passage) pairs from ``documents`` that best answer ``question``.

    ``documents`` are (id, text) in the order they were read (best search rank first). A
    passage is one or more whole sentences of a prose paragraph, quoted verbatim (whitespace
    tidied). It scores by the distinct question words it holds (plurals folded), counting the
    words its document's id names as held (``stdlib:functools#lru_cache`` is about lru_cache
    even where a sentence does not repeat the name), plus a bonus for reading like a definition
    of a question word, for a better-ranked document, and for opening its document. Grammar
    rules, code, tables and headings are never quoted. At most two passages come from one
    document, a text is quoted once, and a passage scoring under ``MIN_SHARE`` of the best may
    add to a document already quoted but not bring in a new one.
    """
    words = {fold(w) for w in keywords(question)}
    if not words:
        return []
    scored: list[tuple[float, int, str, str]] = []
    order = 0
    n_docs = len(documents)
    for rank, (doc_id, text) in enumerate(documents):
        named = words & _folded(doc_id.replace(":", " ").replace("#", " "))
        for position, para in enumerate(_paragraphs(text)):
            passage = _passage(para, words, anywhere=bool(named))
            if passage is None:
                continue
            score = (
                len(words & (_folded(passage) | named))
                + (0.75 if _defines(passage, words) else 0.0)
                + (n_docs - rank) / n_docs
                + (0.5 if position == 0 else 0.2 / (1 + position))
                + 0.2 * min(len(passage), 300) / 300
            )
            scored.append((-score, order, doc_id, passage))
            order += 1
    scored.sort()
    best: list[tuple[str, str]] = []
    per_doc: dict[str, int] = {}
    quoted: set[str] = set()
    floor = -scored[0][0] * MIN_SHARE if scored else 0.0
    for negative, _, doc_id, passage in scored:
        if -negative < floor and doc_id not in per_doc:
            continue  # a weak passage may add to a document already quoted, not bring a new one
        if passage in quoted or per_doc.get(doc_id, 0) >= PASSAGES_PER_DOC:
            continue
        quoted.add(passage)
        per_doc[doc_id] = per_doc.get(doc_id, 0) + 1
        best.append((doc_id, passage))
        if len(best) == limit:
            break
    return best


def _paragraphs(text: str) -> list[str]:
    """Prose paragraphs of a read result, whitespace tidied; headings, rules, grammar, code,
    tables and the read tool's own notes left out."""
    out = []
    for raw in re.split(r"\n\s*\n", text):
        lines = [
            line
            for line in raw.splitlines()
            if line.strip() and not re.fullmatch(r"\s*([=*\-~^#+`'\"])\1{2,}\s*", line)
        ]
        para = _strip_signature(" ".join(" ".join(lines).split()))
        if len(para) < 30 or para.startswith(
            ("[truncated", "[characters", "[sections:", ">>>", "...")
        ):
            continue
        if "::=" in para or para.count("|") >= 4 or "+--" in para or para.startswith("# "):
            continue
        letters = sum(ch.isalpha() or ch == " " for ch in para)
        if letters < 0.75 * len(para):  # signatures, code, tables
            continue
        if not (para.endswith((".", ":", "!", "?", ".)")) or ". " in para):
            continue  # no sentence in it: a heading, a code line, a list of names
        para = re.sub(r"^(?:[-*•+]|\d+[.)])\s+", "", para)  # a list item's bullet
        out.append(para)
    return out


_DEFINING = frozenset({"is", "are", "refers", "means", "denotes"})
_DEFINED_AS = frozenset({"a", "an", "the", "used", "called", "defined", "known", "one", "to"})
_NAMING = frozenset({"called", "named", "termed"})


def _defines(passage: str, words: set[str]) -> bool:
    """Whether ``passage`` reads like a definition of a question word: "a *context manager* is
    an object ...", "... is called a *generator function*", "lambda expressions are used to"."""
    tokens = [t.lower() for t in _PART.findall(passage)]
    for i, token in enumerate(tokens[:-2]):
        if fold(token) in words and tokens[i + 1] in _DEFINING and tokens[i + 2] in _DEFINED_AS:
            return True
        if token in _NAMING:
            after = [t for t in tokens[i + 1 : i + 4] if t not in DETERMINERS]
            if after and fold(after[0]) in words:
                return True
    return False


_SIGNATURE = re.compile(r"(?:class\s+)?[A-Za-z_][\w.]*\(")


def _strip_signature(para: str) -> str:
    """``name(args) text`` -> ``text``: the call signature a docstring section opens with is
    code, not prose. Returns "" when the paragraph is nothing but a signature or a heading like
    ``Module json``."""
    if re.fullmatch(r"Module [\w.]+", para):
        return ""
    m = _SIGNATURE.match(para)
    if m is None:
        return para
    depth = 0
    for i in range(m.end() - 1, len(para)):
        if para[i] == "(":
            depth += 1
        elif para[i] == ")":
            depth -= 1
            if depth == 0:
                rest = re.sub(r"^\s*->\s*\S+", "", para[i + 1 :])
                return rest.strip()
    return ""


def _passage(para: str, words: set[str], *, anywhere: bool = False) -> str | None:
    """Whole sentences of ``para`` up to ``PASSAGE_CHARS``, from the first that holds a question
    word (from the first sentence when ``anywhere``; None when no sentence holds one); a first
    sentence longer than ``SENTENCE_CHARS`` is cut at a word boundary and marked with "..."."""
    sentences = [s.strip() for s in _SENTENCE_END.split(para) if s.strip()]
    start = next((i for i, s in enumerate(sentences) if words & _folded(s)), None)
    if start is None:
        if not anywhere or not sentences:
            return None
        start = 0
    first = sentences[start]
    if len(first) > SENTENCE_CHARS:
        cut = first[:SENTENCE_CHARS].rsplit(" ", 1)[0].rstrip(" ,;:")
        return cut + " ..."
    out = first
    for sentence in sentences[start + 1 :]:
        if len(out) + 1 + len(sentence) > PASSAGE_CHARS:
            break
        out = f"{out} {sentence}"
    return out
