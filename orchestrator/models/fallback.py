"""A chain of models: when one fails a call for good, the same request goes to the next.

One provider having a bad minute should not stop a tree: after an adapter's own retries, an
overloaded, erroring, timing-out or unreachable model, or one the provider does not serve (not
found, no access), passes the request on. Errors no other model can fix are not passed on: an
invalid request, an input over the context window, a request too large; a refusal is the
model's answer, not an error, and a budget stop happens before any model is asked.

The loop knows a chain (a model's ``fallback_chain``, see :func:`~.base.fallback_chain`): each attempt is its own
``chat`` span, billed to the model that answered, under one budget reservation priced at the
dearest model of the chain.
"""

from __future__ import annotations

from collections.abc import Awaitable

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import Usage
from .base import Model, ModelContext, ModelRequest, ModelResponse, passes_on

__all__ = ["FallbackModel"]


class FallbackModel:
    """``FallbackModel(primary, *fallbacks)``: ask ``primary``; when it fails a call for good
    with an error another model could avoid (:data:`~.base.PASSED_ON`), ask the next with the same
    request. Also written as a model string, ``"anthropic:claude-sonnet-5-5|openai:gpt-4.1"``.

    It can do what every model of the chain can (``supports_native_output``); its
    ``context_window`` is the smallest known one; ``cost`` prices a call at the dearest model
    (what a budget reserves); each answer is billed at the price of the model that gave it.
    """

    provider = "fallback"

    def __init__(self, primary: Model | str, *fallbacks: Model | str) -> None:
        from .base import resolve_model  # base names this module for "a|b" strings

        if not fallbacks:
            raise ConfigurationError(
                "FallbackModel needs at least two models (a primary and one more)"
            )
        chain: list[Model] = []
        for spec in (primary, *fallbacks):
            model = resolve_model(spec)
            chain.extend(model.fallback_chain if isinstance(model, FallbackModel) else (model,))
        self.fallback_chain: tuple[Model, ...] = tuple(chain)
        """The chain, primary first (a chain given inside a chain is flattened); the loop
        asks each in turn."""
        self.supports_native_output = all(
            getattr(m, "supports_native_output", False) for m in self.fallback_chain
        )
        windows = [getattr(m, "context_window", None) for m in self.fallback_chain]
        known = [w for w in windows if isinstance(w, int)]
        self.context_window: int | None = min(known) if len(known) == len(windows) else None

    @property
    def name(self) -> str:
        """The chain's models' names joined by ``|`` (each attempt's span names its own)."""
        return "|".join(m.name for m in self.fallback_chain)

    def cost(self, usage: Usage) -> float:
        """The dearest model's price for ``usage``: a reservation must hold whichever answers."""
        return max(m.cost(usage) for m in self.fallback_chain)

    def request(self, request: ModelRequest, ctx: ModelContext) -> Awaitable[ModelResponse]:
        """The chain's answer, trying each model in turn (for callers outside the loop, which
        tries them itself to give each attempt its own span)."""
        return self._request(request, ctx)

    async def _request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        for model in self.fallback_chain[:-1]:
            try:
                return await model.request(request, ctx)
            except ModelError as exc:
                if not passes_on(exc):
                    raise
        return await self.fallback_chain[-1].request(request, ctx)

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(repr(m.name) for m in self.fallback_chain)})"
