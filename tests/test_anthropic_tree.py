"""The research_team example over real HTTP: the real anthropic SDK against the local fake
Messages server gives the same final output and result tree as the ScriptedModel run."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from support.fake_messages_server import FakeMessagesServer
from support.fake_messages_server import Message as Reply

from orchestrator import Agent, RunStatus, run
from orchestrator.messages import ToolUseBlock, to_wire
from orchestrator.models.anthropic import AnthropicModel
from orchestrator.models.scripted import response

EXAMPLE = runpy.run_path(str(Path(__file__).parents[1] / "examples" / "research_team.py"))
SCRIPTED_TREE: Agent = EXAMPLE["agent"]
SCRIPT: dict[str, list[Any]] = EXAMPLE["model"]._by_agent


def bridge(body: dict[str, Any]) -> Reply:
    """Answer like the example's ScriptedModel: the agent from its system prompt, the step
    from the number of assistant turns in the request."""
    system = "".join(block["text"] for block in body["system"])
    agent = "lead" if system.startswith("Split the question") else "researcher"
    step = SCRIPT[agent][sum(1 for m in body["messages"] if m["role"] == "assistant")]
    blocks = step if isinstance(step, list) else [step]
    resp = response(*blocks)
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    content = tuple(
        to_wire(ToolUseBlock(f"toolu_{turn}_{i}", b.name, b.input)) if isinstance(b, ToolUseBlock) else to_wire(b)
        for i, b in enumerate(resp.content)
    )
    return Reply(content, stop_reason=resp.stop_reason)


@pytest.fixture
def server() -> Any:
    with FakeMessagesServer(responder=bridge) as s:
        yield s


async def test_the_tree_example_gives_the_same_output_over_http_as_with_the_scripted_model(
    server: FakeMessagesServer,
) -> None:
    scripted = await run(SCRIPTED_TREE, "How does trio keep concurrent tasks in order?")
    model = AnthropicModel("claude-sonnet-5-5", api_key="sk-ant-test-key-000000", base_url=server.url)
    over_http = await run(SCRIPTED_TREE.map_tree(lambda a: a.replace(model=model)),
                          "How does trio keep concurrent tasks in order?")

    assert over_http.status is RunStatus.COMPLETED, over_http.error
    assert over_http.output == scripted.output
    assert [c.path for c in over_http.children] == [c.path for c in scripted.children]
    assert [c.output for c in over_http.children] == [c.output for c in scripted.children]
    assert len(server.requests) == 2 + 3 * 2
    assert not server.errors
    assert all("traceparent" not in r.headers for r in server.requests)
    # usage from the API flows into the result tree
    assert over_http.usage.input_tokens > 0 and over_http.usage.cost_usd > 0
    assert over_http.usage.input_tokens == sum(r.own_usage.input_tokens for r in over_http.walk())
