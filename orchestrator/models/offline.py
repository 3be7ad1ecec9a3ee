"""``offline``: a deterministic model without an LLM, so every tree runs on any machine.

It reads the request like a model would, but decides by rules, from the transcript alone (so it
is stateless like the scripted models):

* offered ``spawn_subagent``, it splits the task into sub-questions and spawns one subagent per
  sub-question, then writes an answer from their reports;
* offered ``search`` and ``read`` (the research tools), it searches, reads the best documents,
  and answers with the passages that share the most words with the question, each cited by
  document id;
* offered other tools, it calls each once with arguments valid for its schema, then finishes
  with what they returned.

Provider ``offline`` in traces, zero cost, zero billed tokens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from .base import ModelContext, ModelRequest, ModelResponse, ToolSpec

__all__ = ["OfflineModel"]

SPAWN = "spawn_subagent"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
_ID_LINE = re.compile(r"^\[([^\]\s]+)\]", re.MULTILINE)
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "this",
        "that",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "vs",
        "versus",
        "between",
        "compare",
        "explain",
        "describe",
        "tell",
        "me",
        "about",
        "use",
        "used",
        "using",
        "there",
        "their",
        "they",
        "them",
        "than",
        "then",
        "into",
    ]
)
# "How do X and Y work in Python" -> "How do X work in Python", "How do Y work in Python"
_PAIR = re.compile(
    r"(?i)^(?P<pre>.*?\b(?:do|does|are|is|about|of)\s+)(?P<a>[\w.-]+(?:\s+[\w.-]+){0,3}?)\s+and\s+"
    r"(?P<b>[\w.-]+(?:\s+[\w.-]+){0,3}?)(?P<post>\s+(?:work|behave|differ|mean|relate|do|get|in)\b.*)?$"
)
MAX_SUBQUESTIONS = 4
READS_PER_SEARCH = 3
PASSAGES_PER_ANSWER = 3


def keywords(text: str) -> list[str]:
    """Lower-cased content words of ``text``, in order, without duplicates."""
    seen: dict[str, None] = {}
    for w in _WORD.findall(text.lower()):
        if w not in _STOP and len(w) > 1:
            seen.setdefault(w, None)
    return list(seen)


def split_question(question: str) -> list[str]:
    """Split a compound question into up to four sub-questions (at least one)."""
    parts = [p.strip(" .,;") for p in re.split(r"[?;]\s*|\n+", question) if p.strip(" .,;")]
    out: list[str] = []
    for part in parts or [question.strip()]:
        pieces = re.split(
            r",\s*(?:and\s+)?|\s+and\s+(?=(?:how|what|why|when|which|where|who)\b)", part
        )
        m = re.match(
            r"(?i)\s*(?:compare|contrast)\s+(.+?)\s+(?:and|with|vs\.?|versus)\s+(.+)", part
        )
        pair = _PAIR.match(part)
        if m:
            pieces = [m.group(1), m.group(2)]
        elif pair and len(pieces) == 1:
            pre, post = pair.group("pre"), pair.group("post") or ""
            pieces = [f"{pre}{pair.group('a')}{post}", f"{pre}{pair.group('b')}{post}"]
        out.extend(p.strip(" .,;") for p in pieces if len(keywords(p)) >= 1)
    return (out or [question.strip() or "the task"])[:MAX_SUBQUESTIONS]


def example_arguments(spec: ToolSpec, task: str) -> dict[str, Any]:
    """Arguments valid for ``spec``'s schema, filled from the task where text is wanted."""
    schema = spec.input_schema
    props: Mapping[str, Any] = schema.get("properties", {})
    args: dict[str, Any] = {}
    for name in schema.get("required", []):
        args[name] = _example_value(props.get(name, {}), task)
    return args


