"""The permission gate: allow / confirm / deny, the default, approvers, and refusals as results."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable

import pytest
import trio

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    PendingCall,
    Policy,
    RunStatus,
    Tool,
    open_run,
    run,
    tool,
)
from orchestrator.models import ScriptedModel, text, tool_call


def make_tools():
    """Fresh tools whose calls are recorded in ``calls``."""
    calls: list[str] = []

    @tool
    async def read_file(path: str) -> str:
        """Read a file."""
        calls.append(f"read_file:{path}")
        return "contents"

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file."""
        calls.append(f"delete_file:{path}")
        return "deleted"

    return calls, [read_file, delete_file]


def delete_tool(ran: list[str]) -> Tool:
    """A ``delete`` tool that records the paths it was called with in ``ran``."""

    @tool
    async def delete(path: str) -> str:
        """Delete a file.

        Args:
            path: Which file.
        """
        ran.append(path)
        return "deleted"

    return delete


async def say_yes(call: PendingCall) -> bool:
    return True


async def call(name, args, *, policy=None, run_policy=None, limits=None):
    """One agent calls ``name`` once and then answers; returns (calls, result, the tool_result)."""
    calls, tools = make_tools()
    model = ScriptedModel([tool_call(name, args, id="toolu_1"), text("done")])
    agent = Agent("worker", "x", model=model, tools=tools, policy=policy)
    result = await run(agent, "go", policy=run_policy, limits=limits)
    results = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    return calls, result, results[0] if results else None


async def test_an_agents_tools_are_allowed_when_no_rule_says_otherwise():
    calls, result, res = await call("delete_file", {"path": "a"})
    assert calls == ["delete_file:a"]
    assert not res.is_error
    assert result.status is RunStatus.COMPLETED


async def test_a_denied_tool_is_refused_and_its_handler_never_runs():
    policy = Policy(rules={"delete_file": "deny"})
    calls, result, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == []
    assert res.is_error
    assert "delete_file" in res.content
    assert "denied" in res.content
    assert result.status is RunStatus.COMPLETED


async def test_a_deny_rule_leaves_the_other_tools_allowed():
    policy = Policy(rules={"delete_file": "deny"})
    calls, _, res = await call("read_file", {"path": "a"}, policy=policy)
    assert calls == ["read_file:a"]
    assert not res.is_error


async def test_a_deny_default_refuses_every_tool_without_an_allow_rule():
    policy = Policy(rules={"read_file": "allow"}, default="deny")
    calls, _, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == []
    assert res.is_error
    calls, _, res = await call("read_file", {"path": "a"}, policy=policy)
    assert calls == ["read_file:a"]
    assert not res.is_error


async def test_a_confirmed_call_runs_when_a_sync_approver_says_yes():
    seen: list[PendingCall] = []

    def approve(pending: PendingCall) -> bool:
        seen.append(pending)
        return True

    policy = Policy(rules={"delete_file": "confirm"}, approver=approve)
    calls, _, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == ["delete_file:a"]
    assert not res.is_error
    (pending,) = seen
    assert pending.name == "delete_file"
    assert dict(pending.input) == {"path": "a"}
    assert pending.id == "toolu_1"
    assert pending.agent_name == "worker"
    assert pending.agent_path == "worker"


async def test_a_confirmed_call_is_declined_when_a_sync_approver_says_no():
    policy = Policy(rules={"delete_file": "confirm"}, approver=lambda pending: False)
    calls, result, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == []
    assert res.is_error
    assert "declined" in res.content
    assert "delete_file" in res.content
    assert result.status is RunStatus.COMPLETED


async def test_a_confirmed_call_runs_when_an_async_approver_says_yes(autojump_clock):
    async def approve(pending: PendingCall) -> bool:
        await trio.sleep(30)  # a human thinking it over
        return True

    policy = Policy(rules={"delete_file": "confirm"}, approver=approve)
    calls, _, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == ["delete_file:a"]
    assert not res.is_error


async def test_a_confirmed_call_is_declined_when_an_async_approver_says_no():
    async def approve(pending: PendingCall) -> bool:
        await trio.lowlevel.checkpoint()
        return False

    policy = Policy(rules={"delete_file": "confirm"}, approver=approve)
    calls, _, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == []
    assert res.is_error
    assert "declined" in res.content


