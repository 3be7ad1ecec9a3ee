"""Compatibility path: ``orchestrator.traceview``'s names, from the modules that now own them.

Saved traces are read in :mod:`orchestrator.tracing.tracefiles`, drawn in
:mod:`orchestrator.tracing.view` and sent in :mod:`orchestrator.tracing.export`; the
``trace`` commands are in :mod:`orchestrator.cli.trace`.
"""

from __future__ import annotations

from .cli.trace import export_command as export_command
from .cli.trace import list_command as list_command
from .cli.trace import show as show
from .tracing.export import TraceExportError as TraceExportError
from .tracing.export import export_trace as export_trace
from .tracing.tracefiles import AttrValue as AttrValue
from .tracing.tracefiles import RunSummary as RunSummary
from .tracing.tracefiles import SpanEvent as SpanEvent
from .tracing.tracefiles import SpanRecord as SpanRecord
from .tracing.tracefiles import TraceFileError as TraceFileError
from .tracing.tracefiles import TraceNotFoundError as TraceNotFoundError
from .tracing.tracefiles import list_runs as list_runs
from .tracing.tracefiles import load_trace as load_trace
from .tracing.tracefiles import resolve_run as resolve_run
from .tracing.view import render_trace as render_trace

__all__ = [
    "AttrValue",
    "RunSummary",
    "SpanEvent",
    "SpanRecord",
    "TraceExportError",
    "TraceFileError",
    "TraceNotFoundError",
    "export_command",
    "export_trace",
    "list_command",
    "list_runs",
    "load_trace",
    "render_trace",
    "resolve_run",
    "show",
]
