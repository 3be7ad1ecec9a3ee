"""A simulated Claude for ``agents/web_research.py`` on the fake Messages server.

:class:`WebTreeResponder` is a ``FakeMessagesServer`` responder: it tells the lead's requests
from the researchers' by the request's system prompt (researchers run at once, so a queue of
replies in order cannot serve them) and answers each from its transcript alone, as a model
would:

- the lead, first: one ``spawn_subagent`` call per part of the question, all in one turn;
  then, given the findings: an answer citing the URLs of its researchers' claims (and, with
  ``lead_cites``, one more URL of its own), saying which parts found nothing; told that answer
  was rejected, the same answer without the lines naming the URLs the rejection names;
- a researcher, first: a hosted ``web_search`` (results: ``results_per_search`` URLs of its
  part's site), a ``web_fetch`` of the first two results, and ``final_result`` with one claim per
  fetched page; a researcher whose part is in ``cite_unread`` adds a claim citing a URL it never
  got, and, told that claim was rejected, answers again without it.

Pages and search results are padded to realistic sizes (``page_chars`` per fetched page,
``result_chars`` of encrypted content per search result) so that token counts mean something,
and each answer with hosted tools bills, as ``extra_input_tokens``, the results the API reads
again after each hosted tool's result (its own sampling iterations within the answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .fake_messages_server import (
    Message,
    estimate_tokens,
    server_tool_use,
    web_fetch_result,
    web_search_result,
)

LEAD_MARK = "You lead a web research team"
REJECTED = "The output was rejected"
UNREAD_URL = "https://unread.example.net/remembered-not-fetched"


def site(part: int) -> str:
    """The (made-up) site part ``part``'s search finds."""
    return f"https://part{part}.example.org"


