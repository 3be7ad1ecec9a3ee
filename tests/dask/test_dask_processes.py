"""The shape of a real cluster: ``dask scheduler`` and two ``dask worker`` processes started on
their own (127.0.0.1 only), the runner given the scheduler's address."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import dask_trees as trees

from orchestrator import Limits, RunStatus, run
from orchestrator.dask import DaskRunner

DASK = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))


@pytest.fixture(scope="module")
def scheduler_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("dask")
    info = folder / "scheduler.json"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [
                DASK,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(info),
            ],
            **quiet,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() or not info.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.05)
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        DASK,
                        "worker",
                        "--scheduler-file",
                        str(info),
                        "--host",
                        "127.0.0.1",
                        "--nthreads",
                        "2",
                        "--no-dashboard",
                        "--no-nanny",  # one process each: stopped by its pid
                    ],
                    **quiet,
                )
            )
        address = json.loads(info.read_text())["address"]
        import distributed

        with distributed.Client(address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def test_a_tree_runs_on_separately_started_scheduler_and_workers(scheduler_address):
    assert scheduler_address.startswith("tcp://127.0.0.1:")
    # the default budget: an explicit one adds a "[budget left: ...]" note to each spawn's
    # result, whose figure depends on when each runner settles its children's spending
    limits = Limits(max_turns=10)
    model = trees.scripted(4)
    here = await run(trees.LEAD, "go", model=model, limits=limits)
    runner = DaskRunner(scheduler_address, by_value=["support.dask_trees"])
    there = await run(trees.LEAD, "go", model=model, limits=limits, runner=runner)
    assert there.status is RunStatus.COMPLETED
    # (the workers run without a nanny: their lookups too say they ran in a main process)
    assert here.to_dict(messages=True) == there.to_dict(messages=True)
    import distributed

    with distributed.Client(scheduler_address, set_as_default=False) as client:
        cached = client.run(trees.runs_cached)
    assert len(cached) == 2 and sum(cached.values()) >= 1  # the children ran on the workers
    b = there.to_dict(messages=True)
    # the runner opened its own client for the run and closed it at the end
    again = await run(trees.LEAD, "go", model=model, limits=limits, runner=runner)
    assert again.to_dict(messages=True) == b
