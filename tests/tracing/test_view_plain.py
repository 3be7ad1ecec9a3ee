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


def _float_duration(ns: int) -> str:
    """How a duration was written before it was worked out in integers (the reference)."""
    seconds = ns / 1e9
    if seconds < 0.001:
        return f"{ns / 1e6:.2f}ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:04.1f}s"


def test_durations_are_written_as_the_float_formatting_rounds_them() -> None:
    from orchestrator.tracing.view import format_duration

    samples = {0, 1, 59_999_999_999, 60_000_000_000, 61_234_567_890, 3_600 * 10**9}
    for unit in (10_000, 1_000_000, 10_000_000, 1_000_000_000):
        for k in (0, 1, 7, 99, 100, 999, 1000, 5999):
            for at in (k * unit, k * unit + unit // 2):  # on a rounding step, and a tie
                samples.update(at + d for d in (-2, -1, 0, 1, 2) if at + d >= 0)
    for ns in sorted(samples):
        assert format_duration(ns) == _float_duration(ns), ns


def test_a_rows_figures_come_from_its_own_values_whatever_spans_share_its_keys(
    tmp_path: Path,
) -> None:
    """Where the figures are is worked out once per set of attribute keys; the values are
    each span's: the standard count first, else the best roll-up (not a bool, not a text,
    not a cache count), and the best cost."""
    rows = [
        ("a1", {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 30}),
        ("a2", {"gen_ai.usage.input_tokens": "many", "gen_ai.usage.output_tokens": 5}),
        ("b1", {"orchestrator.usage.input_tokens": 2_500_000, "orchestrator.cost_usd": 1.5}),
        ("b2", {"orchestrator.usage.input_tokens": True, "orchestrator.cost_usd": 0.25}),
        ("c1", {"x.cache_read.input_tokens": 9, "x.own.output_tokens": 4}),
    ]
    spans = [
        {
            "traceId": "ef" * 16,
            "spanId": f"{i + 1:016x}",
            **({"parentSpanId": f"{1:016x}"} if i else {}),
            "name": f"chat {name}",
            "startTimeUnixNano": str(T0 + i),
            "endTimeUnixNano": str(T0 + i + 10**6),
            "attributes": [
                {"key": k, "value": {"boolValue": v}} if isinstance(v, bool) else kv(k, v)
                for k, v in attributes.items()
            ],
        }
        for i, (name, attributes) in enumerate(rows)
    ]
    doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}
    path = tmp_path / "figures.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    out = io.StringIO()
    render_trace(load_trace(path), Console(file=out, width=200), fit_names=True)
    lines = {
        m.group(1): line
        for line in out.getvalue().splitlines()
        if (m := re.search(r"chat (\w+)", line))
    }
    assert "1.2k→30 " in lines["a1"]
    assert "?→5 " in lines["a2"]  # a text is no count, and no roll-up stands in for it
    assert "Σ2.5M→? " in lines["b1"] and "$1.50 " in lines["b1"]
    assert "→" not in lines["b2"] and "$0.2500 " in lines["b2"]  # True is no count
    assert "Σ?→4 " in lines["c1"]  # a cache count is part of the input already
