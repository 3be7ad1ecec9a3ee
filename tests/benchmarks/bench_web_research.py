"""The web research tree's tokens and cost for a three-part question, lead and researchers apart.

``agents/web_research.py`` as a person runs it (its models, prompts, hosted tools and typed
findings), through the real :class:`AnthropicModel` (the official SDK, over HTTP) against the
local fake Messages API with its realistic prompt cache, answered by tests/support/web_tree.py's
simulated Claude: the lead spawns three researchers in one turn; each searches once (5 results),
fetches two pages and answers with two claims; the lead writes the answer from their findings.

Where the sizes come from (the fake counts tokens as characters / 4):

- a fetched page: ``--page-chars`` 10,000 characters, about 2,500 tokens: the "average web
  page (10 kB)" of Anthropic's web fetch tool documentation;
- a search result: ``--result-chars`` 2,000 characters of encrypted content each, 5 results, so
  about 2,500 tokens a search: an assumption (no published figure; the content is opaque);
- within one answer the API bills the hosted results again on each later sampling iteration
  ("search results count towards input tokens on every subsequent iteration"):
  ``extra_input_tokens``, uncached;
- each claim ``--claim-chars`` 400 characters (about 100 tokens), so the lead's answer is about
  six claims long; prompts and tool schemas are the tree's own.

Prices are the price table's (claude-sonnet-5-5 for the lead, claude-haiku-5-5 for researchers,
searches at $10 per 1,000, fetches free). "caching on" is the adapter's default
(``prompt_caching``: cache breakpoints, sibling warm-up) on a fake whose smallest cacheable
prefix is ``--cache-minimum`` 1,024 tokens (the documented minimum of Sonnet models; Haiku
models' is larger, which the fake's one setting does not model); "caching off" the same tree
on a fake that caches nothing and a model that declares no cache, for comparison; "caching
on, a retry" the first with one researcher citing a URL it never got, rejected once and given
again without it (what a checked citation costs when it fails). The figures are deterministic (no timing): one run per variant,
repeated ``--repeat`` times to show they do not move.

Usage: ``python tests/benchmarks/bench_web_research.py [--smoke]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # for tests/support
from _common import emit, machine, table  # noqa: E402
from support.fake_messages_server import FakeMessagesServer  # noqa: E402
from support.web_tree import WebTreeResponder  # noqa: E402

from orchestrator import Agent, RunResult, run  # noqa: E402
from orchestrator.core.treeref import load_tree_file  # noqa: E402
from orchestrator.models.anthropic import AnthropicModel  # noqa: E402

WEB = HERE.parents[1] / "agents" / "web_research.py"
API_KEY = "bench-key-not-secret-0000"
QUESTION = "Which is the tallest building in Europe, when did it open, and who designed it?"
PARTS = [
    "Which is the tallest building in Europe",
    "When did the tallest building in Europe open",
    "Who designed the tallest building in Europe",
]


def _tree(url: str, caching: bool) -> Agent:
    """agents/web_research.py with each model an AnthropicModel of the same name at ``url``."""
    defined = load_tree_file(str(WEB))

    def point(agent: Agent) -> Agent:
        name = str(agent.model).partition(":")[2]
        model = AnthropicModel(name, api_key=API_KEY, base_url=url)
        model.prompt_caching = caching  # type: ignore[misc]
        return agent.replace(model=model)

    return defined.map_tree(point)


def _row(usage: Any) -> dict[str, float]:
    return {
        "input": usage.input_tokens,  # all of it, cache reads and writes included
        "uncached": usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens,
        "cache_write": usage.cache_write_tokens,
        "cache_read": usage.cache_read_tokens,
        "output": usage.output_tokens,
        "searches": usage.web_search_requests,
        "fetches": usage.web_fetch_requests,
        "requests": usage.requests,
        "cost_usd": round(usage.cost_usd, 6),  # rounded: sums in another order differ at 1e-18
    }


async def one_run(
    args: argparse.Namespace, caching: bool, retry: bool = False
) -> dict[str, dict[str, float]]:
    responder = WebTreeResponder(
        PARTS,
        cite_unread=frozenset({1} if retry else ()),
        page_chars=args.page_chars,
        result_chars=args.result_chars,
        claim_chars=args.claim_chars,
    )
    # caching off: the fake caches nothing (no prefix reaches its minimum), and the model
    # declares no prompt cache (no sibling warm-up)
    minimum = args.cache_minimum if caching else 10**9
    with FakeMessagesServer(responder=responder, min_cacheable_tokens=minimum) as server:
        result: RunResult[Any] = await run(_tree(server.url, caching), QUESTION)
        assert not server.errors, server.errors
    assert result.ok, result.error
    assert len(result.children) == len(PARTS)
    researchers = [_row(c.usage) for c in result.children]
    total = {k: round(sum(r[k] for r in researchers), 6) for k in researchers[0]}
    return {
        "lead": _row(result.own_usage),
        "researchers": total,
        "per_researcher": {k: round(total[k] / len(researchers), 6) for k in total},
        "tree": _row(result.usage),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="one small run, for CI")
    parser.add_argument("--page-chars", type=int, default=10_000)
    parser.add_argument("--result-chars", type=int, default=2_000)
    parser.add_argument("--claim-chars", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cache-minimum", type=int, default=1024, help="the fake's smallest cacheable prefix"
    )
    args = parser.parse_args()
    if args.smoke:
        args.page_chars, args.result_chars, args.claim_chars, args.repeat = 1_000, 200, 0, 1
    os.environ.pop("ANTHROPIC_BASE_URL", None)  # the models are given the fake's URL
    variants = {"caching on": (True, False), "caching off": (False, False)}
    variants["caching on, a retry"] = (True, True)
    runs: dict[str, list[dict[str, dict[str, float]]]] = {v: [] for v in variants}
    for _ in range(args.repeat):
        for variant, (caching, retry) in variants.items():
            runs[variant].append(await one_run(args, caching, retry))
    for variant, rs in runs.items():  # deterministic: every repeat the same
        for r in rs[1:]:
            for who in r:
                if r[who] != rs[0][who]:
                    print(f"{variant} {who}: {rs[0][who]} then {r[who]}", file=sys.stderr)
    keys = ["input", "uncached", "cache_write", "cache_read", "output", "searches", "fetches"]
    keys += ["requests", "cost_usd"]
    rows = [
        [variant, who, *(rs[0][who][k] for k in keys[:-1]), f"{rs[0][who]['cost_usd']:.4f}"]
        for variant, rs in runs.items()
        for who in ("lead", "researchers", "per_researcher", "tree")
    ]
    result = {
        "benchmark": "web_research",
        "question": QUESTION,
        "page_chars": args.page_chars,
        "result_chars": args.result_chars,
        "claim_chars": args.claim_chars,
        "cache_minimum": args.cache_minimum,
        "repeat": args.repeat,
        "machine": machine(),
        "summary": {variant: rs[0] for variant, rs in runs.items()},
    }
    emit(result, table(["variant", "agent", *keys], rows))


if __name__ == "__main__":
    trio.run(main)
