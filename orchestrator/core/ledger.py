"""The budget ledger: what a tree's model calls may bill, held before each call and settled after.

A call reserves its input estimate (:func:`text_units`) times what its model was seen to bill
per estimated token (:class:`Calibration`), plus its output cap, on the :class:`Ledger` of its
agent's chain; the reservation settles to the call's real usage. ``core/limits.py`` keeps
:class:`~orchestrator.core.limits.Limits` and its defaults.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable
from typing import Final

import trio

from .errors import OrchestratorError
from .messages import Usage

__all__ = [
    "BudgetExceeded",
    "Calibration",
    "Ledger",
    "PricingFailed",
    "Reservation",
    "fixed_units",
    "text_units",
]


# ---------------------------------------------------------------------------------------------
# The input estimate


def _unit_weights() -> bytes:
    """Quarter tokens per UTF-8 byte, by byte: what :func:`text_units` adds up.

    A character's weight sits on its first byte (continuation bytes weigh nothing), so that a
    character of any script counts once. Each weight is about the most tokens a tokenizer we
    know of (byte-level BPE as OpenAI's and Anthropic's, SentencePiece with byte fallback as
    Llama's) spends on that class: lowercase letters and spaces at a quarter token (prose, four
    characters a token: the old estimate), capitals at a half (ALL CAPS and mixed-case blobs
    split short), digits, punctuation, newlines and control characters at a token each (some
    tokenizers give every digit its own token; code and JSON are mostly punctuation and
    newlines); two-byte characters (accented Latin, Greek, Cyrillic, Armenian, Hebrew, Arabic)
    at one token; CJK, kana, Hangul and the symbols and punctuation of the Basic Multilingual
    Plane at one and a half; the Indic scripts, Thai, Lao, Tibetan, Myanmar, Georgian,
    Ethiopic, Khmer and their neighbours (U+0800-1FFF, which tokenizers cut into pieces) at
    two; emoji and everything past the BMP at three.

    Every weight is at least a quarter token per byte, so no text is estimated below a quarter
    of its UTF-8 size: a tokenizer that never bills more than one token per byte (every
    byte-level one) bills at most :data:`UNPROVEN_WORST` times the estimate.
    """
    weights = bytearray(256)
    for byte in range(256):
        char = chr(byte)
        if byte < 0x80:
            if char.islower() or char == " ":
                weight = 1
            elif char.isupper():
                weight = 2
            else:  # digits, punctuation, newlines, tabs, control characters
                weight = 4
        elif byte < 0xC0:  # a continuation byte: the character was counted at its lead
            weight = 0
        elif byte < 0xE0:  # U+0080-07FF
            weight = 4
        elif byte < 0xF0:  # U+0800-1FFF (E0-E1): the scripts cut into pieces; then the BMP
            weight = 8 if byte <= 0xE1 else 6
        else:
            weight = 12
        weights[byte] = weight
    return bytes(weights)


_UNIT_WEIGHTS: Final = _unit_weights()
_NON_ASCII_EXTRA: Final = tuple((w, w - 1) for w in sorted(set(_UNIT_WEIGHTS[0x80:]) | {2, 4}))
"""(weight, what it adds past one unit a byte): the passes :func:`text_units` makes over a
text that is not all ASCII (ASCII text has weights 1, 2 and 4 only)."""
_SHORT_TEXT: Final = 24
"""Below this many bytes :func:`text_units` sums the weights (cheaper than counting)."""
_BLOB_RUN: Final = 24
"""An ASCII text with fewer spaces than one per this many characters looks like a blob
(base64, hex, minified JSON, URLs), which tokenizers cut into short pieces."""


def text_units(text: str) -> int:
    """Estimated input tokens of ``text``, in quarter tokens, erring high.

    The text's UTF-8 bytes translated to per-byte weights (:func:`_unit_weights`) in one C
    pass, then a count per weight class (a C pass each: two for ASCII text, six otherwise)
    or, for short texts, a sum: no Python loop per character, no regular expression. An ASCII
    text longer than 64 characters with fewer spaces than one per 24 characters (a base64 or
    hex blob, minified JSON) counts a quarter more. Lowercase prose counts a quarter token a
    character, as the old characters / 4 estimate did.
    """
    size = len(text)
    if text.isascii():
        weighted = text.encode().translate(_UNIT_WEIGHTS)
        if size < _SHORT_TEXT:
            return sum(weighted)
        units = size + weighted.count(2) + 3 * weighted.count(4)
        if size > 64 and size > _BLOB_RUN * (text.count(" ") + 1):
            units += units >> 2
        return units
    weighted = text.encode("utf-8", "surrogatepass").translate(_UNIT_WEIGHTS)
    if len(weighted) < _SHORT_TEXT:
        return sum(weighted)
    units = len(weighted)
    for weight, extra in _NON_ASCII_EXTRA:
        units += extra * weighted.count(weight)
    return units


fixed_units = functools.lru_cache(maxsize=256)(text_units)
""":func:`text_units`, remembered for the texts every agent of a definition repeats (its
instructions)."""


# ---------------------------------------------------------------------------------------------
# Learning what each model bills

UNPROVEN_WORST: Final = 4.0
"""How many times its estimate a call may bill, at worst, while its model has no settled call
in the run: no estimate is below a quarter token per UTF-8 byte (:func:`text_units`), and a
byte-level tokenizer bills at most a token per byte."""
PROVEN_SPREAD: Final = 1.5
"""Once a model's billing is known, how far past its learned ratio (or the estimate itself,
whichever is higher) a call may bill, at worst: texts of another mix than the ones it learned
from."""
CALIBRATION_WINDOW: Final = 8
"""The learned ratio falls only after this many calls in a row billed less (to the highest of
them); it rises at once."""
MIN_RATIO: Final = 0.5
"""The learned ratio never goes below this, whatever a model reports."""
MIN_EVIDENCE: Final = 32
"""A call estimated at fewer input tokens teaches nothing (fixed per-request overhead would
dominate its ratio)."""
OVERSHOOT_ALLOWANCE: Final = 0.04
"""How far past a budget the calls in flight may bill together at worst (the documented bound
is 5%; the rest is rounding and a model billing past its worst case)."""


class Calibration:
    """What one model (provider and model name) bills per estimated input token, in one run.

    Learned from each settled call's billed input tokens: :attr:`ratio` starts at 1.0 (the
    estimate itself) and rises at once to any call's higher ratio; it falls only after
    :data:`CALIBRATION_WINDOW` calls in a row billed less, to the highest of them (so below the
    estimate only when that many calls in a row say so), and never below :data:`MIN_RATIO`.
    :attr:`worst` is how many times its estimate a call may bill at worst:
    :data:`UNPROVEN_WORST` until the model's first call settles, then :data:`PROVEN_SPREAD`
    times the ratio (at least that times the estimate). Each update is a few comparisons.
    """

    __slots__ = ("_below", "_lower", "calls", "ratio", "version", "worst")

    def __init__(self) -> None:
        self.ratio = 1.0
        self.worst = UNPROVEN_WORST
        self.calls = 0
        """Settled calls that taught something."""
        self.version = 0
        """Changes whenever ``ratio`` or ``worst`` do (waiting reservations are sized again)."""
        self._below = 0
        """Calls in a row that billed less than ``ratio``..."""
        self._lower = 0.0
        """... and the highest ratio among them."""

    def unsettled(self) -> bool:
        """Whether a call billing exactly its expected input would still teach something: the
        model's first call, or a run of calls that billed less is pending."""
        return self.worst == UNPROVEN_WORST or self._below > 0

    def learn(self, estimate: int, billed: int) -> None:
        """One settled call: ``billed`` input tokens for an ``estimate``."""
        if estimate < MIN_EVIDENCE or billed <= 0:
            return
        ratio = billed / estimate
        self.calls += 1
        if ratio >= self.ratio:
            self._below = 0
            self._lower = 0.0
            if ratio == self.ratio and self.worst != UNPROVEN_WORST:
                return  # the common case: nothing new
        else:
            self._below += 1
            if ratio > self._lower:
                self._lower = ratio
            if self._below < CALIBRATION_WINDOW:
                if self.worst != UNPROVEN_WORST:
                    return
                ratio = self.ratio  # the first call: proven, at the ratio it has
            else:  # a whole window below: believe it
                ratio = self._lower if self._lower > MIN_RATIO else MIN_RATIO
                self._below = 0
                self._lower = 0.0
        self.ratio = ratio
        self.worst = PROVEN_SPREAD * (ratio if ratio > 1.0 else 1.0)
        self.version += 1


