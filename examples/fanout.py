"""A wide parallel fan-out: a lead spawns 20 workers in one turn, then adds up their answers.

The model is a `FunctionModel` (no API key needed) that reads each request: the lead asks for
twenty `spawn_subagent` calls at once, each worker squares its number with the async `square`
tool, and the lead sums the workers' answers. All twenty children run concurrently in the lead's
nursery (the tool sleeps 0.2 s, yet the whole run takes well under a second), and the result tree
lists them in spawn order. `max_children` is raised from its default of 10 to allow the fan-out.

Run it with `python examples/fanout.py` or
`orchestrator run examples/fanout.py "Sum the squares of 1..20"`.
"""

import re
import time

import trio

from orchestrator import Agent, Limits, TextBlock, ToolResultBlock, run_sync, tool
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.models.scripted import Step

WORKERS = 20


@tool
async def square(n: int) -> int:
    """Square a number (slowly, as if it called a remote service).

    Args:
        n: The number to square.
    """
    await trio.sleep(0.2)
    return n * n


def _results(request: ModelRequest) -> list[str]:
    """The tool results in the last user message of the request."""
    last = request.messages[-1]
    return [b.content for b in last.content if isinstance(b, ToolResultBlock)]


def decide(request: ModelRequest) -> Step:
    """The whole 'model': what the lead and the workers say, read from each request."""
    turn = sum(1 for m in request.messages if m.role == "assistant")
    if request.agent.name == "lead":
        if turn == 0:
            return [
                tool_call("spawn_subagent", {"agent": "worker", "task": f"square {n}"})
                for n in range(1, WORKERS + 1)
            ]
        total = sum(int(re.findall(r"-?\d+", r)[-1]) for r in _results(request))
        return text(f"The sum of the squares of 1..{WORKERS} is {total}.")
    # a worker: its task is the first user message, e.g. "square 7"
    if turn == 0:
        task = next(b.text for b in request.messages[0].content if isinstance(b, TextBlock))
        return tool_call("square", {"n": int(task.split()[-1])})
    return text(f"squared: {_results(request)[0]}")


worker = Agent(
    "worker",
    "Square the number in your task with the square tool and report the result.",
    description="Squares one number.",
    tools=[square],
)
agent = Agent(
    "lead",
    "Spawn one worker per number, all at once, then add up their answers.",
    model=FunctionModel(decide),
    subagents=[worker],
    limits=Limits(max_children=WORKERS),
)

if __name__ == "__main__":
    started = time.perf_counter()
    result = run_sync(agent, f"Sum the squares of 1..{WORKERS}")
    wall = time.perf_counter() - started
    print(result.output)
    statuses = sorted({child.status.value for child in result.children})
    print(f"{len(result.children)} workers ({', '.join(statuses)}) in {wall:.2f}s")
