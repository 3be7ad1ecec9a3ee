"""What typed results cost: bench_fanout's tree with every child answering a small model.

The tree is bench_fanout's (N children of one root, each doing K = 3 turns of a trivial
``lookup`` tool call, then answering; a FunctionModel with L = 0), run two ways:

- untyped: each child ends with text (bench_fanout's tree as it is);
- typed: each child is ``Agent(..., output_type=Batch)`` (a pydantic model of three fields) and
  ends with a ``final_result`` call holding its value: the call is validated by pydantic, its
  JSON goes to the root's model as the spawn's result, and the instance to
  ``result.children[i].output``.

Both make the same model calls (2 + N·(K+1)). The figure is CPU per model call (user+sys of the
run, process-wide), typed over untyped: the two run alternately in one process (which goes
first alternating too), and the ratio is the median of the per-pair ratios, so load drifting on
a shared machine stays out of it. Untraced (``--tracing off``, the default) or traced (an SDK
provider with an in-memory exporter, as bench_fanout's).

Usage: ``python tests/benchmarks/bench_typed.py [--smoke] [--n 1000] [--pairs 9]
[--tracing off|on]``. ``--smoke`` runs N = 10, one pair (for CI).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trio.lowlevel
from _common import emit, machine, median, table, traced_provider
from bench_fanout import WORKER, K, expected_calls, limits_for, lookup

from orchestrator import Agent, Usage, run
from orchestrator.models import FunctionModel, response, text, tool_call

TARGET = 1.10


class Batch(BaseModel):
    """What a typed child answers: small, as a real child's summary would be."""

    batch: int
    values: list[str]
    complete: bool


TYPED_WORKER = WORKER.replace(output_type=Batch)
TREES = {
    "untyped": Agent("root", "You split the work among workers.", subagents=[WORKER]),
    "typed": Agent("root", "You split the work among workers.", subagents=[TYPED_WORKER]),
}

_CHILD_CALLS = [(tool_call("lookup", {"i": t}, id=f"toolu_{t:02d}"),) for t in range(K)]
_TEXT = (text("All items looked up: value-0, value-1, value-2."),)
_FINAL = (
    tool_call(
        "final_result",
        {"batch": 7, "values": ["value-0", "value-1", "value-2"], "complete": True},
        id="toolu_final",
    ),
)


def make_model(n: int, typed: bool, counter: list[int]) -> FunctionModel:
    """bench_fanout's model (L = 0); a typed child's last reply is its final_result call."""
    spawns = tuple(
        tool_call(
            "spawn_subagent", {"agent": "worker", "task": f"Look up batch {j}."}, id=f"toolu_s{j}"
        )
        for j in range(n)
    )
    last = _FINAL if typed else _TEXT

    async def answer(request: Any) -> Any:
        counter[0] += 1
        await trio.lowlevel.checkpoint()
        n_messages = len(request.messages)
        usage_in = request.input_tokens_estimate
        if request.agent.depth == 0:
            if n_messages == 1:
                return response(*spawns, usage=Usage(usage_in, 30 * n + 10))
            return response(*_TEXT, usage=Usage(usage_in, 40))
        turn = (n_messages - 1) // 2
        if turn < K:
            return response(*_CHILD_CALLS[turn], usage=Usage(usage_in, 25))
        return response(*last, usage=Usage(usage_in, 40))

    return FunctionModel(answer, name="bench-fn")


def one_run(kind: str, n: int, traced: bool) -> dict[str, float]:
    provider, _ = traced_provider() if traced else (None, None)
    counter = [0]
    box: dict[str, float] = {}

    async def main() -> None:
        c0 = time.process_time()
        result = await run(
            TREES[kind],
            "Look up every batch.",
            model=make_model(n, kind == "typed", counter),
            limits=limits_for(n),
            tracer_provider=provider,
        )
        box["cpu"] = time.process_time() - c0
        done = [c for c in result.children if c.status.value == "completed"]
        if result.status.value != "completed" or len(done) != n:
            raise RuntimeError(f"{kind}: {result.status} {result.error}; {len(done)}/{n}")
        if kind == "typed" and not all(isinstance(c.output, Batch) for c in done):
            raise RuntimeError("typed: a child's output is not a Batch")

    gc.collect()
    trio.run(main)
    if provider is not None:
        c0 = time.process_time()
        provider.force_flush()
        box["cpu"] += time.process_time() - c0
        provider.shutdown()
    if counter[0] != expected_calls(n):
        raise RuntimeError(f"{kind}: {counter[0]} model calls, expected {expected_calls(n)}")
    return {"cpu_us_per_call": box["cpu"] / counter[0] * 1e6}


def measure(n: int, pairs: int, traced: bool) -> dict[str, Any]:
    kinds = ["untyped", "typed"]
    for kind in kinds:
        one_run(kind, 2, traced)  # warm-up: imports, schema compilation, caches
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    ratios = []
    for i in range(pairs):
        pair = {}
        for kind in kinds if i % 2 == 0 else kinds[::-1]:
            pair[kind] = one_run(kind, n, traced)["cpu_us_per_call"]
            cpu[kind].append(pair[kind])
        ratios.append(pair["typed"] / pair["untyped"])
    return {
        "n": n,
        "k": K,
        "tracing": "on" if traced else "off",
        "pairs": pairs,
        "cpu_us_per_call": {k: round(median(v), 1) for k, v in cpu.items()},
        "cpu_us_per_call_runs": {k: [round(x, 1) for x in v] for k, v in cpu.items()},
        "pair_ratios": [round(x, 3) for x in ratios],
        "ratio": median(ratios),
        # contention on a loaded machine only adds CPU: the least of each side is the steadier
        "min_ratio": min(cpu["typed"]) / min(cpu["untyped"]),
        "target": TARGET,
        "ok": median(ratios) <= TARGET,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="N=10, one pair (CI)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--tracing", choices=("off", "on"), default="off")
    args = ap.parse_args()
    started = time.perf_counter()
    n, pairs = (10, 1) if args.smoke else (args.n, args.pairs)
    if lookup.name != "lookup":  # the tree is bench_fanout's: keep its tool in sight
        raise RuntimeError("bench_fanout's lookup tool changed")
    result = measure(n, pairs, args.tracing == "on")
    elapsed = time.perf_counter() - started
    cpu = result["cpu_us_per_call"]
    lines = [
        f"typed fan-out (N={n}, K={K}, L=0, tracing {result['tracing']}): CPU per model call",
        table(
            ["untyped us", "typed us", "ratio", "pairs"],
            [[cpu["untyped"], cpu["typed"], result["ratio"], pairs]],
        ),
        f"  {'OK  ' if result['ok'] else 'MISS'} typed/untyped: {result['ratio']:.3f} "
        f"(target {TARGET}); pairs {result['pair_ratios']}; least/least "
        f"{result['min_ratio']:.3f}",
        f"  ({elapsed:.1f}s)",
    ]
    emit(
        {
            "benchmark": "typed",
            "smoke": args.smoke,
            "machine": machine(),
            "elapsed_s": round(elapsed, 1),
            **result,
        },
        "\n".join(lines),
    )


if __name__ == "__main__":
    main()
