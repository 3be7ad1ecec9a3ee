#!/usr/bin/env python3
"""Check that a run arrived in Jaeger whole, and print the shape of its agent tree.

    python tracing/check_jaeger.py RUN [--query http://127.0.0.1:16686] [--runs-dir runs]

RUN is a run id (a unique prefix works when the run's trace file is in ``--runs-dir``). The run
is found the way the UI's search finds it (service ``orchestrator``, tag
``gen_ai.conversation.id=RUN``) through Jaeger's HTTP query API, read back whole
(``/api/traces/{trace id}``), and drawn as its agents: each ``invoke_agent`` span under its
parent agent, siblings of one name counted together, with how many of them failed. When the
run's trace file (``runs/<run id>.jsonl``) is there, the spans Jaeger holds are compared with
the file's. Exit status: 0 when the run is in Jaeger with every span of its file, 1 when it is
missing or short, 2 when Jaeger cannot be asked. The standard library only: run it anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def get(query: str, path: str, **params: str) -> Any:
    url = f"{query.rstrip('/')}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def file_spans(runs_dir: Path, run: str) -> tuple[str, int | None]:
    """The full run id for ``run`` and the spans its trace files hold (None: no file)."""
    matches = sorted(runs_dir.glob(f"{run}*.jsonl")) if runs_dir.is_dir() else []
    ids = {p.name.split(".", 1)[0] for p in matches}
    if len(ids) != 1:
        return run, None
    count = 0
    for path in matches:  # the run's own file, and a resumed run's files beside it
        for line in path.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a cut line: trace export skips it too
            for rs in doc.get("resourceSpans", ()):
                for ss in rs.get("scopeSpans", ()):
                    count += len(ss.get("spans", ()))
    return ids.pop(), count


def tag(span: dict[str, Any], key: str) -> Any:
    return next((t["value"] for t in span.get("tags", ()) if t["key"] == key), None)


def agent_tree(trace: dict[str, Any]) -> list[str]:
    """The trace's agents as lines of a tree: each ``invoke_agent`` span under the nearest
    ``invoke_agent`` above it; siblings of one operation counted together."""
    spans = {s["spanID"]: s for s in trace["spans"]}

    def parent_of(span: dict[str, Any]) -> str | None:
        refs = [r for r in span["references"] if r["refType"] == "CHILD_OF"]
        return refs[0]["spanID"] if refs and refs[0]["spanID"] in spans else None

    def agent_above(span: dict[str, Any]) -> str | None:
        up = parent_of(span)
        while up is not None and not spans[up]["operationName"].startswith("invoke_agent "):
            up = parent_of(spans[up])
        return up

    children: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for span in sorted(trace["spans"], key=lambda s: s["startTime"]):
        if span["operationName"].startswith("invoke_agent "):
            children[agent_above(span)].append(span)
    lines: list[str] = []

    def draw(parent: str | None, prefix: str) -> None:
        groups: dict[str, list[dict[str, Any]]] = {}
        for span in children[parent]:
            groups.setdefault(span["operationName"], []).append(span)
        for i, (name, group) in enumerate(groups.items()):
            last = i == len(groups) - 1
            branch = "" if parent is None else ("└─ " if last else "├─ ")
            failed = sum(1 for s in group if tag(s, "error") is True)
            count = f" ×{len(group)}" if len(group) > 1 else ""
            outcome = Counter(str(tag(s, "orchestrator.outcome") or "?") for s in group)
            shown = ", ".join(f"{n} {o}" if len(group) > 1 else o for o, n in outcome.items())
            note = f" ({failed} failed)" if failed and len(group) > 1 else ""
            lines.append(f"{prefix}{branch}{name}{count}  [{shown}]{note}")
            deeper = prefix + ("" if parent is None else ("   " if last else "│  "))
            for span in group[:1]:  # siblings of one name: the first one's subtree stands in
                draw(span["spanID"], deeper)

    draw(None, "")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="run id (or a unique prefix, with its trace file)")
    parser.add_argument(
        "--query",
        default=os.environ.get("JAEGER_UI_URL") or "http://127.0.0.1:16686",
        help="Jaeger's UI / query address (default: JAEGER_UI_URL, else http://127.0.0.1:16686)",
    )
    parser.add_argument("--service", default=os.environ.get("OTEL_SERVICE_NAME") or "orchestrator")
    parser.add_argument("--runs-dir", default="runs", type=Path)
    args = parser.parse_args(argv)
    run, in_file = file_spans(args.runs_dir, args.run)
    try:
        found = get(
            args.query,
            "/api/traces",
            service=args.service,
            tags=json.dumps({"gen_ai.conversation.id": run}),
            limit="20",
        )["data"]
        traces = [get(args.query, f"/api/traces/{t['traceID']}")["data"][0] for t in found]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(f"cannot ask Jaeger at {args.query}: {exc}", file=sys.stderr)
        return 2
    if not traces:
        print(f"run {run} is not in Jaeger at {args.query} (service {args.service!r})")
        return 1
    held = 0
    for trace in sorted(traces, key=lambda t: min(s["startTime"] for s in t["spans"])):
        spans = trace["spans"]
        held += len(spans)
        kinds = Counter(s["operationName"].split(" ", 1)[0] for s in spans)
        errors = sum(1 for s in spans if tag(s, "error") is True)
        print(
            f"trace {trace['traceID']}: {len(spans)} spans "
            f"({kinds['invoke_agent']} agents, {kinds['chat']} model calls, "
            f"{kinds['execute_tool']} tool calls, {errors} with error=true)"
        )
        print(f"  {args.query.rstrip('/')}/trace/{trace['traceID']}")
        for line in agent_tree(trace):
            print(f"  {line}")
    if in_file is None:
        print(f"run {run}: {held} spans in Jaeger (no trace file in {args.runs_dir} to compare)")
        return 0
    whole = held >= in_file
    verdict = "whole" if whole else f"SHORT by {in_file - held}"
    print(f"run {run}: {held} spans in Jaeger, {in_file} in its trace files: {verdict}")
    return 0 if whole else 1


if __name__ == "__main__":
    sys.exit(main())
