"""The Chat Completions wire format: the transcript sent, and the answer read (streamed or not).

The transcript stays in the Anthropic shape; :func:`wire_messages` converts it to chat messages
(the system prompt first, ``tool_use`` blocks as the assistant's ``tool_calls`` with their ids,
each ``tool_result`` as a ``tool`` message, thinking left out), and :class:`Assembler` builds
the answer's blocks from streamed chunks or from a whole completion, forwarding text deltas and
tool-call starts to the run's events. A problem in the stream is remembered, not raised, so that
the caller drains the stream to its end first. No SDK here: strings and dicts.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..core.messages import (
    Block,
    Message,
    RefusedInput,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_blank,
    well_formed,
)
from ._openai_errors import stream_error
from ._retry import BadResponse, Failure, StreamFailed, one_line
from ._shared import unicode_only
from .base import ModelContext, ToolSpec

FINISH_REASONS: Final[Mapping[str, str]] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
"""Chat Completions finish reasons as the loop's stop reasons; any other is an error naming it."""

INVALID_JSON_KEY: Final = "_invalid_json"
"""The one key of a tool call's input when its arguments were not a JSON object.

Its name starts with ``_``, which no tool parameter can have, so the tool's validation refuses
the call with an ``is_error`` result whose text names this key and the problem, and the tool
never runs; the value keeps the model's own text, sent back as the call's ``arguments``."""

_CUTTING: Final = frozenset({"length", "content_filter"})
"""Finish reasons that may cut a tool call's arguments in half."""
_ERROR_PREFIX: Final = "Error: "


# --------------------------------------------------------------------------------------------
# Requests


def wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The ``tools`` of a request, in the order the agent gives them."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.input_schema),
            },
        }
        for t in tools
    ]


def _arguments_text(block: ToolUseBlock) -> str:
    tool_input = block.input
    if len(tool_input) <= 2:
        for key, value in tool_input.items():
            if isinstance(key, str) and key.startswith(INVALID_JSON_KEY) and isinstance(value, str):
                return value  # what the model wrote, as it wrote it
    return json.dumps(dict(tool_input), ensure_ascii=False, default=str)


def _takes_any_object(schema: Mapping[str, Any]) -> bool:
    """Whether a tool's schema accepts an object with an unknown key and nothing else (no
    required field, extra keys allowed: JSON schema's default, which tools described by a
    schema may keep). ``@tool`` schemas forbid extra keys."""
    return schema.get("additionalProperties", True) is not False and not schema.get("required")


