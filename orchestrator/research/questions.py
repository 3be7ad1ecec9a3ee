"""What a question asks: its content words, the search to run, and its sub-questions.

The offline model reads a task the way a researcher would before searching: :func:`keywords`
drops question words, auxiliaries and filler (keeping a function word used as a name, "the with
statement"), :func:`search_query` turns them into a search, and :func:`split_question` splits a
compound question into the sub-questions a lead hands to its researchers. Rules and word tables
only: no model, no corpus.
"""

from __future__ import annotations

import re

from .words import fold

__all__ = ["keywords", "most_subquestions", "search_query", "split_question"]

MAX_SUBQUESTIONS = 4
"""How many researchers the offline lead starts when its instructions name no bound."""

# words of any script ("sécurité", "Größe"), as the corpus reads them; identifiers keep "_"
WORD = re.compile(r"\w+")

# Words that say nothing about what to look for: English function words, question words,
# auxiliaries, the verbs of asking ("how do I use ...", "explain ..."), and "python", the
# subject of the default corpus (so common there that it only adds noise to a query).
# fmt: off
_STOP_TEXT = """
a about after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing done during each either else even ever
every few for from further get gets getting go goes had has have having he her here hers him
his how i if in into is it its itself just let lets like may me might more most much must my
myself need needs no nor not now of off on once one only or other our ours out over own per
please same shall she should so some such than that the their theirs them then there these
they this those through to too under until up upon us very via vs versus was we were what
whatever when where whether which who whom whose why will with within without would
yes yet you your yours
make makes use uses used using work works working worked happen happens mean means meant explain
explains describe describes tell show shows give gives want try way ways example examples
difference differences compare
thing things kind kinds actually really
python
"""
# fmt: on
_STOP = frozenset(_STOP_TEXT.split())
_DETERMINERS_TEXT = (
    "a an the this that these those each every any some no its their my your our his her which "
    "what whose one i we you it they"
)
DETERMINERS = frozenset(_DETERMINERS_TEXT.split())
# Nouns that make the word before them a name: "the with statement", "the for loop".
_NAME_NOUNS = frozenset(
    {"statement", "loop", "clause", "keyword", "operator", "expression", "block"}
)
# "How do X and Y work in Python" -> "How do X work in Python", "How do Y work in Python"
_PAIR = re.compile(
    r"(?i)^(?P<pre>.*?\b(?:do|does|did|are|is|were|was|about|of|between|can|should)\s+)"
    r"(?P<a>[\w.-]+(?:\s+[\w.-]+){0,3}?)\s+and\s+"
    r"(?P<b>[\w.-]+(?:\s+[\w.-]+){0,3}?)"
    r"(?P<post>\s+(?:work|works|behave|differ|mean|relate|do|get|in|for|with)\b.*)?$"
)
# "Explain X, Y, and Z" / "How do X, Y and Z work?" -> one question per item
_LIST = re.compile(
    r"(?i)^(?P<pre>.*?\b(?:do|does|did|are|is|were|was|about|of|between|can|should|explain|"
    r"describe)\s+)"
    r"(?P<items>[\w.-]+(?:\s+[\w.-]+){0,3}?(?:\s*,\s*[\w.-]+(?:\s+[\w.-]+){0,3}?)+"
    r"\s*,?\s+and\s+[\w.-]+(?:\s+[\w.-]+){0,3}?)"
    r"(?P<post>\s+(?:work|works|behave|differ|mean|relate|do|get|in|for|with)\b.*)?$"
)
_COMPARING = re.compile(
    r"(?i)\b(?:difference|differences|differ|between|compare|versus|vs|equivalent|"
    r"interchangeable|alike|same|similar|enough|related)\b"
)
_LIST_SEPARATOR = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+", re.IGNORECASE)
_COMPARE = re.compile(
    r"(?i)^\s*(?:compare|contrast)\s+(.+?)\s+(?:and|with|to|vs\.?|versus)\s+(.+)$"
)
_CLAUSES = re.compile(
    r",\s*(?:and\s+)?(?=(?:how|what|why|when|which|where|who|is|are|does|do|can)\b)"
    r"|\s+and\s+(?=(?:how|what|why|when|which|where|who)\b)",
    re.IGNORECASE,
)


# "never more than six", "at most 6 researchers": the bound a lead's instructions set
_BOUND = re.compile(
    r"(?i)\b(?:never more than|no more than|at most)\s+(\d+|one|two|three|four|five|six|seven|"
    r"eight|nine|ten|eleven|twelve)\b"
)
_NUMBERS = "one two three four five six seven eight nine ten eleven twelve"
_NUMBER_WORDS = {w: i + 1 for i, w in enumerate(_NUMBERS.split())}


# -- words ----------------------------------------------------------------------------------------


