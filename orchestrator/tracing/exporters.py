"""The span exporters and processors :func:`~.setup.configure_tracing` gives a tracer provider.

:class:`OtlpJsonLinesExporter` writes trace files. The counting exporter and batch processor
count what was delivered, failed or dropped (the SDK only logs a full queue), and carry the
shutdown deadline past which the remaining batches fail at once, so a dead collector cannot
hold exit; ``_Dispatch`` is the one processor added per provider, as the SDK cannot remove one.
Imports the SDK, like :mod:`.setup`; the OTLP exporter modules load only when one is built.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, cast

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .endpoints import Protocol
from .otlp_json import encode_otlp_json, encode_spans_json

__all__ = ["OtlpJsonLinesExporter"]

_logger = logging.getLogger("orchestrator.tracing")

# The SDK's default batch is 512 spans; a 1-second schedule (SDK default: 5 s) makes a live
# Jaeger view fill in while a run is still going, at the price of smaller early batches.
_MAX_EXPORT_BATCH: Final = 512
_SCHEDULE_DELAY_MS: Final = 1000


class OtlpJsonLinesExporter(SpanExporter):
    """Appends each exported batch to ``path`` as one OTLP/JSON line.

    The file is created (with its folder) on the first batch, so a run that makes no spans
    leaves no empty trace behind. Each batch is one ``write`` of one whole line, unbuffered, so
    a crash loses at most the batches still queued, and a failed write costs only its batch:

    - a write that fails part-way (a full disk, ``EFBIG`` past ``RLIMIT_FSIZE``, ``EIO``, an
      exception from a signal handler) is taken back, the file truncated to where the batch
      began (shrinking a file works on a full disk and past the size limit);
    - when it cannot be (the truncate fails too, or another writer appended meanwhile), and
      when the file ends mid-line for any other reason (a process killed while writing), the
      next batch starts with a newline, so the cut batch stays a line of its own, which readers
      skip (:func:`~.tracefiles.load_trace`), and every other line stays whole.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._readable = True  # opened for reading too: the file's last byte can be checked
        self._cut = False  # our own last write left a cut line that could not be taken back
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = (encode_spans_json(spans) + "\n").encode("utf-8")
        except UnicodeEncodeError:
            # a lone surrogate in some string (a file name, a model's broken escape): the
            # protobuf path drops just that attribute, as the SDK's encoder always did
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            line = (encode_otlp_json(encode_spans(spans)) + "\n").encode("utf-8")
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            try:
                self._append(line)
            except OSError as exc:
                _logger.error("cannot write trace file %s: %s", self.path, exc)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            try:
                self._fd = os.open(self.path, flags | os.O_RDWR, 0o666)
            except PermissionError:  # a write-only file: no reading back its last byte
                self._fd = os.open(self.path, flags | os.O_WRONLY, 0o666)
                self._readable = False
                self._cut = True  # unknown: a blank line costs nothing, a glued one a batch
        return self._fd

    def _ends_mid_line(self, fd: int, size: int) -> bool:
        if size == 0:
            return False
        if not self._readable:
            return self._cut
        try:
            return os.pread(fd, 1, size - 1) != b"\n"
        except OSError:
            return True

    def _append(self, line: bytes) -> None:
        """Write ``line`` whole at the end of the file, or leave the file as it was."""
        fd = self._open()
        start = os.fstat(fd).st_size
        if self._ends_mid_line(fd, start):
            line = b"\n" + line  # end the cut line there: ours, and every later one, stay whole
        written = 0
        try:
            while written < len(line):  # one write, unless the kernel takes only part of it
                n = os.write(fd, line[written:] if written else line)
                if n <= 0:
                    raise OSError(errno.EIO, "the write made no progress")
                written += n
        except BaseException:
            self._take_back(fd, start, written)
            raise
        self._cut = False

    def _take_back(self, fd: int, start: int, written: int) -> None:
        """After a failed write: truncate the part of the batch that made it to the file."""
        if not written:
            return
        try:
            if os.fstat(fd).st_size == start + written:  # nobody else appended meanwhile
                os.ftruncate(fd, start)
                return
        except OSError as exc:
            _logger.error("cannot take back a cut batch in %s: %s", self.path, exc)
        self._cut = True  # the next batch starts on a new line instead

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd is not None:
                fd, self._fd = self._fd, None
                try:
                    os.close(fd)
                except OSError as exc:
                    _logger.error("cannot close trace file %s: %s", self.path, exc)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # every batch is written when it is exported: nothing is buffered


# --------------------------------------------------------------------------------------------
# Counting and bounding around the SDK's batch processor.


