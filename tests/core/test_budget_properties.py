"""Budgets that hold whatever the text (issue 20, item 1): property tests over random texts and
tree shapes.

Each example draws a pool of texts (prose, CJK, Cyrillic, Greek, Arabic, Hebrew, Devanagari,
Thai, emoji with joiners and modifiers, base64, hex, digits, JSON, code, and mixes of them) and a
tree: up to four levels, each agent of a level spawning ``width`` children of the next (tasks
from the pool) at some turn, and calling a tool that returns texts of the pool at others, with
latencies on trio's virtual clock so that many calls are in flight together.

Two FunctionModels play it, one for the root and one for every other agent (the runtime learns
each separately), and bill each request's input with a tokenizer of their own that the runtime
does not see: per character, the most a tokenizer we know of spends on its class (a token per
CJK character, per digit, per punctuation mark, per Cyrillic letter, two per Devanagari or Thai
character, three per emoji, so a token per two characters of base64), times a factor per model.
Output is billed honestly (never past the cap); cost at $3 / $15 per million tokens.

1. The budgets hold within 5%: total billed tokens <= token_budget * 1.05 and cost <=
   cost_budget * 1.05, for any budget while the models bill at most those rates, and for a
   model billing up to four times them (up to a token per UTF-8 byte) when no single call is
   more than a sixtieth of the budget (a call alone in flight is admitted on its estimate: it can
   overshoot by its own misestimate, see docs/context.md).
2. No false budget_exceeded: a run whose real spend (the same tree with no budgets) stays under
   90% of its budgets, and none of whose calls needs more than a tenth of them (its estimate at
   the highest ratio the model showed, plus its output cap, minus what it billed), never ends
   ``budget_exceeded`` anywhere, and does exactly the work it did without budgets.
"""

from __future__ import annotations

import base64
import json
import math
import random
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    RunResult,
    RunStatus,
    Usage,
    run,
    tool,
)
from orchestrator.core.ledger import (
    CALIBRATION_WINDOW,
    MIN_RATIO,
    PROVEN_SPREAD,
    UNPROVEN_WORST,
    Calibration,
    text_units,
)
from orchestrator.models import FunctionModel, ModelRequest, response, text, tool_call

SPAWN = "spawn_subagent"
PRICE_IN, PRICE_OUT = 3.0 / 1e6, 15.0 / 1e6


def price(usage: Usage) -> float:
    return usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT


# ---------------------------------------------------------------------------------------------
# the hostile tokenizer (the test's own: it shares nothing with the runtime's estimate)

_QUARTERS: dict[str, int] = {}


def hostile_quarters(value: str) -> int:
    """Quarter tokens a worst-case tokenizer bills for ``value`` (cached per string: requests
    carry the same transcript texts again and again)."""
    cached = _QUARTERS.get(value)
    if cached is not None:
        return cached
    total = 0
    for ch in value:
        o = ord(ch)
        if o < 0x80:
            if "a" <= ch <= "z" or ch == " ":
                total += 1  # prose: four characters a token
            elif "A" <= ch <= "Z":
                total += 2
            else:
                total += 4  # digits, punctuation, newlines: a token each
        elif o < 0x800:
            total += 4  # Latin with accents, Greek, Cyrillic, Hebrew, Arabic: a token
        elif o < 0x2000:
            total += 8  # Devanagari, Thai, Georgian...: two tokens
        elif o < 0x10000:
            total += 4  # CJK, kana, Hangul, symbols, joiners: a token
        else:
            total += 12  # emoji: three tokens
    if len(_QUARTERS) < 200_000:
        _QUARTERS[value] = total
    return total


def billed_input(request: ModelRequest, factor: float) -> int:
    quarters = hostile_quarters(request.system)
    for t in request.tools:
        quarters += hostile_quarters(t.name) + hostile_quarters(t.description)
        quarters += hostile_quarters(
            json.dumps(dict(t.input_schema), separators=(",", ":"), ensure_ascii=False)
        )
    for m in request.messages:
        for b in m.content:
            if b.type == "text":
                quarters += hostile_quarters(b.text)
            elif b.type == "tool_result":
                quarters += hostile_quarters(b.content)
            elif b.type == "tool_use":
                # as the provider reads it: decoded, not as the escapes of an ASCII wire format
                quarters += hostile_quarters(b.name)
                quarters += hostile_quarters(json.dumps(b.input, ensure_ascii=False))
    return math.ceil(quarters / 4 * factor)


