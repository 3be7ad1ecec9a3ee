"""The cost budget and hosted tools: a call offering one reserves its ``max_uses`` at its price.

The provider runs a hosted tool inside the model call and bills each use, so the ledger holds
``max_uses`` x price (priced by the model's own table) before the call and settles to the uses
the response reports. The real anthropic SDK over real HTTP against the fake Messages server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from support.fake_messages_server import (
    FakeMessagesServer,
    cited_text,
    server_tool_use,
    web_search_result,
)
from support.fake_messages_server import Message as Reply

from orchestrator import Agent, Limits, RunStatus, WebSearch, run
from orchestrator.models.anthropic import AnthropicModel, Price

URL = "https://trio.readthedocs.io/en/stable/reference-core.html"
CHEAP = Price.of(1.0, 1.0)  # $1 per million tokens: the searches ($10 per 1,000) dominate
SEARCH = 10.0 / 1000


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


def searcher(server: FakeMessagesServer, max_uses: int) -> Agent:
    return Agent(
        "researcher",
        "Research.",
        model=AnthropicModel(base_url=server.url, prices=CHEAP),
        tools=[WebSearch(max_uses=max_uses)],
        max_output_tokens=1000,
    )


def one_search(n: int, *, stop_reason: str) -> Reply:
    """An answer that searched once (``server_tool_use`` usage: 1) and cited a result."""
    return Reply(
        (
            server_tool_use("web_search", {"query": f"trio {n}"}, id=f"srvtoolu_{n}"),
            web_search_result(f"srvtoolu_{n}", (URL, "Trio core")),
            cited_text(f"Part {n}.", (URL, "nurseries")),
        ),
        stop_reason=stop_reason,
        usage={"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}},
    )


async def test_a_cost_budget_below_max_uses_searches_ends_the_agent_before_the_call(
    server: FakeMessagesServer,
) -> None:
    # the tokens would fit ($0.001 of output cap and a small prompt); five searches do not
    result = await run(searcher(server, 5), "q", limits=Limits(cost_budget_usd=0.03))

    assert result.status is RunStatus.BUDGET_EXCEEDED
    error = result.error or ""
    assert error.startswith("cost budget exhausted: $0.0000 of $0.03 used, the next call may cost")
    assert error.endswith("(with up to 5 web searches)")
    reserved = float(error.split("may cost $")[1].split()[0])
    assert 5 * SEARCH < reserved < 5 * SEARCH + 0.003
    assert server.requests == []  # refused before anything was sent


async def test_the_reservation_grows_with_max_uses(server: FakeMessagesServer) -> None:
    server.push(one_search(1, stop_reason="end_turn"))

    # the same budget admits a call offering two searches
    result = await run(searcher(server, 2), "q", limits=Limits(cost_budget_usd=0.03))

    assert result.status is RunStatus.COMPLETED
    assert len(server.requests) == 1


async def test_a_call_is_settled_with_the_searches_it_made_not_max_uses(
    server: FakeMessagesServer,
) -> None:
    # each call holds about $0.05 (five searches) and makes one ($0.01): the second call fits
    # the $0.08 only because the first settled to its one search
    server.push(one_search(1, stop_reason="pause_turn"), one_search(2, stop_reason="end_turn"))

    result = await run(searcher(server, 5), "q", limits=Limits(cost_budget_usd=0.08))

    assert result.status is RunStatus.COMPLETED, result.error
    assert len(server.requests) == 2
    assert result.usage.web_search_requests == 2
    tokens_only = dataclasses.replace(result.usage, web_search_requests=0)
    assert result.usage.cost_usd == pytest.approx(2 * SEARCH + CHEAP.cost(tokens_only))
    assert result.usage.cost_usd < 0.03  # not the $0.10 that max_uses would have charged