async def test_a_confirm_rule_without_an_approver_declines_the_call():
    policy = Policy(rules={"delete_file": "confirm"})
    calls, _, res = await call("delete_file", {"path": "a"}, policy=policy)
    assert calls == []
    assert res.is_error
    assert "approv" in res.content


async def test_the_approver_is_only_asked_about_confirm_calls():
    asked: list[str] = []

    def approve(pending: PendingCall) -> bool:
        asked.append(pending.name)
        return True

    policy = Policy(rules={"delete_file": "confirm"}, approver=approve)
    calls, _, _ = await call("read_file", {"path": "a"}, policy=policy)
    assert calls == ["read_file:a"]
    assert asked == []


async def test_an_approvers_wait_counts_against_the_runs_deadline(autojump_clock):
    async def never(pending: PendingCall) -> bool:
        await trio.sleep_forever()
        return True  # pragma: no cover

    policy = Policy(rules={"delete_file": "confirm"}, approver=never)
    start = trio.current_time()
    calls, result, res = await call(
        "delete_file", {"path": "a"}, policy=policy, limits=Limits(timeout=60)
    )
    assert calls == []
    assert result.status is RunStatus.TIMEOUT
    assert trio.current_time() - start == pytest.approx(60, abs=1)
    assert res.is_error  # the cut call still has its (synthetic) result


async def test_a_tool_the_agent_does_not_hold_is_refused_even_when_a_rule_allows_it():
    # the rule is valid (a subagent holds format_disk), but it does not give the tool to the
    # agent whose model asks for it (a rule naming no tool of the tree at all is refused when
    # the run starts: tests/core/test_policy_names.py)
    ran: list[str] = []

    @tool
    async def format_disk() -> str:
        """Format the disk."""
        ran.append("format_disk")
        return "formatted"

    calls, tools = make_tools()
    admin = Agent("admin", "Administer.", description="administers", tools=[format_disk])
    model = ScriptedModel([tool_call("format_disk", {}, id="toolu_1"), text("done")])
    agent = Agent("worker", "x", model=model, tools=tools, subagents=[admin],
                  policy=Policy(rules={"format_disk": "allow"}, default="allow"))  # fmt: skip
    result = await run(agent, "go")
    (res,) = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert calls == [] and ran == []
    assert res.is_error
    assert "format_disk" in res.content
    assert "read_file" in res.content and "delete_file" in res.content
    assert result.status is RunStatus.COMPLETED


async def test_a_run_policy_cannot_loosen_an_agents_deny():
    calls, _, res = await call(
        "delete_file",
        {"path": "a"},
        policy=Policy(rules={"delete_file": "deny"}),
        run_policy=Policy(rules={"delete_file": "allow"}),
    )
    assert calls == []
    assert res.is_error


async def test_a_run_policy_can_tighten_an_agents_tools():
    calls, _, res = await call(
        "delete_file", {"path": "a"}, run_policy=Policy(rules={"delete_file": "deny"})
    )
    assert calls == []
    assert res.is_error


async def test_the_stricter_of_confirm_and_allow_wins():
    calls, _, res = await call(
        "delete_file",
        {"path": "a"},
        policy=Policy(rules={"delete_file": "allow"}),
        run_policy=Policy(rules={"delete_file": "confirm"}, approver=lambda p: False),
    )
    assert calls == []
    assert res.is_error
    assert "declined" in res.content


def test_the_policy_default_is_allow():
    assert Policy().default == "allow"


def test_an_unknown_rule_value_is_rejected_naming_the_tool():
    with pytest.raises(ConfigurationError, match="delete_file"):
        Policy(rules={"delete_file": "maybe"})  # type: ignore[dict-item]


def test_an_unknown_default_is_rejected():
    with pytest.raises(ConfigurationError):
        Policy(default="sometimes")  # type: ignore[arg-type]


def test_a_non_callable_approver_is_rejected_naming_the_approver():
    with pytest.raises(ConfigurationError, match="approver"):
        Policy(approver=True)  # type: ignore[arg-type]


