"""Hosted tools on Claude: WebSearch and WebFetch sent as server tools, their blocks kept.

The real anthropic SDK over real HTTP against the fake Messages server, which streams the server
tool blocks, citations and ``server_tool_use`` usage as the API does (shapes from the installed
SDK's types) and refuses a server tool entry the SDK's types do not describe.
"""

from __future__ import annotations

import re
import typing
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anthropic.types
import pytest
from support.fake_messages_server import (
    FakeMessagesServer,
    cited_text,
    server_tool_use,
    text,
    web_fetch_result,
    web_search_result,
)
from support.fake_messages_server import (
    Message as Reply,
)

from orchestrator import Agent, ConfigurationError, Policy, WebFetch, WebSearch, run
from orchestrator.core.messages import (
    Message,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    Usage,
    block_from_wire,
    to_wire,
)
from orchestrator.models.anthropic import HOSTED_TOOL_TYPES, AnthropicModel, Price
from orchestrator.models.base import AgentInfo, ClientPool, ModelContext, ModelRequest

URL_A = "https://trio.readthedocs.io/en/stable/reference-core.html"
URL_B = "https://peps.python.org/pep-0789/"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


@asynccontextmanager
async def open_ctx() -> AsyncIterator[ModelContext]:
    async with AsyncExitStack() as stack:
        yield ModelContext(ClientPool(stack))


def request(messages: list[Message], *tools: WebSearch | WebFetch) -> ModelRequest:
    return ModelRequest(
        "Research.", messages, [t.spec for t in tools], 1024, AgentInfo("lead", "lead", 0)
    )


def searched_and_fetched(stop_reason: str = "end_turn") -> Reply:
    """One answer in which the model searched, fetched a result, and cited it."""
    return Reply(
        (
            text("Let me look that up.").content[0],
            server_tool_use("web_search", {"query": "trio nursery"}, id="srvtoolu_01"),
            web_search_result("srvtoolu_01", (URL_A, "Trio core"), (URL_B, "PEP 789")),
            server_tool_use("web_fetch", {"url": URL_A}, id="srvtoolu_02"),
            web_fetch_result("srvtoolu_02", URL_A, "A nursery is a scope for child tasks."),
            cited_text("A nursery scopes child tasks.", (URL_A, "a scope for child tasks")),
        ),
        stop_reason=stop_reason,
        usage={
            "input_tokens": 1000,
            "output_tokens": 100,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 1},
        },
        chunk_chars=5,
    )


def test_the_tool_versions_are_the_newest_the_installed_sdk_describes() -> None:
    folder = Path(anthropic.types.__file__).parent
    for name, kind in HOSTED_TOOL_TYPES.items():
        versions = sorted(
            m.group(1)
            for f in folder.glob(f"{name}_tool_20*_param.py")
            if (m := re.fullmatch(rf"{name}_tool_(20\d{{6}})_param\.py", f.name))
        )
        assert versions and kind == f"{name}_{versions[-1]}", (name, versions)
        param = getattr(anthropic.types, f"{name.title().replace('_', '')}Tool{versions[-1]}Param")
        assert typing.get_args(typing.get_type_hints(param)["type"]) == (kind,)


def test_hosted_tool_settings_are_checked_when_built() -> None:
    assert WebSearch(max_uses=3, allowed_domains=["python.org"]).settings == {
        "max_uses": 3,
        "allowed_domains": ["python.org"],
    }
    assert WebFetch(max_content_tokens=5000).settings == {
        "max_uses": 5,
        "max_content_tokens": 5000,
    }
    for bad in (
        lambda: WebSearch(max_uses=0),
        lambda: WebSearch(allowed_domains="python.org"),
        lambda: WebSearch(allowed_domains=["a.org"], blocked_domains=["b.org"]),
        lambda: WebFetch(max_content_tokens=-1),
    ):
        with pytest.raises(ConfigurationError):
            bad()


def test_the_request_sends_them_as_server_tools_of_the_current_version() -> None:
    params = AnthropicModel().request_params(
        request(
            [Message.user("hi")],
            WebSearch(max_uses=2, blocked_domains=["example.com"]),
            WebFetch(max_content_tokens=4000),
        )
    )
    assert params["tools"] == [
        {
            "type": HOSTED_TOOL_TYPES["web_search"],
            "name": "web_search",
            "max_uses": 2,
            "blocked_domains": ["example.com"],
        },
        {
            "type": HOSTED_TOOL_TYPES["web_fetch"],
            "name": "web_fetch",
            "max_uses": 5,
            "max_content_tokens": 4000,
            "cache_control": {"type": "ephemeral"},
        },
    ]


async def test_server_tool_blocks_and_citations_are_kept_exactly_and_sent_back_unchanged(
    server: FakeMessagesServer,
) -> None:
    reply = searched_and_fetched()
    server.push(reply, text("done"))
    model = AnthropicModel(base_url=server.url)
    tools = (WebSearch(), WebFetch())
    first = [Message.user("What is a trio nursery?")]
    async with open_ctx() as ctx:
        answer = await model.request(request(first, *tools), ctx)
        kinds = [type(b).__name__ for b in answer.content]
        assert kinds == [
            "TextBlock",
            "ServerToolUseBlock",
            "ServerToolResultBlock",
            "ServerToolUseBlock",
            "ServerToolResultBlock",
            "TextBlock",
        ]
        # each block as the API sent it (the streamed input assembled from its JSON deltas)
        assert [to_wire(b) for b in answer.content] == [dict(b) for b in reply.content]
        cited = answer.content[-1]
        assert isinstance(cited, TextBlock) and cited.citations[0]["url"] == URL_A
        u = answer.usage
        assert (u.web_search_requests, u.web_fetch_requests) == (1, 1)
        assert u.cost_usd == pytest.approx((1000 * 2 + 100 * 10) / 1e6 + 10 / 1000)
        second = [*first, Message("assistant", answer.content), Message.user("Thanks.")]
        await model.request(request(second, *tools), ctx)
    sent = server.requests[1].json
    assert sent is not None
    back = sent["messages"][1]["content"]
    for block in back:
        block.pop("cache_control", None)
    assert back == [dict(b) for b in reply.content]


