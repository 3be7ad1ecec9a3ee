"""The typed transcript, usage, statuses, and the scripted-step helpers (public API only)."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator import (
    Agent,
    ConfigurationError,
    Message,
    RunStatus,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    run,
    tool,
)
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call


def test_every_block_carries_its_messages_api_type_name():
    assert TextBlock("hi").type == "text"
    assert ToolUseBlock("toolu_1", "add", {"a": 1}).type == "tool_use"
    assert ToolResultBlock("toolu_1", "2").type == "tool_result"
    assert ThinkingBlock("hmm", "sig").type == "thinking"


def test_a_tool_result_is_not_an_error_unless_it_says_so():
    assert ToolResultBlock("toolu_1", "ok").is_error is False
    assert ToolResultBlock("toolu_1", "boom", is_error=True).is_error is True


def test_message_helpers_turn_strings_into_text_blocks_and_keep_the_role():
    user = Message.user("hello", ToolResultBlock("toolu_1", "2"))
    assert user.role == "user"
    assert [b.type for b in user.content] == ["text", "tool_result"]
    assistant = Message.assistant("thinking aloud", ToolUseBlock("toolu_1", "add", {}))
    assert assistant.role == "assistant"
    assert assistant.content[0] == TextBlock("thinking aloud")


def test_a_message_lists_its_tool_calls_in_order_and_joins_its_text():
    m = Message.assistant(
        "first", ToolUseBlock("a", "x", {}), "second", ToolUseBlock("b", "y", {"k": 1})
    )
    assert [c.id for c in m.tool_uses] == ["a", "b"]
    assert "first" in m.text and "second" in m.text


def test_transcript_blocks_and_messages_are_immutable():
    block = TextBlock("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        block.text = "changed"  # type: ignore[misc]
    message = Message.user("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.role = "assistant"  # type: ignore[misc]


def test_usage_starts_at_zero_and_adds_field_by_field():
    assert Usage() == Usage(0, 0, 0, 0, 0.0)
    a = Usage(input_tokens=100, output_tokens=10, cache_read_tokens=60, cache_write_tokens=5)
    b = Usage(
        input_tokens=50, output_tokens=5, cache_read_tokens=0, cache_write_tokens=20, cost_usd=0.5
    )
    total = a + b
    assert total.input_tokens == 150
    assert total.output_tokens == 15
    assert total.cache_read_tokens == 60
    assert total.cache_write_tokens == 25
    assert total.cost_usd == pytest.approx(0.5)


def test_run_status_has_exactly_the_values_design_md_pins():
    assert {s.value for s in RunStatus} == {
        "completed",
        "max_turns",
        "timeout",
        "budget_exceeded",
        "repeat_guard",
        "error_threshold",
        "refusal",
        "context_exceeded",
        "cancelled",
        "error",
        "invalid_output",
        "awaiting_approval",
    }


def test_response_defaults_its_stop_reason_to_tool_use_when_a_block_is_a_tool_call():
    assert response(text("checking"), tool_call("add", {"a": 1})).stop_reason == "tool_use"


def test_response_defaults_its_stop_reason_to_end_turn_for_text():
    assert response(text("done")).stop_reason == "end_turn"


def test_response_keeps_an_explicit_stop_reason():
    assert response(text("cut"), stop_reason="max_tokens").stop_reason == "max_tokens"


def test_scripted_model_rejects_a_script_that_is_neither_a_list_nor_a_dict():
    with pytest.raises(ConfigurationError):
        ScriptedModel("just a string")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'a'"):
        ScriptedModel({"a": "done"})  # a string, not a list of steps


def test_response_takes_blocks_not_a_list_of_them():
    with pytest.raises(ConfigurationError, match="separate arguments"):
        response([text("hello")])  # type: ignore[arg-type]


async def test_strings_in_a_list_step_become_text_blocks_and_anything_else_is_refused() -> None:
    @tool
    def echo(x: str) -> str:
        """Echo.

        Args:
            x: what to echo
        """
        return x

    model = ScriptedModel([["Let me check.", tool_call("echo", {"x": "a"})], "done"])
    result = await run(Agent("a", "x", model=model, tools=[echo]), "go")
    assert result.messages[1].content[0] == TextBlock("Let me check.")
    assert result.output == "done"
    assert result.to_dict(messages=True)["messages"]  # every block has a wire form

    result = await run(Agent("a", "x", model=ScriptedModel([["fine", 42]])), "go")
    assert result.status is RunStatus.ERROR and "not a block" in (result.error or "")


def test_usages_add_up_with_sum_and_refuse_other_things() -> None:
    usages = [Usage(input_tokens=1, output_tokens=2), Usage(input_tokens=3, cost_usd=0.5)]
    assert sum(usages) == Usage(input_tokens=4, output_tokens=2, cost_usd=0.5)
    with pytest.raises(TypeError):
        usages[0] + 1  # type: ignore[operator]


def test_function_model_rejects_something_that_is_not_callable():
    with pytest.raises(ConfigurationError):
        FunctionModel("not callable")  # type: ignore[arg-type]


async def test_tool_calls_without_ids_get_distinct_ids_the_results_answer():
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    model = ScriptedModel([[tool_call("ping"), tool_call("ping")], tool_call("ping"), text("done")])
    result = await run(Agent("a", "Ping.", model=model, tools=[ping]), "go")
    ids = [c.id for m in result.messages for c in m.tool_uses]
    assert len(ids) == 3 and len(set(ids)) == 3 and all(ids)
    answered = [
        b.tool_use_id for m in result.messages for b in m.content if b.type == "tool_result"
    ]
    assert answered == ids


async def test_an_explicit_tool_call_id_is_kept():
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    model = ScriptedModel([tool_call("ping", id="toolu_mine"), text("done")])
    result = await run(Agent("a", "Ping.", model=model, tools=[ping]), "go")
    assert result.messages[1].tool_uses[0].id == "toolu_mine"
    assert result.messages[2].content[0].tool_use_id == "toolu_mine"


async def test_a_step_may_be_a_block_a_list_of_blocks_or_a_response():
    seen = []

    def fn(request):
        seen.append(len(request.messages))
        return [text("a"), text("b")]

    r1 = await run(Agent("a", "x", model=ScriptedModel([text("one")])), "go")
    r2 = await run(Agent("a", "x", model=FunctionModel(fn)), "go")
    r3 = await run(Agent("a", "x", model=ScriptedModel([response(text("three"))])), "go")
    assert r1.output == "one"
    assert "a" in r2.output and "b" in r2.output
    assert r3.output == "three"


async def test_scripted_usage_is_reported_when_a_step_gives_it():
    model = ScriptedModel([response(text("hi"), usage=Usage(input_tokens=7, output_tokens=3))])
    result = await run(Agent("a", "x", model=model), "go")
    assert result.usage.input_tokens == 7
    assert result.usage.output_tokens == 3
    assert result.own_usage == result.usage


def test_redacted_thinking_round_trips_through_the_wire_format_unchanged() -> None:
    from orchestrator.core.messages import RedactedThinkingBlock, block_from_wire, to_wire

    block = RedactedThinkingBlock("EncryptedOpaqueData==")
    assert to_wire(block) == {"type": "redacted_thinking", "data": "EncryptedOpaqueData=="}
    assert block_from_wire(to_wire(block)) == block


def test_ordinary_words_after_bearer_are_not_taken_for_a_token() -> None:
    from orchestrator.core.redact import redact

    assert redact("A bearer instrument is payable to its holder") == (
        "A bearer instrument is payable to its holder"
    )
    assert "abcdef0123456789" not in redact("Authorization: Bearer abcdef0123456789ABCDEF")


async def test_redaction_inside_a_run_uses_the_snapshot_taken_when_the_run_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator import Agent, run, tool
    from orchestrator.core.redact import REDACTED, redact

    secret = "s3cret-value-0123456789"
    monkeypatch.setenv("PAYMENTS_API_KEY", secret)
    seen: list[str] = []

    @tool
    async def check() -> str:
        """Redact a secret that has left the environment since the run started."""
        monkeypatch.delenv("PAYMENTS_API_KEY")
        seen.append(redact(f"key={secret}"))
        return "checked"

    model = ScriptedModel([tool_call("check"), text("done")])
    await run(Agent("a", "A.", tools=[check]), "go", model=model)
    assert seen == [f"key={REDACTED}"]
    assert redact(secret) == secret  # outside the run, the environment as it is now


def test_is_text_and_well_formed_agree_on_lone_surrogates() -> None:
    from orchestrator.core.messages import is_text, well_formed

    for value in ["plain", "naïve ✓", "\U0001f600"]:
        assert is_text(value) and well_formed(value) == value
    assert not is_text("a\ud800b")
    assert well_formed("a\ud800b") == "a\ufffdb"
    assert well_formed("\udce9\udce9") == "\ufffd\ufffd"
    assert well_formed("\ud83d\ude00") == "\U0001f600"
