"""The typed transcript, in the Anthropic Messages shape.

Blocks are small frozen dataclasses rather than pydantic models: the loop builds and reads
thousands of them per second in wide trees, and validation happens where data enters (tool
arguments, provider responses), not on every internal copy. Every block has a ``type`` like
the wire format, and :func:`to_wire` / :func:`block_from_wire` convert to and from the dicts the
API speaks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

from .records import quick_init

__all__ = [
    "Block",
    "Message",
    "RedactedThinkingBlock",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "block_from_wire",
    "is_blank",
    "is_text",
    "message_from_wire",
    "text_of",
    "to_wire",
    "well_formed",
]

Role: TypeAlias = Literal["user", "assistant"]


@quick_init
@dataclass(frozen=True, slots=True)
class TextBlock:
    """Plain text from the user or the model."""

    text: str
    type: ClassVar[str] = "text"


@quick_init
@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """Extended thinking; sent back unchanged (with its signature) as the API requires."""

    thinking: str
    signature: str = ""
    type: ClassVar[str] = "thinking"


@quick_init
@dataclass(frozen=True, slots=True)
class RedactedThinkingBlock:
    """Thinking the provider encrypted; kept opaque and sent back unchanged."""

    data: str
    type: ClassVar[str] = "redacted_thinking"


@quick_init
@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """The model asks for one tool call."""

    id: str
    name: str
    input: Mapping[str, Any]
    type: ClassVar[str] = "tool_use"


@quick_init
@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """The answer to one :class:`ToolUseBlock`, always in the next user message.

    ``error_type`` says why a failed call failed, for traces (``error.type``) and programs,
    without its text: ``timeout``, ``invalid_arguments``, ``refused`` (the policy or an unknown
    tool), ``ToolError``, an exception's class (``KeyError``, ``httpx.ReadTimeout``), ... It is not sent to the model, is left
    out of equality, and is not part of the wire form (a history read back from JSON has none).
    """

    tool_use_id: str
    content: str
    is_error: bool = False
    error_type: str | None = field(default=None, compare=False)
    type: ClassVar[str] = "tool_result"


Block: TypeAlias = (
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock
)
BLOCK_TYPES = (TextBlock, ThinkingBlock, RedactedThinkingBlock, ToolUseBlock, ToolResultBlock)
"""The classes of :data:`Block`, for ``isinstance`` checks."""


@quick_init
@dataclass(frozen=True, slots=True)
class Message:
    """One transcript entry: a role and its content blocks."""

    role: Role
    content: tuple[Block, ...]

    @classmethod
    def user(cls, *content: Block | str) -> Message:
        """A user message; strings become text blocks."""
        return cls("user", tuple(TextBlock(c) if isinstance(c, str) else c for c in content))

    @classmethod
    def assistant(cls, *content: Block | str) -> Message:
        """An assistant message; strings become text blocks."""
        return cls("assistant", tuple(TextBlock(c) if isinstance(c, str) else c for c in content))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool calls this message asks for, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def text(self) -> str:
        """The message's text blocks joined."""
        return text_of(self.content)


@quick_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost of one call, an agent or a subtree.

    ``input_tokens`` counts all input, cache reads and writes included, as the OpenTelemetry
    GenAI conventions count it; ``cache_read_tokens`` and ``cache_write_tokens`` say how much of
    it the prompt cache served or stored. ``billed_tokens`` (input plus output) is what the
    run's token budget counts.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    requests: int = field(default=0, compare=False)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.cost_usd + other.cost_usd,
            self.requests + other.requests,
        )

    def __radd__(self, other: int) -> Usage:
        """``sum(usages)``: its start, 0, adds nothing. (Of no usages at all ``sum`` gives
        that 0: write ``sum(usages, Usage())`` where the list may be empty.)"""
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented

    @property
    def billed_tokens(self) -> int:
        """Input (cached included) plus output: what the token budget counts."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "requests": self.requests,
        }


def text_of(blocks: Iterable[Block]) -> str:
    """The text blocks among ``blocks``, joined by newlines."""
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def to_wire(block: Block) -> dict[str, Any]:
    """The Messages API dict for one block."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        tool_input = dict(block.input) if isinstance(block.input, Mapping) else block.input
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
        }
        if block.is_error:
            out["is_error"] = True
        return out
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}


