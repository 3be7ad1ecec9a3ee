"""``offline``: a deterministic model without an LLM, so every tree runs on any machine.

This module owns the model (:class:`OfflineModel`: which move to make on each turn) and its
readers of the transcript. The rules it applies live beside it: what a question asks in
:mod:`.questions`, which hits to read and passages to quote in :mod:`.passages`, arguments for a
tool known only by its schema in :mod:`.arguments`; their public names are re-exported here.
Provider ``offline`` in traces, zero cost, zero billed tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from ..core.output import FINAL_RESULT
from ..models.base import ModelContext, ModelRequest, ModelResponse, OutputFormat, ToolSpec
from .arguments import example_arguments as example_arguments
from .findings import Claim, Findings
from .passages import choose_reads
from .passages import select_passages as select_passages
from .questions import keywords as keywords
from .questions import most_subquestions
from .questions import search_query as search_query
from .questions import split_question as split_question

__all__ = [
    "OfflineModel",
    "example_arguments",
    "keywords",
    "search_query",
    "select_passages",
    "split_question",
]

SPAWN = "spawn_subagent"
SEARCH_LIMIT = 8  # hits asked for: the first five are the ranking, the rest spares to read
SERVER_SEARCH_SUFFIX = "__search"  # an MCP server's search tool, as the model sees it
# a hit's id runs to the "]" that ends it: a file name may hold spaces and brackets
_ID_LINE = re.compile(r"^\[(.+?)\](?=\s|$)", re.MULTILINE)
# a researcher's cited line ends "- passage [id]": the id is what the last " [" on the line
# opens (a quoted passage may hold brackets of its own; an id may hold spaces and brackets)
_ID_CITE = re.compile(r"^- .* \[(.+)\]$", re.MULTILINE)
_LEAD_IN = "What the documents say about"
_REJECTED = "The output was rejected"  # how a rejected typed answer is sent back
# a problem's field path naming one claim of a rejected answer ("claims.2", "claims.2.sources")
_CLAIM_PATH = re.compile(r"\bclaims\.(\d+)\b")
# the citations a rejected text answer names: "The answer cites [a], [b], which ..."
_NAMED_CITATIONS = re.compile(r"The answer cites (.*?), which no researcher")
_BRACKETED = re.compile(r"\[([^\s\[\]]+)\]")


# -- the model ----------------------------------------------------------------------------------


class OfflineModel:
    """The deterministic stand-in model used when no API key is set.

    It reads the request like a model would, but decides by rules, from the transcript alone
    (so it is stateless like the scripted models: the same transcript always gets the same
    reply):

    * offered ``spawn_subagent``, it splits the task into sub-questions (``split_question``)
      and spawns one researcher per sub-question (or, when no subagent looks like a
      researcher, each subagent once with the whole task), then writes an answer from their
      reports, keeping their citations;
    * offered ``search`` and ``read`` (the research tools), it searches with the question's
      content words (``search_query``: question words, auxiliaries and filler dropped), reads
      the best hits of distinct documents (skipping hits that share no word with the question
      and duplicates of a text already chosen), and answers with the passages of what it read
      that share the most words with the question. Every passage is quoted verbatim (whole
      sentences, whitespace tidied; a ``...`` marks where an over-long sentence was cut) and
      followed by the ``[id]`` it came from;
    * offered a ``{server}__search`` tool taking a ``query`` (an MCP server's search, as
      ``--mcp researcher:notes=...`` gives it), it searches there too, in the same turn, and
      takes each ``[id] passage`` hit it returns as a document read (the server's first);
    * offered other tools, it calls each once with arguments valid for its JSON schema
      (``example_arguments``), then finishes with what they returned.

    A typed agent (the request has an ``output``) ends with its value instead of text, through
    the ``final_result`` tool or, in native mode, as the JSON text: a researcher whose type has
    the fields of :class:`~.findings.Findings` answers with one claim per passage, citing the
    document it was read from; a lead reads its typed children's JSON back as their claims and
    keeps only their sources; any other type gets a value valid for its schema, its text taken
    from the answer the model would have written. A rejected answer is given again without
    the claims the problems name (``claims.N``), so a claim citing what was not read drops out.
    """

    provider = "offline"
    supports_native_output = True
    """In native output mode the offline model's final text is the JSON of its value."""

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
        # counted as a model would bill it (docs/models.md): the request's estimate in, the
        # reply's characters / 4 out; free all the same (cost() is 0)
        out_chars = sum(
            len(b.text) if isinstance(b, TextBlock) else len(b.name) + len(str(b.input))
            for b in content
        )
        usage = Usage(
            input_tokens=request.input_tokens_estimate,
            output_tokens=out_chars // 4 + 1,
            requests=1,
        )
        return ModelResponse(tuple(content), stop, usage, "offline", "")

    def decide(self, request: ModelRequest) -> list[TextBlock | ToolUseBlock]:
        """The next reply for ``request``'s transcript."""
        typed = request.output
        if typed is None:
            rewritten = _text_again(request.messages)
            return [rewritten] if rewritten is not None else self._decide(request)
        messages = request.messages
        again = _answer_again(
            typed, request.turn_index(), messages, _last_assistant(messages), _results_of(messages)
        )
        if again is not None:
            return [again]
        reply = self._decide(request)
        if len(reply) != 1 or not isinstance(reply[0], TextBlock):
            return reply
        answer = reply[0].text
        return [_typed_answer(typed, request.turn_index(), answer, _findings_of(answer))]

    def _decide(self, request: ModelRequest) -> list[TextBlock | ToolUseBlock]:
        tools = {t.name: t for t in request.tools if t.name != FINAL_RESULT}
        messages = request.messages
        task = _first_user_text(messages)
        turn = request.turn_index()
        previous = _last_assistant(messages)
        results = _results_of(messages)
        if previous is None or not previous.tool_uses:
            return self._first_move(tools, task, turn, most_subquestions(request.system))
        names = {c.name for c in previous.tool_uses}
        if SPAWN in names:
            most = most_subquestions(request.system)
            return [TextBlock(self._synthesize(task, previous.tool_uses, results, most))]
        if "search" in names and "read" in tools:  # (and any server searches beside it)
            hits = [
                hit
                for c in previous.tool_uses
                if c.name == "search" and c.id in results and not results[c.id].is_error
                for hit in _parse_hits(results[c.id].content)
            ]
            chosen = choose_reads(task, hits, already=_read_ids(messages))
            if chosen:
                return [_call(turn, k, "read", {"doc_id": d}) for k, d in enumerate(chosen)]
            if _server_hits(messages):  # nothing to read, but a server's search found passages
                return [TextBlock(self._answer_from_documents(task, messages))]
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
        if names <= set(_server_searches(tools)):  # only a server's search: answer from it
            if _server_hits(messages):
                return [TextBlock(self._answer_from_documents(task, messages))]
            return [TextBlock(_nothing_found(task, previous.tool_uses, results))]
        summary = "; ".join(
            f"{c.name} -> {results[c.id].content[:200]}"
            for c in previous.tool_uses
            if c.id in results
        )
        return [TextBlock(f"Done: {task[:200]}. Tool results: {summary}")]

    def _first_move(
        self, tools: dict[str, ToolSpec], task: str, turn: int, most: int
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
                        for i, q in enumerate(split_question(task, limit=most))
                    ]
                return [
                    _call(turn, i, SPAWN, {"agent": a, "task": task}) for i, a in enumerate(agents)
                ]
        servers = _server_searches(tools)
        if ("search" in tools and "read" in tools) or servers:
            calls: list[TextBlock | ToolUseBlock] = []
            if "search" in tools and "read" in tools:
                args: dict[str, Any] = {"query": search_query(task)}
                if "limit" in tools["search"].input_schema.get("properties", {}):
                    args["limit"] = SEARCH_LIMIT
                calls.append(_call(turn, 0, "search", args))
            # an MCP server's search (``--mcp researcher:notes=...``) in the same turn
            calls += [
                _call(turn, len(calls) + k, name, {"query": search_query(task)})
                for k, name in enumerate(servers)
            ]
            return calls
        callable_tools = [t for t in tools.values() if t.name != SPAWN]
        if callable_tools:
            return [
                _call(turn, i, t.name, example_arguments(t, task))
                for i, t in enumerate(callable_tools)
            ]
        return [TextBlock(f"(offline model) Received the task: {task[:500]}")]

    def _answer_from_documents(self, question: str, messages: Sequence[Message]) -> str:
        # a server's passages first: the search the person gave this agent by name
        documents = _server_hits(messages) + _read_documents(messages)
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
        self,
        task: str,
        calls: list[ToolUseBlock],
        results: Mapping[str, ToolResultBlock],
        most: int,
    ) -> str:
        sections = [f"Answer to: {task.strip()}"]
        sources: list[str] = []
        missing: list[str] = []  # the parts no researcher found anything for, said at the end
        for call in calls:
            if call.name != SPAWN or call.id not in results:
                continue
            r = results[call.id]
            sub = str(call.input.get("task", ""))
            if r.is_error:
                sections.append(
                    f"\n## {sub}\n(this part could not be researched: {_clip(r.content, 200)})"
                )
                missing.append(sub)
                continue
            found = _child_findings(r.content)
            if found is not None:  # a typed child: its claims, and only their sources
                body = (
                    "\n".join(
                        f"- {c.text} " + " ".join(f"[{s}]" for s in c.sources) for c in found.claims
                    )
                    or found.summary
                )
                sources.extend(s for c in found.claims for s in c.sources)
                if not found.claims:
                    missing.append(sub)
            else:
                body = "\n".join(
                    line
                    for line in r.content.splitlines()
                    if not line.startswith(("Sources:", _LEAD_IN))
                )
                cited = _ID_CITE.findall(body)
                sources.extend(cited)
                if not cited:
                    missing.append(sub)
            sections.append(f"\n## {sub.rstrip('?？ ')}?\n{body.strip()}")
        spawned = [str(c.input.get("task", "")) for c in calls if c.name == SPAWN]
        parts = split_question(task, limit=None)
        # only when the lead split the question (not when each child got all of it)
        left = parts[most:] if spawned == parts[:most] else []
        if missing:
            sections.append(f"\nNot found: {'; '.join(s.strip() for s in missing)}.")
        if left:  # said, not dropped in silence
            sections.append(
                f"\n(Not researched: the question has more parts than the {most} "
                f"this model researches at once: {'; '.join(left)}. Ask about them separately.)"
            )
        if sources:
            sections.append("\nSources: " + ", ".join(f"[{s}]" for s in dict.fromkeys(sources)))
        return "\n".join(sections)


