"""Checks that a saved trace is one tree, shared by the tests that run trees over real models."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.tracing.tracefiles import SpanRecord


def assert_one_tree(spans: Sequence[SpanRecord]) -> SpanRecord:
    """Assert that ``spans`` are one trace with one root, every other span's parent in it and no
    span ending after its parent's end; return the root."""
    assert spans, "no spans"
    assert len({s.trace_id for s in spans}) == 1, "more than one trace"
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans), "duplicate span ids"
    roots = [s for s in spans if s.parent_span_id is None]
    assert len(roots) == 1, [r.name for r in roots]
    for s in spans:
        if s.parent_span_id is not None:
            parent = by_id.get(s.parent_span_id)
            assert parent is not None, f"{s.name}: parent {s.parent_span_id} not in the trace"
            assert s.end_ns <= parent.end_ns, f"{s.name} ends after its parent {parent.name}"
    return roots[0]