def block_from_wire(data: Mapping[str, Any]) -> Block:
    """Parse one Messages API content block (dict form).

    Raises ``ValueError`` for a type the transcript does not model.
    """
    kind = data.get("type")
    if kind == "text":
        return TextBlock(str(data["text"]))
    if kind == "tool_use":
        return ToolUseBlock(str(data["id"]), str(data["name"]), dict(data.get("input") or {}))
    if kind == "tool_result":
        content = data.get("content", "")
        if not isinstance(content, str):
            content = text_of(block_from_wire(c) for c in content) if content else ""
        return ToolResultBlock(str(data["tool_use_id"]), content, bool(data.get("is_error", False)))
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(str(data.get("data", "")))
    if kind == "thinking":
        return ThinkingBlock(str(data.get("thinking", "")), str(data.get("signature", "")))
    raise ValueError(f"unsupported content block type {kind!r}")


def message_from_wire(data: Mapping[str, Any]) -> Message:
    """Parse one Messages API message (dict form)."""
    role = data["role"]
    if role not in ("user", "assistant"):
        raise ValueError(f"unsupported role {role!r}")
    content = data["content"]
    blocks: Sequence[Block]
    if isinstance(content, str):
        blocks = (TextBlock(content),)
    else:
        blocks = tuple(block_from_wire(c) for c in content)
    return Message(role, tuple(blocks))


def message_to_wire(message: Message) -> dict[str, Any]:
    """The Messages API dict for one message."""
    return {"role": message.role, "content": [to_wire(b) for b in message.content]}


def _text_in(block: Block) -> str:
    """The text a block sends (a tool call's arguments as JSON), to check it is Unicode."""
    if isinstance(block, TextBlock):
        return str(block.text)
    if isinstance(block, ToolResultBlock):
        return str(block.content)
    if isinstance(block, ThinkingBlock):
        return f"{block.thinking}{block.signature}"
    if isinstance(block, ToolUseBlock):
        try:
            arguments = json.dumps(block.input, ensure_ascii=False, default=str)
        except (TypeError, ValueError):  # not JSON at all: the adapter will say so
            arguments = ""
        return f"{block.id}{block.name}{arguments}"
    return str(block.data)


def transcript_problem(messages: Sequence[Message]) -> str | None:
    """What makes ``messages`` unfit to continue from, or ``None``.

    The API's rules, checked before a run instead of failing at its first model call: the first
    message is the user's; every ``tool_use`` is answered by exactly one ``tool_result`` in the
    next message, and no result answers anything else. (Consecutive user messages are allowed:
    the API joins them.)
    """
    if not messages:
        return None
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            return f"item {i} is a {type(message).__name__}, not a Message"
        if message.role not in ("user", "assistant"):
            return f"message {i} has role {message.role!r}; roles are 'user' and 'assistant'"
        if not isinstance(message.content, tuple) or not all(
            isinstance(b, BLOCK_TYPES) for b in message.content
        ):
            return f"message {i}'s content is not a tuple of content blocks"
        if not message.content:
            return f"message {i} is empty; the API refuses messages without content"
        for block in message.content:
            if not is_text(_text_in(block)):
                return (
                    f"message {i} holds a lone surrogate (text that is not Unicode: a bad \\u "
                    "escape, bytes decoded with surrogateescape); no request can carry it"
                )
    if messages[0].role != "user":
        return "the first message must be the user's"
    if all(isinstance(b, TextBlock) and is_blank(b.text) for b in messages[0].content):
        # blank text is left out of requests: the request would start with the assistant's
        return "the first message is blank; it must be the user's"
    pending: list[str] = []
    for i, message in enumerate(messages):
        results = [b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)]
        if message.role == "user":
            if sorted(results) != sorted(pending):
                return f"message {i} does not answer exactly the tool calls of message {i - 1}"
            pending = []
        else:
            if pending:
                return f"the tool calls of message {i - 1} are never answered"
            if results:
                return f"assistant message {i} holds tool results"
            pending = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
    if pending:
        return "the last message's tool calls are not answered"
    return None


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces): for comparing and hashing tool inputs."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def is_blank(text: str) -> bool:
    """Empty or only whitespace: text the Messages API refuses in a text block (a 400)."""
    return not text or text.isspace()


def is_text(value: str) -> bool:
    """False for a string that is not Unicode text: one holding a lone surrogate.

    Python strings may (a JSON escape like ``\\ud800``, a file name decoded with
    ``surrogateescape``); UTF-8 cannot encode them, so an HTTP body, SQLite or a trace file
    cannot take them.
    """
    if value.isascii():  # O(1) in CPython
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def well_formed(value: str) -> str:
    """``value`` with each lone surrogate replaced by U+FFFD (split pairs joined again)."""
    if is_text(value):
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
