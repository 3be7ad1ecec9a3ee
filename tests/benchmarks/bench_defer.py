"""What ``DEFER`` costs a run that parks nothing, and how fast ``approve`` reaches a parked call.

1. bench_fanout's workload (N children, K lookups each, L = 0), journaled, run with and without
   ``Policy(approver=DEFER)`` (no rule asks for confirmation, so nothing parks): CPU seconds of
   each run, alternating the two run by run (``--pairs`` pairs), the median of the per-pair
   ratios, and the same for the plain run against itself (the old-vs-old spread).
2. A parked 1,000-child run: the root spawns N children, each calls ``send_email`` behind a
   ``confirm`` rule under ``--approve defer`` (the run ends ``awaiting_approval`` with N parked
   calls); then ``orchestrator approve RUN --allow ID`` for one of them, in a process of its
   own: the seconds from the command's start to the approved call's side effect, and to exit.

Usage: ``python tests/benchmarks/bench_defer.py [--smoke] [--n 1000] [--pairs 7]
[--approve-n 1000]``. ``--smoke`` runs N = 10, one pair, 10 parked calls (for CI).
Report the load average (printed) with the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fanout import ROOT, limits_for, make_model

from orchestrator import DEFER, Policy, run


def one(n: int, defer: bool, folder: Path) -> float:
    counter = [0]
    policy = Policy(approver=DEFER) if defer else None

    async def go() -> Any:
        return await run(
            ROOT,
            "Look up every batch.",
            model=make_model(n, 0.0, counter),
            limits=limits_for(n),
            policy=policy,
            journal=folder / f"{time.monotonic_ns()}.db",
        )

    start = time.process_time()
    result = trio.run(go)
    took = time.process_time() - start
    assert result.status.value == "completed", result.error
    return took


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def cost(n: int, pairs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        one(n, False, folder)  # warm-up
        one(n, True, folder)
        plain, deferred, again = [], [], []
        for i in range(pairs):
            order = [(False, plain), (True, deferred), (False, again)]
            if i % 2:
                order.reverse()
            for defer, into in order:
                into.append(one(n, defer, folder))
    ratio = median([d / p for d, p in zip(deferred, plain, strict=True)])
    spread = median([a / p for a, p in zip(again, plain, strict=True)])
    print(f"fanout n={n} L=0 journaled, {pairs} interleaved pairs, CPU s per run (median):")
    print(
        f"  plain {median(plain):.3f}  DEFER {median(deferred):.3f}  plain again {median(again):.3f}"
    )
    print(f"  DEFER/plain {ratio:.3f}   plain/plain (old-vs-old spread) {spread:.3f}")


TREE = """
from pathlib import Path

from orchestrator import Agent, Limits, Policy, tool
from orchestrator.models import FunctionModel, response, text, tool_call

N = {n}


@tool
def send_email(to: str) -> str:
    '''Send an email.'''
    Path("sent.log").write_text(to)
    return "sent"


def answer(request):
    if request.agent.depth == 0:
        if len(request.messages) == 1:
            return response(*[tool_call("spawn_subagent", {{"agent": "mailer", "task": f"m{{j}}"}},
                                        id=f"s{{j}}") for j in range(N)])
        return text("done")
    if len(request.messages) == 1:
        task = request.messages[0].content[0].text
        return response(tool_call("send_email", {{"to": task}}, id=f"mail-{{task}}"))
    return text("ok")


mailer = Agent("mailer", "Mail.", tools=[send_email], description="mails",
               policy=Policy({{"send_email": "confirm"}}))
agent = Agent("lead", "Delegate.", subagents=[mailer], model=FunctionModel(answer, name="m"),
              limits=Limits(max_children=N, max_agents=N + 1, max_concurrency=N + 1))
"""


def approve_time(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "tree.py").write_text(TREE.format(n=n))
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
        cli = [sys.executable, "-m", "orchestrator.cli"]
        parked = subprocess.run(
            [*cli, "run", "tree.py", "go", "--approve", "defer", "--quiet"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert parked.returncode == 11, parked.stderr[-2000:]
        [journal] = (work / "runs").glob("*.db")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.Popen(
            [*cli, "approve", journal.stem, "--allow", f"mail-m{n // 2}", "--quiet"],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        reached = None
        while proc.poll() is None:
            if reached is None and (work / "sent.log").exists():
                reached = time.perf_counter() - start
            time.sleep(0.002)
        if reached is None and (work / "sent.log").exists():
            reached = time.perf_counter() - start
        exited = time.perf_counter() - start
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert proc.returncode == 11, proc.stderr.read() if proc.stderr else ""  # others parked
    print(
        f"approve of a parked {n}-child run: the approved call ran {reached:.2f} s after the "
        f"command started; the command exited after {exited:.2f} s, having used "
        f"{cpu.ru_utime + cpu.ru_stime - before.ru_utime - before.ru_stime:.2f} s of CPU"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--approve-n", type=int, default=1000)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="N=10, one pair (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.n, args.pairs, args.approve_n = 10, 1, 10
    print(f"load average before: {os.getloadavg()}")
    if not args.skip_cost:
        cost(args.n, args.pairs)
    approve_time(args.approve_n)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
