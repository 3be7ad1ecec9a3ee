"""The typed transcript, in the Anthropic Messages shape.

Blocks are small frozen dataclasses rather than pydantic models: the loop builds and reads
thousands of them per second in wide trees, and validation happens where data enters (tool
arguments, provider responses), not on every internal copy. Every block has a ``type`` like
the wire format, and :func:`to_wire` / :func:`block_from_wire` convert to and from the dicts the
API speaks.
"""

from __future__ import annotations

import contextlib
import decimal
import json
import logging
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, ClassVar, Final, Literal, TypeAlias

from .records import record

__all__ = [
    "MAX_CALL_COST_USD",
    "MAX_CALL_TOKENS",
    "MAX_NESTING",
    "Block",
    "Message",
    "RedactedThinkingBlock",
    "RefusedInput",
    "Role",
    "ServerToolResultBlock",
    "ServerToolUseBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "block_from_wire",
    "clamp_usage",
    "is_blank",
    "is_text",
    "message_from_wire",
    "nesting_exceeds",
    "text_of",
    "to_wire",
    "well_formed",
]

Role: TypeAlias = Literal["user", "assistant"]
_logger = logging.getLogger(__name__)

MAX_NESTING: Final = 100
"""How deep a tool call's input, a tool's structured result or a history's tool input may nest
(containers inside containers: the arguments object itself is level 1). Past it the runtime
refuses the value instead of walking it: JSON writers, ``repr``, copies and comparisons recurse
once per level, and Python's stack holds about 1,000 levels, fewer in a deep agent tree."""


@record
class TextBlock:
    """Plain text from the user or the model.

    ``citations`` are the provider's, kept exactly as received (web search and web fetch
    results cite their sources this way) and sent back unchanged; empty for most text.
    """

    text: str
    citations: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    type: ClassVar[str] = "text"


@record
class ThinkingBlock:
    """Extended thinking; sent back unchanged (with its signature) as the API requires."""

    thinking: str
    signature: str = ""
    type: ClassVar[str] = "thinking"


@record
class RedactedThinkingBlock:
    """Thinking the provider encrypted; kept opaque and sent back unchanged."""

    data: str
    type: ClassVar[str] = "redacted_thinking"


@record
class ToolUseBlock:
    """The model asks for one tool call."""

    id: str
    name: str
    input: Mapping[str, Any]
    type: ClassVar[str] = "tool_use"


@record
class ServerToolUseBlock:
    """A tool call the provider ran itself (a hosted tool: ``web_search``, ``web_fetch``).

    ``data`` is the block exactly as received (``id``, ``name``, ``input`` and any field the
    API adds), sent back unchanged; the loop never runs it and nothing answers it.
    """

    data: Mapping[str, Any] = field(hash=False)
    type: ClassVar[str] = "server_tool_use"

    @property
    def id(self) -> str:
        """The call's id, which its result block names."""
        return str(self.data.get("id", ""))

    @property
    def name(self) -> str:
        """The hosted tool's name (``web_search``, ``web_fetch``)."""
        return str(self.data.get("name", ""))

    @property
    def input(self) -> Mapping[str, Any]:
        """The call's input (``{"query": ...}``, ``{"url": ...}``)."""
        value = self.data.get("input")
        return value if isinstance(value, Mapping) else {}


SERVER_RESULT_TYPES: Final = frozenset({"web_search_tool_result", "web_fetch_tool_result"})
"""The result blocks of the hosted tools the transcript keeps."""


@record
class ServerToolResultBlock:
    """What a hosted tool returned, in the same assistant message as its call.

    ``data`` is the block exactly as received (a ``web_search_tool_result`` or a
    ``web_fetch_tool_result``: results, encrypted content, or an error code), sent back unchanged.
    """

    data: Mapping[str, Any] = field(hash=False)

    @property
    def type(self) -> str:
        """The block's wire type (``web_search_tool_result``, ``web_fetch_tool_result``)."""
        return str(self.data.get("type", ""))

    @property
    def tool_use_id(self) -> str:
        """The id of the :class:`ServerToolUseBlock` this answers."""
        return str(self.data.get("tool_use_id", ""))