async def test_a_blocking_sync_approver_does_not_hold_up_the_run_or_its_deadline() -> None:
    from orchestrator import Limits, RunStatus

    asked, release, answered = threading.Event(), threading.Event(), threading.Event()

    @tool
    async def remove(path: str) -> str:
        """Remove a file.

        Args:
            path: Which file.
        """
        return f"removed {path}"

    def slow_human(call: PendingCall) -> bool:
        asked.set()
        release.wait(60)  # a person thinking at a terminal
        answered.set()
        return True

    agent = Agent(
        "cleaner",
        "Clean up.",
        tools=[remove],
        policy=Policy(rules={"remove": "confirm"}, approver=slow_human),
        model=ScriptedModel([tool_call("remove", {"path": "x"}), text("done")]),
    )
    try:
        result = await run(agent, "go", limits=Limits(timeout=1))
        # the run ended at its deadline while the person was still thinking
        assert asked.is_set() and not answered.is_set()
    finally:
        release.set()
        await trio.to_thread.run_sync(answered.wait, 30)
    assert result.status is RunStatus.TIMEOUT


async def test_every_approver_of_the_combined_layers_must_say_yes() -> None:
    ran: list[str] = []

    delete = delete_tool(ran)

    async def no(call: PendingCall) -> bool:
        return False

    agent = Agent(
        "a",
        "Delete.",
        tools=[delete],
        policy=Policy(approver=say_yes),
        model=ScriptedModel([tool_call("delete", {"path": "/x"}), text("done")]),
    )
    result = await run(agent, "go", policy=Policy(rules={"delete": "confirm"}, approver=no))
    assert ran == []
    assert result.messages[2].content[0].is_error  # type: ignore[union-attr]


@pytest.mark.parametrize("where", ["run", "parent"])
async def test_a_confirm_without_an_approver_is_not_answered_by_another_layers_approver(
    where: str,
) -> None:
    # "confirm" with no approver declines: an agent's own approver (a child's, meant for its
    # own rules) must not approve what the run or the parent could never run
    ran: list[str] = []

    delete = delete_tool(ran)

    strict = Policy(rules={"delete": "confirm"})
    worker = Agent("worker", "Delete.", tools=[delete], policy=Policy(approver=say_yes))
    if where == "run":
        model = ScriptedModel([tool_call("delete", {"path": "/x"}), text("done")])
        result = await run(worker.replace(model=model), "go", policy=strict)
        (refused,) = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    else:
        lead = Agent("lead", "Lead.", tools=[delete], subagents=[worker], policy=strict)
        model = ScriptedModel(
            {
                "lead": [
                    tool_call("spawn_subagent", {"agent": "worker", "task": "delete /x"}),
                    text("done"),
                ],
                "worker": [tool_call("delete", {"path": "/x"}), text("ok")],
            }
        )
        result = await run(lead, "go", model=model)
        (refused,) = [
            b for m in result.children[0].messages for b in m.content if b.type == "tool_result"
        ]
    assert ran == []
    assert refused.is_error and "'delete'" in refused.content


async def test_the_runs_approver_answers_the_confirm_rules_an_agent_declares() -> None:
    asked: list[str] = []

    def approve(call: PendingCall) -> bool:
        asked.append(call.name)
        return True

    calls, _, res = await call(
        "delete_file",
        {"path": "/tmp/x"},
        policy=Policy(rules={"delete_file": "confirm"}),
        run_policy=Policy(approver=approve),
    )
    assert asked == ["delete_file"]
    assert calls == ["delete_file:/tmp/x"] and not res.is_error


def _confirm_agent(approver: object, ran: list[str], calls: int = 2) -> Agent:
    step = [tool_call("delete", {"path": f"f{i}"}) for i in range(calls)]
    return Agent(
        "a",
        "Delete.",
        tools=[delete_tool(ran)],
        policy=Policy(rules={"delete": "confirm"}, approver=approver),  # type: ignore[arg-type]
        model=ScriptedModel([step, text("done")]),
    )


