"""``trace show`` piped (or to any console without styles) writes its rows as plain text
without rich laying out each one; what it writes is exactly what rich prints for them."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from orchestrator.tracing.tracefiles import load_trace
from orchestrator.tracing.view import render_trace

T0 = 1_700_000_000_000_000_000


def kv(key: str, value: object) -> dict[str, Any]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"intValue": str(value)}}


@pytest.fixture
def awkward(tmp_path: Path) -> Path:
    """A trace with everything that makes a line hard to lay out: wide and combining
    characters, control characters, names longer than any width, trailing spaces, errors
    with long messages, retries, a deep chain, roll-ups and costs."""
    lead = {
        "traceId": "ab" * 16,
        "spanId": "01" * 8,
        "name": "invoke_agent lead\x1b[2J",
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 5 * 10**9),
        "attributes": [
            kv("gen_ai.operation.name", "invoke_agent"),
            kv("orchestrator.agent.path", "lead"),
            kv("orchestrator.agent.depth", 0),
            kv("orchestrator.outcome", "failed"),
            kv("error.type", "BoomError"),
            kv("orchestrator.usage.input_tokens", 1_234_567),
            kv("orchestrator.cost_usd", 1.5),
        ],
        "status": {"code": 2, "message": "it went boom " * 40},
    }
    spans = [lead]
    parent = lead["spanId"]
    for i in range(40):
        name = (
            f"invoke_agent 研究者{'x' * i}"
            if i % 3 == 0
            else f"chat m{i}{'   ' if i % 2 else ''}e\u0301"
        )
        span_id = f"{i + 2:016x}"
        spans.append(
            {
                "traceId": "ab" * 16,
                "spanId": span_id,
                "parentSpanId": parent,
                "name": name,
                "startTimeUnixNano": str(T0 + i * 10**8),
                "endTimeUnixNano": str(T0 + i * 10**8 + 10**7 * i),
                "attributes": [
                    kv("orchestrator.agent.path", f"lead/研究者#{i}{'y' * i}"),
                    kv("orchestrator.agent.depth", 1 + i // 10),
                    kv("gen_ai.usage.input_tokens", i * 100),
                    kv("gen_ai.usage.output_tokens", i),
                    kv("orchestrator.outcome", "ok   " if i % 7 == 0 else "ok"),
                ],
                "status": {
                    "code": 2 if i % 5 == 0 else 1,
                    "message": "bad\nthing  " * (i % 5 == 0),
                },
                "events": [
                    {
                        "name": "orchestrator.retry",
                        "timeUnixNano": str(T0),
                        "attributes": [
                            kv("orchestrator.retry.attempt", 2),
                            kv("error.type", "RateLimit"),
                            kv("orchestrator.retry.delay_s", 1.5),
                        ],
                    }
                ]
                if i % 4 == 0
                else [],
            }
        )
        if i % 10 == 9:
            parent = span_id  # a deeper level every ten spans
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [kv("service.name", "svc")]},
                "scopeSpans": [{"scope": {"name": "orchestrator"}, "spans": spans}],
            }
        ]
    }
    path = tmp_path / "awkward.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    return path


@pytest.mark.parametrize("width", [40, 72, 120, 250])
@pytest.mark.parametrize("fit_names", [False, True], ids=["terminal", "piped"])
@pytest.mark.parametrize("depth", [None, 1, 2])
def test_plain_rows_are_what_rich_prints_for_the_same_rows(
    awkward: Path, width: int, fit_names: bool, depth: int | None
) -> None:
    spans = load_trace(awkward)
    plain_out = io.StringIO()
    plain = Console(file=plain_out, width=width)
    assert plain.color_system is None  # the plain path
    render_trace(spans, plain, fit_names=fit_names, depth=depth)
    # recording makes the view lay the rows out through rich, as on a terminal
    styled = Console(file=io.StringIO(), width=width, record=True)
    render_trace(spans, styled, fit_names=fit_names, depth=depth)
    assert plain_out.getvalue() == styled.export_text()
    assert "\x1b" not in plain_out.getvalue()
    assert "研究者" in plain_out.getvalue() or width < 120


def test_a_tree_longer_than_a_chunk_is_printed_whole_and_in_order(tmp_path: Path) -> None:
    children = [
        {
            "traceId": "cd" * 16,
            "spanId": f"{i + 2:016x}",
            "parentSpanId": "02" * 8,
            "name": f"execute_tool step{i:05d}",
            "startTimeUnixNano": str(T0 + i),
            "endTimeUnixNano": str(T0 + i + 1000),
        }
        for i in range(4500)
    ]
    root = {
        "traceId": "cd" * 16,
        "spanId": "02" * 8,
        "name": "invoke_agent lead",
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 10**6),
    }
    path = tmp_path / "wide.jsonl"
    for batch in (children[:3000], [*children[3000:], root]):
        doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "x"}, "spans": batch}]}]}
        with path.open("a") as f:
            f.write(json.dumps(doc) + "\n")
    out = io.StringIO()
    render_trace(load_trace(path), Console(file=out, width=100), fit_names=True)
    steps = re.findall(r"execute_tool (step\d+)", out.getvalue())
    assert steps == [f"step{i:05d}" for i in range(4500)]