class RefusedInput(dict[str, Any]):
    """What the transcript keeps of a tool call's input that nested past :data:`MAX_NESTING`.

    The reply's real input is dropped where the reply enters the runtime, so that no request,
    span, trace file or copy has to walk it; this short note stands in its place (the model
    reads it as its own call, next to the ``is_error`` result saying why). A tool's validation
    refuses it, so the call never runs. Its one key starts with ``_``, a name no ``@tool``
    parameter can have: read back from JSON as a plain dict, it still fails validation.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(
            _refused=f"input nested deeper than {MAX_NESTING} levels; the runtime did not keep it"
        )


@record
class ToolResultBlock:
    """The answer to one :class:`ToolUseBlock`, always in the next user message.

    ``error_type`` says why a failed call failed, for traces (``error.type``) and programs,
    without its text: ``timeout``, ``invalid_arguments``, ``refused`` (the policy or an unknown
    tool), ``ToolError``, an exception's class (``KeyError``, ``httpx.ReadTimeout``), ... It is not sent to the model, is left
    out of equality, and is not part of the wire form (a history read back from JSON has none).

    ``notes`` are texts that follow ``content`` as blocks of their own (the budget left after
    a spawn): on the Messages API the result's content is then a list of text blocks, so
    ``content`` (a typed child's JSON) stays whole and alone in the first; a provider taking
    one text gets them joined after it by blank lines. A history read back keeps them apart.
    """

    tool_use_id: str
    content: str
    is_error: bool = False
    error_type: str | None = field(default=None, compare=False)
    notes: tuple[str, ...] = ()

    @property
    def full_text(self) -> str:
        """``content`` and its notes as one text (for a provider that takes one)."""
        return "\n\n".join((self.content, *self.notes)) if self.notes else self.content

    type: ClassVar[str] = "tool_result"


Block: TypeAlias = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolUseBlock
    | ServerToolResultBlock
)
BLOCK_TYPES = (
    TextBlock,
    ThinkingBlock,
    RedactedThinkingBlock,
    ToolUseBlock,
    ToolResultBlock,
    ServerToolUseBlock,
    ServerToolResultBlock,
)
"""The classes of :data:`Block`, for ``isinstance`` checks."""


@record
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


@record
class Usage:
    """Tokens and cost of one call, an agent or a subtree.

    ``input_tokens`` counts all input, cache reads and writes included, as the OpenTelemetry
    GenAI conventions count it; ``cache_read_tokens`` and ``cache_write_tokens`` say how much of
    it the prompt cache served or stored. ``billed_tokens`` (input plus output) is what the
    run's token budget counts. ``web_search_requests`` and ``web_fetch_requests`` count the
    hosted tools' uses the provider reported (its ``server_tool_use`` figures); their price is
    in ``cost_usd``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    requests: int = field(default=0, compare=False)
    web_search_requests: int = 0
    web_fetch_requests: int = 0

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
            self.web_search_requests + other.web_search_requests,
            self.web_fetch_requests + other.web_fetch_requests,
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
        """Plain data for JSON output (the hosted tools' counts only when there were any)."""
        out = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "requests": self.requests,
        }
        if self.web_search_requests:
            out["web_search_requests"] = self.web_search_requests
        if self.web_fetch_requests:
            out["web_fetch_requests"] = self.web_fetch_requests
        return out


MAX_CALL_TOKENS: Final = 2**30 - 1
"""The most tokens one model call may report in a usage field (about a billion: no context
window holds that many); a larger count is counted as this many, so a budget still stops the
run."""
MAX_CALL_COST_USD: Final = 1_000_000.0
"""The most one model call may report costing; a larger (or infinite) cost counts as this."""
_warned: set[tuple[str, str]] = set()
assert (MAX_CALL_TOKENS, MAX_CALL_COST_USD) == (
    1_073_741_823,
    1_000_000.0,
)  # clamp_usage inlines them


def clamp_usage(usage: Usage) -> Usage:
    """``usage`` as the runtime counts it: every token count an ``int`` in
    ``[0, MAX_CALL_TOKENS]``, the cost a ``float`` in ``[0, MAX_CALL_COST_USD]``.

    Applied once, where a model call's usage enters the runtime, so the agent's totals, the
    run's, the ledger and the spans add up the same numbers. A negative or NaN value counts as
    0, an infinite or absurd one as the cap, a fraction is cut to its integer part, and
    anything that is not a number counts as 0 (each kind of fault logged once per process).
    ``usage`` itself is returned when it is already clean (the common case).
    """
    i, o, r, w = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    )
    c, n = usage.cost_usd, usage.requests
    s, f = usage.web_search_requests, usage.web_fetch_requests
    try:  # one test for the seven counts: their OR is an int in range only if each one is
        counts = i | o | r | w | n | s | f
        if (
            counts.__class__ is int
            and 0 <= counts <= 1_073_741_823  # MAX_CALL_TOKENS
            and c.__class__ is float
            and 0.0 <= c <= 1_000_000.0  # MAX_CALL_COST_USD; False for NaN
        ):
            return usage
    except Exception:  # a float, None, a string... (TypeError), or an odd object
        pass
    return Usage(
        int(_clamped("input_tokens", i, MAX_CALL_TOKENS)),
        int(_clamped("output_tokens", o, MAX_CALL_TOKENS)),
        int(_clamped("cache_read_tokens", r, MAX_CALL_TOKENS)),
        int(_clamped("cache_write_tokens", w, MAX_CALL_TOKENS)),
        float(_clamped("cost_usd", c, MAX_CALL_COST_USD)),
        int(_clamped("requests", n, MAX_CALL_TOKENS)),
        int(_clamped("web_search_requests", s, MAX_CALL_TOKENS)),
        int(_clamped("web_fetch_requests", f, MAX_CALL_TOKENS)),
    )


