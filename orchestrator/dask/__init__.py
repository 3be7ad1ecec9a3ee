"""Children on a Dask cluster: :class:`DaskRunner` (optional extra ``orchestrator[dask]``).

``run(agent, prompt, runner=DaskRunner("tcp://scheduler:8786"))`` runs every child at
``depth`` (1: the root's children) as a task on a Dask distributed cluster, with its whole
subtree. The package plugs into the child seam only (``core/runner.py``: the spec, the
parent's side, the run's side) and, on the worker, :func:`~orchestrator.core.host.host_child`:
``_runner.py`` is the runner, ``_worker.py`` the task, ``_wire.py`` what crosses the wire and
``_spans.py`` the remote spans. See docs/distributed.md.
"""

from __future__ import annotations

from ._runner import DaskRunner, parse_address

__all__ = ["DaskRunner", "parse_address"]
