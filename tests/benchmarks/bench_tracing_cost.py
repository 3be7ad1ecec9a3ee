"""What tracing costs per model call, in CPU, on a wide tree with a zero-latency model.

The root's first turn spawns N workers in one response; each worker makes K turns that call a
trivial async tool, then answers; the root then answers. The model is a FunctionModel that
returns at once (no sleep, plausible usage), so nearly all CPU is the runtime's own, and the
difference between the configurations is what instrumentation adds:

- ``none``: no tracer provider passed and no global one configured: OpenTelemetry's no-op
  tracer (what a program that never configures tracing pays);
- ``sdk``: a program's own SDK ``TracerProvider`` with a ``BatchSpanProcessor`` over an
  ``InMemorySpanExporter`` (span creation, attributes, the queue and the export thread; no
  network or encoding);
- ``file``: what the CLI does by default: ``configure_tracing(run_file=..., keep_file=True)``,
  an OTLP/JSON lines trace file (the encoding and the writes count);
- ``otlp``: what the CLI does with an endpoint: OTLP/HTTP (protobuf) to a real receiver in
  another process (its decoding is not ours, so it does not count), and the trace file kept too;
- ``file+content``: the trace file with message content capture on
  (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: transcripts JSON-encoded and
  redacted on every chat span).

CPU is ``time.process_time()`` (user+sys of every thread, so the export threads count) from
the start of ``run()`` to the end of a ``force_flush()``, divided by the model calls
(2 + N·(K+1)). Every traced configuration's spans are counted where they arrived (the
exporter's memory, the file, the receiver) and must be all of them. Configurations alternate
within each repetition; medians are reported, and each configuration's ratio to ``none``.

Usage: ``python tests/benchmarks/bench_tracing_cost.py [--smoke] [--n 1000] [--k 3] [--reps 5]``.
Prints one JSON object on stdout and a small table on stderr.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import subprocess
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

CONFIGS = ("none", "sdk", "file", "otlp", "file+content")
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


def limits_for(n: int, k: int) -> Limits:
    """Limits the workload never hits: every child at once, K tool turns each."""
    return Limits(
        max_children=max(n, 1),
        max_agents=n + 1,
        max_concurrency=n + 1,
        token_budget=10**12,
        max_turns=k + 2,
    )


def expected_calls(n: int, k: int) -> int:
    return 2 + n * (k + 1)


def expected_spans(n: int, k: int) -> int:
    # root: invoke + 2 turns + 2 chats + n spawn tools; worker: invoke + (k+1)(turn + chat) + k tools
    return 5 + n + n * (1 + 2 * (k + 1) + k)


class Receiver:
    """The real OTLP receiver of tests/support, in a process of its own: its decoding is the
    collector's CPU, not the run's. It answers ``count`` on stdin with the spans it holds."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--receiver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.endpoint = self.proc.stdout.readline().strip()

    def _ask(self, what: str) -> int:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"{what}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def count(self) -> int:
        """How many spans the receiver holds."""
        return self._ask("count")

    def clear(self) -> None:
        """Forget the spans received so far (between runs)."""
        self._ask("clear")

    def wait_for(self, spans: int, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while (got := self.count()) < spans and time.monotonic() < deadline:
            time.sleep(0.05)
        return got

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def serve_receiver() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as receiver:
        print(receiver.http_endpoint, flush=True)
        for line in sys.stdin:
            if line.strip() == "count":
                print(len(receiver.spans), flush=True)
            else:
                receiver.clear()
                print(0, flush=True)


def setup_for(config: str, folder: Path, receiver: Receiver | None) -> tuple[Any, Any]:
    """(the provider to pass to ``run()``, what to flush and read back) for ``config``."""
    if config == "none":
        return None, None
    if config == "sdk":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=SPAN_QUEUE, max_export_batch_size=2048)
        )
        return provider, exporter
    from orchestrator.tracing import configure_tracing

    # as the CLI does (keep_file=True), except set_global=False: `none` must stay untraced
    setup = configure_tracing(
        run_file=folder / f"{config}.jsonl",
        endpoint=receiver.endpoint if config == "otlp" and receiver else None,
        keep_file=True,
        set_global=False,
    )
    return setup.tracer_provider, setup


def spans_arrived(
    config: str, provider: Any, handle: Any, receiver: Receiver | None, expected: int
) -> int:
    if config == "sdk":
        provider.shutdown()
        return len(handle.get_finished_spans())
    from orchestrator.tracing.tracefiles import load_trace

    handle.shutdown()
    if handle.dropped_spans or handle.failed_spans:
        raise RuntimeError(
            f"{config}: {handle.dropped_spans} dropped, {handle.failed_spans} failed"
        )
    in_file = len(load_trace(handle.trace_file))
    if config == "otlp":
        assert receiver is not None
        received = receiver.wait_for(expected)
        if received != in_file:
            raise RuntimeError(f"otlp: {received} spans received, {in_file} in the file")
    return in_file


