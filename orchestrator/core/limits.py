"""Limits, their defaults, and the slots that hold ``max_concurrency``.

A :class:`Limits` holds only what it sets; everything else is ``None`` and is filled from the
layers around it (DESIGN.md, "Layering of limits"). Per-agent fields come from the agent, then
its nearest ancestor, then the run, then :data:`DEFAULT_LIMITS`. Tree-wide fields are one budget
for the run; an agent that sets one gets a sub-budget for its subtree, never more than what
remains above it. Run options fill gaps and never loosen a definition. The token and cost
budgets are held by the ledger (``core/ledger.py``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import trio

from .errors import ConfigurationError

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "Slots",
    "tree_wide_limits",
]

_FLOAT_FIELDS = frozenset({"timeout", "tool_timeout", "cost_budget_usd", "cache_warmup_wait"})
TREE_WIDE_FIELDS = ("timeout", "token_budget", "cost_budget_usd", "max_agents", "max_concurrency")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds for an agent, a subtree or a run. ``None`` means "inherit".

    ``max_turns``: turns per agent (model replies the loop acts on; compaction summaries and
    the one retry of a tool call cut by ``max_tokens`` are extra calls, a few per turn at
    worst; ``token_budget`` bounds them all). ``timeout``:
    seconds for the run (or the agent's
    subtree). ``token_budget`` / ``cost_budget_usd``: billed tokens / dollars for the tree.
    ``max_depth``: the deepest depth a child may have (the root is 0). ``max_children``: spawns
    per agent run. ``max_agents``: agents per run, the root included. ``max_concurrency``: model
    calls in flight. ``max_consecutive_errors``: turns in a row whose tool calls all failed.
    ``repeat_limit``: the N-th consecutive turn with identical tool calls stops the agent.
    ``tool_timeout``: seconds per tool call. ``max_result_chars``: cap on one tool result.
    ``output_retries``: how many times a typed agent's output may be rejected and asked again
    before it ends ``invalid_output`` (per agent; ``0``: the first rejection ends it).
    ``cache_warmup_wait``: how long, at most, siblings sharing a cached prefix hold their first
    call for the first sibling's response to start (see docs/performance.md).
    """

    max_turns: int | None = None
    timeout: float | None = None
    token_budget: int | None = None
    cost_budget_usd: float | None = None
    max_depth: int | None = None
    max_children: int | None = None
    max_agents: int | None = None
    max_concurrency: int | None = None
    max_consecutive_errors: int | None = None
    repeat_limit: int | None = None
    tool_timeout: float | None = None
    max_result_chars: int | None = None
    output_retries: int | None = None
    cache_warmup_wait: float | None = None

    def __post_init__(self) -> None:
        for name in _FIELD_NAMES:
            value = getattr(self, name)
            if value is None:
                continue
            if name in _FLOAT_FIELDS:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigurationError(f"Limits.{name} must be a number, got {value!r}")
                if not value > 0 or math.isnan(value):
                    raise ConfigurationError(f"Limits.{name} must be > 0, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(f"Limits.{name} must be an integer, got {value!r}")
            floor = 0 if name in _ZERO_ALLOWED else 1
            if value < floor:
                raise ConfigurationError(f"Limits.{name} must be >= {floor}, got {value!r}")

    def fill(self, other: Limits | None) -> Limits:
        """These limits, with gaps filled from ``other``."""
        if other is None:
            return self
        changes: dict[str, Any] = {}
        for name in _FIELD_NAMES:
            if getattr(self, name) is None and (value := getattr(other, name)) is not None:
                changes[name] = value
        return dataclasses.replace(self, **changes) if changes else self

    def tightest(self, other: Limits | None) -> Limits:
        """Field by field, the stricter of the two (a set value beats ``None``)."""
        if other is None:
            return self
        changes: dict[str, Any] = {}
        for name in _FIELD_NAMES:
            a, b = getattr(self, name), getattr(other, name)
            if b is not None and (a is None or b < a):
                changes[name] = b
        return dataclasses.replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set."""
        return {name: value for name in _FIELD_NAMES if (value := getattr(self, name)) is not None}


# Field names, read once: ``dataclasses.fields()`` and ``asdict()`` (a deep copy) per call made
# limits a third of the CPU of a one-agent run.
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Limits))
_ZERO_ALLOWED = frozenset({"max_depth", "output_retries"})


def tree_wide_limits(run_limits: Limits | None, root_limits: Limits | None) -> Limits:
    """The run's one budget for each tree-wide field: the run's and the root's own values, the
    stricter winning (the root's is a sub-budget of the run's), else the default."""
    changes: dict[str, Any] = {}
    for name in TREE_WIDE_FIELDS:
        values = [
            value
            for layer in (run_limits, root_limits)
            if layer is not None and (value := getattr(layer, name)) is not None
        ]
        if values:
            changes[name] = min(values)
    return dataclasses.replace(DEFAULT_LIMITS, **changes) if changes else DEFAULT_LIMITS


DEFAULT_LIMITS = Limits(
    max_turns=20,
    timeout=900.0,
    token_budget=2_000_000,
    cost_budget_usd=None,
    max_depth=3,
    max_children=10,
    max_agents=100,
    max_concurrency=16,
    max_consecutive_errors=3,
    repeat_limit=3,
    tool_timeout=120.0,
    max_result_chars=100_000,
    output_retries=2,
    cache_warmup_wait=5.0,
)
"""The pinned defaults from DESIGN.md (``cost_budget_usd`` unset means no cost limit)."""


class Slots:
    """At most ``total`` holders at a time, woken in FIFO order: a lean ``trio.CapacityLimiter``.

    Taking a free slot is a counter decrement with no checkpoint. trio's limiter yields to the
    scheduler on every acquire and wakes its parking lot on every release; at one acquire per
    model call that was a tenth of the runtime's CPU in the fan-out benchmark. A release hands
    its slot straight to the longest waiter, so a newcomer cannot overtake one.
    """

    __slots__ = ("_lot", "free", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._lot = trio.lowlevel.ParkingLot()

    def try_take(self) -> bool:
        """Take a slot if one is free and nobody is waiting for one."""
        if self.free and not self._lot:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting in line if none is free."""
        if not self.try_take():
            await self._lot.park()  # woken by give_back, which hands us its slot

    def give_back(self) -> None:
        """Return a slot: to the longest waiter if there is one."""
        if self._lot:
            self._lot.unpark()
        else:
            self.free += 1
