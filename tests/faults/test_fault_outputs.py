"""Output faults at depth 0, 1 and 2 (issue 34): a typed agent that never gives a valid answer.

The faulty agent must answer a ``Verdict``: it answers with the wrong shape, then with text,
then with a value its output validator rejects, quoting the API key in its reason; past
``output_retries=2`` it ends ``invalid_output``, its last output kept in its error.
Time is virtual (``autojump_clock``).
"""

from __future__ import annotations

from typing import Any

import pytest
from faultkit import (
    CANARY,
    DEPTHS,
    FAULTY,
    Observer,
    chain,
    describe,
    expect,
    find_faulty,
    scripted,
)
from pydantic import BaseModel

from orchestrator import Agent, Limits, OutputContext, OutputRejected, RunStatus
from orchestrator.models import text, tool_call

LIMITS = Limits(timeout=60, tool_timeout=5)
HELPER_LATENCY = 1.0  # virtual seconds: the helper sibling is still running when the fault hits


class Verdict(BaseModel):
    answer: str
    confidence: float


def sourced(ctx: OutputContext, value: Verdict) -> Verdict:
    """Reject a verdict that looked nothing up (this agent never does), saying which key
    the search would have used (a secret in the rejection: it must not leak)."""
    if not ctx.tool_results:
        raise OutputRejected(f"a verdict needs a source: search first (key {CANARY})")
    return value


INVALID = describe(
    "typed answer never valid",
    "the faulty agent must answer a Verdict (output_retries=2): it answers with the wrong shape, "
    "then with text, then a value its output validator rejects, quoting the API key in its "
    "reason",
    order=118,
)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_typed_answer_that_is_never_valid(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    model = scripted(
        tool_call("final_result", {"answer": 5}),
        text("The verdict is yes."),
        tool_call("final_result", {"answer": "yes", "confidence": 0.9}),
    )
    faulty = Agent(
        FAULTY,
        "The agent under test.",
        description="the faulty agent",
        model=model,
        tools=[],
        output_type=Verdict,
        output_validators=[sourced],
    )
    tree = chain(faulty, depth, helper_latency=HELPER_LATENCY)
    out = await obs.run(tree, limits=LIMITS)
    obs.verify(
        INVALID,
        depth,
        out,
        expect("invalid_output")(depth),
        limits=LIMITS,
        max_elapsed=HELPER_LATENCY,
    )
    node = find_faulty(out.result, depth)
    assert node is not None and node.status is RunStatus.INVALID_OUTPUT
    assert node.output is None and node.output_json is None and node.turns == 3
    assert node.error == (
        'the output was rejected 3 times; last output: {"answer": "yes", "confidence": 0.9}'
    )
    rejections = [b for m in node.messages for b in m.content if b.type == "tool_result"]
    assert [r.is_error for r in rejections] == [True, True]  # the two final_result calls
    assert "answer: Input should be a valid string" in rejections[0].content
    assert "search first (key [REDACTED])" in rejections[1].content
