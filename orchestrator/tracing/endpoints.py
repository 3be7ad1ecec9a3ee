"""Where OTLP traces go: the endpoint URL and the protocol, from the arguments and the standard
``OTEL_EXPORTER_OTLP_*`` variables.

Shared by :func:`~.setup.configure_tracing` (live export) and :func:`~.export.export_trace` (a
saved run sent later), so both read the variables alike. Needs no SDK.
"""

from __future__ import annotations

import os
from typing import Final, Literal
from urllib.parse import urlsplit

from ..core.errors import ConfigurationError

__all__ = [
    "DEFAULT_GRPC_ENDPOINT",
    "DEFAULT_HTTP_ENDPOINT",
    "Protocol",
    "resolve_otlp_endpoint",
    "resolve_protocol",
    "traces_url",
]

Protocol = Literal["grpc", "http/protobuf"]

_PROTOCOLS: Final[tuple[Protocol, ...]] = ("http/protobuf", "grpc")
DEFAULT_HTTP_ENDPOINT: Final = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT: Final = "http://localhost:4317"
_TRACES_PATH: Final = "/v1/traces"


def resolve_protocol(protocol: str | None = None) -> Protocol:
    """The OTLP protocol: the argument, else the traces-specific variable, else the general one.

    Raises :class:`~orchestrator.errors.ConfigurationError` for anything but ``grpc`` and
    ``http/protobuf``: the Python exporters cannot send ``http/json``, and silently sending
    something else to a collector that expects it would lose the whole trace.
    """
    raw = (
        (
            protocol
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        )
        .strip()
        .lower()
    )
    for known in _PROTOCOLS:
        if raw == known:
            return known
    raise ConfigurationError(f"unsupported OTLP protocol {raw!r}: use 'http/protobuf' or 'grpc'")


def traces_url(base: str, *, always_append: bool) -> str:
    """An OTLP/HTTP traces URL from a base URL.

    The spec says ``OTEL_EXPORTER_OTLP_ENDPOINT`` always gets ``/v1/traces`` appended; for an
    explicit endpoint (``--endpoint``) we append it only when the URL has no path, so both
    ``http://host:4318`` and ``http://host:4318/v1/traces`` do what the user meant.
    """
    if "://" not in base:
        base = "http://" + base
    path = urlsplit(base).path
    if always_append or path in ("", "/"):
        return base.rstrip("/") + _TRACES_PATH
    return base


def resolve_otlp_endpoint(endpoint: str | None = None, protocol: str | None = None) -> str | None:
    """Where OTLP traces go, or ``None`` when nothing names an endpoint.

    Precedence: the argument, then ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used exactly as
    given, per the spec), then ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL). For HTTP the result
    is the full ``.../v1/traces`` URL; for gRPC it is the URL as given (the exporter keeps only
    host and port, and takes ``http://`` to mean plaintext).
    """
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not (endpoint or traces or base):
        return None  # the protocol variable matters only where something is sent
    http = resolve_protocol(protocol) == "http/protobuf"
    if endpoint:
        return traces_url(endpoint, always_append=False) if http else endpoint
    if traces:  # as given, but a bare host:port means plain HTTP as it does for the base URL
        return "http://" + traces if http and "://" not in traces else traces
    return traces_url(base, always_append=True) if http else base
