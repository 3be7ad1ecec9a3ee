"""OpenAI's list prices for the Chat Completions models, and how an unknown model is priced.

:data:`PRICES` is keyed by model-name prefix (the longest match wins), in USD per million tokens:
uncached input, output, cached input. OpenAI bills no cache write, so ``cache_write`` is the
input rate (the adapter never reports cache writes anyway). A model that no prefix matches has
no price: a local model (Ollama, llama.cpp, vLLM) or a gateway's own names. Its calls report
``cost_usd=0``, and a run with a cost budget refuses to guess: the model's ``cost()`` raises,
which ends the agent with an error saying to pass ``OpenAIModel(prices=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ._shared import Price


def _rate(input: float, output: float, cached: float) -> Price:
    return Price(input, output, cache_write=input, cache_read=cached)


PRICES: Final[Mapping[str, Price]] = MappingProxyType(
    {
        # Keyed by model-name prefix; the longest matching prefix wins. USD per million tokens
        # (OpenAI's published standard-tier list prices, the latest we could read: 2025).
        "gpt-5-nano": _rate(0.05, 0.40, 0.005),
        "gpt-5-mini": _rate(0.25, 2.00, 0.025),
        "gpt-5": _rate(1.25, 10.00, 0.125),
        "gpt-4.1-nano": _rate(0.10, 0.40, 0.025),
        "gpt-4.1-mini": _rate(0.40, 1.60, 0.10),
        "gpt-4.1": _rate(2.00, 8.00, 0.50),
        "gpt-4o-mini": _rate(0.15, 0.60, 0.075),
        "gpt-4o": _rate(2.50, 10.00, 1.25),
        "o4-mini": _rate(1.10, 4.40, 0.275),
        "o3-mini": _rate(1.10, 4.40, 0.55),
        "o3": _rate(2.00, 8.00, 0.50),
        "o1-mini": _rate(1.10, 4.40, 0.55),
        "o1": _rate(15.00, 60.00, 7.50),
    }
)
"""The default price table, by model-name prefix. Override with ``OpenAIModel(prices=...)``."""

FREE: Final = Price(0.0, 0.0, 0.0, 0.0)
"""The price of a model on your own machine (the ``ollama:`` shortcut's default)."""


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model``: the longest prefix of its name in ``prices``, else in
    :data:`PRICES`; ``None`` when neither knows it (no guess)."""
    for table in (prices or {}, PRICES):
        matches = [key for key in table if model.startswith(key)]
        if matches:
            return table[max(matches, key=len)]
    return None
