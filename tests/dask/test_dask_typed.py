"""Typed children on a Dask cluster: a child's value crosses the wire as JSON and the parent
validates it again with its own definition; the parent's model reads the JSON, the parent
program gets an instance of its own class; a journal holds the JSON and a resume re-validates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import dask_trees as trees

from orchestrator import RunStatus, resume, run
from orchestrator.dask import DaskRunner


def runner(client: Any) -> DaskRunner:
    return DaskRunner(client, by_value=["support.dask_trees"])


async def test_a_remote_typed_childs_value_is_validated_again_by_the_parent(
    dask_client, valid_transcript
):
    here = await run(trees.TYPED_LEAD, "alpha,beta", model=trees.TYPED_MODEL)
    trees.VALIDATED_IN_MAIN.clear()
    there = await run(
        trees.TYPED_LEAD, "alpha,beta", model=trees.TYPED_MODEL, runner=runner(dask_client)
    )
    assert there.status is RunStatus.COMPLETED
    # validated in this process, once per child, after the workers had checked them there
    assert sorted(trees.VALIDATED_IN_MAIN) == ["ALPHA in a worker", "BETA in a worker"]
    for child, key in zip(there.children, ("alpha", "beta"), strict=True):
        assert type(child.output) is trees.Finding  # this process's class
        assert child.output == trees.Finding(key=key, value=f"{key.upper()} in a worker")
        assert child.output_json == child.output.model_dump_json()
        valid_transcript(child.messages)
    # the lead's model read each child's JSON as its spawn's result
    assert there.output == " | ".join(c.output_json or "" for c in there.children)
    a, b = here.to_dict(messages=True), there.to_dict(messages=True)
    assert str(a).replace("in the main", "in a worker") == str(b)


async def test_a_remote_value_the_parents_definition_rejects_ends_that_child_invalid_output(
    dask_client,
):
    result = await run(
        trees.TYPED_LEAD, "alpha,refused", model=trees.TYPED_MODEL, runner=runner(dask_client)
    )
    good, refused = result.children
    assert good.status is RunStatus.COMPLETED and isinstance(good.output, trees.Finding)
    assert refused.status is RunStatus.INVALID_OUTPUT
    assert refused.output is None and refused.output_json is None
    assert refused.error is not None
    assert "does not validate here" in refused.error
    assert "value: Value error, this value is refused in the main process" in refused.error
    # the lead's model was told the child failed, with its status
    spawn_results = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert spawn_results[1].is_error and "invalid_output" in spawn_results[1].content


async def test_a_journaled_remote_typed_child_resumes_to_the_same_value(
    dask_client, tmp_path: Path
):
    journal = tmp_path / "run.db"
    first = await run(
        trees.TYPED_LEAD,
        "alpha,beta",
        model=trees.TYPED_MODEL,
        runner=runner(dask_client),
        journal=journal,
    )
    assert first.status is RunStatus.COMPLETED
    trees.VALIDATED_IN_MAIN.clear()
    again = await resume(
        journal, agent=trees.TYPED_LEAD, model=trees.TYPED_MODEL, runner=runner(dask_client)
    )
    assert again.status is RunStatus.COMPLETED
    assert [c.output for c in again.children] == [c.output for c in first.children]
    assert all(type(c.output) is trees.Finding for c in again.children)
    # replayed from the journal's JSON, and validated again here (not run on a worker)
    assert sorted(trees.VALIDATED_IN_MAIN) == ["ALPHA in a worker", "BETA in a worker"]


async def test_every_typed_value_of_a_remote_subtree_is_validated_again_by_the_parent(
    dask_client,
):
    trees.VALIDATED_IN_MAIN.clear()
    result = await run(trees.DEEP_LEAD, "alpha", model=trees.DEEP_MODEL, runner=runner(dask_client))
    assert result.status is RunStatus.COMPLETED, result.error
    [middle] = result.children
    [worker] = middle.children  # it ran on the worker too, under its remote parent
    # both values validated again in this process (before the Findings built below)
    assert trees.VALIDATED_IN_MAIN == ["ALPHA in a worker", "ALPHA in a worker"]
    assert middle.output == trees.Finding(key="middle of alpha", value="ALPHA in a worker")
    assert worker.output == trees.Finding(key="alpha", value="ALPHA in a worker")
    assert type(middle.output) is type(worker.output) is trees.Finding


async def test_a_remote_text_childs_validators_run_where_it_runs_and_its_parent_gets_the_verdict(
    dask_client,
):
    result = await run(
        trees.TEXT_LEAD, "alpha,never", model=trees.TEXT_MODEL, runner=runner(dask_client)
    )
    assert result.status is RunStatus.COMPLETED, result.error
    good, never = result.children
    # rejected once on the worker, asked again there, the validator's changed text kept
    assert good.status is RunStatus.COMPLETED and good.turns == 2
    assert good.output == "found alpha (checked in a worker)"
    assert never.status is RunStatus.INVALID_OUTPUT
    assert "rejected 3 times" in (never.error or "")
    # the lead's model read the good answer, and the other as a failed child's envelope
    first, second = [b for m in result.messages for b in m.content if b.type == "tool_result"]
    assert not first.is_error and first.content == good.output
    assert second.is_error and "invalid_output" in second.content