# -- typed answers ------------------------------------------------------------------------------


def _findings_of(answer: str) -> Findings:
    """A text answer as findings: each cited line ("- passage [id]") a claim, the first line
    (or the whole text, when nothing is cited) the summary."""
    claims = [
        Claim(text=m.group(1), sources=[m.group(2)])
        for m in re.finditer(r"^- (.*) \[(.+)\]$", answer, re.MULTILINE)
    ]
    lines = [line for line in answer.splitlines() if line.strip()]
    summary = lines[0] if claims and lines else answer
    if claims and summary.startswith(_LEAD_IN):
        about = summary[len(_LEAD_IN) :].strip(" :")
        n = len(claims)
        summary = (
            f"{n} passage{'s' * (n != 1)} of the documents read bear{'s' * (n == 1)} on {about}"
        )
    return Findings(summary=summary, claims=claims)


def _is_findings(schema: Mapping[str, Any]) -> bool:
    return {"summary", "claims"} <= set(schema.get("properties", {}))


def _typed_answer(
    output: OutputFormat, turn: int, answer: str, findings: Findings
) -> TextBlock | ToolUseBlock:
    """The final answer as the agent's type asks: findings for a findings-shaped type, else
    a value valid for the schema with the answer as its text."""
    value = example_arguments(ToolSpec(FINAL_RESULT, "", output.schema), answer)
    if _is_findings(output.schema) and not output.wrapped:
        value.update(findings.model_dump(mode="json"))
    return _give(output, turn, value)


