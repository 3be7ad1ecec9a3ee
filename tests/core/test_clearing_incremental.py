"""Clearing old tool results incrementally: the same transcript as the whole-list algorithm.

``ContextPolicy(clear_results_after=N)`` used to re-read the whole transcript before every
model call (``clear_old_results``), so a 4,000-turn run spent most of its CPU there. The runtime
now follows each agent's transcript (``ResultClearing``) and reads only what each turn added.
These tests run real trees through ``run()`` and check, at every model call, that the transcript
the model is sent is exactly what ``clear_old_results`` (kept as the reference, and still used
for checkpoint requests) makes of the previous one plus the new messages, and that the agent's
input estimate agrees with a recount of that transcript.
"""

from __future__ import annotations

import itertools
import re
import statistics
import time
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import Agent, Limits, Message, RunStatus, ToolResultBlock, run, tool
from orchestrator.core.compaction import (
    CLEARED_PREFIX,
    SUMMARY_REQUEST,
    ContextPolicy,
    ResultClearing,
    clear_old_results,
)
from orchestrator.core.ledger import text_units
from orchestrator.core.state import _message_chars
from orchestrator.models import FunctionModel, ModelRequest, ScriptedModel, text, tool_call

INSTRUCTIONS = "Work through the plan, one step per turn."


@tool
async def fetch(step: int, i: int, size: int) -> str:
    """Fetch one piece.

    Args:
        step: the turn
        i: the call's position
        size: characters to return
    """
    if size == 7:  # a result that already reads like a cleared one: never cleared again
        return f"{CLEARED_PREFIX} looks cleared already ({step}.{i})"
    if size == 13:
        raise ValueError(f"fetch {step}.{i} failed")
    return f"piece {step}.{i} " + "x" * size


HELPER = Agent(
    "helper",
    "Answer at once.",
    description="answers at once",
    model=ScriptedModel([text("the helper's answer, which clearing keeps")]),
    tools=[],
)

# a turn: its calls, each (size, is a spawn); a plan: its turns
call_st = st.tuples(st.sampled_from([0, 7, 13, 40, 300, 1_200]), st.booleans())
plan_st = st.lists(st.lists(call_st, min_size=1, max_size=3), min_size=1, max_size=30)


class Reference:
    """What the model must be sent: the old algorithm applied to the previous transcript plus
    what was added since, and the estimate recounted from that transcript."""

    def __init__(self, policy: ContextPolicy) -> None:
        self.policy = policy
        self.fixed = (0, 10**9)
        self.transcript: list[Message] = []
        self.checked = 0
        self.problems: list[str] = []

    def check(self, request: ModelRequest) -> None:
        sent = list(request.messages)
        last = sent[-1].content[-1] if sent and sent[-1].content else None
        if getattr(last, "text", None) == SUMMARY_REQUEST:
            return  # a checkpoint request: built from a copy, the transcript is not changed
        if not self.transcript or sent[0] != self.transcript[0]:
            self.transcript = []  # compacted: the agent continues from a fresh transcript
        after, batch = self.policy.clear_results_after, self.policy.clear_batch
        assert after is not None
        expected, _ = clear_old_results(
            self.transcript + sent[len(self.transcript) :], after, batch
        )
        if sent != expected:
            self.problems.append(f"call {self.checked}: transcript differs from the reference")
        # estimate = (fixed + transcript size) // 4 + 1, with the same fixed share (the
        # instructions and tools) at every call: each call narrows the fixed shares that fit
        size = sum(_message_chars(m) for m in expected)
        low = 4 * (request.input_tokens_estimate - 1) - size
        self.fixed = (max(self.fixed[0], low), min(self.fixed[1], low + 3))
        if self.fixed[0] > self.fixed[1]:
            self.problems.append(f"call {self.checked}: the estimate does not fit a recount")
        self.transcript = expected
        self.checked += 1


def planner(plan: list[list[tuple[int, bool]]], reference: Reference, same_ids: bool) -> Any:
    def answer(request: ModelRequest) -> Any:
        if request.agent.name != "root":
            return text("unused")
        reference.check(request)
        # steps done before the last compaction, as its summary says, plus the turns since
        done = re.search(r"steps done (\d+)", request.messages[0].text)
        step = (int(done.group(1)) if done else 0) + request.turn_index()
        last = request.messages[-1].content[-1] if request.messages[-1].content else None
        if getattr(last, "text", None) == SUMMARY_REQUEST:
            return text(f"Checkpoint: steps done {step}.")
        if step >= len(plan):
            return text("done")
        calls = []
        for i, (size, spawns) in enumerate(plan[step]):
            # same_ids: every turn reuses the ids of the turn before (a model may)
            call_id = f"call_{i}" if same_ids else f"call_{step}_{i}"
            if spawns:
                calls.append(
                    tool_call("spawn_subagent", {"agent": "helper", "task": "answer"}, id=call_id)
                )
            else:
                calls.append(tool_call("fetch", {"step": step, "i": i, "size": size}, id=call_id))
        return calls

    return answer


