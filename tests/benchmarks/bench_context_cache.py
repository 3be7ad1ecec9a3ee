"""Clearing old tool results vs the prompt cache: what clearing saves and what it breaks.

A real ``run()`` of one agent through the real :class:`AnthropicModel` (the official SDK, over
HTTP) against the local fake Messages API (``tests/support/fake_messages_server.py``), whose
simulated prompt cache follows the API's rules (prefix hashing at ``cache_control`` breakpoints,
at most 4, 20-block lookback). The model reads one 2 KB document per turn and answers at the
last turn. Clearing a result changes the transcript at that result, so every cached prefix
that runs past it is lost: the next request writes everything after the change again.

Scenarios: ``off`` (no clearing), ``after5_batch1`` (``clear_results_after=5, clear_batch=1``:
one result cleared per turn, one cache break per turn) and ``after5_batch8`` (the same, but
eight results at once: one break every eight turns). Reported from the run's own ``Usage``
(input counts cached tokens too, as the GenAI conventions do), cross-checked against what the
server billed: total input tokens, the share read from cache, the share written, the cost at
the model's prices, and the turns on which results were cleared (``RunResult.turn_log``).

Usage: ``python tests/benchmarks/bench_context_cache.py [--smoke] [--turns 30]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # for tests/support
from _common import emit, machine, table  # noqa: E402
from support.fake_messages_server import FakeMessagesServer, Reply, text  # noqa: E402
from support.fake_messages_server import Message as ServerMessage  # noqa: E402

from orchestrator import Agent, Limits, run, tool  # noqa: E402
from orchestrator.core.compaction import ContextPolicy  # noqa: E402
from orchestrator.models.anthropic import DEFAULT_MODEL, AnthropicModel  # noqa: E402

API_KEY = "bench-key-not-secret-0000"
SYSTEM = (
    "You are a careful research assistant. Read the documents you are pointed to, keep what "
    "matters, cite what you use, and answer in a few paragraphs. "
) * 20  # ~3,000 characters, like a real system prompt
RESULT_CHARS = 2_048

SCENARIOS: dict[str, ContextPolicy | None] = {
    "off": None,
    "after5_batch1": ContextPolicy(clear_results_after=5, clear_batch=1, compact_at_fraction=None),
    "after5_batch8": ContextPolicy(clear_results_after=5, clear_batch=8, compact_at_fraction=None),
}


@tool
async def read(doc: int) -> str:
    """Read one document.

    Args:
        doc: the document's number
    """
    head = f"document {doc}: "
    body = "structured concurrency keeps every task inside a nursery; " * 40
    return (head + body)[:RESULT_CHARS]


def responder(turns: int) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if n + 1 >= turns:
            return text("Final answer: nurseries keep tasks structured.")
        return ServerMessage(
            (
                {"type": "text", "text": f"Reading document {n + 1}."},
                {
                    "type": "tool_use",
                    "id": f"toolu_{n:03d}",
                    "name": "read",
                    "input": {"doc": n + 1},
                },
            ),
            stop_reason="tool_use",
        )

    return respond


def scenario(name: str, policy: ContextPolicy | None, turns: int) -> dict[str, Any]:
    with FakeMessagesServer(responder=responder(turns)) as server:
        model = AnthropicModel(DEFAULT_MODEL, api_key=API_KEY, base_url=server.url, max_retries=0)
        agent = Agent("reader", SYSTEM, model=model, tools=[read])
        started = time.perf_counter()
        result = trio.run(
            lambda: run(
                agent,
                "Read documents 1 onwards and summarize them.",
                limits=Limits(max_turns=turns + 1, repeat_limit=turns + 1),
                context=policy,
            )
        )
        wall = time.perf_counter() - started
        if server.errors:
            raise RuntimeError(f"fake server problems: {server.errors}")
        billed = [r.usage for r in server.requests if r.usage]
    if result.status.value != "completed" or result.turns != turns:
        raise RuntimeError(f"run ended {result.status} after {result.turns} turns: {result.error}")
    u = result.usage

    def total(x: dict[str, int]) -> int:
        return x["input_tokens"] + x["cache_read_input_tokens"] + x["cache_creation_input_tokens"]

    if sum(total(x) for x in billed) != u.input_tokens:
        raise RuntimeError("usage mismatch between the run and the server")
    later = billed[1:]
    later_total = sum(total(x) for x in later)
    clearings = [t.turn for t in result.turn_log if t.cleared_results]
    return {
        "scenario": name,
        "turns": turns,
        "clear_results_after": policy.clear_results_after if policy else None,
        "clear_batch": policy.clear_batch if policy and policy.clear_results_after else None,
        "input_tokens": u.input_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "uncached_input_tokens": u.input_tokens - u.cache_read_tokens - u.cache_write_tokens,
        "cache_read_share": u.cache_read_tokens / u.input_tokens,
        "cache_write_share": u.cache_write_tokens / u.input_tokens,
        "cache_read_share_after_turn_1": (
            sum(x["cache_read_input_tokens"] for x in later) / later_total if later_total else None
        ),
        "last_turn_input_tokens": total(billed[-1]),
        "clearing_turns": clearings,
        "results_cleared": sum(t.cleared_results for t in result.turn_log),
        "cost_usd": u.cost_usd,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="16 turns (CI)")
    ap.add_argument("--turns", type=int, default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    turns = args.turns or (16 if args.smoke else 30)
    rows = [scenario(name, policy, turns) for name, policy in SCENARIOS.items()]
    elapsed = time.perf_counter() - started
    out = {
        "benchmark": "context_cache",
        "smoke": args.smoke,
        "model": DEFAULT_MODEL,
        "result_chars": RESULT_CHARS,
        "machine": machine(),
        "elapsed_s": round(elapsed, 1),
        "rows": rows,
    }
    headers = [
        "scenario",
        "turns",
        "input tok",
        "read",
        "written",
        "read share",
        "write share",
        "last turn",
        "clearings",
        "cost $",
    ]
    body = [
        [
            r["scenario"],
            r["turns"],
            r["input_tokens"],
            r["cache_read_tokens"],
            r["cache_write_tokens"],
            f"{r['cache_read_share']:.1%}",
            f"{r['cache_write_share']:.1%}",
            r["last_turn_input_tokens"],
            len(r["clearing_turns"]),
            f"{r['cost_usd']:.4f}",
        ]
        for r in rows
    ]
    emit(
        out,
        "\n".join(
            [
                "clearing vs the prompt cache: AnthropicModel against the fake Messages API",
                table(headers, body),
                f"  ({elapsed:.1f}s)",
            ]
        ),
    )


if __name__ == "__main__":
    main()
