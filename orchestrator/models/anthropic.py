"""Claude through the official ``anthropic`` SDK's async client, under trio.

:class:`AnthropicModel` is configuration: constructing one is cheap and opens nothing. Its first
request asks the run's :class:`~orchestrator.models.base.ClientPool` for the client keyed by
provider, base URL and (a fingerprint of) the key, so every agent of a run that talks to the same
endpoint with the same key shares one ``AsyncAnthropic`` and one rate-limit gate, and the run
closes the client when it ends (the SDK's automatic cleanup only works on asyncio).

What it does on each call, and why:

- **SDK retries and SDK tracing are off** (``max_retries=0``, ``open_telemetry`` disabled with
  ``propagation=False``): the retry loop below is ours, so a 429's ``retry-after`` can hold back
  every sibling, and our ``chat`` span is the one span per call, so no ``traceparent`` (no trace
  id of ours) is sent to the API.
- **Prompt caching** with per-block ``cache_control`` breakpoints: the last tool, the system
  prompt, the last block of the last message (so the newest turn is cached for the next call)
  and the last block of the user message before it (the previous call's last breakpoint, so a turn
  that adds more than the API's 20-block lookback still reads the cache). The prefix (tools in the
  order given, system, earlier turns) is serialized the same way every turn; nothing in it
  depends on time or ids.
- **Streaming**: text deltas go to ``ctx.on_text_delta`` and tool-call starts to
  ``ctx.on_tool_call_start`` as they arrive; the final content is assembled from the events (tool
  input from the ``input_json_delta`` fragments). A retried attempt streams again from the start.
- **Errors**: 429, 529, other 5xx, 408/409, timeouts, dropped connections, an ``overloaded_error``
  (or ``api_error``) arriving mid-stream, and malformed or truncated bodies are retried up to
  ``max_retries`` times with exponential backoff and jitter, honouring ``retry-after-ms`` /
  ``retry-after``. A 429 closes the client's shared gate for its delay, so every request on the
  client waits. Authentication, permission, billing, invalid-request and unknown-model errors are
  not retried and raise a *fatal* :class:`~orchestrator.errors.ModelError` saying what to fix.
  Messages are one line and never contain the key.
- **Stop reasons** pass through as the raw string; the loop decides what they mean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email.utils
import functools
import hashlib
import importlib
import json
import math
import os
import random
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

import trio

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import (
    Block,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    is_blank,
    is_text,
    message_to_wire,
    well_formed,
)
from ..core.redact import REDACTED, redact
from ..tracing import spans
from .base import ModelContext, ModelRequest, ModelResponse

if TYPE_CHECKING:
    import ssl

    from anthropic import AsyncAnthropic

__all__ = [
    "CURRENT_MODELS",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "FAST_MODEL",
    "PRICES",
    "AnthropicModel",
    "Price",
    "price_for",
]

DEFAULT_MODEL: Final = "claude-sonnet-5-5"
"""The default model: current Sonnet."""
FAST_MODEL: Final = "claude-haiku-5-5"
"""The small, fast model: current Haiku (good for wide trees of simple subagents)."""
CONTEXT_WINDOW: Final = 200_000
"""The context window of the current models (tokens), used for compaction thresholds."""
CURRENT_MODELS: Final = ("claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-5-5")
"""Current model names, checked by the tests against the installed SDK's ``anthropic.types.Model``
list and its deprecation table."""
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"

_EPHEMERAL: Final[Mapping[str, str]] = MappingProxyType({"type": "ephemeral"})
_BACKOFF_INITIAL: Final = 0.5
_BACKOFF_MAX: Final = 8.0
_DETAIL_MAX_CHARS: Final = 300


# --------------------------------------------------------------------------------------------
# Prices


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens: uncached input, output, 5-minute cache write, cache read.

    ``long_context`` (with ``long_context_above``) is the rate of a request whose input, cache
    included, is above that many tokens (Haiku 5.5 bills long prompts at a higher rate).
    """

    input: float
    output: float
    cache_write: float
    cache_read: float
    long_context_above: int | None = None
    long_context: Price | None = None

    @classmethod
    def of(
        cls,
        input: float,
        output: float,
        *,
        cache_write: float | None = None,
        cache_read: float | None = None,
    ) -> Price:
        """A price from input and output rates; cache write defaults to 1.25x input, read 0.1x."""
        return cls(
            input,
            output,
            input * 1.25 if cache_write is None else cache_write,
            input * 0.1 if cache_read is None else cache_read,
        )

    def cost(self, usage: Usage) -> float:
        """USD for ``usage`` (whose ``input_tokens`` includes cache reads and writes)."""
        price = self
        if (
            self.long_context is not None
            and self.long_context_above is not None
            and usage.input_tokens > self.long_context_above
        ):
            price = self.long_context
        uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        return (
            uncached * price.input
            + usage.cache_write_tokens * price.cache_write
            + usage.cache_read_tokens * price.cache_read
            + usage.output_tokens * price.output
        ) / 1_000_000