def _give(output: OutputFormat, turn: int, value: dict[str, Any]) -> TextBlock | ToolUseBlock:
    if output.native:
        return TextBlock(json.dumps(value, ensure_ascii=False))
    return _call(turn, 0, FINAL_RESULT, value)


def _answer_again(
    output: OutputFormat,
    turn: int,
    messages: Sequence[Message],
    previous: Message | None,
    results: Mapping[str, ToolResultBlock],
) -> TextBlock | ToolUseBlock | None:
    """After a rejected answer: the same answer without the claims the problems name
    (``None`` when the last answer was not rejected)."""
    if previous is None:
        return None
    given: Any = None
    problems = ""
    if output.native:
        last = messages[-1] if messages else None
        if last is not None and last.role == "user" and last.text.startswith(_REJECTED):
            given, problems = previous.text, last.text
    else:
        for call in previous.tool_uses:
            if call.name == FINAL_RESULT and call.id in results and results[call.id].is_error:
                given, problems = dict(call.input), results[call.id].content
    if given is None:
        return None
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except ValueError:
            given = {}
    value = dict(given) if isinstance(given, dict) else {}
    claims = value.get("claims")
    if _is_findings(output.schema) and isinstance(claims, list):
        named = {int(i) for i in _CLAIM_PATH.findall(problems)}
        value["claims"] = [c for i, c in enumerate(claims) if i not in named]
        if claims and not value["claims"]:
            first = problems.removeprefix(_REJECTED).strip(" :\n-").splitlines()[0]
            value["summary"] = f"Nothing I found could be kept: {_clip(first, 300)}"
    return _give(output, turn, value)


