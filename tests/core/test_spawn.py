"""spawn_subagent through the public API: the tool's schema, fresh child transcripts, tool
narrowing, refusals before a child starts, child answers and failures as tool results, subagents
by name and recursion, tree validation before any model call, concurrency of one turn's
children, deterministic paths and the RunResult tree.

Every model here is a FunctionModel that decides from the request (agent name, turn count), so
nothing depends on the order in which trio schedules concurrent children.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
import trio
from support.trees import (
    Script,
    assert_valid_transcript,
    nodes,
    result_for,
    spawn,
    tool_results,
)

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    Message,
    ModelError,
    RunResult,
    RunStatus,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    run,
    tool,
)
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call

# ---------------------------------------------------------------------------------------------
# helpers


@tool
async def search(query: str) -> str:
    """Search the corpus.

    Args:
        query: what to look for
    """
    return f"hits for {query}"


@tool
async def fetch(url: str) -> str:
    """Fetch a page.

    Args:
        url: the address
    """
    return f"page {url}"


@tool
async def calc(expr: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expr: the expression
    """
    return "42"


# ---------------------------------------------------------------------------------------------
# the spawn_subagent tool


async def test_spawn_tool_schema_lists_subagents_by_name_with_their_descriptions() -> None:
    script = Script({"lead": [text("no need")]})
    researcher = Agent("researcher", "Research.", description="finds sources on a topic")
    writer = Agent("writer", "Write.", description="turns notes into prose")
    lead = Agent("lead", "Lead.", subagents=[researcher, writer], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    specs = {t.name: t for t in script.first_request("lead").tools}
    assert "spawn_subagent" in specs
    spec = specs["spawn_subagent"]
    props = spec.input_schema["properties"]
    assert props["agent"]["enum"] == ["researcher", "writer"]
    assert props["task"]["type"] == "string"
    assert "tools" in props
    assert set(spec.input_schema["required"]) == {"agent", "task"}
    assert "researcher" in spec.description and "finds sources on a topic" in spec.description
    assert "writer" in spec.description and "turns notes into prose" in spec.description


async def test_agent_without_subagents_gets_no_spawn_tool() -> None:
    script = Script({"solo": [text("ok")]})
    solo = Agent("solo", "Alone.", tools=[search], model=script.model)

    await run(solo, "q")

    assert script.tool_names("solo") == {"search"}


async def test_child_starts_with_fresh_transcript_of_its_instructions_and_task_only() -> None:
    # the history already holds an assistant turn: decide from the tool results instead
    script = Script(
        {
            "lead": lambda req, turn: (
                text("done")
                if tool_results(list(req.messages))
                else spawn("researcher", "find the capital of France")
            )
        }
    )
    researcher = Agent("researcher", "You are a careful researcher.")
    lead = Agent("lead", "You lead.", subagents=[researcher], model=script.model)
    history = [Message.user("secret earlier question"), Message.assistant("secret earlier answer")]

    result = await run(lead, "the parent's prompt", message_history=history)

    assert result.status is RunStatus.COMPLETED
    first = script.first_request("lead/researcher#1")
    assert first.system == "You are a careful researcher."
    assert [(m.role, [b.type for b in m.content]) for m in first.messages] == [("user", ["text"])]
    assert first.messages[0].content[0].text == "find the capital of France"
    child = result.children[0]
    assert child.messages[0].content[0].text == "find the capital of France"
    everything = repr(child.messages) + repr([r.messages for r in script.requests if r.agent.depth])
    for leaked in ("secret earlier", "the parent's prompt", "You lead."):
        assert leaked not in everything


async def test_child_without_own_tool_list_gets_the_parents_tools_but_not_its_spawn_tool() -> None:
    script = Script({"lead": [spawn("researcher", "t")]})
    researcher = Agent("researcher", "R.")  # tools=None: the parent's
    lead = Agent("lead", "L.", tools=[search, fetch], subagents=[researcher], model=script.model)

    await run(lead, "q")

    assert script.tool_names("lead") == {"search", "fetch", "spawn_subagent"}
    assert script.tool_names("lead/researcher#1") == {"search", "fetch"}


async def test_child_with_own_tool_list_gets_exactly_those_tools() -> None:
    script = Script({"lead": [spawn("mathematician", "t")]})
    mathematician = Agent("mathematician", "M.", tools=[calc])
    lead = Agent("lead", "L.", tools=[search, fetch], subagents=[mathematician], model=script.model)

    await run(lead, "q")

    assert script.tool_names("lead/mathematician#1") == {"calc"}


async def test_child_with_empty_tool_list_gets_no_tools() -> None:
    script = Script({"lead": [spawn("thinker", "t")]})
    thinker = Agent("thinker", "T.", tools=[])
    lead = Agent("lead", "L.", tools=[search], subagents=[thinker], model=script.model)

    await run(lead, "q")

    assert script.tool_names("lead/thinker#1") == set()


async def test_requested_tool_subset_narrows_the_childs_tools() -> None:
    script = Script({"lead": [spawn("researcher", "t", tools=["search"])]})
    researcher = Agent("researcher", "R.")
    lead = Agent("lead", "L.", tools=[search, fetch], subagents=[researcher], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert script.tool_names("lead/researcher#1") == {"search"}


async def test_requested_subset_narrows_a_childs_own_tool_list() -> None:
    script = Script({"lead": [spawn("researcher", "t", tools=["fetch"])]})
    researcher = Agent("researcher", "R.", tools=[search, fetch, calc])
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    await run(lead, "q")

    assert script.tool_names("lead/researcher#1") == {"fetch"}


async def test_empty_requested_subset_leaves_the_child_without_tools() -> None:
    script = Script({"lead": [spawn("researcher", "t", tools=[])]})
    researcher = Agent("researcher", "R.")
    lead = Agent("lead", "L.", tools=[search], subagents=[researcher], model=script.model)

    await run(lead, "q")

    assert script.tool_names("lead/researcher#1") == set()


async def test_request_for_a_tool_outside_the_childs_set_is_refused_before_any_child_starts() -> (
    None
):
    script = Script({"lead": [spawn("mathematician", "t", tools=["calc", "search"], id="s1")]})
    mathematician = Agent("mathematician", "M.", tools=[calc])
    lead = Agent("lead", "L.", tools=[search], subagents=[mathematician], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    refused = result_for(result.messages, "s1")
    assert refused.is_error
    assert "search" in refused.content and "calc" in refused.content
    assert result.children == []
    assert script.calls("mathematician") == 0


async def test_request_cannot_widen_a_child_to_its_parents_tools() -> None:
    """The parent holds `fetch`, but the child's definition does not: asking for it is refused."""
    script = Script({"lead": [spawn("mathematician", "t", tools=["fetch"], id="s1")]})
    mathematician = Agent("mathematician", "M.", tools=[calc])
    lead = Agent("lead", "L.", tools=[fetch], subagents=[mathematician], model=script.model)

    result = await run(lead, "q")

    assert result_for(result.messages, "s1").is_error
    assert result.children == []
    assert script.calls("mathematician") == 0


async def test_request_for_an_unknown_agent_is_refused_before_any_child_starts() -> None:
    script = Script({"lead": [spawn("ghost", "t", id="s1")]})
    researcher = Agent("researcher", "R.")
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    refused = result_for(result.messages, "s1")
    assert refused.is_error
    assert "researcher" in refused.content  # says what it may spawn instead
    assert result.children == []
    assert script.paths() == ["lead"]


async def test_child_cannot_call_a_tool_it_was_narrowed_away_from() -> None:
    executed: list[str] = []

    @tool
    async def fetch_counted(url: str) -> str:
        """Fetch.

        Args:
            url: where
        """
        executed.append(url)
        return "page"

    script = Script(
        {
            "lead": [spawn("researcher", "t", tools=["search"])],
            "researcher": [tool_call("fetch_counted", {"url": "x"}, id="f1"), text("gave up")],
        }
    )
    researcher = Agent("researcher", "R.")
    lead = Agent(
        "lead", "L.", tools=[search, fetch_counted], subagents=[researcher], model=script.model
    )

    result = await run(lead, "q")

    child = result.children[0]
    assert result_for(child.messages, "f1").is_error
    assert executed == []


async def test_childs_final_answer_is_the_whole_tool_result() -> None:
    script = Script(
        {
            "lead": [spawn("researcher", "t", id="s1")],
            "researcher": [
                [text("let me search first"), tool_call("search", {"query": "x"})],
                text("THE FINAL ANSWER"),
            ],
        }
    )
    researcher = Agent("researcher", "R.", tools=[search])
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    answer = result_for(result.messages, "s1")
    assert not answer.is_error
    assert answer.content == "THE FINAL ANSWER"
    assert result.children[0].output == "THE FINAL ANSWER"
    # and the lead's next request carries exactly that, nothing else of the child's transcript
    second = [r for r in script.requests if r.agent.path == "lead"][1]
    assert result_for(list(second.messages), "s1").content == "THE FINAL ANSWER"
    assert "let me search first" not in repr(second.messages)
    assert "hits for x" not in repr(second.messages)


async def test_child_that_did_not_complete_returns_is_error_with_status_reason_and_summary() -> (
    None
):
    script = Script(
        {
            "lead": [spawn("researcher", "t", id="s1"), text("lead finished anyway")],
            "researcher": lambda req, turn: [
                text(f"progress note {turn}: found the 1887 survey"),
                tool_call("search", {"query": f"q{turn}"}),
            ],
        }
    )
    researcher = Agent("researcher", "R.", tools=[search], limits=Limits(max_turns=2))
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert result.output == "lead finished anyway"
    child = result.children[0]
    assert child.status is RunStatus.MAX_TURNS
    assert child.error
    failed = result_for(result.messages, "s1")
    assert failed.is_error
    assert "max_turns" in failed.content  # its status
    assert child.error in failed.content  # its one-line reason
    assert "1887 survey" in failed.content  # a summary of what it had done
    assert len(failed.content) < 2000


async def test_child_model_failure_comes_back_as_is_error_result_and_the_parent_continues() -> None:
    def researcher(req: Any, turn: int) -> Any:
        raise ModelError("provider overloaded after retries", kind="overloaded")

    script = Script(
        {"lead": [spawn("researcher", "t", id="s1"), text("carried on")], "researcher": researcher}
    )
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert result.output == "carried on"
    assert result.children[0].status is RunStatus.ERROR
    failed = result_for(result.messages, "s1")
    assert failed.is_error
    assert "error" in failed.content and "overloaded" in failed.content


class _BrokenModel:
    """A model adapter with a bug outside request() raising: a cost() that fails, or a
    request() returning something other than a ModelResponse."""

    provider = "broken"
    name = "broken-1"

    def __init__(self, bug: str) -> None:
        self.bug = bug

    def cost(self, usage: Usage) -> float:
        if self.bug == "cost raises":
            raise ValueError("no price for this model")
        if self.bug == "cost is negative":
            return -1.0
        return None if self.bug == "cost is None" else 0.0  # type: ignore[return-value]

    async def request(self, request: Any, ctx: Any) -> Any:
        return text("an answer block, not a response")


@pytest.mark.parametrize(
    "bug", ["cost raises", "cost is None", "cost is negative", "request returns a block"]
)
async def test_a_childs_model_adapter_bug_ends_that_child_not_the_run(bug: str) -> None:
    lead_model = ScriptedModel(
        [[spawn("worker", "a", id="s1"), spawn("broken", "b", id="s2")], text("carried on")]
    )
    worker = Agent("worker", "W.", model=ScriptedModel([text("done")]))
    broken = Agent("broken", "B.", model=_BrokenModel(bug))  # type: ignore[arg-type]
    lead = Agent("lead", "L.", subagents=[worker, broken], model=lead_model)

    result = await run(lead, "q", limits=Limits(cost_budget_usd=5.0))

    assert result.status is RunStatus.COMPLETED
    assert [c.status for c in result.children] == [RunStatus.COMPLETED, RunStatus.ERROR]
    assert result_for(result.messages, "s2").is_error


async def test_child_without_a_model_uses_its_parents_model() -> None:
    script = Script({"lead": [spawn("researcher", "t", id="s1")], "researcher": [text("hi")]})
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    result = await run(lead, "q")

    assert result_for(result.messages, "s1").content == "hi"
    assert script.calls("researcher") == 1


async def test_child_with_its_own_model_uses_it() -> None:
    child_script = Script({"researcher": [text("from the child's model")]})
    script = Script({"lead": [spawn("researcher", "t", id="s1")]})
    researcher = Agent("researcher", "R.", model=child_script.model)
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    result = await run(lead, "q")

    assert result_for(result.messages, "s1").content == "from the child's model"
    assert script.calls("researcher") == 0
    assert child_script.calls("researcher") == 1


# ---------------------------------------------------------------------------------------------
# subagents by name, recursion, validation of the tree


async def test_subagent_given_by_name_resolves_to_its_definition_elsewhere_in_the_tree() -> None:
    script = Script(
        {
            "lead": [spawn("editor", "polish", id="s1")],
            "editor": [text("polished")],
        }
    )
    editor = Agent("editor", "Edit.", description="polishes text")
    writer = Agent("writer", "Write.", subagents=[editor])
    lead = Agent("lead", "L.", subagents=[writer, "editor"], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert result_for(result.messages, "s1").content == "polished"
    assert script.first_request("lead/editor#1").system == "Edit."
    spec = next(t for t in script.first_request("lead").tools if t.name == "spawn_subagent")
    assert spec.input_schema["properties"]["agent"]["enum"] == ["writer", "editor"]
    assert "polishes text" in spec.description


async def test_recursion_by_own_name_is_bounded_by_max_depth() -> None:
    def recurse(req: Any, turn: int) -> Any:
        if turn == 0 and any(t.name == "spawn_subagent" for t in req.tools):
            return spawn("explorer", f"go deeper from {req.agent.path}")
        return text(f"bottom reached at depth {req.agent.depth}" if turn == 0 else "up")

    script = Script({"explorer": recurse})
    explorer = Agent("explorer", "Explore.", subagents=["explorer"], model=script.model)

    result = await run(explorer, "q", limits=Limits(max_depth=2))

    assert result.status is RunStatus.COMPLETED
    assert script.paths() == ["explorer", "explorer/explorer#1", "explorer/explorer#1/explorer#1"]
    depths = {r.agent.path: r.agent.depth for r in script.requests}
    assert depths == {
        "explorer": 0,
        "explorer/explorer#1": 1,
        "explorer/explorer#1/explorer#1": 2,
    }
    assert "spawn_subagent" in script.tool_names("explorer")
    assert "spawn_subagent" in script.tool_names("explorer/explorer#1")
    assert "spawn_subagent" not in script.tool_names("explorer/explorer#1/explorer#1")
    deepest = result.children[0].children[0]
    assert deepest.children == []
    assert deepest.output == "bottom reached at depth 2"


async def test_default_max_depth_of_three_bounds_unlimited_recursion() -> None:
    def recurse(req: Any, turn: int) -> Any:
        if turn == 0 and any(t.name == "spawn_subagent" for t in req.tools):
            return spawn("explorer", "deeper")
        return text("ok")

    script = Script({"explorer": recurse})
    explorer = Agent("explorer", "Explore.", subagents=["explorer"], model=script.model)

    result = await run(explorer, "q")

    assert result.status is RunStatus.COMPLETED
    assert max(r.agent.depth for r in script.requests) == 3
    assert len(list(nodes(result))) == 4


def counting_model() -> tuple[FunctionModel, list[Any]]:
    calls: list[Any] = []

    def fn(req: Any) -> Any:
        calls.append(req)
        return text("should never be called")

    return FunctionModel(fn), calls


async def test_unresolved_subagent_name_is_a_configuration_error_before_any_model_call() -> None:
    model, calls = counting_model()
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R."), "reseacher"], model=model)

    with pytest.raises(ConfigurationError, match="reseacher"):
        await run(lead, "q")
    assert calls == []


async def test_unresolved_name_deep_in_the_tree_is_a_configuration_error_before_any_model_call() -> (
    None
):
    model, calls = counting_model()
    deep = Agent("deep", "D.", subagents=["nobody"])
    lead = Agent("lead", "L.", subagents=[Agent("mid", "M.", subagents=[deep])], model=model)

    with pytest.raises(ConfigurationError, match="nobody"):
        await run(lead, "q")
    assert calls == []


async def test_duplicate_subagent_names_are_a_configuration_error_before_any_model_call() -> None:
    model, calls = counting_model()
    researcher = Agent("researcher", "R.")

    with pytest.raises(ConfigurationError, match="researcher"):
        lead = Agent("lead", "L.", subagents=[researcher, researcher], model=model)
        await run(lead, "q")
    with pytest.raises(ConfigurationError, match="researcher"):
        lead = Agent("lead", "L.", subagents=[researcher, "researcher"], model=model)
        await run(lead, "q")
    assert calls == []


async def test_two_different_agents_with_one_name_are_a_configuration_error_before_any_model_call() -> (
    None
):
    model, calls = counting_model()
    first = Agent("helper", "Help with facts.")
    second = Agent("helper", "Help with prose.")
    writer = Agent("writer", "W.", subagents=[second])
    lead = Agent("lead", "L.", subagents=[first, writer], model=model)

    with pytest.raises(ConfigurationError, match="helper"):
        await run(lead, "q")
    assert calls == []


async def test_subagent_sharing_the_roots_name_is_a_configuration_error() -> None:
    model, calls = counting_model()
    lead = Agent("lead", "L.", subagents=[Agent("lead", "an impostor")], model=model)

    with pytest.raises(ConfigurationError, match="lead"):
        await run(lead, "q")
    assert calls == []


async def test_output_cap_larger_than_the_token_budget_is_a_configuration_error() -> None:
    model, calls = counting_model()
    researcher = Agent("researcher", "R.", max_output_tokens=5000)
    lead = Agent("lead", "L.", subagents=[researcher], model=model, max_output_tokens=100)

    with pytest.raises(ConfigurationError, match="researcher"):
        await run(lead, "q", limits=Limits(token_budget=1000))
    assert calls == []


async def test_output_cap_larger_than_an_ancestors_own_budget_is_a_configuration_error() -> None:
    # the middle agent's own budget holds its whole subtree: the leaf could never make a call
    model, calls = counting_model()
    leaf = Agent("leaf", "L.", max_output_tokens=8_000)
    middle = Agent(
        "middle", "M.", subagents=[leaf], max_output_tokens=100, limits=Limits(token_budget=5_000)
    )
    lead = Agent("lead", "L.", subagents=[middle], model=model, max_output_tokens=100)
    with pytest.raises(ConfigurationError, match=r"'leaf'.*5000"):
        await run(lead, "q")
    assert calls == []


async def test_an_output_cap_equal_to_the_budget_is_refused_since_a_call_needs_input_too() -> None:
    # a call reserves its input estimate (one token at least) plus its output cap: with the
    # cap equal to the budget the run used to start and end budget_exceeded at its first call
    model, calls = counting_model()
    with pytest.raises(ConfigurationError, match=r"'lead'.*at least 1 tokens.*\(100\)"):
        await run(
            Agent("lead", "L.", model=model, max_output_tokens=100),
            "q",
            limits=Limits(token_budget=100),
        )
    instructions = "Be brief. " * 40  # 400 characters: ~100 tokens before any task
    with pytest.raises(ConfigurationError, match="at least 101 tokens"):
        await run(
            Agent("lead", instructions, model=model, max_output_tokens=100),
            "q",
            limits=Limits(token_budget=200),
        )
    assert calls == []
    done = await run(
        Agent("lead", "L.", model=ScriptedModel([text("ok")]), max_output_tokens=100),
        "q",
        limits=Limits(token_budget=102),  # estimate (("L." + "q") // 4 + 1 = 1) + 100 fits
    )
    assert done.status is RunStatus.COMPLETED


async def test_one_definition_reused_under_two_parents_is_allowed() -> None:
    script = Script(
        {
            "lead": [[spawn("writer", "w"), spawn("helper", "h")]],
            "writer": [spawn("helper", "hw")],
        }
    )
    helper = Agent("helper", "H.")
    writer = Agent("writer", "W.", subagents=[helper])
    lead = Agent("lead", "L.", subagents=[writer, helper], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert "lead/writer#1/helper#1" in script.paths()
    assert "lead/helper#1" in script.paths()


# ---------------------------------------------------------------------------------------------
# concurrency of one turn's children, spawn order, paths


async def test_children_of_one_turn_run_concurrently_in_about_one_latency(autojump_clock) -> None:
    n, latency = 6, 1.0
    script = Script(
        {"lead": [[spawn("researcher", f"task {i}") for i in range(n)]]}, latency=latency
    )
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q")
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.COMPLETED
    assert len(result.children) == n
    # lead's first call, the children in parallel, lead's second call: 3 latencies, not n + 2
    assert elapsed == pytest.approx(3 * latency, abs=0.1)
    assert script.max_in_flight == n


async def test_two_levels_of_parallel_children_take_about_one_latency_per_level(
    autojump_clock,
) -> None:
    latency = 2.0
    script = Script(
        {
            "lead": [[spawn("researcher", f"r{i}") for i in range(3)]],
            "researcher": [[spawn("reader", f"p{i}") for i in range(3)]],
        },
        latency=latency,
    )
    reader = Agent("reader", "Read.")
    researcher = Agent("researcher", "R.", subagents=[reader])
    lead = Agent("lead", "L.", subagents=[researcher], model=script.model)

    start = trio.current_time()
    result = await run(lead, "q")
    elapsed = trio.current_time() - start

    assert result.status is RunStatus.COMPLETED
    assert len(list(nodes(result))) == 1 + 3 + 9
    # lead, researchers, readers, researchers again, lead again: 5 latencies (13 calls serially)
    assert elapsed == pytest.approx(5 * latency, abs=0.1)


async def test_children_appear_in_spawn_order_whatever_order_they_finish(autojump_clock) -> None:
    # the first spawned child is the slowest
    def latency(req: Any) -> float:
        if req.agent.name == "researcher":
            return {"a": 3.0, "b": 2.0, "c": 1.0}[req.messages[0].content[0].text]
        return 0.0

    script = Script(
        {
            "lead": [[spawn("researcher", t) for t in ("a", "b", "c")]],
            "researcher": lambda req, turn: text(f"answer {req.messages[0].content[0].text}"),
        },
        latency=latency,
    )
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)

    result = await run(lead, "q")

    finish_order = [r.agent.path for r in script.requests if r.agent.depth == 1]
    assert [c.output for c in result.children] == ["answer a", "answer b", "answer c"]
    assert [c.messages[0].content[0].text for c in result.children] == ["a", "b", "c"]
    assert [c.path for c in result.children] == [
        "lead/researcher#1",
        "lead/researcher#2",
        "lead/researcher#3",
    ]
    assert len(finish_order) == 3
    # each spawn's tool_result is its own child's answer, in call order
    assert [b.content for b in tool_results(result.messages)] == [
        "answer a",
        "answer b",
        "answer c",
    ]


async def test_paths_are_numbered_per_agent_name_in_spawn_order_across_turns() -> None:
    script = Script(
        {
            "lead": [
                [spawn("researcher", "r1"), spawn("writer", "w1"), spawn("researcher", "r2")],
                spawn("researcher", "r3"),
            ],
            "researcher": lambda req, turn: (
                spawn("reader", "deep")
                if turn == 0 and req.messages[0].content[0].text == "r1"
                else text(f"done {req.agent.path}")
            ),
        }
    )
    reader = Agent("reader", "Read.")
    researcher = Agent("researcher", "R.", subagents=[reader])
    lead = Agent("lead", "L.", subagents=[researcher, Agent("writer", "W.")], model=script.model)

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    assert [c.path for c in result.children] == [
        "lead/researcher#1",
        "lead/writer#1",
        "lead/researcher#2",
        "lead/researcher#3",
    ]
    assert [c.messages[0].content[0].text for c in result.children] == ["r1", "w1", "r2", "r3"]
    assert [c.path for c in result.children[0].children] == ["lead/researcher#1/reader#1"]
    # the path the model saw is the path of the result
    for node in nodes(result):
        assert node.path in script.paths()


async def test_paths_are_the_same_on_every_run_of_one_definition(autojump_clock) -> None:
    def latency(req: Any) -> float:
        return (hash(req.agent.path) % 7) / 10

    plans = {"lead": [[spawn("researcher", f"r{i}") for i in range(4)]]}
    lead_of = lambda script: Agent(  # noqa: E731
        "lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model
    )
    seen = []
    for _ in range(3):
        script = Script(plans, latency=latency)
        result = await run(lead_of(script), "q")
        seen.append([(c.path, c.messages[0].content[0].text) for c in result.children])
    assert seen[0] == seen[1] == seen[2]
    assert seen[0] == [(f"lead/researcher#{i + 1}", f"r{i}") for i in range(4)]


async def test_one_definition_runs_twice_at_once_with_separate_state(autojump_clock) -> None:
    script = Script(
        {
            "lead": lambda req, turn: (
                spawn("researcher", req.messages[0].content[0].text)
                if turn == 0
                else text(f"lead got: {tool_results(list(req.messages))[0].content}")
            ),
            "researcher": lambda req, turn: text(f"answer to {req.messages[0].content[0].text}"),
        },
        latency=1.0,
    )
    lead = Agent("lead", "L.", subagents=[Agent("researcher", "R.")], model=script.model)
    results: dict[str, RunResult] = {}

    async def one(prompt: str) -> None:
        results[prompt] = await run(lead, prompt)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, "alpha")
        nursery.start_soon(one, "beta")

    assert results["alpha"].output == "lead got: answer to alpha"
    assert results["beta"].output == "lead got: answer to beta"
    assert len(results["alpha"].children) == len(results["beta"].children) == 1


# ---------------------------------------------------------------------------------------------
# the RunResult tree


async def test_result_tree_has_own_usage_per_node_and_usage_per_subtree() -> None:
    billed: dict[str, list[Usage]] = defaultdict(list)

    def usage_for(req: Any, turn: int) -> Usage:
        base = 10 * (req.agent.depth + 1) + turn + len(req.agent.path)
        return Usage(
            input_tokens=base * 3,
            output_tokens=base,
            cache_read_tokens=base,
            cache_write_tokens=turn,
        )

    def step(blocks: list[Any]) -> Callable[[Any, int], Any]:
        def fn(req: Any, turn: int) -> Any:
            u = usage_for(req, turn)
            billed[req.agent.path].append(u)
            return response(*blocks, usage=u)

        return fn

    def plan_of(*turns: list[Any]) -> Callable[[Any, int], Any]:
        def fn(req: Any, turn: int) -> Any:
            blocks = turns[turn] if turn < len(turns) else [text(f"done {req.agent.path}")]
            return step(blocks)(req, turn)

        return fn

    script = Script(
        {
            "lead": plan_of([spawn("researcher", "a"), spawn("researcher", "b")]),
            "researcher": plan_of([spawn("reader", "x")], [tool_call("search", {"query": "q"})]),
            "reader": plan_of(),
        }
    )
    reader = Agent("reader", "Read.")
    researcher = Agent("researcher", "R.", tools=[search], subagents=[reader])
    lead = Agent(
        "lead",
        "L.",
        subagents=[researcher],
        model=FunctionModel(script, prices=lambda u: u.output_tokens * 0.001),
    )

    result = await run(lead, "q")

    assert result.status is RunStatus.COMPLETED
    all_nodes = list(nodes(result))
    assert len(all_nodes) == 1 + 2 + 2
    assert {n.path for n in all_nodes} == set(billed)
    for node in all_nodes:
        own = billed[node.path]
        for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            assert getattr(node.own_usage, field) == sum(getattr(u, field) for u in own), field
            expected = getattr(node.own_usage, field) + sum(
                getattr(c.usage, field) for c in node.children
            )
            assert getattr(node.usage, field) == expected, (node.path, field)
        assert node.own_usage.cost_usd == pytest.approx(sum(u.output_tokens for u in own) * 0.001)
        assert node.usage.cost_usd == pytest.approx(
            node.own_usage.cost_usd + sum(c.usage.cost_usd for c in node.children)
        )
    everything = [u for us in billed.values() for u in us]
    assert result.usage.input_tokens == sum(u.input_tokens for u in everything)
    assert result.usage.output_tokens == sum(u.output_tokens for u in everything)


async def test_result_tree_nodes_carry_agent_name_status_output_and_transcript() -> None:
    script = Script(
        {"lead": [[spawn("researcher", "a"), spawn("writer", "b")]], "writer": [text("prose")]}
    )
    lead = Agent(
        "lead",
        "L.",
        subagents=[Agent("researcher", "R."), Agent("writer", "W.")],
        model=script.model,
    )

    result = await run(lead, "q")

    assert result.agent_name == "lead"
    assert [c.agent_name for c in result.children] == ["researcher", "writer"]
    assert [c.status for c in result.children] == [RunStatus.COMPLETED, RunStatus.COMPLETED]
    assert result.children[1].output == "prose"
    assert result.children[1].error is None
    for node in nodes(result):
        assert_valid_transcript(node.messages)
        assert node.messages[0].role == "user"
        assert node.messages[-1].role == "assistant"


async def test_a_refused_spawn_takes_no_slot_of_max_children_and_no_number() -> None:
    from orchestrator import Limits

    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker], limits=Limits(max_children=2))
    model = ScriptedModel(
        {
            "lead": [
                [
                    tool_call(
                        "spawn_subagent", {"agent": "worker", "task": "x", "tools": ["shell"]}
                    ),
                    tool_call("spawn_subagent", {"agent": "worker", "task": "b"}),
                    tool_call("spawn_subagent", {"agent": "worker", "task": "c"}),
                ],
                text("done"),
            ],
            "worker": [text("ok")],
        }
    )
    result = await run(lead, "go", model=model)
    assert [c.path for c in result.children] == ["lead/worker#1", "lead/worker#2"]
    results = [b for b in result.messages[2].content]
    assert [r.is_error for r in results] == [True, False, False]  # type: ignore[union-attr]


async def test_spawns_refused_for_their_arguments_take_no_slot() -> None:
    from orchestrator import Limits

    worker = Agent("worker", "Work.", description="works")
    other = Agent("other", "Other.", description="not the lead's")
    lead = Agent("lead", "Lead.", subagents=[worker], limits=Limits(max_children=1))
    tree_root = Agent("root", "Root.", subagents=[lead, other], limits=Limits(max_children=1))
    model = ScriptedModel(
        {
            "root": [tool_call("spawn_subagent", {"agent": "lead", "task": "go"}), text("done")],
            "lead": [
                [
                    tool_call("spawn_subagent", {"agent": "worker"}),  # no task
                    tool_call("spawn_subagent", {"agent": "other", "task": "x"}),  # not its own
                    tool_call("spawn_subagent", {"agent": "worker", "task": "real"}),
                ],
                text("lead done"),
            ],
            "worker": [text("ok")],
        }
    )
    result = await run(tree_root, "go", model=model)
    lead_result = result.children[0]
    assert [c.path for c in lead_result.children] == ["root/lead#1/worker#1"]


async def test_a_spawn_the_tool_schema_rejects_takes_no_slot_and_no_number() -> None:
    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker], limits=Limits(max_children=2))
    bad_arguments = [
        {"agent": "worker", "task": "x", "extra": 1},  # the schema forbids extra keys
        {"agent": "worker", "task": "x", "tools": "search"},  # not a list
        {"agent": "worker", "task": 7},  # not a string
    ]
    for bad in bad_arguments:
        model = ScriptedModel(
            {
                "lead": [
                    [
                        tool_call("spawn_subagent", bad),
                        tool_call("spawn_subagent", {"agent": "worker", "task": "b"}),
                        tool_call("spawn_subagent", {"agent": "worker", "task": "c"}),
                    ],
                    text("done"),
                ],
                "worker": [text("ok")],
            }
        )
        result = await run(lead, "go", model=model)
        assert [c.path for c in result.children] == ["lead/worker#1", "lead/worker#2"], bad
        assert [r.is_error for r in tool_results(result.messages[2:3])] == [True, False, False]