_FABLE_5_1 = Price(10.0, 50.0, 12.5, 0.25)
PRICES: Final[Mapping[str, Price]] = MappingProxyType(
    {
        # Keyed by model-name prefix; the longest matching prefix wins. USD per million tokens
        # (Anthropic's published list prices, 2026-11; the 5-minute cache-write rate).
        "claude-fable-5-2": _FABLE_5_1,  # assumed equal to 5.1 (not yet on the price list we read)
        "claude-mythos-5-2": _FABLE_5_1,
        "claude-fable-5-1": _FABLE_5_1,
        "claude-mythos-5-1": _FABLE_5_1,
        "claude-fable-5": Price(10.0, 50.0, 12.5, 1.0),
        "claude-mythos-5": Price(10.0, 50.0, 12.5, 1.0),
        "claude-mythos-preview": Price(10.0, 50.0, 12.5, 1.0),
        "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
        "claude-opus-5": Price.of(5.0, 25.0),
        "claude-opus-4": Price.of(5.0, 25.0),  # 4.5 to 4.8
        "claude-sonnet-5-5": Price.of(2.0, 10.0),
        "claude-sonnet-5": Price.of(2.0, 10.0),
        "claude-sonnet-4": Price.of(3.0, 15.0),
        "claude-haiku-5-5": Price(
            0.10,
            0.50,
            0.125,
            0.01,
            long_context_above=100_000,
            long_context=Price(0.50, 2.50, 0.625, 0.05),
        ),
        "claude-haiku-4": Price.of(1.0, 5.0),
    }
)
"""The default price table, by model-name prefix. Override with ``AnthropicModel(prices=...)``."""

_FALLBACK_PRICE: Final = PRICES["claude-fable-5"]
"""An unknown model is priced at the highest known rate, so cost budgets err on the safe side."""


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price:
    """The price of ``model``: the longest prefix of its name in ``prices``, else in
    :data:`PRICES`, else the highest known rate."""
    for table in (prices or {}, PRICES):
        matches = [key for key in table if model.startswith(key)]
        if matches:
            return table[max(matches, key=len)]
    return _FALLBACK_PRICE


# --------------------------------------------------------------------------------------------
# The shared client and its gate


@dataclass(slots=True)
class _Gate:
    """Held closed after a 429 until its retry-after has passed; every request waits on it."""

    open_at: float = float("-inf")

    def close_for(self, seconds: float) -> None:
        self.open_at = max(self.open_at, trio.current_time() + seconds)

    async def wait(self) -> None:
        while (delay := self.open_at - trio.current_time()) > 0:
            await trio.sleep(delay)


@dataclass(frozen=True, slots=True)
class _Client:
    sdk: AsyncAnthropic
    gate: _Gate = field(default_factory=_Gate)


async def _sdk() -> Any:
    """The ``anthropic`` module. Its first import takes ~1–1.5 s of CPU: done on the event
    loop, it froze every agent, the run's deadline and ``cancel()`` behind the first call, so
    it runs in a worker thread (abandoned if the run is cut; the import finishes on its own)."""
    module = sys.modules.get("anthropic")
    if module is None:
        module = await trio.to_thread.run_sync(
            importlib.import_module, "anthropic", abandon_on_cancel=True
        )
    return module


@asynccontextmanager
async def _open_client(api_key: str, base_url: str) -> AsyncIterator[_Client]:
    anthropic = await _sdk()

    # the SDK's own HTTP client (same defaults), with the process's one TLS context
    http = anthropic.DefaultAsyncHttpxClient(
        verify=_tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    )
    try:
        sdk = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            open_telemetry={"propagation": False, "traces": False},
            http_client=http,
        )
    except BaseException:
        with trio.move_on_after(5, shield=True):
            await http.aclose()
        raise
    try:
        yield _Client(sdk)
    finally:
        with trio.move_on_after(5, shield=True):
            await sdk.close()


