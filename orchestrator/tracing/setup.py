"""``configure_tracing()``: span export set up once, from its arguments and the ``OTEL_*``
variables (service name, endpoint, protocol, ``OTEL_TRACES_EXPORTER``).

:func:`run <orchestrator.run>` only ever *uses* a tracer provider; the CLI, or a program that
wants traces, configures one here: OTLP to a collector, the console, or, with no endpoint and a
runs folder or file named, OTLP/JSON lines that ``orchestrator trace`` draws and sends later.
:class:`TracingSetup` finishes it: flush and shutdown are bounded (a dead collector must not hang
exit, and the SDK's ``force_flush`` ignores its timeout), and lost spans are counted, not only
logged. Imports the SDK: ``orchestrator.tracing`` loads this module on first use of its names.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from ..core.errors import ConfigurationError
from .endpoints import (
    DEFAULT_GRPC_ENDPOINT,
    DEFAULT_HTTP_ENDPOINT,
    Protocol,
    resolve_otlp_endpoint,
    resolve_protocol,
    traces_url,
)
from .exporters import (
    CountingExporter,
    OtlpJsonLinesExporter,
    SpanPipe,
    dispatch_for,
    otlp_exporter,
)
from .flush import run_bounded

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

__all__ = ["DEFAULT_SERVICE_NAME", "TracingSetup", "configure_tracing"]

_logger = logging.getLogger("orchestrator.tracing")

DEFAULT_SERVICE_NAME: Final = "orchestrator"
# What a trace file has left at shutdown is mostly encoding work, which a full queue makes
# seconds of, not a network that may be dead: unless the caller gives a timeout, it gets this
# long to drain instead of the export timeout.
_FILE_SHUTDOWN_LIMIT: Final = 15.0


def _selected_exporters() -> tuple[set[str], bool]:
    """``OTEL_TRACES_EXPORTER`` as a set of names, and whether the variable was set at all."""
    raw = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not raw:
        return set(), False
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = names - {"otlp", "console", "none"}
    if unknown:
        _logger.warning(
            "OTEL_TRACES_EXPORTER: ignoring unsupported exporter(s) %s", ", ".join(sorted(unknown))
        )
    return names - unknown, True


def _shutdown_at_exit(provider: TracerProvider, timeout: float) -> None:
    run_bounded(provider.shutdown, timeout, "trace provider shutdown")


def _is_global(provider: TracerProvider) -> bool:
    from opentelemetry import trace

    return trace.get_tracer_provider() is provider


# --------------------------------------------------------------------------------------------
# The setup object and configure_tracing().


class TracingSetup:
    """What :func:`configure_tracing` built, and the handles to finish it properly.

    Attributes:
        tracer_provider: the provider spans go through (pass it to ``run()`` or rely on the
            global one, which ``configure_tracing`` sets unless given a provider).
        trace_file: the OTLP/JSON lines file, when spans are written locally.
        endpoint: the OTLP URL spans are sent to, when they are.
        protocol: ``grpc`` or ``http/protobuf`` when exporting over OTLP.
        exporters: the exporters in use, e.g. ``("otlp",)``, ``("file",)`` or ``()``.
        export_timeout: the per-request timeout, and the default bound for flush and shutdown.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider,
        owns_provider: bool,
        processors: Sequence[SpanPipe],
        trace_file: Path | None,
        endpoint: str | None,
        protocol: Protocol | None,
        export_timeout: float,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.trace_file = trace_file
        self.endpoint = endpoint
        self.protocol = protocol
        self.export_timeout = export_timeout
        self.exporters = tuple(p.counter.kind for p in processors)
        self._owns_provider = owns_provider
        self._processors = tuple(processors)
        self._shut_down = False
        self._shutdown_lock = threading.Lock()
        atexit.register(self.shutdown)

    def __enter__(self) -> TracingSetup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """``with configure_tracing() as setup:`` shuts down (bounded) on the way out."""
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"TracingSetup(exporters={self.exporters!r}, endpoint={self.endpoint!r}, "
            f"trace_file={self.trace_file!r})"
        )

    @property
    def ended_spans(self) -> int:
        """Sampled spans that ended and reached our processors (counted once per exporter)."""
        return sum(p.ended for p in self._processors)

    @property
    def exported_spans(self) -> int:
        """Spans the exporters delivered (the collector acknowledged, or the file took)."""
        return sum(p.counter.exported for p in self._processors)

    @property
    def failed_spans(self) -> int:
        """Spans handed to an exporter that failed (dead endpoint, rejection, disk error)."""
        return sum(p.counter.failed for p in self._processors)

    @property
    def dropped_spans(self) -> int:
        """Spans lost before export: the queue was full, or they ended while shutting down
        (spans that end after :meth:`shutdown` no longer reach this setup at all)."""
        return sum(p.dropped for p in self._processors)

    def describe(self) -> str:
        """One line for the CLI: where this run's spans went."""
        parts = []
        if self.endpoint:
            parts.append(f"OTLP {self.protocol} → {self.endpoint}")
        if self.trace_file is not None:
            parts.append(f"file {self.trace_file}")
        if "console" in self.exporters:
            parts.append("console")
        return "traces: " + (", ".join(parts) if parts else "not exported")

    def force_flush(self, timeout: float | None = None) -> bool:
        """Export everything queued so far, blocking at most ``timeout`` (default: the export
        timeout) seconds. True when it all went out; False on a timeout or a failed export.
        Spans not yet exported stay queued: a slow but live collector still gets them later."""
        if self._shut_down or not self._processors:
            return not self._processors or self.failed_spans == 0
        failed_before = self.failed_spans
        limit = self.export_timeout if timeout is None else timeout

        def flush_all() -> bool:
            return all(p.force_flush() for p in self._processors)

        done = run_bounded(flush_all, limit, "trace flush", one_at_a_time=self)
        return done and self.failed_spans == failed_before

    async def flush(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - force_flush's
        """:meth:`force_flush` for trio code: runs in a worker thread, never blocks the loop,
        and returns within ``timeout`` even if cancelled (the flush continues in the
        background)."""
        import trio

        return await trio.to_thread.run_sync(self.force_flush, timeout, abandon_on_cancel=True)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush what is queued and close the exporters, within ``timeout`` seconds (default:
        the export timeout). Safe to call twice; also registered with :mod:`atexit`.

        Past the deadline, the remaining batches fail at once and in-flight requests are
        interrupted, so exit never waits on a dead collector. Without a ``timeout``, a trace
        file gets at least 15 s instead: its last batches are encoding work, which a big run's
        backlog can take seconds of. Lost spans are logged as a warning and stay readable in
        :attr:`dropped_spans` and :attr:`failed_spans`. Returns True when everything shut
        down in time.
        """
        with self._shutdown_lock:
            if self._shut_down:
                return True
            self._shut_down = True
        atexit.unregister(self.shutdown)
        if self._processors:  # spans ending from now on are no longer ours
            dispatch_for(self.tracer_provider).detach(self._processors)
        limit = self.export_timeout if timeout is None else timeout
        started = time.monotonic()
        timers: list[threading.Timer] = []
        bounds = [0.0]
        for processor in self._processors:
            # a file is never used alongside a collector, so this cannot eat into its time
            bound = limit
            if processor.counter.kind == "file" and timeout is None:
                bound = max(limit, _FILE_SHUTDOWN_LIMIT)
            processor.counter.give_up_at = started + bound
            timer = threading.Timer(bound, processor.counter.shutdown)
            timer.daemon = True
            timer.start()
            timers.append(timer)
            bounds.append(bound)

        def abort_exporters() -> None:
            for processor in self._processors:
                processor.counter.shutdown()

        def shut() -> None:
            for processor in self._processors:
                processor.shutdown()
            # a provider made global stays: OTel will not take another, and later setups of
            # this process reuse it
            if self._owns_provider and not _is_global(self.tracer_provider):
                self.tracer_provider.shutdown()

        done = run_bounded(shut, max(bounds) + 0.25, "trace shutdown")
        for timer in timers:
            timer.cancel()
        abort_exporters()
        if not done:
            for processor in self._processors:
                processor.counter.close_books(processor.ended - processor.dropped)
        self._report()
        return done

    def _report(self) -> None:
        dropped, failed = self.dropped_spans, self.failed_spans
        if dropped or failed:
            _logger.warning(
                "tracing: %d span(s) dropped (queue full or ended while shutting down), "
                "%d span(s) failed to export",
                dropped,
                failed,
            )


def _default_trace_file(runs_dir: Path) -> Path:
    """A fresh trace file name in ``runs_dir``: UTC start time, then the pid for uniqueness."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return runs_dir / f"trace-{stamp}-{os.getpid()}.jsonl"


def _build_resource(service_name: str | None) -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if service_name:
        return resource.merge(Resource({SERVICE_NAME: service_name}))
    current = str(resource.attributes.get(SERVICE_NAME, ""))
    if not current or current.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def _check_writable_folder(folder: Path) -> None:
    """Refuse a trace file that could never be written, before the run (not after it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"cannot create the trace folder {folder}: {exc}") from None
    try:  # by writing: permission bits say nothing to root, nor about a read-only mount
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:  # its strerror: the probe file's random name says nothing
        raise ConfigurationError(
            f"cannot write trace files to {folder}: {exc.strerror or exc}"
        ) from None


def configure_tracing(  # noqa: C901 - one check per option, each with its own message
    *,
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    tracer_provider: TracerProvider | None = None,
    runs_dir: Path | str | None = None,
    run_file: Path | str | None = None,
    export_timeout: float = 2.0,
    max_queue_size: int = 65_536,
    set_global: bool = True,
    keep_file: bool = False,
) -> TracingSetup:
    """Set up span export from the arguments and the standard ``OTEL_*`` variables.

    Args:
        service_name: ``service.name``; default ``OTEL_SERVICE_NAME``, then ``orchestrator``.
            Ignored when ``tracer_provider`` is given, or when an SDK provider is already
            global and reused (a resource is fixed once made; a different name is warned of:
            pass ``set_global=False`` for a provider of this setup's own).
        endpoint: OTLP endpoint; default from ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
            ``OTEL_EXPORTER_OTLP_ENDPOINT``. A base URL (``http://host:4318``) is fine.
        protocol: ``http/protobuf`` or ``grpc``; default from ``OTEL_EXPORTER_OTLP_*PROTOCOL``,
            then ``http/protobuf``.
        tracer_provider: add our processors to this provider instead of creating one; it is
            then neither made global nor shut down by :meth:`TracingSetup.shutdown` (only our
            processors are).
        runs_dir: when no OTLP exporter is in use, write the trace to a new file here.
        run_file: like ``runs_dir`` but the exact file (appended to if it exists).
        keep_file: write the ``runs_dir`` / ``run_file`` trace also when spans go to an OTLP
            endpoint (the CLI's choice: a collector that is down then loses nothing that
            ``orchestrator trace export`` cannot send later).
        export_timeout: seconds per export request, and the default bound on flush/shutdown.
        max_queue_size: spans the batch queue holds before dropping (and counting) the oldest;
            the default is sized for wide trees, which make many times the SDK's default.
        set_global: make a newly created provider the global one (default). If the global
            provider already is an SDK provider, it is reused instead, since OpenTelemetry
            refuses to replace it.

    Exporters: ``OTEL_TRACES_EXPORTER`` picks from ``otlp``, ``console`` (to stderr, keeping
    stdout for the run's answer) and ``none``. Unset, OTLP is used when an endpoint is
    configured, else the trace file when one is asked for, else nothing. ``none`` turns off
    everything, the file included, and so does ``OTEL_SDK_DISABLED=true`` (the SDK then makes
    no spans at all).
    """
    runs_dir = Path(runs_dir) if runs_dir is not None else None  # a str is fine too
    run_file = Path(run_file) if run_file is not None else None
    if export_timeout <= 0:
        raise ConfigurationError("export_timeout must be positive")
    if max_queue_size < 1:
        raise ConfigurationError("max_queue_size must be at least 1")

    if protocol is not None:  # an argument is checked even where it is not used
        resolve_protocol(protocol)
    names, explicit = _selected_exporters()
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        # the SDK makes no spans at all: no file or endpoint to point users at
        names, explicit = {"none"}, True
    if "none" in names:  # nothing is sent: no OTLP setting is read (nor refused)
        if len(names) > 1:
            _logger.warning("OTEL_TRACES_EXPORTER includes 'none': no spans will be exported")
        resolved_endpoint, use_otlp, names = None, False, {"none"}
    elif "otlp" in names or not explicit:  # OTLP may be used: its settings are read
        resolved_endpoint = resolve_otlp_endpoint(endpoint, protocol)
        use_otlp = "otlp" in names or resolved_endpoint is not None
    else:  # console only
        resolved_endpoint, use_otlp = None, False

    exporters: list[CountingExporter] = []
    used_endpoint: str | None = None
    used_protocol: Protocol | None = None
    trace_file: Path | None = None
    if use_otlp:
        used_protocol = resolve_protocol(protocol)
        used_endpoint = resolved_endpoint or (
            traces_url(DEFAULT_HTTP_ENDPOINT, always_append=True)
            if used_protocol == "http/protobuf"
            else DEFAULT_GRPC_ENDPOINT
        )
        otlp, sdk_only = otlp_exporter(used_endpoint, used_protocol, export_timeout)
        exporters.append(CountingExporter(otlp, "otlp", sdk_only=sdk_only))
    if "console" in names:
        exporters.append(CountingExporter(ConsoleSpanExporter(out=sys.stderr), "console"))
    if (
        (keep_file or not use_otlp)
        and "none" not in names
        and (run_file is not None or runs_dir is not None)
    ):
        trace_file = run_file if run_file is not None else _default_trace_file(cast(Path, runs_dir))
        _check_writable_folder(trace_file.parent)
        exporters.append(CountingExporter(OtlpJsonLinesExporter(trace_file), "file"))

    owns_provider = False
    if tracer_provider is None:
        from opentelemetry import trace

        current = trace.get_tracer_provider()
        if set_global and isinstance(current, TracerProvider):
            tracer_provider = current
            kept = current.resource.attributes.get("service.name")
            if service_name and service_name != kept:
                _logger.warning(
                    "tracing: service_name %r ignored: the global tracer provider is reused and "
                    "keeps %r (pass set_global=False for a provider of this setup's own)",
                    service_name,
                    kept,
                )
        else:
            # shutdown_on_exit=False: the SDK's own atexit hook would call the unbounded
            # shutdown; TracingSetup registers its bounded one instead.
            tracer_provider = TracerProvider(
                resource=_build_resource(service_name), shutdown_on_exit=False
            )
            owns_provider = True
            if set_global:
                trace.set_tracer_provider(tracer_provider)
                # it outlives this setup (later setups reuse it): shut down at exit, after
                # every setup (atexit runs in reverse), for processors users added themselves
                atexit.register(_shutdown_at_exit, tracer_provider, export_timeout)

    processors = [SpanPipe(e, max_queue_size=max_queue_size) for e in exporters]
    if processors:
        dispatch_for(tracer_provider).attach(processors)
    return TracingSetup(
        tracer_provider=tracer_provider,
        owns_provider=owns_provider,
        processors=processors,
        trace_file=trace_file,
        endpoint=used_endpoint,
        protocol=used_protocol,
        export_timeout=export_timeout,
    )