@dataclass
class WebTreeResponder:
    """See the module docstring. ``parts`` are the sub-questions the lead spawns, in order."""

    parts: Sequence[str]
    cite_unread: frozenset[int] = frozenset()
    lead_cites: Sequence[str] = ()
    nothing_found: frozenset[int] = frozenset()
    results_per_search: int = 5
    page_chars: int = 2_000
    result_chars: int = 400
    claim_chars: int = 0
    """Each claim's text padded to this many characters (0: as written)."""
    answers: list[str] = field(default_factory=list)
    """The lead's final answers, as written (before the CLI prints them)."""

    def __call__(self, body: dict[str, Any]) -> Message:
        system = "".join(b["text"] for b in body.get("system") or () if b.get("type") == "text")
        messages = body["messages"]
        if system.startswith(LEAD_MARK):
            return self._lead(messages)
        return self._researcher(messages)

    # -- the lead ---------------------------------------------------------------------------

    def _lead(self, messages: list[dict[str, Any]]) -> Message:
        if len(messages) == 1:
            calls = tuple(
                {
                    "type": "tool_use",
                    "id": f"toolu_spawn_{i}",
                    "name": "spawn_subagent",
                    "input": {"agent": "researcher", "task": part},
                }
                for i, part in enumerate(self.parts)
            )
            preamble = {"type": "text", "text": f"This needs {len(calls)} researchers."}
            return Message((preamble, *calls), stop_reason="tool_use")
        last = _text_of(messages[-1]["content"])
        if last.startswith(REJECTED):  # told which URLs to drop
            named = re.findall(r"\[(\S+?)\]", last.split(", which no researcher")[0])
            answer = "\n".join(
                line for line in self.answers[-1].splitlines() if not any(n in line for n in named)
            )
            self.answers.append(answer)
            return Message(({"type": "text", "text": answer},), stop_reason="end_turn")
        results = {
            b["tool_use_id"]: b
            for b in messages[-1]["content"]
            if isinstance(b, Mapping) and b.get("type") == "tool_result"
        }
        lines = ["Here is what the researchers found."]
        sources: list[str] = []
        missing: list[str] = []
        for i, part in enumerate(self.parts):
            result = results.get(f"toolu_spawn_{i}")
            found = _findings(result)
            if not found or not found.get("claims"):
                missing.append(part)
                continue
            lines.append(f"\n## {part}")
            for claim in found["claims"]:
                cites = " ".join(f"[{u}]" for u in claim["sources"])
                lines.append(f"- {claim['text']} {cites}")
                sources.extend(claim["sources"])
        for url in self.lead_cites:
            lines.append(f"- A point of the lead's own [{url}]")
            sources.append(url)
        if missing:
            lines.append("\nNot found: " + "; ".join(missing) + ".")
        lines.append("\nSources:\n" + "\n".join(f"- {u}" for u in dict.fromkeys(sources)))
        answer = "\n".join(lines)
        self.answers.append(answer)
        return Message(({"type": "text", "text": answer},), stop_reason="end_turn")

    # -- a researcher -----------------------------------------------------------------------

    def _researcher(self, messages: list[dict[str, Any]]) -> Message:
        task = _text(messages[0])
        part = next((i for i, p in enumerate(self.parts) if p == task.strip()), 0)
        if len(messages) > 1:  # told its answer was rejected: again, without what was named
            return self._final_again(messages, part)
        base = site(part)
        results = [
            (f"{base}/page-{k}", f"Page {k} about part {part}")
            for k in range(self.results_per_search)
        ]
        search_id, fetch_ids = (
            f"srvtoolu_{part}_search",
            [f"srvtoolu_{part}_fetch_{k}" for k in (0, 1)],
        )
        search = web_search_result(search_id, *results)
        for entry in search["content"]:  # the API's opaque content, at a realistic size
            entry["encrypted_content"] = _pad(entry["encrypted_content"], self.result_chars)
        blocks: list[dict[str, Any]] = [
            server_tool_use("web_search", {"query": task}, id=search_id),
            search,
        ]
        fetched = [url for url, _ in results[:2]]
        for fid, url in zip(fetch_ids, fetched, strict=True):
            page = _pad(f"{url}: what this page says about part {part}. ", self.page_chars)
            blocks += [
                server_tool_use("web_fetch", {"url": url}, id=fid),
                web_fetch_result(fid, url, page),
            ]
        if part in self.nothing_found:
            claims: list[dict[str, Any]] = []
            summary = "The pages found do not answer this."
        else:
            claims = [
                {
                    "text": _pad(f"Part {part}: point {k} from the page. ", self.claim_chars),
                    "sources": [url],
                }
                for k, url in enumerate(fetched)
            ]
            summary = f"Two pages answer part {part}."
        if part in self.cite_unread:
            claims.append({"text": f"Part {part}: a point remembered.", "sources": [UNREAD_URL]})
        blocks.append(
            {
                "type": "tool_use",
                "id": f"toolu_final_{part}",
                "name": "final_result",
                "input": {"summary": summary, "claims": claims},
            }
        )
        return Message(
            tuple(blocks),
            stop_reason="tool_use",
            usage={"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 2}},
            extra_input_tokens=_iterations(blocks),
        )

    def _final_again(self, messages: list[dict[str, Any]], part: int) -> Message:
        previous = messages[-2]["content"]
        given = next(
            b["input"]
            for b in previous
            if isinstance(b, Mapping) and b.get("name") == "final_result"
        )
        problems = " ".join(
            _text_of(b.get("content"))
            for b in messages[-1]["content"]
            if isinstance(b, Mapping) and b.get("type") == "tool_result"
        )
        named = {int(i) for i in re.findall(r"\bclaims\.(\d+)\b", problems)}
        claims = [c for i, c in enumerate(given["claims"]) if i not in named]
        return Message(
            (
                {
                    "type": "tool_use",
                    "id": f"toolu_final_{part}_again",
                    "name": "final_result",
                    "input": {"summary": given["summary"], "claims": claims},
                },
            ),
            stop_reason="tool_use",
        )


def _iterations(blocks: Sequence[Mapping[str, Any]]) -> int:
    """What the API bills within one answer for its hosted tools' results: "search results
    count towards input tokens on every subsequent iteration" (Anthropic's web search docs),
    so after each result block, every result so far is read again (characters / 4, as the
    fake counts). The rest of the context's re-reading within the answer is not billed here."""
    total, results = 0, 0
    for block in blocks:
        if str(block.get("type", "")).endswith("_tool_result"):
            results += len(json.dumps(block))
            total += estimate_tokens(results)
    return total


def _pad(text: str, chars: int) -> str:
    return (text * (chars // max(1, len(text)) + 1))[:chars] if len(text) < chars else text


def _text(message: Mapping[str, Any]) -> str:
    return _text_of(message.get("content"))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        str(b.get("text", "")) for b in content or () if isinstance(b, Mapping) and "text" in b
    )


def _findings(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A typed researcher's findings from its spawn result (the JSON, first of its texts)."""
    if result is None or result.get("is_error"):
        return None
    content = _text_of(result.get("content"))
    try:
        value, _ = json.JSONDecoder().raw_decode(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