class OpenQuestions:
    """Counts the questions an approver has open at once (the most in ``most``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.most = 0

    def _open(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def _close(self) -> None:
        with self._lock:
            self.now -= 1

    def sync_approver(self, thinking: float) -> Callable[[PendingCall], bool]:
        def ask(call: PendingCall) -> bool:
            self._open()
            time.sleep(thinking)
            self._close()
            return True

        return ask

    def async_approver(self, thinking: float) -> Callable[[PendingCall], Awaitable[bool]]:
        async def ask(call: PendingCall) -> bool:
            self._open()
            await trio.sleep(thinking)
            self._close()
            return True

        return ask


async def test_approvers_answer_parallel_calls_one_at_a_time() -> None:
    questions = OpenQuestions()
    ran: list[str] = []
    result = await run(_confirm_agent(questions.sync_approver(0.05), ran, calls=3), "go")
    assert sorted(ran) == ["f0", "f1", "f2"] and result.output == "done"
    assert questions.most == 1


async def test_a_sync_approver_returning_a_coroutine_is_awaited() -> None:
    async def decide(call: PendingCall) -> bool:
        return call.input["path"] == "f0"

    ran: list[str] = []
    await run(_confirm_agent(lambda call: decide(call), ran), "go")
    assert ran == ["f0"]


async def test_approvers_need_not_be_hashable_nor_truthy() -> None:
    class Log:
        __hash__ = None  # type: ignore[assignment]

        def __len__(self) -> int:
            return 0  # falsy

        async def __call__(self, call: PendingCall) -> bool:
            return True

    ran: list[str] = []
    await run(_confirm_agent(Log(), ran), "go", policy=Policy())
    assert sorted(ran) == ["f0", "f1"]


async def test_a_sync_approver_cut_by_a_timeout_still_holds_the_next_question_back() -> None:
    # its thread keeps showing the first question: a second one asked meanwhile would be
    # answered by whatever the person typed for the first
    questions = OpenQuestions()
    person = questions.sync_approver(0.4)

    @tool
    async def nap() -> str:
        """Wait a little, so the other agent asks second."""
        await trio.sleep(0.05)
        return "rested"

    @tool
    async def delete(path: str) -> str:
        """Delete a file."""
        return "deleted"

    slow = Agent("slow", "S.", tools=[delete], limits=Limits(timeout=0.1))
    other = Agent("other", "O.", tools=[delete, nap])
    lead = Agent(
        "lead",
        "L.",
        subagents=[slow, other],
        policy=Policy(rules={"delete": "confirm"}, approver=person),
    )
    model = ScriptedModel(
        {
            "lead": [
                [
                    tool_call("spawn_subagent", {"agent": "slow", "task": "t"}),
                    tool_call("spawn_subagent", {"agent": "other", "task": "t"}),
                ],
                text("done"),
            ],
            "slow": [tool_call("delete", {"path": "A"}), text("ok")],
            "other": [tool_call("nap", {}), tool_call("delete", {"path": "B"}), text("ok")],
        }
    )
    result = await run(lead, "go", model=model)
    assert [c.status for c in result.children] == [RunStatus.TIMEOUT, RunStatus.COMPLETED]
    assert questions.most == 1


async def test_a_sync_approver_left_asking_by_the_deadline_is_counted_as_an_abandoned_thread() -> (
    None
):
    # like a timed-out sync tool's, its thread outlives the run: handle.abandoned_threads said 0
    asked, release = threading.Event(), threading.Event()

    def person(pending: PendingCall) -> bool:
        asked.set()
        release.wait(60)
        return True

    ran: list[str] = []
    agent = Agent(
        "a",
        "x",
        tools=[delete_tool(ran)],
        policy=Policy(rules={"delete": "confirm"}, approver=person),
        model=ScriptedModel([tool_call("delete", {"path": "p"}), text("done")]),
    )
    try:
        async with open_run(agent, "go", limits=Limits(timeout=1)) as handle:
            result = await handle.result()
        assert asked.is_set()  # the deadline came while the person was asked, not before
        assert result.status is RunStatus.TIMEOUT and ran == []
        assert handle.abandoned_threads == 1
    finally:
        release.set()


async def test_an_approver_edits_its_own_copy_of_the_calls_input() -> None:
    seen: list[str] = []

    @tool
    async def write(path: str, content: str) -> str:
        """Write a file."""
        seen.append(content)
        return "written"

    def approve(call: PendingCall) -> bool:
        call.input.pop("content")  # type: ignore[attr-defined]  # shown shorter, say
        return True

    model = ScriptedModel([tool_call("write", {"path": "n.txt", "content": "keep"}), text("done")])
    policy = Policy(rules={"write": "confirm"}, approver=approve)
    result = await run(Agent("a", "A.", model=model, tools=[write], policy=policy), "go")
    assert seen == ["keep"]
    assert result.messages[1].tool_uses[0].input == {"path": "n.txt", "content": "keep"}


async def test_parallel_calls_are_put_to_the_approver_in_the_order_the_model_wrote_them() -> None:
    # trio starts a turn's calls in no set order: the questions came in call order in some
    # runs and reversed in others; a person at a terminal (or an approver keeping count) must
    # see them as written. A call with invalid arguments in between holds nothing up.
    for _ in range(12):
        asked: list[str] = []
        ran: list[str] = []

        def approve(pending: PendingCall, asked: list[str] = asked) -> bool:
            asked.append(pending.input["path"])
            return True

        calls = [tool_call("delete", {"path": f"f{i}"}) for i in range(5)]
        calls.insert(2, tool_call("delete", {"path": 7}))  # invalid: refused, not asked
        model = ScriptedModel([calls, text("done")])
        policy = Policy(rules={"delete": "confirm"}, approver=approve)
        agent = Agent("a", "x", tools=[delete_tool(ran)], policy=policy, model=model)
        result = await run(agent, "go")
        assert result.status is RunStatus.COMPLETED
        assert asked == ["f0", "f1", "f2", "f3", "f4"]
        assert sorted(ran) == asked


async def test_an_approver_is_not_asked_about_a_call_with_invalid_arguments() -> None:
    asked: list[PendingCall] = []

    def approve(call: PendingCall) -> bool:
        asked.append(call)
        return True

    calls, _, res = await call(
        "delete_file",
        {"paths": "/tmp/x"},
        policy=Policy(rules={"delete_file": "confirm"}, approver=approve),
    )
    assert asked == [] and calls == []
    assert res.is_error and "invalid arguments" in res.content


@pytest.mark.parametrize("answer", [None, "yes", 1])
async def test_an_approver_answering_neither_true_nor_false_is_reported_as_a_bug(
    answer: object, caplog: pytest.LogCaptureFixture
) -> None:
    calls, _, res = await call(
        "delete_file",
        {"path": "/tmp/x"},
        policy=Policy(rules={"delete_file": "confirm"}, approver=lambda c: answer),  # type: ignore[arg-type,return-value]
    )
    assert calls == []
    assert res.is_error and "gave no answer" in res.content
    assert "not True or False" in caplog.text


async def test_an_approver_that_raises_is_logged_with_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(call: PendingCall) -> bool:
        raise KeyError("path")

    calls, _, res = await call(
        "delete_file",
        {"path": "/tmp/x"},
        policy=Policy(rules={"delete_file": "confirm"}, approver=broken),
    )
    assert calls == [] and res.is_error and "KeyError" in res.content
    assert "approver raised" in caplog.text and "KeyError: 'path'" in caplog.text


async def test_a_sync_approver_handing_back_a_coroutine_still_answers_one_at_a_time() -> None:
    questions = OpenQuestions()
    ask = questions.async_approver(0.05)
    ran: list[str] = []
    await run(_confirm_agent(lambda call: ask(call), ran, calls=3), "go")
    assert sorted(ran) == ["f0", "f1", "f2"]
    assert questions.most == 1


async def test_a_run_confirm_without_any_approver_says_that_none_is_configured() -> None:
    calls, _, res = await call(
        "delete_file", {"path": "/x"}, run_policy=Policy(rules={"delete_file": "confirm"})
    )
    assert calls == []
    assert res.is_error and "no approver is configured" in res.content


def test_a_tool_is_not_an_approver() -> None:
    with pytest.raises(ConfigurationError, match="approver"):
        Policy(approver=delete_tool([]))  # type: ignore[arg-type]
