"""What reading saved traces costs: ``orchestrator trace show`` of a big run and ``trace list``
over a runs folder, each in a fresh process as a user runs them (wall time and peak RSS).

The big run is the wide tree of ``bench_tracing_cost.py`` (the root spawns N workers, each
makes K tool turns) written by the CLI's own tracing setup (``configure_tracing(run_file=...)``):
at N = 5,000, K = 3 that is 65,005 spans in one file. It takes a while to make, so it is kept
under ``--workdir`` and reused while N and K are the same.

The runs folder holds ``--runs`` traces of various sizes (mostly small, a few of 300 and 1,000
workers, and the big run), one interrupted (its root span's batch never written), one with
damaged lines, and one JSONL file that is no trace (an event log). ``trace list`` is timed with
an empty summary cache (``cold``: every file read) and with the cache its previous run left
(``warm``).

Measured, the median of ``--reps`` runs each: ``trace show FILE`` (stdout to /dev/null, so
piped: names whole, no colours), ``trace show FILE --depth 1``, ``trace list`` cold and warm.
Targets (issue 27): ``trace show`` of the 5,000-child run under 1 s and 100 MB, ``trace list``
of 100 traces under 1 s.

Usage: ``python tests/benchmarks/bench_trace_read.py [--smoke] [--n 5000] [--k 3] [--runs 100]
[--reps 3] [--workdir DIR]``. Prints one JSON object on stdout and a small table on stderr.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine, median, table

_SMALL_SIZES = (1, 2, 3, 5, 8, 13, 20, 40)


def write_runs(jobs: list[tuple[Path, int]], k: int) -> None:
    """Runs of the wide tree, each traced to its path as the CLI traces (an OTLP/JSON file).

    In a process of its own: a child's peak RSS as ``wait4`` reports it counts the image it
    was forked from, so this process stays small (it never imports the package).
    """
    argv = [sys.executable, __file__, "--write", str(k)]
    argv += [f"{n}:{path}" for path, n in jobs]
    subprocess.run(argv, check=True)


def _write_run(path: Path, n: int, k: int) -> None:
    import trio
    from bench_tracing_cost import ROOT, limits_for, make_model

    from orchestrator import run
    from orchestrator.tracing import configure_tracing

    path.parent.mkdir(parents=True, exist_ok=True)
    setup = configure_tracing(run_file=path, keep_file=True, set_global=False)
    model = make_model(n, k, [0])
    limits = limits_for(n, k)

    async def main() -> Any:
        return await run(
            ROOT,
            "Look up every batch.",
            model=model,
            limits=limits,
            tracer_provider=setup.tracer_provider,
        )

    result = trio.run(main)
    setup.shutdown()
    if result.status.value != "completed":
        raise RuntimeError(f"run of {n} workers failed: {result.status} {result.error}")


def big_trace(workdir: Path, n: int, k: int) -> Path:
    path = workdir / f"big-n{n}-k{k}.jsonl"
    if not path.exists():
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        write_runs([(partial, n)], k)
        partial.rename(path)
    return path


def runs_folder(workdir: Path, big: Path, count: int, k: int, smoke: bool) -> Path:
    """A realistic runs folder of ``count`` traces (see the module's docstring), made once."""
    folder = workdir / f"runs-{count}-{big.stem}"
    done = folder / ".complete"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    rng = random.Random(27)
    sizes = [] if smoke else [300, 300, 1000]
    sizes = [rng.choice(_SMALL_SIZES) for _ in range(count - 3 - len(sizes))] + sizes
    jobs = []
    for index, n in enumerate(sizes):
        sub = "older/" if index % 7 == 0 else ""  # list searches the folder recursively
        jobs.append((folder / f"{sub}run{index:03d}.jsonl", n))
    write_runs(jobs, k)
    shutil.copyfile(big, folder / big.name)
    # interrupted: the batch holding the root span (the last line) was never written
    source = folder / f"run{len(sizes) - 1:03d}.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    (folder / "interrupted.jsonl").write_bytes(b"".join(lines[:-1]) or lines[0][:200])
    # damaged: a stray line, and a last batch cut off mid-write
    whole = b"".join(lines)
    (folder / "damaged.jsonl").write_bytes(
        lines[0] + b"\x00 not json\n" + b"".join(lines[1:]) + whole[: len(whole) // 3]
    )
    (folder / "events.jsonl").write_text('{"event": "started"}\n{"event": "done"}\n')
    done.touch()
    return folder


# Runs the command and reports its wall time and peak RSS. A child's peak RSS as ``wait4``
# reports it counts the memory of the process it was forked from (its parent's peak, through
# vfork), so the command is started from this small, fresh interpreter, not from the benchmark.
_MEASURE = """
import os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_pid, status, usage = os.wait4(child.pid, 0)
wall = time.perf_counter() - started
print(wall, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command, its output to /dev/null."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv], env=env, capture_output=True, text=True
    )
    wall, kb, code = done.stdout.split()
    if done.returncode != 0 or code != "0":
        raise RuntimeError(f"{argv} exited {code}: {done.stderr}")
    return float(wall), int(kb) / 1024


def expected_spans(n: int, k: int) -> int:
    """As ``bench_tracing_cost.expected_spans`` (not imported: it imports the package)."""
    return 5 + n + n * (1 + 2 * (k + 1) + k)


def main() -> None:
    if sys.argv[1:2] == ["--write"]:  # the writer process (see write_runs)
        k = int(sys.argv[2])
        for job in sys.argv[3:]:
            n, path = job.split(":", 1)
            _write_run(Path(path), int(n), k)
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="N=30, 8 traces, one repetition (CI)")
    ap.add_argument("--n", type=int, default=5000, help="workers of the big run (default 5000)")
    ap.add_argument("--k", type=int, default=3, help="tool turns per worker (default 3)")
    ap.add_argument("--runs", type=int, default=100, help="traces in the runs folder")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement")
    ap.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "orchestrator-bench-trace-read",
        help="where the generated traces are kept and reused",
    )
    args = ap.parse_args()
    n, runs, reps = (30, 8, 1) if args.smoke else (args.n, args.runs, args.reps)
    workdir = args.workdir / "smoke" if args.smoke else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)

    made = time.perf_counter()
    big = big_trace(workdir, n, args.k)
    folder = runs_folder(workdir, big, runs, args.k, args.smoke)
    made_s = time.perf_counter() - made

    cache = Path(tempfile.mkdtemp(prefix="bench-trace-cache-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "120"}
    cli = [sys.executable, "-m", "orchestrator.cli"]
    commands = {
        "show": [*cli, "trace", "show", str(big)],
        "show --depth 1": [*cli, "trace", "show", str(big), "--depth", "1"],
        "list cold": [*cli, "trace", "list", "--runs-dir", str(folder)],
        "list warm": [*cli, "trace", "list", "--runs-dir", str(folder)],
    }
    timed([*cli, "--help"], env)  # warm-up: the interpreter's and the package's files cached
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(reps):
        for name, argv in commands.items():
            if name == "list cold":
                shutil.rmtree(cache / "orchestrator", ignore_errors=True)
            samples[name].append(timed(argv, env))
    shutil.rmtree(cache, ignore_errors=True)

    results = {
        name: {
            "wall_s": round(median([w for w, _ in values]), 3),
            "peak_rss_mb": round(median([m for _, m in values]), 1),
            "runs_wall_s": [round(w, 3) for w, _ in values],
        }
        for name, values in samples.items()
    }
    traces = sum(1 for _ in folder.rglob("*.jsonl")) - 1  # the event log is no trace
    result = {
        "benchmark": "trace_read",
        "machine": machine(),
        "n": n,
        "k": args.k,
        "spans": expected_spans(n, args.k),
        "file_mb": round(big.stat().st_size / 1e6, 1),
        "folder_traces": traces,
        "folder_mb": round(sum(p.stat().st_size for p in folder.rglob("*.jsonl")) / 1e6, 1),
        "reps": reps,
        "generate_s": round(made_s, 1),
        "results": results,
        "targets": {"show_wall_s": 1.0, "show_peak_rss_mb": 100.0, "list_wall_s": 1.0},
    }
    rows = [[name, r["wall_s"], r["peak_rss_mb"]] for name, r in results.items()]
    text = (
        f"trace read: {result['spans']} spans ({result['file_mb']} MB) in one file; "
        f"{traces} traces ({result['folder_mb']} MB) in the runs folder\n"
        + table(["command", "wall s", "peak MB"], rows)
    )
    emit(result, text)


if __name__ == "__main__":
    main()
