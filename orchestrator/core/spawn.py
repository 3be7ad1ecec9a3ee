"""``spawn_subagent``: the tool, the checks that admit a child, and building a child's state.

A spawn is an ordinary tool call. Its handler hands the child to the run's runner through the
parent's side of it (:class:`.inprocess.SpawnSide`: :func:`plan_child` here admits it, the
runner runs it, :func:`build_child` makes its state when it runs in this process). The handler
runs inside the nursery of the parent's EXECUTE step, so the children a turn asks for run
concurrently, no child outlives its parent, and cancelling the parent cancels its subtree. A
child starts with a fresh transcript (its own instructions and the task) and a tool set the
model can only narrow: the child's definition fixes what it may do. Only the child's final answer comes back as the tool result; a child that
did not complete comes back as an ``is_error`` result with its status, the reason, and what it
had finished.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Literal, cast

import pydantic
import trio

from ..models.base import Model
from .agent import Agent, model_label
from .compaction import ContextPolicy
from .errors import ConfigurationError, ToolError
from .ledger import Ledger, text_units
from .limits import DEFAULT_LIMITS, Limits, Slots, tree_wide_limits
from .messages import (
    Message,
    TextBlock,
    ToolUseBlock,
    canonical_json,
    is_blank,
    text_of,
    well_formed,
)
from .policy import Policy
from .result import RunStatus
from .state import AgentNode, Limiters, Quota, RunState, make_runtime
from .tools import NotedResult, Tool, ToolContext

if TYPE_CHECKING:
    from .inprocess import SpawnSide

__all__ = [
    "add_spawn_tool",
    "build_child",
    "check_model_choice",
    "make_root",
    "model_for",
    "plan_child",
]

SPAWN_TOOL = "spawn_subagent"
DEFAULT_CONTEXT = ContextPolicy()
_SUMMARY_CHARS = 400


def _per_agent_limits(agent: Agent, inherited: Limits) -> Limits:
    return inherited if agent.limits is None else agent.limits.fill(inherited)


def make_root(run: RunState, agent: Agent, prompt: str, history: list[Message]) -> AgentNode:
    """The root's node: the run's budgets, the root's own limits as the first layer."""
    limits = _per_agent_limits(agent, run.run_limits.fill(DEFAULT_LIMITS))
    # one budget for the run; the root's own tree-wide values can only tighten it
    tree_wide = tree_wide_limits(run.run_limits, agent.limits)
    model = model_for(agent, None, run)
    ledger = Ledger(tree_wide.token_budget, tree_wide.cost_budget_usd)
    limiter = Slots(tree_wide.max_concurrency or 16)
    quota = Quota(tree_wide.max_agents)
    quota.try_take()
    run.deadline = trio.current_time() + (tree_wide.timeout or math.inf)
    policy = (agent.policy or Policy()).combine(run.run_policy)
    tools = {t.name: t for t in agent.tools or ()}
    node = AgentNode(
        agent=agent,
        path=agent.name,
        depth=0,
        model=model,
        limits=limits,
        policy=policy,
        tools=tools,
        ledger=ledger,
        limiters=Limiters((limiter,)),
        agent_quota=quota,
        deadline=run.deadline,
        own_deadline=math.inf,
        context=run.context or agent.context or DEFAULT_CONTEXT,
        task=prompt,
        runtime=make_runtime(limits, run),
    )
    add_spawn_tool(node, run)
    messages = list(history)
    if messages and messages[-1].role == "user":  # keep roles alternating
        last = messages.pop()
        messages.append(Message("user", (*last.content, TextBlock(prompt))))
    else:
        messages.append(Message.user(prompt))
    for m in messages:
        node.append(m)
    return node


