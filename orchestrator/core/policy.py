"""The permission gate every tool call passes before its handler may run.

The model only asks; this module decides. An agent's tools are allowed unless a rule says
otherwise, a tool the agent does not hold is always refused, and ``confirm`` asks the approver
(no approver means declined). A refused call never reaches its handler: the model gets an
``is_error`` result saying so, and can pick a permitted next step.

A rule's key is a tool name or an ``fnmatch`` pattern (``"fs__*"``: every tool of an MCP server
named ``fs``). Within one policy an exact rule wins over patterns, and among the patterns that
match, the strictest wins; layers (an agent's, its ancestors', the run's) combine per tool, the
stricter winning.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

import trio

from .errors import ConfigurationError
from .redact import redact
from .tools import Tool, describe_exception

__all__ = [
    "DEFER",
    "PARK",
    "Approver",
    "Decision",
    "Park",
    "PendingCall",
    "Policy",
    "ask_approver",
    "is_pattern",
]

RuleValue: TypeAlias = Literal["allow", "confirm", "deny"]
_logger = logging.getLogger(__name__)
_CACHED_NAMES = 4096
"""Decisions a policy with patterns or layers remembers, per tool name (names a model makes up
must not grow it without bound)."""


def is_pattern(rule: str) -> bool:
    """Whether a rule's key is an ``fnmatch`` pattern rather than a tool name."""
    return any(c in rule for c in "*?[")


class Decision(StrEnum):
    """What a rule says about a call. Ordered by strictness: deny > confirm > allow."""

    ALLOW = "allow"
    CONFIRM = "confirm"
    DENY = "deny"

    @property
    def strictness(self) -> int:
        return _STRICTNESS[self]


