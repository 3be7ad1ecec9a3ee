"""``orchestrator run --dry-run``: what a tree's limits allow at worst, without calling a model."""

from __future__ import annotations

from typing import Any

from .agent import Agent, AgentTree
from .errors import ConfigurationError
from .limits import DEFAULT_LIMITS, Limits, tree_wide_limits
from .loop import MAX_OUTPUT_CAP, context_window
from .models import resolve_model
from .models.base import Model
from .spawn import DEFAULT_CONTEXT

__all__ = ["worst_case"]


def worst_case(
    root: Agent, run_limits: Limits | None = None, *, default_model: str | None = None
) -> dict[str, Any]:
    """Validate the tree and bound its agents, model calls and output tokens from its limits.

    Per turn an agent makes at most: the call itself, a retry at twice the output cap when a
    tool call was cut by ``max_tokens``, and, when it can compact, a compaction before the turn
    and a compaction and a repeated call after the provider refused the input as too long.
    Agents are counted down the tree, each spawning ``max_children`` of its costliest subagent
    while depth allows, until ``max_agents`` is reached.
    """
    tree = AgentTree(root, run_limits=run_limits)
    models = tree.models()  # the checks a real run makes before its first call
    default = resolve_model(default_model) if default_model is not None else None
    root_model = models[root.name] if root.model is not None else default
    if root_model is None:
        raise ConfigurationError(
            f"no model for agent {root.name!r}: set Agent(model=...) or pass --model"
        )
    run_layer = (run_limits or Limits()).fill(DEFAULT_LIMITS)
    tree_wide = tree_wide_limits(run_limits, root.limits)  # the same budgets a run would have
    max_agents = tree_wide.max_agents or 1

    def own_cost(agent: Agent, limits: Limits, model: Model) -> tuple[int, int]:
        cap = agent.max_output_tokens
        retry_cap = max(cap, min(2 * cap, MAX_OUTPUT_CAP))
        compacts = (agent.context or DEFAULT_CONTEXT).compaction_threshold(
            context_window(model)
        ) is not None
        turns = limits.max_turns or 1
        return (
            turns * (2 + (3 if compacts else 0)),
            turns * (cap + retry_cap + (3 * cap if compacts else 0)),
        )

    def subtree_calls(agent: Agent, inherited: Limits, model: Model, depth: int) -> int:
        limits = (agent.limits or Limits()).fill(inherited)
        calls = own_cost(agent, limits, model)[0]
        children = child_slots(agent, limits, depth)
        if children:
            calls += children * max(
                subtree_calls(sub, limits, models.get(sub.name, model), depth + 1)
                for sub in tree.subagents_of(agent)
            )
        return calls

    def child_slots(agent: Agent, limits: Limits, depth: int) -> int:
        if depth >= (limits.max_depth or 0) or not tree.subagents_of(agent):
            return 0
        return min(limits.max_children or 0, max_agents)

    agents = calls = output_tokens = 0

    def visit(agent: Agent, inherited: Limits, model: Model, depth: int) -> None:
        nonlocal agents, calls, output_tokens
        if agents >= max_agents:
            return
        limits = (agent.limits or Limits()).fill(inherited)
        agents += 1
        own_calls, own_tokens = own_cost(agent, limits, model)
        calls += own_calls
        output_tokens += own_tokens
        children = child_slots(agent, limits, depth)
        if children:
            costliest = max(
                tree.subagents_of(agent),
                key=lambda sub: subtree_calls(sub, limits, models.get(sub.name, model), depth + 1),
            )
            for _ in range(children):
                visit(costliest, limits, models.get(costliest.name, model), depth + 1)

    visit(root, run_layer, root_model, 0)
    return {
        "tree": "valid",
        "agents_defined": len(tree.by_name),
        "worst_case_agents": agents,
        "worst_case_model_calls": calls,
        "worst_case_output_tokens": output_tokens,
        "token_budget": tree_wide.token_budget,
        "timeout_s": tree_wide.timeout,
    }
