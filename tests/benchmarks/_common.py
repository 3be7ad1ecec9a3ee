"""Helpers shared by the benchmark scripts: output, statistics, memory, tracer providers.

Every ``bench_*.py`` prints exactly one JSON object on stdout and a short human table on
stderr, so ``python tests/benchmarks/bench_x.py > out.json`` keeps the data clean.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
from collections.abc import Sequence
from typing import Any

# The spans of a 1,000-child fanout (~13,000) must fit: the SDK's default queue (2,048) drops.
SPAN_QUEUE = 65_536


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (``ru_maxrss`` is KB on Linux)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 1024 / 1024


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(load[0], 2),
    }


def traced_provider() -> tuple[Any, Any]:
    """A fresh SDK TracerProvider with a BatchSpanProcessor over an InMemorySpanExporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=SPAN_QUEUE, max_export_batch_size=2048)
    )
    return provider, exporter


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers], *[[fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit(result: dict[str, Any], text: str) -> None:
    """The table on stderr, the one JSON object on stdout."""
    print(text, file=sys.stderr)
    json.dump(result, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    sys.stdout.flush()
