"""What crosses the wire to a Dask worker, and how: cloudpickle, with the definitions rebuilt.

Definitions are immutable objects (:class:`~orchestrator.Agent` refuses ``setattr``), so plain
pickling cannot rebuild them: :func:`dumps` reduces an agent to its fields, and the worker builds
it again (a :class:`~orchestrator.Tool` pickles itself as its function and options). A tool's function, a model and ``deps`` travel as cloudpickle sends them: by
reference when their module is importable on the worker, by value for ``__main__`` and for the
modules named in ``by_value`` (a tree file the CLI loaded is one: nobody installed it there).

Nothing that cannot be pickled may go: :func:`check_picklable` names the first such object
before the run's first model call.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections import ChainMap
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, ClassVar

import cloudpickle  # type: ignore[import-untyped, unused-ignore]

from .. import Agent, ConfigurationError

__all__ = ["by_value", "check_picklable", "dumps", "loads"]


def _rebuild_agent(state: dict[str, Any]) -> Agent:
    agent = object.__new__(Agent)
    for name, value in state.items():
        object.__setattr__(agent, name, value)
    return agent


def _reduce_agent(agent: Agent) -> tuple[Callable[..., Agent], tuple[Any, ...]]:
    state = {name: getattr(agent, name) for name in Agent.__slots__}
    return _rebuild_agent, (state,)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
        {Agent: _reduce_agent},
        cloudpickle.Pickler.dispatch_table,
    )


def dumps(value: Any) -> bytes:
    """``value`` pickled for a worker (definitions reduced to their constructors' arguments)."""
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


def loads(data: bytes) -> Any:
    """The inverse of :func:`dumps` (on the worker)."""
    return pickle.loads(data)


def by_value(modules: Iterable[ModuleType | str]) -> None:
    """Have cloudpickle send these modules' functions and classes by value (their source need
    not be installed on the workers). A name not imported in this process is skipped."""
    for module in modules:
        found = sys.modules.get(module) if isinstance(module, str) else module
        if found is None:
            continue
        if found.__name__ not in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.register_pickle_by_value(found)


def check_picklable(named: Iterable[tuple[str, Any]]) -> None:
    """Raise :class:`ConfigurationError` naming the first of ``named`` (label, object) that
    cannot be pickled for a worker."""
    for label, value in named:
        try:
            dumps(value)
        except Exception as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigurationError(
                f"{label} cannot be sent to a Dask worker ({type(exc).__name__}: {reason}); "
                "children run there need definitions, models and deps that pickle "
                "(no open clients, locks or sockets)"
            ) from None
