"""How long after a wide run ends its trace is whole in a real Jaeger, and the largest request
each OTLP transport sends (issue 38).

For each repetition and protocol (alternating), ``orchestrator run`` runs the ``wide`` tree of
tests/support/jaeger_trees.py (N children, each answering at once) as a process, exporting to
a Jaeger started from tests/support/jaeger.yaml; a poller reads ``/api/traces/{id}?raw=true``
(no adjusters; spans counted in the bytes) every 50 ms from the moment the trace file names the
trace id, until Jaeger holds every span of the file.
The figure is the end of the first read that held every span minus the root span's end (its
``endTimeUnixNano``, the same clock): what a user waits, from the run's answer, for the whole
tree (the CLI's flush at exit included; Jaeger's own batch processor holds spans up to 200 ms
before storing them; a read of a few thousand spans takes a while of its own, reported too,
as is the start of the last read that came back short). The CLI's exit is reported the same
way. Then the same run goes to the suite's OTLP receiver
(tests/support/otlp_receiver.py), which keeps every request: their count and the largest.

Needs the Jaeger binary (tests/support/build_jaeger.sh). Not a ``bench_*`` script: the smoke
runs of ``.ci/run`` come before the Jaeger step builds it.

Usage: ``python tests/benchmarks/jaeger_latency.py [--children 1000] [--reps 5] [--capture]
[--task-chars 100] [--sizes-only]``.
Prints one JSON object on stdout and a table on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median
from support.jaeger import Jaeger
from support.otlp_receiver import OtlpReceiver

TESTS = Path(__file__).resolve().parents[1]
TREES = TESTS / "support" / "jaeger_trees.py"
PROTOCOLS = ("http/protobuf", "grpc")


TASK_CHARS = "100"  # --task-chars: characters of each child's task


def run_cli(work: Path, endpoint: str, protocol: str, children: int, capture: bool) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        JAEGER_TREE_CHILDREN=str(children),
        JAEGER_TREE_TASK_CHARS=TASK_CHARS,
    )
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            f"{TREES}:wide",
            "Go.",
            "--json",
            "--runs-dir",
            str(work / "runs"),
        ],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def spans_of(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out.extend(ss["spans"])
    return out


def spans_in_jaeger(jaeger: Jaeger, trace_id: str) -> int:
    """The spans Jaeger answers for the trace now, by the cheapest read there is: the legacy
    API without its adjusters (``raw=true``), its spans counted in the bytes (a full parse of
    a few thousand spans costs more than the read)."""
    try:
        with urllib.request.urlopen(f"{jaeger.query}/api/traces/{trace_id}?raw=true") as r:
            return r.read().count(b'"operationName"')
    except urllib.error.HTTPError:  # 404: nothing of it yet
        return 0


def one_jaeger_run(jaeger: Jaeger, protocol: str, children: int, capture: bool) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="jaeger-latency-"))
    endpoint = jaeger.otlp_grpc if protocol == "grpc" else jaeger.otlp_http
    expected = 5 + 4 * children
    whole_at: list[float] = []  # the start and end of the first read that had every span
    short_at = [0.0]  # the start of the last read that did not
    stop = threading.Event()

    def poll() -> None:  # a thread: the process and the poller go on at once
        trace_id = None
        while not stop.is_set():
            files = list((work / "runs").glob("*.jsonl"))
            if trace_id is None and files and files[0].stat().st_size:
                first = files[0].read_text().split("\n", 1)[0]
                trace_id = json.loads(first)["resourceSpans"][0]["scopeSpans"][0]["spans"][0][
                    "traceId"
                ]
            if trace_id is not None:
                began = time.time()
                if spans_in_jaeger(jaeger, trace_id) >= expected:
                    whole_at.extend((began, time.time()))
                    return
                short_at[0] = began
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    proc = run_cli(work, endpoint, protocol, children, capture)
    out, err = proc.communicate(timeout=600)
    exited = time.time()
    assert proc.returncode == 0, err
    poller.join(timeout=120)
    stop.set()
    assert whole_at, "the trace never held every span"
    spans = spans_of(work / json.loads(out)["trace_file"])
    assert len(spans) == expected, len(spans)
    root = next(s for s in spans if not s.get("parentSpanId"))
    ended = int(root["endTimeUnixNano"]) / 1e9
    return {
        "whole_s": whole_at[1] - ended,  # a query answered with the whole trace
        "not_yet_s": short_at[0] - ended,  # a query begun then answered without every span
        "read_s": whole_at[1] - whole_at[0],  # what that whole read took
        "exit_s": exited - ended,
    }


def request_sizes(protocol: str, children: int, capture: bool) -> dict[str, int]:
    work = Path(tempfile.mkdtemp(prefix="jaeger-sizes-"))
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        proc = run_cli(work, endpoint, protocol, children, capture)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        sizes = [r.ByteSize() for r in receiver.requests]
        assert len(receiver.spans) == 5 + 4 * children
    return {"requests": len(sizes), "largest_bytes": max(sizes), "total_bytes": sum(sizes)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--capture", action="store_true", help="message content capture on")
    parser.add_argument("--task-chars", default="100", help="characters of each child's task")
    parser.add_argument("--sizes-only", action="store_true", help="only the request sizes")
    args = parser.parse_args()
    global TASK_CHARS
    TASK_CHARS = args.task_chars
    results: dict[str, Any] = {"machine": machine(), "children": args.children}
    results["capture"] = args.capture
    results["task_chars"] = args.task_chars
    results["load_before"] = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in PROTOCOLS}
    if not args.sizes_only:
        with Jaeger(Path(tempfile.mkdtemp()) / "jaeger.log") as jaeger:
            for _ in range(args.reps):
                for protocol in PROTOCOLS:  # alternating
                    runs[protocol].append(
                        one_jaeger_run(jaeger, protocol, args.children, args.capture)
                    )
    results["load_after"] = os.getloadavg()
    results["runs"] = runs
    results["median"] = {
        p: {k: median([r[k] for r in rs]) for k in rs[0]} for p, rs in runs.items() if rs
    }
    results["sizes"] = {p: request_sizes(p, args.children, args.capture) for p in PROTOCOLS}
    print(json.dumps(results, indent=1))
    for p in PROTOCOLS:
        if args.sizes_only:
            s = results["sizes"][p]
            print(f"{p:14} {s['requests']} requests, largest {s['largest_bytes']:,} B",
                  file=sys.stderr)  # fmt: skip
            continue
        m, s = results["median"][p], results["sizes"][p]
        print(
            f"{p:14} whole in Jaeger {m['whole_s']:.2f} s after the root ended (not yet at "
            f"{m['not_yet_s']:.2f} s; a whole read {m['read_s']:.2f} s; CLI exit "
            f"{m['exit_s']:.2f} s); {s['requests']} requests, largest "
            f"{s['largest_bytes']:,} B",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
