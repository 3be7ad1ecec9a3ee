"""One exception hierarchy, rooted in :class:`OrchestratorError`.

Most failures inside a run never surface as exceptions: a tool's error becomes an ``is_error``
tool result the model can react to, and an agent that cannot go on ends with a
:class:`~orchestrator.RunStatus`. The exceptions below are for the cases a program must handle:
a definition that cannot run (raised when the agent, tool or tree is built), a failed run the
caller asked to be raised (:meth:`RunResult.raise_for_status`), and model errors that adapters
raise for the loop to turn into statuses. Every subclass is drawn here, with the module it lives
in when that is not this one (tests/core/test_errors.py checks the drawing against the code)::

    OrchestratorError
    +-- ConfigurationError (also a ValueError)   a definition that cannot run
    +-- ToolError                                a tool's own words for the model
    +-- ModelError                               a model call failed (``fatal``, ``kind``)
    |   +-- ContextWindowExceeded                the input is longer than the context window
    +-- RunFailedError                           ``RunResult.raise_for_status()``
    +-- OutputRejected                           an output validator's words for the model
    +-- ToolsetFailed                            (core.toolset) a tool source could not start
    +-- BudgetExceeded                           (core.ledger) internal: a reservation cannot fit
    +-- PricingFailed                            (core.ledger) internal: a model's cost() failed
    +-- CorpusError                              (research.results) a corpus cannot answer
    +-- TraceFileError (also a ValueError)       (tracing.tracefiles) not OTLP/JSON lines
    +-- TraceNotFoundError (also a LookupError)  (tracing.tracefiles) no saved trace matches
    +-- TraceExportError                         (tracing.export) a saved trace was not sent
    +-- ConformanceError (also an AssertionError) (_conformance) a seam broke its contract
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .messages import Usage
    from .result import RunResult

__all__ = [
    "ConfigurationError",
    "ContextWindowExceeded",
    "ModelError",
    "OrchestratorError",
    "OutputRejected",
    "RunFailedError",
    "ToolError",
]


class OrchestratorError(Exception):
    """Base class of every exception this library raises on purpose."""


class ConfigurationError(OrchestratorError, ValueError):
    """A definition (agent, tool, policy, limits, tree) that cannot run as written.

    Raised when the object is built or the tree is validated, before any model call, with a
    message naming the offending part.
    """


class OutputRejected(OrchestratorError):
    """Raise in an output validator to reject a typed answer: ``message`` (what is wrong, and
    what to do) goes back to the model, which answers again while ``Limits.output_retries``
    allows; past that the agent ends ``invalid_output``."""


class ToolError(OrchestratorError):
    """Raise inside a tool to return ``message`` to the model as an ``is_error`` result.

    Any other exception does the same, prefixed with its type; this one lets a tool phrase the
    error (and the fix) exactly as the model should read it.
    """


class ModelError(OrchestratorError):
    """A model call failed after whatever retries the adapter makes.

    ``fatal`` marks errors no agent in the tree can get past (bad key, unknown model, invalid
    request): the run ends with status ``error`` instead of letting parents spawn again.
    ``kind`` is a short machine-readable type (``rate_limit``, ``overloaded``, ``authentication``
    ...) recorded as ``error.type`` on spans. ``usage``: what the failed attempts were billed
    (complete answers the adapter could not use), counted in the run's usage and budget.

    The loop decides on the type: an input too long for the context window is a
    :class:`ContextWindowExceeded`. An adapter that maps provider errors to kinds builds its
    error with :meth:`from_kind`, which gives that class for ``kind="context_exceeded"``.
    """

    def __init__(
        self,
        message: str,
        *,
        fatal: bool = False,
        kind: str = "model_error",
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.kind = kind
        self.usage = usage

    @classmethod
    def from_kind(
        cls,
        message: str,
        *,
        kind: str,
        fatal: bool = False,
        usage: Usage | None = None,
    ) -> ModelError:
        """The error for a failure of this ``kind``: a :class:`ContextWindowExceeded` (never
        fatal) for ``"context_exceeded"``, else a :class:`ModelError` as given."""
        if kind == ContextWindowExceeded.KIND:
            return ContextWindowExceeded(message, usage=usage)
        return cls(message, fatal=fatal, kind=kind, usage=usage)


class ContextWindowExceeded(ModelError):
    """The provider refused the request because its input is longer than the model's context
    window (the agent compacts and asks again, if its context policy allows).

    Raise it directly, or build it with ``ModelError.from_kind(message, kind="context_exceeded")``
    from a provider error's kind. Its ``kind`` is ``"context_exceeded"`` and it is never fatal.
    """

    KIND = "context_exceeded"

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message, fatal=False, kind=self.KIND, usage=usage)


class RunFailedError(OrchestratorError):
    """Raised by :meth:`RunResult.raise_for_status` when a run did not complete."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(
            f"agent {result.agent_name!r} ended with {result.status.value}: {result.error}"
        )
        self.result = result

    def __reduce__(self) -> tuple[type[RunFailedError], tuple[RunResult]]:
        # rebuilt from the result, not from the message: it pickles (to a parent process) and
        # copies like any exception
        return (RunFailedError, (self.result,))


def exception_type(exc: BaseException) -> str:
    """The exception's class as OpenTelemetry's ``error.type`` wants it: a built-in by its
    name (``KeyError``), any other with its module (``httpx.ReadTimeout``), so another
    library's ``ToolError`` is not taken for ours."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
