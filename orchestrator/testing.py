"""Helpers for users' own test suites: scripted models, swapping a tree's models, recording spans.

- ``ScriptedModel`` answers from a list of steps (or one list per agent name), ``FunctionModel``
  from a function of the request; ``text``, ``tool_call`` and ``response`` build the steps (the
  same objects as in :mod:`orchestrator.models`).
- :func:`replace_models` gives a copy of a tree in which every agent uses one model, whatever
  its definition names (``run(model=...)`` is only the default for agents that name none).
- :func:`check_journal` and :func:`check_runner` are the seams' conformance kits: they run the
  contract of a :class:`~orchestrator.Journal` or a :class:`~orchestrator.ChildRunner` of your
  own against it and raise :class:`ConformanceError` naming what broke (docs/runners.md).
- :class:`SpanRecorder` collects a run's finished spans in memory (pass its
  ``tracer_provider`` to ``run()``); :func:`recording_spans` is it as a context manager, and the
  ``orchestrator_spans`` pytest fixture hands one to a test (enable it with
  ``pytest_plugins = ["orchestrator.testing"]`` in a ``conftest.py``).

The library never imports this module; it loads the OpenTelemetry SDK only when a recorder is
made, and pytest only when pytest is the one importing it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .models.scripted import FunctionModel as FunctionModel
from .models.scripted import ScriptedModel as ScriptedModel
from .models.scripted import Step as Step
from .models.scripted import final as final
from .models.scripted import response as response
from .models.scripted import text as text
from .models.scripted import tool_call as tool_call

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    from ._conformance import ConformanceError as ConformanceError
    from .core.agent import Agent
    from .core.journal import Journal
    from .core.runner import ChildRunner
    from .models.base import Model

__all__ = [
    "ConformanceError",
    "FunctionModel",
    "ScriptedModel",
    "SpanRecorder",
    "Step",
    "check_journal",
    "check_runner",
    "final",
    "recording_spans",
    "replace_models",
    "response",
    "text",
    "tool_call",
]


def check_journal(make_journal: Callable[[str], Journal]) -> None:
    """Run the journal seam's contract against ``make_journal(name)`` (a journal named
    ``name``: empty the first time, the same record reopened after): values read back, a run
    replays from it, a call in flight at a stop is never run twice. Raises
    :class:`ConformanceError` naming the first check that fails. Call it from a plain (sync)
    test: it runs trio itself."""
    from ._conformance import check_journal as check

    check(make_journal)


def check_runner(make_runner: Callable[[], ChildRunner]) -> None:
    """Run the child seam's contract against the runners ``make_runner()`` makes: the same
    result tree and events as in process, a resumed run replays its children, cancelling
    reaches them, their spending is settled on the run's budget, their failures are error
    results. Raises :class:`ConformanceError` naming the first check that fails. Call it from
    a plain (sync) test: it runs trio itself."""
    from ._conformance import check_runner as check

    check(make_runner)


def __getattr__(name: str) -> Any:
    if name == "ConformanceError":  # with the kits, on first use
        from ._conformance import ConformanceError

        return ConformanceError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def replace_models(agent: Agent, model: Model | str) -> Agent:
    """A copy of the tree ``agent`` in which every agent uses ``model`` (a ``ScriptedModel``, a
    ``FunctionModel``, ``"offline"``...), whatever model its definition names. The definitions
    themselves are unchanged (agents are immutable). Use it to run a production tree in a test:
    ``run(tree, prompt, model=m)`` alone would only fill in agents that name no model."""
    return agent.map_tree(lambda a: a.replace(model=model))


class SpanRecorder:
    """A tracer provider of its own that keeps every finished span in memory.

    ``await run(tree, prompt, tracer_provider=recorder.tracer_provider)``, then look at
    :attr:`spans` (OpenTelemetry SDK ``ReadableSpan`` objects, in the order they ended),
    :meth:`names`, :meth:`named` or :meth:`attributes`. Spans are exported synchronously, so they
    are all there when ``run()`` returns. :meth:`close` shuts the provider down.
    """

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self._exporter = InMemorySpanExporter()
        self.tracer_provider: TracerProvider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self._exporter))

    @property
    def spans(self) -> list[ReadableSpan]:
        """Every finished span so far, in the order they ended."""
        return list(self._exporter.get_finished_spans())

    def names(self) -> list[str]:
        """The finished spans' names (``invoke_agent lead``, ``chat offline``, ...)."""
        return [s.name for s in self.spans]

    def named(self, prefix: str) -> list[ReadableSpan]:
        """The spans whose name is ``prefix`` or starts with ``prefix`` and a space
        (``named("execute_tool")``, ``named("invoke_agent researcher")``)."""
        return [s for s in self.spans if s.name == prefix or s.name.startswith(prefix + " ")]

    def attributes(self, name: str) -> dict[str, Any]:
        """The attributes of the one span called ``name`` (an error if there are none or many)."""
        found = [s for s in self.spans if s.name == name]
        if len(found) != 1:
            raise LookupError(f"{len(found)} spans are named {name!r}: {self.names()}")
        return dict(found[0].attributes or {})

    def clear(self) -> None:
        """Forget the spans recorded so far."""
        self._exporter.clear()

    def close(self) -> None:
        """Shut the provider down (spans already recorded stay readable)."""
        self.tracer_provider.shutdown()


@contextmanager
def recording_spans() -> Iterator[SpanRecorder]:
    """``with recording_spans() as spans: ...``: a :class:`SpanRecorder`, closed afterwards."""
    recorder = SpanRecorder()
    try:
        yield recorder
    finally:
        recorder.close()


if "pytest" in sys.modules:  # loaded as a pytest plugin (or from a test): offer the fixture
    import pytest

    @pytest.fixture
    def orchestrator_spans() -> Iterator[SpanRecorder]:
        """A :class:`SpanRecorder` for one test: pass ``orchestrator_spans.tracer_provider``
        to ``run()``, then assert on ``orchestrator_spans.spans``."""
        with recording_spans() as recorder:
            yield recorder
