"""Cancellation from outside at a moment hypothesis picks (a delay in virtual time), through
``handle.cancel()`` and through an enclosing cancel scope, with the busy agent at depth 0, 1 or 2.

The busy agent (named ``faulty``) takes three turns, each a 1 s model call followed by tools: a
2 s async tool and a quick one in parallel, then a sync tool that blocks its worker thread past
``tool_timeout`` (2 s, so it is abandoned), then the first pair again; then it answers (about
10 s). The relays above it take 0.5 s per call and the helper sibling 1 s. So a delay in [0, 14]
s lands in a model call, in an async tool, in a blocked worker thread, in a spawn, between them,
or after the run has ended. Each example is its own ``trio.run`` on a
``MockClock(autojump_threshold=0)``. Documented outcome: a run cut before its end is
``cancelled`` (every agent still running is ``cancelled``, the finished ones keep
``completed``); a cut after the end changes nothing.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from faultkit import (
    DEPTHS,
    FAULTY,
    Observer,
    chain,
    describe,
    find_faulty,
    mark_failed,
    nodes,
    record_many,
    scripted,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orchestrator import Agent, Limits, RunStatus, tool
from orchestrator.models import text, tool_call

LIMITS = Limits(timeout=60, tool_timeout=2)
HOWS = {
    "handle.cancel()": describe(
        "cancel via handle.cancel()",
        "handle.cancel() at a moment hypothesis picks in [0, 14] s of virtual time (model "
        "calls, tools, spawns, and after the end)",
        order=401,
    ),
    "enclosing cancel scope": describe(
        "cancel via an enclosing cancel scope",
        "the deadline of a cancel scope around open_run, at a moment hypothesis picks in "
        "[0, 14] s of virtual time",
        order=402,
    ),
}
_examples = itertools.count()


@tool
async def slow_search(query: str) -> str:
    """A search that takes 2 s."""
    await trio.sleep(2)
    return f"results for {query}"


@tool
async def quick(x: int) -> str:
    """Instant."""
    return f"quick {x}"


def busy_tree(depth: int, release: threading.Event) -> Agent:
    @tool
    def blocking(x: int) -> str:
        """Blocks its worker thread until the test releases it."""
        release.wait(30)
        return "late"

    pair = [tool_call("slow_search", {"query": "q"}), tool_call("quick", {"x": 1})]
    model = scripted(
        pair, tool_call("blocking", {"x": 2}), pair, text("busy agent done"), latency=1.0
    )
    faulty = Agent(
        FAULTY,
        "Busy.",
        description="the busy agent",
        model=model,
        tools=[slow_search, quick, blocking],
    )
    return chain(faulty, depth, relay_latency=0.5, helper_latency=1.0)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("how", list(HOWS))
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(delay=st.floats(min_value=0.0, max_value=14.0, allow_nan=False))
@example(delay=0.0)  # before the root's first model call returns
@example(delay=1.0)  # exactly when a model call (or the helper) returns
@example(delay=3.0)  # exactly when tools return
@example(delay=4.0)  # exactly when the sync tool starts (depth 0)
@example(delay=5.0)  # while the sync tool blocks its thread
@example(delay=14.0)  # after the run ended
def test_cancel_from_outside_at_any_moment(
    how: str, depth: int, delay: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = tmp_path / f"example-{next(_examples)}"
    where.mkdir()
    caplog.clear()
    obs = Observer(where, caplog)

    release = threading.Event()

    async def main() -> None:
        tree = busy_tree(depth, release)
        if how == "handle.cancel()":
            out = await obs.run(tree, limits=LIMITS, cancel_after=delay)
        else:
            out = await obs.run(tree, limits=LIMITS, scope_after=delay)
        record_many(HOWS[how], depth, out, "cancelled (cut before the end) / completed (after)")
        try:
            # a cut run ends the moment it is cut: the elapsed time is the delay, or the run's
            # natural length when the cut came after it ended
            obs.verify(
                HOWS[how],
                depth,
                out,
                None,
                limits=LIMITS,
                max_elapsed=max(delay, 13.0),
                record=False,
                abandoned=None,
                release=release.set,
            )
            result = out.result
            assert result is not None
            statuses = {n.path: n.status for n in nodes(result)}
            assert set(statuses.values()) <= {RunStatus.CANCELLED, RunStatus.COMPLETED}, statuses
            if out.cut_at is None:
                assert result.status is RunStatus.COMPLETED
                assert set(statuses.values()) == {RunStatus.COMPLETED}
            if result.status is RunStatus.CANCELLED:
                assert out.cut_at is not None
                assert out.elapsed == pytest.approx(delay, abs=1e-6)
                if how == "handle.cancel()":
                    assert result.error == "the run was cancelled"
                else:  # the exact reason is pinned by test_enclosing_scope_names_its_cause
                    assert result.error is not None
                    assert "enclosing cancel scope" in result.error
            else:  # completed: every agent did
                assert set(statuses.values()) == {RunStatus.COMPLETED}
                node = find_faulty(result, depth)
                assert node is not None and node.output == "busy agent done"
        except BaseException as exc:
            mark_failed(HOWS[how], depth, exc)
            raise

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize("depth", DEPTHS)
async def test_enclosing_scope_names_its_cause(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    """A run cut by an enclosing cancel scope says so: its reason is not the one of
    ``handle.cancel()`` (which nobody called)."""
    release = threading.Event()
    out = await obs.run(busy_tree(depth, release), limits=LIMITS, scope_after=2.0)
    obs.verify(
        HOWS["enclosing cancel scope"],
        depth,
        out,
        None,
        limits=LIMITS,
        max_elapsed=2.0,
        record=False,
        release=release.set,
    )
    assert out.result is not None and out.result.status is RunStatus.CANCELLED
    reasons = {n.path: n.error for n in nodes(out.result) if n.status is RunStatus.CANCELLED}
    try:
        assert all(
            "enclosing cancel scope" in reason and reason != "the run was cancelled"
            for reason in reasons.values()
        ), reasons
    except AssertionError as exc:
        mark_failed(HOWS["enclosing cancel scope"], depth, exc)
        raise
