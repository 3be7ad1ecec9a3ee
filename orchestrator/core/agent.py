"""Agent definitions, and the tree they form once subagent names are resolved.

An :class:`Agent` is an immutable definition: one definition can run many times at once, each
run holding its own state. Subagents may be given as objects or by name (an agent's own name
included, for recursion bounded by ``max_depth``); :class:`AgentTree` resolves and checks every
name before the first model call, so a typo fails fast instead of deep inside a run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypedDict, Unpack, overload

from typing_extensions import TypeVar

from ..models.base import Model, resolve_model
from .compaction import ContextPolicy
from .errors import ConfigurationError
from .limits import Limits, tree_wide_limits
from .output import FINAL_RESULT, OutputMode, OutputSpec, OutputValidator, output_spec
from .policy import Policy, is_pattern
from .tools import Tool, tool
from .toolset import Toolset

__all__ = ["Agent", "AgentTree", "OutputT", "model_label"]

OutputT = TypeVar("OutputT", default=Any)
"""What an agent answers with: ``str`` unless it was given an ``output_type``."""

SPAWN_TOOL = "spawn_subagent"
"""The tool an agent with subagents holds (built by the spawn module; named here for the
policy check, which must know every tool an agent can hold)."""


class AgentChanges(TypedDict, total=False):
    """The fields :meth:`Agent.replace` may change (each as ``Agent(...)`` takes it)."""

    name: str
    instructions: str
    description: str
    model: Model | str | None
    models: Sequence[Model | str]
    tools: Iterable[Tool | Toolset | Callable[..., Any]] | None
    subagents: Sequence[Agent | str]
    limits: Limits | None
    policy: Policy | None
    max_output_tokens: int
    context: ContextPolicy | None
    output_type: Any
    output_mode: OutputMode
    output_validators: Sequence[OutputValidator]


_AGENT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # fullmatch ("$" allows "x\n")


class Agent(Generic[OutputT]):
    """An agent definition: instructions, model, tools, subagents, limits, policy, output.

    ``tools=None`` means "the parent's tools" for a subagent (and no tools for a root);
    an explicit list means exactly those tools. The list may hold toolsets (an
    :class:`~orchestrator.mcp.MCPServer`): their tools are known once the run opens them, and
    come after the agent's own tools (:attr:`toolsets`). ``model`` is a :class:`Model` or a
    string such as ``"anthropic:claude-sonnet-5-5"`` or ``"offline"``; without one, the agent
    uses its parent's model, then the run's default. ``models=(...)`` instead (not both) is a
    menu: a parent's ``spawn_subagent`` may pick one of them for each child it starts (the
    first by default).

    ``output_type`` makes the agent answer with a value of that type instead of text (a
    pydantic model, a dataclass, a TypedDict, or any type pydantic validates): ``Agent`` is
    generic in it, so ``run(agent, ...)`` gives a ``RunResult`` whose ``output`` has that type.
    ``output_mode="tool"`` (the default) asks for it through a ``final_result`` tool;
    ``"native"`` through the provider's structured output. ``output_validators`` check the
    value further (``fn(ctx, value) -> value``; raise :class:`~orchestrator.OutputRejected` to
    ask the model again); on a text agent they check its final text. See docs/typed.md.
    """

    __slots__ = (
        "context",
        "description",
        "instructions",
        "limits",
        "max_output_tokens",
        "model",
        "models",
        "name",
        "output_mode",
        "output_spec",
        "output_type",
        "output_validators",
        "policy",
        "subagents",
        "tools",
        "toolsets",
    )

    name: str
    instructions: str
    description: str
    model: Model | str | None
    """The model it runs on; for an agent given a menu (``models``), the menu's first."""
    models: tuple[Model | str, ...]
    """The menu a parent's ``spawn_subagent`` picks this agent's model from (empty: none)."""
    tools: tuple[Tool, ...] | None
    toolsets: tuple[Toolset, ...]
    """Toolsets of the ``tools`` list (their tools are the run's to open), in list order."""
    subagents: tuple[Agent | str, ...]
    limits: Limits | None
    policy: Policy | None
    max_output_tokens: int
    context: ContextPolicy | None
    output_type: Any
    """The answer's type (``str``: text)."""
    output_mode: OutputMode
    output_validators: tuple[OutputValidator, ...]
    output_spec: OutputSpec | None
    """The output type compiled (its schema and checks); ``None`` for a text agent."""

    @overload
    def __init__(
        self: Agent[str],
        name: str,
        instructions: str,
        *,
        description: str = "",
        model: Model | str | None = None,
        models: Sequence[Model | str] = (),
        tools: Iterable[Tool | Toolset | Callable[..., Any]] | None = None,
        subagents: Sequence[Agent | str] = (),
        limits: Limits | None = None,
        policy: Policy | None = None,
        max_output_tokens: int = 4096,
        context: ContextPolicy | None = None,
        output_type: type[str] = str,
        output_mode: OutputMode = "tool",
        output_validators: Sequence[OutputValidator] = (),
    ) -> None: ...

    @overload
    def __init__(
        self: Agent[OutputT],
        name: str,
        instructions: str,
        *,
        description: str = "",
        model: Model | str | None = None,
        models: Sequence[Model | str] = (),
        tools: Iterable[Tool | Toolset | Callable[..., Any]] | None = None,
        subagents: Sequence[Agent | str] = (),
        limits: Limits | None = None,
        policy: Policy | None = None,
        max_output_tokens: int = 4096,
        context: ContextPolicy | None = None,
        output_type: type[OutputT],
        output_mode: OutputMode = "tool",
        output_validators: Sequence[OutputValidator] = (),
    ) -> None: ...

    @overload
    def __init__(
        self: Agent[Any],
        name: str,
        instructions: str,
        *,
        description: str = "",
        model: Model | str | None = None,
        models: Sequence[Model | str] = (),
        tools: Iterable[Tool | Toolset | Callable[..., Any]] | None = None,
        subagents: Sequence[Agent | str] = (),
        limits: Limits | None = None,
        policy: Policy | None = None,
        max_output_tokens: int = 4096,
        context: ContextPolicy | None = None,
        output_type: Any,
        output_mode: OutputMode = "tool",
        output_validators: Sequence[OutputValidator] = (),
    ) -> None: ...

    def __init__(  # noqa: C901 - one check per argument, each with its own message
        self,
        name: str,
        instructions: str,
        *,
        description: str = "",
        model: Model | str | None = None,
        models: Sequence[Model | str] = (),
        tools: Iterable[Tool | Toolset | Callable[..., Any]] | None = None,
        subagents: Sequence[Agent | str] = (),
        limits: Limits | None = None,
        policy: Policy | None = None,
        max_output_tokens: int = 4096,
        context: ContextPolicy | None = None,
        output_type: Any = str,
        output_mode: OutputMode = "tool",
        output_validators: Sequence[OutputValidator] = (),
    ) -> None:
        if not isinstance(name, str) or not _AGENT_NAME.fullmatch(name):
            raise ConfigurationError(
                f"agent name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
            )
        if not isinstance(instructions, str):
            raise ConfigurationError(f"agent {name!r}: instructions must be a string")
        if limits is not None and not isinstance(limits, Limits):
            raise ConfigurationError(f"agent {name!r}: limits must be a Limits, got {limits!r}")
        if policy is not None and not isinstance(policy, Policy):
            raise ConfigurationError(f"agent {name!r}: policy must be a Policy, got {policy!r}")
        if (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise ConfigurationError(f"agent {name!r}: max_output_tokens must be a positive int")
        menu = _menu(name, model, models)
        if menu:
            model = menu[0]
        description = description or ""  # None: no description
        if not isinstance(description, str):
            raise ConfigurationError(f"agent {name!r}: description must be a string")
        # one tool or one name where a list belongs would be iterated (a name letter by letter)
        if tools is not None and (isinstance(tools, str | Tool | Toolset) or callable(tools)):
            raise ConfigurationError(f"agent {name!r}: tools must be a list, got {tools!r}")
        if isinstance(subagents, str | Agent):
            raise ConfigurationError(f"agent {name!r}: subagents must be a list, got {subagents!r}")
        built: tuple[Tool, ...] | None = None
        toolsets: tuple[Toolset, ...] = ()
        if tools is not None:
            listed = tuple(tools)
            toolsets = tuple(t for t in listed if isinstance(t, Toolset))
            built = tuple(
                t if isinstance(t, Tool) else tool(t) for t in listed if not isinstance(t, Toolset)
            )
            seen: set[str] = set()
            for t in built:
                if t.name == FINAL_RESULT and output_type is not str:
                    raise ConfigurationError(
                        f"agent {name!r} has a tool named {FINAL_RESULT!r}, the name its typed "
                        "answer is given with; rename the tool"
                    )
                if t.name in seen:
                    raise ConfigurationError(f"agent {name!r} has two tools named {t.name!r}")
                seen.add(t.name)
        subs = tuple(subagents)
        for s in subs:
            if not isinstance(s, Agent | str):
                raise ConfigurationError(
                    f"agent {name!r}: subagents must be Agents or agent names, got {s!r}"
                )
        sub_names = [s if isinstance(s, str) else s.name for s in subs]
        dupes = sorted({n for n in sub_names if sub_names.count(n) > 1})
        if dupes:
            raise ConfigurationError(f"agent {name!r} lists subagent {dupes[0]!r} twice")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "instructions", instructions)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "models", menu)
        object.__setattr__(self, "tools", built)
        object.__setattr__(self, "toolsets", toolsets)
        object.__setattr__(self, "subagents", subs)
        object.__setattr__(self, "limits", limits)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "max_output_tokens", max_output_tokens)
        if context is not None and not isinstance(context, ContextPolicy):
            raise ConfigurationError(f"agent {name!r}: context must be a ContextPolicy")
        object.__setattr__(self, "context", context)
        if isinstance(output_validators, str) or callable(output_validators):
            raise ConfigurationError(f"agent {name!r}: output_validators must be a list")
        validators = tuple(output_validators)
        object.__setattr__(self, "output_type", output_type)
        object.__setattr__(self, "output_mode", output_mode)
        object.__setattr__(self, "output_validators", validators)
        object.__setattr__(
            self, "output_spec", output_spec(name, output_type, output_mode, validators)
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Agent is immutable; build a new one (tried to set {name!r})")

    def __copy__(self) -> Agent[OutputT]:
        return self  # immutable: a copy would be the same definition

    def __deepcopy__(self, memo: dict[int, Any]) -> Agent[OutputT]:
        return self

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"

    def replace(self, **changes: Unpack[AgentChanges]) -> Agent:
        """A copy with some fields changed (``Agent`` itself is immutable)."""
        unknown = sorted(set(changes) - set(AgentChanges.__annotations__))
        if unknown:
            raise ConfigurationError(
                f"Agent.replace: no field(s) {unknown}; an agent has "
                f"{', '.join(AgentChanges.__annotations__)}"
            )
        fields: dict[str, Any] = {
            "description": self.description,
            "model": None if self.models else self.model,
            "models": self.models,
            "tools": None if self.tools is None else (*self.tools, *self.toolsets),
            "subagents": self.subagents,
            "limits": self.limits,
            "policy": self.policy,
            "max_output_tokens": self.max_output_tokens,
            "context": self.context,
            "output_type": self.output_type,
            "output_mode": self.output_mode,
            "output_validators": self.output_validators,
        }
        if changes.get("model") is not None and "models" not in changes:
            fields["models"] = ()  # a model given replaces the menu
        if changes.get("models") and "model" not in changes:
            fields["model"] = None  # and a menu given, the model
        fields.update(changes)
        name = fields.pop("name", self.name)
        instructions = fields.pop("instructions", self.instructions)
        return Agent(name, instructions, **fields)

    def map_tree(self, fn: Callable[[Agent], Agent]) -> Agent:
        """This tree with ``fn`` applied to every agent defined in it (names kept as names)."""
        memo: dict[int, Agent] = {}

        def visit(agent: Agent) -> Agent:
            if id(agent) not in memo:
                memo[id(agent)] = agent  # cycles through objects are impossible; guard anyway
                subs = tuple(s if isinstance(s, str) else visit(s) for s in agent.subagents)
                memo[id(agent)] = fn(agent.replace(subagents=subs))
            return memo[id(agent)]

        return visit(self)


class AgentTree:
    """A root agent with every subagent name resolved to a definition.

    Names are unique per tree: two different definitions with one name are an error, because
    spawn requests, trace spans and result paths all identify agents by name. Every policy rule
    must name a tool its policy can apply to (see :meth:`_check_policies`).
    """

    def __init__(
        self, root: Agent, *, run_limits: Limits | None = None, run_policy: Policy | None = None
    ) -> None:
        if not isinstance(root, Agent):
            raise ConfigurationError(f"expected an Agent, got {type(root).__name__}")
        self.root = root
        self.by_name: dict[str, Agent] = {}
        pending = [root]
        while pending:
            agent = pending.pop()
            known = self.by_name.get(agent.name)
            if known is agent:
                continue
            if known is not None:
                raise ConfigurationError(
                    f"two different agents are named {agent.name!r}; names must be unique in a tree"
                )
            self.by_name[agent.name] = agent
            pending.extend(s for s in agent.subagents if isinstance(s, Agent))
        self._subagents: dict[str, tuple[Agent, ...]] = {}
        for agent in self.by_name.values():
            resolved = []
            for s in agent.subagents:
                if isinstance(s, str):
                    if s not in self.by_name:
                        raise ConfigurationError(
                            f"agent {agent.name!r} lists subagent {s!r}, which is not defined in "
                            f"the tree (known agents: {', '.join(sorted(self.by_name))})"
                        )
                    resolved.append(self.by_name[s])
                else:
                    resolved.append(s)
            self._subagents[agent.name] = tuple(resolved)
        views: dict[int, Toolset] = {}
        for agent in self.by_name.values():
            for ts in agent.toolsets:
                views.setdefault(id(ts), ts)
        self.toolsets: tuple[Toolset, ...] = tuple(views.values())
        """Every toolset an agent of the tree lists (opened by the run when it starts)."""
        self._run_policy = run_policy
        self._check_limits(run_limits)
        if not self.toolsets:  # else once the run has opened them and their tools have names
            self._check_policies(run_policy)

    def subagents_of(self, agent: Agent) -> tuple[Agent, ...]:
        """The resolved subagents of ``agent``."""
        return self._subagents[agent.name]

    def models(self) -> dict[str, Model]:
        """The model of every agent that names one, resolved (a bad model string fails here);
        for an agent with a menu, the menu's first."""
        return {
            a.name: resolve_model(a.model) for a in self.by_name.values() if a.model is not None
        }

    def menus(self, models: Mapping[str, Model] | None = None) -> dict[str, tuple[Model, ...]]:
        """The menu of every agent that has one, resolved (its first entry taken from
        ``models``, :meth:`models`' answer, so both name one object)."""
        out: dict[str, tuple[Model, ...]] = {}
        for a in self.by_name.values():
            if a.models:
                first = (models or {}).get(a.name) or resolve_model(a.models[0])
                out[a.name] = (first, *(resolve_model(m) for m in a.models[1:]))
        return out

    def _check_limits(self, run_limits: Limits | None) -> None:
        """Refuse an agent whose one call could never fit its budget: the run's, or the
        smallest own ``token_budget`` of the agent and any agent it can run under."""
        budget = tree_wide_limits(run_limits, self.root.limits).token_budget
        pending: list[tuple[Agent, int | None]] = [(self.root, budget)]
        seen: set[tuple[str, int | None]] = set()
        while pending:  # a recursive tree ends: a budget only shrinks along a path
            agent, cap = pending.pop()
            own = agent.limits.token_budget if agent.limits else None
            if own is not None:
                cap = own if cap is None else min(cap, own)
            if (agent.name, cap) in seen:
                continue
            seen.add((agent.name, cap))
            # a call reserves its input estimate (at least the instructions, /4, plus one) and
            # its output cap: the least the first call can hold
            least = agent.max_output_tokens + len(agent.instructions) // 4 + 1
            if cap is not None and least > cap:
                raise ConfigurationError(
                    f"agent {agent.name!r}: max_output_tokens={agent.max_output_tokens} plus its "
                    f"input (at least {least - agent.max_output_tokens} tokens) exceed the token "
                    f"budget ({cap}) it runs under; no model call could ever fit"
                )
            pending.extend((child, cap) for child in self._subagents[agent.name])

    def check_policies(self, opened: Mapping[str, Mapping[str, Tool]]) -> None:
        """The policy check of a tree holding toolsets, once the run has opened them:
        ``opened`` holds the tools of each agent that lists toolsets."""
        self._check_policies(self._run_policy, opened)

    def _check_policies(
        self, run_policy: Policy | None, opened: Mapping[str, Mapping[str, Tool]] | None = None
    ) -> None:
        """Refuse a policy rule that names no tool it could ever apply to.

        An exact rule names one tool, so a typo (``"delete-all"`` for ``delete_all``) would
        leave the real tool allowed; a pattern (``"fs__*"``) may match none. An agent's
        policy applies to the agent and, combined into theirs, to every agent it can run
        under it: its rules must name a tool one of them can hold. The run's policy applies
        to the whole tree. ``spawn_subagent`` is a tool of every agent that has subagents.
        """
        held = self._tools_held(opened or {})
        for agent in self.by_name.values():
            if agent.policy is not None and agent.policy.rules:
                under = set().union(*(held[a] for a in self._reachable(agent.name)))
                _check_rules(
                    agent.policy,
                    under,
                    f"the policy of agent {agent.name!r}",
                    "it and its subagents",
                )
        if run_policy is not None and run_policy.rules:
            everywhere = set().union(*held.values())
            _check_rules(run_policy, everywhere, "the run's policy", "the tree's agents")

    def _tools_held(self, opened: Mapping[str, Mapping[str, Tool]]) -> dict[str, set[str]]:
        """The names of the tools each agent can hold, over every parent it can run under: its
        own list, or (``tools=None``) what its parent holds, the spawn tool aside; plus the
        spawn tool if it has subagents. (Spawns may only narrow these.)"""
        held: dict[str, set[str]] = {name: set() for name in self.by_name}
        pending: list[tuple[Agent, frozenset[str]]] = [(self.root, frozenset())]
        seen: set[tuple[str, frozenset[str]]] = set()
        while pending:  # states are (agent, what it inherits): finitely many, so it ends
            agent, inherited = pending.pop()
            if (agent.name, inherited) in seen:
                continue
            seen.add((agent.name, inherited))
            if agent.tools is None:
                names = set(inherited)
            elif agent.name in opened:  # its own tools and its toolsets'
                names = set(opened[agent.name])
            else:
                names = {t.name for t in agent.tools}
            children = self._subagents[agent.name]
            if children:
                names.add(SPAWN_TOOL)
            held[agent.name] |= names
            passed_on = frozenset(names - {SPAWN_TOOL})
            pending.extend((child, passed_on) for child in children)
        return held

    def _reachable(self, name: str) -> set[str]:
        """``name`` and every agent it can run, at any depth."""
        found = {name}
        pending = [name]
        while pending:
            for child in self._subagents[pending.pop()]:
                if child.name not in found:
                    found.add(child.name)
                    pending.append(child.name)
        return found


def model_label(spec: Model | str) -> str:
    """How a menu names a model to the parent's model: a string as written, a model object as
    ``provider:name``."""
    if isinstance(spec, str):
        return spec
    return f"{getattr(spec, 'provider', '?')}:{getattr(spec, 'name', '?')}"


def _menu(
    name: str, model: Model | str | None, models: Sequence[Model | str]
) -> tuple[Model | str, ...]:
    """``models`` checked: a list of models or model strings, no two named alike, not given
    with ``model``."""
    if isinstance(models, str) or not isinstance(models, Sequence):
        raise ConfigurationError(f"agent {name!r}: models must be a list, got {models!r}")
    menu = tuple(models)
    if not menu:
        return ()
    if model is not None:
        raise ConfigurationError(
            f"agent {name!r}: give model= or models= (a menu its parent picks from), not both"
        )
    labels: set[str] = set()
    for m in menu:
        if not isinstance(m, str) and not isinstance(m, Model):
            raise ConfigurationError(
                f"agent {name!r}: models must be Models or model strings, got {m!r}"
            )
        label = model_label(m)
        if label in labels:
            raise ConfigurationError(f"agent {name!r} lists model {label!r} twice in models")
        labels.add(label)
    return menu


def _check_rules(policy: Policy, tools: set[str], whose: str, holders: str) -> None:
    """Raise a ConfigurationError naming the first rule of ``policy`` that names none of
    ``tools``, with the closest tool name."""
    for rule in policy.rules:
        if rule in tools or is_pattern(rule):  # a pattern may match none (say, after only())
            continue
        if rule == SPAWN_TOOL:
            hint = "only an agent with subagents holds it"
        else:
            import difflib  # only for this error's hint

            close = difflib.get_close_matches(rule, sorted(tools), n=1, cutoff=0.6)
            if not close:  # "DeleteAll" for "delete_all": compare letters and digits only
                close = [t for t in sorted(tools) if _fold(t) == _fold(rule)][:1]
            hint = f"did you mean {close[0]!r}?" if close else "check its spelling"
        listed = sorted(tools)
        shown = ", ".join(listed[:20]) + (", ..." if len(listed) > 20 else "")
        raise ConfigurationError(
            f"{whose} has a rule for {rule!r}, but no tool of that name is held by {holders}, "
            f"so the rule would never apply; {hint} (tools: {shown or 'none'})"
        )


def _fold(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())