class SpawnBook:
    """A parent's spawn calls numbered in call order, one turn at a time.

    Siblings of one turn start in whatever order the scheduler picks; numbering them from the
    transcript keeps paths deterministic (``lead/researcher#2`` is the second call for a
    researcher), and counting slots in call order decides which spawn ``max_children``
    refuses, whatever order they start in; the run's agent allowances (``max_agents``) are taken
    for a whole turn at once, in call order, for the same reason. A turn's calls are numbered
    when its first spawn starts, by their position in the reply: tool_use ids are not trusted to
    be unique (a script, or another provider, may use the same id again in a later turn).
    """

    __slots__ = (
        "declined",
        "granted",
        "leased",
        "ordinal",
        "per_agent",
        "slot",
        "started_in_turn",
        "turn",
        "warmup_turn",
        "warmups",
    )

    def __init__(self) -> None:
        self.turn: int | None = None
        """The turn whose calls ``ordinal`` and ``slot`` describe."""
        self.ordinal: dict[int, int] = {}
        """Call position in the turn's reply -> its number among spawns of that agent."""
        self.slot: dict[int, int] = {}
        """Call position in the turn's reply -> its position among the turn's valid spawns."""
        self.per_agent: dict[str, int] = {}
        self.started_in_turn: dict[int, int] = {}
        self.granted: set[int] = set()
        """Call positions of the turn holding one of the run's agents (``max_agents``)."""
        self.declined: set[tuple[int, int]] = set()
        """(turn, call position) of this step's calls the policy refused."""
        self.warmup_turn: int | None = None
        self.warmups: dict[tuple[str, frozenset[str], int], trio.Event] = {}
        """This turn's groups of siblings sharing a cached prefix -> when the leader's
        response started (see ``SpawnSide.join_warmup``)."""
        self.leased: dict[int, set[int]] = {}
        """Turn -> call positions whose children (run elsewhere) took a budget lease: the room
        left is shared among the turn's others."""

    def grant_agents(self, quota: Quota, free_slots: int) -> None:
        """Take the run's agent allowances (``max_agents``) for this turn's spawns at once, in
        call order, so which calls a full run refuses does not depend on the order in which
        trio starts them. Only calls within ``max_children`` and not declined get one."""
        for position, slot in self.slot.items():  # in call order
            if (self.turn, position) in self.declined:
                continue
            if slot < free_slots and quota.try_take():
                self.granted.add(position)

    def decline(self, parent: AgentNode, turn: int, position: int) -> None:
        """The policy refused the call at ``position`` of ``turn``: its allowance, if it took
        one, goes back at once (siblings' subtrees may need it); its number and slot stay."""
        self.declined.add((turn, position))
        if turn == self.turn and position in self.granted:
            self.granted.discard(position)
            parent.agent_quota.give_back(1)

    def end_step(self, parent: AgentNode) -> None:
        """The parent's EXECUTE step ended: give back what its calls took and did not use
        (one cut off before its child started)."""
        self.declined.clear()
        if self.granted:
            parent.agent_quota.give_back(len(self.granted))
            self.granted.clear()

    def number_turn(
        self, turn: int, messages: list[Message], valid: Callable[[ToolUseBlock], bool]
    ) -> bool:
        """Number the valid spawn calls of ``turn``'s reply (the last message), once.

        Called when the turn's first spawn starts: a turn in which none starts (all refused or
        declined) takes no numbers. The first time, the spawns already in the transcript (a
        history the run continues) are counted first, so new children do not take their
        numbers. A call refused before starting (unknown agent, tools outside its set) takes no
        number and no slot.
        """
        if turn == self.turn:
            return False
        if self.turn is None:
            for message in messages[:-1]:
                if message.role == "assistant":
                    self._number(message, valid)
        self.turn = turn
        self.ordinal, self.slot = self._number(messages[-1], valid)
        return True

    def _number(
        self, message: Message, valid: Callable[[ToolUseBlock], bool]
    ) -> tuple[dict[int, int], dict[int, int]]:
        ordinal: dict[int, int] = {}
        slot: dict[int, int] = {}
        for index, call in enumerate(message.tool_uses):
            if call.name != SPAWN_TOOL or not valid(call):
                continue
            name = str(call.input.get("agent"))
            self.per_agent[name] = ordinal[index] = self.per_agent.get(name, 0) + 1
            slot[index] = len(slot)
        return ordinal, slot