@functools.lru_cache(maxsize=4)
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """The TLS context every client of this process uses, built as the SDK would build it.

    Loading the CA bundle is most of what opening an SDK client costs (~30 ms here, against
    ~1 ms with a ready context), and every run opens its own clients: a server or a script
    making many runs paid it each time. An ``ssl.SSLContext`` is safe to share. Keyed by the
    variables that choose the CA bundle, so changing them still takes effect; a bundle replaced
    in place (the same path) is read again only by a new process.
    """
    import httpx2  # the SDK's HTTP library (imported by it anyway)

    del cert_file, cert_dir  # only the cache key: httpx2 reads them from the environment
    return httpx2.create_ssl_context()


def _fingerprint(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Failures


@dataclass(frozen=True, slots=True)
class _Failure:
    kind: str
    detail: str
    retryable: bool
    fatal: bool = False
    retry_after: float | None = None
    rate_limited: bool = False


class _StreamFailed(Exception):
    """A failure found while reading the stream (carried to the retry loop)."""

    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


class _BadResponse(Exception):
    """The response could not be read as a Messages API answer (retried like a server error)."""

    def __init__(self, detail: str, kind: str = "malformed_response") -> None:
        super().__init__(detail)
        self.kind = kind
        self.usage: Usage | None = None
        """Set for a complete answer that could not be used: the API billed it all the same."""


_FIXES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "authentication": "check ANTHROPIC_API_KEY (the API rejected the key)",
        "permission": "the key may not use this model or workspace; check its permissions",
        "billing": "check the account's credit balance and billing settings",
        "not_found": "check the model name (current: {models}) and ANTHROPIC_BASE_URL",
        "invalid_request": "fix the request: model name, max_output_tokens and tool schemas",
        "context_exceeded": "shorten the transcript or compact it",
        "request_too_large": "shorten the transcript or tool results",
        "rate_limit": "lower Limits.max_concurrency or raise the account's rate limit",
        "overloaded": "the API is overloaded; try again later",
    }
)

_STATUS_KINDS: Final[Mapping[int, tuple[str, bool, bool]]] = MappingProxyType(
    {
        # status: (kind, retryable, fatal)
        401: ("authentication", False, True),
        402: ("billing", False, True),
        403: ("permission", False, True),
        404: ("not_found", False, True),
        408: ("timeout", True, False),
        409: ("conflict", True, False),
        413: ("request_too_large", False, False),
        422: ("invalid_request", False, True),
        429: ("rate_limit", True, False),
        529: ("overloaded", True, False),
    }
)

_STREAM_ERROR_KINDS: Final[Mapping[str, tuple[str, bool, bool]]] = MappingProxyType(
    {
        # error.type of an `event: error` in a 200 stream: (kind, retryable, fatal)
        "overloaded_error": ("overloaded", True, False),
        "api_error": ("api_error", True, False),
        "rate_limit_error": ("rate_limit", True, False),
        "timeout_error": ("timeout", True, False),
        "invalid_request_error": ("invalid_request", False, True),
        "authentication_error": ("authentication", False, True),
        "permission_error": ("permission", False, True),
        "billing_error": ("billing", False, True),
        "not_found_error": ("not_found", False, True),
    }
)

# How a 400 says an output cap is over the model's ("max_tokens: 40000 > 32000, which is the
# maximum allowed number of output tokens for ...").
_OVER_CAP: Final = re.compile(
    r"max_tokens:\s*\d+\s*>\s*\d+|maximum allowed number of output tokens"
)

# Stop reasons that may end the output in the middle of a tool call's JSON.
_CUTTING_STOPS: Final = frozenset({"max_tokens", "model_context_window_exceeded", "refusal"})

# How a 400 says that the input (with max_tokens) does not fit the model's context window.
_TOO_LONG_SIGNS: Final = ("prompt is too long", "context window", "exceed context limit")


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _DETAIL_MAX_CHARS:
        text = text[: _DETAIL_MAX_CHARS - 3] + "..."
    return text


