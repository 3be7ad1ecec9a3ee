"""The research tree: a lead splits a question, researchers search and read in parallel, the
lead writes an answer that cites the documents read.

    orchestrator run agents/research.py "How do lambda expressions and list comprehensions work?"

The lead holds no search tools; each researcher gets only ``search`` and ``read``. Without an API
key the CLI runs this tree on the offline model; with one, on the models below (replace them
with ``--override-model``, e.g. ``--override-model claude-haiku-5-5``). ``--corpus DIR``
searches a folder of .md/.txt/.rst/.html files instead of the Python documentation (files over
8 MiB and names holding ``#`` are not indexed; a search that finds nothing says how many).
"""

from orchestrator import Agent, Limits
from orchestrator.models.anthropic import DEFAULT_MODEL, FAST_MODEL
from orchestrator.research.tools import corpus_tools

researcher = Agent(
    "researcher",
    "You research one sub-question in a document corpus. Search with a few plain keywords, read "
    "the two or three most relevant documents (or sections), and answer in a short paragraph "
    "built from what you read. Cite every claim with the document id in brackets, like "
    "[topic:for]. Say so plainly if the documents do not answer the question.",
    description="Researches one focused sub-question in the corpus and answers with citations.",
    model=f"anthropic:{FAST_MODEL}",
    tools=corpus_tools(),
    limits=Limits(max_turns=8),
)

agent = Agent(
    "lead",
    "You lead a research team. Split the user's question into two to four focused "
    "sub-questions, spawn one researcher per sub-question in a single turn so they work in "
    "parallel, then write the final answer from their reports. Keep their citations (document "
    "ids in brackets) next to the claims they support and end with a list of sources.",
    description="Splits a question, delegates to researchers, synthesizes a cited answer.",
    model=f"anthropic:{DEFAULT_MODEL}",
    subagents=[researcher],
    limits=Limits(max_turns=6, max_depth=1),
)
