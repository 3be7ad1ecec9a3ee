"""Summarize a py-spy ``--format raw`` profile (collapsed stacks): top functions by self and
inclusive samples, optionally only inside the measured part of the run.

    py-spy record -r 1000 -f raw -o /tmp/prof.txt -- \\
        python tests/benchmarks/bench_fanout.py --worker \\
        '{"impl": "ours", "n": 1000, "l_ms": 0, "traced": false, "reps": 5}'
    python tests/benchmarks/profile_summary.py /tmp/prof.txt --within one_run --top 30

Frames are shown as ``function (file:line)`` with the line dropped, so one function is one row.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def short(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{m.group('func')} ({path})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("--within", default=None, help="only stacks through a function of this name")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--file", default=None, help="only functions whose file contains this")
    args = ap.parse_args()
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    total = 0
    for line in args.profile.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [short(f) for f in stack.split(";")]
        if args.within and not any(f.startswith(args.within + " ") for f in frames):
            continue
        count = int(count_text)
        total += count
        self_counts[frames[-1]] += count
        for f in set(frames):
            incl_counts[f] += count

    def show(title: str, counts: Counter[str]) -> None:
        print(f"\n{title} (of {total} samples)")
        shown = 0
        for name, c in counts.most_common():
            if args.file and args.file not in name:
                continue
            print(f"{100 * c / total:6.1f}%  {name}")
            shown += 1
            if shown >= args.top:
                break

    show("self", self_counts)
    show("inclusive", incl_counts)


if __name__ == "__main__":
    main()