def _text_again(messages: Sequence[Message]) -> TextBlock | None:
    """After a rejected text answer (a lead's, by ``answer_cites_only_findings``): the same
    answer without the lines citing what the problems name (``None`` when the last answer was
    not rejected)."""
    last = messages[-1] if messages else None
    previous = _last_assistant(messages)
    if last is None or last.role != "user" or not last.text.startswith(_REJECTED):
        return None
    if previous is None or previous.tool_uses:
        return None
    named = {
        f"[{cited}]"
        for listed in _NAMED_CITATIONS.findall(last.text)
        for cited in _BRACKETED.findall(listed)
    }
    kept = [line for line in previous.text.splitlines() if not any(n in line for n in named)]
    return TextBlock("\n".join(kept))


def _child_findings(content: str) -> Findings | None:
    """A typed child's findings from its spawn result (its JSON, maybe followed by more text,
    such as the budget left), or ``None`` for a text child."""
    if not content.startswith("{"):
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(content)
        return Findings.model_validate(value)
    except ValueError:  # pydantic's ValidationError is one
        return None


# -- reading the transcript ---------------------------------------------------------------------


def _parse_hits(content: str) -> list[tuple[str, str]]:
    """(id, title and snippet) of each hit of a search result, in rank order."""
    hits: list[tuple[str, str]] = []
    for block in re.split(r"\n(?=\[)", content):
        m = _ID_LINE.match(block)
        if m:
            hits.append((m.group(1), block[m.end() :].replace("**", "")))
    return hits


def _server_searches(tools: Mapping[str, ToolSpec]) -> list[str]:
    """The ``{server}__search`` tools offered that take a ``query`` string and need nothing
    else (an MCP server's search), by name."""
    found = []
    for name, spec in sorted(tools.items()):
        schema = spec.input_schema
        query = schema.get("properties", {}).get("query")
        required = set(schema.get("required", ()))
        if (
            name.endswith(SERVER_SEARCH_SUFFIX)
            and isinstance(query, Mapping)
            and query.get("type", "string") == "string"
            and required <= {"query"}
        ):
            found.append(name)
    return found


def _server_hits(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """(id, passage) of each hit (``[id] passage``) that a ``{server}__search`` call of the
    transcript returned, in the order returned."""
    calls = {
        c.id
        for m in messages
        if m.role == "assistant"
        for c in m.tool_uses
        if c.name.endswith(SERVER_SEARCH_SUFFIX)
    }
    return [
        (doc_id, text.strip())
        for m in messages
        if m.role == "user"
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.tool_use_id in calls and not b.is_error
        for doc_id, text in _parse_hits(b.content)
    ]


def _nothing_found(
    task: str, calls: Sequence[ToolUseBlock], results: Mapping[str, ToolResultBlock]
) -> str:
    failed = [results[c.id].content for c in calls if c.id in results and results[c.id].is_error]
    if failed:  # say why, rather than that nothing was found
        return f"I could not search: {failed[0][:300]}"
    return f"I found no documents about: {task.strip()}"


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
