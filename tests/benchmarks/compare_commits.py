"""CPU per model call of two commits, interleaved, with the old commit's spread against itself.

Each commit is checked out once (``git worktree add --detach`` under a temporary folder) and
imported through ``PYTHONPATH``; the same benchmark script (this checkout's
``bench_fanout.py --worker``) measures both, so only the package differs. Every round runs
three fresh processes, old, new and old again (the order of the first two alternating round by
round), so load drifting on a shared machine reaches both sides alike; the figures are the
medians over the rounds of new/old and of old/old (the noise floor: a difference inside it is
no difference). On a loaded machine contention only adds CPU, so the least of each side is
given too (new's least over old's, old's first runs' least over its second runs'). The load
average is printed before and after.

Usage: ``python tests/benchmarks/compare_commits.py OLD NEW [--rounds 7] [--spec JSON]``
(default spec: bench_fanout's worker, N = 1,000, L = 0, untraced, 3 runs per process). ``NEW``
may be ``.`` for this checkout as it is (uncommitted changes included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEC = {"impl": "ours", "n": 1000, "l_ms": 0, "traced": False, "reps": 3}


def checkout(commit: str, into: Path) -> Path:
    if commit == ".":
        return ROOT
    where = into / commit.replace("/", "_").replace("^", "-parent")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), commit],
        check=True,
    )
    return where


def measure(tree: Path, spec: dict[str, Any]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "bench_fanout.py"),
            "--worker",
            json.dumps(spec),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout)["cpu_us_per_call"])


def check_import(tree: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    where = subprocess.run(
        [sys.executable, "-c", "import orchestrator; print(orchestrator.__file__)"],
        env=env,
        cwd=tree,  # not this checkout: "-c" puts the working folder first on sys.path
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"{tree}: orchestrator imports from {where}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--spec", default=json.dumps(SPEC))
    args = ap.parse_args()
    spec = json.loads(args.spec)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        trees = {name: checkout(c, Path(tmp)) for name, c in (("old", args.old), ("new", args.new))}
        try:
            for tree in trees.values():
                check_import(tree)
            rows = []
            for i in range(args.rounds):
                order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
                got = {name: measure(trees[name], spec) for name in order}
                again = measure(trees["old"], spec)
                rows.append((got["old"], got["new"], again))
                print(
                    f"round {i + 1}: old {got['old']:.1f}  new {got['new']:.1f}  "
                    f"old again {again:.1f} us/call",
                    file=sys.stderr,
                )
        finally:
            for name, commit in (("old", args.old), ("new", args.new)):
                if commit != ".":
                    subprocess.run(
                        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[name])],
                        check=False,
                    )
    new_over_old = [n / o for o, n, _ in rows]
    old_over_old = [a / o for o, _, a in rows]
    result = {
        "old": args.old,
        "new": args.new,
        "spec": spec,
        "rounds": args.rounds,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "old_us_per_call": round(median([o for o, _, _ in rows]), 1),
        "new_us_per_call": round(median([n for _, n, _ in rows]), 1),
        "new_over_old": round(median(new_over_old), 3),
        "new_over_old_rounds": [round(x, 3) for x in new_over_old],
        "old_over_old": round(median(old_over_old), 3),
        # contention on a loaded machine only adds CPU: the least of each side is the steadier
        "new_min_over_old_min": round(
            min(n for _, n, _ in rows) / min(min(o, a) for o, _, a in rows), 3
        ),
        "old_min_over_old_again_min": round(
            min(o for o, _, _ in rows) / min(a for _, _, a in rows), 3
        ),
        "old_over_old_rounds": [round(x, 3) for x in old_over_old],
    }
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
