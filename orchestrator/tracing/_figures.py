"""The figures of a span as ``trace show`` writes them: its duration, its tokens (``in→out``,
``Σ`` for an agent's roll-up) and its cost, found among its attributes by their keys.

A big run's spans have a few sets of attribute keys between them, so where a span's figures are
is worked out once per key set, and a row reads only the keys that may hold them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from .tracefiles import AttrValue, SpanRecord

__all__ = ["TokensSaid", "format_count", "format_duration", "number", "span_figures"]

TokensSaid = tuple[float | None, float | None, bool]
"""What a tokens text says: the input and output tokens and whether they are a roll-up."""

_ROLLUP_HINTS: Final = ("subtree", "total", "cumulative", "tree")


def format_duration(ns: int) -> str:
    """``0.25ms``, ``250ms``, ``2.50s``, ``1m02.5s``: as the float formatting below rounds.

    Under a minute the digits are worked out in integers (this runs for every row of a big
    run, and float formatting was most of its cost). They are the float's: a float quotient
    is off by far less than one nanosecond, so it rounds the same way except on an exact tie,
    which is left to the float.
    """
    if type(ns) is int and 0 <= ns < 60_000_000_000:
        if ns < 1_000_000:  # hundredths of a millisecond
            units, remainder = divmod(ns, 10_000)
            if remainder != 5_000:
                units += remainder > 5_000
                return f"{units // 100}.{units % 100:02d}ms"
        elif ns < 1_000_000_000:  # milliseconds
            units, remainder = divmod(ns, 1_000_000)
            if remainder != 500_000:
                return f"{units + (remainder > 500_000)}ms"
        else:  # hundredths of a second
            units, remainder = divmod(ns, 10_000_000)
            if remainder != 5_000_000:
                units += remainder > 5_000_000
                return f"{units // 100}.{units % 100:02d}s"
    seconds = ns / 1e9
    if seconds < 0.001:
        return f"{ns / 1e6:.2f}ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:04.1f}s"


def format_count(n: int | float) -> str:
    n = int(n)
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def number(value: AttrValue | None) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _rollup_rank(key: str) -> tuple[bool, bool, int, str]:
    """Sort key among several roll-ups on one span: a subtree/total figure before an agent's
    own (``orchestrator.usage.*`` before ``orchestrator.own_usage.*``), then the shortest name."""
    return (not any(h in key for h in _ROLLUP_HINTS), "own" in key, len(key), key)


_RANKED: dict[tuple[tuple[str, ...], str, str], tuple[str, ...]] = {}
_RANKED_LIMIT: Final = 1024


def _ranked_keys(attrs: Mapping[str, AttrValue], suffix: str, exclude: str) -> tuple[str, ...]:
    """The keys of ``attrs`` that may hold a figure (``suffix`` ``"cost"``: a cost; else a key
    ending in ``suffix`` without ``exclude``), best first by :func:`_rollup_rank`.

    Remembered by the span's keys: a big run's spans have a few key sets between them, and
    scanning and ranking every key of every span took seconds for 65,000 of them.
    """
    keys = tuple(attrs)
    ranked = _RANKED.get((keys, suffix, exclude))
    if ranked is None:
        if suffix == "cost":
            found = [k for k in keys if "cost" in k.rsplit(".", 1)[-1]]
        else:
            found = [k for k in keys if k.endswith(suffix) and exclude not in k]
        ranked = tuple(sorted(found, key=_rollup_rank))
        if len(_RANKED) >= _RANKED_LIMIT:
            _RANKED.clear()
        _RANKED[(keys, suffix, exclude)] = ranked
    return ranked


class _FigureKeys(NamedTuple):
    """Where a span's figures are, best first (see :func:`_figure_keys`)."""

    tokens_in: tuple[str, ...]
    tokens_out: tuple[str, ...]
    cost: tuple[str, ...]
    rolled: bool  # no standard ``gen_ai.usage`` count: the tokens are a roll-up