def _example_value(prop: Mapping[str, Any], task: str) -> Any:
    if "enum" in prop:
        return prop["enum"][0]
    if "anyOf" in prop:
        options = [p for p in prop["anyOf"] if p.get("type") != "null"]
        return _example_value(options[0], task) if options else None
    kind = prop.get("type")
    if kind == "string":
        return task[:200] or "x"
    if kind == "integer":
        return max(1, int(prop.get("minimum", 1)))
    if kind == "number":
        return float(prop.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "array":
        return (
            [_example_value(prop.get("items", {"type": "string"}), task)]
            if prop.get("minItems")
            else []
        )
    return {}


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
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
        return ModelResponse(tuple(content), stop, Usage(), "offline", "")

    def decide(self, request: ModelRequest) -> list[TextBlock | ToolUseBlock]:
        """The next reply for ``request``'s transcript."""
        tools = {t.name: t for t in request.tools}
        messages = request.messages
        task = _first_user_text(messages)
        turn = sum(1 for m in messages if m.role == "assistant")
        previous = _last_assistant(messages)
        results = _results_of(messages)
        if previous is None or not previous.tool_uses:
            return self._first_move(request, tools, task, turn)
        names = {c.name for c in previous.tool_uses}
        if SPAWN in names:
            return [TextBlock(self._synthesize(task, previous.tool_uses, results))]
        if "search" in names and "read" in tools:
            ids = [
                i for r in results.values() if not r.is_error for i in _ID_LINE.findall(r.content)
            ]
            already = _read_ids(messages)
            fresh = [i for i in dict.fromkeys(ids) if i not in already][:READS_PER_SEARCH]
            if fresh:
                return [_call(turn, k, "read", {"doc_id": d}) for k, d in enumerate(fresh)]
            return [TextBlock(f"I found no documents about: {task}")]
        if "read" in names:
            return [TextBlock(self._answer_from_documents(task, messages))]
        summary = "; ".join(
            f"{c.name} -> {results[c.id].content[:200]}"
            for c in previous.tool_uses
            if c.id in results
        )
        return [TextBlock(f"Done: {task[:200]}. Tool results: {summary}")]

    def _first_move(
        self, request: ModelRequest, tools: dict[str, ToolSpec], task: str, turn: int
    ) -> list[TextBlock | ToolUseBlock]:
        if SPAWN in tools:
            agents = tools[SPAWN].input_schema["properties"]["agent"].get("enum", [])
            if agents:
                chosen = next((a for a in agents if "research" in a.lower()), agents[0])
                subs = split_question(task)
                if chosen != agents[0] or len(agents) == 1:
                    return [
                        _call(turn, i, SPAWN, {"agent": chosen, "task": q})
                        for i, q in enumerate(subs)
                    ]
                return [
                    _call(turn, i, SPAWN, {"agent": a, "task": task}) for i, a in enumerate(agents)
                ]
        if "search" in tools:
            return [_call(turn, 0, "search", {"query": task[:300]})]
        callable_tools = [t for t in tools.values() if t.name != SPAWN]
        if callable_tools:
            return [
                _call(turn, i, t.name, example_arguments(t, task))
                for i, t in enumerate(callable_tools)
            ]
        return [TextBlock(f"(offline model) Received the task: {task[:500]}")]

    def _answer_from_documents(self, question: str, messages: Sequence[Message]) -> str:
        words = set(keywords(question))
        passages: list[tuple[float, int, str, str]] = []
        order = 0
        for doc_id, text in _read_documents(messages):
            for para in _paragraphs(text):
                overlap = words & set(keywords(para))
                if overlap:
                    score = len(overlap) + 0.1 * min(len(para), 400) / 400
                    passages.append((-score, order, doc_id, para))
                    order += 1
        if not passages:
            docs = ", ".join(f"[{d}]" for d, _ in _read_documents(messages))
            return f"The documents I read ({docs or 'none'}) do not answer: {question}"
        passages.sort()
        best: list[tuple[float, int, str, str]] = []
        for p in passages:  # one copy of a passage that several documents share
            if all(p[3] != b[3] for b in best):
                best.append(p)
            if len(best) == PASSAGES_PER_ANSWER:
                break
        lines = [f"On {question.rstrip('?')}:"]
        for _, _, doc_id, para in best:
            lines.append(f"- {_clip(para, 400)} [{doc_id}]")
        cited = list(dict.fromkeys(d for _, _, d, _ in best))
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
                line for line in r.content.splitlines() if not line.startswith("Sources:")
            )
            sections.append(f"\n## {sub}\n{body.strip()}")
            sources.extend(_ID_CITE.findall(r.content))
        if sources:
            sections.append("\nSources: " + ", ".join(f"[{s}]" for s in dict.fromkeys(sources)))
        return "\n".join(sections)


_ID_CITE = re.compile(r"\[([a-z]+:[^\]\s]+|[^\]\s]+\.(?:md|txt|rst|html?)(?:#[^\]\s]*)?)\]")


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
    """(doc id, text) of every successful ``read`` in the transcript."""
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


def _paragraphs(text: str) -> list[str]:
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return [p for p in paras if len(p) >= 40 and not p.startswith(("[truncated", ">>>"))]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