class _Calibrations:
    """A run's calibrations, by provider and model name (and by model object, to find them
    fast)."""

    __slots__ = ("by_model", "by_name")

    def __init__(self) -> None:
        self.by_model: dict[int, tuple[object, Calibration]] = {}
        self.by_name: dict[tuple[str, str], Calibration] = {}

    def of(self, model: object) -> Calibration:
        entry = self.by_model.get(id(model))
        if entry is not None:
            return entry[1]
        key = (str(getattr(model, "provider", "")), str(getattr(model, "name", "")))
        calibration = self.by_name.get(key)
        if calibration is None:
            calibration = self.by_name[key] = Calibration()
        self.by_model[id(model)] = (model, calibration)  # the model kept: its id stays its own
        return calibration


class BudgetExceeded(OrchestratorError):
    """Internal: a reservation cannot fit and nothing outstanding could free room."""


class PricingFailed(OrchestratorError):
    """Internal: the model's ``cost()`` raised (the cause) or returned no number of dollars."""


def _priced(
    price: Callable[[Usage], float],
    input_tokens: int,
    output_tokens: int,
    hosted: Usage | None = None,
) -> float:
    try:
        if hosted is None:
            cost = price(Usage(input_tokens=input_tokens, output_tokens=output_tokens))
        else:  # the hosted tools' uses priced with the tokens, by the model's own table
            cost = price(
                Usage(
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    web_search_requests=hosted.web_search_requests,
                    web_fetch_requests=hosted.web_fetch_requests,
                )
            )
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not cost >= 0:
            raise TypeError(f"it returned {cost!r}, not a number of dollars")
    except Exception as exc:  # a model adapter bug: the caller ends that agent, not the tree
        raise PricingFailed(str(exc)) from exc
    return float(cost)