def _allowed_tools(run: RunState, parent: AgentNode, agent: Agent) -> dict[str, Tool]:
    """What a child may use: its own list, or its parent's tools (never the spawn tool).

    A fresh dict each time: the child adds its own spawn tool to it.
    """
    if agent.tools is None:
        return {n: t for n, t in parent.tools.items() if n != SPAWN_TOOL}
    if agent.name in run.agent_tools:  # its own and its toolsets' (see core/toolset.py)
        return dict(run.agent_tools[agent.name])
    return {t.name: t for t in agent.tools if t.name != SPAWN_TOOL}


def _starts(run: RunState, parent: AgentNode, call: ToolUseBlock) -> bool:
    """Whether a spawn call passes the checks made before a child starts: the spawn tool's own
    argument validation (the one its handler gets, so an extra key or a wrong type is refused
    here too), a task that is not blank, and the tools it may give. A call the policy refuses
    is not foreseen here: in a turn where another spawn starts, it still takes its number and
    its slot."""
    spawn_tool = parent.tools.get(SPAWN_TOOL)
    if spawn_tool is None or not isinstance(call.input, Mapping):
        return False
    try:
        arguments = spawn_tool.validate(call.input)
    except pydantic.ValidationError:
        return False
    if is_blank(arguments["task"]):
        return False
    agent = run.tree.by_name[arguments["agent"]]
    choice = arguments.get("model")
    if choice is not None and choice not in [model_label(m) for m in agent.models]:
        return False
    share = arguments.get("budget_tokens")
    if share is not None and not 1 <= share <= parent.ledger.room()[0]:
        return False
    requested = arguments["tools"]
    if requested is None:
        return True
    return set(requested) <= set(_allowed_tools(run, parent, agent))


_NO_LIMITS = Limits()


def plan_child(
    run: RunState,
    parent: AgentNode,
    agent: Agent,
    task: str,
    tool_names: list[str] | None,
    key: tuple[int, int],
) -> tuple[str, dict[str, Tool], Limits]:
    """The checks a spawn call passes before its child starts (a blank task, tools outside
    the child's set, ``max_children``, ``max_agents``), raising ToolError for a refused one;
    then the child's path, the names of the tools it holds and its limits. ``key`` is the
    spawn call's (parent's turn, position in that turn's reply)."""
    if is_blank(task):  # the Messages API refuses a blank first message with a fatal 400
        raise ToolError(
            f"the task for {agent.name!r} is empty: a subagent sees nothing but its task, "
            "so put everything it needs in `task`"
        )
    base = _allowed_tools(run, parent, agent)
    if tool_names is not None:
        wanted = set(tool_names)
        outside = sorted(wanted - set(base))
        if outside:
            raise ToolError(
                f"cannot give {agent.name!r} tools {outside}: it may only use "
                f"{sorted(base) or '(no tools)'}; ask for a subset of those or omit 'tools'"
            )
        base = {n: t for n, t in base.items() if n in wanted}
    book = parent.spawns
    assert book is not None  # every node holding the spawn tool has one
    turn, position = key
    max_children = parent.limits.max_children or 0
    if book.number_turn(turn, parent.messages, partial(_starts, run, parent)):
        book.grant_agents(parent.agent_quota, max_children - len(parent.children))
    started_earlier = len(parent.children) - book.started_in_turn.get(turn, 0)
    slot = started_earlier + book.slot.get(position, position)
    if slot >= max_children:
        raise ToolError(
            f"{parent.agent.name!r} may start at most {max_children} subagents (max_children) "
            "and has used them all; finish the task with what you have"
        )
    if position not in book.granted:
        raise ToolError(
            "the run reached max_agents; no more subagents can start. Finish with what you have"
        )
    index = book.ordinal.get(position, book.per_agent.get(agent.name, 0) + 1)
    path = f"{parent.path}/{agent.name}#{index}"
    return path, base, _per_agent_limits(agent, parent.limits)