@settings(max_examples=60, deadline=None)
@given(
    plan=plan_st,
    after=st.integers(1, 5),
    batch=st.integers(1, 5),
    compact_at=st.one_of(st.none(), st.integers(1_000, 3_000)),
    same_ids=st.booleans(),
)
def test_incremental_clearing_sends_exactly_what_the_whole_transcript_algorithm_made(
    plan: list[list[tuple[int, bool]]],
    after: int,
    batch: int,
    compact_at: int | None,
    same_ids: bool,
) -> None:
    policy = ContextPolicy(
        clear_results_after=after,
        clear_batch=batch,
        compact_at_tokens=compact_at,
        compact_at_fraction=None,
    )
    root = Agent(
        "root",
        INSTRUCTIONS,
        tools=[fetch],
        subagents=[HELPER],
        context=policy,
        max_output_tokens=64,
    )
    reference = Reference(policy)
    model = FunctionModel(planner(plan, reference, same_ids))

    async def main() -> Any:
        return await run(
            root,
            "Follow the plan.",
            model=model,
            limits=Limits(
                max_turns=len(plan) * 2 + 5,
                repeat_limit=1_000,
                max_consecutive_errors=1_000,
                max_children=1_000,
                max_agents=1_000,
                token_budget=10**9,
            ),
        )

    result = trio.run(main)
    assert result.status is RunStatus.COMPLETED, result.error
    assert reference.checked >= len(plan) + 1
    assert reference.problems == []


def test_clearing_follows_a_replaced_transcript_from_its_start() -> None:
    clearing = ResultClearing(after=1, batch=1)
    call = tool_call("fetch", {"step": 0, "i": 0, "size": 1}, id="a")
    first = [Message.user("task"), Message.assistant(call)]
    assert clearing.clear(first) == (0, 0)
    long = "long result " * 10
    replaced = [  # not the list it followed (compaction swaps the list): read from the start
        Message.user("task"),
        Message.assistant(call),
        Message("user", (ToolResultBlock("a", long),)),
        Message.assistant("next"),
    ]
    expected, cleared = clear_old_results(list(replaced), 1, 1)
    placeholder = expected[2].content[0]
    assert isinstance(placeholder, ToolResultBlock)
    assert placeholder.content.startswith(CLEARED_PREFIX)
    assert clearing.clear(replaced) == (1, text_units(long) - text_units(placeholder.content))
    assert replaced == expected and cleared == 1
    # the same list, grown by a turn: the new result is due a turn later, as in the reference
    replaced += [Message("user", (ToolResultBlock("b", long),)), Message.assistant("more")]
    expected, _ = clear_old_results(list(replaced), 1, 1)
    assert clearing.clear(replaced)[0] == 1
    assert replaced == expected
    assert clearing.clear([*replaced]) == (0, 0)  # a copy: read again, nothing left to clear


def test_a_late_turn_with_clearing_costs_about_what_an_early_one_does() -> None:
    # the whole-list algorithm made turn 1,500 of this run ~30x dearer than turn 100; reading
    # only what each turn added keeps them alike (a generous bound: the machine may be busy)
    turns, stamps = 1_500, []

    def answer(request: ModelRequest) -> Any:
        stamps.append(time.process_time())
        step = request.turn_index()
        if step < turns:
            return tool_call("fetch", {"step": step, "i": 0, "size": 2_000}, id=f"c{step}")
        return text("done")

    policy = ContextPolicy(clear_results_after=5, clear_batch=4, compact_at_fraction=None)
    agent = Agent("root", INSTRUCTIONS, tools=[fetch], context=policy, model=FunctionModel(answer))
    limits = Limits(max_turns=turns + 1, repeat_limit=turns + 1, token_budget=10**12)
    result = trio.run(lambda: run(agent, "Go.", limits=limits))
    assert result.status is RunStatus.COMPLETED, result.error
    per_turn = [b - a for a, b in itertools.pairwise(stamps)]
    early = statistics.median(per_turn[50:150])
    late = statistics.median(per_turn[-100:])
    assert late < 5 * early, f"turn CPU grew from {early * 1e6:.0f} to {late * 1e6:.0f} µs"
