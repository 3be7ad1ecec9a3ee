"""Policy rules must name tools: a rule that could never apply is a ConfigurationError.

An exact rule names one tool, so a typo (``"delete-all"`` for the tool ``delete_all``) would
leave the real tool allowed (a pattern, ``"delete*"``, may match none). Every rule of every policy (the run's, an agent's, an ancestor's)
is checked when the tree is built, before any model call: an agent's policy may name a tool
that the agent or any agent it can run holds (its policy is combined into theirs), the run's
policy any tool of the tree; ``spawn_subagent`` is a tool of every agent with subagents.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio
from support.cli import Cli

from orchestrator import Agent, ConfigurationError, Policy, RunStatus, run, tool
from orchestrator.models import FunctionModel, ScriptedModel, text, tool_call
from orchestrator.toolsets.notes import notes_tools


def recorded_model(steps: list[Any]) -> tuple[FunctionModel, list[Any]]:
    requests: list[Any] = []

    def answer(request: Any) -> Any:
        requests.append(request)
        turn = request.turn_index()
        return steps[turn] if turn < len(steps) else text("done")

    return FunctionModel(answer), requests


def make_delete_all() -> tuple[Any, list[str]]:
    ran: list[str] = []

    @tool
    async def delete_all() -> str:
        """Delete everything."""
        ran.append("delete_all")
        return "deleted everything"

    return delete_all, ran


@tool
async def search(query: str) -> str:
    """Search.

    Args:
        query: what to look for
    """
    return f"results for {query}"


def refused(agent: Agent, *, policy: Policy | None = None) -> str:
    with pytest.raises(ConfigurationError) as caught:
        trio.run(lambda: run(agent, "Go.", policy=policy))
    return str(caught.value)


def test_a_run_policy_rule_naming_no_tool_is_refused_before_any_call_with_the_closest_name() -> (
    None
):
    delete_all, ran = make_delete_all()
    model, requests = recorded_model([tool_call("delete_all", {})])
    agent = Agent("root", "Tidy up.", tools=[delete_all], model=model)
    message = refused(agent, policy=Policy({"delete-all": "deny"}))
    assert "'delete-all'" in message and "did you mean 'delete_all'?" in message
    assert "run's policy" in message
    assert requests == [] and ran == []


@pytest.mark.parametrize(
    ("rule", "hint"),
    [
        ("delete-all", "did you mean 'delete_all'?"),
        ("DeleteAll", "did you mean 'delete_all'?"),
        ("delete_al", "did you mean 'delete_all'?"),
        ("format_disk", "check its spelling"),
        ("spawn_subagent", "only an agent with subagents holds it"),
    ],
)
def test_an_agents_rule_naming_no_tool_it_can_hold_is_refused_with_a_hint(
    rule: str, hint: str
) -> None:
    delete_all, ran = make_delete_all()
    model, requests = recorded_model([tool_call("delete_all", {})])
    agent = Agent("root", "Tidy up.", tools=[delete_all, search], model=model,
                  policy=Policy({"search": "allow", rule: "deny"}))  # fmt: skip
    message = refused(agent)
    assert f"the policy of agent 'root' has a rule for {rule!r}" in message
    assert hint in message and "delete_all, search" in message
    assert requests == [] and ran == []


def test_a_pattern_rule_applies_to_every_tool_it_matches_and_may_match_none() -> None:
    delete_all, ran = make_delete_all()
    model = ScriptedModel(
        [[tool_call("delete_all", {}), tool_call("search", {"query": "q"})], text("done")]
    )
    agent = Agent("root", "Tidy up.", tools=[delete_all, search], model=model,
                  policy=Policy({"delete*": "deny", "format_*": "deny"}))  # fmt: skip
    result = trio.run(lambda: run(agent, "Go."))
    denied, found = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert denied.is_error and "denied by policy" in denied.content and ran == []
    assert found.content == "results for q"


def test_a_rule_on_an_ancestor_for_a_tool_only_a_subagent_holds_applies_to_the_subagent() -> None:
    delete_all, ran = make_delete_all()
    worker = Agent("worker", "Work.", description="works", tools=[delete_all, search],
                   model=ScriptedModel([tool_call("delete_all", {}), text("could not")]))  # fmt: skip
    lead = Agent(
        "lead",
        "Delegate.",
        tools=[],
        subagents=[worker],
        policy=Policy({"delete_all": "deny"}),
        model=ScriptedModel(
            [tool_call("spawn_subagent", {"agent": "worker", "task": "clean"}), text("done")]
        ),
    )
    result = trio.run(lambda: run(lead, "Go."))
    assert result.status is RunStatus.COMPLETED
    (child,) = result.children
    denied = [b for m in child.messages for b in m.content if b.type == "tool_result"]
    assert denied[0].is_error and "denied by policy" in denied[0].content
    assert ran == []


def test_a_run_policy_may_name_a_tool_any_agent_of_the_tree_holds() -> None:
    delete_all, ran = make_delete_all()
    worker = Agent("worker", "Work.", description="works", tools=[delete_all],
                   model=ScriptedModel([tool_call("delete_all", {}), text("could not")]))  # fmt: skip
    lead = Agent("lead", "Delegate.", tools=[search], subagents=[worker],
                 model=ScriptedModel([tool_call("spawn_subagent", {"agent": "worker", "task": "x"}),
                                      text("done")]))  # fmt: skip
    policy = Policy({"delete_all": "deny", "search": "allow", "spawn_subagent": "allow"})
    result = trio.run(lambda: run(lead, "Go.", policy=policy))
    assert result.status is RunStatus.COMPLETED and ran == []
    message = refused(lead, policy=Policy({"delete all": "deny"}))
    assert (
        "did you mean 'delete_all'?" in message and "delete_all, search, spawn_subagent" in message
    )


def test_a_subagent_may_name_only_the_tools_it_or_its_own_subagents_can_hold() -> None:
    delete_all, _ = make_delete_all()
    model = ScriptedModel([text("done")])
    # its own list holds search only: a rule for the lead's delete_all could never apply to it
    narrow = Agent("worker", "Work.", description="works", tools=[search],
                   policy=Policy({"delete_all": "deny"}))  # fmt: skip
    lead = Agent("lead", "Delegate.", tools=[delete_all], subagents=[narrow], model=model)
    message = refused(lead)
    assert "the policy of agent 'worker' has a rule for 'delete_all'" in message
    assert "(tools: search)" in message
    # without a list of its own it has the lead's tools: the same rule is one it can apply
    inherits = narrow.replace(tools=None)
    lead = lead.replace(subagents=[inherits])
    assert trio.run(lambda: run(lead, "Go.")).status is RunStatus.COMPLETED


def test_spawn_subagent_is_a_tool_of_every_agent_with_subagents_recursive_ones_included() -> None:
    model = ScriptedModel([text("done")])
    # an agent that lists itself: the check ends, and its spawn rule names a tool it holds
    recursive = Agent("planner", "Plan.", tools=[search], subagents=["planner"], model=model,
                      policy=Policy({"spawn_subagent": "confirm", "search": "deny"}))  # fmt: skip
    assert trio.run(lambda: run(recursive, "Go.")).status is RunStatus.COMPLETED
    leaf = Agent("leaf", "Answer.", tools=[search], model=model,
                 policy=Policy({"spawn_subagent": "deny"}))  # fmt: skip
    assert "only an agent with subagents holds it" in refused(leaf)


def test_rules_for_a_toolsets_tools_are_checked_by_their_names(tmp_path: Path) -> None:
    tools = notes_tools(tmp_path / "notes.db")
    model = ScriptedModel([text("done")])
    agent = Agent("root", "Take notes.", tools=tools, model=model,
                  policy=Policy({"write_note": "confirm", "read_note": "allow"}))  # fmt: skip
    assert trio.run(lambda: run(agent, "Go.")).status is RunStatus.COMPLETED
    typo = agent.replace(policy=Policy({"write_notes": "deny"}))
    assert "did you mean 'write_note'?" in refused(typo)


def test_a_policy_keyed_by_a_tool_object_instead_of_its_name_is_refused() -> None:
    delete_all, _ = make_delete_all()
    with pytest.raises(ConfigurationError, match="use its name, 'delete_all'"):
        Policy({delete_all: "deny"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="keyed by tool name"):
        Policy({3: "deny"})  # type: ignore[dict-item]


def test_the_command_line_refuses_a_rule_naming_no_tool_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "agents.py").write_text(
        "from orchestrator import Agent, Policy, tool\n"
        "from orchestrator.models import ScriptedModel, text\n"
        "@tool\n"
        "def delete_all() -> str:\n"
        "    '''Delete everything.'''\n"
        "    return 'deleted'\n"
        "agent = Agent('root', 'Tidy.', tools=[delete_all], model=ScriptedModel([text('ok')]),\n"
        "              policy=Policy({'delete-all': 'deny'}))\n"
    )

    def environ() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_"))}

    # the command in this process (support.cli): its exit code and its streams are the point
    proc = Cli(monkeypatch, tmp_path, environ)("run", "agents.py", "Go.")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "did you mean 'delete_all'?" in proc.stderr and proc.stdout == ""