def _clamped(name: str, value: object, cap: float) -> float:
    """One usage field in ``[0, cap]`` (see :func:`clamp_usage`)."""
    number: float | None = None
    if isinstance(value, numbers.Real | decimal.Decimal):
        try:
            number = float(value)
        except OverflowError:  # an int (or a fraction) too large for a float
            number = math.inf if value > 0 else -math.inf  # type: ignore[operator]
        except (ValueError, ArithmeticError):  # a signalling NaN
            number = math.nan
    if number is None:
        fault, number = "not a number", 0.0
    elif math.isnan(number):
        fault, number = "NaN", 0.0
    elif number < 0:
        fault, number = "negative", 0.0
    elif number > cap:
        fault, number = "too large", cap
    elif name != "cost_usd" and not number.is_integer():
        fault, number = "not a whole number", float(math.floor(number))
    else:
        return number
    if (name, fault) not in _warned:
        _warned.add((name, fault))
        _logger.warning(
            "a model reported usage %s=%.80r (%s); counted as %g", name, value, fault, number
        )
    return number


def text_of(blocks: Iterable[Block]) -> str:
    """The text blocks among ``blocks``, joined by newlines."""
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def to_wire(block: Block) -> dict[str, Any]:
    """The Messages API dict for one block."""
    if isinstance(block, TextBlock):
        if block.citations:
            return {"type": "text", "text": block.text, "citations": list(block.citations)}
        return {"type": "text", "text": block.text}
    if isinstance(block, ServerToolUseBlock | ServerToolResultBlock):
        return dict(block.data)
    if isinstance(block, ToolUseBlock):
        tool_input = dict(block.input) if isinstance(block.input, Mapping) else block.input
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content
            if not block.notes
            else [{"type": "text", "text": t} for t in (block.content, *block.notes)],
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
        citations = data.get("citations")
        if isinstance(citations, list | tuple) and citations:
            return TextBlock(str(data["text"]), tuple(dict(c) for c in citations))
        return TextBlock(str(data["text"]))
    if kind == "server_tool_use":
        if not isinstance(data.get("id"), str) or not isinstance(data.get("name"), str):
            raise ValueError("a server_tool_use block needs a string id and name")
        return ServerToolUseBlock(dict(data))
    if kind in SERVER_RESULT_TYPES:
        if not isinstance(data.get("tool_use_id"), str):
            raise ValueError(f"a {kind} block needs a string tool_use_id")
        return ServerToolResultBlock(dict(data))
    if kind == "tool_use":
        return ToolUseBlock(str(data["id"]), str(data["name"]), dict(data.get("input") or {}))
    if kind == "tool_result":
        content = data.get("content", "")
        notes: tuple[str, ...] = ()
        if not isinstance(content, str):
            parts = list(content) if content else []
            texts = _result_texts(parts)
            if len(texts) > 1 and len(texts) == len(parts):  # text blocks only: kept apart
                content, notes = texts[0], tuple(texts[1:])
            else:
                content = "\n".join(texts)
        return ToolResultBlock(
            str(data["tool_use_id"]), content, bool(data.get("is_error", False)), notes=notes
        )
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(str(data.get("data", "")))
    if kind == "thinking":
        return ThinkingBlock(str(data.get("thinking", "")), str(data.get("signature", "")))
    raise ValueError(f"unsupported content block type {kind!r}")


