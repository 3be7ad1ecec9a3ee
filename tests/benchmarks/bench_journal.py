"""What a journal costs, and how fast a resume replays.

1. CPU per model call on the fan-out workload (bench_fanout's tree: N children, 4 model calls
   and 3 tool calls each, L = 0), with the CLI's default tracing (a trace file) in both runs,
   with and without a SQLite journal: interleaved pairs, each in a fresh process.
2. Resume of an N-child run stopped after half its children finished: the time to replay the
   journal and finish (the other half runs for real, at L = 0).

    python tests/benchmarks/bench_journal.py [--n 1000] [--pairs 5]
    python tests/benchmarks/bench_journal.py --smoke      # N = 10, once (CI keeps it working)

Prints one JSON object on stdout and a short table on stderr (see _common.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, median
from bench_fanout import ROOT, expected_calls, limits_for, make_model

from orchestrator import open_run, resume, run
from orchestrator.models import FunctionModel
from orchestrator.tracing import configure_tracing


def measure(n: int, journal: bool, folder: Path) -> dict[str, Any]:
    """One traced fan-out in this process (after a warm-up); CPU per model call."""
    setup = configure_tracing(run_file=folder / "trace.jsonl", set_global=False)
    provider = setup.tracer_provider

    async def once(size: int, name: str) -> float:
        counter = [0]
        c0 = time.process_time()
        result = await run(
            ROOT,
            "Look up every batch.",
            model=make_model(size, 0.0, counter),
            limits=limits_for(size),
            tracer_provider=provider,
            journal=folder / f"{name}.db" if journal else None,
        )
        cpu = time.process_time() - c0
        assert result.status.value == "completed" and counter[0] == expected_calls(size)
        return cpu / counter[0] * 1e6

    trio.run(once, 2, "warm")
    per_call = trio.run(once, n, "run")
    c0 = time.process_time()
    setup.shutdown()  # the trace file's last batches: part of what the run costs
    flush_us = (time.process_time() - c0) / expected_calls(n) * 1e6
    return {"cpu_us_per_call": per_call + flush_us}


def resume_time(n: int, folder: Path) -> dict[str, Any]:
    """Stop an N-child run once half its children finished; time the resume."""
    path = folder / "half.db"
    counter = [0]
    model = make_model(n, 0.0, counter)

    async def half_hang(request: Any) -> Any:  # the second half's workers never get an answer
        if request.agent.depth == 1 and int(request.agent.path.rpartition("#")[2]) > n // 2:
            await trio.sleep_forever()
        return await model._fn(request)

    async def first() -> int:
        async with open_run(
            ROOT,
            "Look up every batch.",
            model=FunctionModel(half_hang, name="bench-fn"),
            limits=limits_for(n),
            journal=path,
            event_buffer=0,
        ) as handle:
            root = handle._root  # the tree as it runs: count finished children
            while sum(1 for _, c in root.children if c.status is not None) < n // 2:
                await trio.lowlevel.checkpoint()
            handle.cancel()
            await handle.result()
        return sum(1 for _, c in root.children if c.status and c.status.value == "completed")

    finished = trio.run(first)
    asked_before = counter[0]
    w0, c0 = time.perf_counter(), time.process_time()
    result = trio.run(lambda: resume(path, agent=ROOT, model=make_model(n, 0.0, counter)))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert result.status.value == "completed", result.error
    return {
        "children": n,
        "finished_before_stop": finished,
        "model_calls_before_stop": asked_before,
        "model_calls_on_resume": counter[0] - asked_before,
        "resume_wall_s": round(wall, 3),
        "resume_cpu_s": round(cpu, 3),
    }


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        if spec["kind"] == "resume":
            return resume_time(spec["n"], Path(tmp))
        return measure(spec["n"], spec["journal"], Path(tmp))


def in_fresh_process(spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        json.dump(worker(json.loads(args.worker)), sys.stdout)
        return
    n, pairs = (10, 1) if args.smoke else (args.n, args.pairs)
    plain, journaled = [], []
    for i in range(pairs):  # interleaved, alternating which goes first
        order = [False, True] if i % 2 == 0 else [True, False]
        for journal in order:
            r = in_fresh_process({"kind": "run", "n": n, "journal": journal})
            (journaled if journal else plain).append(r["cpu_us_per_call"])
    ratios = [j / p for j, p in zip(journaled, plain, strict=True)]
    resumed = in_fresh_process({"kind": "resume", "n": n})
    report = {
        "machine": machine(),
        "n": n,
        "pairs": pairs,
        "traced_us_per_call": [round(x, 1) for x in plain],
        "traced_journaled_us_per_call": [round(x, 1) for x in journaled],
        "median_ratio": round(median(ratios), 3),
        "resume": resumed,
    }
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    sys.stderr.write(
        f"N={n}: trace file {median(plain):.0f} us/call, + journal {median(journaled):.0f} "
        f"us/call (x{median(ratios):.2f}, {pairs} pairs); resume after {resumed['finished_before_stop']}"
        f" of {n} children finished: {resumed['resume_wall_s']} s\n"
    )


if __name__ == "__main__":
    main()
