"""What tracing costs per model call, in CPU, on a wide tree with a zero-latency model.

The root's first turn spawns N workers in one response; each worker makes K turns that call a
trivial async tool, then answers; the root then answers. The model is a FunctionModel that
returns at once (no sleep, plausible usage), so nearly all CPU is the runtime's own, and the
difference between the configurations is what instrumentation adds:

- ``none``: no tracer provider passed and no global one configured: OpenTelemetry's no-op
  tracer (what a program that never configures tracing pays);
- ``sdk``: an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` over an
  ``InMemorySpanExporter`` (span creation, attributes, the queue and the export thread; no
  network or encoding);
- ``sdk+content``: the same with message content capture on
  (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: transcripts JSON-encoded and
  redacted on every chat span).
- ``sdk+file``: the SDK writing an OTLP/JSON lines trace file through
  ``OtlpJsonLinesExporter`` (what the CLI does by default; the encoding counts)

CPU is ``time.process_time()`` (user+sys of every thread, so the export thread counts) from
the start of ``run()`` to the end of a ``force_flush()``, divided by the model calls
(2 + N·(K+1)). Configurations alternate within each repetition; the median is reported.

Usage: ``python tests/benchmarks/bench_tracing_cost.py [--smoke] [--n 200] [--k 3] [--reps 7]``.
Prints one JSON object on stdout and a small table on stderr.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SPAN_QUEUE, emit, machine, median, table

from orchestrator import Agent, Limits, Usage, run, tool
from orchestrator.models import FunctionModel, response, text, tool_call

CONFIGS = ("none", "sdk", "sdk+content", "sdk+file")
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@tool
async def lookup(i: int) -> str:
    """Look up item ``i``.

    Args:
        i: which item
    """
    return f"value-{i}"


WORKER = Agent(
    "worker",
    "You look things up and answer briefly.",
    description="Looks up items and reports.",
    tools=[lookup],
)
ROOT = Agent("root", "You split the work among workers.", subagents=[WORKER])
_ANSWER = (text("All items looked up."),)


def make_model(n: int, k: int, counter: list[int]) -> FunctionModel:
    spawns = tuple(
        tool_call(
            "spawn_subagent", {"agent": "worker", "task": f"Look up batch {j}."}, id=f"toolu_s{j}"
        )
        for j in range(n)
    )
    child_calls = [(tool_call("lookup", {"i": t}, id=f"toolu_{t:02d}"),) for t in range(k)]

    def answer(request: Any) -> Any:
        counter[0] += 1
        usage_in = request.input_tokens_estimate
        if request.agent.depth == 0:
            if len(request.messages) == 1:
                return response(*spawns, usage=Usage(usage_in, 30 * n + 10, usage_in // 2, 5))
            return response(*_ANSWER, usage=Usage(usage_in, 40, usage_in // 2, 0))
        turn = (len(request.messages) - 1) // 2
        if turn < k:
            return response(*child_calls[turn], usage=Usage(usage_in, 25, usage_in // 2, 0))
        return response(*_ANSWER, usage=Usage(usage_in, 40, usage_in // 2, 0))

    return FunctionModel(answer, name="bench-fn")


def expected_calls(n: int, k: int) -> int:
    return 2 + n * (k + 1)


def expected_spans(n: int, k: int) -> int:
    # root: invoke + 2 turns + 2 chats + n spawn tools; worker: invoke + (k+1)(turn + chat) + k tools
    return 5 + n + n * (1 + 2 * (k + 1) + k)


def provider_for(config: str) -> tuple[Any, Any]:
    if config == "none":
        return None, None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter: Any = InMemorySpanExporter()
    if config == "sdk+file":  # what the CLI does by default: an OTLP/JSON lines trace file
        from orchestrator.tracing import OtlpJsonLinesExporter

        exporter = OtlpJsonLinesExporter(Path(tempfile.mkdtemp()) / "trace.jsonl")
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=SPAN_QUEUE, max_export_batch_size=2048)
    )
    return provider, exporter


def one_run(config: str, n: int, k: int) -> dict[str, Any]:
    provider, exporter = provider_for(config)
    if config == "sdk+content":
        os.environ[CAPTURE] = "true"
    else:
        os.environ.pop(CAPTURE, None)
    counter = [0]
    model = make_model(n, k, counter)
    limits = Limits(
        max_children=max(n, 1),
        max_agents=n + 1,
        max_concurrency=n + 1,
        token_budget=10**12,
        max_turns=k + 2,
    )

    async def main() -> Any:
        return await run(
            ROOT, "Look up every batch.", model=model, limits=limits, tracer_provider=provider
        )

    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    result = trio.run(main)
    if provider is not None:
        provider.force_flush()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    os.environ.pop(CAPTURE, None)

    completed = sum(1 for c in result.children if c.status.value == "completed")
    if result.status.value != "completed" or completed != n:
        raise RuntimeError(f"{config}: run failed: {result.status} {result.error}; {completed}/{n}")
    if counter[0] != expected_calls(n, k):
        raise RuntimeError(f"{config}: {counter[0]} model calls, expected {expected_calls(n, k)}")
    spans = None
    if exporter is not None:
        provider.shutdown()
        if hasattr(exporter, "get_finished_spans"):
            spans = len(exporter.get_finished_spans())
        else:
            from orchestrator.tracing.tracefiles import load_trace

            spans = len(load_trace(exporter.path))
            shutil.rmtree(exporter.path.parent)
        if spans != expected_spans(n, k):
            raise RuntimeError(f"{config}: {spans} spans exported, expected {expected_spans(n, k)}")
    return {"cpu_s": cpu, "wall_s": wall, "calls": counter[0], "spans": spans}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="N=10, one repetition (for CI)")
    ap.add_argument("--n", type=int, default=200, help="workers (default 200)")
    ap.add_argument("--k", type=int, default=3, help="tool turns per worker (default 3)")
    ap.add_argument("--reps", type=int, default=7, help="repetitions per configuration")
    args = ap.parse_args()
    n, k, reps = (10, args.k, 1) if args.smoke else (args.n, args.k, args.reps)

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        raise RuntimeError("a global SDK provider is set: 'none' would not be the no-op path")
    os.environ.pop(CAPTURE, None)

    started = time.perf_counter()
    for config in CONFIGS:  # warm-up: imports, caches, first-call costs
        one_run(config, 2, k)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    for rep in range(reps):
        order = CONFIGS if rep % 2 == 0 else tuple(reversed(CONFIGS))
        for config in order:
            runs[config].append(one_run(config, n, k))

    calls = expected_calls(n, k)
    spans = expected_spans(n, k)
    per_call = {c: median([r["cpu_s"] for r in runs[c]]) / calls * 1e6 for c in CONFIGS}
    wall = {c: median([r["wall_s"] for r in runs[c]]) for c in CONFIGS}
    result = {
        "benchmark": "tracing_cost",
        "workload": {"n": n, "k": k, "model_latency_s": 0.0},
        "reps": reps,
        "model_calls_per_run": calls,
        "spans_per_run": spans,
        "spans_per_model_call": round(spans / calls, 3),
        "cpu_us_per_model_call": {c: round(v, 2) for c, v in per_call.items()},
        "tracing_cost_us_per_model_call": round(per_call["sdk"] - per_call["none"], 2),
        "tracing_cost_ratio": round(per_call["sdk"] / per_call["none"], 3),
        "content_capture_extra_us_per_model_call": round(
            per_call["sdk+content"] - per_call["sdk"], 2
        ),
        "cpu_s_per_rep": {c: [round(r["cpu_s"], 4) for r in runs[c]] for c in CONFIGS},
        "wall_median_s": {c: round(v, 4) for c, v in wall.items()},
        "machine": machine(),
        "elapsed_s": round(time.perf_counter() - started, 2),
    }
    rows = [[c, per_call[c], per_call[c] - per_call["none"], wall[c] * 1000, reps] for c in CONFIGS]
    text_out = "\n".join(
        [
            f"tracing cost: fanout N={n}, K={k}, zero-latency model; {calls} model calls, "
            f"{spans} spans per run",
            table(["config", "CPU us/call", "+ over none", "wall ms", "reps"], rows),
        ]
    )
    emit(result, text_out)


if __name__ == "__main__":
    main()
