"""The Dask runner passes the child seam's conformance kit, on a real LocalCluster."""

from __future__ import annotations

from typing import Any

from orchestrator.dask import DaskRunner
from orchestrator.testing import check_runner


def test_the_dask_runner_passes_the_runner_kit(dask_client: Any) -> None:
    # every child at depth 1 runs on a worker process (the kit's trees are importable there)
    check_runner(lambda: DaskRunner(dask_client))
