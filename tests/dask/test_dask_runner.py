"""DaskRunner on a real LocalCluster (two worker processes on 127.0.0.1): the same results as
in process, budgets, the deadline and cancellation across processes, one trace, faults."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import dask_trees as trees
from support.dask_cluster import local_cluster

import orchestrator
from orchestrator import Agent, ConfigurationError, Limits, RunStatus, open_run, run, tool
from orchestrator.core.events import AgentFinished, AgentStarted, ToolStarted
from orchestrator.core.ledger import OVERSHOOT_ALLOWANCE
from orchestrator.dask import DaskRunner, parse_address
from orchestrator.models import FunctionModel, text, tool_call


def runner(client: Any, **options: Any) -> DaskRunner:
    return DaskRunner(client, by_value=["support.dask_trees"], **options)


def comparable(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = result.to_dict(messages=True)
    return out


@pytest.mark.parametrize("model", ["scripted", "function"])
async def test_the_result_tree_equals_the_in_process_runs(dask_client, model, valid_transcript):
    m = trees.scripted(3) if model == "scripted" else trees.FUNCTION_MODEL
    # the default budget: an explicit one adds a "[budget left: ...]" note to each spawn's
    # result, whose figure depends on when each runner settles its children's spending
    limits = Limits(max_turns=10)
    here = await run(trees.LEAD, "go", model=m, limits=limits)
    there = await run(trees.LEAD, "go", model=m, limits=limits, runner=runner(dask_client))
    assert there.status is RunStatus.COMPLETED
    # the tools ran on workers: the only difference is where the lookups say they ran
    a, b = comparable(here), comparable(there)
    assert str(a).replace("in the main", "in a worker") == str(b)
    assert "in a worker" in str(b)
    assert there.usage == here.usage
    for r in there.walk():
        valid_transcript(r.messages)


async def test_a_child_deeper_than_the_runners_depth_runs_in_its_remote_parent(dask_client):
    lead = Agent("lead", "l", subagents=["lead"], tools=[trees.lookup], limits=Limits(max_depth=2))

    def recurse(request: Any) -> Any:
        if len(request.messages) == 1 and request.agent.depth < 2:
            return tool_call("spawn_subagent", {"agent": "lead", "task": "deeper"})
        return text(f"at depth {request.agent.depth}")

    model = FunctionModel(recurse)
    here = await run(lead, "go", model=model)
    there = await run(lead, "go", model=model, runner=runner(dask_client, depth=1))
    assert comparable(here) == comparable(there)
    assert [r.path for r in there.walk()] == ["lead", "lead/lead#1", "lead/lead#1/lead#1"]
    # depth=2: the root's child runs here and sends its own child to the cluster
    deeper = await run(lead, "go", model=model, runner=runner(dask_client, depth=2))
    assert comparable(deeper) == comparable(here)


async def test_parallel_remote_children_hold_the_token_budget_together(dask_client):
    budget = 6_000
    limits = Limits(token_budget=budget)
    lead = trees.LEAD.map_tree(lambda a: a.replace(max_output_tokens=200))
    result = await run(
        lead, "go", model=trees.lookups(40), limits=limits, runner=runner(dask_client)
    )
    spent = result.usage.input_tokens + result.usage.output_tokens
    assert spent <= budget * (1 + OVERSHOOT_ALLOWANCE)
    statuses = [c.status for c in result.children]
    assert len(statuses) == 4
    assert RunStatus.BUDGET_EXCEEDED in statuses
    total = result.own_usage
    for r in list(result.walk())[1:]:
        total = total + r.own_usage
    assert result.usage == total


async def test_the_runs_deadline_holds_on_workers(dask_client):
    started = time.monotonic()
    result = await run(
        trees.LEAD,
        "go",
        model=trees.waiting(30),
        limits=Limits(timeout=2),
        runner=runner(dask_client),
    )
    took = time.monotonic() - started
    assert result.status is RunStatus.TIMEOUT
    assert took < 20  # the 2 s deadline, not the workers' 30 s waits (whatever the load)
    assert [c.status for c in result.children] == [RunStatus.TIMEOUT, RunStatus.TIMEOUT]
    assert all("deadline" in (c.error or "") for c in result.children)


async def test_cancelling_reaches_remote_children_at_once(dask_client, valid_transcript):
    async with open_run(
        trees.LEAD, "go", model=trees.waiting(30), runner=runner(dask_client)
    ) as handle:
        waiting: set[str] = set()
        with trio.fail_after(60):  # both are waiting in their tool on a worker
            async for event in handle.events:
                if isinstance(event, ToolStarted) and event.tool == "wait":
                    waiting.add(event.path)
                    if len(waiting) == 2:
                        break
        cancelled_at = time.monotonic()
        handle.cancel()
        result = await handle.result()
        took = time.monotonic() - cancelled_at
    assert took < 15, took  # well before the 30 s waits would have ended, whatever the load
    assert result.status is RunStatus.CANCELLED
    assert [c.status for c in result.children] == [RunStatus.CANCELLED, RunStatus.CANCELLED]
    for c in result.children:
        valid_transcript(c.messages)
        assert c.messages[-1].content[0].type == "tool_result"  # the cut wait, answered


async def test_remote_spans_land_in_the_runs_trace_under_their_spawn_spans(dask_client):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = await run(
        trees.LEAD,
        "go",
        model=trees.scripted(2),
        runner=runner(dask_client),
        tracer_provider=provider,
    )
    assert result.status is RunStatus.COMPLETED
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    by_id = {s.context.span_id: s for s in spans}
    remote = [s for s in spans if s.name == "invoke_agent worker"]
    assert len(remote) == 2
    for s in remote:
        spawn = by_id[s.parent.span_id]
        assert spawn.name == "execute_tool spawn_subagent"
        assert (
            spawn.attributes["orchestrator.spawn.agent_path"]
            == s.attributes["orchestrator.agent.path"]
        )
    # the workers' own model and tool calls, each under its agent
    chats = [
        s
        for s in spans
        if s.name.startswith("chat") and s.attributes.get("gen_ai.agent.name") == "worker"
    ]
    assert len(chats) == 4
    for s in spans:  # every span's parent is in the trace (the root's excepted)
        if s.parent is not None:
            assert s.parent.span_id in by_id, s.name


async def test_a_tree_that_cannot_be_pickled_is_refused_before_any_model_call(dask_client):
    lock = threading.Lock()

    @tool
    def locked(key: str) -> str:
        """Holds a lock."""
        with lock:
            return key

    calls = []

    def model(request: Any) -> Any:
        calls.append(request)
        return text("x")

    lead = Agent("lead", "l", subagents=[Agent("w", "w", tools=[locked])])
    with pytest.raises(ConfigurationError, match="tool 'locked' of agent 'w'"):
        await run(lead, "go", model=FunctionModel(model), runner=runner(dask_client))
    assert calls == []


async def test_an_unreachable_scheduler_is_a_one_line_error():
    with pytest.raises(ConfigurationError) as info:
        await run(
            trees.LEAD,
            "go",
            model=trees.scripted(1),
            runner=DaskRunner("tcp://127.0.0.1:9", connect_timeout=1),
        )
    message = str(info.value)
    assert "cannot connect to the Dask scheduler at tcp://127.0.0.1:9" in message
    assert "\n" not in message


@pytest.mark.parametrize("bad", ["127.0.0.1:8786", "local:0", "local:x", "ftp://h:1", "local:"])
def test_bad_addresses_are_refused_in_one_line(bad):
    with pytest.raises(ConfigurationError) as info:
        parse_address(bad)
    assert "\n" not in str(info.value)


def test_good_addresses_parse():
    assert parse_address("local:3") == ("local", 3)
    assert parse_address("tcp://10.0.0.1:8786") == ("tcp://10.0.0.1:8786", 0)
    assert parse_address("tls://sched:8786") == ("tls://sched:8786", 0)


def test_a_killed_worker_loses_its_child_which_never_runs_twice(tmp_path: Path):
    cluster = local_cluster()
    import distributed

    client = distributed.Client(cluster, set_as_default=False)
    log = tmp_path / "died.log"
    lived_file = tmp_path / "lived"  # the sibling's result is in: now its worker may die

    def pick(request: Any) -> Any:
        if request.agent.name == "lead":
            return text("carried on") if len(request.messages) > 1 else trees.spawns("die", "live")
        task = request.messages[0].content[0].text
        if len(request.messages) == 1:
            if task == "die":
                return tool_call("die", {"log": str(log), "after": str(lived_file)})
            return tool_call("lookup", {"key": "k"})
        return text("lived")

    async def main() -> Any:
        model = FunctionModel(pick)
        async with open_run(trees.LEAD, "go", model=model, runner=runner(client)) as handle:
            async for event in handle.events:  # until the run ends
                if isinstance(event, AgentFinished) and event.path == "lead/worker#2":
                    lived_file.write_text("finished")
            return await handle.result()

    try:
        started = time.monotonic()
        result = trio.run(main)
        took = time.monotonic() - started
    finally:
        client.close()
        cluster.close()
    assert result.status is RunStatus.COMPLETED
    died, lived = result.children
    assert died.status is RunStatus.ERROR
    assert "worker lost" in (died.error or "")
    assert lived.status is RunStatus.COMPLETED
    assert len(log.read_text().splitlines()) == 1  # the scheduler's re-run did not run it
    assert took < 120  # not held until the run's 900 s deadline by the child that was lost


async def test_remote_agents_events_reach_the_runs_event_stream(dask_client):
    from orchestrator.core.events import AgentFinished, ToolStarted, TurnStarted

    seen: list[Any] = []
    async with open_run(trees.LEAD, "go", model=trees.scripted(2), runner=runner(dask_client)) as h:
        async for event in h.events:
            seen.append(event)
        result = await h.result()
    assert result.status is RunStatus.COMPLETED
    remote = {"lead/worker#1", "lead/worker#2"}
    started = [e.path for e in seen if isinstance(e, AgentStarted)]
    assert sorted(started) == ["lead", *sorted(remote)]  # each once
    finished = [e.path for e in seen if isinstance(e, AgentFinished)]
    assert sorted(finished) == ["lead", *sorted(remote)]
    tools = {(e.path, e.tool) for e in seen if isinstance(e, ToolStarted)}
    assert {(p, "lookup") for p in remote} <= tools
    turns = {e.path for e in seen if isinstance(e, TurnStarted)}
    assert remote <= turns


def test_workers_running_another_orchestrator_version_are_refused(tmp_path: Path):
    import distributed

    # a worker process whose orchestrator says it is another version (set before any task)
    skew = tmp_path / "skew.py"
    skew.write_text("import orchestrator.dask._worker as w\nw.__version__ = '0.0.1-other'\n")
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        preload=[str(skew)],
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        with pytest.raises(ConfigurationError) as info:
            trio.run(lambda: run(trees.LEAD, "go", model=trees.scripted(1), runner=runner(client)))
    finally:
        client.close()
        cluster.close()
    message = str(info.value)
    assert f"runs orchestrator 0.0.1-other, this process {orchestrator.__version__}" in message
    assert "\n" not in message


async def test_remote_agents_approvals_are_asked_in_the_parents_process(dask_client):
    from orchestrator import Policy

    policy = Policy({"lookup": "confirm"}, approver=trees.approve)
    model = trees.ScriptedModel(
        {
            "lead": [trees.spawns("yes", "no"), text("done")],
            "worker": [
                tool_call("lookup", {"key": "k"}),
                tool_call("lookup", {"key": "no"}),
                text("ok"),
            ],
        }
    )
    trees.ASKED.clear()
    here = await run(trees.LEAD, "go", model=model, policy=policy)
    asked_here = sorted(trees.ASKED)
    trees.ASKED.clear()
    there = await run(trees.LEAD, "go", model=model, policy=policy, runner=runner(dask_client))
    assert sorted(trees.ASKED) == asked_here  # asked here, in this process, about the same calls
    assert {path for _, path, _ in trees.ASKED} == {"lead/worker#1", "lead/worker#2"}
    assert all(main for _, _, main in trees.ASKED)
    assert str(comparable(here)).replace("in the main", "in a worker") == str(comparable(there))
    declined = [
        b
        for c in there.children
        for m in c.messages
        for b in m.content
        if b.type == "tool_result" and b.is_error
    ]
    assert len(declined) == 2  # each worker's lookup of "no"


NO_GUARD = """
from orchestrator import Agent, run_sync
from orchestrator.dask import DaskRunner
from orchestrator.models import ScriptedModel, text

agent = Agent("root", "Answer.", model=ScriptedModel([text("done")]))
print(run_sync(agent, "go", runner=DaskRunner("local:1")).status)
"""


def test_a_script_without_the_main_guard_is_told_to_add_it_before_any_worker_starts(
    tmp_path: Path,
) -> None:
    script = tmp_path / "tree.py"
    script.write_text(NO_GUARD)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("orchestrator.core.errors.ConfigurationError: DaskRunner('local:1')")
    assert "no 'if __name__ == \"__main__\":' guard" in last and str(script) in last
    assert "Nanny" not in done.stderr  # refused before Dask started anything
    # with the guard the same script runs
    body = "\n".join("    " + line for line in NO_GUARD.strip().splitlines()[-2:])
    guarded = NO_GUARD.strip().rsplit("\n", 2)[0] + '\n\nif __name__ == "__main__":\n' + body
    script.write_text(guarded + "\n")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("completed")