_FIGURE_KEYS: dict[tuple[str, ...], _FigureKeys] = {}


def _figure_keys(attrs: Mapping[str, AttrValue]) -> _FigureKeys:
    """The keys of ``attrs`` that may hold its tokens (the standard ``gen_ai.usage`` count
    first, else the best roll-up by :func:`_rollup_rank`; cache counts are left out, they are
    part of the input already) and its cost.

    Depends on the keys alone, so it is worked out once per key set (a big run's spans have
    a few between them): a row then reads only the keys that may hold its figures.
    """
    keys = tuple(attrs)
    found = _FIGURE_KEYS.get(keys)
    if found is None:
        picked: list[tuple[str, ...]] = []
        for suffix in ("input_tokens", "output_tokens"):
            standard = f"gen_ai.usage.{suffix}"
            ranked = _ranked_keys(attrs, suffix, "cache")
            if standard in attrs:
                ranked = (standard, *(k for k in ranked if k != standard))
            picked.append(ranked)
        rolled = (
            "gen_ai.usage.input_tokens" not in attrs and "gen_ai.usage.output_tokens" not in attrs
        )
        found = _FigureKeys(picked[0], picked[1], _ranked_keys(attrs, "cost", ""), rolled)
        if len(_FIGURE_KEYS) >= _RANKED_LIMIT:
            _FIGURE_KEYS.clear()
        _FIGURE_KEYS[keys] = found
    return found


def _first_number(attrs: Mapping[str, AttrValue], keys: tuple[str, ...]) -> float | None:
    """The first of ``keys`` in ``attrs`` that holds a number (not a bool), as a float."""
    for key in keys:
        value = attrs[key]
        kind = type(value)
        if kind is int or kind is float:
            return float(value)  # type: ignore[arg-type]
        found = number(value)
        if found is not None:
            return found
    return None


def _tokens_text(tokens_in: float | None, tokens_out: float | None, rolled: bool) -> str:
    """``in→out`` tokens; ``Σ`` marks a roll-up (an agent's subtree) rather than one call."""
    if tokens_in is None and tokens_out is None:
        return ""
    left = format_count(tokens_in) if tokens_in is not None else "?"
    right = format_count(tokens_out) if tokens_out is not None else "?"
    return f"{'Σ' if rolled else ''}{left}→{right}"


def _cost_text(cost: float | None) -> str:
    if cost is None:
        return ""
    return f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}"


def span_figures(
    span: SpanRecord, tokens_made: dict[TokensSaid, str], costs: set[str]
) -> tuple[str, str, str]:
    """A span's duration, tokens and cost texts; each tokens text made once (kept in
    ``tokens_made`` by what it says), each cost kept in ``costs``.

    Runs for every row of a big run: where the figures are is worked out once per key set
    (:func:`_figure_keys`), and the common case of :func:`_first_number` is inline."""
    attributes = span.attributes
    where = _FIGURE_KEYS.get(tuple(attributes)) or _figure_keys(attributes)
    tokens_in = tokens_out = None
    if where.tokens_in:
        value = attributes[where.tokens_in[0]]
        if type(value) is int:  # the common case of _first_number, inline
            tokens_in = float(value)
        else:
            tokens_in = _first_number(attributes, where.tokens_in)
    if where.tokens_out:
        value = attributes[where.tokens_out[0]]
        if type(value) is int:
            tokens_out = float(value)
        else:
            tokens_out = _first_number(attributes, where.tokens_out)
    said_tokens = (tokens_in, tokens_out, where.rolled)
    tokens = tokens_made.get(said_tokens)
    if tokens is None:
        tokens = tokens_made[said_tokens] = _tokens_text(*said_tokens)
    if where.cost:
        cost = _cost_text(_first_number(attributes, where.cost))
        costs.add(cost)
    else:
        cost = ""
    return format_duration(max(0, span.end_ns - span.start_ns)), tokens, cost
