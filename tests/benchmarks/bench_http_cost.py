"""What a real model call costs the client, and how much of that is the runtime's own.

The fan-out benchmark prices the runtime against a model that costs nothing. A real call goes
through the official SDK over HTTP: request building, the HTTP client, the SSE stream, the
adapter's parsing. This measures, in client-side CPU (``time.thread_time()`` of the thread
running trio; the fake Messages API answers from its own threads):

- ``run_ms``: one whole one-turn run through :class:`AnthropicModel` (opening the run's client,
  one call, closing it), median over the repetitions after a warm-up;
- ``http_us_per_call``: an agent of T turns, one 600-character tool result per turn (the
  ``bench_cache.py`` agent), through :class:`AnthropicModel`;
- ``runtime_us_per_call``: the same agent and transcript through a :class:`FunctionModel` that
  returns the same replies at once: what the runtime itself spends per call;
- ``runtime_share``: the second as a share of the first.

Usage: ``python tests/benchmarks/bench_http_cost.py [--smoke] [--turns 40] [--reps 7]``.
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
from _common import emit, machine, median, table  # noqa: E402
from bench_cache import API_KEY, SYSTEM, responder, search  # noqa: E402
from support.fake_messages_server import FakeMessagesServer  # noqa: E402

from orchestrator import Agent, Limits, Usage, run  # noqa: E402
from orchestrator.models import FunctionModel, response, text, tool_call  # noqa: E402
from orchestrator.models.anthropic import DEFAULT_MODEL, AnthropicModel  # noqa: E402


def client_cpu_s(agent: Agent, turns: int) -> float:
    """Client CPU of one run of ``agent`` that must end after ``turns`` model calls."""
    box: dict[str, Any] = {}

    async def main() -> None:
        started = time.thread_time()
        result = await run(
            agent, "Survey.", limits=Limits(max_turns=turns + 1, repeat_limit=turns + 1)
        )
        box["cpu"] = time.thread_time() - started
        if result.status.value != "completed" or result.turns != turns:
            raise RuntimeError(f"run ended {result.status} after {result.turns}: {result.error}")

    trio.run(main)
    return float(box["cpu"])


def scripted_twin(turns: int) -> FunctionModel:
    """The replies the fake server gives the bench_cache agent, at once and in-process."""

    async def answer(request: Any) -> Any:
        n = request.turn_index()
        if n + 1 >= turns:
            return response(text("Final answer: trio nurseries."), usage=Usage(1000, 20))
        return response(
            text(f"Looking up part {n}."),
            tool_call("search", {"query": f"question {n}.0", "limit": 5}, id=f"toolu_{n:03d}_0"),
            usage=Usage(1000, 40),
        )

    return FunctionModel(answer, name="twin")


def measure(turns: int, reps: int) -> dict[str, Any]:
    with FakeMessagesServer(responder=responder(1, 1)) as server:
        model = AnthropicModel(DEFAULT_MODEL, api_key=API_KEY, base_url=server.url, max_retries=0)
        one_turn = Agent("brief", "Answer briefly.", model=model)
        agent = Agent("researcher", SYSTEM, model=model, tools=[search])
        cold_run_s = client_cpu_s(one_turn, 1)  # first use: the SDK's lazy imports and caches
        runs = [client_cpu_s(one_turn, 1) for _ in range(reps)]
        server.responder = responder(turns, 1)
        http = [client_cpu_s(agent, turns) / turns for _ in range(max(reps // 2, 1))]
        if server.errors:
            raise RuntimeError(f"fake server problems: {server.errors}")
    twin = Agent("researcher", SYSTEM, model=scripted_twin(turns), tools=[search])
    client_cpu_s(twin, turns)  # warm-up
    own = [client_cpu_s(twin, turns) / turns for _ in range(max(reps // 2, 1))]
    http_us, own_us = median(http) * 1e6, median(own) * 1e6
    return {
        "turns": turns,
        "cold_run_ms": cold_run_s * 1e3,
        "run_ms": median(runs) * 1e3,
        "http_us_per_call": http_us,
        "runtime_us_per_call": own_us,
        "runtime_share": own_us / http_us,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="5 turns, 2 repetitions (CI)")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    import anthropic  # noqa: F401  # the SDK import (seconds on a busy machine) is not a run's cost

    row = measure(args.turns or (5 if args.smoke else 40), args.reps or (2 if args.smoke else 9))
    elapsed = time.perf_counter() - started
    out = {
        "benchmark": "http_cost",
        "smoke": args.smoke,
        "model": DEFAULT_MODEL,
        "machine": machine(),
        "elapsed_s": round(elapsed, 1),
        **row,
    }
    headers = ["turns", "cold run ms", "run ms", "HTTP µs/call", "runtime µs/call", "share"]
    body = [
        [
            row["turns"],
            f"{row['cold_run_ms']:.0f}",
            f"{row['run_ms']:.1f}",
            f"{row['http_us_per_call']:.0f}",
            f"{row['runtime_us_per_call']:.0f}",
            f"{row['runtime_share']:.1%}",
        ]
    ]
    emit(
        out,
        "\n".join(
            [
                "client CPU of real calls (AnthropicModel over HTTP) and the runtime's part of it",
                table(headers, body),
                f"  ({elapsed:.1f}s)",
            ]
        ),
    )


if __name__ == "__main__":
    main()