def wire_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat messages for ``system`` and the transcript.

    A user message's tool results become one ``tool`` message each (first, since they must
    follow the assistant's calls), its text one ``user`` message after them. An assistant
    message is its text joined and its tool calls; its content is ``""`` rather than null
    (llama.cpp's server refuses null), and thinking is left out (the API takes none back). A
    message left with nothing to send is left out; blank text too.
    """
    wire: list[dict[str, Any]] = []
    if not is_blank(system):
        wire.append({"role": "system", "content": system})
    for m in messages:
        texts = [b.text for b in m.content if isinstance(b, TextBlock) and not is_blank(b.text)]
        if m.role == "user":
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    content = b.full_text  # one text: its notes after it
                    if b.is_error:
                        content = _ERROR_PREFIX + content
                    wire.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": content})
            if texts:
                wire.append({"role": "user", "content": "\n\n".join(texts)})
            continue
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": _arguments_text(b)},
            }
            for b in m.content
            if isinstance(b, ToolUseBlock)
        ]
        if not texts and not calls:
            continue
        message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts)}
        if calls:
            message["tool_calls"] = calls
        wire.append(message)
    return wire


def estimate_tokens(text_chars: int) -> int:
    """Tokens for text of this many characters when the server reports no usage (chars / 4)."""
    return max(1, math.ceil(text_chars / 4)) if text_chars else 0


# --------------------------------------------------------------------------------------------
# Answers


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    started: bool = False


class Assembler:
    """Builds the answer from streamed chunks (:meth:`chunk`) or a whole completion
    (:meth:`completion`), and forwards text deltas and tool-call starts to the run's events.

    Only the first choice counts. A problem (an error object in the stream, a chunk that is not
    JSON) is remembered in ``failure`` rather than raised.
    """

    def __init__(
        self, ctx: ModelContext, tools: Sequence[ToolSpec] = (), limit: int = 2**62
    ) -> None:
        self._ctx = ctx
        self._loose = frozenset(t.name for t in tools if _takes_any_object(t.input_schema))
        """Tools whose validation would let the invalid-JSON key through (see ``_invalid``)."""
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _Call] = {}
        self.failure: Failure | None = None
        self.events = 0
        self.done = False
        self.id = ""
        self.model = ""
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.limit = limit
        """Characters the answer may stream (see ``_shared.stream_limit``); past it, ``cut``."""
        self.streamed = 0
        self.cut = False

    # -- streamed ---------------------------------------------------------------------------

    def data(self, data: str) -> None:
        """One SSE ``data:`` payload."""
        if self.failure is not None or not data:
            return
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            payload = json.loads(data)
        except ValueError:
            self.failure = Failure(
                "malformed_response", one_line(f"unreadable chunk: {data[:80]}"), retryable=True
            )
            return
        if not isinstance(payload, dict):
            self.failure = Failure("malformed_response", "a chunk is not an object", True)
            return
        if "error" in payload and not payload.get("choices"):
            self.failure = stream_error(payload)
            return
        try:
            self.chunk(payload)
        # AttributeError: a field that should be an object is a string or a list
        except (BadResponse, AttributeError, KeyError, TypeError, ValueError) as exc:
            self.failure = Failure(
                "malformed_response", one_line(f"unexpected chunk: {exc}"), retryable=True
            )

    def chunk(self, payload: Mapping[str, Any]) -> None:
        self.events += 1
        self._head(payload)
        for choice in payload.get("choices") or ():
            if int(choice.get("index") or 0) != 0:
                continue
            delta = choice.get("delta") or {}
            self._delta(delta)
            reason = choice.get("finish_reason")
            if reason is not None:
                self.finish_reason = str(reason)

    def _head(self, payload: Mapping[str, Any]) -> None:
        if not self.id and payload.get("id"):
            self.id = str(payload["id"])
        if not self.model and payload.get("model"):
            self.model = str(payload["model"])
        usage = payload.get("usage")
        if isinstance(usage, Mapping):
            self.usage = usage

    def _delta(self, delta: Mapping[str, Any]) -> None:
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str) and thought:
            self._thinking.append(thought)
            self._count(len(thought))
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._text.append(text)
            self._count(len(text))
            self._ctx.on_text_delta(text)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
        for piece in delta.get("tool_calls") or ():
            index = int(piece.get("index") or 0)
            call = self._calls.setdefault(index, _Call())
            if piece.get("id") and not call.id:
                call.id = str(piece["id"])
            function = piece.get("function") or {}
            if function.get("name") and not call.name:
                call.name = str(function["name"])
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.parts.append(arguments)
                self._count(len(arguments))
            elif isinstance(arguments, Mapping):  # some servers send the object itself
                call.parts.append(json.dumps(arguments))
            if call.name and not call.started:
                call.started = True
                if not call.id:
                    call.id = _new_call_id()
                self._ctx.on_tool_call_start(call.id, call.name)

    def _count(self, chars: int) -> None:
        self.streamed += chars
        if self.streamed > self.limit and not self.cut:
            self.cut = True  # read_sse stops reading; the answer ends as cut by max_tokens
            self.finish_reason = "length"

    # -- whole ------------------------------------------------------------------------------

    def completion(self, body: Any) -> None:
        """A non-streamed answer (the parsed JSON body)."""
        if not isinstance(body, dict):
            raise BadResponse("the answer is not a JSON object")
        if "error" in body and not body.get("choices"):
            raise StreamFailed(stream_error(body))
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            raise BadResponse("the answer has no choices")
        self._head(body)
        choice = choices[0]
        message = choice.get("message") or {}
        delta = dict(message)
        calls = message.get("tool_calls") or []
        delta["tool_calls"] = [
            {**call, "index": i} for i, call in enumerate(calls) if isinstance(call, Mapping)
        ]
        self._delta(delta)
        reason = choice.get("finish_reason")
        self.finish_reason = str(reason) if reason is not None else None
        self.done = True

    # -- the result -------------------------------------------------------------------------

    @property
    def refused(self) -> bool:
        return bool(self._refusal)

    @property
    def output_chars(self) -> int:
        return (
            sum(map(len, self._text))
            + sum(map(len, self._thinking))
            + sum(len(c.name) + sum(map(len, c.parts)) for c in self._calls.values())
        )

    def content(self) -> tuple[Block, ...]:
        """The answer's blocks; raises ``BadResponse`` for a stream that did not complete."""
        if self.finish_reason is None:
            if not self.events:
                raise BadResponse("the stream ended before any chunk", kind="incomplete_response")
            raise BadResponse(
                "the stream ended before the finish reason", kind="incomplete_response"
            )
        blocks: list[Block] = []
        thought = "".join(self._thinking)
        if thought:
            blocks.append(ThinkingBlock(well_formed(thought)))
        text = "".join(self._text)
        if text:
            blocks.append(TextBlock(well_formed(text)))
        refusal = "".join(self._refusal)
        if refusal and refusal != text:
            blocks.append(TextBlock(well_formed(refusal)))
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise BadResponse(f"tool call {index} has no function name")
            blocks.append(
                ToolUseBlock(
                    well_formed(call.id or _new_call_id()),
                    well_formed(call.name),
                    self._arguments(call.name, "".join(call.parts)),
                )
            )
        return tuple(blocks)

    def _arguments(self, name: str, raw: str) -> dict[str, Any]:
        if not raw.strip():
            return {}
        try:
            # strict=False: a raw newline or tab inside a string (small models write them) is
            # what the model meant, not a reason to refuse the call
            value = json.loads(raw, strict=False)
        except RecursionError:  # nested past what a JSON reader can walk: refused, not kept
            return RefusedInput()
        except ValueError as exc:
            if self.finish_reason in _CUTTING:
                return {}  # a tool call cut short: the loop retries it with a larger cap
            problem = str(exc)
            if isinstance(exc, json.JSONDecodeError):
                problem = f"{exc.msg.removesuffix(' at')} at character {exc.pos}"
            return self._invalid(name, f"the arguments were not valid JSON ({problem})", raw)
        if isinstance(value, dict):
            return unicode_only(value)
        what = f"the arguments were a JSON {type(value).__name__}, not an object"
        return self._invalid(name, what, raw)

    def _invalid(self, name: str, problem: str, raw: str) -> dict[str, Any]:
        """The input of a call whose arguments could not be read: one key saying what was
        wrong (a tool's validation refuses it, naming the key), the model's text its value.

        A tool whose schema would accept that key (extra keys allowed, nothing required) gets
        the runtime's :class:`RefusedInput` instead, which every tool's validation refuses (its
        message speaks of nesting: the call must not run with a made-up argument)."""
        key = _invalid_key(problem)
        if name in self._loose:
            refused = RefusedInput()
            refused[key] = well_formed(raw)
            return refused
        return {key: well_formed(raw)}


def _invalid_key(problem: str) -> str:
    return f"{INVALID_JSON_KEY} ({problem}; send the arguments as one JSON object)"


def _new_call_id() -> str:
    """An id for a tool call the server sent without one (unique in the run's transcripts)."""
    return f"call_{uuid.uuid4().hex[:24]}"


async def read_sse(lines: AsyncIterator[str], assembler: Assembler) -> None:
    """Feed the ``data:`` payloads of server-sent events from ``lines`` to ``assembler``, to the
    end of the stream (event names and comments are not used by Chat Completions)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                assembler.data("\n".join(data))
                if assembler.cut:  # past the output limit: read no more of it
                    return
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        assembler.data("\n".join(data))
