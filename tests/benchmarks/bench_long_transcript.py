"""Long transcript: does a turn cost more as the transcript grows?

One agent, 200 turns, each calling a tool that returns 2 KB, then a final answer. The
FunctionModel reads ``time.process_time()`` at every call; the CPU of turn t is the delta between
call t and call t+1 (the reply's handling, the tool, the RESUME step and building the next
request: everything the runtime does per turn, with a model that answers at once). The per-turn
CPU at turn 10 is compared with turn 200 (each the median over a 10-turn window and over the
runs); the target is that a late turn costs about what an early one does, since each turn adds
the same amount of new content. Also reported: the least-squares slope of per-turn CPU over the
turn index (CPU added per turn of history).

``--clearing N`` runs the agent with ``ContextPolicy(clear_results_after=N)`` (results cleared
once N turns old, in batches of ``clear_batch``, default 4): clearing must keep a late turn as
cheap as an early one too, so each turn's clearing costs what its new turns add, not what the
whole transcript holds.

Usage: ``python tests/benchmarks/bench_long_transcript.py [--smoke] [--turns 200] [--reps 3]
[--clearing 5] [--clear-batch 4] [--untraced]``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine, median, peak_rss_mb, table, traced_provider

from orchestrator import Agent, ContextPolicy, Limits, Usage, run, tool
from orchestrator.models import FunctionModel, response, text, tool_call

RESULT_BYTES = 2048
WINDOW = 10


@tool
async def fetch(i: int) -> str:
    """Fetch page ``i`` of the document.

    Args:
        i: page number
    """
    head = f"page {i}: "
    return head + ("lorem ipsum dolor sit amet " * 80)[: RESULT_BYTES - len(head)]


AGENT = Agent("reader", "You read a long document page by page.", tools=[fetch])


def agent_for(clearing: int | None, batch: int) -> Agent:
    """The reader, with results cleared once ``clearing`` turns old (``None``: never)."""
    if clearing is None:
        return AGENT
    policy = ContextPolicy(
        clear_results_after=clearing, clear_batch=batch, compact_at_fraction=None
    )
    return Agent(AGENT.name, AGENT.instructions, tools=[fetch], context=policy)


def one_run(turns: int, traced: bool, clearing: int | None = None, batch: int = 4) -> list[float]:
    """Per-turn CPU seconds, index 0 = turn 1."""
    stamps: list[float] = []

    async def answer(request: Any) -> Any:
        stamps.append(time.process_time())
        await trio.lowlevel.checkpoint()
        turn = (len(request.messages) - 1) // 2  # assistant turns so far
        usage = Usage(request.input_tokens_estimate, 30)
        if turn < turns:
            return response(tool_call("fetch", {"i": turn}, id=f"toolu_{turn:04d}"), usage=usage)
        return response(text("Read every page."), usage=usage)

    provider, _exporter = traced_provider() if traced else (None, None)
    gc.collect()
    result = trio.run(
        lambda: run(
            agent_for(clearing, batch),
            "Read the whole document.",
            model=FunctionModel(answer, name="bench-fn"),
            limits=Limits(max_turns=turns + 1, token_budget=10**12),
            tracer_provider=provider,
        )
    )
    if provider is not None:
        provider.shutdown()
    if result.status.value != "completed" or len(stamps) != turns + 1:
        raise RuntimeError(f"run ended {result.status}: {result.error}; {len(stamps)} calls")
    return [b - a for a, b in itertools.pairwise(stamps)]


def slope(values: list[float]) -> float:
    xs = list(range(1, len(values) + 1))
    mx, my = statistics.fmean(xs), statistics.fmean(values)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, values, strict=True))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den if den else 0.0


def measure(
    turns: int, reps: int, traced: bool, clearing: int | None = None, batch: int = 4
) -> dict[str, Any]:
    one_run(5, traced, clearing, batch)  # warm-up
    runs = [one_run(turns, traced, clearing, batch) for _ in range(reps)]
    per_turn = [median([r[t] for r in runs]) for t in range(turns)]  # median over runs
    window = min(WINDOW, max(1, turns // 4))
    early_at = min(10, turns // 2)
    lo = max(0, early_at - window // 2 - 1)
    early = median(per_turn[lo : lo + window])
    late = median(per_turn[turns - window :])
    return {
        "tracing": "on" if traced else "off",
        "clear_results_after": clearing,
        "clear_batch": batch if clearing is not None else None,
        "turns": turns,
        "reps": reps,
        "early_turn": early_at,
        "window_turns": window,
        "late_turn": turns,
        "cpu_us_per_turn_early": early * 1e6,
        "cpu_us_per_turn_late": late * 1e6,
        "late_over_early": late / early if early else None,
        "slope_us_per_turn_of_history": slope(per_turn) * 1e6,
        "cpu_us_total_median": sum(per_turn) * 1e6,
        "cpu_s_total_median": round(sum(per_turn), 3),
        "per_turn_us": [round(x * 1e6, 1) for x in per_turn],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="20 turns, one run (CI)")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument(
        "--clearing",
        type=int,
        default=None,
        metavar="N",
        help="clear tool results once N turns old (ContextPolicy.clear_results_after)",
    )
    ap.add_argument("--clear-batch", type=int, default=4, metavar="B", help="clear_batch (4)")
    ap.add_argument("--untraced", action="store_true", help="measure only without tracing")
    args = ap.parse_args()
    started = time.perf_counter()
    turns = args.turns or (20 if args.smoke else 200)
    reps = args.reps or (1 if args.smoke else 7)
    tracings = (False,) if args.untraced else (False, True)
    rows = [measure(turns, reps, traced, args.clearing, args.clear_batch) for traced in tracings]
    elapsed = time.perf_counter() - started
    out = {
        "benchmark": "long_transcript",
        "smoke": args.smoke,
        "result_bytes": RESULT_BYTES,
        "clear_results_after": args.clearing,
        "machine": machine(),
        "elapsed_s": round(elapsed, 1),
        "peak_rss_mb": peak_rss_mb(),
        "rows": rows,
    }
    headers = [
        "trace",
        "turns",
        "CPU us @early",
        "CPU us @late",
        "late/early",
        "slope us/turn",
        "CPU s total",
    ]
    body = [
        [
            r["tracing"],
            r["turns"],
            r["cpu_us_per_turn_early"],
            r["cpu_us_per_turn_late"],
            r["late_over_early"],
            r["slope_us_per_turn_of_history"],
            r["cpu_s_total_median"],
        ]
        for r in rows
    ]
    text_out = "\n".join(
        [
            f"long transcript: one agent, {turns} turns of {RESULT_BYTES} B tool results"
            + (
                f", results cleared after {args.clearing} turns (batch {args.clear_batch})"
                if args.clearing is not None
                else ""
            )
            + " "
            f"(early = turn {rows[0]['early_turn']}, late = turn {turns}; "
            f"{rows[0]['window_turns']}-turn medians of per-run medians)",
            table(headers, body),
            f"  ({elapsed:.1f}s)",
        ]
    )
    emit(out, text_out)


if __name__ == "__main__":
    main()
