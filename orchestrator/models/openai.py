"""OpenAI-compatible endpoints through the official ``openai`` SDK's async client, under trio.

:class:`OpenAIModel` speaks the Chat Completions API, so one class serves OpenAI, Ollama, vLLM,
llama.cpp's server and LM Studio. Like :class:`~orchestrator.models.anthropic.AnthropicModel` it
is configuration: building one opens nothing and imports no SDK (its first call imports it, in a
worker thread). A call asks the run's :class:`~orchestrator.models.base.ClientPool` for the
client of its provider, base URL and key (one per run: an ``AsyncOpenAI`` shared by two
``trio.run`` calls hangs), converts the transcript (``_openai_stream``), streams the answer, and
retries what ``_openai_errors`` says is retryable with ``_retry``'s backoff and gate. What a
server cannot do is learned once per client: a server that refuses to stream an answer that may
call tools (llama.cpp's) is asked without streaming from then on, a model that refuses
``max_tokens`` (OpenAI's reasoning models) gets ``max_completion_tokens``, a server that refuses
``response_format`` of type ``json_schema`` (llama-cpp-python's) is asked for ``json_object``
with the schema beside it. Native output's schema: ``_openai_schema``. See docs/models.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast
from urllib.parse import urlsplit

import trio

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import ToolUseBlock, Usage
from ..core.redact import REDACTED, redact
from ..tracing import spans
from ._openai_errors import FIXES, classify
from ._openai_prices import FREE as FREE
from ._openai_prices import PRICES as PRICES
from ._openai_prices import price_for as price_for
from ._openai_schema import response_format
from ._openai_stream import (
    FINISH_REASONS,
    INVALID_JSON_KEY,
    Assembler,
    estimate_tokens,
    read_sse,
    wire_messages,
    wire_tools,
)
from ._retry import BadResponse, Failure, Gate, StreamFailed, one_line, plan_retry
from ._shared import Price as Price
from ._shared import (
    fingerprint,
    import_sdk,
    positive,
    sse_lines,
    stream_limit,
    tls_context,
    token_count,
)
from .base import ModelContext, ModelRequest, ModelResponse

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "DEFAULT_BASE_URL",
    "FINISH_REASONS",
    "FREE",
    "INVALID_JSON_KEY",
    "OLLAMA_BASE_URL",
    "PRICES",
    "OpenAIModel",
    "Price",
    "ToolChoice",
    "ollama",
    "price_for",
]

_logger = logging.getLogger(__name__)

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
OLLAMA_BASE_URL: Final = "http://127.0.0.1:11434/v1"
_NO_KEY: Final = "unused"
"""Sent as the key to a server that needs none (the SDK always sends one)."""

ToolChoice: TypeAlias = str | Mapping[str, Any] | Callable[[ModelRequest], Any] | None
"""``tool_choice`` for requests that offer tools: ``"auto"`` (sent, since llama.cpp's server
ignores tools without it), ``"required"``, ``"none"``, ``{"type": "function", ...}``, ``None``
(not sent), or a function of the request returning one of those (e.g. ``"required"`` on the
first turn only)."""

_CONTEXT_WINDOWS: Final[Mapping[str, int]] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "o4-mini": 200_000,
    "o3": 200_000,
    "o1": 200_000,
}
_REASONING_MODEL: Final = re.compile(r"^(o\d|gpt-5)")


# --------------------------------------------------------------------------------------------
# Endpoints and the shared client


@dataclass(frozen=True, slots=True)
class _Endpoint:
    """Where a provider's key and base URL come from."""

    provider: str = "openai"
    key_env: str | None = "OPENAI_API_KEY"
    base_url_env: str | None = "OPENAI_BASE_URL"
    default_base_url: str = DEFAULT_BASE_URL
    host_form: bool = False
    """The variable may hold ``host:port`` without a scheme or path (``OLLAMA_HOST``)."""


_OPENAI: Final = _Endpoint()
_OLLAMA: Final = _Endpoint("ollama", None, "OLLAMA_HOST", OLLAMA_BASE_URL, host_form=True)


