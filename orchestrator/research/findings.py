"""What a researcher answers with: :class:`Findings`, claims each citing the documents it read,
and the output validator that holds it to that (:func:`cited_sources_were_read`).

A researcher of the research tree is an ``Agent(..., output_type=Findings,
output_validators=[cited_sources_were_read])``: its answer is checked by pydantic (the shape),
then against its own ``search`` and ``read`` calls (the citations). A claim citing a document
the researcher neither read nor was shown by a search is rejected with the ids at fault, and
the model is asked again (``Limits.output_retries`` times), so the lead gets only citations
that point at something a researcher actually saw.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Final

from pydantic import BaseModel, Field

from ..core.errors import OutputRejected
from ..core.messages import ToolResultBlock, ToolUseBlock
from ..core.output import OutputContext

__all__ = [
    "Claim",
    "Findings",
    "cited_sources_were_read",
    "hit_ids",
    "sources_seen",
    "uncited_sources",
]

SEARCH_TOOLS: Final = frozenset({"search"})
READ_TOOLS: Final = frozenset({"read"})

# a hit's id runs to the "]" that ends it: a file name may hold spaces and brackets
_HIT_LINE = re.compile(r"^\[(.+?)\](?=\s|$)", re.MULTILINE)
# what read() puts first: "# Title [id]"; the id is what the last " [" on the line opens
_READ_HEADER = re.compile(r"\A# .* \[(.+)\]$", re.MULTILINE)
_SHOWN_CLAIM_CHARS: Final = 80


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


def hit_ids(search_result: str) -> list[str]:
    """The ids of the hits of a ``search`` result, in rank order."""
    return _HIT_LINE.findall(search_result)


def sources_seen(
    tool_results: Iterable[tuple[ToolUseBlock, ToolResultBlock]],
) -> tuple[set[str], set[str]]:
    """``(read, found)``: the ids an agent read (each ``read`` that succeeded: the id it asked
    for and the one the document's header gives) and the ids its searches returned.

    ``tool_results`` is :attr:`OutputContext.tool_results`: (call, result) pairs."""
    read: set[str] = set()
    found: set[str] = set()
    for call, result in tool_results:
        if result.is_error:
            continue
        content = result.content
        if call.name in SEARCH_TOOLS:
            found.update(hit_ids(content))
        elif call.name in READ_TOOLS:
            asked = call.input.get("doc_id")
            if asked:
                read.add(str(asked))
            header = _READ_HEADER.match(content)
            if header:
                read.add(header.group(1))
    return read, found


def uncited_sources(findings: Findings, read: set[str], found: set[str]) -> list[tuple[int, str]]:
    """``(claim index, source)`` of each citation that is neither an id read or found, nor a
    section (``id#section``) of a whole document read."""
    whole = {d for d in read if "#" not in d}
    bad = []
    for i, claim in enumerate(findings.claims):
        for source in claim.sources:
            if source in read or source in found or source.split("#", 1)[0] in whole:
                continue
            bad.append((i, source))
    return bad


def cited_sources_were_read(ctx: OutputContext, findings: Findings) -> Findings:
    """Output validator: every claim cites only documents this agent read or found by search.

    Sources written in brackets (``[topic:for]``, as the prose prompt asks) are taken without
    them. A citation of anything else raises :class:`~orchestrator.OutputRejected` naming each
    claim and id at fault, so the model reads the document first or drops the claim."""
    findings = _unbracketed(findings)
    read, found = sources_seen(ctx.tool_results)
    bad = uncited_sources(findings, read, found)
    if not bad:
        return findings
    lines = []
    for i, source in bad:
        text = findings.claims[i].text
        shown = text if len(text) <= _SHOWN_CLAIM_CHARS else text[:_SHOWN_CLAIM_CHARS] + "…"
        lines.append(f"claims.{i} ({shown!r}) cites [{source}], which you did not read")
    seen = sorted(read | found)
    known = ", ".join(f"[{s}]" for s in seen[:20]) + (" ..." if len(seen) > 20 else "")
    raise OutputRejected(
        "; ".join(lines)
        + ". Cite only document ids your search or read calls returned"
        + (f" ({known})" if known else " (you have read none)")
        + ": read the document first, or drop the claim."
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
