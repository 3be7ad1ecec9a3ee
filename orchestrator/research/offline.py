"""``offline``: a deterministic model without an LLM, so every tree runs on any machine.

It reads the request like a model would, but decides by rules, from the transcript alone (so it
is stateless like the scripted models: the same transcript always gets the same reply):

* offered ``spawn_subagent``, it splits the task into sub-questions (``split_question``) and
  spawns one researcher per sub-question (or, when no subagent looks like a researcher, each
  subagent once with the whole task), then writes an answer from their reports, keeping their
  citations;
* offered ``search`` and ``read`` (the research tools), it searches with the question's content
  words (``search_query``: question words, auxiliaries and filler dropped), reads the best hits
  of distinct documents (skipping hits that share no word with the question and duplicates of a
  text already chosen), and answers with the passages of what it read that share the most words
  with the question. Every passage is quoted verbatim (whole sentences, whitespace tidied; a
  ``...`` marks where an over-long sentence was cut) and followed by the ``[id]`` it came from;
* offered other tools, it calls each once with arguments valid for its JSON schema
  (``example_arguments``), then finishes with what they returned.

Provider ``offline`` in traces, zero cost, zero billed tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from ..models.base import ModelContext, ModelRequest, ModelResponse, ToolSpec
from .words import fold

__all__ = [
    "OfflineModel",
    "example_arguments",
    "keywords",
    "search_query",
    "select_passages",
    "split_question",
]

SPAWN = "spawn_subagent"
MAX_SUBQUESTIONS = 4
SEARCH_LIMIT = 8  # hits asked for: the first five are the ranking, the rest spares to read
READS_PER_SEARCH = 3
PASSAGES_PER_ANSWER = 3
PASSAGES_PER_DOC = 2
MIN_SHARE = 0.7  # below this share of the best score, a passage may not bring in a new document
PASSAGE_CHARS = 420  # a passage grows sentence by sentence up to this many characters
SENTENCE_CHARS = 480  # a longer first sentence is cut at a word boundary and marked with "..."

# words of any script ("sécurité", "Größe"), as the corpus reads them; identifiers keep "_"
_WORD = re.compile(r"\w+")
_PART = re.compile(r"[^\W_]+")
# a hit's id runs to the "]" that ends it: a file name may hold spaces and brackets
_ID_LINE = re.compile(r"^\[(.+?)\](?=\s|$)", re.MULTILINE)
# a researcher's cited line ends "- passage [id]": the id is what the last " [" on the line
# opens (a quoted passage may hold brackets of its own; an id may hold spaces and brackets)
_ID_CITE = re.compile(r"^- .* \[(.+)\]$", re.MULTILINE)
_LEAD_IN = "What the documents say about"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*`])")

# Words that say nothing about what to look for: English function words, question words,
# auxiliaries, the verbs of asking ("how do I use ...", "explain ..."), and "python", the
# subject of the default corpus (it names a sixth of it, so it only adds noise to a query).
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
_DETERMINERS = frozenset(_DETERMINERS_TEXT.split())
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


# -- words ----------------------------------------------------------------------------------------


def keywords(text: str) -> list[str]:
    """The content words of ``text`` (lower-cased, in order, once each): no question words,
    auxiliaries, pronouns or filler verbs. A function word used as a name is kept: quoted
    (``"with"``) or followed by "statement", "loop", "clause", "keyword" or the like ("the with
    statement", "the for loop")."""
    seen: dict[str, None] = {}
    found = list(_WORD.finditer(text))
    for i, m in enumerate(found):
        w = m.group().lower()
        if len(w.strip("_")) < 2:
            continue
        if w in _STOP:
            before, after = text[m.start() - 1 : m.start()], text[m.end() : m.end() + 1]
            quoted = bool(before) and before == after and before in "\"'`"
            following = found[i + 1].group().lower() if i + 1 < len(found) else ""
            if w in _DETERMINERS or not (quoted or fold(following) in _NAME_NOUNS):
                continue
        seen.setdefault(w, None)
    return list(seen)


def search_query(task: str) -> str:
    """The search to run for ``task``: its content words, or the task itself if it has none."""
    words = keywords(task)
    return " ".join(words) if words else " ".join(task.split())[:300]


def _folded(text: str) -> set[str]:
    """The folded words of ``text``: identifiers whole and split at underscores and dots."""
    out = {fold(w) for w in _WORD.findall(text)}
    out.update(fold(w) for w in _PART.findall(text))
    return out


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
    b_head = [w for w in b_words if w.lower() not in _DETERMINERS]
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
        words = [w.lower() for w in item.split() if w.lower() not in _DETERMINERS]
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


# -- arguments for arbitrary tools --------------------------------------------------------------

_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "duration": "P1D",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "hostname": "example.com",
}


