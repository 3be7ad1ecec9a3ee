"""Prompt cache: the share of input tokens read from cache over a 20-turn run.

A real ``run()`` of one agent through the real :class:`AnthropicModel` (the official SDK, over
HTTP) against the local fake Messages API (``tests/support/fake_messages_server.py``), whose
simulated prompt cache follows the API's rules (prefix hashing at ``cache_control`` breakpoints,
at most 4, 20-block lookback). The model asks for one ``search`` per turn (600-character
results) and answers at turn 20. Reported from the run's own ``Usage`` (input counts cached
tokens too, as the GenAI conventions do) and cross-checked against what the server billed:
cache reads / all input, over all turns and over turns 2..20 (turn 1 can only write).

Scenarios: ``narrow`` (one call per turn), ``wide`` (four parallel calls per turn: more blocks
per turn than the lookback covers in a few turns), and ``narrow_min1024`` (the server only
caches prefixes of at least 1,024 tokens, like the API's minimum for most models).

Usage: ``python tests/benchmarks/bench_cache.py [--smoke] [--turns 20]``.
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
from orchestrator.models.anthropic import DEFAULT_MODEL, AnthropicModel  # noqa: E402

API_KEY = "bench-key-not-secret-0000"
SYSTEM = (
    "You are a careful research assistant. Search the corpus, read what matters, cite what "
    "you use, and answer in a few paragraphs. "
) * 25  # ~3,000 characters, like a real system prompt
RESULT_CHARS = 600


@tool
async def search(query: str, limit: int = 5) -> str:
    """Search the corpus.

    Args:
        query: what to look for
        limit: how many hits
    """
    head = f"{limit} hits for {query!r}: "
    return (
        head
        + ("structured concurrency keeps tasks in nurseries; " * 20)[: RESULT_CHARS - len(head)]
    )


def responder(turns: int, calls_per_turn: int) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if n + 1 >= turns:
            return text("Final answer: trio nurseries.")
        calls = tuple(
            {
                "type": "tool_use",
                "id": f"toolu_{n:03d}_{i}",
                "name": "search",
                "input": {"query": f"question {n}.{i}", "limit": 5},
            }
            for i in range(calls_per_turn)
        )
        return ServerMessage(
            ({"type": "text", "text": f"Looking up part {n}."}, *calls), stop_reason="tool_use"
        )

    return respond


def scenario(name: str, turns: int, calls_per_turn: int, min_tokens: int) -> dict[str, Any]:
    with FakeMessagesServer(
        responder=responder(turns, calls_per_turn), min_cacheable_tokens=min_tokens
    ) as server:
        model = AnthropicModel(DEFAULT_MODEL, api_key=API_KEY, base_url=server.url, max_retries=0)
        agent = Agent("researcher", SYSTEM, model=model, tools=[search])
        started = time.perf_counter()
        result = trio.run(
            lambda: run(
                agent,
                "Survey structured concurrency in Python.",
                limits=Limits(max_turns=turns + 1, repeat_limit=turns + 1),
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

    later = billed[1:]
    server_total = sum(total(x) for x in billed)
    if server_total != u.input_tokens:
        raise RuntimeError(
            f"usage mismatch: run says {u.input_tokens}, server billed {server_total}"
        )
    later_total = sum(total(x) for x in later)
    return {
        "scenario": name,
        "turns": turns,
        "calls_per_turn": calls_per_turn,
        "min_cacheable_tokens": min_tokens,
        "input_tokens": u.input_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "uncached_input_tokens": u.input_tokens - u.cache_read_tokens - u.cache_write_tokens,
        "cache_read_share": u.cache_read_tokens / u.input_tokens,
        "cache_read_share_after_turn_1": (
            sum(x["cache_read_input_tokens"] for x in later) / later_total if later_total else None
        ),
        "worst_turn_read_share_after_turn_1": (
            min(x["cache_read_input_tokens"] / total(x) for x in later) if later else None
        ),
        "cost_usd": u.cost_usd,
        "cost_usd_without_cache": model.cost(type(u)(u.input_tokens, u.output_tokens)),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="5 turns (CI)")
    ap.add_argument("--turns", type=int, default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    import anthropic  # noqa: F401  # the SDK import (seconds on a busy machine) is not a run's cost

    sdk_import_s = time.perf_counter() - started
    turns = args.turns or (5 if args.smoke else 20)
    rows = [
        scenario("narrow", turns, 1, 0),
        scenario("wide", turns, 4, 0),
        scenario("narrow_min1024", turns, 1, 1024),
    ]
    elapsed = time.perf_counter() - started
    out = {
        "benchmark": "cache",
        "smoke": args.smoke,
        "model": DEFAULT_MODEL,
        "machine": machine(),
        "elapsed_s": round(elapsed, 1),
        "sdk_import_s": round(sdk_import_s, 2),
        "rows": rows,
    }
    headers = [
        "scenario",
        "turns",
        "input tok",
        "read",
        "written",
        "read share",
        "share t2+",
        "worst t2+",
        "cost $",
        "no-cache $",
    ]
    body = [
        [
            r["scenario"],
            r["turns"],
            r["input_tokens"],
            r["cache_read_tokens"],
            r["cache_write_tokens"],
            f"{r['cache_read_share']:.1%}",
            f"{r['cache_read_share_after_turn_1']:.1%}",
            f"{r['worst_turn_read_share_after_turn_1']:.1%}",
            f"{r['cost_usd']:.4f}",
            f"{r['cost_usd_without_cache']:.4f}",
        ]
        for r in rows
    ]
    emit(
        out,
        "\n".join(
            [
                "prompt cache: a run through AnthropicModel against the fake Messages API",
                table(headers, body),
                f"  ({elapsed:.1f}s)",
            ]
        ),
    )


if __name__ == "__main__":
    main()
