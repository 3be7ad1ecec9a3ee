"""A journaled run with remote children: a remote child's whole result tree is on record, so a
resume replays it instead of running it on a worker again."""

from __future__ import annotations

from pathlib import Path

from support import dask_trees as trees

from orchestrator import RunStatus, resume, run
from orchestrator.dask import DaskRunner


async def test_resume_replays_a_remote_childs_recorded_tree_without_running_it(
    dask_client, tmp_path: Path
):
    log, flag, journal = tmp_path / "notes.log", tmp_path / "up", tmp_path / "run.db"
    model = trees.flaky_lead(str(log), str(flag))
    runner = DaskRunner(dask_client, by_value=["support.dask_trees"])
    first = await run(trees.NOTING_LEAD, "go", model=model, journal=journal, runner=runner)
    assert first.status is RunStatus.ERROR  # the lead's second call failed
    assert first.children[0].status is RunStatus.COMPLETED
    assert log.read_text() == "ran\n"
    flag.touch()
    again = await resume(journal, agent=trees.NOTING_LEAD, model=model, runner=runner)
    assert again.status is RunStatus.COMPLETED
    assert again.output == "resumed and done"
    assert log.read_text() == "ran\n"  # the worker's tool did not run again
    [child] = again.children
    assert child.status is RunStatus.COMPLETED and child.output == "noted once"
    assert child.to_dict(messages=True) == first.children[0].to_dict(messages=True)
    assert again.usage.input_tokens > first.children[0].usage.input_tokens


async def test_a_remote_child_cut_by_a_cancellation_is_replayed_as_cut_on_resume(
    dask_client, tmp_path: Path
):
    import time

    import trio

    from orchestrator import open_run
    from orchestrator.core.events import ToolStarted

    journal = tmp_path / "run.db"
    model = trees.waiting(30)
    runner = DaskRunner(dask_client, by_value=["support.dask_trees"])
    async with open_run(trees.LEAD, "go", model=model, journal=journal, runner=runner) as h:
        waiting: set[str] = set()
        with trio.fail_after(60):  # both children are in their 30 s wait on a worker
            async for event in h.events:
                if isinstance(event, ToolStarted) and event.tool == "wait":
                    waiting.add(event.path)
                    if len(waiting) == 2:
                        break
        h.cancel()
        first = await h.result()
    assert [c.status for c in first.children] == [RunStatus.CANCELLED] * 2
    began = time.monotonic()
    again = await resume(journal, agent=trees.LEAD, model=model, runner=runner)
    assert time.monotonic() - began < 20  # the 30 s waits did not run again
    assert again.status is RunStatus.COMPLETED
    assert [c.to_dict(messages=True) for c in again.children] == [
        c.to_dict(messages=True) for c in first.children
    ]
