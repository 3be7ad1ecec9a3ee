"""Anthropic's list prices (each a :class:`~._shared.Price`, which turns usage into USD).

:data:`PRICES` is keyed by model-name prefix (the longest match wins); a model no prefix matches
is priced at the highest known rate, so that a cost budget errs on the safe side. A table given
to ``AnthropicModel(prices=...)`` is searched first. Public as ``orchestrator.models.anthropic``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ._shared import Price

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
