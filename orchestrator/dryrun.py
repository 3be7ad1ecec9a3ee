"""``orchestrator run --dry-run``: what a tree's limits allow at worst, without calling a model."""

from __future__ import annotations

from typing import Any

from .agent import Agent, AgentTree
from .errors import ConfigurationError
from .limits import DEFAULT_LIMITS, Limits, tree_wide_limits
from .models import resolve_model

__all__ = ["worst_case"]


def worst_case(
    root: Agent, run_limits: Limits | None = None, *, default_model: str | None = None
) -> dict[str, Any]:
    """Validate the tree and bound its agents, model calls and tokens from its limits.

    Each agent may take ``max_turns`` turns, and a turn may make two model calls (a tool call cut
    by ``max_tokens`` is retried once). Agents are counted down the tree, each spawning up to
    ``max_children`` children while depth allows, capped by ``max_agents``.
    """
    tree = AgentTree(root, run_limits=run_limits)
    tree.models()  # the checks a real run makes before its first call
    if root.model is None and default_model is None:
        raise ConfigurationError(
            f"no model for agent {root.name!r}: set Agent(model=...) or pass --model"
        )
    if default_model is not None:
        resolve_model(default_model)
    run_layer = (run_limits or Limits()).fill(DEFAULT_LIMITS)
    tree_wide = tree_wide_limits(run_limits, root.limits)  # the same budgets a run would have
    max_agents = tree_wide.max_agents or 1
    calls = 0
    agents = 0
    output_tokens = 0

    def visit(agent: Agent, inherited: Limits, depth: int) -> None:
        nonlocal calls, agents, output_tokens
        if agents >= max_agents:
            return
        limits = (agent.limits or Limits()).fill(inherited)
        agents += 1
        turns = limits.max_turns or 1
        calls += 2 * turns
        output_tokens += 2 * turns * agent.max_output_tokens
        if depth < (limits.max_depth or 0):
            subs = tree.subagents_of(agent)
            for i in range(min(limits.max_children or 0, max_agents) if subs else 0):
                visit(subs[i % len(subs)], limits, depth + 1)

    visit(root, run_layer, 0)
    return {
        "tree": "valid",
        "agents_defined": len(tree.by_name),
        "worst_case_agents": agents,
        "worst_case_model_calls": calls,
        "worst_case_output_tokens": output_tokens,
        "token_budget": tree_wide.token_budget,
        "timeout_s": tree_wide.timeout,
    }
