"""Typed results: a lead spawns two researchers that return checked findings, and returns a
typed report built from them.

Each researcher is an `Agent(..., output_type=Findings)`: it searches and reads the notes in
`examples/files/` (the offline model does the research, no API key needed) and answers through
the `final_result` tool with a summary and claims, each citing the notes it read. Its output
validator (`cited_sources_were_read`) rejects a claim citing a note it did not read, and the
model is asked again. The lead's model gets each researcher's findings as JSON (the spawn's
result); the program gets them as `Findings` instances in `result.children[i].output`. The
lead (a `FunctionModel` here, standing in for an LLM) answers with a `Report`, and its own
validator keeps it honest: every source in the report must come from its researchers'
findings. `result.output` is a `Report` to mypy and at run time.

    python examples/typed_report.py
    orchestrator run examples/typed_report.py "How does trio keep concurrent tasks in order?"
"""

from pathlib import Path

from pydantic import BaseModel

from orchestrator import (
    Agent,
    Limits,
    OutputContext,
    OutputRejected,
    ToolResultBlock,
    run_sync,
)
from orchestrator.models import FunctionModel, ModelRequest, final, tool_call
from orchestrator.models.scripted import Step
from orchestrator.research.findings import Claim, Findings, cited_sources_were_read
from orchestrator.research.offline import OfflineModel
from orchestrator.research.tools import corpus_tools

NOTES = Path(__file__).parent / "files"
TOPICS = ("What does a nursery do?", "What does a cancel scope do?")


class Section(BaseModel):
    """One researched question of the report."""

    question: str
    summary: str
    claims: list[Claim]


class Report(BaseModel):
    """What the lead returns."""

    title: str
    sections: list[Section]
    sources: list[str]


def write_report(request: ModelRequest) -> Step:
    """The lead: spawn one researcher per topic, then turn their findings (JSON) into a Report."""
    if request.turn_index() == 0:
        return [tool_call("spawn_subagent", {"agent": "researcher", "task": t}) for t in TOPICS]
    spawned = {c.id: str(c.input["task"]) for c in request.messages[-2].tool_uses}
    sections = []
    for block in request.messages[-1].content:  # each spawn's result: a researcher's JSON
        if isinstance(block, ToolResultBlock) and not block.is_error:
            found = Findings.model_validate_json(block.content)
            question = spawned[block.tool_use_id]
            sections.append(Section(question=question, summary=found.summary, claims=found.claims))
    sources = [s for section in sections for claim in section.claims for s in claim.sources]
    return final(
        Report(
            title=request.messages[0].text, sections=sections, sources=list(dict.fromkeys(sources))
        )
    )


def sources_from_findings(ctx: OutputContext, report: Report) -> Report:
    """The lead's output validator: the report cites only what its researchers found."""
    found = {
        source
        for call, result in ctx.tool_results
        if call.name == "spawn_subagent" and not result.is_error
        for claim in Findings.model_validate_json(result.content).claims
        for source in claim.sources
    }
    unknown = [s for s in report.sources if s not in found]
    if unknown:
        raise OutputRejected(f"sources {unknown} are in no researcher's findings; drop them")
    return report


researcher = Agent(
    "researcher",
    "Research one question in the notes: search, read, and report findings that cite the notes "
    "you read.",
    description="Researches one question in the team's notes.",
    model=OfflineModel(),
    tools=corpus_tools(NOTES),
    output_type=Findings,
    output_validators=[cited_sources_were_read],
    limits=Limits(max_turns=6),
)
agent = Agent(
    "lead",
    "Spawn one researcher per topic, then write a report from their findings.",
    model=FunctionModel(write_report),
    subagents=[researcher],
    output_type=Report,
    output_validators=[sources_from_findings],
)

if __name__ == "__main__":
    result = run_sync(agent, "How does trio keep concurrent tasks in order?")
    report: Report = result.output  # typed: no parsing, no cast
    print(f"{report.title} ({result.status.value})")
    for section in report.sections:
        print(f"\n## {section.question}\n{section.summary}")
        for claim in section.claims:
            print(f"- {claim.text} " + " ".join(f"[{s}]" for s in claim.sources))
    print("\nSources: " + ", ".join(report.sources))
    for child in result.children:  # each researcher's checked Findings, as an instance
        assert isinstance(child.output, Findings)
        print(f"  {child.path}: {child.status.value}, {len(child.output.claims)} claim(s)")