_STRICTNESS = {Decision.ALLOW: 0, Decision.CONFIRM: 1, Decision.DENY: 2}


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call waiting for approval: what the approver sees."""

    name: str
    input: Mapping[str, Any]
    id: str
    agent_name: str
    agent_path: str


Approver: TypeAlias = Callable[[PendingCall], bool | Awaitable[bool]]


class _Defer:
    """The approver :data:`DEFER`: not asked, it parks the call for a person to decide later."""

    def __call__(self, call: PendingCall) -> bool:
        raise ConfigurationError("DEFER parks a call; it is not an approver to call")

    def __repr__(self) -> str:
        return "DEFER"


DEFER: Approver = _Defer()
"""``Policy(..., approver=DEFER)``: a call that needs confirmation is parked, not declined.
The agent that made it waits; when every running agent waits, the run ends
``awaiting_approval`` with ``result.pending_approvals``, and ``resume(journal,
approvals={id: True | False})`` (``orchestrator approve``) goes on. Needs a journal."""


class Park:
    """What :meth:`Policy.check` answers for a call to park (see :data:`DEFER`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PARK"


PARK = Park()
"""The one :class:`Park`."""


@dataclass(frozen=True)
class Policy:
    """Rules per tool name or pattern (``allow`` / ``confirm`` / ``deny``), a default, and an
    approver.

    ``Policy(rules={"delete_file": "confirm", "shell": "deny", "fs__*": "confirm"},
    approver=ask_user)``: an exact rule wins over patterns; of the patterns that match a name,
    the strictest wins. The
    approver (sync or async) gets a :class:`PendingCall` and returns True to run it; its wait
    counts against the run's deadline. Policies of an agent, its ancestors and the run combine
    with :meth:`combine`: per tool, the stricter rule wins.
    """

    rules: Mapping[str, RuleValue] = field(default_factory=dict)
    default: RuleValue = "allow"
    approver: Approver | None = None
    _decisions: Mapping[str, Decision] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _default: Decision = field(default=Decision.ALLOW, init=False, repr=False, compare=False)
    _approvers: tuple[Approver, ...] = field(default=(), init=False, repr=False, compare=False)
    _patterns: tuple[tuple[str, Decision], ...] = field(
        default=(), init=False, repr=False, compare=False
    )
    _layers: tuple[Policy, Policy] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _cache: dict[str, Decision] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rules, Mapping):
            raise ConfigurationError(
                f"Policy rules must map tool names to 'allow', 'confirm' or 'deny', "
                f"got {self.rules!r}"
            )
        for name in self.rules:
            if not isinstance(name, str):
                named = f" (use its name, {name.name!r})" if isinstance(name, Tool) else ""
                raise ConfigurationError(
                    f"Policy rules are keyed by tool name, got the key {name!r}{named}"
                )
        for name, value in {**self.rules, "<default>": self.default}.items():
            if value not in ("allow", "confirm", "deny"):
                raise ConfigurationError(
                    f"Policy rule for {name!r} must be 'allow', 'confirm' or 'deny', got {value!r}"
                )
        if self.approver is not None and (
            not callable(self.approver) or isinstance(self.approver, Tool)
        ):
            raise ConfigurationError(
                f"Policy approver must be a callable taking a PendingCall, got {self.approver!r}"
            )
        object.__setattr__(self, "rules", dict(self.rules))
        object.__setattr__(
            self,
            "_decisions",
            {k: Decision(v) for k, v in self.rules.items() if not is_pattern(k)},
        )
        object.__setattr__(
            self,
            "_patterns",
            tuple((k, Decision(v)) for k, v in self.rules.items() if is_pattern(k)),
        )
        object.__setattr__(self, "_default", Decision(self.default))
        object.__setattr__(
            self, "_approvers", (self.approver,) if self.approver is not None else ()
        )

    @property
    def defers(self) -> bool:
        """Whether :data:`DEFER` is among this policy's approvers (its layers' included)."""
        return any(a is DEFER for a in self._approvers)

    def decide(self, tool_name: str) -> Decision:
        """The rule for ``tool_name``: its exact rule, else the strictest pattern matching it,
        else the default (for a combined policy: the stricter of its layers')."""
        if self._layers is None:
            exact = self._decisions.get(tool_name)
            if exact is not None or not self._patterns:
                return self._default if exact is None else exact
        cached = self._cache.get(tool_name)
        if cached is None:
            cached = self._decide_slowly(tool_name)
            if len(self._cache) < _CACHED_NAMES:
                self._cache[tool_name] = cached
        return cached

    def _decide_slowly(self, tool_name: str) -> Decision:
        if self._layers is not None:
            lower, upper = self._layers
            a, b = lower.decide(tool_name), lower._upper_rule(upper, upper.decide(tool_name))
            return a if a.strictness >= b.strictness else b
        matching = [d for rule, d in self._patterns if fnmatch.fnmatchcase(tool_name, rule)]
        return max(matching, key=_STRICTNESS.__getitem__) if matching else self._default

    def combine(self, stricter_of: Policy | None) -> Policy:
        """One policy where, for each tool and for the default, the stricter rule wins.

        ``stricter_of`` is the layer above (the parent's, or the run's). Approvers add up: a
        call that needs confirmation runs only if every approver of the combined layers says
        yes. An upper layer's approver may answer this layer's ``confirm`` (a run supplying the
        approver for rules its agents declare), never the other way round: the upper layer's
        ``confirm`` without an approver of its own declines every call, and combines as ``deny``.
        """
        if stricter_of is None:
            return self
        rules: dict[str, RuleValue] = {}
        for name in {*self.rules, *stricter_of.rules}:
            a, b = self.decide(name), self._upper_rule(stricter_of, stricter_of.decide(name))
            rules[name] = (a if a.strictness >= b.strictness else b).value
        da, db = self._default, self._upper_rule(stricter_of, stricter_of._default)
        default: RuleValue = (da if da.strictness >= db.strictness else db).value
        combined = Policy(rules, default, self.approver or stricter_of.approver)
        # per tool, each layer decides (exact rule, then patterns) and the stricter wins: a
        # pattern cannot be merged into the other layer's rules without changing what it means
        # (without patterns, the merged rules are the whole answer: one lookup per call)
        if self._patterns or self._layers or stricter_of._patterns or stricter_of._layers:
            object.__setattr__(combined, "_layers", (self, stricter_of))
        approvers: list[Approver] = []
        for approver in (*self._approvers, *stricter_of._approvers):  # by identity: need not hash
            if all(approver is not seen for seen in approvers):
                approvers.append(approver)
        object.__setattr__(combined, "_approvers", tuple(approvers))
        return combined

    def with_approvers(self, replace: Callable[[Approver], Approver]) -> Policy:
        """This policy with each approver, its layers' too, replaced by ``replace(approver)``:
        what a runner that runs an agent in another process sends (approvers that ask the
        parent). The rules and the decisions are unchanged."""
        if not self._approvers and self._layers is None and self.approver is None:
            return self
        out = copy.copy(self)
        if self.approver is not None:
            object.__setattr__(out, "approver", replace(self.approver))
        object.__setattr__(out, "_approvers", tuple(replace(a) for a in self._approvers))
        if self._layers is not None:
            lower, upper = self._layers
            object.__setattr__(
                out, "_layers", (lower.with_approvers(replace), upper.with_approvers(replace))
            )
        return out

    def _upper_rule(self, upper: Policy, decision: Decision) -> Decision:
        """An upper layer's rule as it binds this one: its ``confirm`` with nobody of its own
        to ask declines every call, so where this layer's approvers could answer it, it is
        ``deny`` (left as it is otherwise, the refusal says that no approver is configured)."""
        if decision is Decision.CONFIRM and not upper._approvers and self._approvers:
            return Decision.DENY
        return decision

    async def check(
        self,
        call: PendingCall,
        held: frozenset[str],
        *,
        one_at_a_time: trio.Semaphore | None = None,
        on_abandoned_thread: Callable[[], None] | None = None,
    ) -> str | Park | None:
        """``None`` if the call may run, :data:`PARK` to park it (every approver but
        :data:`DEFER` said yes), else the refusal the model reads.

        ``one_at_a_time`` (the run's, of one slot) makes approvers answer one call after
        another: a person at a terminal must see each question with its own answer, even when
        parallel calls in several agents need confirmation at once. A sync approver whose wait
        was cut (an agent's timeout) still holds it until its thread returns: the question it
        shows is still open; ``on_abandoned_thread`` is told of that thread (the run counts it).
        """
        if call.name not in held:
            return (
                f"tool {call.name!r} is not available to agent {call.agent_name!r}; "
                f"use one of: {', '.join(sorted(held)) or '(no tools)'}"
            )
        decision = self.decide(call.name)
        if decision is Decision.ALLOW:
            return None
        if decision is Decision.DENY:
            return (
                f"tool {call.name!r} is denied by policy; do not call it again, choose another way"
            )
        if not self._approvers:
            return (
                f"tool {call.name!r} needs approval and no approver is configured; it was not run"
            )
        defer = False
        for approver in self._approvers:
            if approver is DEFER:  # asked last: a call another approver declines is not parked
                defer = True
                continue
            # the approver's own copy: one that edits what it shows must not change the call
            asked = dataclasses.replace(call, input=copy.deepcopy(call.input))
            try:
                verdict = await ask_approver(approver, asked, one_at_a_time, on_abandoned_thread)
            except Exception as exc:  # fail closed: an approver that breaks approves nothing
                _logger.warning(  # no traceback: its text may quote secrets, redacted here
                    "the approver raised on a call to %r by %s: it was not run (%s)",
                    call.name,
                    call.agent_path,
                    redact(describe_exception(exc)),
                )
                return (
                    f"the approver failed ({type(exc).__name__}) on the call to {call.name!r}; "
                    "it was not run"
                )
            if verdict is not True:
                if not isinstance(verdict, bool):  # a forgotten return is a bug, not a "no"
                    _logger.warning(
                        "the approver returned a %s, not True or False, on a call to %r by %s: "
                        "it was not run",
                        type(verdict).__name__,
                        call.name,
                        call.agent_path,
                    )
                    return (
                        f"the approver gave no answer on the call to {call.name!r} "
                        f"(it returned {type(verdict).__name__}); it was not run"
                    )
                return f"the call to {call.name!r} was declined by the approver; it was not run"
        return PARK if defer else None