def one_run(config: str, n: int, k: int, receiver: Receiver | None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp())
    if config == "file+content":
        os.environ[CAPTURE] = "true"
    else:
        os.environ.pop(CAPTURE, None)
    provider, handle = setup_for(config, folder, receiver)
    counter = [0]
    model = make_model(n, k, counter)
    limits = limits_for(n, k)

    async def main() -> Any:
        return await run(
            ROOT, "Look up every batch.", model=model, limits=limits, tracer_provider=provider
        )

    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    result = trio.run(main)
    if provider is not None:
        (provider if config == "sdk" else handle).force_flush()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    os.environ.pop(CAPTURE, None)

    completed = sum(1 for c in result.children if c.status.value == "completed")
    if result.status.value != "completed" or completed != n:
        raise RuntimeError(f"{config}: run failed: {result.status} {result.error}; {completed}/{n}")
    if counter[0] != expected_calls(n, k):
        raise RuntimeError(f"{config}: {counter[0]} model calls, expected {expected_calls(n, k)}")
    spans = None
    if handle is not None:
        spans = spans_arrived(config, provider, handle, receiver, expected_spans(n, k))
        if spans != expected_spans(n, k):
            raise RuntimeError(f"{config}: {spans} spans arrived, expected {expected_spans(n, k)}")
    shutil.rmtree(folder)
    if receiver is not None and config == "otlp":
        receiver.clear()
    return {"cpu_s": cpu, "wall_s": wall, "calls": counter[0], "spans": spans}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="N=10, one repetition (for CI)")
    ap.add_argument("--n", type=int, default=1000, help="workers (default 1000)")
    ap.add_argument("--k", type=int, default=3, help="tool turns per worker (default 3)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per configuration")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    ap.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.receiver:
        serve_receiver()
        return
    n, k, reps = (10, args.k, 1) if args.smoke else (args.n, args.k, args.reps)
    configs = tuple(c for c in args.configs.split(",") if c)
    if "none" not in configs or set(configs) - set(CONFIGS):
        raise SystemExit(f"--configs: a subset of {','.join(CONFIGS)} that includes none")

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        raise RuntimeError("a global SDK provider is set: 'none' would not be the no-op path")
    os.environ.pop(CAPTURE, None)
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)

    receiver = Receiver() if "otlp" in configs else None
    started = time.perf_counter()
    try:
        for config in configs:  # warm-up: imports, caches, first-call costs
            one_run(config, 2, k, receiver)
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for rep in range(reps):
            order = configs if rep % 2 == 0 else tuple(reversed(configs))
            for config in order:
                runs[config].append(one_run(config, n, k, receiver))
    finally:
        if receiver is not None:
            receiver.close()

    calls = expected_calls(n, k)
    spans = expected_spans(n, k)
    per_call = {c: median([r["cpu_s"] for r in runs[c]]) / calls * 1e6 for c in configs}
    # each repetition's ratio (configurations of one repetition ran side by side), then medians
    ratios = {
        c: median([r["cpu_s"] / u["cpu_s"] for r, u in zip(runs[c], runs["none"], strict=True)])
        for c in configs
    }
    wall = {c: median([r["wall_s"] for r in runs[c]]) for c in configs}
    result = {
        "benchmark": "tracing_cost",
        "workload": {"n": n, "k": k, "model_latency_s": 0.0},
        "reps": reps,
        "model_calls_per_run": calls,
        "spans_per_run": spans,
        "spans_per_model_call": round(spans / calls, 3),
        "cpu_us_per_model_call": {c: round(v, 2) for c, v in per_call.items()},
        "ratio_to_none": {c: round(v, 3) for c, v in ratios.items()},
        "cpu_s_per_rep": {c: [round(r["cpu_s"], 4) for r in runs[c]] for c in configs},
        "wall_median_s": {c: round(v, 4) for c, v in wall.items()},
        "machine": machine(),
        "elapsed_s": round(time.perf_counter() - started, 2),
    }
    rows = [
        [c, per_call[c], per_call[c] - per_call["none"], ratios[c], wall[c] * 1000] for c in configs
    ]
    text_out = "\n".join(
        [
            f"tracing cost: fanout N={n}, K={k}, zero-latency model; {calls} model calls, "
            f"{spans} spans per run, {reps} interleaved repetitions",
            table(["config", "CPU us/call", "+ over none", "x none", "wall ms"], rows),
        ]
    )
    emit(result, text_out)


if __name__ == "__main__":
    main()
