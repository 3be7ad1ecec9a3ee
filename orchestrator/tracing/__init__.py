"""Tracing: the spans a run makes, and the exporters that send them somewhere.

The runtime only *uses* a tracer provider; :func:`configure_tracing` is where one gets
configured. The span helpers (:mod:`.spans`), content capture (:mod:`.content`) and bounded
flushes (:mod:`.flush`) need only the OpenTelemetry API; the exporter setup (:mod:`.setup`,
:mod:`.exporters`) loads the SDK, so its names are imported on first use: ``import
orchestrator.tracing`` stays light for programs that never trace. Saved traces are read by
:mod:`.tracefiles`, drawn by :mod:`.view` and sent later by :mod:`.export` (their
:func:`load_trace`, :func:`render_trace` and :func:`export_trace` load on first use too).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .content import CONTENT_CAPTURE_ENV as CONTENT_CAPTURE_ENV
from .content import content_capture_enabled as content_capture_enabled
from .content import content_for_span as content_for_span
from .flush import flush_tracer_provider as flush_tracer_provider

if TYPE_CHECKING:
    from .endpoints import Protocol as Protocol
    from .endpoints import resolve_otlp_endpoint as resolve_otlp_endpoint
    from .endpoints import resolve_protocol as resolve_protocol
    from .export import export_trace as export_trace
    from .exporters import OtlpJsonLinesExporter as OtlpJsonLinesExporter
    from .otlp_json import decode_otlp_json as decode_otlp_json
    from .otlp_json import encode_otlp_json as encode_otlp_json
    from .setup import DEFAULT_SERVICE_NAME as DEFAULT_SERVICE_NAME
    from .setup import TracingSetup as TracingSetup
    from .setup import configure_tracing as configure_tracing
    from .tracefiles import load_trace as load_trace
    from .view import render_trace as render_trace

__all__ = [
    "CONTENT_CAPTURE_ENV",
    "DEFAULT_SERVICE_NAME",
    "OtlpJsonLinesExporter",
    "Protocol",
    "TracingSetup",
    "configure_tracing",
    "content_capture_enabled",
    "content_for_span",
    "decode_otlp_json",
    "encode_otlp_json",
    "export_trace",
    "flush_tracer_provider",
    "load_trace",
    "render_trace",
    "resolve_otlp_endpoint",
    "resolve_protocol",
]

# name -> the module that defines it, imported on first use
_LAZY: dict[str, str] = {
    "DEFAULT_SERVICE_NAME": ".setup",
    "OtlpJsonLinesExporter": ".exporters",
    "Protocol": ".endpoints",
    "TracingSetup": ".setup",
    "configure_tracing": ".setup",
    "decode_otlp_json": ".otlp_json",
    "encode_otlp_json": ".otlp_json",
    "export_trace": ".export",
    "load_trace": ".tracefiles",
    "render_trace": ".view",
    "resolve_otlp_endpoint": ".endpoints",
    "resolve_protocol": ".endpoints",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
