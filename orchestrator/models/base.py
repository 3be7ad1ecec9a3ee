"""The model seam: what the loop sends to a model and what it gets back.

A :class:`Model` is configuration, not a connection. The run owns one :class:`ClientPool` for
its whole tree; an adapter asks the pool for its client (keyed by provider, base URL and key) so
that every agent sharing a client also shares its rate-limit gate, and the run closes every
client when it ends (explicitly: the anthropic SDK's automatic cleanup only runs on asyncio).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import trio

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import Block, Message, Usage
from ..core.records import record

__all__ = [
    "PASSED_ON",
    "AgentInfo",
    "ClientPool",
    "HostedToolSpec",
    "Model",
    "ModelContext",
    "ModelRequest",
    "ModelResponse",
    "OutputFormat",
    "ToolSpec",
    "fallback_chain",
    "passes_on",
    "resolve_model",
]


@record
class AgentInfo:
    """Which agent is asking: its name, its path from the root (``lead/researcher#2``), depth."""

    name: str
    path: str
    depth: int


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON schema of its input."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    def to_wire(self) -> dict[str, Any]:
        """The Messages API ``tools`` entry."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }


@dataclass(frozen=True, slots=True)
class HostedToolSpec(ToolSpec):
    """A tool the provider runs (``web_search``, ``web_fetch``): ``settings`` are what it is
    sent besides its type (``max_uses``, domains ...), which each adapter names itself."""

    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        """The tool's name and settings (an adapter adds the provider's ``type``)."""
        return {"name": self.name, **self.settings}


@record
class OutputFormat:
    """The typed answer an agent must give: its type's ``name`` and JSON ``schema`` (an object).

    ``native``: the provider is asked for JSON of the schema and the final text must be it (a
    model declares it can with ``supports_native_output = True``); otherwise the answer comes
    as the input of the ``final_result`` tool, which is among the request's tools.
    """

    name: str
    schema: Mapping[str, Any]
    native: bool = False
    wrapped: bool = False
    """The type's schema is not an object: the value goes under ``"result"``."""


@record
class ModelRequest:
    """One GENERATE step: the assembled context for a model call."""

    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    max_tokens: int
    agent: AgentInfo
    input_tokens_estimate: int = 0
    """The loop's running estimate of this request's input size in tokens, erring high per
    character class (``orchestrator.core.ledger.text_units``; prose at characters / 4)."""
    assistant_turns: int = -1
    """Assistant messages in ``messages`` (``-1``: not counted; count them)."""
    output: OutputFormat | None = None
    """The typed answer the agent must give (``None``: text)."""

    def turn_index(self) -> int:
        """How many assistant turns the transcript holds (the step a script answers with)."""
        if self.assistant_turns >= 0:
            return self.assistant_turns
        return sum(1 for m in self.messages if m.role == "assistant")


@record
class ModelResponse:
    """One model reply: content blocks, the raw ``stop_reason`` string, and usage."""

    content: tuple[Block, ...]
    stop_reason: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    """The model that answered, as the provider reports it (empty if the model does not say:
    scripted and function models; the chat span then names the model that was asked)."""
    id: str = ""
    finish_reason: str = ""
    """The provider's own word for why the answer ended, when it is not ``stop_reason``'s
    (Chat Completions' ``stop``, ``tool_calls`` ...): for ``gen_ai.response.finish_reasons``."""
    server_tool_times: tuple[tuple[str, int, int], ...] = field(default=(), compare=False)
    """When each hosted tool call of the reply ran, as the stream showed it: (call id, when
    its ``server_tool_use`` block started, when its result block arrived), in ns since the
    epoch, 0 for a result not in this reply. For the trace's ``execute_tool`` spans; an
    adapter that does not stream leaves it empty (the spans then take the response's time)."""


_ClientT = TypeVar("_ClientT")


class ClientPool:
    """Clients shared by every agent of one run, closed when the run ends.

    ``get(key, factory)`` returns the client for ``key``, creating it on first use; ``factory``
    returns an async context manager whose value is the client. The client's type is the
    factory's (``get`` is generic in it), so an adapter gets its own client class back, as long
    as each key is only ever given factories of one type (adapters put their provider in it).
    """

    def __init__(self, stack: AsyncExitStack) -> None:
        self._stack = stack
        self._clients: dict[Hashable, Any] = {}
        self._locks: dict[Hashable, trio.Lock] = {}

    async def get(
        self, key: Hashable, factory: Callable[[], AbstractAsyncContextManager[_ClientT]]
    ) -> _ClientT:
        """The shared client for ``key`` (created and registered for closing on first use).

        A lock per key makes concurrent first requests share one client (and so one
        rate-limit gate) even if opening a client ever awaits.
        """
        client: _ClientT | None = self._clients.get(key)
        if client is not None:
            return client
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            client = self._clients.get(key)
            if client is None:
                client = await self._stack.enter_async_context(factory())
                self._clients[key] = client
        return client