class _CountingExporter(SpanExporter):
    """Wraps an exporter to count what it was given and what it delivered.

    It also carries the shutdown deadline: past ``give_up_at`` a batch fails at once, and once
    a batch has failed during shutdown so do the rest, so a dead endpoint costs one export
    attempt at exit rather than one per remaining batch.
    """

    def __init__(self, inner: SpanExporter, kind: str) -> None:
        self.inner = inner
        self.kind = kind
        self.handed = 0
        self.exported = 0
        self.failed = 0
        self.give_up_at: float | None = None
        self._lock = threading.Lock()
        self._inner_shut = False

    def _count(self, *, handed: int = 0, exported: int = 0, failed: int = 0) -> None:
        with self._lock:
            self.handed += handed
            self.exported += exported
            self.failed += failed

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        self._count(handed=n)
        if self.give_up_at is not None and time.monotonic() >= self.give_up_at:
            self._count(failed=n)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:
            _logger.exception("%s span exporter raised", self.kind)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._count(exported=n)
        else:
            self._count(failed=n)
            if self.give_up_at is not None:
                # Shutting down and a batch just failed after its own retries: the rest would
                # fail the same way, one timeout each. Give up on them now.
                self.give_up_at = time.monotonic()
        return result

    def shutdown(self) -> None:
        """Shut the wrapped exporter down once (the OTLP ones warn on a second call)."""
        with self._lock:
            if self._inner_shut:
                return
            self._inner_shut = True
        try:
            self.inner.shutdown()
        except Exception:
            _logger.exception("%s span exporter failed to shut down", self.kind)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _CountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` that knows how many spans it lost.

    The SDK drops the oldest queued span when the queue is full and only logs it. So we count
    at the edges: a sampled span that ended here, was never handed to the exporter and is no
    longer queued was dropped (queue overflow, or ended after shutdown). Once the queue is
    drained (after a flush or shutdown) this is exact; while spans flow it is off by at most
    the batch the worker has just popped and not yet handed over.
    """

    def __init__(self, exporter: _CountingExporter, *, max_queue_size: int) -> None:
        super().__init__(
            exporter,
            max_queue_size=max_queue_size,
            max_export_batch_size=min(_MAX_EXPORT_BATCH, max_queue_size),
            schedule_delay_millis=_SCHEDULE_DELAY_MS,
        )
        self.counter = exporter
        self._ended = 0
        self._ended_lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            with self._ended_lock:
                self._ended += 1
        super().on_end(span)

    @property
    def ended(self) -> int:
        return self._ended

    def _pending(self) -> int:
        """Spans still queued (private SDK state, read defensively; 0 if it ever moves)."""
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        try:
            return len(queue) if queue is not None else 0
        except TypeError:
            return 0

    @property
    def dropped(self) -> int:
        # While the worker is between popping a batch and exporting it, up to one batch is
        # briefly counted as dropped; after a flush or shutdown the figure is exact.
        return max(0, self._ended - self.counter.handed - self._pending())


class _Dispatch(SpanProcessor):
    """The one processor we add to a provider, passing spans to the live setups' processors.

    The SDK cannot remove a processor from a provider: a program that configures tracing,
    shuts it down and configures it again (a service, per job) would otherwise keep every
    shut-down processor on the global provider, each costing every later span a little more.
    """

    def __init__(self) -> None:
        self.targets: tuple[_CountingBatchSpanProcessor, ...] = ()
        self._lock = threading.Lock()

    def attach(self, processors: Sequence[_CountingBatchSpanProcessor]) -> None:
        with self._lock:
            self.targets = (*self.targets, *processors)

    def detach(self, processors: Sequence[_CountingBatchSpanProcessor]) -> None:
        with self._lock:
            self.targets = tuple(p for p in self.targets if p not in processors)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for target in self.targets:
            target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in self.targets:
            target.on_end(span)

    def shutdown(self) -> None:
        for target in self.targets:
            cast(Callable[[], None], target.shutdown)()  # unannotated in the SDK

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flushed = [target.force_flush(timeout_millis) for target in self.targets]  # every one
        return all(flushed)


_DISPATCH: weakref.WeakKeyDictionary[TracerProvider, _Dispatch] = weakref.WeakKeyDictionary()
_DISPATCH_LOCK = threading.Lock()


def _dispatch_for(provider: TracerProvider) -> _Dispatch:
    with _DISPATCH_LOCK:
        dispatch = _DISPATCH.get(provider)
        if dispatch is None:
            dispatch = _DISPATCH[provider] = _Dispatch()
            provider.add_span_processor(dispatch)
        return dispatch


def _otlp_exporter(endpoint: str, protocol: Protocol, timeout: float) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        insecure: bool | None = None
        if "://" not in endpoint:
            # No scheme: the exporter would assume TLS; for a bare host:port (the usual local
            # collector) plaintext is what people mean, unless the variables say otherwise.
            env = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_INSECURE") or os.environ.get(
                "OTEL_EXPORTER_OTLP_INSECURE"
            )
            insecure = True if env is None else env.strip().lower() == "true"
        return cast(
            SpanExporter, GrpcExporter(endpoint=endpoint, insecure=insecure, timeout=timeout)
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return cast(SpanExporter, HttpExporter(endpoint=endpoint, timeout=timeout))
