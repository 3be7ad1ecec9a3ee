"""What a researcher answers with: :class:`Findings`, claims each citing the documents it read,
and the output validator that holds it to that (:func:`cited_sources_were_read`).

A researcher of the research tree is an ``Agent(..., output_type=Findings,
output_validators=[cited_sources_were_read])``: its answer is checked by pydantic (the shape),
then against its own ``search`` and ``read`` calls (the citations). A claim citing a document
the researcher neither read nor was shown by a search is rejected with the ids at fault, and
the model is asked again (``Limits.output_retries`` times), so the lead gets only citations
that point at something a researcher actually saw.

The web research tree's researchers (``agents/web_research.py``) answer with
:class:`WebFindings` (the same shape, its sources URLs) and the same validator: there a source
must be a URL one of the researcher's own hosted ``web_search`` or ``web_fetch`` results gave
(:func:`urls_seen`, read from the ``web_search_tool_result`` / ``web_fetch_tool_result``
blocks of its transcript), compared as :func:`url_key` writes them.

Both trees' leads answer in prose and hold :func:`answer_cites_only_findings` (an output
validator on a text agent): a citation in the answer that none of its researchers' claims cite
(:func:`findings_sources`, read from the lead's own ``spawn_subagent`` results) is named and
the lead asked again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Set
from typing import Annotated, Any, Final
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field

from ..core.errors import OutputRejected
from ..core.messages import (
    Message,
    ServerToolResultBlock,
    ServerToolUseBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..core.output import OutputContext
from .sources import FOLDER_SUFFIXES

__all__ = [
    "Claim",
    "Findings",
    "WebClaim",
    "WebFindings",
    "answer_cites_only_findings",
    "cited_sources_were_read",
    "findings_sources",
    "hit_ids",
    "sources_seen",
    "uncited_sources",
    "url_key",
    "urls_seen",
]

SEARCH_TOOLS: Final = frozenset({"search"})
READ_TOOLS: Final = frozenset({"read"})

# a hit's id runs to the "]" that ends it: a file name may hold spaces and brackets
_HIT_LINE = re.compile(r"^\[(.+?)\](?=\s|$)", re.MULTILINE)
# what read() puts first: "# Title [id]"; the id is what the last " [" on the line opens
_READ_HEADER = re.compile(r"\A# .* \[(.+)\]$", re.MULTILINE)
_SHOWN_CLAIM_CHARS: Final = 80
# a citation in a lead's prose: a bracketed token without spaces ("[topic:for]", "[https://...]"),
# not a link's text ("[text](url)"); which of them are checked: _is_citation
_CITATION = re.compile(r"\[([^\s\[\]]+)\](?!\()")
# the sources of a child's JSON cut at the parent's max_result_chars (no longer parseable)
_SOURCES_LIST = re.compile(r'"sources"\s*:\s*\[([^\]]*)')
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
# the kinds of document id a corpus gives ("topic:for", "stdlib:json", "notes/a.md"): always
# citations, even when no researcher cited one of that kind
_DOCUMENT_KINDS: Final = frozenset({"stdlib:", "topic:", *FOLDER_SUFFIXES})


class Claim(BaseModel):
    """One statement and the ids of the documents it comes from."""

    text: str = Field(description="The statement, in a sentence or two.")
    sources: Annotated[list[str], Field(min_length=1)] = Field(
        description="The ids (as search and read gave them, e.g. topic:for) of the documents "
        "you read that say it."
    )


class Findings(BaseModel):
    """A researcher's answer: a short summary and the claims that back it."""

    summary: str = Field(
        description="The answer in a few sentences, or why the documents do not answer it."
    )
    claims: list[Claim] = Field(
        description="What the documents say, one claim each, citing only documents you read."
    )


class WebClaim(Claim):
    """One statement and the URLs of the web pages it comes from."""

    sources: Annotated[list[str], Field(min_length=1)] = Field(
        description="The URLs, exactly as your web search or fetch results gave them, of the "
        "pages that say it."
    )


class WebFindings(Findings):
    """A web researcher's answer: a short summary and the claims that back it, citing URLs."""

    summary: str = Field(description="The answer in a few sentences, and what you could not find.")
    claims: list[WebClaim] = Field(  # type: ignore[assignment]  # a Claim that cites URLs
        description="What the pages say, one claim each, citing only URLs your own searches or "
        "fetches returned."
    )


def hit_ids(search_result: str) -> list[str]:
    """The ids of the hits of a ``search`` result, in rank order."""
    return _HIT_LINE.findall(search_result)


