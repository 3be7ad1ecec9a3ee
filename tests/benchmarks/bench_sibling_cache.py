"""Siblings share the cache: a lead spawning N researchers of one definition, before and after.

A real ``run()`` through the real :class:`AnthropicModel` (the official SDK, over HTTP) against
the local fake Messages API, whose prompt cache is the realistic one (a request's reads and
writes decided when it arrives, an entry readable once the writing response starts) and which
takes ``--ttft`` seconds to each first token. The lead spawns ``--n`` researchers in one turn;
each researcher's system prompt is a shared prefix of about ``--prefix`` tokens; each answers at
once. "before" is the same tree with the model's ``prompt_caching`` declared False (no sibling
waits, as before issue 36); "after" declares it (the Anthropic adapter's default).

Reported, per variant (medians over ``--pairs`` interleaved before/after pairs, and the spread
of "before" against itself): the cache-write tokens of the siblings' first calls (sum, and as a
multiple of the prefix), the whole tree's cost (the price table's cache rates), and the
fan-out's wall time (the lead's spawn turn: from its first spawn's start to the last child's
end, from the run's events).

Usage: ``python tests/benchmarks/bench_sibling_cache.py [--smoke] [--n 8] [--prefix 4000]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # for tests/support
from _common import emit, machine, median, table  # noqa: E402
from support.fake_messages_server import FakeMessagesServer, text  # noqa: E402
from support.fake_messages_server import Message as ServerMessage  # noqa: E402

from orchestrator import Agent, open_run  # noqa: E402
from orchestrator.core.events import AgentFinished, AgentStarted  # noqa: E402
from orchestrator.models.anthropic import AnthropicModel  # noqa: E402

API_KEY = "bench-key-not-secret-0000"
LEAD = "You lead a research team. Split the question and spawn one researcher per part."


def responder(n: int) -> Any:
    def answer(body: dict[str, Any]) -> ServerMessage:
        system = "".join(block["text"] for block in body["system"])
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if system == LEAD and turn == 0:
            calls = tuple(
                {
                    "type": "tool_use",
                    "id": f"toolu_spawn_{i}",
                    "name": "spawn_subagent",
                    "input": {"agent": "researcher", "task": f"part {i} of the question"},
                }
                for i in range(n)
            )
            return ServerMessage(calls, stop_reason="tool_use")
        return text("done" if system == LEAD else "the part's answer, with a citation")

    return answer


async def one_run(n: int, prefix_tokens: int, ttft: float, caching: bool) -> dict[str, float]:
    shared = "You research one part of a question, thoroughly, and cite what you find. "
    prompt = (shared * (prefix_tokens * 4 // len(shared) + 1))[: prefix_tokens * 4]
    with FakeMessagesServer(responder=responder(n), time_to_first_token=ttft) as server:
        model = AnthropicModel("claude-sonnet-5-5", api_key=API_KEY, base_url=server.url)
        model.prompt_caching = caching  # type: ignore[misc]
        lead = Agent("lead", LEAD, subagents=[Agent("researcher", prompt)], model=model)
        starts: list[float] = []
        ends: list[float] = []
        async with open_run(lead, "q") as handle:
            async for event in handle.events:
                if isinstance(event, AgentStarted) and event.depth == 1:
                    starts.append(time.perf_counter())
                elif isinstance(event, AgentFinished) and event.path.count("/") == 1:
                    ends.append(time.perf_counter())
            result = await handle.result()
        firsts = [
            r
            for r in server.requests
            if r.json is not None
            and "".join(b["text"] for b in r.json["system"]) != LEAD
            and not any(m["role"] == "assistant" for m in r.json["messages"])
        ]
    assert result.ok, result.error
    assert len(firsts) == n, len(firsts)
    writes = sum((r.usage or {}).get("cache_creation_input_tokens", 0) for r in firsts)
    return {
        "first_call_cache_writes": writes,
        "writes_per_prefix": writes / prefix_tokens,
        "tree_cost_usd": result.usage.cost_usd,
        "fan_out_s": max(ends) - min(starts),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="one quick pair, for CI")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prefix", type=int, default=4000, help="shared prefix, in tokens")
    parser.add_argument("--ttft", type=float, default=0.5, help="the fake's time to first token")
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    if args.smoke:
        args.n, args.prefix, args.ttft, args.pairs = 3, 1000, 0.05, 1
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": [], "before_again": []}
    for i in range(args.pairs):  # interleaved, the order alternating
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        for variant in order:
            runs[variant].append(await one_run(args.n, args.prefix, args.ttft, variant == "after"))
        if not args.smoke:
            runs["before_again"].append(await one_run(args.n, args.prefix, args.ttft, False))
    keys = ["first_call_cache_writes", "writes_per_prefix", "tree_cost_usd", "fan_out_s"]
    summary = {
        variant: {k: median([r[k] for r in rs]) for k in keys} for variant, rs in runs.items() if rs
    }
    spread = None
    if runs["before_again"]:
        a = [r["fan_out_s"] for r in runs["before"]]
        b = [r["fan_out_s"] for r in runs["before_again"]]
        spread = abs(statistics.median(a) - statistics.median(b))
    result = {
        "benchmark": "sibling_cache",
        "n": args.n,
        "prefix_tokens": args.prefix,
        "ttft_s": args.ttft,
        "pairs": args.pairs,
        "machine": machine(),
        "summary": summary,
        "fan_out_before_vs_before_spread_s": spread,
        "runs": runs,
    }
    rows = [[v, *(summary[v][k] for k in keys)] for v in summary]
    emit(result, table(["variant", *keys], rows))


if __name__ == "__main__":
    trio.run(main)
