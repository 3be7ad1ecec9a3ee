"""Deterministic test models: :class:`ScriptedModel` and :class:`FunctionModel`.

Both are stateless across calls. ``ScriptedModel`` picks its step by the number of assistant
turns already in the request's transcript, so concurrent children and repeated runs of one
definition always get the same answers, whatever order the scheduler runs them in.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import (
    BLOCK_TYPES,
    MAX_NESTING,
    Block,
    TextBlock,
    ToolUseBlock,
    Usage,
    nesting_exceeds,
)
from .base import ModelContext, ModelRequest, ModelResponse

__all__ = ["FunctionModel", "ScriptedModel", "Step", "final", "response", "text", "tool_call"]


@dataclasses.dataclass(frozen=True, slots=True)
class FinalAnswer:
    """A typed agent's answer in a script (made by :func:`final`)."""

    value: Any


Step: TypeAlias = str | Block | FinalAnswer | Sequence[Block | str | FinalAnswer] | ModelResponse
"""One scripted reply: text (a string), a block, a typed answer (:func:`final`), a list of
them, or a whole response."""
_UNSET_ID = ""


def text(value: str) -> TextBlock:
    """A text block for a scripted reply."""
    if not isinstance(value, str):
        raise ConfigurationError(f"text() takes a string, got {_shown(value)}")
    return TextBlock(value)


def tool_call(
    name: str, args: Mapping[str, Any] | None = None, id: str | None = None
) -> ToolUseBlock:
    """A tool call for a scripted reply; without ``id`` one is assigned per turn and position.

    ``args`` is the call's input, a mapping of argument names to values (a JSON object). It is
    kept as given (copied one level): a script may hand the runtime what a faulty model would,
    nested past the runtime's limit included.
    """
    if not isinstance(name, str):
        raise ConfigurationError(
            f"tool_call() takes the tool's name as a string, got {_shown(name)}"
        )
    if args is not None and not isinstance(args, Mapping):
        raise ConfigurationError(
            f"tool_call({name!r}, args): args must be a mapping of argument names to values "
            f"(a JSON object), got {_shown(args)}"
        )
    if args is not None and not all(isinstance(key, str) for key in args):
        bad = next(key for key in args if not isinstance(key, str))
        raise ConfigurationError(
            f"tool_call({name!r}, args): argument names are strings, got {_shown(bad)}"
        )
    if id is not None and not isinstance(id, str):
        raise ConfigurationError(f"tool_call({name!r}, id=...) takes a string, got {_shown(id)}")
    return ToolUseBlock(id or _UNSET_ID, name, dict(args or {}))


def final(value: Any) -> FinalAnswer:
    """A typed agent's answer for a scripted reply, as a step or in a list step: a
    ``final_result`` call with the value's JSON (wrapped as ``{"result": ...}`` when the
    agent's type is not an object), or for an agent in native output mode that JSON as the
    reply's text (as a provider's structured output would be)."""
    return FinalAnswer(value)


_FINAL_RESULT: Final = "final_result"  # core.output.FINAL_RESULT (its tests use final())


def _answered(step: Any, request: ModelRequest) -> Any:
    """``step`` with each :class:`FinalAnswer` made the block the request's agent answers with."""
    if isinstance(step, FinalAnswer):
        return _answer_block(step, request)
    if isinstance(step, list | tuple) and any(isinstance(b, FinalAnswer) for b in step):
        return [_answer_block(b, request) if isinstance(b, FinalAnswer) else b for b in step]
    return step


def _answer_block(answer: FinalAnswer, request: ModelRequest) -> Block:
    from pydantic import TypeAdapter  # only for scripts that give typed answers

    value = TypeAdapter(Any).dump_python(answer.value, mode="json")
    output = request.output
    if output is not None and output.wrapped:
        value = {"result": value}
    if output is not None and output.native:
        return TextBlock(json.dumps(value, ensure_ascii=False))
    if not isinstance(value, dict):  # a text agent given final(...): its call is refused
        value = {"result": value}
    return ToolUseBlock(_UNSET_ID, _FINAL_RESULT, value)


_USAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Usage))
_USAGE_COUNTS = frozenset(_USAGE_FIELDS) - {"cost_usd"}


def _shown(value: object) -> str:
    """``value`` for an error message: its type, and its repr cut short (it may be huge)."""
    try:
        shown = repr(value)
    except Exception:  # a repr that raises, or data too deep for one
        shown = "..."
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{type(value).__name__} {shown}"


