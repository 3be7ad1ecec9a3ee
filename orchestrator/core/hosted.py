"""Hosted tools: tools the provider runs, not this process (web search and web fetch).

:class:`WebSearch` and :class:`WebFetch` go into an agent's ``tools`` like any tool. They are
:class:`~orchestrator.core.tools.Tool` objects with a name (``web_search``, ``web_fetch``), so
a policy gates them and ``spawn_subagent`` narrows them by that name; but the model never asks
this process to run them: the provider runs them inside its answer, which keeps their calls and
results as ``server_tool_use`` and ``*_tool_result`` blocks. A model declares which hosted tools
it can offer in ``supports_hosted_tools`` (the Anthropic adapter: both); a run refuses, before it
starts, an agent holding one its model cannot run (:func:`check_hosted_tools`), and a policy
that would have to ``confirm`` one (the provider runs it without asking).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..models.base import HostedToolSpec, ToolSpec
from .errors import ConfigurationError, ToolError
from .messages import Usage
from .policy import Decision, Policy
from .tools import Tool

if TYPE_CHECKING:
    from ..models.base import Model
    from .agent import AgentTree

__all__ = [
    "HostedTool",
    "WebFetch",
    "WebSearch",
    "check_hosted_tools",
    "hosted_names",
    "most_hosted_uses",
]

_SPEC_UNITS: Final = 1_400
"""What a hosted tool adds to the prompt, in quarter tokens (``text_units``): the provider puts
its own description in (a few hundred tokens); an input estimate errs high."""


def _positive(owner: str, name: str, value: object, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def _domains(owner: str, name: str, value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{owner}: {name} must be a list of domains, got {value!r}")
    out = tuple(value)
    bad = [d for d in out if not isinstance(d, str) or not d.strip() or " " in d]
    if bad or not out:
        raise ConfigurationError(
            f"{owner}: {name} must be a non-empty list of domains (like 'docs.python.org'), "
            f"got {value!r}"
        )
    return out


class HostedTool(Tool):
    """A tool the provider runs (see the module docstring). Build :class:`WebSearch` or
    :class:`WebFetch`; ``settings`` are what the provider is sent besides the tool's type."""

    __slots__ = ("settings",)
    settings: Mapping[str, Any]

    def __init__(self, name: str, description: str, settings: Mapping[str, Any]) -> None:
        def runs_at_the_provider() -> str:
            raise ToolError(f"{name} runs at the model's provider, not as a local tool call")

        runs_at_the_provider.__doc__ = description
        super().__init__(runs_at_the_provider, name=name, description=description)
        self.settings = {k: v for k, v in settings.items() if v is not None}
        self._spec = HostedToolSpec(name, description, {}, dict(self.settings))
        self.spec_chars = _SPEC_UNITS

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, HostedTool)
            and self.settings == other.settings
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.name))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Built again where it lands (a runner in another process) from its settings."""
        return _rebuild, (type(self), dict(self.settings))


def _rebuild(cls: type[HostedTool], settings: dict[str, Any]) -> HostedTool:
    return cls(**settings)


class WebSearch(HostedTool):
    """Web search, run by the provider (the Messages API's ``web_search`` server tool).

    Args:
        max_uses: searches allowed per model call (the cost budget reserves this many).
        allowed_domains: only results from these domains (not with ``blocked_domains``).
        blocked_domains: never results from these domains.
    """

    __slots__ = ()

    def __init__(
        self,
        max_uses: int = 5,
        allowed_domains: Sequence[str] | None = None,
        blocked_domains: Sequence[str] | None = None,
    ) -> None:
        settings = _settings("WebSearch", max_uses, allowed_domains, blocked_domains)
        super().__init__(
            "web_search",
            "Search the web; the provider runs the search and cites results.",
            settings,
        )


class WebFetch(HostedTool):
    """Web fetch, run by the provider (the Messages API's ``web_fetch`` server tool): the
    model reads a page or PDF at a URL it got from the user, a search or an earlier fetch.

    Args:
        max_uses: fetches allowed per model call.
        allowed_domains: only URLs of these domains (not with ``blocked_domains``).
        blocked_domains: never URLs of these domains.
        max_content_tokens: about how many tokens of a page's text go into the context.
    """

    __slots__ = ()

    def __init__(
        self,
        max_uses: int = 5,
        allowed_domains: Sequence[str] | None = None,
        blocked_domains: Sequence[str] | None = None,
        max_content_tokens: int | None = None,
    ) -> None:
        settings = _settings("WebFetch", max_uses, allowed_domains, blocked_domains)
        settings["max_content_tokens"] = _positive(
            "WebFetch", "max_content_tokens", max_content_tokens, optional=True
        )
        super().__init__(
            "web_fetch", "Fetch a web page or PDF; the provider reads it for the model.", settings
        )


def _settings(owner: str, max_uses: object, allowed: object, blocked: object) -> dict[str, Any]:
    allowed_domains = _domains(owner, "allowed_domains", allowed)
    blocked_domains = _domains(owner, "blocked_domains", blocked)
    if allowed_domains is not None and blocked_domains is not None:
        raise ConfigurationError(
            f"{owner}: give allowed_domains or blocked_domains, not both (the provider refuses both)"
        )
    return {
        "max_uses": _positive(owner, "max_uses", max_uses),
        "allowed_domains": list(allowed_domains) if allowed_domains else None,
        "blocked_domains": list(blocked_domains) if blocked_domains else None,
    }


def hosted_names(tools: Iterable[Tool]) -> tuple[str, ...]:
    """The names of the hosted tools among ``tools``, in order."""
    return tuple(t.name for t in tools if isinstance(t, HostedTool))


def most_hosted_uses(specs: Iterable[ToolSpec]) -> Usage | None:
    """The most hosted tool uses one model call offering ``specs`` may bill (each hosted tool's
    ``max_uses``: the provider stops there), as the usage counts the price table prices;
    ``None`` when it offers no hosted tool. The cost budget reserves this before the call."""
    searches = fetches = 0
    for spec in specs:
        if type(spec) is HostedToolSpec:
            uses = spec.settings.get("max_uses")
            uses = uses if isinstance(uses, int) and uses > 0 else 0
            if spec.name == "web_search":
                searches += uses
            elif spec.name == "web_fetch":
                fetches += uses
    if not searches and not fetches:
        return None
    return Usage(web_search_requests=searches, web_fetch_requests=fetches)


def check_hosted_tools(
    tree: AgentTree,
    models: Mapping[str, Model],
    default: Model | None,
    menus: Mapping[str, tuple[Model, ...]] | None = None,
    run_policy: Policy | None = None,
) -> None:
    """Refuse, before the run starts, an agent holding a hosted tool (its own, or inherited
    with ``tools=None``) that its model (each of its menu's) does not list in
    ``supports_hosted_tools``, and a policy (the agent's, an ancestor's or the run's) that would
    ``confirm`` one: the provider runs it without asking."""
    pending: list[tuple[Any, Model | None, tuple[str, ...], tuple[Policy, ...]]] = [
        (tree.root, default, (), ())
    ]
    seen: set[tuple[str, int, tuple[str, ...], tuple[int, ...]]] = set()
    while pending:
        agent, inherited, inherited_names, policies = pending.pop()
        model = models.get(agent.name, inherited)
        names = inherited_names if agent.tools is None else hosted_names(agent.tools)
        if agent.policy is not None and not any(p is agent.policy for p in policies):
            # once per path: a recursive agent meets its own policy again, and the states
            # (so the walk) must stay finite
            policies = (*policies, agent.policy)
        key = (agent.name, id(model), names, tuple(id(p) for p in policies))
        if key in seen:
            continue
        seen.add(key)
        for name in names:
            for m in (menus or {}).get(agent.name, (model,)):
                if m is not None and name not in getattr(m, "supports_hosted_tools", ()):
                    if getattr(m, "provider", "") == "offline":  # said in the terms of the fix
                        raise ConfigurationError(
                            f"agent {agent.name!r} holds the hosted tool {name!r}, which the "
                            "offline model cannot run: this tree needs a model that can search "
                            "the web (e.g. set ANTHROPIC_API_KEY for Claude)"
                        )
                    raise ConfigurationError(
                        f"agent {agent.name!r} holds the hosted tool {name!r}, but its model "
                        f"{m.name!r} ({type(m).__name__}) cannot run it (a hosted tool runs at "
                        "the provider); use a model that can, such as an anthropic: model"
                    )
            for policy in (*policies, *((run_policy,) if run_policy is not None else ())):
                if policy.decide(name) is Decision.CONFIRM:
                    raise ConfigurationError(
                        f"a policy of agent {agent.name!r} asks to confirm {name!r}, a hosted "
                        "tool the provider runs without asking; allow or deny it instead"
                    )
        pending.extend((child, model, names, policies) for child in tree.subagents_of(agent))
