"""Durable runs with hosted tools: the journal keeps server tool blocks and citations, and a
resume sends them back exactly as the provider sent them; a resume is refused, before its
journal is touched, when an agent holds a hosted tool its model cannot run.

The real anthropic SDK over real HTTP against the fake Messages server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_messages_server import (
    Error,
    FakeMessagesServer,
    cited_text,
    server_tool_use,
    text,
    web_search_result,
)
from support.fake_messages_server import Message as Reply

from orchestrator import (
    DEFER,
    Agent,
    ConfigurationError,
    Policy,
    RunStatus,
    WebSearch,
    resume,
    run,
    tool,
)
from orchestrator.models import ScriptedModel
from orchestrator.models import text as say
from orchestrator.models.anthropic import AnthropicModel

URL = "https://trio.readthedocs.io/en/stable/reference-core.html"
NOTES: list[str] = []


@tool
def note(line: str) -> str:
    """Keep a note.

    Args:
        line: the note
    """
    NOTES.append(line)
    return f"noted: {line}"


RESEARCHER = Agent("researcher", "Research, then note what you found.", tools=[WebSearch(), note])
CAREFUL = Agent(
    "researcher",
    "Research, then note what you found.",
    tools=[WebSearch(), note],
    policy=Policy({"note": "confirm"}),
)
PARKS = Policy(approver=DEFER)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    NOTES.clear()


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake


def searched_then_noted() -> Reply:
    """A search, its results, a text citing one, and a local tool call, in one answer."""
    return Reply(
        (
            server_tool_use("web_search", {"query": "trio nursery"}, id="srvtoolu_01"),
            web_search_result("srvtoolu_01", (URL, "Trio core")),
            cited_text("A nursery scopes child tasks.", (URL, "a scope for child tasks")),
            {"type": "tool_use", "id": "toolu_note", "name": "note", "input": {"line": "nursery"}},
        ),
        stop_reason="tool_use",
        usage={"server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}},
    )


async def test_a_resumed_run_sends_the_journaled_server_blocks_and_citations_back_unchanged(
    server: FakeMessagesServer, tmp_path: Path
) -> None:
    path = tmp_path / "run.db"
    reply = searched_then_noted()
    # the second call fails for good (a revoked key): the run stops after its first turn
    server.push(reply, Error(401, "authentication_error", "invalid x-api-key"))
    model = AnthropicModel(base_url=server.url)
    first = await run(RESEARCHER, "What is a trio nursery?", model=model, journal=path)
    assert first.status is RunStatus.ERROR
    assert NOTES == ["nursery"]

    server.push(text("Nurseries scope child tasks."))
    result = await resume(path, agent=RESEARCHER, model=model)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Nurseries scope child tasks."
    assert NOTES == ["nursery"]  # the recorded result was replayed, not run again
    assert len(server.requests) == 3  # turn 1 replayed from the journal, turn 2 asked again
    live, resumed = server.requests[1], server.requests[2]
    # the request after the replay is the one the first run sent, byte for byte
    assert resumed.body == live.body
    assert resumed.json is not None
    assistant = resumed.json["messages"][1]
    assert assistant["role"] == "assistant"
    for block in assistant["content"]:
        block.pop("cache_control", None)
    assert assistant["content"] == [dict(b) for b in reply.content]
    # and the result's transcript holds them as received
    assert result.usage.web_search_requests == 1


async def test_resume_refuses_a_hosted_tool_the_model_cannot_run_before_recording_anything(
    server: FakeMessagesServer, tmp_path: Path
) -> None:
    path = tmp_path / "run.db"
    server.push(searched_then_noted())
    model = AnthropicModel(base_url=server.url)
    # the note waits for a person: the run parks it and ends awaiting approval
    parked = await run(CAREFUL, "What is a trio nursery?", model=model, journal=path, policy=PARKS)
    assert parked.status is RunStatus.AWAITING_APPROVAL
    before = path.read_bytes()

    with pytest.raises(
        ConfigurationError,
        match=r"agent 'researcher' holds the hosted tool 'web_search', but its model .*"
        r"\(ScriptedModel\) cannot run it",
    ):
        await resume(
            path, agent=CAREFUL, model=ScriptedModel([say("x")]), approvals={"toolu_note": True}
        )
    assert path.read_bytes() == before  # the approval was not recorded either
    assert NOTES == [] and len(server.requests) == 1  # nothing ran, nothing was asked

    # the same journal still resumes, with a model that can, and the approval acts then
    server.push(text("done"))
    result = await resume(path, agent=CAREFUL, model=model, approvals={"toolu_note": True})
    assert result.status is RunStatus.COMPLETED, result.error
    assert NOTES == ["nursery"]
