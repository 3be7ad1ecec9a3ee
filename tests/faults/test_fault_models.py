"""Model and provider faults at depth 0, 1 and 2, through the real anthropic SDK and the local
fake Messages API server: 429, 529, 500, a dropped connection, a mid-stream overloaded_error,
a malformed body and a 401.

The faulty agent runs ``AnthropicModel(api_key=<canary>, base_url=<fake server>,
max_retries=1)``: its first call succeeds (a tool call), every later one meets the fault, so a
retryable fault is retried once and then ends the agent with ``error``; its parent sees an
``is_error`` result and goes on. A 401 is fatal: it ends the whole run with ``error``. The
server echoes the key into its error messages, so the canary check proves the adapter keeps it
out. Virtual time jumps only while no request is in flight (``support.clocks.jump_when_idle``):
backoff sleeps are skipped, and a server answering late on a loaded machine never has the run's
deadline pass under its request. The cancellation test runs on the real clock. The SDK is
imported when this module loads: the adapter imports it in a worker thread on first use, and a
virtual clock would jump (past a run's deadline) while that thread works.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic  # noqa: F401 - imported before any virtual clock runs (see the docstring)
import pytest
import trio.testing
from faultkit import (
    CANARY,
    DEPTHS,
    FAULTY,
    Observer,
    chain,
    describe,
    expect,
    find_faulty,
)
from support.clocks import jump_when_idle
from support.fake_messages_server import (
    Drop,
    Error,
    FakeMessagesServer,
    Malformed,
    Reply,
    Stall,
    StreamError,
    tool_use,
)

from orchestrator import Agent, Limits, RunStatus, tool
from orchestrator.models import AnthropicModel

LIMITS = Limits(timeout=60)
MAX_RETRIES = 1


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    """pytest-trio runs a test that asks for it on this clock; jump_when_idle moves it."""
    return trio.testing.MockClock()


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


@tool
async def search(query: str) -> str:
    """Search.

    Args:
        query: what to look for
    """
    return f"results for {query}"


RETRYABLE = expect("error", "completed", parent_error=True)
FATAL = expect("error", "error", parent_error=True)

CASES: dict[str, tuple[Reply, Any, str, str]] = {
    # fault: (reply, expectation by depth, error.type on the failed chat span, description)
    "model 429": (
        Error(
            429, "rate_limit_error", "Rate limited for key {api_key}", headers={"retry-after": "1"}
        ),
        RETRYABLE,
        "rate_limit",
        "HTTP 429 with retry-after: 1 on every call after the first (the error message echoes "
        "the key)",
    ),
    "model 529": (
        Error(529, "overloaded_error", "Overloaded (key {api_key})"),
        RETRYABLE,
        "overloaded",
        "HTTP 529 overloaded_error on every call after the first",
    ),
    "model 500": (
        Error(500, "api_error", "Internal server error for {api_key}"),
        RETRYABLE,
        "api_error",
        "HTTP 500 api_error on every call after the first",
    ),
    "dropped connection": (
        Drop(),
        RETRYABLE,
        "connection",
        "the server reads the request and closes the connection without answering",
    ),
    "mid-stream overloaded_error": (
        StreamError("overloaded_error", "Overloaded"),
        RETRYABLE,
        "overloaded",
        "a 200 stream that sends message_start, then an `event: error` overloaded_error",
    ),
    "malformed body": (
        Malformed(),
        RETRYABLE,
        "malformed_response",
        "a 200 stream whose first event is truncated JSON",
    ),
    "model 401": (
        Error(401, "authentication_error", "invalid x-api-key {api_key}"),
        FATAL,
        "authentication",
        "HTTP 401 authentication_error (fatal: not retried, ends the whole run)",
    ),
}
for _name, (_r, _e, _k, _d) in CASES.items():
    describe(_name, _d, order=201)


def responder_for(fault: Reply) -> Any:
    """The first call of an agent gets a tool call; every call after its tool result, ``fault``."""

    def respond(body: dict[str, Any]) -> Reply:
        answered = any(
            isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_result" for b in m["content"])
            for m in body["messages"]
        )
        return fault if answered else tool_use("search", {"query": "first"})

    return respond


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("fault", list(CASES))
async def test_model_fault(
    fault: str,
    depth: int,
    obs: Observer,
    server: FakeMessagesServer,
    virtual_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
) -> None:
    nursery.start_soon(jump_when_idle, virtual_clock)
    reply, want, kind, _ = CASES[fault]
    server.responder = responder_for(reply)
    model = AnthropicModel(
        "claude-haiku-5-5",
        api_key=CANARY,
        base_url=server.url,
        max_retries=MAX_RETRIES,
        timeout=None,
    )
    faulty = Agent(
        FAULTY, "The agent under test.", description="the faulty agent", model=model, tools=[search]
    )
    out = await obs.run(chain(faulty, depth), limits=LIMITS)
    obs.verify(
        fault, depth, out, want(depth), limits=LIMITS, max_elapsed=3.0, error_span_kinds=[kind]
    )

    node = find_faulty(out.result, depth)
    assert node is not None
    assert node.turns == 2 and node.error and kind.replace("_", " ") in node.error
    assert [m.role for m in node.messages] == ["user", "assistant", "user"]  # the tool round
    calls = [r for r in server.requests if r.path == "/v1/messages"]
    fatal = want is FATAL  # not retried
    assert len(calls) == (2 if fatal else 2 + MAX_RETRIES), [r.reply for r in calls]
    if fatal:  # the whole run ends with error, every agent that was still running too
        assert out.result is not None and out.result.status is RunStatus.ERROR


CANCEL_STREAM = describe(
    "cancel during a streaming model call",
    "the server starts a streamed answer and stalls mid-stream for 30 s; handle.cancel() once "
    "it stalls stops the tree at once, the connection closed, nothing left running",
    order=210,
)
STALL = 30.0


@pytest.mark.parametrize("depth", DEPTHS)
async def test_cancel_during_a_streaming_model_call(
    depth: int, obs: Observer, server: FakeMessagesServer
) -> None:
    """Real time: the cut lands while the SDK reads a stalled stream from a real socket."""
    server.responder = lambda body: Stall(STALL, mid_stream=True)
    model = AnthropicModel(
        "claude-haiku-5-5", api_key=CANARY, base_url=server.url, max_retries=0, timeout=None
    )
    faulty = Agent(
        FAULTY, "The agent under test.", description="the faulty agent", model=model, tools=[search]
    )

    async def stalling() -> None:  # the stream has begun and the server stalls it
        with trio.fail_after(STALL):
            while not server.stalled.is_set():
                await trio.sleep(0.01)

    out = await obs.run(chain(faulty, depth), limits=LIMITS, cancel_when=stalling)
    # "at once": well before the stall would have ended, whatever the machine's load
    obs.verify(
        CANCEL_STREAM,
        depth,
        out,
        expect("cancelled", "cancelled", parent_error=True)(depth),
        limits=LIMITS,
        max_elapsed=STALL,
        promptly=STALL / 3,
    )
    node = find_faulty(out.result, depth)
    assert node is not None and [m.role for m in node.messages] == ["user"]
