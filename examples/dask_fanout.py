"""A fan-out whose workers run on a Dask cluster: eight children, each a CPU-bound sync tool.

The lead spawns eight workers in one turn; each worker counts the primes below a bound with
the `count_primes` tool (pure Python, ~0.2 s of CPU) and reports it; the lead adds them up.
Run as a script, the children run as Dask tasks on a LocalCluster of two worker processes on
127.0.0.1 (`DaskRunner("local:2")`): the workers' CPU work runs in two processes at once,
while the lead, the ledger and the trace stay in this one. The same tree runs in one process
with `orchestrator run examples/dask_fanout.py "Count the primes"`, or on a cluster with
`--dask local:2` or `--dask tcp://HOST:PORT`.

Needs the `dask` extra: `pip install 'orchestrator[dask]'`.
"""

import re
import time

from orchestrator import Agent, Limits, TextBlock, ToolResultBlock, run_sync, tool
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.models.scripted import Step

WORKERS = 8
BOUND = 60_000


@tool
def count_primes(below: int) -> int:
    """Count the primes below a bound (CPU work: a sync tool, run in a worker thread).

    Args:
        below: The bound.
    """
    return sum(1 for n in range(2, below) if all(n % d for d in range(2, int(n**0.5) + 1)))


def _results(request: ModelRequest) -> list[str]:
    last = request.messages[-1]
    return [b.content for b in last.content if isinstance(b, ToolResultBlock)]


def decide(request: ModelRequest) -> Step:
    """The whole 'model': what the lead and the workers say, read from each request."""
    turn = sum(1 for m in request.messages if m.role == "assistant")
    if request.agent.name == "lead":
        if turn == 0:
            return [
                tool_call("spawn_subagent", {"agent": "worker", "task": f"count below {BOUND}"})
                for _ in range(WORKERS)
            ]
        total = sum(int(re.findall(r"\d+", r)[-1]) for r in _results(request))
        return text(f"{WORKERS} workers counted {total} primes in all.")
    if turn == 0:
        task = next(b.text for b in request.messages[0].content if isinstance(b, TextBlock))
        return tool_call("count_primes", {"below": int(task.split()[-1])})
    return text(f"counted: {_results(request)[0]}")


worker = Agent(
    "worker",
    "Count the primes below the bound in your task with count_primes; report the count.",
    description="Counts primes below a bound.",
    tools=[count_primes],
)
agent = Agent(
    "lead",
    "Spawn the workers all at once, then add up their counts.",
    model=FunctionModel(decide),
    subagents=[worker],
    limits=Limits(max_children=WORKERS),
)

if __name__ == "__main__":
    from orchestrator.dask import DaskRunner

    started = time.perf_counter()
    result = run_sync(agent, "Count the primes", runner=DaskRunner("local:2"))
    wall = time.perf_counter() - started
    print(result.output)
    statuses = sorted({child.status.value for child in result.children})
    print(f"{len(result.children)} workers ({', '.join(statuses)}) on Dask in {wall:.2f}s")