def build_child(
    run: RunState,
    parent: AgentNode,
    agent_name: str,
    path: str,
    task: str,
    tool_names: tuple[str, ...],
    key: tuple[int, int],
    admitted: tuple[dict[str, Tool], Limits] | None = None,
    model: str | None = None,
    budget_tokens: int | None = None,
) -> AgentNode:
    """The node of a child :func:`plan_child` admitted, under ``parent``: its sub-budget,
    slots and agent quota chained to the parent's (where its definition sets its own), its
    deadline, its tools, its transcript (the task), counted among the parent's children.
    ``admitted``: the tools and limits :func:`plan_child` found for it (else found again);
    ``model``: the model the spawn call picked from the agent's menu; ``budget_tokens``: the
    sub-budget it gave the child."""
    agent = run.tree.by_name[agent_name]
    if admitted is not None:  # what plan_child found for this very child
        tools, limits = admitted
    else:
        allowed = _allowed_tools(run, parent, agent)
        tools = {n: allowed[n] for n in tool_names}
        limits = _per_agent_limits(agent, parent.limits)
    own = agent.limits or _NO_LIMITS
    quota = (  # a subtree's own max_agents counts the child itself
        parent.agent_quota
        if own.max_agents is None
        else Quota(own.max_agents, parent.agent_quota, used=1)
    )
    ledger = parent.ledger
    if own.token_budget is not None or own.cost_budget_usd is not None:
        ledger = Ledger(own.token_budget, own.cost_budget_usd, parent.ledger)
    if budget_tokens is not None:  # the spawn call's own share, within what the agent may use
        ledger = Ledger(budget_tokens, None, ledger)
    limiters = parent.limiters
    if own.max_concurrency is not None:
        limiters = Limiters((Slots(own.max_concurrency), *parent.limiters.chain))
    own_deadline = trio.current_time() + own.timeout if own.timeout is not None else math.inf
    child = AgentNode(
        agent=agent,
        path=path,
        depth=parent.depth + 1,
        model=model_for(agent, parent.model, run, model),
        limits=limits,
        policy=parent.policy if agent.policy is None else agent.policy.combine(parent.policy),
        tools=tools if admitted is None else dict(tools),  # the child adds its spawn tool
        ledger=ledger,
        limiters=limiters,
        agent_quota=quota,
        deadline=min(parent.deadline, own_deadline),
        own_deadline=own_deadline,
        context=run.context or agent.context or DEFAULT_CONTEXT,
        task=task,
        runtime=parent.runtime if limits is parent.limits else make_runtime(limits, run),
        parent=parent,
    )
    add_spawn_tool(child, run)
    child.append(Message.user(well_formed(task)))  # the HTTP body cannot take a lone surrogate
    child.spawn_index = key[1]
    parent.children.append((key, child))
    book = parent.spawns
    assert book is not None
    turn, position = key
    book.granted.discard(position)  # used (until here, the step's end would give it back)
    book.started_in_turn[turn] = book.started_in_turn.get(turn, 0) + 1
    return child


def check_budget_tokens(parent: AgentNode, budget_tokens: int | None) -> None:
    """Raise ToolError for a spawn call's ``budget_tokens`` below 1 or above what is left."""
    if budget_tokens is None:
        return
    left = parent.ledger.room()[0]
    if budget_tokens < 1 or budget_tokens > left:
        shown = "no token budget" if left == math.inf else f"{int(left):,} tokens left"
        raise ToolError(
            f"budget_tokens={budget_tokens:,} cannot be given: it must be at least 1 and at "
            f"most what is left ({shown}); ask for less or omit budget_tokens"
        )


def budgets_set(run: RunState) -> bool:
    """Whether a token or cost budget was set explicitly: on the run (or the CLI) or on a
    definition (the default token budget alone is not)."""
    layers = [run.run_limits, *(a.limits for a in run.tree.by_name.values())]
    return any(
        lim is not None and (lim.token_budget is not None or lim.cost_budget_usd is not None)
        for lim in layers
    )