_PLAIN_COST: Final = frozenset({int, float})
"""What a cost may be (``bool`` is not: it fails the exact-class test)."""


def _usage_of(usage: Usage | Mapping[str, Any]) -> Usage:
    """``response(usage=...)``'s value as a :class:`Usage`, or a ConfigurationError saying
    what is wrong with it. Any number is taken (a script may report what a faulty provider
    would: the runtime clamps it); a value that is not a number is refused."""
    if (  # the common case, checked inline: a Usage of exact ints and a number
        type(usage) is Usage
        and usage.input_tokens.__class__ is int
        and usage.output_tokens.__class__ is int
        and usage.cache_read_tokens.__class__ is int
        and usage.cache_write_tokens.__class__ is int
        and usage.requests.__class__ is int
        and usage.cost_usd.__class__ in _PLAIN_COST
    ):
        return usage
    if isinstance(usage, Usage):
        values = {name: getattr(usage, name) for name in _USAGE_FIELDS}
    elif isinstance(usage, Mapping):
        unknown = [key for key in usage if key not in _USAGE_FIELDS]
        if unknown:
            raise ConfigurationError(
                f"response(usage=...): unknown key(s) {', '.join(map(repr, unknown))}; "
                f"the keys are Usage's fields: {', '.join(_USAGE_FIELDS)}"
            )
        values = dict(usage)
    else:
        raise ConfigurationError(
            "response(usage=...) takes a Usage or a mapping of its fields "
            f"({', '.join(_USAGE_FIELDS)}), got {_shown(usage)}"
        )
    for name, value in values.items():
        if name in _USAGE_COUNTS:
            ok = isinstance(value, int) and not isinstance(value, bool)
            kind = "an integer"
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "a number"
        if not ok:
            raise ConfigurationError(
                f"response(usage=...): {name} must be {kind}, got {_shown(value)}"
            )
    return usage if isinstance(usage, Usage) else Usage(**values)


def response(
    *blocks: Block,
    stop_reason: str | None = None,
    usage: Usage | Mapping[str, Any] | None = None,
) -> ModelResponse:
    """A whole scripted reply; ``stop_reason`` defaults to ``tool_use`` if a block is a tool call.

    ``usage`` is a :class:`Usage` or a mapping of its fields (``{"input_tokens": 120,
    "output_tokens": 8}``; unknown keys are refused); without it, usage is estimated. Every
    argument is checked here, so a mistake fails where the script is written, not in the run.
    """
    if stop_reason is not None and not isinstance(stop_reason, str):
        raise ConfigurationError(
            f"response(stop_reason=...) takes a string, got {_shown(stop_reason)}"
        )
    calls_a_tool = False
    for b in blocks:  # one loop, not any()/all(): a generator costs more than a reply's blocks
        if isinstance(b, ToolUseBlock):
            calls_a_tool = True
        elif not isinstance(b, BLOCK_TYPES):
            raise ConfigurationError(
                f"response() takes content blocks (text(...), tool_call(...)), got {b!r}; "
                "pass several as separate arguments, not as a list"
            )
    if stop_reason is None:
        stop_reason = "tool_use" if calls_a_tool else "end_turn"
    return ModelResponse(blocks, stop_reason, _NO_USAGE if usage is None else _usage_of(usage))


_NO_USAGE = Usage(requests=-1)  # sentinel: "estimate it"
_STEP_ITEM_TYPES = (*BLOCK_TYPES, str)  # what a list step may hold (strings become text)


def _with_ids(content: tuple[Block, ...], turn: int) -> tuple[Block, ...]:
    """``content`` with an id for every tool call scripted without one (stable per turn)."""
    return tuple(
        ToolUseBlock(f"toolu_{turn:03d}_{i}", b.name, b.input)
        if isinstance(b, ToolUseBlock) and b.id == _UNSET_ID
        else b
        for i, b in enumerate(content)
    )


