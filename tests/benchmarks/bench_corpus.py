"""What the default research corpus costs: building its index, reopening it unchanged, a search.

The default corpus is this Python's own documentation (the stdlib's docstrings), indexed into a
fresh SQLite file in a temporary folder:

1. *build*: the first ``Corpus.open`` (every document read, split and indexed);
2. *reopen*: ``Corpus.open`` of the same index with nothing changed (the median of the
   repetitions; the test suite checks only that it re-indexes nothing);
3. *search*: ``Corpus.search`` of a few queries on the reopened corpus (the median).

    python tests/benchmarks/bench_corpus.py [--reps 9]
    python tests/benchmarks/bench_corpus.py --smoke      # one of each (CI keeps it working)

Prints one JSON object on stdout and a short table on stderr (see _common.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, machine, median, table

from orchestrator.research.corpus import Corpus

QUERIES = ("asyncio task cancellation", "json decode error", "pathlib glob", "sqlite3 row")


def measure(reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index.sqlite"
        started = time.perf_counter()
        with Corpus.open(index_path=index) as built:
            build_s = time.perf_counter() - started
            stats = built.last_refresh
        reopens: list[float] = []
        searches: list[float] = []
        for _ in range(reps):
            started = time.perf_counter()
            with Corpus.open(index_path=index) as again:
                reopens.append(time.perf_counter() - started)
                if again.last_refresh.changed:
                    raise RuntimeError(f"reopening re-indexed documents: {again.last_refresh}")
                for query in QUERIES:
                    started = time.perf_counter()
                    again.search(query, limit=10)
                    searches.append(time.perf_counter() - started)
    return {
        "documents": stats.added,
        "sections": stats.sections,
        "build_s": round(build_s, 3),
        "reopen_ms": round(median(reopens) * 1000, 2),
        "search_ms": round(median(searches) * 1000, 2),
        "reps": reps,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one of each (CI)")
    ap.add_argument("--reps", type=int, default=None, help="reopens (9; 1 with --smoke)")
    args = ap.parse_args()
    reps = args.reps or (1 if args.smoke else 9)
    row = measure(reps)
    out = {"benchmark": "corpus", "smoke": args.smoke, "machine": machine(), **row}
    headers = ["documents", "sections", "build s", "reopen ms", "search ms"]
    body = [[row["documents"], row["sections"], row["build_s"], row["reopen_ms"], row["search_ms"]]]
    text_out = "\n".join(
        [
            f"the default corpus: built once, reopened unchanged {reps}x, "
            f"{len(QUERIES)} searches each (medians)",
            table(headers, body),
        ]
    )
    emit(out, text_out)


if __name__ == "__main__":
    main()
