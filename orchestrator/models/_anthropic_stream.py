"""Reading a Messages API stream: server-sent events and the answer assembled from them.

:func:`read_sse` decodes the events from the body's lines (``_shared.sse_lines`` splits them as
SSE defines them), and :class:`Assembler` builds the final blocks and usage from them while it
forwards text deltas and tool-call starts to the run's events. A problem in the stream is
remembered, not raised, so that the caller drains the stream to its end first. No SDK here:
strings and dicts.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..core.messages import (
    SERVER_RESULT_TYPES,
    Block,
    RedactedThinkingBlock,
    RefusedInput,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    well_formed,
)
from ._anthropic_errors import STREAM_ERROR_KINDS
from ._retry import BadResponse, Failure, one_line
from ._shared import token_count, unicode_only
from .base import ModelContext

# Stop reasons that may end the output in the middle of a tool call's JSON.
_CUTTING_STOPS: Final = frozenset({"max_tokens", "model_context_window_exceeded", "refusal"})


@dataclass(slots=True)
class _Partial:
    kind: str
    parts: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    signature: str = ""
    initial_input: Any = None
    raw: dict[str, Any] | None = None
    """A server tool's block as received (its input, if streamed, set at the end)."""
    citations: list[Any] = field(default_factory=list)


class Assembler:
    """Builds the final message from SSE events and forwards deltas to the run's events.

    Events are plain dicts as the API sends them (we read the SSE ourselves, see
    ``AnthropicModel._attempt``). A problem in the stream (an ``event: error``, unreadable JSON)
    is remembered in ``failure`` rather than raised, so that the caller can drain the stream to
    its end first.
    """

    def __init__(self, ctx: ModelContext, limit: int = 2**62) -> None:
        self._ctx = ctx
        self.limit = limit
        """Characters the answer may stream (see ``_shared.stream_limit``); past it, ``cut``."""
        self.streamed = 0
        self.cut = False
        self._blocks: dict[int, _Partial] = {}
        self.failure: Failure | None = None
        self.id = ""
        self.model = ""
        self.started = False
        self.stop_reason: str | None = None
        self.input_tokens = 0
        self.cache_write_tokens = 0
        self.cache_read_tokens = 0
        self.output_tokens = 0
        self.web_search_requests = 0
        self.web_fetch_requests = 0
        self.started_ns = 0
        """When ``message_start`` arrived (ns since the epoch)."""
        self.server_times: dict[str, list[int]] = {}
        """By server tool call id: when its ``server_tool_use`` block started streaming and
        when its result block arrived (0: not in this response); a result whose call came in
        an earlier response (after ``pause_turn``) starts at ``message_start``."""

    def event(self, name: str | None, data: str) -> None:
        """One SSE event (``event:`` name and joined ``data:`` lines)."""
        if self.failure is not None or name == "ping" or not data:
            return
        try:
            payload = json.loads(data)
        except ValueError:
            self.failure = Failure(
                "malformed_response",
                one_line(f"unreadable {name or 'stream'} event: {data[:80]}"),
                retryable=True,
            )
            return
        if not isinstance(payload, dict):
            self.failure = Failure(
                "malformed_response", f"{name} event is not an object", retryable=True
            )
            return
        kind = payload.get("type", name)
        if kind == "error" or name == "error":
            error = payload.get("error")
            error = error if isinstance(error, dict) else {}
            etype = str(error.get("type") or "api_error")
            kind_, retryable, fatal = STREAM_ERROR_KINDS.get(etype, (etype, False, False))
            detail = one_line(f"mid-stream {etype}: {error.get('message', '')}")
            self.failure = Failure(
                kind_, detail, retryable, fatal, rate_limited=kind_ == "rate_limit"
            )
            return
        try:
            self._feed(str(kind), payload)
        # AttributeError: a field that should be an object is a string or a list
        except (BadResponse, AttributeError, KeyError, TypeError, ValueError) as exc:
            self.failure = Failure(
                "malformed_response", one_line(f"unexpected {kind} event: {exc}"), retryable=True
            )

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        # a figure that is not a count is taken as missing, never as a crash
        if (value := token_count(usage.get("input_tokens"))) is not None:
            self.input_tokens = value
        if (value := token_count(usage.get("cache_creation_input_tokens"))) is not None:
            self.cache_write_tokens = value
        if (value := token_count(usage.get("cache_read_input_tokens"))) is not None:
            self.cache_read_tokens = value
        if (value := token_count(usage.get("output_tokens"))) is not None:
            self.output_tokens = value
        server = usage.get("server_tool_use")
        if isinstance(server, dict):
            if (value := token_count(server.get("web_search_requests"))) is not None:
                self.web_search_requests = value
            if (value := token_count(server.get("web_fetch_requests"))) is not None:
                self.web_fetch_requests = value

    def _feed(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "message_start":
            message = event["message"]
            self.started = True
            self.started_ns = time.time_ns()
            self._ctx.on_response_start()  # its cache writes are readable from now
            self.id = str(message.get("id") or "")
            self.model = str(message.get("model") or "")
            self._usage(message.get("usage"))
            return
        if not self.started:
            raise BadResponse(f"{kind} before message_start")
        if kind == "content_block_start":
            self._start(int(event["index"]), event["content_block"])
        elif kind == "content_block_delta":
            self._delta(int(event["index"]), event["delta"])
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason is not None:
                self.stop_reason = str(reason)
            self._usage(event.get("usage"))
        elif kind == "content_block_stop":
            self._stop(int(event["index"]))
        # message_stop and event types added later need nothing here

    def _start(self, index: int, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "text":
            initial = str(block.get("text") or "")
            cited = block.get("citations")
            self._blocks[index] = _Partial(
                "text", [initial], citations=list(cited) if isinstance(cited, list) else []
            )
            if initial:
                self._ctx.on_text_delta(initial)
        elif kind == "tool_use":
            partial = _Partial(
                "tool_use",
                id=str(block.get("id") or ""),
                name=str(block.get("name") or ""),
                initial_input=block.get("input"),
            )
            if not partial.id or not partial.name:
                raise BadResponse("tool_use block without id or name")
            self._blocks[index] = partial
            self._ctx.on_tool_call_start(partial.id, partial.name)
        elif kind == "thinking":
            self._blocks[index] = _Partial(
                "thinking",
                [str(block.get("thinking") or "")],
                signature=str(block.get("signature") or ""),
            )
        elif kind == "redacted_thinking":
            self._blocks[index] = _Partial(
                "redacted_thinking", [], signature=str(block.get("data") or "")
            )
        elif kind == "server_tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise BadResponse("server_tool_use block without id or name")
            self._blocks[index] = _Partial(
                "server_tool_use", name=str(block["name"]), raw=dict(block)
            )
            self.server_times[block["id"]] = [time.time_ns(), 0]
        elif kind in SERVER_RESULT_TYPES:
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise BadResponse(f"{kind} block without tool_use_id")
            self._blocks[index] = _Partial("server_tool_result", raw=dict(block))
            times = self.server_times.setdefault(call_id, [self.started_ns, 0])
            times[1] = time.time_ns()  # a result block arrives whole
        # other block types are not modelled by the transcript

    def _stop(self, index: int) -> None:
        partial = self._blocks.get(index)
        if partial is None or partial.kind != "server_tool_use" or partial.raw is None:
            return
        # its input is complete: the provider runs the search or fetch now (the progress)
        joined = "".join(partial.parts)
        try:
            value = json.loads(joined) if joined.strip() else partial.raw.get("input")
        except (ValueError, RecursionError):  # content() says what is wrong with it
            value = None
        self._ctx.on_server_tool_use(
            str(partial.raw.get("id", "")),
            partial.name,
            value if isinstance(value, dict) else {},
        )

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        partial = self._blocks.get(index)
        if partial is None:
            return  # a delta for a block type we do not keep
        kind = delta.get("type")
        if kind == "text_delta" and partial.kind == "text":
            chunk = str(delta["text"])
            partial.parts.append(chunk)
            self._count(len(chunk))
            if chunk:
                self._ctx.on_text_delta(chunk)
        elif kind == "citations_delta" and partial.kind == "text":
            partial.citations.append(delta["citation"])
        elif kind == "input_json_delta" and partial.kind in ("tool_use", "server_tool_use"):
            partial.parts.append(str(delta["partial_json"]))
            self._count(len(partial.parts[-1]))
        elif kind == "thinking_delta" and partial.kind == "thinking":
            partial.parts.append(str(delta["thinking"]))
            self._count(len(partial.parts[-1]))
        elif kind == "signature_delta" and partial.kind == "thinking":
            partial.signature += str(delta["signature"])

    def _count(self, chars: int) -> None:
        self.streamed += chars
        if self.streamed > self.limit and not self.cut:
            self.cut = True  # read_sse stops reading; the answer ends as cut by max_tokens
            self.stop_reason = "max_tokens"

    def content(self) -> tuple[Block, ...]:
        """The final blocks; raises ``BadResponse`` for a stream that did not complete."""
        if not self.started:
            raise BadResponse("stream ended before message_start", kind="incomplete_response")
        if self.stop_reason is None:
            raise BadResponse("stream ended before the stop reason", kind="incomplete_response")
        blocks: list[Block] = []
        for index in sorted(self._blocks):
            partial = self._blocks[index]
            joined = "".join(partial.parts)
            # A JSON escape like "\ud83d" alone decodes to a lone surrogate, which the next
            # request (this reply goes back in the transcript) cannot encode: U+FFFD instead.
            # Thinking is left as it is: its signature covers it.
            if partial.kind == "text":
                if joined:
                    blocks.append(TextBlock(well_formed(joined), tuple(partial.citations)))
            elif partial.kind == "server_tool_use" and partial.raw is not None:
                raw = partial.raw
                if joined.strip():
                    raw["input"] = self._tool_input(partial, joined)
                blocks.append(ServerToolUseBlock(raw))
            elif partial.kind == "server_tool_result" and partial.raw is not None:
                blocks.append(ServerToolResultBlock(partial.raw))
            elif partial.kind == "thinking":
                blocks.append(ThinkingBlock(joined, partial.signature))
            elif partial.kind == "redacted_thinking":
                blocks.append(RedactedThinkingBlock(partial.signature))
            else:
                blocks.append(
                    ToolUseBlock(
                        well_formed(partial.id),
                        well_formed(partial.name),
                        unicode_only(self._tool_input(partial, joined)),
                    )
                )
        return tuple(blocks)

    def _tool_input(self, partial: _Partial, joined: str) -> dict[str, Any]:
        if not joined.strip():
            initial = partial.initial_input
            return dict(initial) if isinstance(initial, Mapping) else {}
        try:
            value = json.loads(joined)
        except ValueError:
            value = None
        except RecursionError:  # nested past what a JSON reader can walk: refused, not kept
            return RefusedInput()
        if isinstance(value, dict):
            return value
        if self.stop_reason in _CUTTING_STOPS:
            return {}  # a tool call cut short: the loop retries, compacts or ends the agent
        raise BadResponse(f"tool_use {partial.name!r} input is not a JSON object")


async def read_sse(lines: AsyncIterator[str], assembler: Assembler) -> None:
    """Decode server-sent events from ``lines`` into ``assembler``, to the end of the stream."""
    name: str | None = None
    data: list[str] = []
    async for line in lines:
        if not line:
            if name is not None or data:
                assembler.event(name, "\n".join(data))
                if assembler.cut:  # past the output limit: read no more of it
                    return
            name, data = None, []
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
    if name is not None or data:
        assembler.event(name, "\n".join(data))
