"""Trees the Jaeger tests run through the CLI (``orchestrator run jaeger_trees.py:NAME``), with
FunctionModels, so no key and no network but Jaeger's.

- ``team``: ``lead`` spawns a ``researcher``, whose tool fails once and is retried (an
  ``orchestrator.retry`` event), and a ``checker``, whose model breaks (a failed agent);
- ``wide``: ``lead`` spawns ``$JAEGER_TREE_CHILDREN`` workers (default 1,000) in one turn, each
  given a task of ``$JAEGER_TREE_TASK_CHARS`` characters (default 100), which each answers at
  once; with content capture on, every worker's spans carry its task, so the batches of a wide
  run grow with it.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator import Agent, Limits, tool
from orchestrator.models import FunctionModel, response, text, tool_call

_failed_once: set[str] = set()


@tool(idempotent=True)
def look(topic: str) -> str:
    """Look a topic up (the first call per topic fails: its retry is an event on the span).

    Args:
        topic: What to look up.
    """
    if topic not in _failed_once:
        _failed_once.add(topic)
        raise ConnectionError("the source did not answer")
    return f"notes on {topic}"


def _turn(request: Any) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def _team(request: Any) -> Any:
    name, turn = request.agent.name, _turn(request)
    if name == "lead":
        if turn == 0:
            return response(
                tool_call("spawn_subagent", {"agent": "researcher", "task": "Find sources."}),
                tool_call("spawn_subagent", {"agent": "checker", "task": "Check them."}),
            )
        return text("The sources are found; the check failed.")
    if name == "researcher":
        if turn == 0:
            return tool_call("look", {"topic": "jaeger"})
        return text("One source: notes on jaeger.")
    raise RuntimeError("the checker's model broke")


_TEAM_MODEL = FunctionModel(_team, name="team-fn")
RESEARCHER = Agent(
    "researcher", "You find sources.", description="finds sources", tools=[look], model=_TEAM_MODEL
)
CHECKER = Agent("checker", "You check sources.", description="checks sources", model=_TEAM_MODEL)
team = Agent("lead", "You lead a small team.", subagents=[RESEARCHER, CHECKER], model=_TEAM_MODEL)


def _children() -> int:
    return int(os.environ.get("JAEGER_TREE_CHILDREN", "1000"))


def _wide(request: Any) -> Any:
    if request.agent.depth > 0:
        return text(f"done: {request.agent.path}")
    if _turn(request) > 0:
        return text("Every part is done.")
    filler = "x" * int(os.environ.get("JAEGER_TREE_TASK_CHARS", "100"))
    return response(
        *(
            tool_call("spawn_subagent", {"agent": "worker", "task": f"Part {i}: {filler}"})
            for i in range(_children())
        )
    )


_WIDE_MODEL = FunctionModel(_wide, name="wide-fn")
WORKER = Agent("worker", "You do one part.", description="does one part", model=_WIDE_MODEL)
wide = Agent(
    "lead",
    "You split the work.",
    subagents=[WORKER],
    model=_WIDE_MODEL,
    limits=Limits(
        max_children=_children(),
        max_agents=_children() + 1,
        max_concurrency=_children() + 1,
        max_turns=3,
        token_budget=10**12,  # big tasks: billed tokens are not the point here
    ),
)