def _result_texts(parts: Iterable[Any]) -> list[str]:
    """The texts of a ``tool_result``'s list of content parts (its text parts).

    The parts are text, images and documents, never blocks that hold blocks: a nested
    ``tool_result`` is refused rather than parsed (recursion that a crafted history could
    drive past the stack).
    """
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            raise ValueError(f"a tool_result's content parts are objects, got {part!r:.80}")
        kind = part.get("type")
        if kind == "tool_result":
            raise ValueError("a tool_result cannot hold another tool_result")
        block = block_from_wire(part) if kind != "text" else TextBlock(str(part["text"]))
        if isinstance(block, TextBlock):
            texts.append(block.text)
    return texts


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
    if isinstance(block, ServerToolUseBlock | ServerToolResultBlock):
        try:
            return json.dumps(block.data, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return ""
    if isinstance(block, ToolUseBlock):
        try:
            arguments = json.dumps(block.input, ensure_ascii=False, default=str)
        except (TypeError, ValueError):  # not JSON at all: the adapter will say so
            arguments = ""
        return f"{block.id}{block.name}{arguments}"
    return str(block.data)


def transcript_problem(messages: Sequence[Message]) -> str | None:  # noqa: C901 - one branch a rule
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
            wrong = _wrong_field(block)
            if wrong is not None:
                return f"message {i} holds a {type(block).__name__} whose {wrong}"
            if isinstance(block, ToolUseBlock) and nesting_exceeds(block.input):
                return (
                    f"message {i}'s tool call {block.name!r} has input nested deeper than "
                    f"{MAX_NESTING} levels (or holding itself); the runtime does not carry such "
                    "input"
                )
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


_STRING_FIELDS: Final[tuple[tuple[type, tuple[str, ...]], ...]] = (
    (TextBlock, ("text",)),
    (ToolUseBlock, ("id", "name")),
    (ToolResultBlock, ("tool_use_id", "content")),
    (ThinkingBlock, ("thinking", "signature")),
    (RedactedThinkingBlock, ("data",)),
)


def _wrong_field(block: Block) -> str | None:
    """What is wrong with a block's fields (a text that is not a string, a tool call's input
    that is not a mapping), or ``None``."""
    for kind, names in _STRING_FIELDS:
        if isinstance(block, kind):
            for name in names:
                value = getattr(block, name)
                if not isinstance(value, str):
                    return f"{name} is a {type(value).__name__}, not a string"
            break
    if isinstance(block, ServerToolUseBlock | ServerToolResultBlock) and not isinstance(
        block.data, Mapping
    ):
        return f"data is a {type(block.data).__name__}, not a mapping (the block as received)"
    if isinstance(block, ToolUseBlock) and not isinstance(block.input, Mapping):
        return f"input is a {type(block.input).__name__}, not a mapping (a JSON object)"
    if isinstance(block, ToolResultBlock) and not isinstance(block.is_error, bool):
        return f"is_error is a {type(block.is_error).__name__}, not a bool"
    return None


_FLAT: Final = frozenset({str, int, float, bool, type(None)})
_SEQUENCES: Final = (list, tuple, set, frozenset)


def nesting_exceeds(value: object, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` nests containers (mappings, lists, tuples, sets) more than ``limit``
    levels deep; the outermost container is level 1, and a container holding itself nests
    without end.

    Iterative, so any depth costs a walk of at most ``limit`` levels and never a RecursionError;
    a container shared by several branches is walked again only when reached deeper than
    before. A flat ``dict`` (most tool calls' arguments) is one pass over its values.
    """
    if type(value) is dict:
        for v in value.values():
            if type(v) not in _FLAT:
                break
        else:
            return limit < 1
    elif type(value) in _FLAT:
        return False
    reached: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children: Iterable[object]
        if type(item) is dict or isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, _SEQUENCES):
            children = item
        else:
            continue
        if level > limit:
            return True
        if reached.get(id(item), 0) >= level:  # walked already, at this depth or deeper
            continue
        reached[id(item)] = level
        for child in children:
            if type(child) not in _FLAT:
                stack.append((child, level + 1))
    return False


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces): for comparing and hashing tool inputs.

    A value JSON cannot hold as it is (keys that are tuples, or of mixed types that do not
    sort) is written with every key as its ``str()``, unsorted; one nested past
    :data:`MAX_NESTING` (or holding itself), as the start of its ``repr``. It never raises for
    what a model, or a test model, can put in a tool call.
    """
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )
    except (TypeError, ValueError, RecursionError):
        pass
    if not nesting_exceeds(value):
        with contextlib.suppress(TypeError, ValueError, RecursionError):
            return json.dumps(
                _str_keys(value), separators=(",", ":"), ensure_ascii=False, default=str
            )
    try:
        return repr(value)[:10_000]
    except Exception:  # a repr that raises, or one too deep to write
        return f"<{type(value).__name__}>"


def _str_keys(value: Any) -> Any:
    """A copy of ``value`` (nested at most :data:`MAX_NESTING` levels, so without cycles) with
    every mapping key turned into its ``str()``."""
    pending: list[tuple[Any, Any]] = []

    def copy(item: Any) -> Any:
        if isinstance(item, Mapping):
            out: Any = {}
        elif isinstance(item, list | tuple):
            out = []
        else:
            return item
        pending.append((item, out))
        return out

    root = copy(value)
    while pending:
        item, out = pending.pop()
        if isinstance(out, dict):
            for k, v in item.items():
                out[str(k)] = copy(v)
        else:
            out.extend(copy(v) for v in item)
    return root


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
