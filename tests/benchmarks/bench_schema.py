"""The argument check of a schema-described tool: the built-in checker against ``jsonschema``.

Per call, on three tool schemas (a small flat one, an MCP server's file-edit tool, a nested one
with ``$ref``s and ``patternProperties``), valid and invalid arguments: the built-in compiled
check (what ``Tool.from_schema`` uses when it can) and ``jsonschema``'s Draft 2020-12 validator
(its fallback), each collecting every problem (``iter_errors``), as the tool does. Rounds
alternate the two; each figure is the median over the rounds of the mean over ``--calls`` calls.

    python tests/benchmarks/bench_schema.py [--rounds 9] [--calls 20000]
    python tests/benchmarks/bench_schema.py --smoke

Prints one JSON object on stdout and a short table on stderr (see _common.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, machine, median, table
from jsonschema import Draft202012Validator

from orchestrator.core.schema import compile_schema

SCHEMAS: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "flat": (
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"enum": ["C", "F"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
        {"city": "Oslo", "unit": "C", "days": 3},
        {"city": "", "unit": "K", "days": 9, "extra": 1},
    ),
    "edit_file": (
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "edits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "oldText": {"type": "string"},
                            "newText": {"type": "string"},
                        },
                        "required": ["oldText", "newText"],
                        "additionalProperties": False,
                    },
                },
                "dryRun": {"type": "boolean", "default": False},
            },
            "required": ["path", "edits"],
            "additionalProperties": False,
        },
        {"path": "/tmp/a.txt", "edits": [{"oldText": f"a{i}", "newText": "b"} for i in range(5)]},
        {"path": 3, "edits": [{"oldText": "a"}, {"newText": 1, "x": 2}]},
    ),
    "nested_refs": (
        {
            "type": "object",
            "$defs": {
                "point": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x", "y"],
                },
            },
            "properties": {
                "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 50},
                "mode": {"oneOf": [{"const": "fast"}, {"const": "exact"}]},
                "meta": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
            },
        },
        {
            "points": [{"x": i, "y": i / 2} for i in range(10)],
            "mode": "fast",
            "meta": {"x-a": "1", "x-b": "2"},
        },
        {"points": [{"x": 1}, {"x": "a", "y": 2}], "mode": "slow", "meta": {"x-a": 1}},
    ),
}


def per_call_us(check: Any, value: Any, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        check(value)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rounds, calls = (1, 200) if args.smoke else (args.rounds, args.calls)
    results: dict[str, Any] = {"machine": machine(), "rounds": rounds, "calls": calls, "cases": {}}
    rows = []
    for name, (schema, good, bad) in SCHEMAS.items():
        fast = compile_schema(schema, fallback=False)
        slow = Draft202012Validator(schema)

        def built_in(value: Any, fast: Any = fast) -> list[Any]:
            out: list[Any] = []
            fast(value, (), out)
            return out

        def jsonschema(value: Any, slow: Any = slow) -> list[Any]:
            return list(slow.iter_errors(value))

        for kind, value in (("valid", good), ("invalid", bad)):
            assert bool(built_in(value)) == bool(jsonschema(value)) == (kind == "invalid")
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(rounds):  # alternated, so drift in the machine's load hits both
                ours.append(per_call_us(built_in, value, calls))
                theirs.append(per_call_us(jsonschema, value, calls))
            a, b = median(ours), median(theirs)
            results["cases"][f"{name}/{kind}"] = {
                "built_in_us": round(a, 2),
                "jsonschema_us": round(b, 2),
                "speedup": round(b / a, 1),
                "built_in_spread_us": round(max(ours) - min(ours), 2),
            }
            rows.append([f"{name}/{kind}", a, b, b / a])
    emit(results, table(["case", "built-in µs", "jsonschema µs", "×"], rows))


if __name__ == "__main__":
    main()