def sources_seen(
    tool_results: Iterable[tuple[ToolUseBlock, ToolResultBlock]],
) -> tuple[set[str], set[str]]:
    """``(read, found)``: the ids an agent read (each ``read`` that succeeded: the id it asked
    for and the one the document's header gives) and the ids its searches returned (``search``,
    and an MCP server's ``{server}__search`` whose hits are ``[id] ...`` lines).

    ``tool_results`` is :attr:`OutputContext.tool_results`: (call, result) pairs."""
    read: set[str] = set()
    found: set[str] = set()
    for call, result in tool_results:
        if result.is_error:
            continue
        content = result.content
        if call.name in SEARCH_TOOLS or call.name.endswith("__search"):  # an MCP server's too
            found.update(hit_ids(content))
        elif call.name in READ_TOOLS:
            asked = call.input.get("doc_id")
            if asked:
                read.add(str(asked))
            header = _READ_HEADER.match(content)
            if header:
                read.add(header.group(1))
    return read, found


def url_key(url: str) -> str:
    """``url`` as citations are compared: scheme and host in lower case, no fragment, no
    trailing ``/`` on the path (``https://Example.org/a/#b`` and ``https://example.org/a`` are
    one page); a text that is not an http(s) URL comes back stripped, unchanged otherwise."""
    text = url.strip().strip("<>")
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return text
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def urls_seen(messages: Iterable[Message]) -> set[str]:
    """The URLs an agent got from its own hosted tools (as :func:`url_key` writes them): each
    result of its ``web_search`` calls, and each page its ``web_fetch`` calls fetched (the URL
    asked for and the one the result names). A fetch that failed gave nothing."""
    asked: dict[str, str] = {}
    seen: set[str] = set()
    for m in messages:
        if m.role != "assistant":
            continue
        for b in m.content:
            if isinstance(b, ServerToolUseBlock) and b.name == "web_fetch":
                asked[b.id] = str(b.input.get("url", ""))
            elif isinstance(b, ServerToolResultBlock):
                got = _result_urls(b.data)
                if got and b.type == "web_fetch_tool_result" and asked.get(b.tool_use_id):
                    got.append(asked[b.tool_use_id])
                seen.update(url_key(u) for u in got if u)
    return seen


def _result_urls(data: Mapping[str, Any]) -> list[str]:
    """The URLs a ``web_search_tool_result`` or ``web_fetch_tool_result`` block holds (none
    for an error result)."""
    content = data.get("content")
    if data.get("type") == "web_search_tool_result" and isinstance(content, list):
        return [
            str(r["url"])
            for r in content
            if isinstance(r, Mapping) and r.get("type") == "web_search_result" and r.get("url")
        ]
    if (
        data.get("type") == "web_fetch_tool_result"
        and isinstance(content, Mapping)
        and content.get("type") == "web_fetch_result"
        and content.get("url")
    ):
        return [str(content["url"])]
    return []


def uncited_sources(
    findings: Findings, read: set[str], found: set[str], urls: Set[str] = frozenset()
) -> list[tuple[int, str]]:
    """``(claim index, source)`` of each citation that is neither an id read or found, nor a
    section (``id#section``) of a whole document read, nor a URL in ``urls`` (as
    :func:`url_key` writes them: :func:`urls_seen`)."""
    whole = {d for d in read if "#" not in d}
    bad = []
    for i, claim in enumerate(findings.claims):
        for source in claim.sources:
            if source in read or source in found or source.split("#", 1)[0] in whole:
                continue
            if urls and url_key(source) in urls:
                continue
            bad.append((i, source))
    return bad


def cited_sources_were_read(ctx: OutputContext, findings: Findings) -> Findings:
    """Output validator: every claim cites only documents this agent read or found by search,
    or URLs its own hosted web searches and fetches returned.

    Sources written in brackets (``[topic:for]``, as the prose prompt asks) are taken without
    them. A citation of anything else raises :class:`~orchestrator.OutputRejected` naming each
    claim and source at fault, so the model reads the document (fetches the page) first or
    drops the claim."""
    findings = _unbracketed(findings)
    read, found = sources_seen(ctx.tool_results)
    urls = urls_seen(ctx.messages)
    bad = uncited_sources(findings, read, found, urls)
    if not bad:
        return findings
    lines = []
    for i, source in bad:
        text = findings.claims[i].text
        shown = text if len(text) <= _SHOWN_CLAIM_CHARS else text[:_SHOWN_CLAIM_CHARS] + "…"
        lines.append(f"claims.{i} ({shown!r}) cites [{source}], which you did not read")
    web = bool(urls) or isinstance(findings, WebFindings)
    seen = sorted(urls if web else read | found)
    known = ", ".join(f"[{s}]" for s in seen[:20]) + (" ..." if len(seen) > 20 else "")
    what = (
        "URLs your web searches or fetches returned"
        if web
        else "document ids your search or read calls returned"
    )
    first = "fetch the page first" if web else "read the document first"
    raise OutputRejected(
        "; ".join(lines)
        + f". Cite only {what}"
        + (f" ({known})" if known else " (you have read none)")
        + f": {first}, or drop the claim."
    )


