"""The runtime: definitions, the agent loop, tools, limits, spawning, runs.

Imports trio, pydantic and the OpenTelemetry API only (plus the Model protocol in
:mod:`orchestrator.models.base` and the span helpers in :mod:`orchestrator.tracing.spans`);
never the command line, the research application, a provider SDK or the OpenTelemetry SDK.
The public names are re-exported by :mod:`orchestrator`.
"""