def example_arguments(spec: ToolSpec, task: str) -> dict[str, Any]:
    """Arguments valid for ``spec``'s JSON schema (required fields only), text from the task."""
    schema = spec.input_schema
    value = _example_value(schema, task, schema, 0)
    return value if isinstance(value, dict) else {}


def _example_value(prop: Mapping[str, Any], task: str, root: Mapping[str, Any], depth: int) -> Any:
    if depth > 8:
        return None
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, Mapping) else {}
        merged = {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
        return _example_value(merged, task, root, depth + 1)
    if "const" in prop:
        return prop["const"]
    if prop.get("enum"):
        return prop["enum"][0]
    if "default" in prop:
        return prop["default"]
    for key in ("anyOf", "oneOf"):
        if key in prop:
            options = [p for p in prop[key] if p.get("type") != "null"] or list(prop[key])
            return _example_value(options[0], task, root, depth + 1) if options else None
    if prop.get("allOf"):
        merged = {}
        for part in prop["allOf"]:
            merged.update(part)
        return _example_value(merged, task, root, depth + 1)
    kind = prop.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if kinds else "null"
    if kind == "string":
        return _example_string(prop, task)
    if kind == "integer":
        return _example_number(prop, integer=True)
    if kind == "number":
        return _example_number(prop, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        prefix = list(prop.get("prefixItems", []))
        items = prop.get("items", {"type": "string"})
        count = max(int(prop.get("minItems", 0)), len(prefix))
        values = [
            _example_value(prefix[i] if i < len(prefix) else items, task, root, depth + 1)
            for i in range(count)
        ]
        if prop.get("uniqueItems") and all(isinstance(v, int | float) for v in values):
            values = [v + i for i, v in enumerate(values)]
        elif prop.get("uniqueItems") and all(isinstance(v, str) for v in values):
            values = [f"{v}{i}" if i else v for i, v in enumerate(values)]
        return values
    if kind == "object" or "properties" in prop:
        props: Mapping[str, Any] = prop.get("properties", {})
        return {
            name: _example_value(props.get(name, {}), task, root, depth + 1)
            for name in prop.get("required", [])
        }
    return task[:200] or "x"  # no type at all: any JSON value is valid; a string is simplest


def _example_string(prop: Mapping[str, Any], task: str) -> str:
    fmt = prop.get("format")
    if fmt in _FORMATS:
        return _FORMATS[fmt]
    text = " ".join(task.split()) or "x"
    low = int(prop.get("minLength", 0))
    high = prop.get("maxLength")
    if len(text) < low:
        text = (text + " ") * (low // (len(text) + 1) + 1)
        text = text[: max(low, 1)]
    limit = min(int(high), 200) if high is not None else 200
    text = text[: max(limit, low)]
    if high is not None and int(high) == 0:
        return ""
    return text


def _example_number(prop: Mapping[str, Any], *, integer: bool) -> int | float:
    """The first of a few candidates (1, the bounds, just inside them, their middle, multiples
    of ``multipleOf``) that satisfies every numeric keyword of ``prop``."""
    low, high = prop.get("minimum"), prop.get("maximum")
    xlow, xhigh = prop.get("exclusiveMinimum"), prop.get("exclusiveMaximum")
    multiple = prop.get("multipleOf")

    def valid(v: float) -> bool:
        return (
            (low is None or v >= low)
            and (high is None or v <= high)
            and (xlow is None or v > xlow)
            and (xhigh is None or v < xhigh)
            and (not multiple or abs(v / multiple - round(v / multiple)) < 1e-9)
        )

    bottom = low if low is not None else xlow
    top = high if high is not None else xhigh
    candidates: list[float] = [1, 0]
    for edge in (low, high):
        if edge is not None:
            candidates.append(edge)
    if xlow is not None:
        candidates += [xlow + 1, xlow + 1e-3]
    if xhigh is not None:
        candidates += [xhigh - 1, xhigh - 1e-3]
    if bottom is not None and top is not None:
        candidates.append((bottom + top) / 2)
    candidates += [-1]
    if multiple:
        candidates += [
            multiple * f(c / multiple) for c in list(candidates) for f in (math.ceil, math.floor)
        ]
    for c in candidates:
        for v in [math.ceil(c), math.floor(c)] if integer else [c]:
            if valid(v):
                return int(v) if integer else float(v)
    fallback = bottom if bottom is not None else top if top is not None else 1
    return int(fallback) if integer else float(fallback)


# -- the model ----------------------------------------------------------------------------------


class OfflineModel:
    """The deterministic stand-in model used when no API key is set (see the module doc)."""

    provider = "offline"

    @property
    def name(self) -> str:
        return "offline"

    def cost(self, usage: Usage) -> float:
        return 0.0

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        content = self.decide(request)
        for block in content:
            if isinstance(block, TextBlock):
                ctx.on_text_delta(block.text)
            else:
                ctx.on_tool_call_start(block.id, block.name)
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
        return ModelResponse(tuple(content), stop, Usage(), "offline", "")

    def decide(self, request: ModelRequest) -> list[TextBlock | ToolUseBlock]:
        """The next reply for ``request``'s transcript."""
        tools = {t.name: t for t in request.tools}
        messages = request.messages
        task = _first_user_text(messages)
        turn = request.turn_index()
        previous = _last_assistant(messages)
        results = _results_of(messages)
        if previous is None or not previous.tool_uses:
            return self._first_move(tools, task, turn)
        names = {c.name for c in previous.tool_uses}
        if SPAWN in names:
            return [TextBlock(self._synthesize(task, previous.tool_uses, results))]
        if "search" in names and "read" in tools:
            hits = [
                hit
                for c in previous.tool_uses
                if c.name == "search" and c.id in results and not results[c.id].is_error
                for hit in _parse_hits(results[c.id].content)
            ]
            chosen = choose_reads(task, hits, already=_read_ids(messages))
            if chosen:
                return [_call(turn, k, "read", {"doc_id": d}) for k, d in enumerate(chosen)]
            failed = [
                results[c.id].content
                for c in previous.tool_uses
                if c.name == "search" and c.id in results and results[c.id].is_error
            ]
            if failed and not hits:  # say why, rather than that nothing was found
                return [TextBlock(f"I could not search the documents: {failed[0][:300]}")]
            return [TextBlock(f"I found no documents about: {task.strip()}")]
        if "read" in names:
            return [TextBlock(self._answer_from_documents(task, messages))]
        summary = "; ".join(
            f"{c.name} -> {results[c.id].content[:200]}"
            for c in previous.tool_uses
            if c.id in results
        )
        return [TextBlock(f"Done: {task[:200]}. Tool results: {summary}")]

    def _first_move(
        self, tools: dict[str, ToolSpec], task: str, turn: int
    ) -> list[TextBlock | ToolUseBlock]:
        if SPAWN in tools:
            agents = list(
                tools[SPAWN].input_schema.get("properties", {}).get("agent", {}).get("enum", [])
            )
            if agents:
                chosen = next((a for a in agents if "research" in a.lower()), agents[0])
                if chosen != agents[0] or len(agents) == 1:
                    return [
                        _call(turn, i, SPAWN, {"agent": chosen, "task": q})
                        for i, q in enumerate(split_question(task))
                    ]
                return [
                    _call(turn, i, SPAWN, {"agent": a, "task": task}) for i, a in enumerate(agents)
                ]
        if "search" in tools and "read" in tools:
            args: dict[str, Any] = {"query": search_query(task)}
            if "limit" in tools["search"].input_schema.get("properties", {}):
                args["limit"] = SEARCH_LIMIT
            return [_call(turn, 0, "search", args)]
        callable_tools = [t for t in tools.values() if t.name != SPAWN]
        if callable_tools:
            return [
                _call(turn, i, t.name, example_arguments(t, task))
                for i, t in enumerate(callable_tools)
            ]
        return [TextBlock(f"(offline model) Received the task: {task[:500]}")]

    def _answer_from_documents(self, question: str, messages: Sequence[Message]) -> str:
        documents = _read_documents(messages)
        best = select_passages(question, documents)
        if not best:
            read = ", ".join(d for d, _ in documents) or "none"
            return f"The documents I read ({read}) do not answer: {question.strip()}"
        about = ", ".join(keywords(question)[:6]) or question.strip()
        lines = [f"{_LEAD_IN} {about}:"]
        lines += [f"- {passage} [{doc_id}]" for doc_id, passage in best]
        cited = list(dict.fromkeys(d for d, _ in best))
        lines.append("Sources: " + ", ".join(f"[{d}]" for d in cited))
        return "\n".join(lines)

    def _synthesize(
        self, task: str, calls: list[ToolUseBlock], results: Mapping[str, ToolResultBlock]
    ) -> str:
        sections = [f"Answer to: {task.strip()}"]
        sources: list[str] = []
        for call in calls:
            if call.name != SPAWN or call.id not in results:
                continue
            r = results[call.id]
            sub = str(call.input.get("task", ""))
            if r.is_error:
                sections.append(
                    f"\n## {sub}\n(this part could not be researched: {_clip(r.content, 200)})"
                )
                continue
            body = "\n".join(
                line
                for line in r.content.splitlines()
                if not line.startswith(("Sources:", _LEAD_IN))
            )
            sections.append(f"\n## {sub.rstrip('?？ ')}?\n{body.strip()}")
            sources.extend(_ID_CITE.findall(body))
        spawned = [str(c.input.get("task", "")) for c in calls if c.name == SPAWN]
        parts = split_question(task, limit=None)
        # only when the lead split the question (not when each child got all of it)
        left = parts[MAX_SUBQUESTIONS:] if spawned == parts[:MAX_SUBQUESTIONS] else []
        if left:  # said, not dropped in silence
            sections.append(
                f"\n(Not researched: the question has more parts than the {MAX_SUBQUESTIONS} "
                f"this model researches at once: {'; '.join(left)}. Ask about them separately.)"
            )
        if sources:
            sections.append("\nSources: " + ", ".join(f"[{s}]" for s in dict.fromkeys(sources)))
        return "\n".join(sections)


# -- research: which hits to read, which passages to quote --------------------------------------


def _parse_hits(content: str) -> list[tuple[str, str]]:
    """(id, title and snippet) of each hit of a search result, in rank order."""
    hits: list[tuple[str, str]] = []
    for block in re.split(r"\n(?=\[)", content):
        m = _ID_LINE.match(block)
        if m:
            hits.append((m.group(1), block[m.end() :].replace("**", "")))
    return hits


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
            after = [t for t in tokens[i + 1 : i + 4] if t not in _DETERMINERS]
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


# -- reading the transcript ---------------------------------------------------------------------


def _call(turn: int, index: int, name: str, args: dict[str, Any]) -> ToolUseBlock:
    return ToolUseBlock(f"toolu_off_{turn:03d}_{index}", name, args)


def _first_user_text(messages: Sequence[Message]) -> str:
    for m in messages:
        if m.role == "user":
            text = m.text
            if text:
                return text
    return ""


def _last_assistant(messages: Sequence[Message]) -> Message | None:
    for m in reversed(messages):
        if m.role == "assistant":
            return m
    return None


def _results_of(messages: Sequence[Message]) -> dict[str, ToolResultBlock]:
    if not messages or messages[-1].role != "user":
        return {}
    return {b.tool_use_id: b for b in messages[-1].content if isinstance(b, ToolResultBlock)}


def _read_ids(messages: Sequence[Message]) -> set[str]:
    return {
        str(c.input.get("doc_id"))
        for m in messages
        if m.role == "assistant"
        for c in m.tool_uses
        if c.name == "read"
    }


def _read_documents(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """(doc id, text) of every successful ``read`` in the transcript, in the order read."""
    calls = {
        c.id: c for m in messages if m.role == "assistant" for c in m.tool_uses if c.name == "read"
    }
    out = []
    for m in messages:
        if m.role != "user":
            continue
        for b in m.content:
            if isinstance(b, ToolResultBlock) and b.tool_use_id in calls and not b.is_error:
                out.append(
                    (str(calls[b.tool_use_id].input.get("doc_id")), _strip_header(b.content))
                )
    return out


def _strip_header(text: str) -> str:
    lines = text.splitlines()
    return "\n".join(lines[1:]) if lines and lines[0].startswith("# ") else text


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