def _unbracketed(findings: Findings) -> Findings:
    if not any(s.startswith("[") and s.endswith("]") for c in findings.claims for s in c.sources):
        return findings
    claims = [
        c.model_copy(
            update={
                "sources": [
                    s[1:-1] if s.startswith("[") and s.endswith("]") else s for s in c.sources
                ]
            }
        )
        for c in findings.claims
    ]
    return findings.model_copy(update={"claims": claims})


def findings_sources(tool_results: Iterable[tuple[ToolUseBlock, ToolResultBlock]]) -> set[str]:
    """Every source the claims of the findings an agent's children returned cite (each
    successful ``spawn_subagent`` result that is :class:`Findings` JSON; also one cut at the
    parent's ``max_result_chars``), brackets taken off, URLs as :func:`url_key` writes them."""
    sources: set[str] = set()
    for call, result in tool_results:
        if call.name != "spawn_subagent" or result.is_error:
            continue
        try:
            doc = json.loads(result.content)
            claims = doc.get("claims") if isinstance(doc, dict) else None
            cited = [
                str(source)
                for claim in claims or ()
                if isinstance(claim, dict)
                for source in claim.get("sources") or ()
            ]
        except ValueError:  # a cut JSON: what its sources lists still hold
            cited = [
                json.loads(f'"{quoted}"')
                for listed in _SOURCES_LIST.findall(result.content)
                for quoted in _QUOTED.findall(listed)
            ]
        sources.update(url_key(_bare(source)) for source in cited)
    return sources


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _kind(source: str) -> str | None:
    """What kind of id ``source`` is: its prefix (``topic:`` of ``topic:for``), else its file
    extension (``.md`` of ``notes/a.md#intro``); None for neither."""
    head, colon, _ = source.partition(":")
    if colon:
        return head + ":"
    name = source.split("#", 1)[0].rsplit("/", 1)[-1]
    _, dot, ext = name.rpartition(".")
    return "." + ext.lower() if dot and ext.isalnum() else None


def _is_citation(token: str, kinds: Set[str | None]) -> bool:
    """Whether a bracketed token of a lead's prose is a citation to check: a URL, or an id of a
    kind the findings cite (``x:...`` when they cite ``x:y``, ``*.md`` when they cite ``a.md``)
    or a corpus gives (``topic:``, ``stdlib:``, a document file's extension), cited or not.
    Anything else in brackets (``sys.argv[1:]`` in a quoted passage) is prose."""
    return _is_url(url_key(token)) or _kind(token) in kinds


def _bare(source: str) -> str:
    return source[1:-1] if source.startswith("[") and source.endswith("]") else source


def answer_cites_only_findings(ctx: OutputContext, answer: str) -> str:
    """Output validator for a lead's prose answer: every citation in it (a bracketed source,
    ``[topic:for]`` or ``[https://example.org/page]``) is one its researchers' findings cite
    (:func:`findings_sources`), so the answer keeps only what a researcher read and the
    researchers' validator checked. A citation of anything else raises
    :class:`~orchestrator.OutputRejected` naming each; the lead is asked again."""
    allowed = findings_sources(ctx.tool_results)
    kinds = ({_kind(a) for a in allowed if not _is_url(a)} - {None}) | _DOCUMENT_KINDS
    bad = [
        cited
        for cited in dict.fromkeys(_CITATION.findall(answer))
        if _is_citation(cited, kinds) and url_key(cited) not in allowed
    ]
    if not bad:
        return answer
    known = sorted(allowed)
    listed = ", ".join(f"[{s}]" for s in known[:20]) + (" ..." if len(known) > 20 else "")
    raise OutputRejected(
        "The answer cites "
        + ", ".join(f"[{b}]" for b in bad)
        + ", which no researcher's findings cite. Cite only the sources of your researchers' "
        + "claims"
        + (f" ({listed})" if listed else " (they cited none)")
        + ": drop those citations, or the statements they back."
    )