def budget_note(parent: AgentNode) -> str:
    """What is left for ``parent`` to spend (the lesser of the run's remainder and its own
    sub-budget), as its model reads it after a spawn: ``[budget left: 812,400 tokens, $3.12]``."""
    tokens, cost = parent.ledger.room()
    parts = []
    if tokens < math.inf:
        parts.append(f"{int(tokens):,} tokens")
    if cost < math.inf:
        parts.append(f"${cost:,.2f}")
    return f"[budget left: {', '.join(parts) or 'unlimited'}]"


def check_model_choice(agent: Agent, choice: str | None) -> None:
    """Raise ToolError for a spawn call's ``model`` that is not on ``agent``'s menu."""
    if choice is None:
        return
    labels = [model_label(m) for m in agent.models]
    if choice not in labels:
        offer = f"its menu is {', '.join(labels)}" if labels else "it has no menu of models"
        raise ToolError(
            f"{agent.name!r} cannot run on {choice!r}: {offer}; pick one of those or omit 'model'"
        )


def model_for(
    agent: Agent, inherited: Model | None, run: RunState, choice: str | None = None
) -> Model:
    """The model ``agent`` runs on: ``choice`` from its menu (checked by
    :func:`check_model_choice`), else its own (its menu's first), else ``inherited`` (its
    parent's), else the run's default."""
    if choice is not None:
        check_model_choice(agent, choice)
        return run.menus[agent.name][[model_label(m) for m in agent.models].index(choice)]
    if agent.model is not None:
        return run.models[agent.name]
    if inherited is not None:
        return inherited
    if run.default_model is not None:
        return run.default_model
    raise ConfigurationError(
        f"no model for agent {agent.name!r}: set Agent(model=...) or pass run(..., model=...)"
    )


def add_spawn_tool(node: AgentNode, run: RunState) -> None:
    """Give ``node`` the spawn tool (and a book of its spawns) if it has subagents and room
    below it in ``max_depth``."""
    subagents = run.tree.subagents_of(node.agent)
    if subagents and node.depth < (node.limits.max_depth or 0):
        node.tools[SPAWN_TOOL] = build_spawn_tool(subagents)
        node.spawns = SpawnBook()


def build_spawn_tool(subagents: tuple[Agent, ...]) -> Tool:
    """The ``spawn_subagent`` tool for an agent with these subagents.

    Built once per set of names and descriptions and shared by every run (building the schema
    is slow): the tool is stateless, since the run, the parent and the definitions come from
    the call's context. The cache holds only that text, never the definitions: an application
    building a tree per request (tools closing over a session, a user's key) keeps nothing of it.
    """
    names = tuple(a.name for a in subagents)
    listing = "\n".join(
        f"- {a.name}: {a.description or a.instructions[:200]}"
        + ("" if a.output_spec is None else f" Returns {a.output_spec.describe()}.")
        + (_menu_line(a) if a.models else "")
        for a in subagents
    )
    menu: list[str] = []  # the union of the menus, in the order first listed
    for a in subagents:
        menu.extend(label for label in map(model_label, a.models) if label not in menu)
    return _spawn_tool_for(names, listing, tuple(menu))


def _menu_line(agent: Agent) -> str:
    labels = [model_label(m) for m in agent.models]
    return f" Models: {', '.join(labels)} (default {labels[0]})."


