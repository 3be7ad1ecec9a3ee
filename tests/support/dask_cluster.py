"""Real Dask clusters for the tests, on 127.0.0.1 only."""

from __future__ import annotations

from typing import Any

import distributed


def local_cluster(workers: int = 2) -> Any:
    """A LocalCluster of ``workers`` worker processes bound to 127.0.0.1, no dashboard."""
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=2,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