async def test_a_spawn_with_a_blank_task_is_refused_and_takes_no_slot_and_no_number() -> None:
    # a subagent sees nothing but its task, and the Messages API refuses a blank first message
    # with a 400 that would stop the whole run
    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker], limits=Limits(max_children=1))
    model = ScriptedModel(
        {
            "lead": [
                [
                    tool_call("spawn_subagent", {"agent": "worker", "task": " \n "}),
                    tool_call("spawn_subagent", {"agent": "worker", "task": "real"}),
                ],
                text("done"),
            ],
            "worker": [text("ok")],
        }
    )
    result = await run(lead, "go", model=model)
    assert result.status is RunStatus.COMPLETED
    assert [c.path for c in result.children] == ["lead/worker#1"]
    refused, started = tool_results(result.messages[2:3])
    assert refused.is_error and "task for 'worker' is empty" in refused.content
    assert not started.is_error and started.content == "ok"


def test_the_spawn_tool_is_built_once_per_set_of_definitions_and_reflects_them() -> None:
    from orchestrator.core.spawn import build_spawn_tool

    reader = Agent("reader", "Read.", description="reads pages")
    first = build_spawn_tool((reader,))
    assert build_spawn_tool((reader,)) is first  # a second run reuses it
    renamed = reader.replace(description="skims pages")
    other = build_spawn_tool((renamed,))
    assert other is not first
    assert "skims pages" in other.description and "reads pages" in first.description