@dataclass(slots=True)
class _Client:
    sdk: AsyncOpenAI
    gate: Gate = field(default_factory=Gate)
    stream_tools: bool = True
    """Whether the server streams answers that may call tools (learned: llama.cpp's does not)."""
    completion_tokens: set[str] = field(default_factory=set)
    """Models that refused ``max_tokens`` here (they get ``max_completion_tokens``)."""
    json_schema: bool = True
    """Whether the server takes ``response_format`` of type ``json_schema`` (learned:
    llama-cpp-python's takes only ``json_object``, with the schema beside it)."""


@asynccontextmanager
async def _open_client(api_key: str, base_url: str) -> AsyncIterator[_Client]:
    openai: Any = await import_sdk("openai")
    http = openai.DefaultAsyncHttpxClient(
        verify=tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    )
    try:
        # SDK retries off: ours let a 429's retry-after hold back every sibling. The SDK sends
        # no traceparent (it has no tracing of its own).
        sdk = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, http_client=http
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


def _checked_base_url(url: object, source: str, error: Callable[[str], Exception]) -> str:
    """``url`` without surrounding spaces or a trailing ``/``, if it is an http(s) URL; else
    ``error`` (a URL that cannot be connected to is a setting to fix, not a failure to retry)."""
    stripped = url.strip() if isinstance(url, str) else ""
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", stripped, re.IGNORECASE):
        raise error(
            f"{source} {url!r} is not an http:// or https:// URL "
            "(e.g. https://api.openai.com/v1 or http://127.0.0.1:8080/v1)"
        )
    return stripped.rstrip("/")


def _host_form(value: str) -> str:
    """``OLLAMA_HOST``'s forms (``host``, ``host:port``, ``http://host:port``) as a base URL."""
    value = value.strip()
    if "://" not in value:
        value = f"http://{value}"
    parts = urlsplit(value)
    if parts.path in ("", "/"):
        netloc = parts.netloc if ":" in parts.netloc else f"{parts.netloc}:11434"
        value = f"{parts.scheme}://{netloc}/v1"
    return value


def _fatal_configuration(message: str) -> ModelError:
    return ModelError(message, fatal=True, kind="configuration")


# --------------------------------------------------------------------------------------------
# The model


