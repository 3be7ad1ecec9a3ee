"""Inputs no model or tool should be able to crash the runtime with, at depth 0, 1 and 2.

Deep nesting: tool input a model sends nested 1,000, 10,000 and 100,000 levels deep (and input that
holds itself), a tool returning data that deep, a tool raising a group of groups that deep, a real
adapter reading such input off the wire, a history holding it, wire messages nesting blocks in
blocks, and the command line (in this process: :mod:`support.cli`) running such a tree. The runtime
refuses what nests past ``MAX_NESTING`` (100) levels where it enters: a tool call gets an
``is_error`` result naming the limit (the model can recover), a result becomes an error result, a
history is a ConfigurationError; input just within the limit reaches the tool through every walk
(spans with content, the approver's copy, the repeat guard, clearing, the trace file).

Malformed replies and usage: a reply whose blocks are not what a reply holds ends that agent
with ``error`` and a reason saying what was wrong; usage that is negative, NaN, infinite, not a
whole number, not a number or absurdly large is clamped where it enters, so the agent's totals,
the run's, the spans and the token budget count the same numbers; ``text()``, ``tool_call()``
and ``response()`` check their arguments when called (``response(usage=...)`` takes a mapping).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
import trio
from faultkit import (
    DEPTHS,
    FAULTY,
    Observer,
    chain,
    describe,
    expect,
    find_faulty,
    nodes,
    scripted,
)
from support.cli import Cli
from support.fake_messages_server import FakeMessagesServer
from support.fake_messages_server import Message as WireReply
from support.fake_messages_server import text as wire_text

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    Message,
    ModelError,
    Policy,
    RunStatus,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    run,
    tool,
)
from orchestrator.core.compaction import ContextPolicy
from orchestrator.core.messages import (
    MAX_CALL_COST_USD,
    MAX_CALL_TOKENS,
    MAX_NESTING,
    message_from_wire,
)
from orchestrator.models import (
    AnthropicModel,
    FunctionModel,
    ModelResponse,
    ScriptedModel,
    response,
    text,
    tool_call,
)

LIMITS = Limits(timeout=60, tool_timeout=5)
LEVELS = (1_000, 10_000, 100_000)
LIMIT_TEXT = f"deeper than {MAX_NESTING} levels"


def nested(levels: int) -> Any:
    """A value ``levels`` containers deep: objects and arrays in turn, an empty object inside."""
    value: Any = {}
    for i in range(levels - 1):
        value = [value] if i % 2 else {"a": value}
    return value


def depth_of(value: Any) -> int:
    """How many containers deep ``value`` is (iterative)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def tool_results(node: Any) -> list[ToolResultBlock]:
    return [b for m in node.messages for b in m.content if isinstance(b, ToolResultBlock)]


def tool_uses(node: Any) -> list[ToolUseBlock]:
    return [b for m in node.messages for b in m.content if isinstance(b, ToolUseBlock)]


def faulty_agent(model: Any, tools: list[Any], **kwargs: Any) -> Agent:
    return Agent(FAULTY, "The agent under test.", description="the faulty agent", model=model,
                 tools=tools, **kwargs)  # fmt: skip


def make_echo() -> tuple[Any, list[Any]]:
    received: list[Any] = []

    @tool
    async def echo(data: Any) -> str:
        """Take any JSON value.

        Args:
            data: the value
        """
        received.append(data)
        return f"received data {depth_of(data)} levels deep"

    return echo, received


# ---------------------------------------------------------------------------------------------
# tool input nested past the limit

DEEP_INPUT = describe(
    "tool input nested past the limit",
    "the model sends tool input nested 1,000 / 10,000 / 100,000 levels deep (objects in arrays "
    f"in objects); the call gets an is_error result naming the limit ({MAX_NESTING} levels), "
    "the tool never runs, the transcript keeps a short stand-in for the input, the model answers",
    order=150,
)