@functools.lru_cache(maxsize=256)
def _spawn_tool_for(names: tuple[str, ...], listing: str, menu: tuple[str, ...] = ()) -> Tool:
    async def spawn(
        ctx: ToolContext,
        agent: str,
        task: str,
        tools: list[str] | None,
        model: str | None,
        budget_tokens: int | None,
    ) -> NotedResult:
        side = cast("SpawnSide | None", ctx._parent)
        if side is None:
            raise ToolError("spawn_subagent can only be called by the runtime, inside a run")
        # planned and run here, not in a helper: the child's loop runs under this frame
        spec = side.plan(agent, task, tools, model, budget_tokens)
        outcome = None
        try:
            outcome = await side.runner.run(spec, side)
        finally:
            side.roll_up(spec, outcome)
        # what is left, in a block of its own after the answer: only where a budget was set,
        # and never in the prompt or the tools (the cached prefix stays byte-stable)
        notes = (budget_note(side.node),) if budgets_set(side.state) else ()
        if outcome.status is RunStatus.COMPLETED:
            return NotedResult(outcome.output, notes)
        return NotedResult(
            f"subagent {outcome.path} ended with status {outcome.status.value}: "
            f"{outcome.error}. {outcome.summary}",
            notes,
            is_error=True,
        )

    # the model property only when some subagent has a menu: a tree without menus (or under
    # --override-model) sees the same tool as before
    if menu:

        async def spawn_subagent(
            ctx: ToolContext,
            agent: str,
            task: str,
            tools: list[str] | None = None,
            model: str | None = None,
            budget_tokens: int | None = None,
        ) -> NotedResult:
            return await spawn(ctx, agent, task, tools, model, budget_tokens)

        spawn_subagent.__annotations__ = {
            "ctx": ToolContext,
            "agent": Literal[names],
            "task": str,
            "tools": list[str] | None,
            "model": Literal[menu] | None,
            "budget_tokens": int | None,
            "return": str,
        }
    else:

        async def spawn_subagent(  # type: ignore[misc]  # the same tool without `model`
            ctx: ToolContext,
            agent: str,
            task: str,
            tools: list[str] | None = None,
            budget_tokens: int | None = None,
        ) -> NotedResult:
            return await spawn(ctx, agent, task, tools, None, budget_tokens)

        spawn_subagent.__annotations__ = {
            "ctx": ToolContext,
            "agent": Literal[names],
            "task": str,
            "tools": list[str] | None,
            "budget_tokens": int | None,
            "return": str,
        }
    description = (
        "Start a subagent on a task and get back its final answer. It begins with a fresh "
        "transcript: put everything it needs in `task`. Several calls in one turn run in "
        "parallel. `tools` may narrow the subagent's tools to a subset."
        + (" `model` picks the subagent's model from its menu." if menu else "")
        + " `budget_tokens` caps what the subagent may spend, within what is left."
        + f"\nAvailable subagents:\n{listing}"
    )
    doc = {
        "agent": "which subagent to start",
        "task": "the complete task, self-contained",
        "tools": "optional subset of the subagent's tools",
        "budget_tokens": "optional token budget for the subagent (at most what is left)",
    }
    if menu:
        doc["model"] = "optional model for the subagent, from its menu (default: its first)"
    t = Tool(
        spawn_subagent,
        name=SPAWN_TOOL,
        description=description,
        _allow_reserved=True,
        _runtime_tool=True,
    )
    props = t.input_schema["properties"]
    for prop, text in doc.items():
        props[prop]["description"] = text
    # always an enum (pydantic writes a one-name Literal as "const"), so models see the choices
    props["agent"].pop("const", None)
    props["agent"]["enum"] = list(names)
    props["agent"]["type"] = "string"
    props["budget_tokens"] = {
        "type": "integer",
        "minimum": 1,
        "description": doc["budget_tokens"],
    }
    if menu:  # a plain enum too (null is accepted, but the model is shown only the choices)
        props["model"] = {"type": "string", "enum": list(menu), "description": doc["model"]}
    # its size in the prompt, as the model sees it now (the schema was edited after Tool())
    t.spec_chars = (
        len(t.name) + text_units(description) + text_units(canonical_json(t.input_schema))
    )
    return t


def summarize(node: AgentNode) -> str:
    """What a child finished before it stopped, in a few lines for its parent."""
    tool_calls = sum(len(m.tool_uses) for m in node.messages if m.role == "assistant")
    texts = [text_of(m.content) for m in node.messages[1:] if m.role == "assistant"]
    last = next((t for t in reversed(texts) if t.strip()), "")
    parts = [f"It took {node.turns} turns and made {tool_calls} tool calls."]
    if last:
        snippet = last.strip().replace("\n", " ")
        if len(snippet) > _SUMMARY_CHARS:
            snippet = snippet[:_SUMMARY_CHARS] + "..."
        parts.append(f"Its last words: {snippet}")
    return " ".join(parts)