_new_reservation = object.__new__


class Reservation:
    """Tokens and dollars held for one model call until it settles.

    ``tokens`` and ``cost``: what the call is expected to bill at most (its input estimate
    times its model's learned ratio, plus its output cap), held against the budget.
    ``worst_tokens`` and ``worst_cost``: what it may bill at worst (the estimate times the
    calibration's worst case, plus the cap), held against the budget plus
    :data:`OVERSHOOT_ALLOWANCE` while other calls are in flight. The dollars are set only for
    a reservation with a ``price`` (a ledger of its chain has a cost budget); they include
    ``hosted``, the most hosted tool uses the call may make (each offered tool's ``max_uses``:
    the provider runs and bills them inside the call), priced by the model's ``cost``. Made by
    :meth:`Ledger.claim`, sized from the calibration as it is then; a reservation that waits
    is sized again when its model learned meanwhile. ``teaches``: whether its billed input
    teaches the calibration (not for a request whose transcript is not the one estimated, as
    a checkpoint summary's).
    """

    __slots__ = (
        "calibration",
        "cost",
        "estimate",
        "hosted",
        "ledgers",
        "lone_cost",
        "max_tokens",
        "price",
        "settled",
        "teaches",
        "tokens",
        "worst_cost",
        "worst_tokens",
    )
    tokens: int
    worst_tokens: float
    cost: float
    lone_cost: float
    worst_cost: float

    def __init__(
        self,
        estimate: int,
        max_tokens: int,
        calibration: Calibration,
        teaches: bool,
        price: Callable[[Usage], float] | None,
        hosted: Usage | None = None,
    ) -> None:
        self.estimate = estimate
        """The call's input estimate in tokens (:func:`text_units` / 4)."""
        self.max_tokens = max_tokens
        self.calibration = calibration
        self.teaches = teaches
        self.price = price
        self.hosted = hosted
        """The most hosted tool uses the call may bill (``None``: it offers none)."""
        self.ledgers: tuple[Ledger, ...] = ()
        self.settled = False
        self.size()

    def size(self) -> None:
        """Compute the amounts from the estimate and the calibration as it is now."""
        calibration = self.calibration
        ratio = calibration.ratio
        estimate, cap = self.estimate, self.max_tokens
        expected = estimate if ratio == 1.0 else math.ceil(estimate * ratio)
        at_worst = math.ceil(estimate * calibration.worst)
        self.tokens = expected + cap
        self.worst_tokens = at_worst + cap
        price = self.price
        if price is not None:
            hosted = self.hosted
            self.cost = _priced(price, expected, cap, hosted)
            lone = expected if ratio >= 1.0 else estimate
            self.lone_cost = self.cost if lone == expected else _priced(price, lone, cap, hosted)
            self.worst_cost = _priced(price, at_worst, cap, hosted)

    @property
    def lone_tokens(self) -> int:
        """``tokens`` with the ratio at least 1.0 (the class estimate itself): what must fit
        for a call admitted while nothing else is in flight."""
        least = self.estimate + self.max_tokens
        return self.tokens if self.tokens > least else least


