"""Deterministic test models: :class:`ScriptedModel` and :class:`FunctionModel`.

Both are stateless across calls. ``ScriptedModel`` picks its step by the number of assistant
turns already in the request's transcript, so concurrent children and repeated runs of one
definition always get the same answers, whatever order the scheduler runs them in.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from ..core.errors import ConfigurationError, ModelError
from ..core.messages import BLOCK_TYPES, Block, TextBlock, ToolUseBlock, Usage
from .base import ModelContext, ModelRequest, ModelResponse

__all__ = ["FunctionModel", "ScriptedModel", "Step", "response", "text", "tool_call"]

Step: TypeAlias = str | Block | Sequence[Block | str] | ModelResponse
"""One scripted reply: text (a string), a block, a list of them, or a whole response."""
_UNSET_ID = ""


def text(value: str) -> TextBlock:
    """A text block for a scripted reply."""
    return TextBlock(value)


def tool_call(
    name: str, args: Mapping[str, Any] | None = None, id: str | None = None
) -> ToolUseBlock:
    """A tool call for a scripted reply; without ``id`` one is assigned per turn and position."""
    return ToolUseBlock(id or _UNSET_ID, name, dict(args or {}))


def response(
    *blocks: Block, stop_reason: str | None = None, usage: Usage | None = None
) -> ModelResponse:
    """A whole scripted reply; ``stop_reason`` defaults to ``tool_use`` if a block is a tool call."""
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
    return ModelResponse(blocks, stop_reason, usage if usage is not None else _NO_USAGE)


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
    if usage is _NO_USAGE or usage.requests < 0:
        out_chars = sum(
            len(b.text) if isinstance(b, TextBlock) else len(str(b.input)) + len(b.name)
            for b in content
            if isinstance(b, TextBlock | ToolUseBlock)
        )
        usage = Usage(input_tokens=request.input_tokens_estimate, output_tokens=out_chars // 4 + 1)
    if content is resp.content and usage is resp.usage:
        return resp  # nothing to fill in
    return ModelResponse(content, resp.stop_reason, usage, resp.model, resp.id)


class ScriptedModel:
    """Answers from a fixed script: a list for every agent, or ``{agent_name: [steps]}``.

    The step used is the number of assistant turns in the request's transcript. A request past
    the end of the script fails the run with a clear error naming the agent and the step.
    """

    provider = "scripted"

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