def _positive(value: object) -> bool:
    """A number of seconds above zero (not a bool, not NaN; infinity allowed)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _fatal_configuration(message: str) -> ModelError:
    return ModelError(message, fatal=True, kind="configuration")


def _checked_base_url(url: str, source: str, error: Callable[[str], Exception]) -> str:
    """``url`` without surrounding spaces, if it is an http(s) URL; else ``error``: a URL that
    cannot be connected to is a setting to fix, not a network failure to retry five times."""
    stripped = url.strip() if isinstance(url, str) else ""
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", stripped, re.IGNORECASE):
        raise error(
            f"{source} {url!r} is not an http:// or https:// URL (e.g. https://api.anthropic.com)"
        )
    return stripped


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), if any.

    Only a positive, finite delay counts: ``0``, a negative or NaN value, or a date already
    past (clock skew) would remove the backoff and retry in a tight loop, so the exponential
    backoff applies instead (as the SDK itself does).
    """
    delays: list[float] = []
    with contextlib.suppress(ValueError):
        if (ms := headers.get("retry-after-ms")) is not None:
            delays.append(float(ms) / 1000)
    value = headers.get("retry-after")
    if value is not None:
        try:
            delays.append(float(value))
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):
                delays.append(email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    for delay in delays:  # retry-after-ms first, then retry-after
        if 0 < delay < math.inf:
            return delay
    return None


def _classify(exc: Exception) -> _Failure | None:
    """What a failed attempt means, or None for an exception that is not a provider failure."""
    import anthropic
    import httpx2

    if isinstance(exc, _StreamFailed):
        return exc.failure
    if isinstance(exc, _BadResponse):
        return _Failure(exc.kind, _one_line(str(exc)), retryable=True)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        etype = exc.type or ""
        message = exc.api_message or str(exc)
        where = f"HTTP {status}" if status != 200 else "mid-stream error event"
        detail = _one_line(f"{where} {etype}: {message}".replace(" :", ":"))
        if exc.request_id:
            detail += f" [request-id {exc.request_id}]"
        if status == 200:
            kind, retryable, fatal = _STREAM_ERROR_KINDS.get(
                etype, (etype or "api_error", False, False)
            )
        elif status == 400:
            lowered = message.lower()  # one agent's input too long: it may compact, not fatal
            too_long = any(sign in lowered for sign in _TOO_LONG_SIGNS)
            # one agent's output cap over the model's (a cut tool call retried with a doubled
            # cap may ask for more than the model gives): that agent's error, not the tree's
            over_cap = bool(_OVER_CAP.search(lowered))
            if too_long:
                kind, retryable, fatal = "context_exceeded", False, False
            else:
                kind, retryable, fatal = "invalid_request", False, not over_cap
        elif status in _STATUS_KINDS:
            kind, retryable, fatal = _STATUS_KINDS[status]
        elif status >= 500:
            kind, retryable, fatal = "api_error", True, False
        else:
            kind, retryable, fatal = "api_error", False, False
        should = exc.response.headers.get("x-should-retry") if status != 200 else None
        if should == "true" and not fatal:
            retryable = True
        elif should == "false":
            retryable = False
        retry_after = _retry_after(exc.response.headers) if status != 200 else None
        return _Failure(
            kind, detail, retryable, fatal, retry_after, rate_limited=kind == "rate_limit"
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return _Failure("timeout", "request timed out", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return _Failure("connection", _one_line(f"connection error{reason}"), retryable=True)
    if isinstance(exc, httpx2.TimeoutException):
        return _Failure("timeout", "stream timed out", retryable=True)
    if isinstance(exc, httpx2.RequestError):  # raised by the stream after the headers arrived
        return _Failure(
            "connection", _one_line(f"stream broken: {type(exc).__name__}: {exc}"), retryable=True
        )
    if isinstance(exc, anthropic.APIResponseValidationError | json.JSONDecodeError):
        return _Failure(
            "malformed_response", _one_line(f"unreadable response: {exc}"), retryable=True
        )
    if isinstance(exc, anthropic.AnthropicError):
        return _Failure("client_error", _one_line(f"{type(exc).__name__}: {exc}"), retryable=False)
    return None


# --------------------------------------------------------------------------------------------
# Stream assembly


@dataclass(slots=True)
class _Partial:
    kind: str
    parts: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    signature: str = ""
    initial_input: Any = None


class _Assembler:
    """Builds the final message from SSE events and forwards deltas to the run's events.

    Events are plain dicts as the API sends them (we read the SSE ourselves, see ``_attempt``).
    A problem in the stream (an ``event: error``, unreadable JSON) is remembered in ``failure``
    rather than raised, so that the caller can drain the stream to its end first.
    """

    def __init__(self, ctx: ModelContext) -> None:
        self._ctx = ctx
        self._blocks: dict[int, _Partial] = {}
        self.failure: _Failure | None = None
        self.id = ""
        self.model = ""
        self.started = False
        self.stop_reason: str | None = None
        self.input_tokens = 0
        self.cache_write_tokens = 0
        self.cache_read_tokens = 0
        self.output_tokens = 0

    def event(self, name: str | None, data: str) -> None:
        """One SSE event (``event:`` name and joined ``data:`` lines)."""
        if self.failure is not None or name == "ping" or not data:
            return
        try:
            payload = json.loads(data)
        except ValueError:
            self.failure = _Failure(
                "malformed_response",
                _one_line(f"unreadable {name or 'stream'} event: {data[:80]}"),
                retryable=True,
            )
            return
        if not isinstance(payload, dict):
            self.failure = _Failure(
                "malformed_response", f"{name} event is not an object", retryable=True
            )
            return
        kind = payload.get("type", name)
        if kind == "error" or name == "error":
            error = payload.get("error")
            error = error if isinstance(error, dict) else {}
            etype = str(error.get("type") or "api_error")
            kind_, retryable, fatal = _STREAM_ERROR_KINDS.get(etype, (etype, False, False))
            detail = _one_line(f"mid-stream {etype}: {error.get('message', '')}")
            self.failure = _Failure(
                kind_, detail, retryable, fatal, rate_limited=kind_ == "rate_limit"
            )
            return
        try:
            self._feed(str(kind), payload)
        # AttributeError: a field that should be an object is a string or a list
        except (_BadResponse, AttributeError, KeyError, TypeError, ValueError) as exc:
            self.failure = _Failure(
                "malformed_response", _one_line(f"unexpected {kind} event: {exc}"), retryable=True
            )

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if (value := usage.get("input_tokens")) is not None:
            self.input_tokens = int(value)
        if (value := usage.get("cache_creation_input_tokens")) is not None:
            self.cache_write_tokens = int(value)
        if (value := usage.get("cache_read_input_tokens")) is not None:
            self.cache_read_tokens = int(value)
        if (value := usage.get("output_tokens")) is not None:
            self.output_tokens = int(value)

    def _feed(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "message_start":
            message = event["message"]
            self.started = True
            self.id = str(message.get("id") or "")
            self.model = str(message.get("model") or "")
            self._usage(message.get("usage"))
            return
        if not self.started:
            raise _BadResponse(f"{kind} before message_start")
        if kind == "content_block_start":
            self._start(int(event["index"]), event["content_block"])
        elif kind == "content_block_delta":
            self._delta(int(event["index"]), event["delta"])
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason is not None:
                self.stop_reason = str(reason)
            self._usage(event.get("usage"))
        # content_block_stop, message_stop and event types added later need nothing here

    def _start(self, index: int, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "text":
            initial = str(block.get("text") or "")
            self._blocks[index] = _Partial("text", [initial])
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
                raise _BadResponse("tool_use block without id or name")
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
        # other block types (server tools) are not modelled by the transcript

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        partial = self._blocks.get(index)
        if partial is None:
            return  # a delta for a block type we do not keep
        kind = delta.get("type")
        if kind == "text_delta" and partial.kind == "text":
            chunk = str(delta["text"])
            partial.parts.append(chunk)
            if chunk:
                self._ctx.on_text_delta(chunk)
        elif kind == "input_json_delta" and partial.kind == "tool_use":
            partial.parts.append(str(delta["partial_json"]))
        elif kind == "thinking_delta" and partial.kind == "thinking":
            partial.parts.append(str(delta["thinking"]))
        elif kind == "signature_delta" and partial.kind == "thinking":
            partial.signature += str(delta["signature"])

    def content(self) -> tuple[Block, ...]:
        """The final blocks; raises ``_BadResponse`` for a stream that did not complete."""
        if not self.started:
            raise _BadResponse("stream ended before message_start", kind="incomplete_response")
        if self.stop_reason is None:
            raise _BadResponse("stream ended before the stop reason", kind="incomplete_response")
        blocks: list[Block] = []
        for index in sorted(self._blocks):
            partial = self._blocks[index]
            joined = "".join(partial.parts)
            # A JSON escape like "\ud83d" alone decodes to a lone surrogate, which the next
            # request (this reply goes back in the transcript) cannot encode: U+FFFD instead.
            # Thinking is left as it is: its signature covers it.
            if partial.kind == "text":
                if joined:
                    blocks.append(TextBlock(well_formed(joined)))
            elif partial.kind == "thinking":
                blocks.append(ThinkingBlock(joined, partial.signature))
            elif partial.kind == "redacted_thinking":
                blocks.append(RedactedThinkingBlock(partial.signature))
            else:
                blocks.append(
                    ToolUseBlock(
                        well_formed(partial.id),
                        well_formed(partial.name),
                        _unicode_only(self._tool_input(partial, joined)),
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
        if isinstance(value, dict):
            return value
        if self.stop_reason in _CUTTING_STOPS:
            return {}  # a tool call cut short: the loop retries, compacts or ends the agent
        raise _BadResponse(f"tool_use {partial.name!r} input is not a JSON object")


def _unicode_only(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with any lone surrogate in its strings (keys too) replaced by U+FFFD."""
    encoded = json.dumps(arguments, ensure_ascii=False)
    if is_text(encoded):
        return arguments
    fixed: dict[str, Any] = json.loads(well_formed(encoded))
    return fixed


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


async def sse_lines(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """The lines of a text stream, ended by CR, LF or CRLF only, as server-sent events are.

    Not ``aiter_lines()``: it splits like ``str.splitlines()``, also at U+2028, U+2029 and
    U+0085, which JSON carries unescaped (text a model copied from a web page or a PDF): a
    ``data:`` line was cut in two and every retry failed the same way. Each chunk is scanned
    once, so a long line costs what it is long.
    """
    pieces: list[str] = []  # of the line not ended yet
    after_cr = False  # the last chunk ended with CR: a LF opening the next one is part of it
    async for chunk in chunks:
        if after_cr and chunk[:1] == "\n":
            chunk, after_cr = chunk[1:], False
        if not chunk:
            continue
        after_cr = chunk.endswith("\r")
        parts = _LINE_BREAK.split(chunk)
        if len(parts) == 1:
            pieces.append(chunk)
            continue
        pieces.append(parts[0])
        yield "".join(pieces)
        for line in parts[1:-1]:
            yield line
        pieces = [parts[-1]]
    line = "".join(pieces)
    if line:
        yield line


async def _read_sse(lines: AsyncIterator[str], assembler: _Assembler) -> None:
    """Decode server-sent events from ``lines`` into ``assembler``, to the end of the stream."""
    name: str | None = None
    data: list[str] = []
    async for line in lines:
        if not line:
            if name is not None or data:
                assembler.event(name, "\n".join(data))
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


# --------------------------------------------------------------------------------------------
# The model


class AnthropicModel:
    """Claude via the Messages API. See the module docstring for caching, streaming and retries.

    Args:
        model: the model name (default :data:`DEFAULT_MODEL`).
        api_key: the key; default ``ANTHROPIC_API_KEY``, read when a request is made.
        base_url: the API's base URL (a proxy or gateway); default ``ANTHROPIC_BASE_URL``, then
            ``https://api.anthropic.com``.
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most).
        prices: a :class:`Price` for this model, or a table by model-name prefix consulted
            before :data:`PRICES`.
        timeout: seconds allowed per attempt for connecting (at most 5 s) and between reads;
            ``None`` for no timeout.
        max_retry_after: the longest ``retry-after`` honoured, in seconds (longer ones are capped).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        prices: Price | Mapping[str, Price] | None = None,
        timeout: float | None = 600.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("AnthropicModel needs a model name, e.g. 'claude-sonnet-5-5'")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if timeout is not None and not _positive(timeout):
            raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not (_positive(max_retry_after) or max_retry_after == 0):
            raise ConfigurationError(
                f"max_retry_after must be a number of seconds >= 0, got {max_retry_after!r}"
            )
        # "" means the default, as for ANTHROPIC_BASE_URL
        base_url = _checked_base_url(base_url, "base_url", ConfigurationError) if base_url else None
        self._model = model.strip()
        self._api_key = api_key
        self._base_url = base_url
        self._max_retries = max_retries
        self._price = prices if isinstance(prices, Price) else price_for(self._model, prices)
        self._timeout = timeout
        self._max_retry_after = max_retry_after

    def __repr__(self) -> str:
        return f"AnthropicModel({self._model!r})"

    @property
    def name(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "anthropic"

    @property
    def context_window(self) -> int:
        """Input tokens the model accepts; context policies compact at a fraction of it."""
        return CONTEXT_WINDOW

    @property
    def has_api_key(self) -> bool:
        """Whether the model was given its own ``api_key`` (else it reads ``ANTHROPIC_API_KEY``
        at each call)."""
        return bool(self._api_key and self._api_key.strip())

    @property
    def price(self) -> Price:
        """The rates :meth:`cost` uses."""
        return self._price

    def cost(self, usage: Usage) -> float:
        return self._price.cost(usage)

    # -- request building --------------------------------------------------------------------

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API parameters for ``request`` (without ``stream``), breakpoints included.

        Deterministic: the same request gives the same parameters, and a later turn of the same
        conversation serializes its tools, system and earlier messages exactly as before (only the
        ``cache_control`` markers on messages move).
        """
        params: dict[str, Any] = {"model": self._model, "max_tokens": request.max_tokens}
        if request.tools:
            tools = [tool.to_wire() for tool in request.tools]
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
            params["tools"] = tools
        if not is_blank(request.system):  # the API refuses blank text (a 400: the tree stops)
            params["system"] = [
                {"type": "text", "text": request.system, "cache_control": dict(_EPHEMERAL)}
            ]
        params["messages"] = _messages_with_breakpoints(request.messages)
        return params

    # -- the call ----------------------------------------------------------------------------

    def _credentials(self) -> tuple[str, str]:
        api_key = self._api_key or os.environ.get("ANTHROPIC_API_KEY") or ""
        if not api_key.strip():
            raise ModelError(
                f"anthropic {self._model}: no API key; set ANTHROPIC_API_KEY "
                "(or pass AnthropicModel(api_key=...))",
                fatal=True,
                kind="authentication",
            )
        base_url = self._base_url  # checked when the model was built
        if base_url is None:
            from_env = os.environ.get("ANTHROPIC_BASE_URL")
            base_url = (
                _checked_base_url(from_env, "ANTHROPIC_BASE_URL", _fatal_configuration)
                if from_env
                else DEFAULT_BASE_URL
            )
        return api_key.strip(), base_url.rstrip("/")

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        api_key, base_url = self._credentials()
        factory: Callable[[], Any] = lambda: _open_client(api_key, base_url)  # noqa: E731
        client = cast(
            _Client, await ctx.clients.get(("anthropic", base_url, _fingerprint(api_key)), factory)
        )
        params = self.request_params(request)
        attempts = 0
        spent: Usage | None = None  # answers billed but not usable (retried): counted too
        while True:
            await client.gate.wait()
            attempts += 1
            try:
                response = await self._attempt(client.sdk, params, ctx)
            except Exception as exc:
                failure = _classify(exc)
                if failure is None:
                    raise
                billed = getattr(exc, "usage", None)
                if billed is not None:
                    spent = billed if spent is None else spent + billed
            else:
                if spent is not None:
                    response = dataclasses.replace(response, usage=response.usage + spent)
                return response
            delay = failure.retry_after  # the server's, capped; else (or capped to 0) backoff
            if delay is not None:
                delay = min(delay, self._max_retry_after)
            if not delay:
                delay = min(_BACKOFF_MAX, _BACKOFF_INITIAL * 2 ** (attempts - 1))
                delay *= 1 - 0.25 * random.random()
            if failure.rate_limited:
                # Every request on this client waits, even if this one gives up now.
                client.gate.close_for(delay)
            if not failure.retryable or attempts > self._max_retries:
                raise self._error(failure, attempts, api_key, spent) from None
            spans.record_retry(attempts, failure.kind, delay)  # on the chat span
            if not failure.rate_limited:  # (a rate-limited retry waits at the gate above)
                await trio.sleep(delay)

    async def _attempt(
        self, sdk: AsyncAnthropic, params: dict[str, Any], ctx: ModelContext
    ) -> ModelResponse:
        import anthropic

        timeout: anthropic.Timeout | None = None
        if self._timeout is not None:
            timeout = anthropic.Timeout(self._timeout, connect=min(5.0, self._timeout))
        stream = await sdk.messages.create(
            model=params["model"],
            max_tokens=params["max_tokens"],
            messages=params["messages"],
            system=params.get("system", anthropic.omit),
            tools=params.get("tools", anthropic.omit),
            stream=True,
            timeout=timeout,
        )
        # We read the SSE from the raw response instead of iterating the SDK's AsyncStream: its
        # parser raises from inside nested async generators on an `event: error` (such as a
        # mid-stream overloaded_error) or bad JSON and leaves them to the garbage collector (trio
        # warns). Reading ourselves, a bad stream is remembered and drained to its end, so every
        # generator finishes; and we keep the raw event dicts.
        assembler = _Assembler(ctx)
        try:
            await _read_sse(sse_lines(stream.response.aiter_text()), assembler)
        finally:
            # Closing does not wait on the peer; shield it so a cancelled call still releases
            # (rather than leaks) its connection and the client stays usable.
            with trio.move_on_after(5, shield=True):
                await stream.close()
        if assembler.failure is not None:
            raise _StreamFailed(assembler.failure)
        usage = Usage(
            input_tokens=assembler.input_tokens
            + assembler.cache_write_tokens
            + assembler.cache_read_tokens,
            output_tokens=assembler.output_tokens,
            cache_read_tokens=assembler.cache_read_tokens,
            cache_write_tokens=assembler.cache_write_tokens,
            requests=1,
        )
        usage = dataclasses.replace(usage, cost_usd=self.cost(usage))
        try:
            content = assembler.content()
        except _BadResponse as exc:
            if assembler.stop_reason is not None:  # a whole answer (bad tool JSON): billed
                exc.usage = usage
            raise
        return ModelResponse(
            content,
            cast(str, assembler.stop_reason),  # content() checked it is set
            usage,
            assembler.model or self._model,
            assembler.id,
        )

    def _error(
        self, failure: _Failure, attempts: int, api_key: str, spent: Usage | None = None
    ) -> ModelError:
        what = failure.kind.replace("_", " ")
        tries = f" after {attempts} attempts" if failure.retryable and attempts > 1 else ""
        message = f"anthropic {self._model}: {what}{tries} ({failure.detail})"
        fix = _FIXES.get(failure.kind)
        if fix:
            message += "; " + fix.format(models=", ".join(CURRENT_MODELS))
        message = redact(_one_line(message).replace(api_key, REDACTED))
        return ModelError(message, fatal=failure.fatal, kind=failure.kind, usage=spent)


def _has_blank_text(message: Message) -> bool:
    for block in message.content:  # noqa: SIM110 - no generator: runs for every message of a call
        if isinstance(block, TextBlock) and is_blank(block.text):
            return True
    return False


def _messages_with_breakpoints(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as wire dicts, with ``cache_control`` on the last cacheable block of the last
    message and of the newest user message before it.

    The API refuses empty or blank text blocks with a 400 (fatal: it would stop the whole
    tree), yet a model may answer with one before a tool call: they are left out, and so is a
    message left with nothing (the API joins the consecutive turns of one role that remain).
    """
    wire: list[dict[str, Any]] = []
    for m in messages:
        message = message_to_wire(m)
        if _has_blank_text(m):
            message["content"] = [
                b for b in message["content"] if b["type"] != "text" or not is_blank(b["text"])
            ]
            if not message["content"]:
                continue
        wire.append(message)
    # two message breakpoints; with the tools' and the system's, the API's limit of four
    targets = [len(wire) - 1] if wire else []
    targets += [i for i in range(len(wire) - 2, -1, -1) if wire[i]["role"] == "user"][:1]
    for i in targets:
        content: list[dict[str, Any]] = wire[i]["content"]
        for block in reversed(content):
            if block["type"] in ("thinking", "redacted_thinking"):  # no cache_control there
                continue
            block["cache_control"] = dict(_EPHEMERAL)
            break
    return wire