def keywords(text: str) -> list[str]:
    """The content words of ``text`` (lower-cased, in order, once each): no question words,
    auxiliaries, pronouns or filler verbs. A function word used as a name is kept: quoted
    (``"with"``) or followed by "statement", "loop", "clause", "keyword" or the like ("the with
    statement", "the for loop")."""
    seen: dict[str, None] = {}
    found = list(WORD.finditer(text))
    for i, m in enumerate(found):
        w = m.group().lower()
        if len(w.strip("_")) < 2:
            continue
        if w in _STOP:
            before, after = text[m.start() - 1 : m.start()], text[m.end() : m.end() + 1]
            quoted = bool(before) and before == after and before in "\"'`"
            following = found[i + 1].group().lower() if i + 1 < len(found) else ""
            if w in DETERMINERS or not (quoted or fold(following) in _NAME_NOUNS):
                continue
        seen.setdefault(w, None)
    return list(seen)


def search_query(task: str) -> str:
    """The search to run for ``task``: its content words, or the task itself if it has none."""
    words = keywords(task)
    return " ".join(words) if words else " ".join(task.split())[:300]


# -- splitting a question -----------------------------------------------------------------------


def _content_count(text: str) -> int:
    return len(keywords(text))


def _is_plural(word: str) -> bool:
    w = word.lower()
    return w.endswith("s") and not w.endswith(("ss", "us", "is"))


def _split_pair(part: str) -> list[str] | None:
    """``How do X and Y work`` -> the question about X and the one about Y, or None."""
    m = _PAIR.match(part)
    if m is None:
        return None
    pre, a, b, post = m.group("pre"), m.group("a"), m.group("b"), m.group("post") or ""
    if not keywords(a) or not keywords(b):
        return None
    a_words, b_words = a.split(), b.split()
    # "shallow and deep copies of objects": a lone modifier borrows the other side's head noun.
    b_head = [w for w in b_words if w.lower() not in DETERMINERS]
    if _content_count(a) == 1 and not _is_plural(a_words[-1]) and len(b_head) >= 2:
        a = " ".join([*a_words, *b_head[1:]])
    # "exceptions raised and handled": a lone participle borrows the other side's subject;
    # "create temporary files and directories": a lone noun borrows a verb and its modifiers.
    elif len(b_words) == 1 and (
        (
            b_words[0].lower().endswith("ed")
            and a_words[-1].lower().endswith("ed")
            and len(a_words) >= 2
        )
        or _content_count(a) >= 3
    ):
        b = " ".join([*a_words[:-1], b])
    return [f"{pre}{a}{post}", f"{pre}{b}{post}"]


def _split_list(part: str) -> list[str] | None:
    """``Explain X, Y, and Z`` -> one question per item (three or more), or None.

    Only plain lists of names split: a question that compares ("the difference between X, Y
    and Z") stays whole, and so does one whose items hold function words ("Is it true that
    X, Y and Z are mutable": the list is not what the question is about).
    """
    m = _LIST.match(part)
    if m is None:
        return None
    pre, post = m.group("pre"), m.group("post") or ""
    if _COMPARING.search(part):  # ("X, Y and Z equivalent": the last item holds the word)
        return None
    items = [i for i in _LIST_SEPARATOR.split(m.group("items")) if i.strip()]
    if len(items) < 3:
        return None
    for item in items:
        words = [w.lower() for w in item.split() if w.lower() not in DETERMINERS]
        named = set(keywords(item))  # keeps a function word used as a name ("the with statement")
        if (
            not words
            or len(words) > 3
            or not named
            or any(w in _STOP and w not in named for w in words)
        ):
            return None
    return [f"{pre}{item}{post}" for item in items]


def split_question(question: str, limit: int | None = MAX_SUBQUESTIONS) -> list[str]:
    """Split a compound question into up to four sub-questions (at least one).

    Sentences and clauses ("..., and how ...") split first; then "compare X and Y", lists
    ("explain X, Y, and Z") and "how do X and Y work" split into one question per item (a lone modifier or participle
    borrows what the two sides share: "shallow and deep copies" -> "shallow copies" and "deep
    copies"). Parts without a content word are dropped; duplicates are kept once. ``limit``
    (``None``: all) bounds how many come back.
    """
    parts = [p.strip(" .,;:") for p in re.split(r"[?;]\s*|\n+", question) if p.strip(" .,;:")]
    out: list[str] = []
    for part in parts or [question.strip()]:
        for clause in _CLAUSES.split(part):
            clause = clause.strip(" .,;:")
            compare = _COMPARE.match(clause)
            if compare:
                pieces = [compare.group(1), compare.group(2)]
            else:
                pieces = _split_list(clause) or _split_pair(clause) or [clause]
            out.extend(p.strip(" .,;:") for p in pieces if keywords(p))
    unique = list(dict.fromkeys(out))
    return (unique or [question.strip() or "the task"])[:limit]


def most_subquestions(instructions: str) -> int:
    """How many sub-questions a lead with these instructions researches at most: the bound
    they state ("never more than six", "at most 4"), else :data:`MAX_SUBQUESTIONS`."""
    m = _BOUND.search(instructions)
    if m is None:
        return MAX_SUBQUESTIONS
    word = m.group(1).lower()
    return max(1, int(word) if word.isdigit() else _NUMBER_WORDS[word])