class Ledger:
    """The token and cost budget of a tree, or of a subtree (with a parent ledger).

    Before a model call the loop reserves (:meth:`claim`, then :meth:`try_reserve` or
    :meth:`reserve`) what the call may bill: its input estimate (:func:`text_units`, erring
    high where the text says it should) times what its model was seen to bill per estimated
    token (:class:`Calibration`, learned in the run from every settled call), plus its output
    cap. A call's real usage can still exceed that, and calls in flight together would
    overshoot together, so each reservation also holds its worst case, and a call is admitted
    only while

    - what was billed, plus what the calls in flight are expected to bill, plus this call's
      expected amount, fits the budget; and
    - what was billed, plus the worst cases of the calls in flight and of this one, fits the
      budget plus :data:`OVERSHOOT_ALLOWANCE`.

    Whatever the calls in flight bill up to their worst cases, the spend stays within the
    budget plus the allowance. A call with nothing else in flight on a ledger is admitted there
    if its amount at the class estimate or above (the ratio at least 1.0) fits the budget: it
    cannot overshoot together with anything, and checking its worst case would refuse the last
    call of a run whose real spend fits (it can overshoot by its own misestimate only).

    A reservation that does not fit waits while other reservations are outstanding (they
    settle, maybe below their estimate, and teach the calibration; a waiting reservation is
    sized again when it did) and raises :class:`BudgetExceeded` when none are. Waiters are
    served in arrival order, per ledger: a newcomer that would fit does not overtake them, or
    a large call could wait for its siblings' whole lives while their small ones keep taking
    the room it waits for. A call settles to its real usage; a call cut after it was sent
    keeps its reservation, since its tokens may already be billed.
    """

    def __init__(
        self, token_budget: int | None, cost_budget: float | None, parent: Ledger | None = None
    ) -> None:
        self.token_budget = token_budget
        self.cost_budget = cost_budget
        self.parent = parent
        self.tracks_cost: bool = cost_budget is not None or (
            parent is not None and parent.tracks_cost
        )
        """Whether any ledger in the chain has a cost budget (else reservations skip pricing)."""
        self.used_tokens = 0
        self.used_cost = 0.0
        self.reserved_tokens = 0
        self.reserved_cost = 0.0
        self.worst_tokens = 0.0
        """The worst cases of the reservations outstanding, in tokens (and dollars below)."""
        self.worst_cost = 0.0
        self.outstanding = 0
        self._worst_token_budget = (
            math.inf if token_budget is None else token_budget * (1 + OVERSHOOT_ALLOWANCE)
        )
        self._worst_cost_budget = (
            math.inf if cost_budget is None else cost_budget * (1 + OVERSHOOT_ALLOWANCE)
        )
        self._changed = trio.Event()
        self._queue: deque[object] = deque()
        """Tickets of the reservations waiting on this ledger, in arrival order."""
        self._ancestry: tuple[Ledger, ...] = (self, *(parent._ancestry if parent else ()))
        self.calibrations: _Calibrations = parent.calibrations if parent else _Calibrations()
        """What each model bills per estimated token: one set for the run (sub-budgets share
        their root's)."""
        self._model: object = None
        self._calibration = Calibration()

    def claim(
        self,
        model: object,
        estimate: int,
        max_tokens: int,
        teaches: bool = True,
        price: Callable[[Usage], float] | None = None,
        hosted: Usage | None = None,
    ) -> Reservation:
        """A reservation for one call of ``model``, sized from its input ``estimate`` in
        tokens, its output cap and what the model was seen to bill, priced with ``price`` (the
        model's ``cost``; with ``hosted``, the most hosted tool uses the call may make) if a
        ledger of the chain has a cost budget, and held at once if it fits (its ``ledgers``
        are then the chain; else :meth:`reserve` it). Raises :class:`PricingFailed` if
        pricing does."""
        if model is self._model:  # most ledgers see one model: no lookup
            calibration = self._calibration
        else:
            calibration = self._calibration = self.calibrations.of(model)
            self._model = model
        if price is not None and self.tracks_cost:
            r = Reservation(estimate, max_tokens, calibration, teaches, price, hosted)
        elif calibration.ratio == 1.0:  # the common case, without a call
            r = _new_reservation(Reservation)
            r.estimate = estimate
            r.max_tokens = max_tokens
            r.calibration = calibration
            r.teaches = teaches
            r.price = None
            r.hosted = None
            r.ledgers = ()
            r.settled = False
            r.tokens = estimate + max_tokens
            r.worst_tokens = estimate * calibration.worst + max_tokens
        else:
            r = Reservation(estimate, max_tokens, calibration, teaches, None)
        chain = self._ancestry
        for lg in chain:
            if lg._queue or not lg._fits(r):
                return r
        if r.price is not None:
            self._hold(r)
            return r
        r.ledgers = chain  # held: _hold without the dollars, inline (one per model call)
        tokens, worst_tokens = r.tokens, r.worst_tokens
        for lg in chain:
            lg.reserved_tokens += tokens
            lg.worst_tokens += worst_tokens
            lg.outstanding += 1
        return r

    def _fits(self, r: Reservation) -> bool:
        """Whether ``r`` may be held here now: its expected amount and its worst case if other
        calls are in flight, else its amount at no less than the class estimate."""
        busy = self.outstanding
        budget = self.token_budget
        if budget is not None:
            if busy:
                if self.used_tokens + self.reserved_tokens + r.tokens > budget:
                    return False
                if self.used_tokens + self.worst_tokens + r.worst_tokens > self._worst_token_budget:
                    return False
            elif self.used_tokens + r.lone_tokens > budget:
                return False
        dollars = self.cost_budget
        if dollars is not None:
            if busy:
                if self.used_cost + self.reserved_cost + r.cost > dollars + 1e-12:
                    return False
                if (
                    self.used_cost + self.worst_cost + r.worst_cost
                    > self._worst_cost_budget + 1e-12
                ):
                    return False
            elif self.used_cost + r.lone_cost > dollars + 1e-12:
                return False
        return True

    def try_reserve(self, r: Reservation) -> bool:
        """Hold ``r`` without waiting: False if some ledger of the chain has no room, or has
        reservations waiting (they go first)."""
        for lg in self._ancestry:
            if lg._queue or not lg._fits(r):
                return False
        self._hold(r)
        return True

    async def reserve(self, r: Reservation) -> None:
        """Hold ``r`` on this ledger and every parent, waiting (in arrival order) while others
        may free room; sized again when its model's calibration changed meanwhile."""
        chain = self._ancestry
        ticket = object()
        queued_on: Ledger | None = None
        calibration = r.calibration
        sized = calibration.version  # what it was sized with (no wait since)
        try:
            while True:
                if calibration.version != sized:
                    r.size()
                    sized = calibration.version
                blocking = [lg for lg in chain if not lg._fits(r)]
                for lg in blocking:
                    if lg.outstanding == 0:  # nothing will ever free room there
                        raise BudgetExceeded(
                            lg.describe(
                                r.lone_tokens,
                                r.lone_cost if r.price else 0.0,
                                r.hosted if r.price else None,
                            )
                        )
                ahead = [lg for lg in chain if lg._queue and lg._queue[0] is not ticket]
                if not blocking and not ahead:
                    self._hold(r)
                    return
                wait_on = (ahead or blocking)[0]
                if wait_on is not queued_on:
                    if queued_on is not None:
                        queued_on._leave(ticket)
                    wait_on._queue.append(ticket)
                    queued_on = wait_on
                await wait_on._changed.wait()
        finally:
            if queued_on is not None:
                queued_on._leave(ticket)

    def _leave(self, ticket: object) -> None:
        """Take ``ticket`` out of the queue; the next in line may go now."""
        self._queue.remove(ticket)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()  # a new event for the next wait
        self._changed = trio.Event()

    def _hold(self, r: Reservation) -> None:
        chain = r.ledgers = self._ancestry
        tokens, worst_tokens = r.tokens, r.worst_tokens
        if r.price is None:  # no cost budget in the chain: the dollars are all zero
            for lg in chain:
                lg.reserved_tokens += tokens
                lg.worst_tokens += worst_tokens
                lg.outstanding += 1
            return
        cost, worst_cost = r.cost, r.worst_cost
        for lg in chain:
            lg.reserved_tokens += tokens
            lg.reserved_cost += cost
            lg.worst_tokens += worst_tokens
            lg.worst_cost += worst_cost
            lg.outstanding += 1

    def settle(self, reservation: Reservation, usage: Usage | None) -> None:
        """Replace a reservation by the real usage (``None``: keep the reserved amounts as
        used), and teach its model's calibration what the call billed."""
        if reservation.settled:
            return
        reservation.settled = True
        held, worst = reservation.tokens, reservation.worst_tokens
        if usage is None:
            tokens, cost = held, (0.0 if reservation.price is None else reservation.cost)
        else:
            tokens, cost = usage.input_tokens + usage.output_tokens, usage.cost_usd
            if tokens < 0 or cost < 0:  # a model reporting negative usage gives nothing back
                tokens, cost = max(0, tokens), max(0.0, cost)
            if reservation.teaches and (
                # billed exactly what was expected: nothing new to learn
                usage.input_tokens != held - reservation.max_tokens
                or reservation.calibration.unsettled()
            ):
                reservation.calibration.learn(reservation.estimate, usage.input_tokens)
        if reservation.price is None:
            held_cost = worst_cost = 0.0
        else:
            held_cost, worst_cost = reservation.cost, reservation.worst_cost
        dollars = held_cost or worst_cost or cost
        for lg in reservation.ledgers:
            lg.reserved_tokens -= held
            lg.worst_tokens -= worst
            lg.outstanding -= 1
            lg.used_tokens += tokens
            if dollars:
                lg.reserved_cost -= held_cost
                lg.worst_cost -= worst_cost
                lg.used_cost += cost
            if lg._queue:  # wake reservations waiting for room
                lg._wake()

    def room(self) -> tuple[float, float]:
        """What is left of the chain's budgets now (tokens, dollars), held calls counted as
        spent; ``inf`` where no ledger of the chain has that budget. A child run elsewhere gets
        this as its lease."""
        tokens = cost = math.inf
        for lg in self._ancestry:
            if lg.token_budget is not None:
                tokens = min(tokens, lg.token_budget - lg.used_tokens - lg.reserved_tokens)
            if lg.cost_budget is not None:
                cost = min(cost, lg.cost_budget - lg.used_cost - lg.reserved_cost)
        return max(0.0, tokens), max(0.0, cost)

    def spend(self, usage: Usage) -> None:
        """Count ``usage`` as spent on the whole chain without a reservation: a response
        replayed from a journal, billed when it was first made."""
        tokens = max(0, usage.input_tokens) + max(0, usage.output_tokens)
        cost = max(0.0, usage.cost_usd)
        for lg in self._ancestry:
            lg.used_tokens += tokens
            lg.used_cost += cost

    def describe(self, tokens: int, cost: float, hosted: Usage | None = None) -> str:
        """A one-line reason why a reservation of this size does not fit (``hosted``: the
        hosted tool uses its cost holds)."""
        if self.token_budget is not None and (
            self.used_tokens + self.reserved_tokens + tokens > self.token_budget
        ):
            return (
                f"token budget exhausted: {self.used_tokens} of {self.token_budget} used, "
                f"the next call may need {tokens}"
            )
        uses = ""
        if hosted is not None:
            counted = [
                f"{n} {what}"
                for n, what in (
                    (hosted.web_search_requests, "web searches"),
                    (hosted.web_fetch_requests, "web fetches"),
                )
                if n
            ]
            uses = f" (with up to {' and '.join(counted)})" if counted else ""
        return (
            f"cost budget exhausted: ${self.used_cost:.4f} of ${self.cost_budget} used, "
            f"the next call may cost ${cost:.4f}{uses}"
        )