async def ask_approver(
    approver: Approver,
    call: PendingCall,
    gate: trio.Semaphore | None,
    on_abandoned_thread: Callable[[], None] | None = None,
) -> object:
    """An approver's verdict, holding ``gate`` while it is asked. A sync approver (say, one
    reading a terminal) runs in a worker thread, so it never blocks the run's other agents nor
    its deadline."""
    if inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(
        getattr(approver, "__call__", None)  # noqa: B004
    ):
        if gate is None:
            return await approver(call)  # type: ignore[misc]
        async with gate:
            return await approver(call)  # type: ignore[misc]
    if gate is not None:
        await gate.acquire()
    question = _SyncQuestion(approver, call, gate)
    try:
        (verdict,) = await trio.to_thread.run_sync(question.ask, abandon_on_cancel=True)
        if inspect.isawaitable(verdict):  # a sync callable may hand back an awaitable
            verdict = await verdict
    except BaseException:
        still_asking = question.give_up()
        if still_asking and on_abandoned_thread is not None:
            on_abandoned_thread()
        if gate is not None and not still_asking:
            gate.release()
        raise
    if gate is not None:
        gate.release()
    return verdict


class _SyncQuestion:
    """A sync approver asked in a worker thread, and who gives the run's gate back: the trio
    side once it has the verdict, or the thread itself if the trio side gave up on it (an
    agent's timeout) while the question was still open."""

    def __init__(self, approver: Approver, call: PendingCall, gate: trio.Semaphore | None) -> None:
        self._approver = approver
        self._call = call
        self._gate = gate
        self._token = trio.lowlevel.current_trio_token()
        self._lock = threading.Lock()
        self._started = self._finished = self._abandoned = False

    def ask(self) -> tuple[object]:
        """In the worker thread. Boxed: the verdict may be an awaitable."""
        with self._lock:
            if self._abandoned:  # given up on before it began: nobody waits for an answer
                return (False,)
            self._started = True
        try:
            return (self._approver(self._call),)
        finally:
            with self._lock:
                self._finished = True
                release = self._abandoned
            if release and self._gate is not None:
                with suppress(trio.RunFinishedError):
                    trio.from_thread.run_sync(self._gate.release, trio_token=self._token)

    def give_up(self) -> bool:
        """In the trio thread: stop waiting. True if the question is still open in its thread,
        which then gives the gate back when it returns."""
        with self._lock:
            self._abandoned = True
            return self._started and not self._finished
