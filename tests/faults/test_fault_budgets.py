"""Budgets that hold whatever the text (issue 20, item 1).

The faulty agent spawns 200 workers at once; each reads a 2,500-character passage in one
script (CJK, Cyrillic, Devanagari, emoji, base64, digits, JSON) and answers. Their model bills
every character as the costliest tokenizer we know would (a token per CJK or Cyrillic character,
per digit or punctuation mark, two per Devanagari character, three per emoji: a token per two
characters of base64), up to twelve times the old characters / 4 estimate, which let these
runs spend 2.14 times their token budget. The ledger's estimate now errs high per character
class and learns what each model bills, and the calls in flight together hold their worst
case: the run spends at most 5% past either budget. A run whose real spend stays under 90% of
its budgets is never refused.
"""

from __future__ import annotations

import base64
import json
import math
import random
from typing import Any

import pytest
import trio
from faultkit import FAULTY, Observer, chain, describe, expect, find_faulty, nodes, spawn, turn_of

from orchestrator import Agent, Limits, RunStatus, Usage, tool
from orchestrator.models import FunctionModel, ModelRequest, response, text, tool_call

WORKERS = 200
PASSAGE_CHARS = 2_500
TOKEN_BUDGET = 300_000
COST_BUDGET = 1.00
LATENCY = 1.0


