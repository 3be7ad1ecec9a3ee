"""A lead that spawns three researchers in parallel, on a scripted model keyed by agent name.

Each researcher starts with a fresh transcript (its instructions and its task), may only use the
`lookup` tool, and returns only its final answer to the lead. The three run concurrently in the
lead's nursery; the result tree lists them in spawn order.
"""

import trio

from orchestrator import Agent, run_sync, tool
from orchestrator.models import ScriptedModel, text, tool_call

FACTS = {
    "trio": "trio is a structured-concurrency library for async Python.",
    "nursery": "A nursery owns its child tasks; none outlives it.",
    "cancel scope": "A cancel scope cancels everything inside it, deadlines included.",
}


@tool
async def lookup(topic: str) -> str:
    """Look a topic up in the team's notes.

    Args:
        topic: What to look up.
    """
    await trio.sleep(0.05)  # pretend I/O, so the parallelism shows in the trace
    return FACTS.get(topic, f"no notes on {topic!r}")


# The script is keyed by agent name; every researcher gets the same (stateless) script, so
# the researchers' answers are identical while their tasks differ. A FunctionModel could read
# the task from the request instead.
model = ScriptedModel(
    {
        "lead": [
            [
                tool_call("spawn_subagent", {"agent": "researcher", "task": topic})
                for topic in FACTS
            ],
            text("Summary: trio runs tasks in nurseries, and cancel scopes stop them together."),
        ],
        "researcher": [
            tool_call("lookup", {"topic": "nursery"}),
            text("A nursery owns its child tasks; none outlives it."),
        ],
    }
)

researcher = Agent(
    "researcher",
    "Research one topic with the lookup tool and answer in one sentence.",
    description="Researches one topic and reports back in a sentence.",
    tools=[lookup],
)
agent = Agent(
    "lead",
    "Split the question, spawn one researcher per part, then summarize their answers.",
    model=model,
    subagents=[researcher],
)

if __name__ == "__main__":
    result = run_sync(agent, "How does trio keep concurrent tasks in order?")
    print(result.output)
    for child in result.children:
        print(f"  {child.path}: {child.status.value}, {child.output!r}")
