"""Children on Dask: what going remote costs, and what two worker processes buy.

Two figures, each against the same tree run in process:

- **CPU-bound fan-out**: a lead spawns N children in one turn; each calls a sync tool that
  does C seconds of work (pure Python, so one process runs one at a time under the GIL). In
  process the children's tools share one interpreter; on ``local:2`` (a LocalCluster of two
  worker processes on 127.0.0.1) two run at once. On two cores expect up to ~2x.
- **Overhead per remote child**: a lead spawns M children one per turn (so they run one after
  another), each answering at once with no tool; (remote wall - in-process wall) / M is the
  latency a child pays for going to a worker and back: pickling, the scheduler, the trio run on
  the worker, the result and spans coming back. Also with M children in one turn (throughput).

The model is a FunctionModel (no API key, no network beyond 127.0.0.1). The cluster is started
once, before the timed runs (its start-up is reported on its own).

Usage: ``python tests/benchmarks/bench_dask.py [--smoke] [--n 40] [--cpu 0.5] [--m 20]``.
``--smoke`` runs N = 4, C = 0.05, M = 3, once (for CI).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine, median, table

from orchestrator import Agent, Limits, run, tool
from orchestrator.models import FunctionModel, text, tool_call


def _work(rounds: int) -> int:
    n = 0
    for _ in range(rounds):
        n += sum(i * i for i in range(200))
    return n


def rounds_for(seconds: float) -> int:
    """How many rounds of :func:`_work` take ``seconds`` of CPU here, alone."""
    started = time.process_time()
    _work(2000)
    per_round = (time.process_time() - started) / 2000
    return max(1, round(seconds / per_round))


@tool
def burn(rounds: int) -> str:
    """A fixed amount of pure-Python work (holds the GIL: one thread of a process at a time)."""
    return f"burned {_work(rounds)}"


def fanout_model(n: int, rounds: int) -> FunctionModel:
    def answer(request: Any) -> Any:
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if request.agent.name == "lead":
            if turns == 0:
                return [
                    tool_call("spawn_subagent", {"agent": "worker", "task": f"job {i}"})
                    for i in range(n)
                ]
            return text("done")
        if turns == 0:
            return tool_call("burn", {"rounds": rounds})
        return text("burned")

    return FunctionModel(answer)


def sequential_model(m: int, together: bool) -> FunctionModel:
    def answer(request: Any) -> Any:
        turns = sum(1 for msg in request.messages if msg.role == "assistant")
        if request.agent.name == "lead":
            if together and turns == 0:
                return [
                    tool_call("spawn_subagent", {"agent": "worker", "task": f"hi {i}"})
                    for i in range(m)
                ]
            if not together and turns < m:
                return tool_call("spawn_subagent", {"agent": "worker", "task": f"hi {turns}"})
            return text("done")
        return text("hello")

    return FunctionModel(answer)


WORKER = Agent("worker", "Work.", description="works", tools=[burn])
LEAD = Agent("lead", "Lead.", subagents=[WORKER], tools=[burn])


def timed(model: FunctionModel, runner: Any, limits: Limits) -> float:
    started = time.perf_counter()
    result = trio.run(lambda: run(LEAD, "go", model=model, limits=limits, runner=runner))
    took = time.perf_counter() - started
    assert result.status.value == "completed", (result.status, result.error)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--cpu", type=float, default=0.5)
    parser.add_argument("--m", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if args.smoke:
        args.n, args.cpu, args.m, args.reps = 4, 0.05, 3, 1
    import distributed

    from orchestrator.dask import DaskRunner

    started = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = distributed.Client(cluster, set_as_default=False)
    cluster_start = time.perf_counter() - started
    limits = Limits(max_children=max(args.n, args.m) + 1, max_agents=max(args.n, args.m) * 2 + 2)
    limits = Limits(
        max_children=limits.max_children, max_agents=limits.max_agents, max_turns=args.m + 5
    )
    remote = DaskRunner(client)
    try:
        timed(sequential_model(2, False), remote, limits)  # warm the workers up
        rows: dict[str, dict[str, float]] = {}
        cases = {
            "cpu fan-out": fanout_model(args.n, rounds_for(args.cpu)),
            "sequential, no tool": sequential_model(args.m, False),
            "in one turn, no tool": sequential_model(args.m, True),
        }
        for name, model in cases.items():
            here = [timed(model, None, limits) for _ in range(args.reps)]
            there = [timed(model, remote, limits) for _ in range(args.reps)]
            rows[name] = {"in_process_s": median(here), "local2_s": median(there)}
    finally:
        client.close()
        cluster.close()
    seq = rows["sequential, no tool"]
    per_child_ms = (seq["local2_s"] - seq["in_process_s"]) / args.m * 1000
    together = rows["in one turn, no tool"]
    per_child_together_ms = (together["local2_s"] - together["in_process_s"]) / args.m * 1000
    cpu = rows["cpu fan-out"]
    result = {
        "benchmark": "dask",
        "machine": machine(),
        "n": args.n,
        "cpu_s": args.cpu,
        "m": args.m,
        "cluster_start_s": round(cluster_start, 3),
        "cases": rows,
        "cpu_speedup": cpu["in_process_s"] / cpu["local2_s"],
        "overhead_per_remote_child_ms": per_child_ms,
        "overhead_per_child_in_one_turn_ms": per_child_together_ms,
    }
    lines = table(
        ["case", "in process s", "local:2 s"],
        [[k, v["in_process_s"], v["local2_s"]] for k, v in rows.items()],
    )
    text_out = (
        f"{lines}\ncluster start {cluster_start:.2f} s; cpu fan-out speed-up "
        f"{result['cpu_speedup']:.2f}x; overhead per remote child {per_child_ms:.1f} ms "
        f"(one after another), {per_child_together_ms:.1f} ms (all in one turn)"
    )
    emit(result, text_out)


if __name__ == "__main__":
    main()
