"""Compatibility path: the same names as :mod:`orchestrator.tracing.view`, where they now live."""

from __future__ import annotations

from .tracing.view import AttrValue as AttrValue
from .tracing.view import RunSummary as RunSummary
from .tracing.view import SpanEvent as SpanEvent
from .tracing.view import SpanRecord as SpanRecord
from .tracing.view import TraceExportError as TraceExportError
from .tracing.view import TraceFileError as TraceFileError
from .tracing.view import TraceNotFoundError as TraceNotFoundError
from .tracing.view import export_command as export_command
from .tracing.view import export_trace as export_trace
from .tracing.view import list_command as list_command
from .tracing.view import list_runs as list_runs
from .tracing.view import load_trace as load_trace
from .tracing.view import render_trace as render_trace
from .tracing.view import resolve_run as resolve_run
from .tracing.view import show as show

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