def _finish(step: Any, request: ModelRequest) -> ModelResponse:
    """Normalize a step into a response: ids assigned, usage estimated when not given.

    The model name is left as the step gives it (usually empty): the chat span names the
    model that was asked when a reply does not say which answered.
    """
    step = _answered(step, request)
    if isinstance(step, ModelResponse):
        resp = step
    elif isinstance(step, BLOCK_TYPES):
        resp = response(step)
    elif isinstance(step, str):
        resp = response(TextBlock(step))
    elif isinstance(step, Sequence) and all(isinstance(b, _STEP_ITEM_TYPES) for b in step):
        resp = response(*(TextBlock(b) if isinstance(b, str) else b for b in step))
    else:
        raise ModelError(
            f"step for agent {request.agent.name!r} is not a block, a string, a list of those "
            f"or a response: {step!r}",
            fatal=True,
            kind="invalid_script",
        )
    content = resp.content
    for b in content:
        if isinstance(b, ToolUseBlock) and b.id == _UNSET_ID:
            content = _with_ids(content, request.turn_index())
            break
    usage = resp.usage
    # a reply built by hand with usage that is not a Usage is left for the runtime to refuse
    if usage is _NO_USAGE or (isinstance(usage, Usage) and usage.requests < 0):
        out_chars = sum(
            len(str(b.text))
            if isinstance(b, TextBlock)
            else _input_chars(b.input) + len(str(b.name))
            for b in content
            if isinstance(b, TextBlock | ToolUseBlock)
        )
        usage = Usage(input_tokens=request.input_tokens_estimate, output_tokens=out_chars // 4 + 1)
    if content is resp.content and usage is resp.usage:
        return resp  # nothing to fill in
    return ModelResponse(content, resp.stop_reason, usage, resp.model, resp.id)


def _input_chars(value: Any) -> int:
    """A tool input's size for the usage estimate (input nested past the runtime's limit,
    which it drops, is not written out to be measured)."""
    return 4 * MAX_NESTING if nesting_exceeds(value) else len(str(value))


class ScriptedModel:
    """Answers from a fixed script: a list for every agent, or ``{agent_name: [steps]}``.

    The step used is the number of assistant turns in the request's transcript. A request past
    the end of the script fails the run with a clear error naming the agent and the step.
    """

    provider = "scripted"
    supports_native_output = True
    """In native output mode a ``final(...)`` step is answered as its JSON text."""

    def __init__(
        self,
        steps: list[Step] | tuple[Step, ...] | Mapping[str, list[Step] | tuple[Step, ...]],
        *,
        name: str = "scripted",
    ) -> None:
        if isinstance(steps, Mapping):
            for agent_name, agent_steps in steps.items():
                if isinstance(agent_steps, str | bytes) or not isinstance(agent_steps, Sequence):
                    raise ConfigurationError(
                        f"ScriptedModel: the script for {agent_name!r} must be a list of steps, "
                        f"got {agent_steps!r}"
                    )
            self._by_agent: dict[str, list[Any]] | None = {k: list(v) for k, v in steps.items()}
            self._steps: list[Any] = []
        elif isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
            raise ConfigurationError("ScriptedModel takes a list of steps or {agent_name: [steps]}")
        else:
            self._by_agent = None
            self._steps = list(steps)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def cost(self, usage: Usage) -> float:
        return 0.0

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        agent = request.agent.name
        if self._by_agent is not None:
            if agent not in self._by_agent:
                raise ModelError(
                    f"ScriptedModel has no script for agent {agent!r} "
                    f"(scripts exist for: {', '.join(sorted(self._by_agent))})",
                    fatal=True,
                    kind="script_exhausted",
                )
            steps = self._by_agent[agent]
        else:
            steps = self._steps
        index = request.turn_index()
        if index >= len(steps):
            raise ModelError(
                f"ScriptedModel script for agent {agent!r} ({request.agent.path}) has no step "
                f"{index} (it has {len(steps)} steps): add a step or end the script with text",
                fatal=True,
                kind="script_exhausted",
            )
        return _finish(steps[index], request)


class FunctionModel:
    """Answers with ``fn(request)`` (sync or async), which returns a step like a script's."""

    provider = "function"
    supports_native_output = True

    def __init__(
        self,
        fn: Callable[[ModelRequest], Step | Awaitable[Step]],
        *,
        name: str = "function",
        prices: Callable[[Usage], float] | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigurationError(f"FunctionModel needs a callable, got {fn!r}")
        self._fn = fn
        self._name = name
        self._prices = prices

    @property
    def name(self) -> str:
        return self._name

    def cost(self, usage: Usage) -> float:
        return self._prices(usage) if self._prices else 0.0

    async def request(self, request: ModelRequest, ctx: ModelContext) -> ModelResponse:
        step = self._fn(request)
        if inspect.isawaitable(step):
            step = await step
        resp = _finish(step, request)
        if self._prices and resp.usage.cost_usd == 0:
            resp = dataclasses.replace(
                resp, usage=dataclasses.replace(resp.usage, cost_usd=self._prices(resp.usage))
            )
        return resp
