"""Claude through the official ``anthropic`` SDK's async client, under trio: the request loop.

:class:`AnthropicModel` is configuration: building one opens nothing and imports no SDK (its
first call imports it, in a worker thread). A call asks the run's
:class:`~orchestrator.models.base.ClientPool` for the client of its base URL and key, shared by
the run's agents with one retry-after gate and closed by the run (the SDK's own cleanup works on
asyncio only); builds the parameters, cache breakpoints on a byte-stable prefix included; streams
the answer (``_anthropic_stream``); and retries what ``_anthropic_errors`` says is retryable, with
``_retry``'s backoff and gate. Prices are in ``_anthropic_prices``; what the OpenAI adapter uses
too (the TLS context, the SSE lines, :class:`Price`) in ``_shared``. See docs/anthropic.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

import trio

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import Message, TextBlock, Usage, is_blank, message_to_wire
from ..core.redact import REDACTED, redact
from ..tracing import spans
from ._anthropic_errors import FIXES, classify
from ._anthropic_prices import PRICES as PRICES
from ._anthropic_prices import price_for as price_for
from ._anthropic_stream import Assembler, read_sse
from ._retry import BadResponse, Failure, Gate, StreamFailed, one_line, plan_retry
from ._shared import Price as Price
from ._shared import fingerprint, import_sdk, positive, stream_limit, tls_context
from ._shared import sse_lines as sse_lines
from .base import HostedToolSpec, ModelContext, ModelRequest, ModelResponse, OutputFormat, ToolSpec

if TYPE_CHECKING:
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
HOSTED_TOOL_TYPES: Final[Mapping[str, str]] = MappingProxyType(
    {"web_search": "web_search_20260318", "web_fetch": "web_fetch_20260318"}
)
"""The server tool version sent for each hosted tool, checked by the tests against the newest
``WebSearchTool*Param`` / ``WebFetchTool*Param`` of the installed SDK's ``anthropic.types``."""

_EPHEMERAL: Final[Mapping[str, str]] = MappingProxyType({"type": "ephemeral"})


# --------------------------------------------------------------------------------------------
# The shared client


@dataclass(frozen=True, slots=True)
class _Client:
    sdk: AsyncAnthropic
    gate: Gate = field(default_factory=Gate)


@asynccontextmanager
async def _open_client(api_key: str, base_url: str) -> AsyncIterator[_Client]:
    anthropic: Any = await import_sdk("anthropic")

    # the SDK's own HTTP client (same defaults), with the process's one TLS context
    http = anthropic.DefaultAsyncHttpxClient(
        verify=tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    )
    try:
        sdk = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            # SDK retries off: ours let a 429's retry-after hold back every sibling. SDK tracing
            # off: our chat span is the one span per call, and no traceparent reaches the API.
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


# --------------------------------------------------------------------------------------------
# Settings


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


# --------------------------------------------------------------------------------------------
# The model