# ---------------------------------------------------------------------------------------------
# random texts

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "it",
    "this",
    "be",
    "are",
    "or",
    "an",
    "which",
    "not",
    "have",
    "model",
    "budget",
    "token",
    "agent",
    "tree",
    "run",
    "call",
    "tool",
    "result",
    "answer",
    "report",
    "source",
    "evidence",
]
RANGES = {
    "cjk": [(0x4E00, 0x9FFF), (0x3041, 0x30FF), (0xAC00, 0xD7A3)],
    "cyrillic": [(0x0410, 0x044F)],
    "greek": [(0x0391, 0x03C9)],
    "arabic": [(0x0621, 0x064A)],
    "hebrew": [(0x05D0, 0x05EA)],
    "devanagari": [(0x0905, 0x0939), (0x093E, 0x094C)],
    "thai": [(0x0E01, 0x0E2E), (0x0E30, 0x0E3A)],
}
KINDS = (*RANGES, "prose", "emoji", "base64", "hex", "digits", "json", "code")


def make_text(kind: str, n: int, rnd: random.Random) -> str:
    if kind in RANGES:
        out = []
        for i in range(n):
            lo, hi = rnd.choice(RANGES[kind])
            out.append(" " if kind != "cjk" and i % 7 == 6 else chr(rnd.randint(lo, hi)))
        return "".join(out)
    if kind == "prose":
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < n:
            w = rnd.choice(WORDS)
            words.append(w.capitalize() + "," if rnd.random() < 0.05 else w)
        return " ".join(words)[:n] + "."
    if kind == "emoji":
        parts = []
        for _ in range(max(1, n // 3)):
            e = chr(rnd.randint(0x1F300, 0x1F64F))
            r = rnd.random()
            if r < 0.2:
                e += "\u200d" + chr(rnd.randint(0x1F466, 0x1F469))  # a joined sequence
            elif r < 0.4:
                e += chr(rnd.randint(0x1F3FB, 0x1F3FF))  # a skin tone
            elif r < 0.5:
                e = chr(rnd.choice([0x2764, 0x2600, 0x2705])) + "\ufe0f"
            parts.append(e)
        return " ".join(parts)
    if kind == "base64":
        return base64.b64encode(rnd.randbytes(max(3, n * 3 // 4))).decode()
    if kind == "hex":
        return rnd.randbytes(max(1, n // 2)).hex()
    if kind == "digits":
        return "".join(rnd.choice("0123456789") for _ in range(n))
    if kind == "json":
        value: dict[str, Any] = {}
        while len(json.dumps(value)) < n:
            key = rnd.choice(WORDS) + str(rnd.randint(0, 99))
            value[key] = rnd.choice(
                [rnd.randint(-(10**6), 10**6), rnd.random(), rnd.choice(WORDS), [1, 2, 3], None]
            )
        return json.dumps(value)
    # code
    lines = []
    while sum(len(x) + 1 for x in lines) < n:
        i, j = rnd.randint(0, 9), rnd.randint(0, 999)
        lines.append(
            rnd.choice(
                [
                    f"def f_{i}(x, y={j}):",
                    f"    if x[{i}] > {j}:",
                    f"        return {{'k{i}': x, 'v': y * {j}}}",
                    f"for k in range({j}):\n    total += k ** {i}",
                ]
            )
        )
    return "\n".join(lines)


def text_specs(longest: int) -> st.SearchStrategy[tuple[list[tuple[str, int]], int]]:
    segment = st.tuples(st.sampled_from(KINDS), st.integers(5, longest))
    return st.tuples(st.lists(segment, min_size=1, max_size=3), st.integers(0, 2**32 - 1))


def build_text(spec: tuple[list[tuple[str, int]], int]) -> str:
    segments, seed = spec
    rnd = random.Random(seed)
    return "\n".join(make_text(kind, n, rnd) for kind, n in segments)


# ---------------------------------------------------------------------------------------------
# random trees


@dataclass
class Level:
    width: int
    """Children each agent of the level above spawns (level 0: the root alone)."""
    tool_turns: list[list[int]]
    """Before and after its spawn turn: the texts its tool calls fetch, per turn."""
    spawn_at: int
    answer: int
    latency: float
    max_output: int


@dataclass
class Tree:
    texts: list[str]
    levels: list[Level]
    instructions: int
    prompt: int
    factors: tuple[float, float]
    """Billing factor of the root's model and of everyone else's."""
    max_concurrency: int | None

    def agents(self) -> int:
        total, count = 0, 1
        for level in self.levels:
            count *= level.width
            total += count
        return total


def level_st(n_texts: int, min_width: int) -> st.SearchStrategy[Level]:
    ids = st.integers(0, n_texts - 1)
    return st.builds(
        Level,
        width=st.integers(min_width, 12),
        tool_turns=st.lists(st.lists(ids, min_size=1, max_size=3), max_size=2),
        spawn_at=st.integers(0, 2),
        answer=ids,
        latency=st.sampled_from([0.0, 0.5, 3.0]),
        max_output=st.sampled_from([64, 256, 1024]),
    )


@st.composite
def trees(
    draw: st.DrawFn,
    factors: st.SearchStrategy[tuple[float, float]],
    *,
    min_depth: int = 0,
    min_width: int = 1,
    longest: int = 500,
) -> Tree:
    specs = draw(st.lists(text_specs(longest), min_size=3, max_size=10))
    texts = [build_text(spec) for spec in specs]
    depth = draw(st.sampled_from([d for d in (1, 2, 3, 2, 0) if d >= min_depth]))
    levels = [draw(level_st(len(texts), min_width)) for _ in range(depth + 1)]
    levels[0].width = 1
    tree = Tree(
        texts,
        levels,
        draw(st.integers(0, len(texts) - 1)),
        draw(st.integers(0, len(texts) - 1)),
        draw(factors),
        draw(st.sampled_from([None, 2, 8, 64])),
    )
    while tree.agents() > 40:  # keep the examples fast: trim the widest level
        widest = max(tree.levels[1:], key=lambda lv: lv.width)
        widest.width -= 1
    return tree


REALISTIC = st.tuples(st.sampled_from([0.3, 0.6, 1.0]), st.sampled_from([0.3, 0.6, 1.0]))
HOSTILE = st.tuples(st.sampled_from([0.6, 1.0]), st.sampled_from([1.5, 2.5, 4.0]))


# ---------------------------------------------------------------------------------------------
# playing a tree


@tool
async def fetch(i: int, turn: int) -> str:
    """Fetch one text of the pool.

    Args:
        i: which text
        turn: the turn asking (so that no two turns repeat a call)
    """
    return POOL[i]


POOL: list[str] = []


@dataclass
class Call:
    model: str
    estimate: int
    input: int
    output: int
    cap: int
    cost: float


@dataclass
class Player:
    tree: Tree
    calls: list[Call] = field(default_factory=list)

    def model(self, name: str, factor: float) -> FunctionModel:
        def play(req: ModelRequest) -> Any:
            return self.answer(req, name, factor)

        async def play_later(req: ModelRequest) -> Any:
            level = self.tree.levels[req.agent.depth]
            if level.latency:
                await trio.sleep(level.latency)
            return play(req)

        return FunctionModel(play_later, name=name, prices=price)

    def answer(self, req: ModelRequest, name: str, factor: float) -> Any:
        depth = req.agent.depth
        level = self.tree.levels[depth]
        turn = req.turn_index()
        steps: list[tuple[str, Any]] = [("tools", ids) for ids in level.tool_turns]
        if depth + 1 < len(self.tree.levels):
            steps.insert(min(level.spawn_at, len(steps)), ("spawn", None))
        kind, arg = steps[turn] if turn < len(steps) else ("answer", level.answer)
        if kind == "tools":
            blocks: list[Any] = [tool_call("fetch", {"i": i, "turn": turn}) for i in arg]
            said = ""
        elif kind == "spawn":
            width = self.tree.levels[depth + 1].width
            base = zlib.crc32(req.agent.path.encode()) % len(self.tree.texts)
            blocks = [
                tool_call(
                    SPAWN,
                    {"agent": f"L{depth + 1}", "task": self.tree.texts[(base + i) % len(POOL)]},
                )
                for i in range(width)
            ]
            said = ""
        else:
            blocks = [text(self.tree.texts[arg][:400])]
            said = self.tree.texts[arg][:400]
        calls = sum(1 for b in blocks if b.type == "tool_use")
        out = min(req.max_tokens, math.ceil(hostile_quarters(said) / 4) + 12 * calls + 1)
        usage = Usage(input_tokens=billed_input(req, factor), output_tokens=out)
        self.calls.append(
            Call(name, req.input_tokens_estimate, usage.input_tokens, out, req.max_tokens, 0.0)
        )
        self.calls[-1].cost = price(usage)
        return response(*blocks, usage=usage)


def agents_of(tree: Tree, root_model: FunctionModel, kids_model: FunctionModel) -> Agent:
    """One definition per level, each the only subagent of the level above."""
    child: Agent | None = None
    for depth in reversed(range(len(tree.levels))):
        child = Agent(
            f"L{depth}",
            tree.texts[tree.instructions][:300] or "Work.",
            description=f"level {depth}",
            tools=[fetch],
            subagents=[child] if child is not None else (),
            max_output_tokens=tree.levels[depth].max_output,
            model=root_model if depth == 0 else kids_model,
        )
    assert child is not None
    return child


def play(
    tree: Tree, token_budget: int | None, cost_budget: float | None
) -> tuple[RunResult, Player]:
    POOL[:] = tree.texts
    player = Player(tree)
    root_model = player.model("root-model", tree.factors[0])
    kids_model = player.model("kids-model", tree.factors[1])
    tree_root = agents_of(tree, root_model, kids_model)
    widest = max((lv.width for lv in tree.levels), default=1)
    limits = Limits(
        token_budget=token_budget,
        cost_budget_usd=cost_budget,
        max_depth=max(len(tree.levels) - 1, 0),
        max_children=max(widest, 1),
        max_agents=tree.agents() + 1,
        max_turns=10,
        repeat_limit=50,
        max_consecutive_errors=50,
        max_concurrency=tree.max_concurrency,
    )
    out: dict[str, RunResult] = {}

    async def main() -> None:
        with trio.fail_after(50_000):
            out["result"] = await run(tree_root, tree.texts[tree.prompt], limits=limits)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return out["result"], player


def nodes(result: RunResult) -> list[RunResult]:
    found = [result]
    for child in result.children:
        found.extend(nodes(child))
    return found


@dataclass
class Spend:
    tokens: int
    cost: float
    largest_kid_estimate: int
    """The largest input estimate of a call by an agent below the root."""
    largest_kid_cost: float
    most_over_tokens: int
    """The most any call's reservation can exceed what it billed (its estimate at the highest
    ratio its model showed, at least 1, plus its cap, minus its billed tokens)."""
    most_over_cost: float


def measure(tree: Tree) -> Spend:
    """The tree's real spend with no budget, and the sizes of its calls."""
    result, player = play(tree, 10**12, None)  # not the default budget: none that binds
    assert all(n.status is not RunStatus.BUDGET_EXCEEDED for n in nodes(result))
    ratios: dict[str, float] = defaultdict(lambda: 1.0)
    for c in player.calls:
        if c.estimate > 0:
            ratios[c.model] = max(ratios[c.model], c.input / c.estimate)
    over_tokens, over_cost = 0, 0.0
    for c in player.calls:
        expected = math.ceil(c.estimate * ratios[c.model]) + 1
        over_tokens = max(over_tokens, expected + c.cap - (c.input + c.output))
        over_cost = max(
            over_cost, price(Usage(input_tokens=expected, output_tokens=c.cap)) - c.cost
        )
    return Spend(
        result.usage.billed_tokens,
        result.usage.cost_usd,
        max((c.estimate for c in player.calls if c.model == "kids-model"), default=0),
        max(
            (
                price(Usage(input_tokens=c.estimate))
                for c in player.calls
                if c.model == "kids-model"
            ),
            default=0.0,
        ),
        over_tokens,
        over_cost,
    )


# ---------------------------------------------------------------------------------------------
# the properties

SETTINGS = settings(
    max_examples=35,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def assert_holds(tree: Tree, token_budget: int, cost_budget: float) -> None:
    try:
        result, _ = play(tree, token_budget, cost_budget)
    except ConfigurationError as exc:  # refused before any call: one call can never fit
        assert "no model call could ever fit" in str(exc)
        event("refused before it started")
        return
    billed = result.usage.billed_tokens
    assert billed <= token_budget * 1.05, f"{billed} tokens billed against {token_budget}"
    assert result.usage.cost_usd <= cost_budget * 1.05, (
        f"${result.usage.cost_usd:.6f} billed against ${cost_budget:.6f}"
    )
    statuses = {n.status for n in nodes(result)}
    event(f"budget_exceeded somewhere: {RunStatus.BUDGET_EXCEEDED in statuses}")
    event(f"agents: {min(len(nodes(result)), 20)}{'+' if len(nodes(result)) >= 20 else ''}")


@SETTINGS
@given(tree=trees(REALISTIC), token_share=st.floats(0.01, 1.5), cost_share=st.floats(0.01, 1.5))
def test_token_and_cost_budgets_hold_within_five_percent_for_any_text_and_tree(
    tree: Tree, token_share: float, cost_share: float
) -> None:
    spend = measure(tree)
    assert_holds(tree, max(1, int(spend.tokens * token_share)), spend.cost * cost_share)


@SETTINGS
@given(
    tree=trees(HOSTILE, min_depth=1, min_width=4, longest=120),
    token_share=st.floats(0.01, 1.0),
    cost_share=st.floats(0.01, 1.5),
)
def test_budgets_hold_within_five_percent_when_a_model_bills_up_to_four_times_the_estimate(
    tree: Tree, token_share: float, cost_share: float
) -> None:
    """The children's model bills up to 4x the rates (the root's, at most the rates): its
    first calls are in flight before anything was learned about it. A call alone in flight
    can overshoot by its own misestimate (up to 3x its estimate): the budgets here are at least
    60 times the largest estimate of a child's call, so that one call's misestimate stays
    inside the 5%."""
    spend = measure(tree)
    tokens = max(int(spend.tokens * token_share), 60 * spend.largest_kid_estimate)
    cost = max(spend.cost * cost_share, 60 * spend.largest_kid_cost)
    event(f"token budget binds: {tokens < spend.tokens}")
    assert_holds(tree, tokens, cost)


@SETTINGS
@given(
    tree=trees(st.one_of(REALISTIC, HOSTILE)),
    token_room=st.floats(0.0, 0.5),
    cost_room=st.floats(0.0, 0.5),
)
def test_a_run_whose_real_spend_stays_under_90_percent_never_ends_budget_exceeded(
    tree: Tree, token_room: float, cost_room: float
) -> None:
    spend = measure(tree)
    tokens = math.ceil(max(spend.tokens / 0.9, 10 * spend.most_over_tokens) * (1 + token_room))
    cost = max(spend.cost / 0.9, 10 * spend.most_over_cost) * (1 + cost_room)
    result, _ = play(tree, tokens, cost)
    refused = [(n.path, n.error) for n in nodes(result) if n.status is RunStatus.BUDGET_EXCEEDED]
    assert not refused, f"budget_exceeded with {spend.tokens}/{tokens} tokens: {refused[:3]}"
    assert result.usage.billed_tokens == spend.tokens  # the same work as without budgets


# ---------------------------------------------------------------------------------------------
# the estimate and the calibration themselves


@settings(max_examples=300, deadline=None, database=None)
@given(value=st.one_of(st.text(), text_specs(2_000).map(build_text)))
def test_the_estimate_never_falls_below_the_costliest_tokenizer_or_a_quarter_token_a_byte(
    value: str,
) -> None:
    units = text_units(value)  # quarter tokens
    assert units >= hostile_quarters(value)
    assert units >= len(value.encode("utf-8", "surrogatepass"))  # UNPROVEN_WORST's premise


def test_lowercase_prose_is_estimated_as_characters_over_four_and_blobs_higher() -> None:
    prose = "the ledger holds the budget whatever the text says and learns as it goes " * 20
    assert text_units(prose) == len(prose)
    blob = base64.b64encode(random.Random(1).randbytes(3_000)).decode()
    assert text_units(blob) / 4 >= len(blob) / 2  # at least a token per two characters
    assert text_units("漢字かなカナ한글") == 6 * 8  # a token and a half each


def test_a_calibration_rises_at_once_and_falls_only_after_a_window_of_lower_calls() -> None:
    c = Calibration()
    assert (c.ratio, c.worst) == (1.0, UNPROVEN_WORST)
    c.learn(10, 50)  # too small a call to teach anything
    assert c.calls == 0 and c.worst == UNPROVEN_WORST
    c.learn(1_000, 600)
    assert c.ratio == 1.0 and c.worst == PROVEN_SPREAD  # below the estimate: not yet believed
    c.learn(1_000, 2_500)
    assert c.ratio == 2.5 and c.worst == PROVEN_SPREAD * 2.5
    for _ in range(CALIBRATION_WINDOW - 1):
        c.learn(1_000, 600)
        assert c.ratio == 2.5  # the high call is still in the window
    c.learn(1_000, 600)
    assert c.ratio == 0.6  # a whole window of calls billed 0.6: believed
    for _ in range(CALIBRATION_WINDOW):
        c.learn(1_000, 1)
    assert c.ratio == MIN_RATIO
