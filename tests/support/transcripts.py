"""Checking that a transcript is valid: every tool_use answered once, in the next message."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.core.messages import Message


def check_transcript(messages: Sequence[Message], *, allow_assistant_pairs: bool = False) -> None:
    """Assert the DESIGN.md invariant: every tool_use is answered by exactly one tool_result, all
    in the very next user message, in call order; no orphan results; roles alternate (two
    assistant messages in a row only when ``allow_assistant_pairs``, i.e. after pause_turn)."""
    assert messages, "empty transcript"
    assert messages[0].role == "user", "a transcript starts with a user message"
    for i, m in enumerate(messages):
        assert m.content, f"message {i} has no content"
        blocks = [b.type for b in m.content]
        results = [b for b in m.content if b.type == "tool_result"]
        if m.role == "assistant":
            assert "tool_result" not in blocks, f"assistant message {i} holds a tool_result"
        if i > 0:
            prev = messages[i - 1]
            if prev.role == m.role:
                assert m.role == "assistant" and allow_assistant_pairs, (
                    f"messages {i - 1} and {i} are both {m.role}"
                )
            calls = [b for b in prev.content if b.type == "tool_use"]
            if prev.role == "assistant" and calls:
                assert m.role == "user", f"tool_use in message {i - 1} not followed by a user turn"
                assert [r.tool_use_id for r in results] == [c.id for c in calls], (
                    f"message {i} does not answer message {i - 1}'s calls one to one, in order"
                )
            else:
                assert not results, f"message {i} holds tool_results that answer no call"
        else:
            assert not results
    last = messages[-1]
    assert not (last.role == "assistant" and any(b.type == "tool_use" for b in last.content)), (
        "the transcript ends with unanswered tool calls"
    )