class _Session:
    """What an application's tool may close over: a database session, a user's key."""


def _tree_for_one_request(session: _Session) -> tuple[Agent, Script]:
    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return type(session).__name__

    worker = Agent("worker", "Work.", description="works", tools=[lookup])
    script = Script({"lead": [spawn("worker", "job"), text("done")], "worker": [text("ok")]})
    return Agent("lead", "Lead.", subagents=[worker], model=script.model), script


def test_a_tree_built_per_request_is_not_kept_alive_by_the_spawn_tool_cache() -> None:
    # the cache held the last 256 subagent sets with their tools' closures: an app building a
    # tree per request (a tool closing over a session or a user's key) kept ~256 of them alive
    import gc
    import weakref

    from orchestrator import run_sync

    alive: list[weakref.ref[_Session]] = []
    for _ in range(5):
        session = _Session()
        alive.append(weakref.ref(session))
        lead, script = _tree_for_one_request(session)
        assert run_sync(lead, "go").status is RunStatus.COMPLETED
        del session, lead, script
    gc.collect()
    assert [r() for r in alive] == [None] * 5


async def test_a_tool_use_id_used_again_in_a_later_turn_still_starts_a_new_number() -> None:
    """Paths must stay unique even when a script or a provider repeats a tool_use id."""
    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker])
    model = ScriptedModel(
        {
            "lead": [
                tool_call("spawn_subagent", {"agent": "worker", "task": "a"}, id="call_0"),
                tool_call("spawn_subagent", {"agent": "worker", "task": "b"}, id="call_0"),
                text("done"),
            ],
            "worker": [text("ok")],
        }
    )
    result = await run(lead, "go", model=model)
    assert result.status is RunStatus.COMPLETED
    assert [c.path for c in result.children] == ["lead/worker#1", "lead/worker#2"]
    assert [c.messages[0].content[0].text for c in result.children] == ["a", "b"]


