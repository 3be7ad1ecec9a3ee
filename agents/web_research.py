"""The web research tree: a lead splits a question, researchers search and read the web in
parallel, the lead writes an answer that cites the pages read.

Each researcher holds the provider's hosted ``WebSearch`` and ``WebFetch`` tools (they run at
Anthropic, not here) and answers with typed :class:`WebFindings` (a summary and claims, each
citing the URLs it comes from), checked before the lead sees them: a claim citing a URL that
none of the researcher's own web search or fetch results gave is rejected with the URL named,
and the researcher is asked again (``Limits(output_retries=2)``). The lead answers in prose
from the findings, and its answer is checked too (``answer_cites_only_findings``): a URL no
researcher's claims cite is rejected and the lead asked again.

    ANTHROPIC_API_KEY=... orchestrator run agents/web_research.py \\
        "What is the tallest building in Europe, when did it open, and who designed it?"

It needs a model that can search the web: without ``ANTHROPIC_API_KEY`` the CLI says so in one
line and exits 2 (the offline model cannot search; ``agents/research.py`` is the tree that runs
offline, over a folder of documents). Searches cost $10 per 1,000 on top of tokens; each
researcher makes at most 5 searches and 5 fetches.
"""

from orchestrator import Agent, Limits, WebFetch, WebSearch
from orchestrator.models.anthropic import DEFAULT_MODEL, FAST_MODEL
from orchestrator.research.findings import (
    WebFindings,
    answer_cites_only_findings,
    cited_sources_were_read,
)

MAX_RESEARCHERS = 6

researcher = Agent(
    "researcher",
    "You research one sub-question on the web. Search with a few plain keywords, fetch the two "
    "or three most relevant pages (prefer primary and official sources), and give your "
    "findings: a short summary that also says what you could not find, and one claim per "
    "point, each citing the URLs of the pages that say it, exactly as your search or fetch "
    "results gave them. Cite nothing your own searches and fetches did not return. If the web "
    "does not answer the question, say so in the summary and give no claims.",
    description="Researches one focused sub-question on the web and reports cited findings.",
    model=f"anthropic:{FAST_MODEL}",
    tools=[WebSearch(max_uses=5), WebFetch(max_uses=5)],
    limits=Limits(max_turns=8),
    output_type=WebFindings,
    output_validators=[cited_sources_were_read],
)

agent = Agent(
    "lead",
    "You lead a web research team. First judge how much research the question needs: one "
    "researcher for a simple fact, two to four for a comparison or a question in several "
    f"parts (one per part), more for a broad survey, never more than {MAX_RESEARCHERS}. Spawn "
    "all of them in a single turn so they work in parallel, each with a focused, self-contained "
    "sub-question. Then write the final answer from their findings: keep their citations "
    "(URLs in brackets, like [https://example.org/page]) next to the claims they support, cite "
    "no URL their claims do not, say plainly what they could not find, and end with a list of "
    "sources.",
    description="Splits a question, delegates to web researchers, synthesizes a cited answer.",
    model=f"anthropic:{DEFAULT_MODEL}",
    subagents=[researcher],
    limits=Limits(max_turns=6, max_depth=1, max_children=MAX_RESEARCHERS),
    output_validators=[answer_cites_only_findings],
)