class OpenAIModel:
    """A model behind the Chat Completions API. See docs/models.md.

    Args:
        model: the model name the server knows (``gpt-4.1-mini``, ``llama3.2``, a GGUF's name).
        api_key: the key; default ``OPENAI_API_KEY``, read when a request is made. A server
            given by ``base_url`` (or ``OPENAI_BASE_URL``) may need none.
        base_url: the API's base URL, usually ending in ``/v1``; default ``OPENAI_BASE_URL``,
            then ``https://api.openai.com/v1``.
        timeout: seconds allowed per attempt for connecting (at most 5 s) and between reads;
            ``None`` for no timeout.
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most).
        prices: a :class:`Price` for this model, or a table by model-name prefix consulted
            before :data:`PRICES`. A model no table knows has no price: see :meth:`cost`.
        max_retry_after: the longest ``retry-after`` honoured, in seconds (a longer one ends the
            call at once with an error naming the wait).
        stream: stream answers (text deltas reach the run's events as they come). A server that
            cannot stream an answer that may call tools is asked without streaming for those.
        tool_choice: see :data:`ToolChoice` (default ``"auto"``, sent whenever tools are).
        max_tokens_field: ``"max_tokens"`` or ``"max_completion_tokens"``; default: the latter
            for OpenAI's reasoning models (``o1``..., ``gpt-5``...), else the former, and the
            latter for a model once a server refused the former.
        context_window: input tokens the model accepts (context policies compact at a fraction
            of it); default: known for OpenAI's models, else unknown (no compaction threshold).
        extra_body: fields added to every request body (``{"reasoning_effort": "low"}``,
            Ollama's ``{"options": {"num_ctx": 8192}}``).
        provider: the provider recorded on spans (``gen_ai.provider.name``).
    """

    supports_native_output = True
    """``output_mode="native"`` sends ``response_format`` with the output type's JSON schema
    (strict where strict mode can take it): the answer's text is then that JSON. A server that
    ignores ``response_format`` answers as it likes; an answer that is not valid JSON of the
    type goes back to the model with the problems, as any invalid output does."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = 600.0,
        max_retries: int = 4,
        prices: Price | Mapping[str, Price] | None = None,
        max_retry_after: float = 60.0,
        stream: bool = True,
        tool_choice: ToolChoice = "auto",
        max_tokens_field: str | None = None,
        context_window: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        provider: str | None = None,
        _endpoint: _Endpoint = _OPENAI,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("OpenAIModel needs a model name, e.g. 'gpt-4.1-mini'")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if timeout is not None and not positive(timeout):
            raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not (positive(max_retry_after) or max_retry_after == 0):
            raise ConfigurationError(
                f"max_retry_after must be a number of seconds >= 0, got {max_retry_after!r}"
            )
        if max_tokens_field not in (None, "max_tokens", "max_completion_tokens"):
            raise ConfigurationError(
                "max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_field!r}"
            )
        if context_window is not None and (
            isinstance(context_window, bool)
            or not isinstance(context_window, int)
            or context_window < 1
        ):
            raise ConfigurationError(
                f"context_window must be a number of tokens > 0, got {context_window!r}"
            )
        if not (isinstance(tool_choice, str | Mapping) or tool_choice is None) and not callable(
            tool_choice
        ):
            raise ConfigurationError(f"tool_choice: not a tool choice: {tool_choice!r}")
        self._model = model.strip()
        self._api_key = api_key.strip() if isinstance(api_key, str) and api_key.strip() else None
        # "" means the default, as for OPENAI_BASE_URL
        self._base_url = (
            _checked_base_url(base_url, "base_url", ConfigurationError) if base_url else None
        )
        self._timeout = timeout
        self._max_retries = max_retries
        self._price = prices if isinstance(prices, Price) else price_for(self._model, prices)
        self._max_retry_after = max_retry_after
        self._stream = bool(stream)
        self._tool_choice = tool_choice
        self._max_tokens_field = max_tokens_field
        self._context_window = context_window
        self._extra_body = dict(extra_body or {})
        self._endpoint = _endpoint
        self._provider = provider or _endpoint.provider

    def __repr__(self) -> str:
        return f"OpenAIModel({self._model!r}, provider={self._provider!r})"

    @property
    def name(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def context_window(self) -> int | None:
        """Input tokens the model accepts, if known."""
        if self._context_window is not None:
            return self._context_window
        matches = [k for k in _CONTEXT_WINDOWS if self._model.startswith(k)]
        return _CONTEXT_WINDOWS[max(matches, key=len)] if matches else None

    @property
    def has_api_key(self) -> bool:
        """Whether the model was given its own ``api_key``."""
        return self._api_key is not None

    @property
    def has_endpoint(self) -> bool:
        """Whether the model can be called without anything from the environment: it was given
        a key or a base URL, or it names a local server by default (``ollama:``)."""
        return (
            self._api_key is not None
            or self._base_url is not None
            or self._endpoint.key_env is None
        )

    @property
    def price(self) -> Price | None:
        """The rates :meth:`cost` uses; ``None`` for a model without a known price."""
        return self._price

    def cost(self, usage: Usage) -> float:
        """USD for ``usage``. A model without a price raises ``ConfigurationError`` (a cost
        budget refuses to guess); its calls report ``cost_usd=0``."""
        if self._price is None:
            raise ConfigurationError(
                f"no price is known for {self._provider} model {self._model!r}: pass "
                "OpenAIModel(prices=Price(input, output, cache_write, cache_read)) in USD per "
                "million tokens (Price(0, 0, 0, 0) for a model on your own machine) to use a "
                "cost budget"
            )
        return self._price.cost(usage)

    # -- request building --------------------------------------------------------------------

    def request_params(
        self,
        request: ModelRequest,
        *,
        stream: bool | None = None,
        completion_tokens: bool = False,
        json_schema: bool = True,
    ) -> dict[str, Any]:
        """The Chat Completions body for ``request``. ``json_schema=False``: a native output
        format is asked for as ``json_object`` with the schema beside it (for a server that
        refuses ``json_schema``).

        Deterministic: the same request gives the same body, and a later turn of the same
        conversation serializes its tools, system and earlier messages exactly as before (the
        prefix a server's prompt cache matches).
        """
        stream = self._stream if stream is None else stream
        params: dict[str, Any] = {
            "model": self._model,
            "messages": wire_messages(request.system, request.messages),
        }
        field_name = self._max_tokens_field or (
            "max_completion_tokens"
            if completion_tokens or _REASONING_MODEL.match(self._model)
            else "max_tokens"
        )
        params[field_name] = request.max_tokens
        if request.tools:
            params["tools"] = wire_tools(request.tools)
            choice = self._tool_choice
            if callable(choice):
                choice = choice(request)
            if choice is not None:
                params["tool_choice"] = dict(choice) if isinstance(choice, Mapping) else choice
        if request.output is not None and request.output.native:
            params["response_format"] = response_format(request.output, json_schema=json_schema)
        if stream:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        params.update(self._extra_body)
        return params

    # -- the call ----------------------------------------------------------------------------

    def _credentials(self) -> tuple[str, str]:
        endpoint = self._endpoint
        base_url = self._base_url  # checked when the model was built
        if base_url is None:
            from_env = os.environ.get(endpoint.base_url_env) if endpoint.base_url_env else None
            if from_env and from_env.strip():
                if endpoint.host_form:
                    from_env = _host_form(from_env)
                base_url = _checked_base_url(
                    from_env, cast(str, endpoint.base_url_env), _fatal_configuration
                )
            else:
                base_url = endpoint.default_base_url
        api_key = self._api_key
        if api_key is None and endpoint.key_env:
            api_key = (os.environ.get(endpoint.key_env) or "").strip() or None
        if api_key is None:
            if base_url == DEFAULT_BASE_URL:
                raise ModelError(
                    f"{self._provider} {self._model}: no API key; set {endpoint.key_env} (or "
                    f"{endpoint.base_url_env} for a local server that needs none), or pass "
                    "OpenAIModel(api_key=...)",
                    fatal=True,
                    kind="authentication",
                )
            api_key = _NO_KEY
        return api_key, base_url

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        api_key, base_url = self._credentials()
        client = await ctx.clients.get(
            (self._provider, base_url, fingerprint(api_key)),
            lambda: _open_client(api_key, base_url),
        )
        attempts = 0
        spent: Usage | None = None  # answers billed but not usable (retried): counted too
        while True:
            refusal = await client.gate.passed(ctx.on_wait)
            if refusal is not None:  # a sibling was told to wait longer than the cap
                raise self._error(refusal, attempts, api_key, base_url, spent)
            attempts += 1
            stream = self._stream and (client.stream_tools or not request.tools)
            params = self.request_params(
                request,
                stream=stream,
                completion_tokens=self._model in client.completion_tokens,
                json_schema=client.json_schema,
            )
            try:
                response = await self._attempt(client.sdk, params, request, ctx)
            except Exception as exc:
                failure = classify(exc)
                if failure is None:
                    raise
                refused_streaming = bool(stream and request.tools and _refused_streaming(exc))
                refused_json_schema = _refused_json_schema(exc, params)
                billed = getattr(exc, "usage", None)
                if billed is not None:
                    spent = billed if spent is None else spent + billed
            else:
                if spent is not None:
                    response = dataclasses.replace(response, usage=response.usage + spent)
                return response
            # What the server cannot do, learned once per client and asked again at once.
            if (
                failure.kind == "max_completion_tokens"
                and self._max_tokens_field is None
                and self._model not in client.completion_tokens
            ):
                client.completion_tokens.add(self._model)
                attempts -= 1
                continue
            if refused_streaming and client.stream_tools:
                client.stream_tools = False
                _logger.info(
                    "%s at %s did not stream an answer that may call tools (%s): asking "
                    "without streaming from now on",
                    self._provider,
                    base_url,
                    failure.detail,
                )
                attempts -= 1
                continue
            if refused_json_schema and client.json_schema:
                client.json_schema = False
                _logger.info(
                    "%s at %s does not take response_format json_schema (%s): asking for "
                    "json_object with the schema from now on",
                    self._provider,
                    base_url,
                    failure.detail,
                )
                attempts -= 1
                continue
            delay, failure = plan_retry(failure, attempts, self._max_retry_after, client.gate)
            if delay is None or not failure.retryable or attempts > self._max_retries:
                raise self._error(failure, attempts, api_key, base_url, spent) from None
            spans.record_retry(attempts, failure.kind, delay)  # on the chat span
            if not failure.rate_limited:  # (a rate-limited retry waits at the gate above)
                ctx.on_wait(delay, f"{failure.kind.replace('_', ' ')}: retry {attempts}")
                await trio.sleep(delay)

    async def _attempt(
        self, sdk: AsyncOpenAI, params: dict[str, Any], request: ModelRequest, ctx: ModelContext
    ) -> ModelResponse:
        import openai

        timeout: openai.Timeout | None = None
        if self._timeout is not None:
            timeout = openai.Timeout(self._timeout, connect=min(5.0, self._timeout))
        streamed = bool(params.get("stream"))
        assembler = Assembler(ctx, request.tools, stream_limit(request.max_tokens))
        # The raw body, read by us: the SDK's stream parser leaves nested async generators to
        # the garbage collector under trio (warnings), and we keep the raw chunks.
        #
        # The body goes in ``extra_body``, which the SDK sends as it is: its typed parameters are
        # walked field by field against their TypedDicts on every call, which cost 80 % of the
        # client CPU of a call and grew with the transcript (1.7 of 2.2 s over 40 turns).
        create = cast(Any, sdk.chat.completions.with_streaming_response).create
        async with create(
            model=params["model"],
            messages=(),
            stream=True if streamed else openai.omit,
            extra_body=params,
            timeout=timeout,
        ) as raw:
            try:
                kind = raw.headers.get("content-type", "").lower()
                if "html" in kind:
                    raise BadResponse(
                        f"the server answered with an HTML page ({kind}), not an OpenAI-compatible "
                        "answer",
                        kind="not_compatible",
                    )
                if streamed and "json" not in kind:
                    try:
                        await read_sse(sse_lines(raw.iter_text()), assembler)
                    except Exception as exc:
                        exc.before_first_chunk = assembler.events == 0  # type: ignore[attr-defined]
                        raise
                else:  # asked not to stream, or a server that answered whole anyway
                    body = await raw.read()
                    try:
                        decoded = json.loads(body)
                    except ValueError:
                        raise BadResponse(
                            one_line(f"the answer is not JSON: {body[:80]!r}")
                        ) from None
                    assembler.completion(decoded)
            finally:
                # Closing does not wait on the peer; shield it so a cancelled call still
                # releases (rather than leaks) its connection and the client stays usable.
                with trio.move_on_after(5, shield=True):
                    await raw.close()
        if assembler.failure is not None:
            raise StreamFailed(assembler.failure)
        content = assembler.content()  # raises for an answer that did not complete
        usage = self._usage(assembler, params)
        reason = cast(str, assembler.finish_reason)
        calls = any(isinstance(b, ToolUseBlock) for b in content)
        if assembler.refused:
            stop = "refusal"
        elif reason in ("stop", "tool_calls"):  # some servers say "stop" after tool calls
            stop = "tool_use" if calls else "end_turn"
        elif reason in FINISH_REASONS:
            stop = FINISH_REASONS[reason]
        else:
            error = BadResponse(
                f"unknown finish_reason {reason!r} (known: {', '.join(FINISH_REASONS)})",
                kind="unknown_finish_reason",
            )
            error.usage = usage  # a whole answer: billed
            raise error
        return ModelResponse(
            content, stop, usage, assembler.model or self._model, assembler.id, reason
        )

    def _usage(self, assembler: Assembler, params: Mapping[str, Any]) -> Usage:
        """The call's usage as the server reported it, or estimated (llama.cpp's server reports
        none when streaming): input from the request's size, output from the answer's."""
        reported = assembler.usage
        # a figure that is not a count is taken as missing (estimated), never as a crash
        prompt = token_count(reported.get("prompt_tokens")) if reported is not None else None
        if assembler.cut:  # cut past the output limit: the limit billed, at least
            sent = len(json.dumps(params.get("messages"))) + len(json.dumps(params.get("tools")))
            max_tokens = token_count(
                params.get("max_tokens") or params.get("max_completion_tokens")
            )
            usage = Usage(
                input_tokens=prompt if prompt is not None else estimate_tokens(sent),
                output_tokens=max(max_tokens or 0, estimate_tokens(assembler.output_chars)),
                requests=1,
            )
        elif reported is not None and prompt is not None:
            details = reported.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
            if cached is None:
                cached = reported.get("prompt_cache_hit_tokens")  # DeepSeek's name
            output = token_count(reported.get("completion_tokens"))
            usage = Usage(
                input_tokens=prompt,
                output_tokens=(
                    output if output is not None else estimate_tokens(assembler.output_chars)
                ),
                cache_read_tokens=token_count(cached) or 0,
                requests=1,
            )
        else:
            sent = len(json.dumps(params.get("messages"))) + len(json.dumps(params.get("tools")))
            usage = Usage(
                input_tokens=estimate_tokens(sent),
                output_tokens=estimate_tokens(assembler.output_chars),
                requests=1,
            )
        if self._price is not None:
            usage = dataclasses.replace(usage, cost_usd=self._price.cost(usage))
        return usage

    def _error(
        self,
        failure: Failure,
        attempts: int,
        api_key: str,
        base_url: str,
        spent: Usage | None = None,
    ) -> ModelError:
        what = failure.kind.replace("_", " ")
        tries = f" after {attempts} attempts" if failure.retryable and attempts > 1 else ""
        message = f"{self._provider} {self._model}: {what}{tries} ({failure.detail})"
        fix = FIXES.get(failure.kind)
        if fix:
            message += "; " + fix.format(
                key_env=self._endpoint.key_env or "the key", base_url=base_url
            )
        message = one_line(message)
        if api_key != _NO_KEY:
            message = message.replace(api_key, REDACTED)
        return ModelError.from_kind(
            redact(message), fatal=failure.fatal, kind=failure.kind, usage=spent
        )


def _refused_streaming(exc: Exception) -> bool:
    """Whether a streamed request that offered tools failed as llama.cpp's server fails it: the
    connection dropped before the first chunk, or an error that speaks of streaming."""
    if getattr(exc, "before_first_chunk", False):
        return True
    if isinstance(exc, BadResponse) and exc.kind == "incomplete_response":
        return "before any chunk" in str(exc)
    import openai

    if isinstance(exc, openai.APIConnectionError):
        return True  # dropped before the response's headers
    if isinstance(exc, openai.APIStatusError):
        return "stream" in str(exc.message).lower() or "stream" in str(exc.body).lower()
    return False


def _refused_json_schema(exc: Exception, params: Mapping[str, Any]) -> bool:
    """Whether the server refused a ``response_format`` of type ``json_schema`` and says it
    takes ``json_object`` (llama-cpp-python: a 500 whose pydantic error names both)."""
    form = params.get("response_format")
    if not isinstance(form, Mapping) or form.get("type") != "json_schema":
        return False
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return False
    said = f"{exc.message} {exc.body}"
    return "response_format" in said and "json_object" in said


def ollama(model: str, **options: Any) -> OpenAIModel:
    """A model served by Ollama's OpenAI-compatible endpoint: ``"ollama:<model>"``.

    The base URL comes from ``base_url=``, else ``OLLAMA_HOST`` (``host:port`` or a URL; ``/v1``
    is added), else ``http://127.0.0.1:11434/v1``; no key is needed, and calls cost nothing
    unless ``prices=`` says otherwise. Other options are :class:`OpenAIModel`'s.
    """
    options.setdefault("prices", FREE)
    return OpenAIModel(model, _endpoint=_OLLAMA, **options)