async def test_spawns_in_a_continued_history_keep_their_numbers() -> None:
    worker = Agent("worker", "Work.", description="works")
    lead = Agent("lead", "Lead.", subagents=[worker])
    earlier = [
        Message.user("first question"),
        Message(
            "assistant",
            (
                ToolUseBlock("toolu_h1", "spawn_subagent", {"agent": "worker", "task": "old"}),
                ToolUseBlock("toolu_h2", "spawn_subagent", {"agent": "worker", "task": "old 2"}),
            ),
        ),
        Message("user", (ToolResultBlock("toolu_h1", "x"), ToolResultBlock("toolu_h2", "y"))),
        Message.assistant("first answer"),
    ]
    model = ScriptedModel(
        {
            "lead": [
                text("(the history's first reply)"),  # scripts count the history's replies
                text("(the history's second reply)"),
                [
                    tool_call("spawn_subagent", {"agent": "worker", "task": "new"}),
                    tool_call("spawn_subagent", {"agent": "worker", "task": "new 2"}),
                ],
                text("done"),
            ],
            "worker": [text("ok")],
        }
    )
    result = await run(lead, "second question", model=model, message_history=earlier)
    assert result.status is RunStatus.COMPLETED
    assert [c.path for c in result.children] == ["lead/worker#3", "lead/worker#4"]
