"""CPU per model call of the fan-out under ``orchestrator.aio`` (trio as a guest on asyncio),
next to the same run under plain trio.

The workload is ``bench_fanout``'s (a root spawning N workers, each doing K tool turns, every
model call a FunctionModel that sleeps L ms). Runs alternate between the two modes in one
process, each measured with ``time.process_time()`` around one run (``trio.run(run(...))``
against ``asyncio.run(aio.run(...))``, loop start-up included); the ratio is the median of
the per-pair ratios, so load drifting during the benchmark does not skew it. The target is a
ratio of at most 1.2.

Usage: ``python tests/benchmarks/bench_aio.py [--smoke] [--n 100] [--l 0] [--reps 7]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine, median, table
from bench_fanout import ROOT, K, limits_for, make_model

from orchestrator import aio, run


def calls(n: int) -> int:
    return 2 + n * (K + 1)


def once_trio(n: int, latency: float) -> float:
    counter = [0]
    started = time.process_time()
    result = trio.run(
        partial(
            run,
            ROOT,
            "Look up every batch.",
            model=make_model(n, latency, counter),
            limits=limits_for(n),
        )
    )
    cpu = time.process_time() - started
    assert result.status.value == "completed" and counter[0] == calls(n), result.error
    return cpu


def once_aio(n: int, latency: float) -> float:
    counter = [0]

    async def main() -> tuple[str, str | None]:
        result = await aio.run(
            ROOT,
            "Look up every batch.",
            model=make_model(n, latency, counter),
            limits=limits_for(n),
        )
        # not the result itself: asyncio.run (3.11) formats its main task's repr, result
        # included, when it restores the SIGINT handler, which would be measured here
        return result.status.value, result.error

    started = time.process_time()
    status, error = asyncio.run(main())
    cpu = time.process_time() - started
    assert status == "completed" and counter[0] == calls(n), error
    return cpu


def measure(n: int, latency: float, reps: int) -> dict[str, Any]:
    once_trio(n, latency), once_aio(n, latency)  # warm-up: imports, caches
    pairs = []
    for _ in range(reps):
        pairs.append((once_trio(n, latency), once_aio(n, latency)))
    per_call = 1e6 / calls(n)
    return {
        "n": n,
        "latency_ms": latency * 1000,
        "trio_us_per_call": median([t for t, _ in pairs]) * per_call,
        "aio_us_per_call": median([a for _, a in pairs]) * per_call,
        "ratio": median([a / t for t, a in pairs]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--n", type=int, action="append")
    parser.add_argument("--l", type=float, action="append", help="model latency in ms")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    if args.smoke:
        rows = [measure(10, 0.0, 1)]
    else:
        rows = [
            measure(n, ms / 1000, args.reps)
            for n in args.n or [100, 1000]
            for ms in args.l or [0.0]
        ]
    text = table(
        ["N", "L ms", "trio µs/call", "aio µs/call", "aio/trio"],
        [
            [r["n"], r["latency_ms"], r["trio_us_per_call"], r["aio_us_per_call"], r["ratio"]]
            for r in rows
        ],
    )
    emit({"machine": machine(), "rows": rows, "target_ratio": 1.2}, text)


if __name__ == "__main__":
    main()