class AnthropicModel:
    """Claude via the Messages API. See docs/anthropic.md for caching, streaming and retries.

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
        max_retry_after: the longest ``retry-after`` honoured, in seconds (a longer one ends the
            call at once with an error naming the wait).
    """

    supports_native_output = True
    """``output_mode="native"`` sends ``output_config.format`` (a JSON schema): the answer's
    text is then JSON of the agent's output type."""
    prompt_caching = True
    """Its prompt cache serves a prefix once the response that wrote it starts: siblings of
    one definition wait for the first one's (see Limits.cache_warmup_wait)."""
    supports_hosted_tools: frozenset[str] = frozenset(HOSTED_TOOL_TYPES)
    """The hosted tools (``WebSearch``, ``WebFetch``) this model offers as server tools."""

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
        if timeout is not None and not positive(timeout):
            raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not (positive(max_retry_after) or max_retry_after == 0):
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
            tools = [_tool_wire(tool) for tool in request.tools]
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
            params["tools"] = tools
        if not is_blank(request.system):  # the API refuses blank text (a 400: the tree stops)
            params["system"] = [
                {"type": "text", "text": request.system, "cache_control": dict(_EPHEMERAL)}
            ]
        params["messages"] = _messages_with_breakpoints(request.messages)
        if request.output is not None and request.output.native:
            # After the messages: the cached prefix (tools, system, messages) is as without it.
            params["output_config"] = {"format": _json_output_format(request.output)}
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
        client = await ctx.clients.get(
            ("anthropic", base_url, fingerprint(api_key)), lambda: _open_client(api_key, base_url)
        )
        params = self.request_params(request)
        attempts = 0
        spent: Usage | None = None  # answers billed but not usable (retried): counted too
        while True:
            refusal = await client.gate.passed(ctx.on_wait)
            if refusal is not None:  # a sibling was told to wait longer than the cap
                raise self._error(refusal, attempts, api_key, spent)
            attempts += 1
            try:
                response = await self._attempt(client.sdk, params, ctx)
            except Exception as exc:
                failure = classify(exc)
                if failure is None:
                    raise
                billed = getattr(exc, "usage", None)
                if billed is not None:
                    spent = billed if spent is None else spent + billed
            else:
                if spent is not None:
                    response = dataclasses.replace(response, usage=response.usage + spent)
                return response
            delay, failure = plan_retry(failure, attempts, self._max_retry_after, client.gate)
            if delay is None or not failure.retryable or attempts > self._max_retries:
                raise self._error(failure, attempts, api_key, spent) from None
            spans.record_retry(attempts, failure.kind, delay)  # on the chat span
            if not failure.rate_limited:  # (a rate-limited retry waits at the gate above)
                ctx.on_wait(delay, f"{failure.kind.replace('_', ' ')}: retry {attempts}")
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
            output_config=params.get("output_config", anthropic.omit),
            stream=True,
            timeout=timeout,
        )
        # We read the SSE from the raw response instead of iterating the SDK's AsyncStream: its
        # parser raises from inside nested async generators on an `event: error` (such as a
        # mid-stream overloaded_error) or bad JSON and leaves them to the garbage collector (trio
        # warns). Reading ourselves, a bad stream is remembered and drained to its end, so every
        # generator finishes; and we keep the raw event dicts.
        assembler = Assembler(ctx, stream_limit(int(params["max_tokens"])))
        try:
            await read_sse(sse_lines(stream.response.aiter_text()), assembler)
        finally:
            # Closing does not wait on the peer; shield it so a cancelled call still releases
            # (rather than leaks) its connection and the client stays usable.
            with trio.move_on_after(5, shield=True):
                await stream.close()
        if assembler.failure is not None:
            raise StreamFailed(assembler.failure)
        usage = Usage(
            input_tokens=assembler.input_tokens
            + assembler.cache_write_tokens
            + assembler.cache_read_tokens,
            # cut past the output limit: the limit billed, at least
            output_tokens=(
                max(assembler.output_tokens, int(params["max_tokens"]))
                if assembler.cut
                else assembler.output_tokens
            ),
            cache_read_tokens=assembler.cache_read_tokens,
            cache_write_tokens=assembler.cache_write_tokens,
            requests=1,
            web_search_requests=assembler.web_search_requests,
            web_fetch_requests=assembler.web_fetch_requests,
        )
        usage = dataclasses.replace(usage, cost_usd=self.cost(usage))
        try:
            content = assembler.content()
        except BadResponse as exc:
            if assembler.stop_reason is not None:  # a whole answer (bad tool JSON): billed
                exc.usage = usage
            raise
        return ModelResponse(
            content,
            cast(str, assembler.stop_reason),  # content() checked it is set
            usage,
            assembler.model or self._model,
            assembler.id,
            server_tool_times=tuple(
                (call_id, times[0], times[1]) for call_id, times in assembler.server_times.items()
            ),
        )

    def _error(
        self, failure: Failure, attempts: int, api_key: str, spent: Usage | None = None
    ) -> ModelError:
        what = failure.kind.replace("_", " ")
        tries = f" after {attempts} attempts" if failure.retryable and attempts > 1 else ""
        message = f"anthropic {self._model}: {what}{tries} ({failure.detail})"
        fix = FIXES.get(failure.kind)
        if fix:
            message += "; " + fix.format(models=", ".join(CURRENT_MODELS))
        message = redact(one_line(message).replace(api_key, REDACTED))
        return ModelError.from_kind(message, fatal=failure.fatal, kind=failure.kind, usage=spent)


