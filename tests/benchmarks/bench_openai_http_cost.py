"""What a real Chat Completions call costs the client, beside the Anthropic adapter's figure.

The same measurement as ``bench_http_cost.py``, for :class:`OpenAIModel` against the local fake
Chat Completions server (``tests/support/fake_chat_server.py``), with the Anthropic adapter
measured in the same process against the fake Messages API, alternating, so both figures see
the same machine. Client-side CPU is ``time.thread_time()`` of the thread running trio (the fake
servers answer from their own threads):

- ``run_ms``: one whole one-turn run (opening the run's client, one call, closing it), median
  after a warm-up;
- ``http_us_per_call``: an agent of T turns, one 600-character tool result per turn, streamed;
- ``whole_us_per_call``: the same agent asked without streaming (as for llama.cpp's server when
  tools may be called);
- ``anthropic_us_per_call``: the Anthropic adapter on the same agent and replies.

Usage: ``python tests/benchmarks/bench_openai_http_cost.py [--smoke] [--turns 40] [--reps 9]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # for tests/support
from _common import emit, machine, median, table  # noqa: E402
from bench_cache import API_KEY, SYSTEM, search  # noqa: E402
from bench_cache import responder as messages_responder  # noqa: E402
from bench_http_cost import client_cpu_s  # noqa: E402
from support.fake_chat_server import FakeChatServer, Reply, text, tool_calls  # noqa: E402
from support.fake_messages_server import FakeMessagesServer  # noqa: E402

from orchestrator import Agent  # noqa: E402
from orchestrator.models.anthropic import DEFAULT_MODEL, AnthropicModel  # noqa: E402
from orchestrator.models.openai import OpenAIModel  # noqa: E402

MODEL = "gpt-4.1-mini"


def chat_responder(turns: int) -> Any:
    """The bench_cache agent's replies, in Chat Completions form."""

    def respond(body: dict[str, Any]) -> Reply:
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if n + 1 >= turns:
            return text("Final answer: trio nurseries.")
        return tool_calls(
            ("search", {"query": f"question {n}.0", "limit": 5}),
            ids=[f"call_{n:03d}_0"],
            content=f"Looking up part {n}.",
        )

    return respond


def measure(turns: int, reps: int) -> dict[str, Any]:
    with (
        FakeChatServer(responder=chat_responder(1)) as chat,
        FakeMessagesServer(responder=messages_responder(1, 1)) as messages,
    ):
        openai_model = OpenAIModel(MODEL, api_key=API_KEY, base_url=chat.url, max_retries=0)
        whole_model = OpenAIModel(
            MODEL, api_key=API_KEY, base_url=chat.url, max_retries=0, stream=False
        )
        claude = AnthropicModel(
            DEFAULT_MODEL, api_key=API_KEY, base_url=messages.url, max_retries=0
        )
        one_turn = Agent("brief", "Answer briefly.", model=openai_model)
        cold_run_s = client_cpu_s(one_turn, 1)  # first use: the SDK's lazy imports and caches
        client_cpu_s(Agent("brief", "Answer briefly.", model=claude), 1)
        runs = [client_cpu_s(one_turn, 1) for _ in range(reps)]
        chat.responder = chat_responder(turns)
        messages.responder = messages_responder(turns, 1)
        agents = {
            "streamed": Agent("researcher", SYSTEM, model=openai_model, tools=[search]),
            "whole": Agent("researcher", SYSTEM, model=whole_model, tools=[search]),
            "anthropic": Agent("researcher", SYSTEM, model=claude, tools=[search]),
        }
        per_call: dict[str, list[float]] = {k: [] for k in agents}
        for _ in range(max(reps // 2, 1)):  # alternating, so drifting load hits all three
            for key, agent in agents.items():
                per_call[key].append(client_cpu_s(agent, turns) / turns)
        problems = chat.errors + messages.errors
        if problems:
            raise RuntimeError(f"fake server problems: {problems}")
    streamed, whole, anthropic = (median(per_call[k]) * 1e6 for k in agents)
    return {
        "turns": turns,
        "cold_run_ms": cold_run_s * 1e3,
        "run_ms": median(runs) * 1e3,
        "http_us_per_call": streamed,
        "whole_us_per_call": whole,
        "anthropic_us_per_call": anthropic,
        "openai_over_anthropic": streamed / anthropic,
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
    import anthropic  # noqa: F401  # the SDK imports (seconds on a busy machine) are not a run's
    import openai  # noqa: F401

    row = measure(args.turns or (5 if args.smoke else 40), args.reps or (2 if args.smoke else 9))
    elapsed = time.perf_counter() - started
    out = {
        "benchmark": "openai_http_cost",
        "smoke": args.smoke,
        "model": MODEL,
        "machine": machine(),
        "elapsed_s": round(elapsed, 1),
        **row,
    }
    headers = ["turns", "cold run ms", "run ms", "streamed µs/call", "whole µs/call", "anthropic"]
    body = [
        [
            row["turns"],
            f"{row['cold_run_ms']:.0f}",
            f"{row['run_ms']:.1f}",
            f"{row['http_us_per_call']:.0f}",
            f"{row['whole_us_per_call']:.0f}",
            f"{row['anthropic_us_per_call']:.0f}",
        ]
    ]
    emit(
        out,
        "\n".join(
            [
                "client CPU of real calls: OpenAIModel over HTTP, AnthropicModel beside it",
                table(headers, body),
                f"  ({elapsed:.1f}s)",
            ]
        ),
    )


if __name__ == "__main__":
    main()