async def test_a_pause_turn_with_a_server_tool_use_continues_from_the_transcript(
    server: FakeMessagesServer,
) -> None:
    paused = Reply(
        (server_tool_use("web_search", {"query": "trio"}, id="srvtoolu_09"),),
        stop_reason="pause_turn",
    )
    server.push(
        paused,
        Reply(
            (
                web_search_result("srvtoolu_09", (URL_A, "Trio core")),
                cited_text("Trio has nurseries.", (URL_A, "nurseries")),
            ),
            usage={"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}},
        ),
    )
    agent = Agent(
        "lead",
        "Research.",
        model=AnthropicModel(base_url=server.url),
        tools=[WebSearch()],
    )
    result = await run(agent, "What does trio have?")
    assert result.output == "Trio has nurseries."
    assert result.usage.web_search_requests == 1
    continued = server.requests[1].json
    assert continued is not None
    last = continued["messages"][-1]
    assert last["role"] == "assistant"
    assert [b["type"] for b in last["content"]] == ["server_tool_use"]
    assert server.requests[0].json is not None
    assert [t["name"] for t in server.requests[0].json["tools"]] == ["web_search"]


def test_server_blocks_round_trip_through_the_wire_form() -> None:
    for block in (
        server_tool_use("web_fetch", {"url": URL_B}, id="srvtoolu_1"),
        web_search_result("srvtoolu_1", (URL_B, "PEP")),
        web_fetch_result("srvtoolu_1", URL_B, "text"),
        cited_text("x", (URL_B, "y")),
    ):
        parsed = block_from_wire(block)
        assert isinstance(parsed, ServerToolUseBlock | ServerToolResultBlock | TextBlock)
        assert to_wire(parsed) == block
    assert block_from_wire({"type": "text", "text": "plain"}) == TextBlock("plain")


async def test_models_that_cannot_run_a_hosted_tool_are_refused_naming_tool_and_model() -> None:
    from orchestrator.models import ScriptedModel
    from orchestrator.models import text as say

    agent = Agent("lead", "Research.", model=ScriptedModel([say("hi")]), tools=[WebSearch()])
    with pytest.raises(ConfigurationError, match=r"'web_search'.*ScriptedModel") as caught:
        await run(agent, "q")
    assert "cannot run it" in str(caught.value)
    # a subagent inheriting the tool (tools=None) is checked against its own model
    child = Agent("child", "Help.", model=ScriptedModel([say("x")]))
    lead = Agent("lead", "Lead.", model=AnthropicModel(), tools=[WebFetch()], subagents=[child])
    with pytest.raises(
        ConfigurationError, match=r"agent 'child' holds the hosted tool 'web_fetch'"
    ):
        await run(lead, "q")


async def test_a_policy_that_would_confirm_a_hosted_tool_is_refused() -> None:
    agent = Agent(
        "lead",
        "Research.",
        model=AnthropicModel(),
        tools=[WebSearch()],
        policy=Policy(rules={"web_search": "confirm"}, approver=lambda call: True),
    )
    with pytest.raises(ConfigurationError, match="confirm 'web_search'"):
        await run(agent, "q")


async def test_a_denied_hosted_tool_is_not_offered(server: FakeMessagesServer) -> None:
    server.push(text("no search"))
    agent = Agent(
        "lead",
        "Research.",
        model=AnthropicModel(base_url=server.url),
        tools=[WebSearch(), WebFetch()],
        policy=Policy(rules={"web_search": "deny"}),
    )
    result = await run(agent, "q")
    assert result.output == "no search"
    assert server.requests[0].json is not None
    assert [t["name"] for t in server.requests[0].json["tools"]] == ["web_fetch"]


def test_usage_adds_and_prices_the_hosted_tool_requests() -> None:
    total = Usage(web_search_requests=2) + Usage(web_search_requests=1, web_fetch_requests=4)
    assert (total.web_search_requests, total.web_fetch_requests) == (3, 4)
    assert total.to_dict()["web_search_requests"] == 3
    assert "web_search_requests" not in Usage(input_tokens=1).to_dict()
    assert Price.of(1.0, 1.0).cost(Usage(web_search_requests=1000)) == pytest.approx(10.0)


async def test_spawn_narrows_hosted_tools_by_name(server: FakeMessagesServer) -> None:
    from support.fake_messages_server import tool_use

    server.push(
        tool_use(
            "spawn_subagent",
            {"agent": "researcher", "task": "Read the page.", "tools": ["web_fetch"]},
            id="toolu_spawn",
        ),
        text("read it"),
        text("The researcher read it."),
    )
    model = AnthropicModel(base_url=server.url)
    researcher = Agent("researcher", "Read pages.", model=model)  # inherits the lead's tools
    lead = Agent(
        "lead", "Lead.", model=model, tools=[WebSearch(), WebFetch()], subagents=[researcher]
    )
    result = await run(lead, "q")
    assert result.output == "The researcher read it."
    names = [[t["name"] for t in (r.json or {}).get("tools", [])] for r in server.requests]
    assert names == [
        ["web_search", "web_fetch", "spawn_subagent"],
        ["web_fetch"],
        ["web_search", "web_fetch", "spawn_subagent"],
    ]
