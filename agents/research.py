"""The research tree: a lead splits a question, researchers search and read in parallel, the
lead writes an answer that cites the documents read.

Each researcher answers with typed :class:`Findings` (a summary and claims, each citing the
document ids it comes from), checked before the lead sees them: a claim citing a document the
researcher did not read (an id none of its own ``search`` or ``read`` calls returned) is
rejected and the researcher is asked again (``Limits(output_retries=2)``), so the lead gets
only citations that point at something read. The lead answers in prose from the findings, and
its answer is checked too (``answer_cites_only_findings``): a citation no researcher's claims
hold is rejected and the lead asked again.

    orchestrator run agents/research.py "How do lambda expressions and list comprehensions work?"

The lead scales the effort to the question (one researcher for a simple fact, one per part of
a question in parts, more for a broad survey, never more than six) and says what was not found.
The lead holds no search tools; each researcher gets only ``search`` and ``read``. Without an API
key the CLI runs this tree on the offline model; with one, on the models below (replace them
with ``--override-model``, e.g. ``--override-model claude-haiku-5-5``). ``--corpus DIR``
searches a folder of .md/.txt/.rst/.html files instead of the Python documentation (files over
8 MiB and names holding ``#`` are not indexed; a search that finds nothing says how many).
"""

from orchestrator import Agent, Limits
from orchestrator.models.anthropic import DEFAULT_MODEL, FAST_MODEL
from orchestrator.research.findings import (
    Findings,
    answer_cites_only_findings,
    cited_sources_were_read,
)
from orchestrator.research.tools import corpus_tools

researcher = Agent(
    "researcher",
    "You research one sub-question in a document corpus. Search with a few plain keywords, read "
    "the two or three most relevant documents (or sections), and give your findings: a short "
    "summary, and one claim per point, each citing the ids of the documents you read that say "
    "it (as search gave them, like topic:for). Cite nothing you did not read. If the documents "
    "do not answer the question, say so in the summary and give no claims.",
    description="Researches one focused sub-question in the corpus and reports cited findings.",
    model=f"anthropic:{FAST_MODEL}",
    tools=corpus_tools(),
    limits=Limits(max_turns=8),
    output_type=Findings,
    output_validators=[cited_sources_were_read],
)

MAX_RESEARCHERS = 6

agent = Agent(
    "lead",
    "You lead a research team. First judge how much research the question needs: one "
    "researcher for a simple fact, two to four for a comparison or a question in several "
    f"parts (one per part), more for a broad survey, never more than {MAX_RESEARCHERS}. Spawn "
    "all of them in a single turn so they work in parallel, each with a focused, self-contained "
    "sub-question. Then write the final answer from their findings: keep their citations "
    "(document ids in brackets, like [topic:for]) next to the claims they support, cite "
    "nothing their claims do not, say plainly what they could not find, and end with a list "
    "of sources.",
    description="Splits a question, delegates to researchers, synthesizes a cited answer.",
    model=f"anthropic:{DEFAULT_MODEL}",
    subagents=[researcher],
    limits=Limits(max_turns=6, max_depth=1, max_children=MAX_RESEARCHERS),
    output_validators=[answer_cites_only_findings],
)
