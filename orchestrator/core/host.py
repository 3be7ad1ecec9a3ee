"""Running one child's subtree in this process, from its :class:`~.runner.ChildSpec`.

What a remote runner's worker calls (Dask today; a subprocess pool, Ray or Temporal tomorrow)
instead of core's internals: :func:`host_child` builds the run state a subtree needs from the
run's definitions (:class:`~.runner.RunDefinitions`), the child's node as the in-process
runner would build it under its parent but on a ledger of its own sized to its budget lease
and with the run's deadline on this machine's clock, runs it to its end (its own children run
here, in process) and returns its result tree. Its spans are made under the spawn span's W3C
context (``spec.trace_context``) with the tracer provider the caller gives; its events go to
the caller's ``forward``; the caller's ``stop`` returning cancels it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, suppress
from typing import TYPE_CHECKING, TypeAlias

import trio
from opentelemetry import context as otel_context

from ..models.base import ClientPool, Model
from ..tracing import spans
from .agent import AgentTree
from .events import AgentFinished, AgentStarted, Event, EventSink
from .ledger import Ledger
from .limits import Limits, Slots, tree_wide_limits
from .loop import run_agent
from .messages import Message, well_formed
from .policy import Policy
from .redact import RUN_SECRETS, secret_values
from .result import RunResult
from .runner import ChildSpec, RunDefinitions
from .spawn import DEFAULT_CONTEXT, add_spawn_tool, model_for
from .state import AgentNode, Limiters, Quota, RunState, make_runtime
from .tools import Tool

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["ToolRef", "host_child"]

ToolRef: TypeAlias = "tuple[str, int] | Tool"
"""A child's tool: itself, or ``(agent, index)`` into that agent's definition's ``tools`` (what
a runner sends instead of a tool the definitions carry already)."""

EVENT_BUFFER = 4096
"""Events of a hosted subtree held for ``forward`` (past that, dropped and counted)."""


async def host_child(
    definitions: RunDefinitions,
    spec: ChildSpec,
    *,
    model: Model,
    policy: Policy,
    tools: Sequence[ToolRef],
    agents_room: int | None,
    tracer_provider: TracerProvider | None = None,
    forward: Callable[[list[Event]], Awaitable[None]] | None = None,
    stop: Callable[[], Awaitable[object]] | None = None,
) -> RunResult:
    """Run the child ``spec`` describes, with its subtree, to its end here; its result tree.

    ``model``, ``policy``, ``tools`` and ``agents_room`` are what it inherits
    (:meth:`~.runner.Parent.inherited`). ``tracer_provider``: where its spans go (``None``: not
    traced), under ``spec.trace_context``. ``forward`` gets its subtree's events in batches as
    they come (the child's own start and end are the parent's to publish). ``stop``, awaited
    beside the run, cancels it when it returns (the parent's way to cut it: it ends
    ``cancelled``, its transcripts valid).
    """
    token = None
    if tracer_provider is not None and spec.trace_context:
        # here, not on top: opentelemetry.propagate reads its entry points when imported
        from opentelemetry import propagate

        token = otel_context.attach(propagate.extract(dict(spec.trace_context)))
    try:
        async with AsyncExitStack() as stack:
            tree = AgentTree(
                definitions.root, run_limits=definitions.limits, run_policy=definitions.policy
            )
            state = RunState(
                run_id=definitions.run_id,
                tree=tree,
                default_model=definitions.model,
                run_limits=definitions.limits,
                run_policy=definitions.policy,
                deps=definitions.deps,
                events=EventSink(EVENT_BUFFER if forward is not None else 0),
                tracer=spans.get_tracer(tracer_provider) if tracer_provider is not None else None,
                clients=ClientPool(stack),
                thread_limiter=trio.CapacityLimiter(definitions.tool_threads),
                context=definitions.context,
                capture=definitions.capture,
                secrets=secret_values(),
            )
            state.models = tree.models()
            state.menus = tree.menus(state.models)
            node = _node(state, definitions, spec, model, policy, tools, agents_room)
            RUN_SECRETS.set(state.secrets)
            async with trio.open_nursery() as forwarding:
                if forward is not None:
                    forwarding.start_soon(_forward_events, state.events, forward, spec.path)
                async with trio.open_nursery() as nursery:
                    if stop is not None:
                        nursery.start_soon(_stop_when, stop, state)
                    with state.scope:
                        state.scope.deadline = state.deadline
                        await run_agent(node, state)
                    nursery.cancel_scope.cancel()
                state.events.close()  # the forwarder sends what is left, then ends
        return node.to_result(definitions.run_id)
    finally:
        if token is not None:
            otel_context.detach(token)


async def _forward_events(
    events: EventSink, forward: Callable[[list[Event]], Awaitable[None]], top: str
) -> None:
    """Hand the subtree's events to ``forward`` in batches, as they come (the child's own
    start and end left out); the last batch once the sink closes."""
    receive = events.receive_channel
    while True:
        try:
            batch = [await receive.receive()]
        except trio.EndOfChannel:
            return
        while True:
            try:
                batch.append(receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        batch = [
            e for e in batch if not (isinstance(e, AgentStarted | AgentFinished) and e.path == top)
        ]
        if batch:
            with suppress(Exception):  # events are best effort: the result is what counts
                await forward(batch)


async def _stop_when(stop: Callable[[], Awaitable[object]], state: RunState) -> None:
    await stop()
    state.cancel_requested = True
    state.scope.cancel()


def _node(
    state: RunState,
    definitions: RunDefinitions,
    spec: ChildSpec,
    model: Model,
    policy: Policy,
    tools: Sequence[ToolRef],
    agents_room: int | None,
) -> AgentNode:
    """The child's node, as :func:`~.spawn.build_child` makes it under its parent, with the
    lease as its budget and no parent here."""
    agent = state.tree.by_name[spec.agent]
    now = trio.current_time()
    left = spec.deadline - time.time()
    state.deadline = now + left if spec.deadline < math.inf else math.inf
    tree_wide = tree_wide_limits(definitions.limits, definitions.root.limits)
    own = agent.limits or Limits()
    chain = [Slots(tree_wide.max_concurrency or 16)]
    if own.max_concurrency is not None:
        chain.insert(0, Slots(own.max_concurrency))
    own_deadline = now + own.timeout if own.timeout is not None else math.inf
    lease = spec.lease
    held: dict[str, Tool] = {}
    for ref in tools:
        t = ref if isinstance(ref, Tool) else (state.tree.by_name[ref[0]].tools or ())[ref[1]]
        held[t.name] = t
    node = AgentNode(
        agent=agent,
        path=spec.path,
        depth=spec.depth,
        model=model_for(agent, model, state, spec.model),
        limits=spec.limits,
        policy=policy,
        tools=held,
        ledger=Ledger(
            int(lease.tokens) if lease.tokens < math.inf else None,
            lease.cost_usd if lease.cost_usd < math.inf else None,
        ),
        limiters=Limiters(tuple(chain)),
        agent_quota=Quota(None if agents_room is None else agents_room + 1, used=1),
        deadline=min(state.deadline, own_deadline),
        own_deadline=own_deadline,
        context=state.context or agent.context or DEFAULT_CONTEXT,
        task=spec.task,
        runtime=make_runtime(spec.limits, state),
    )
    add_spawn_tool(node, state)
    node.append(Message.user(well_formed(spec.task)))
    return node
