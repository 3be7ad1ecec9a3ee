"""``orchestrator run --dry-run``: what a tree's limits allow at worst, without calling a model."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, TypeAlias

from ..core.agent import SPAWN_TOOL, Agent, AgentTree
from ..core.errors import ConfigurationError
from ..core.generate import context_window
from ..core.limits import DEFAULT_LIMITS, Limits, tree_wide_limits
from ..core.loop import MAX_OUTPUT_CAP
from ..core.messages import Usage
from ..core.policy import Policy
from ..core.spawn import DEFAULT_CONTEXT
from ..models.base import Model, resolve_model

__all__ = ["output_types", "who_holds_what", "worst_case"]

_State: TypeAlias = tuple[Agent, Model, Limits, int]
_PRICING_PROBE = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
"""The usage models of a menu are compared on (prices per million tokens)."""


def output_types(root: Agent) -> dict[str, dict[str, Any]]:
    """What each agent of the tree answers with, by name: ``type`` (``str`` for text), its
    ``fields`` (none for text, or for a type that is not an object), the ``mode`` it is asked
    in (``text``, ``tool`` or ``native``) and the names of the ``validators`` that check it."""
    out: dict[str, dict[str, Any]] = {}
    for name, agent in AgentTree(root).by_name.items():
        spec = agent.output_spec
        validators = [
            getattr(fn, "__qualname__", None) or repr(fn) for fn in agent.output_validators
        ]
        if spec is None:
            out[name] = {"type": "str", "fields": [], "mode": "text"}
        else:
            fields = [] if spec.wrapped else list(spec.fields)
            out[name] = {"type": spec.name, "fields": fields, "mode": spec.mode}
        out[name]["validators"] = validators
    return out


def who_holds_what(
    tree: AgentTree, opened: Mapping[str, Mapping[str, Any]], flags: Mapping[str, str]
) -> dict[str, str]:
    """Each agent's tools and the decision its policy (and the root's) gives each, and who
    holds each toolset (MCP server): ``tools of NAME`` and ``mcp server NAME`` entries.

    ``opened`` holds the tools of each agent listing toolsets (their servers listed); an agent
    with ``tools=None`` holds what its parents hold (over every parent it can run under), the
    spawn tool aside. ``flags`` names the ``--mcp`` value that gave each server (by name)."""
    tools: dict[str, dict[str, None]] = {name: {} for name in tree.by_name}
    servers: dict[str, dict[str, str]] = {}  # server -> agent -> how it holds it
    pending: list[tuple[Agent, tuple[str, ...], str | None, tuple[str, ...]]] = [
        (tree.root, (), None, ())
    ]
    seen: set[tuple[str, tuple[str, ...], str | None]] = set()
    while pending:  # (agent, tools it inherits, from whom, servers among them): finitely many
        agent, inherited, owner, held = pending.pop()
        if (agent.name, inherited, owner) in seen:
            continue
        seen.add((agent.name, inherited, owner))
        if agent.tools is None:
            names = list(inherited)
            for server in held:
                how = agent.name if owner is None else f"{agent.name} (inherits {owner}'s tools)"
                servers.setdefault(server, {}).setdefault(agent.name, how)
        else:
            own = opened.get(agent.name)
            names = list(own) if own is not None else [t.name for t in agent.tools]
            owner, held = agent.name, tuple(ts.toolset_name for ts in agent.toolsets)
            for server in held:
                servers.setdefault(server, {}).setdefault(agent.name, agent.name)
        subagents = tree.subagents_of(agent)
        passed_on = tuple(n for n in names if n != SPAWN_TOOL)
        tools[agent.name].update(dict.fromkeys([*names, *([SPAWN_TOOL] if subagents else [])]))
        pending.extend((child, passed_on, owner, held) for child in subagents)
    report: dict[str, str] = {}
    root_policy = tree.root.policy or Policy()
    for name, held_tools in tools.items():
        own_policy = tree.by_name[name].policy
        policy = root_policy if own_policy is None else own_policy.combine(root_policy)
        listed = [f"{t} ({policy.decide(t).value})" for t in held_tools]
        report[f"tools of {name}"] = ", ".join(listed) or "none"
    for server in sorted(servers):
        given = f"from --mcp {flags[server]}" if server in flags else "in the tree's file"
        report[f"mcp server {server}"] = f"{given}; held by {', '.join(servers[server].values())}"
    return report


def worst_case(
    root: Agent, run_limits: Limits | None = None, *, default_model: str | None = None
) -> dict[str, Any]:
    """Validate the tree and bound its agents, model calls and output tokens from its limits.

    Per turn an agent makes at most: the call itself, a retry at twice the output cap when a
    tool call was cut by ``max_tokens``, and, when it can compact, a compaction before the turn
    and a compaction and a repeated call after the provider refused the input as too long.
    The output tokens are also priced, each agent's on its model (for a menu, its costliest:
    a parent may pick any). Agents are counted down the tree, each filling its ``max_children`` slots with its costliest
    subagent while depth allows; with ``max_agents`` binding, the bound is the root and
    ``max_agents - 1`` agents each as costly as the costliest one the tree can start.
    """
    tree = AgentTree(root, run_limits=run_limits)
    models = tree.models()  # the checks a real run makes before its first call
    for name, menu in tree.menus(models).items():  # a parent may pick any: the costliest
        models[name] = max(menu, key=lambda m: m.cost(_PRICING_PROBE))
    default = resolve_model(default_model) if default_model is not None else None
    root_model = models[root.name] if root.model is not None else default
    if root_model is None:
        raise ConfigurationError(
            f"no model for agent {root.name!r}: set Agent(model=...) or pass --model"
        )
    run_layer = (run_limits or Limits()).fill(DEFAULT_LIMITS)
    tree_wide = tree_wide_limits(run_limits, root.limits)  # the same budgets a run would have
    max_agents = tree_wide.max_agents or 1

    def own_cost(agent: Agent, limits: Limits, model: Model) -> tuple[int, int, float]:
        cap = agent.max_output_tokens
        retry_cap = max(cap, min(2 * cap, MAX_OUTPUT_CAP))
        compacts = (agent.context or DEFAULT_CONTEXT).compaction_threshold(
            context_window(model)
        ) is not None
        turns = limits.max_turns or 1
        tokens = turns * (cap + retry_cap + (3 * cap if compacts else 0))
        return (
            turns * (2 + (3 if compacts else 0)),
            tokens,
            model.cost(Usage(output_tokens=tokens)),
        )

    # A state is an agent as some parent would start it: its model, its filled limits, depth.
    def state(agent: Agent, inherited: Limits, model: Model, depth: int) -> _State:
        return agent, model, (agent.limits or Limits()).fill(inherited), depth

    def children(s: _State) -> list[_State]:
        agent, model, limits, depth = s
        if depth >= (limits.max_depth or 0):
            return []
        subs = tree.subagents_of(agent)
        return [state(sub, limits, models.get(sub.name, model), depth + 1) for sub in subs]

    def slots(s: _State) -> int:
        return min(s[2].max_children or 0, max_agents) if children(s) else 0

    @functools.cache
    def unbounded(s: _State) -> tuple[int, int, int, float]:
        """Agents, calls, output tokens and their cost of the subtree if max_agents did not
        cap it: every slot filled with the costliest subagent, by each measure on its own."""
        calls, tokens, usd = own_cost(s[0], s[2], s[1])
        n = slots(s)
        if not n:
            return 1, calls, tokens, usd
        below = [unbounded(child) for child in children(s)]
        return (
            1 + n * max(b[0] for b in below),
            calls + n * max(b[1] for b in below),
            tokens + n * max(b[2] for b in below),
            usd + n * max(b[3] for b in below),
        )

    root_state = state(root, run_layer, root_model, 0)
    seen = {root_state}
    pending = [root_state]
    costliest_calls = costliest_tokens = 0  # of any agent but the root
    costliest_usd = 0.0
    while pending:
        current = pending.pop()
        for child in children(current) if slots(current) else []:
            if child not in seen:
                seen.add(child)
                pending.append(child)
                child_calls, child_tokens, child_usd = own_cost(child[0], child[2], child[1])
                costliest_calls = max(costliest_calls, child_calls)
                costliest_tokens = max(costliest_tokens, child_tokens)
                costliest_usd = max(costliest_usd, child_usd)
    # two bounds, each valid, the tighter taken: no cap, or the root and max_agents - 1
    # agents each as costly as the costliest one
    tree_agents, tree_calls, tree_tokens, tree_usd = unbounded(root_state)
    agents = min(max_agents, tree_agents)
    root_calls, root_tokens, root_usd = own_cost(root, root_state[2], root_model)
    calls = min(tree_calls, root_calls + (agents - 1) * costliest_calls)
    output_tokens = min(tree_tokens, root_tokens + (agents - 1) * costliest_tokens)
    return {
        "tree": "valid",
        "agents_defined": len(tree.by_name),
        "worst_case_agents": agents,
        "worst_case_model_calls": calls,
        "worst_case_output_tokens": output_tokens,
        # the output tokens priced on each agent's model (a menu's costliest); input is unknown
        "worst_case_output_cost_usd": round(
            min(tree_usd, root_usd + (agents - 1) * costliest_usd), 6
        ),
        "token_budget": tree_wide.token_budget,
        "timeout_s": tree_wide.timeout,
    }