def passage(script: str, n: int) -> str:
    """``n`` characters of ``script``, the same for every run (seeded by the script)."""
    rnd = random.Random(f"{script}-{n}")
    if script == "base64":
        return base64.b64encode(rnd.randbytes(n * 3 // 4)).decode()[:n]
    if script == "digits":
        return "".join(rnd.choice("0123456789") for _ in range(n))
    if script == "json":
        rows = [{"id": i, "price": rnd.randint(0, 99_999), "ok": i % 3 == 0} for i in range(n)]
        return json.dumps(rows)[:n]
    if script == "emoji":
        return "".join(chr(rnd.randint(0x1F300, 0x1F64F)) for _ in range(n))
    low, high = {
        "cjk": (0x4E00, 0x9FFF),
        "cyrillic": (0x0410, 0x044F),
        "devanagari": (0x0905, 0x0939),
    }[script]
    return "".join(chr(rnd.randint(low, high)) for _ in range(n))


def costliest_tokens(value: str) -> float:
    """What the costliest tokenizer we know of bills for ``value`` (the test's own count)."""
    total = 0.0
    for ch in value:
        o = ord(ch)
        if o < 0x80:
            total += 0.25 if ("a" <= ch <= "z" or ch == " ") else 0.5 if "A" <= ch <= "Z" else 1.0
        elif o < 0x800:
            total += 1.0
        elif o < 0x2000:
            total += 2.0
        elif o < 0x10000:
            total += 1.0
        else:
            total += 3.0
    return total


_BILLED: dict[str, float] = {}


def billed_input(request: ModelRequest) -> int:
    """Every text of the request, as the provider would count it."""
    texts = [request.system]
    for t in request.tools:
        texts += [t.name, t.description, json.dumps(dict(t.input_schema), ensure_ascii=False)]
    for m in request.messages:
        for b in m.content:
            if b.type == "text":
                texts.append(b.text)
            elif b.type == "tool_result":
                texts.append(b.content)
            elif b.type == "tool_use":
                texts += [b.name, json.dumps(b.input, ensure_ascii=False)]
    total = 0.0
    for value in texts:
        if value not in _BILLED:
            _BILLED[value] = costliest_tokens(value)
        total += _BILLED[value]
    return math.ceil(total)


def price(usage: Usage) -> float:
    return usage.input_tokens * 2.5e-6 + usage.output_tokens * 12.5e-6


def hostile_model(script: str) -> FunctionModel:
    """The faulty agent and its workers: spawn the workers, read one passage, answer."""

    async def fn(request: ModelRequest) -> Any:
        await trio.sleep(LATENCY)
        turn = turn_of(request)
        if request.agent.name == FAULTY:
            if turn == 0:
                blocks: list[Any] = [
                    spawn("worker", f"Summarize passage {i}.") for i in range(WORKERS)
                ]
            else:
                blocks = [text(f"{FAULTY} read {WORKERS} summaries.")]
        elif turn == 0:
            n = int(request.messages[0].text.split()[-1].rstrip("."))
            blocks = [tool_call("read_passage", {"n": n})]
        else:
            blocks = [text("A short summary of the passage.")]
        out = min(request.max_tokens, 12 * len(blocks) + 8)  # honest: never past the cap
        usage = Usage(input_tokens=billed_input(request), output_tokens=out)
        return response(*blocks, usage=usage)  # priced by the model's prices

    return FunctionModel(fn, name=f"costly-{script}", prices=price)


def fan_out_tree(script: str, depth: int) -> Agent:
    @tool
    async def read_passage(n: int) -> str:
        """Read one passage.

        Args:
            n: which passage
        """
        return passage(script, PASSAGE_CHARS)

    model = hostile_model(script)
    worker = Agent(
        "worker",
        "Read the passage you are given and summarize it in one line.",
        description="reads and summarizes one passage",
        model=model,
        tools=[read_passage],
        max_output_tokens=256,
    )
    faulty = Agent(
        FAULTY,
        "Split the reading among workers, then report.",
        description="the faulty agent",
        model=model,
        tools=[],
        subagents=[worker],
        limits=Limits(max_children=WORKERS),
        max_output_tokens=4_096,
    )
    return chain(faulty, depth)


FAN_OUT = describe(
    "200 parallel children on text billed far past characters / 4",
    f"token_budget={TOKEN_BUDGET:,} and cost_budget_usd={COST_BUDGET:.2f} for the run, "
    "max_concurrency=200; the faulty agent spawns 200 workers at once, each reads a "
    f"{PASSAGE_CHARS:,}-character passage (CJK, Cyrillic, Devanagari, emoji, base64, digits "
    "or JSON) billed as the costliest tokenizer we know would (2 to 12 times characters / 4); "
    "the run spends at most 5% past either budget, and the agents that could not fit end "
    "budget_exceeded",
    order=304,
)
ROOMY = describe(
    "the same fan-out with room to spare",
    "the same 200 workers under budgets their real spend fills to about 85%: the estimate errs "
    "high, but no agent is refused",
    order=305,
)

SCRIPTS = ("cjk", "cyrillic", "devanagari", "emoji", "base64", "digits", "json")
CASES = [("cjk", 0), ("cjk", 2), *((script, 1) for script in SCRIPTS)]


def run_limits(tokens: int, cost: float) -> Limits:
    return Limits(
        token_budget=tokens,
        cost_budget_usd=cost,
        max_agents=WORKERS + 5,
        max_concurrency=WORKERS,
        timeout=3_600,
    )


@pytest.mark.parametrize(("script", "depth"), CASES)
async def test_two_hundred_parallel_children_on_costly_text_stay_within_five_percent_of_the_budgets(
    script: str, depth: int, obs: Observer, autojump_clock: Any
) -> None:
    limits = run_limits(TOKEN_BUDGET, COST_BUDGET)
    out = await obs.run(fan_out_tree(script, depth), limits=limits)
    assert out.result is not None
    usage = out.result.usage
    print(
        f"{script} at depth {depth}: {usage.billed_tokens:,} tokens of {TOKEN_BUDGET:,}, "
        f"${usage.cost_usd:.3f} of ${COST_BUDGET:.2f}"
    )
    obs.verify(
        FAN_OUT,
        depth,
        out,
        # the faulty agent cannot fit its last call; the root may still fit its own
        expect("budget_exceeded", ["budget_exceeded", "completed"])(depth),
        # the documented bound: 5% past the budget
        limits=run_limits(int(TOKEN_BUDGET * 1.05), COST_BUDGET * 1.05),
        faulty_limits=Limits(max_children=WORKERS),
        max_elapsed=3_600,
        record=script == "cjk",  # one row per depth in the document: the CJK case
    )
    assert usage.billed_tokens <= TOKEN_BUDGET * 1.05
    assert usage.cost_usd <= COST_BUDGET * 1.05
    workers = [n for n in nodes(out.result) if n.agent_name == "worker"]
    assert len(workers) == WORKERS  # every worker started, and either finished or was refused
    done = [n for n in workers if n.status is RunStatus.COMPLETED]
    refused = [n for n in workers if n.status is RunStatus.BUDGET_EXCEEDED]
    assert len(done) + len(refused) == WORKERS
    assert done, "the ledger refused every worker: the estimate is far too high"


@pytest.mark.parametrize("depth", [0, 1, 2])
async def test_the_same_fan_out_under_budgets_it_fills_to_85_percent_is_never_refused(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    roomy = run_limits(10**9, 10**6)
    first = await obs.run(fan_out_tree("cjk", depth), limits=roomy)
    assert first.result is not None and first.result.status is RunStatus.COMPLETED
    spent = first.result.usage
    obs.verify(
        ROOMY,
        depth,
        first,
        expect("completed")(depth),
        limits=roomy,
        faulty_limits=Limits(max_children=WORKERS),
        max_elapsed=3_600,
        record=False,
    )

    again = Observer(obs.tmp_path / "again", obs.caplog)
    (obs.tmp_path / "again").mkdir()
    limits = run_limits(math.ceil(spent.billed_tokens / 0.85), spent.cost_usd / 0.85)
    out = await again.run(fan_out_tree("cjk", depth), limits=limits)
    again.verify(
        ROOMY,
        depth,
        out,
        expect("completed")(depth),
        limits=limits,
        faulty_limits=Limits(max_children=WORKERS),
        max_elapsed=3_600,
    )
    assert out.result is not None
    assert all(n.status is RunStatus.COMPLETED for n in nodes(out.result))
    # the same calls; only the budget notes after spawn results name other figures (what is
    # left of another budget), a few characters longer or shorter each
    spawns = sum(len(n.children) for n in nodes(out.result))
    assert abs(out.result.usage.billed_tokens - spent.billed_tokens) <= 32 * spawns
    faulty = find_faulty(out.result, depth)
    assert faulty is not None and len(faulty.children) == WORKERS