@dataclass(slots=True)
class ModelContext:
    """What a model call may use besides the request: the run's clients and an event hook."""

    clients: ClientPool
    on_text_delta: Callable[[str], None] = lambda _text: None
    on_tool_call_start: Callable[[str, str], None] = lambda _id, _name: None
    on_wait: Callable[[float, str], None] = lambda _seconds, _why: None
    """An adapter is about to wait this many seconds before sending (a retry's backoff or
    the provider's retry-after, a rate limit's gate), for this reason: shown in the progress."""
    on_response_start: Callable[[], None] = lambda: None
    """The response has started (a streamed answer's first event): a model with
    ``prompt_caching = True`` calls it, as what the request wrote to the cache is readable
    from then."""
    on_server_tool_use: Callable[[str, str, Mapping[str, Any]], None] = lambda _id, _name, _input: (
        None
    )
    """The provider is running a hosted tool the model called (streamed: its input is
    complete): the call's id, the tool's name (``web_search``) and its input (``{"query":
    ...}``); shown in the progress."""


@runtime_checkable
class Model(Protocol):
    """An async model: ``await model.request(req, ctx) -> ModelResponse``.

    ``name`` is the model name recorded on spans (``gen_ai.request.model``); ``provider`` is
    ``gen_ai.provider.name``. ``cost(usage)`` prices a call in USD. Adapters raise
    :class:`~orchestrator.errors.ModelError` when a call fails for good.
    """

    @property
    def name(self) -> str:
        """The model name recorded on spans (``gen_ai.request.model``)."""
        ...

    @property
    def provider(self) -> str:
        """The provider recorded on spans (``gen_ai.provider.name``): ``anthropic``, ``offline``."""
        ...

    def cost(self, usage: Usage) -> float:
        """What a call with this usage costs, in USD (the ledger reserves with it)."""
        ...

    def request(self, request: ModelRequest, ctx: ModelContext) -> Awaitable[ModelResponse]:
        """Answer one GENERATE step; raise :class:`~orchestrator.errors.ModelError` on failure."""
        ...


PASSED_ON: Final = frozenset(
    {
        "overloaded",
        "api_error",
        "rate_limit",
        "timeout",
        "connection",
        "conflict",
        "not_found",
        "permission",
        "authentication",
        "billing",
        "not_compatible",
    }
)
"""The :class:`~orchestrator.errors.ModelError` kinds a chain passes to its next model: the provider's or the model's
failures. Any other kind (``invalid_request``, ``context_exceeded``, ``request_too_large``, a
test model's script errors, an adapter's own) ends the call as it would without a chain."""


def passes_on(exc: BaseException) -> bool:
    """Whether a fallback chain gives the request to its next model after ``exc``."""
    return isinstance(exc, ModelError) and exc.kind in PASSED_ON


def fallback_chain(model: Model) -> tuple[Model, ...] | None:
    """The models a model passes a failed call on to, in order (a
    :class:`~orchestrator.models.FallbackModel`'s ``fallback_chain``), else ``None``: the loop
    asks each in turn, each attempt its own ``chat`` span."""
    chain = getattr(model, "fallback_chain", None)
    return chain if isinstance(chain, tuple) and chain else None


# The model-string registry: provider prefix -> (module, class). Adapters are imported when a
# string names them, never before, so naming a model costs nothing until a run uses it.
_PROVIDERS: Mapping[str, tuple[str, str]] = {
    "anthropic": ("orchestrator.models.anthropic", "AnthropicModel"),
    "openai": ("orchestrator.models.openai", "OpenAIModel"),
    "ollama": ("orchestrator.models.openai", "ollama"),
}
_NAMED: Mapping[str, tuple[str, str]] = {
    "offline": ("orchestrator.research.offline", "OfflineModel"),
}


def resolve_model(spec: Model | str) -> Model:
    """A model from a :class:`Model` or a string: ``"anthropic:<name>"``, ``"openai:<name>"``,
    ``"ollama:<name>"`` or ``"offline"``; ``"a|b"`` is a :class:`~.fallback.FallbackModel` of
    the models named."""
    if not isinstance(spec, str):
        if not isinstance(spec, Model):
            raise ConfigurationError(
                f"not a model: {spec!r} (use a Model, 'anthropic:<name>' or 'openai:<name>')"
            )
        return spec
    if "|" in spec:  # a fallback chain: "anthropic:claude-sonnet-5-5|openai:gpt-4.1"
        from .fallback import FallbackModel

        first, *rest = (part.strip() for part in spec.split("|"))
        return FallbackModel(first, *rest)
    provider, _, name = spec.partition(":")
    if provider in _PROVIDERS and name.strip():
        module, cls = _PROVIDERS[provider]
        model: Model = getattr(import_module(module), cls)(name)
        return model
    if spec in _NAMED:
        module, cls = _NAMED[spec]
        named: Model = getattr(import_module(module), cls)()
        return named
    raise ConfigurationError(
        f"unknown model {spec!r}: use 'anthropic:<model-name>', 'openai:<model-name>', "
        "'ollama:<model-name>', 'offline', or a Model object"
    )
