"""A journaled run stopped halfway, then resumed: nothing it had done is done again.

The agent writes three sections of a report (an idempotent tool), then sends it (a tool that
must not run twice). Run as a script, the run keeps a journal (`journal=PATH`) and is stopped
after the second section, as a crash would stop it; `resume(PATH)` then replays the recorded
model replies and tool results (no model call, no tool run for them) and goes on from the
third section. The CLI journals every run the same way: `orchestrator run
examples/durable_run.py "Write the report"` writes `runs/<run id>.db`, and `orchestrator
resume <run id>` continues it if it was stopped.
"""

import tempfile
from pathlib import Path

import trio

from orchestrator import Agent, ToolResultBlock, open_run, resume, tool
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.models.scripted import Step

WRITTEN: list[int] = []
SENT: list[str] = []
ASKED: list[int] = []


HALFWAY = trio.Event()


@tool(idempotent=True)
async def write_section(number: int) -> str:
    """Write one section of the report (safe to run again).

    Args:
        number: Which section.
    """
    WRITTEN.append(number)
    if number == 2:
        HALFWAY.set()
    await trio.lowlevel.checkpoint()
    return f"section {number} written"


@tool
def send_report() -> str:
    """Send the report (must not run twice)."""
    SENT.append("report")
    return "report sent"


def decide(request: ModelRequest) -> Step:
    """The 'model': a section per turn, then send, then answer."""
    turn = sum(1 for m in request.messages if m.role == "assistant")
    ASKED.append(turn)
    if turn < 3:
        return tool_call("write_section", {"number": turn + 1})
    if turn == 3:
        return tool_call("send_report", {})
    last = request.messages[-1].content[0]
    assert isinstance(last, ToolResultBlock)
    return text(f"Report sent: 3 sections ({last.content}).")


agent = Agent(
    "writer",
    "Write the three sections, send the report, then say so.",
    model=FunctionModel(decide),
    tools=[write_section, send_report],
)


async def stopped_halfway(path: Path) -> None:
    """Run with a journal and stop once the second section is written (as a crash would)."""
    async with open_run(agent, "Write the report", journal=path) as handle:
        await HALFWAY.wait()
        handle.cancel()
        cut = await handle.result()
    print(f"stopped: {cut.status.value} after {len(WRITTEN)} sections")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        journal = Path(folder) / "report.db"
        trio.run(stopped_halfway, journal)
        asked_before, written_before = len(ASKED), len(WRITTEN)
        result = trio.run(lambda: resume(journal, agent=agent))
    print(result.output)
    print(
        f"on resume: {len(ASKED) - asked_before} model calls, sections written "
        f"{WRITTEN[written_before:]}, report sent {len(SENT)} time(s)"
    )