def _tool_wire(tool: ToolSpec) -> dict[str, Any]:
    """A ``tools`` entry: a hosted tool as the server tool of its current version."""
    if isinstance(tool, HostedToolSpec):
        kind = HOSTED_TOOL_TYPES.get(tool.name)
        if kind is None:  # check_hosted_tools refuses such an agent before its run starts
            raise _fatal_configuration(f"anthropic: no server tool named {tool.name!r}")
        return {"type": kind, **tool.to_wire()}
    return tool.to_wire()


def _json_output_format(output: OutputFormat) -> dict[str, Any]:
    """``output_config.format`` for a typed agent's answer: the schema as the SDK's own
    ``transform_schema`` shapes it for the API (``additionalProperties: false`` on every object;
    keywords the API does not take are moved into the description)."""
    from anthropic import transform_schema

    problem = _free_map(output.schema, "")
    if problem is None:
        try:
            schema = transform_schema(dict(output.schema))
        except (ValueError, TypeError) as exc:
            problem = one_line(str(exc))
        else:
            return {"type": "json_schema", "schema": schema}
    raise ModelError(
        f"output type {output.name}: its JSON schema cannot be asked for as Claude's structured "
        f"output ({problem}); use output_mode='tool'",
        fatal=True,
        kind="configuration",
    )


def _free_map(schema: Any, path: str) -> str | None:
    """Where ``schema`` has a map with free keys (``dict[str, X]``): structured outputs close
    every object, so the model could only answer it empty."""
    if not isinstance(schema, Mapping):
        return None
    if (
        schema.get("type") == "object"
        and not schema.get("properties")
        and schema.get("additionalProperties", False) is not False
    ):
        return f"{path or 'the value'} is a map with free keys, which Claude's structured output closes"
    subs: list[tuple[str, Any]] = []
    for key in ("$defs", "properties"):
        named = schema.get(key)
        if isinstance(named, Mapping):
            subs += [
                (f"{path}.{name}" if key == "properties" else name, sub)
                for name, sub in named.items()
            ]
    for key in ("items", "additionalProperties"):
        subs.append((path, schema.get(key)))
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        subs += [(path, sub) for sub in schema.get(key) or ()]
    for where, sub in subs:
        found = _free_map(sub, where.lstrip("."))
        if found is not None:
            return found
    return None


def _has_blank_text(message: Message) -> bool:
    for block in message.content:  # noqa: SIM110 - no generator: runs for every message of a call
        if isinstance(block, TextBlock) and is_blank(block.text):
            return True
    return False


_API_ID = re.compile(r"[a-zA-Z0-9_-]+").fullmatch
"""The tool-use ids the API takes (it refuses others with a 400 at every later request)."""


def _api_ids(blocks: list[dict[str, Any]]) -> None:
    """Tool-use ids the API would refuse (the runtime's ``id~2`` for a repeated id, another
    provider's ``call:1``), in place: each mapped to letters, digits and ``_`` plus a digest of
    itself, so a call and its result still pair, distinct ids stay distinct, and every request
    sends the same bytes (the prompt cache). Ids the API takes are sent as they are."""
    for block in blocks:
        key = "id" if block["type"] == "tool_use" else "tool_use_id"
        value = block.get(key)
        if isinstance(value, str) and not _API_ID(value):
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            block[key] = f"{re.sub(r'[^a-zA-Z0-9_-]', '_', value)[:40]}_{digest}"


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
        _api_ids(message["content"])
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