@pytest.mark.parametrize("levels", LEVELS)
@pytest.mark.parametrize("depth", DEPTHS)
async def test_tool_input_nested_past_the_limit_gets_an_error_result_the_model_recovers_from(
    depth: int, levels: int, obs: Observer, autojump_clock: Any
) -> None:
    echo, received = make_echo()
    model = scripted(tool_call("echo", {"data": nested(levels)}))
    out = await obs.run(chain(faulty_agent(model, [echo]), depth), limits=LIMITS)
    obs.verify(DEEP_INPUT, depth, out, expect("completed")(depth), limits=LIMITS, max_elapsed=1,
               never_called={"echo": received})  # fmt: skip
    faulty = find_faulty(out.result, depth)
    assert faulty is not None
    (result,) = tool_results(faulty)
    assert result.is_error and LIMIT_TEXT in result.content, result.content
    assert result.error_type == "invalid_arguments"
    (call,) = tool_uses(faulty)
    assert call.name == "echo" and depth_of(dict(call.input)) == 1  # the stand-in, flat
    assert LIMIT_TEXT in faulty.output  # the model read the refusal and answered


DEEP_CYCLE = describe(
    "tool input holding itself",
    "a test model sends tool input that contains itself (a cycle no JSON can hold); it is "
    "refused like input nested past the limit",
    order=151,
)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_tool_input_holding_itself_is_refused_like_input_nested_past_the_limit(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    echo, received = make_echo()
    looped: dict[str, Any] = {}
    looped["again"] = [looped]
    model = scripted(tool_call("echo", {"data": looped}))
    out = await obs.run(chain(faulty_agent(model, [echo]), depth), limits=LIMITS)
    obs.verify(DEEP_CYCLE, depth, out, expect("completed")(depth), limits=LIMITS, max_elapsed=1,
               never_called={"echo": received})  # fmt: skip
    (result,) = tool_results(find_faulty(out.result, depth))
    assert result.is_error and LIMIT_TEXT in result.content


AT_THE_LIMIT = describe(
    "tool input at the nesting limit",
    f"tool input exactly {MAX_NESTING} levels deep, to a tool that needs approval, called twice "
    "with results cleared after a turn: it reaches the tool intact through spans with content, "
    "the approver's copy, the repeat guard, clearing and the trace file",
    order=152,
)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_tool_input_at_the_limit_reaches_the_tool_through_every_walk(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    echo, received = make_echo()
    data = nested(MAX_NESTING - 1)  # with the arguments object: exactly the limit
    asked: list[Any] = []

    async def approve(call: Any) -> bool:  # async: a sync one runs in a thread
        asked.append(call.input)
        return True

    model = scripted(tool_call("echo", {"data": data}), tool_call("echo", {"data": data}))
    faulty = faulty_agent(
        model,
        [echo],
        policy=Policy({"echo": "confirm"}, approver=approve),
        context=ContextPolicy(clear_results_after=1, clear_batch=1),
    )
    out = await obs.run(chain(faulty, depth), limits=LIMITS)
    obs.verify(AT_THE_LIMIT, depth, out, expect("completed")(depth), limits=LIMITS, max_elapsed=1)
    assert received == [data, data] and depth_of(received[0]) == MAX_NESTING - 1
    assert asked == [{"data": data}, {"data": data}]
    results = tool_results(find_faulty(out.result, depth))
    assert [r.is_error for r in results] == [False, False]
    assert results[0].content.startswith("[cleared]")  # cleared: its call written out, cut short
    captured = [
        s.attributes["gen_ai.tool.call.arguments"]
        for s in obs.spans.spans
        if s.name == "execute_tool echo" and s.attributes
    ]
    assert len(captured) == 2
    assert all(depth_of(json.loads(str(c))) == MAX_NESTING for c in captured)


NOT_JSON = describe(
    "tool input JSON cannot hold",
    "a test model sends tool input with keys that are tuples and numbers and a set among its "
    "values (no JSON holds them), with content on spans and results cleared after a turn; the "
    "tool gets it as sent, and the spans and the cleared result's note describe it as they can",
    order=155,
)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_tool_input_json_cannot_hold_reaches_the_tool_without_breaking_spans_or_clearing(
    depth: int, obs: Observer, autojump_clock: Any
) -> None:
    echo, received = make_echo()
    odd = {"data": {("a", 1): "tuple key", 2: "number key", "tags": {"x", "y"}}}
    model = scripted(ToolUseBlock("t1", "echo", odd), ToolUseBlock("t2", "echo", {"data": 1}))
    faulty = faulty_agent(
        model, [echo], context=ContextPolicy(clear_results_after=1, clear_batch=1)
    )
    out = await obs.run(chain(faulty, depth), limits=LIMITS)
    obs.verify(NOT_JSON, depth, out, expect("completed")(depth), limits=LIMITS, max_elapsed=1)
    assert received == [odd["data"], 1]
    first, _ = tool_results(find_faulty(out.result, depth))
    assert first.content.startswith("[cleared] result of echo(") and "tuple key" in first.content


# ---------------------------------------------------------------------------------------------
# tool results nested past the limit


@dataclasses.dataclass
class Holder:
    inner: Any


class Chain(pydantic.BaseModel):
    next: Chain | None = None


def deep_result(kind: str, levels: int) -> Any:
    if kind == "json":
        return nested(levels)
    if kind == "dataclass":
        return Holder(nested(levels))
    if kind == "pydantic":
        link: Chain | None = None
        for _ in range(levels):
            link = Chain(next=link)
        return link
    looped: list[Any] = []
    looped.append({"again": looped})
    return looped


DEEP_RESULT = describe(
    "tool result nested past the limit",
    "a tool returns data nested 1,000 / 10,000 / 100,000 levels deep (JSON data, a dataclass or "
    "a pydantic model holding it) or data that holds itself; the call becomes an is_error "
    "result saying the data is nested too deeply, and the model answers",
    order=153,
)


@pytest.mark.parametrize(
    ("kind", "levels"),
    [("json", n) for n in LEVELS] + [("dataclass", 10_000), ("pydantic", 1_000), ("cycle", 0)],
)
@pytest.mark.parametrize("depth", DEPTHS)
async def test_tool_returning_data_nested_past_the_limit_gets_an_error_result(
    depth: int, kind: str, levels: int, obs: Observer, autojump_clock: Any
) -> None:
    value = deep_result(kind, levels)

    @tool
    async def dig() -> Any:
        """Return deep data."""
        return value

    model = scripted(tool_call("dig", {}))
    out = await obs.run(chain(faulty_agent(model, [dig]), depth), limits=LIMITS)
    obs.verify(DEEP_RESULT, depth, out, expect("completed")(depth), limits=LIMITS, max_elapsed=1)
    (result,) = tool_results(find_faulty(out.result, depth))
    assert result.is_error and "cannot be shown as text" in result.content, result.content
    assert "RecursionError" not in result.content
    if kind == "pydantic":  # pydantic's own depth guard, in its words
        assert "Maximum serialization depth exceeded" in result.content
    else:
        assert f"nested {'too deeply' if kind == 'dataclass' else LIMIT_TEXT}" in result.content


DEEP_GROUP = describe(
    "tool raises a group nested thousands deep",
    "a tool raises an ExceptionGroup holding a group holding a group ... 10,000 / 100,000 deep "
    "around one ValueError; the call gets an is_error result naming that ValueError",
    order=154,
)


@pytest.mark.parametrize("levels", [10_000, 100_000])
@pytest.mark.parametrize("depth", DEPTHS)
async def test_tool_raising_a_group_nested_thousands_deep_gets_its_one_error_as_the_result(
    depth: int, levels: int, obs: Observer, autojump_clock: Any
) -> None:
    @tool
    async def burrow() -> str:
        """Fail deep down."""
        await trio.lowlevel.checkpoint()
        exc: Exception = ValueError("the real problem")
        for _ in range(levels):
            exc = ExceptionGroup("wrapped", [exc])
        raise exc

    model = scripted(tool_call("burrow", {}))
    out = await obs.run(chain(faulty_agent(model, [burrow]), depth), limits=LIMITS)
    obs.verify(DEEP_GROUP, depth, out, expect("completed")(depth), limits=LIMITS, max_elapsed=1)
    (result,) = tool_results(find_faulty(out.result, depth))
    assert result.is_error and "ValueError: the real problem" in result.content, result.content
    assert "RecursionError" not in result.content


async def test_a_scripted_model_sending_input_nested_past_the_limit_gets_the_same_error() -> None:
    echo, received = make_echo()
    for levels in LEVELS:
        model = ScriptedModel([tool_call("echo", {"data": nested(levels)}), text("recovered")])
        result = await run(Agent("root", "Echo.", tools=[echo], model=model), "Go.")
        assert result.status is RunStatus.COMPLETED and result.output == "recovered"
        (res,) = tool_results(result)
        assert res.is_error and LIMIT_TEXT in res.content
    assert received == []


# ---------------------------------------------------------------------------------------------
# a real adapter, histories and wire forms


@pytest.fixture
def messages_server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake
    assert not fake.errors, fake.errors


@pytest.mark.parametrize("levels", LEVELS)
async def test_the_anthropic_adapter_refuses_tool_input_nested_past_the_limit(
    messages_server: FakeMessagesServer, levels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    echo, received = make_echo()
    half = levels // 2  # the input's JSON as the model streams it: '{"data":' [{"a": ... }] '}'
    deep_json = '{"data":' + '{"a":[' * half + "{}" + "]}" * half + "}"
    block = {"type": "tool_use", "id": "toolu_deep", "name": "echo", "input": {},
             "_partial_json": deep_json}  # fmt: skip
    messages_server.push(
        WireReply((block,), stop_reason="tool_use", chunk_chars=len(deep_json)),
        wire_text("I will send flatter arguments."),
    )
    model = AnthropicModel("claude-sonnet-4-5", base_url=messages_server.url)
    # an output cap that allows the reply: a stream past the request's cap is cut (max_tokens
    # x 32 characters), and the deepest input here is ~600,000 characters
    agent = Agent("root", "Echo.", tools=[echo], model=model, max_output_tokens=32_000)
    result = await run(agent, "Go.")
    assert result.status is RunStatus.COMPLETED, result.error
    (res,) = tool_results(result)
    assert res.is_error and LIMIT_TEXT in res.content
    assert received == []
    sent_back = messages_server.bodies[1]["messages"][1]["content"][0]
    assert sent_back["type"] == "tool_use" and depth_of(sent_back["input"]) == 1


def test_a_history_holding_tool_input_nested_past_the_limit_is_refused_before_any_call() -> None:
    calls: list[Any] = []

    def model(request: Any) -> Any:
        calls.append(request)
        return text("unreachable")

    for value in (nested(MAX_NESTING + 1), nested(100_000)):
        history = [
            Message.user("Start."),
            Message.assistant(ToolUseBlock("toolu_1", "echo", {"data": value})),
            Message("user", (ToolResultBlock("toolu_1", "done"),)),
        ]
        agent = Agent("root", "Echo.", model=FunctionModel(model), tools=[])
        with pytest.raises(ConfigurationError, match=f"nested deeper than {MAX_NESTING} levels"):
            trio.run(lambda a=agent, h=history: run(a, "Go on.", message_history=h))
    assert calls == []


@pytest.mark.parametrize(
    ("history", "wrong"),
    [
        ([Message("user", (TextBlock(["Start."]),))], "TextBlock whose text is a list"),  # type: ignore[arg-type]
        (
            [
                Message.user("Start."),
                Message.assistant(ToolUseBlock("toolu_1", "echo", [[1]])),  # type: ignore[arg-type]
                Message("user", (ToolResultBlock("toolu_1", "done"),)),
            ],
            "ToolUseBlock whose input is a list, not a mapping",
        ),
        (
            [
                Message.user("Start."),
                Message.assistant(ToolUseBlock("toolu_1", "echo", {})),
                Message("user", (ToolResultBlock("toolu_1", {"a": [1]}),)),  # type: ignore[arg-type]
            ],
            "ToolResultBlock whose content is a dict",
        ),
    ],
)
def test_a_history_whose_blocks_hold_the_wrong_types_is_refused_before_any_call(
    history: list[Message], wrong: str
) -> None:
    calls: list[Any] = []
    agent = Agent("root", "Go on.", tools=[], model=FunctionModel(lambda r: calls.append(r)))
    with pytest.raises(ConfigurationError, match=wrong):
        trio.run(lambda: run(agent, "Go on.", message_history=history))
    assert calls == []


def test_wire_messages_nesting_results_in_results_are_refused_with_a_value_error() -> None:
    for levels in LEVELS:
        part: dict[str, Any] = {"type": "text", "text": "inner"}
        for _ in range(levels):
            part = {"type": "tool_result", "tool_use_id": "t", "content": [part]}
        with pytest.raises(ValueError, match="cannot hold another tool_result"):
            message_from_wire({"role": "user", "content": [part]})


# ---------------------------------------------------------------------------------------------
# the command line

CLI_AGENTS = """
from orchestrator import Agent, tool
from orchestrator.models import ScriptedModel, text, tool_call

LEVELS = {levels}


def nested(levels):
    value = {{}}
    for i in range(levels - 1):
        value = [value] if i % 2 else {{"a": value}}
    return value


@tool
async def echo(data: dict) -> str:
    \"\"\"Take a JSON object.\"\"\"
    return "received"


@tool
async def dig() -> dict:
    \"\"\"Return deep data.\"\"\"
    return nested(LEVELS)


agent = Agent(
    "root",
    "Call the tools.",
    tools=[echo, dig],
    model=ScriptedModel(
        [
            [tool_call("echo", {{"data": nested(LEVELS)}}), tool_call("dig", {{}})],
            text("Both calls failed, and I carried on."),
        ]
    ),
)
"""


def cli_env() -> dict[str, str]:
    """No Anthropic key, no OTLP exporter setting (traces go to files under ``runs/``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "ANTHROPIC_API_KEY" and not k.startswith("OTEL_")
    }
    env.update(PYTHONIOENCODING="utf-8", COLUMNS="200")
    return env


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The command in this process (:mod:`support.cli`), in ``tmp_path``, in the environment
    :func:`cli_env` builds."""
    return Cli(monkeypatch, tmp_path, cli_env)


@pytest.mark.parametrize("levels", LEVELS)
def test_the_cli_runs_a_tree_whose_model_and_tool_nest_past_the_limit_without_a_traceback(
    cli: Cli, tmp_path: Path, levels: int
) -> None:
    (tmp_path / "agents.py").write_text(textwrap.dedent(CLI_AGENTS.format(levels=levels)))
    proc = cli("run", "agents.py", "Go.", "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr  # completed: the model recovered from both errors
    payload = json.loads(proc.stdout)
    assert payload["status"] == "completed"
    assert payload["output"] == "Both calls failed, and I carried on."
    shown = cli("trace", "show")  # the trace file was written and reads back
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr


def test_the_cli_ends_with_exit_code_1_and_one_reason_when_the_model_reply_is_malformed(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "agents.py").write_text(
        "from orchestrator import Agent, TextBlock\n"
        "from orchestrator.models import ScriptedModel\n"
        "agent = Agent('root', 'Answer.', tools=[], model=ScriptedModel([[TextBlock(['a'])]]))\n"
    )
    proc = cli("run", "agents.py", "Go.")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert "TextBlock" in proc.stderr and "must be a string" in proc.stderr


# ---------------------------------------------------------------------------------------------
# malformed replies

MALFORMED = describe(
    "model reply of the wrong shape",
    "a model adapter returns a reply holding a text block whose text is a list, a tool call "
    "whose name is a number, a tool_result, a plain string, a stop_reason that is a list or "
    "usage that is a dict; that agent ends with error and a reason naming what was wrong",
    order=250,
)

MALFORMED_REPLIES: dict[str, tuple[Any, str]] = {
    "text": (ModelResponse((TextBlock(["a"]),), "end_turn"), "TextBlock"),  # type: ignore[arg-type]
    "tool name": (ModelResponse((ToolUseBlock("t", 7, {}),), "tool_use"), "ToolUseBlock"),  # type: ignore[arg-type]
    "tool_result": (ModelResponse((ToolResultBlock("t", "x"),), "end_turn"), "ToolResultBlock"),
    "string": (ModelResponse(("hello",), "end_turn"), "a str"),  # type: ignore[arg-type]
    "stop_reason": (ModelResponse((TextBlock("hi"),), ["end_turn"]), "stop_reason"),  # type: ignore[arg-type]
    "usage": (ModelResponse((TextBlock("hi"),), "end_turn", {"input_tokens": 3}), "Usage"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("kind", sorted(MALFORMED_REPLIES))
@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_model_reply_of_the_wrong_shape_ends_that_agent_with_error_and_says_why(
    depth: int, kind: str, obs: Observer, autojump_clock: Any
) -> None:
    reply, named = MALFORMED_REPLIES[kind]
    model = FunctionModel(lambda request: reply, name="broken-adapter")
    out = await obs.run(chain(faulty_agent(model, []), depth), limits=LIMITS)
    obs.verify(MALFORMED, depth, out, expect("error")(depth), limits=LIMITS, max_elapsed=1)
    faulty = find_faulty(out.result, depth)
    assert faulty is not None and faulty.error is not None
    assert named in faulty.error and "RecursionError" not in faulty.error, faulty.error


# ---------------------------------------------------------------------------------------------
# usage that is not a count

BAD_USAGE = describe(
    "model reports usage that is not a count",
    "a model reports negative, NaN, infinite, fractional, non-numeric or absurdly large usage; "
    "each figure is clamped where it enters (0, or the cap for one call), and the agent's "
    "totals, the run's, the chat spans and the token budget all count the clamped figures",
    order=251,
)

BAD_FIGURES: dict[str, tuple[Any, int]] = {  # a bad input_tokens -> what is counted
    "negative": (-5_000, 0),
    "NaN": (math.nan, 0),
    "infinite": (math.inf, MAX_CALL_TOKENS),
    "fraction": (12.75, 12),
    "string": ("12", 0),
    "None": (None, 0),
    "huge": (10**30, MAX_CALL_TOKENS),
}


@pytest.mark.parametrize("kind", sorted(BAD_FIGURES))
@pytest.mark.parametrize("depth", DEPTHS)
async def test_usage_that_is_not_a_count_is_clamped_alike_in_totals_spans_and_budget(
    depth: int, kind: str, obs: Observer, autojump_clock: Any
) -> None:
    bad, counted = BAD_FIGURES[kind]

    def reply(request: Any) -> Any:
        if request.turn_index() == 0:  # a hand-built reply: what a broken adapter returns
            usage = Usage(bad, -7, bad, -1, -0.5 if kind != "infinite" else math.inf)
            return ModelResponse((ToolUseBlock("t1", "noop", {}),), "tool_use", usage)
        return response(text("done"), usage=Usage(100, 10))

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    limits = Limits(timeout=60, token_budget=10**15)  # room for two calls at the cap
    out = await obs.run(chain(faulty_agent(FunctionModel(reply), [noop]), depth), limits=limits)
    obs.verify(BAD_USAGE, depth, out, expect("completed")(depth), limits=limits, max_elapsed=1)
    faulty = find_faulty(out.result, depth)
    assert faulty is not None and out.result is not None
    cost = MAX_CALL_COST_USD if kind == "infinite" else 0.0
    assert faulty.own_usage == Usage(counted + 100, 10, counted, 0, cost)
    for node in nodes(out.result):  # every total adds up the clamped figures
        assert node.usage == sum((c.usage for c in node.children), node.own_usage)
        for value in node.usage.to_dict().values():
            assert value >= 0
    chats = [s for s in obs.spans.spans if s.name.startswith("chat") and s.attributes
             and s.attributes.get("gen_ai.agent.name", FAULTY) == FAULTY
             and "gen_ai.usage.input_tokens" in s.attributes]  # fmt: skip
    traced = sorted(int(s.attributes["gen_ai.usage.input_tokens"]) for s in chats)  # type: ignore[index, arg-type]
    assert counted in traced and min(traced) >= 0


async def test_a_call_reporting_more_tokens_than_the_budget_ends_the_run_at_the_next_call() -> None:
    # 10**30 tokens count as the one-call cap, past the budget: the ledger saw what the totals
    # saw, so the next call is refused (a clamp to 0 would have let the run spend on)
    def reply(request: Any) -> Any:
        usage = Usage(10**30, 5) if request.turn_index() == 0 else Usage(10, 5)
        return ModelResponse((ToolUseBlock(f"t{request.turn_index()}", "noop", {}),), "tool_use",
                             usage)  # fmt: skip

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    agent = Agent("root", "Loop.", tools=[noop], model=FunctionModel(reply))
    result = await run(agent, "Go.", limits=Limits(token_budget=10 * MAX_CALL_TOKENS // 9))
    assert result.status is RunStatus.BUDGET_EXCEEDED, result.error
    assert result.usage.input_tokens == MAX_CALL_TOKENS and result.usage.requests == 1


async def test_usage_billed_for_a_failed_call_is_clamped_like_an_answers() -> None:
    # an adapter that gave up after answers it could not use reports what they were billed
    def reply(request: Any) -> Any:
        raise ModelError("unusable answers", usage=Usage(-900, math.nan, -1, -2, -3.0, 2))

    agent = Agent("root", "Answer.", tools=[], model=FunctionModel(reply))
    result = await run(agent, "Go.")
    assert result.status is RunStatus.ERROR and "unusable answers" in (result.error or "")
    assert result.usage == Usage(0, 0, 0, 0, 0.0) and result.usage.requests == 1


async def test_negative_usage_never_makes_a_total_negative() -> None:
    model = ScriptedModel(
        [
            response(tool_call("noop", {}), usage=Usage(-1_000, -50, -3, -4, -1.0)),
            response(text("done"), usage={"input_tokens": 40, "output_tokens": 2}),
        ]
    )

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    result = await run(Agent("root", "Go.", tools=[noop], model=model), "Go.")
    assert result.status is RunStatus.COMPLETED
    assert result.usage == Usage(40, 2, 0, 0, 0.0) and result.usage.requests == 2


# ---------------------------------------------------------------------------------------------
# the script helpers check their arguments when called


async def test_response_takes_usage_as_a_mapping_of_usage_fields() -> None:
    model = ScriptedModel([response(text("hi"), usage={"input_tokens": 120, "output_tokens": 8,
                                                        "cost_usd": 0.25})])  # fmt: skip
    result = await run(Agent("root", "Answer.", model=model, tools=[]), "Go.")
    assert result.status is RunStatus.COMPLETED
    assert result.usage == Usage(120, 8, 0, 0, 0.25)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: response(text("hi"), usage={"input": 3}), "unknown key"),
        (lambda: response(text("hi"), usage={"input_tokens": "3"}), "input_tokens must be"),
        (lambda: response(text("hi"), usage={"input_tokens": 3.5}), "input_tokens must be"),
        (lambda: response(text("hi"), usage={"cost_usd": "free"}), "cost_usd must be a number"),
        (lambda: response(text("hi"), usage=Usage(output_tokens=True)), "output_tokens must"),
        (lambda: response(text("hi"), usage=[1, 2]), "takes a Usage or a mapping"),
        (lambda: response(text("hi"), stop_reason=3), "stop_reason"),
        (lambda: response([text("hi")]), "content blocks"),
        (lambda: text(42), "text() takes a string"),
        (lambda: text(None), "text() takes a string"),
        (lambda: tool_call(7), "name as a string"),
        (lambda: tool_call("echo", [1, 2]), "args must be a mapping"),
        (lambda: tool_call("echo", "data"), "args must be a mapping"),
        (lambda: tool_call("echo", {1: "x"}), "argument names are strings"),
        (lambda: tool_call("echo", {}, id=5), "takes a string"),
    ],
)
def test_the_script_helpers_refuse_a_wrong_argument_when_called(make: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        make()
