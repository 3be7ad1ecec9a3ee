"""A real Dask cluster for the tests: a LocalCluster of two worker processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import distributed
import pytest
from support.dask_cluster import local_cluster


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    """One cluster for the session (the tests that kill workers make their own)."""
    cluster = local_cluster()
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
