"""The span exporters and processors :func:`~.setup.configure_tracing` gives a tracer provider.

:class:`OtlpJsonLinesExporter` writes trace files. The counting exporter and the batch
processor (``SpanPipe``, our own: it takes direct spans too) count what was delivered, failed
or dropped, and carry the shutdown deadline past which the remaining batches fail at once, so
a dead collector cannot hold exit; ``Dispatch`` is the one processor added per provider, as
the SDK cannot remove one, and decides whether a provider's runs may take the direct road
(:func:`direct_tracer`): a setup whose runs take the SDK's road instead logs one warning saying
why (and one debug line when they take the direct road). Imports the SDK, like :mod:`.setup`;
the OTLP exporter modules load only when one is built.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, cast

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from .batches import sized_parts
from .direct import MAX_ATTRIBUTES, MAX_EVENTS, MAX_LINKS, DirectSpan, DirectTracer
from .endpoints import Protocol
from .otlp_json import encode_direct_json, encode_otlp_json, encode_spans_json
from .spans import TRACER_NAME

__all__ = [
    "CountingExporter",
    "Dispatch",
    "OtlpJsonLinesExporter",
    "SpanPipe",
    "dispatch_for",
    "otlp_exporter",
]

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

    takes_direct = True
    """Direct spans (:mod:`.direct`) are welcome, mixed with SDK spans in one batch."""

    def export(self, spans: Sequence[ReadableSpan | DirectSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        sdk, direct = _split(spans)
        line = b""
        if sdk:
            line = self._sdk_line(sdk)
        if direct:  # a lone surrogate (UTF-8 cannot hold it) is written as "?"
            line += (encode_direct_json(direct) + "\n").encode("utf-8", "replace")
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            try:
                self._append(line)
            except OSError as exc:
                _logger.error("cannot write trace file %s: %s", self.path, exc)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    @staticmethod
    def _sdk_line(spans: Sequence[ReadableSpan]) -> bytes:
        try:
            return (encode_spans_json(spans) + "\n").encode("utf-8")
        except UnicodeEncodeError:
            # a lone surrogate in some string (a file name, a model's broken escape): the
            # protobuf path drops just that attribute, as the SDK's encoder always did
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            return (encode_otlp_json(encode_spans(spans)) + "\n").encode("utf-8")

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            try:  # the owner's only: captured content and errors may quote secrets
                self._fd = os.open(self.path, flags | os.O_RDWR, 0o600)
            except PermissionError:  # a write-only file: no reading back its last byte
                self._fd = os.open(self.path, flags | os.O_WRONLY, 0o600)
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


class CountingExporter(SpanExporter):
    """Wraps an exporter to count what it was given and what it delivered.

    It also carries the shutdown deadline: past ``give_up_at`` a batch fails at once, and once
    a batch has failed during shutdown so do the rest, so a dead endpoint costs one export
    attempt at exit rather than one per remaining batch.
    """

    def __init__(self, inner: SpanExporter, kind: str, *, sdk_only: str | None = None) -> None:
        self.inner = inner
        self.kind = kind
        self.takes_direct: bool = getattr(inner, "takes_direct", False)
        self.sdk_only = (
            None
            if self.takes_direct
            else (sdk_only or f"the {kind} exporter takes the SDK's spans only")
        )
        """Why this exporter's spans cannot take the direct road (None: they can)."""
        self.handed = 0
        self.exported = 0
        self.failed = 0
        self.give_up_at: float | None = None
        self._lock = threading.Lock()
        self._inner_shut = False
        self._books_closed = False

    def _count(self, *, handed: int = 0, exported: int = 0, failed: int = 0) -> None:
        with self._lock:
            if self._books_closed:
                return
            self.handed += handed
            self.exported += exported
            self.failed += failed

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:  # and direct spans
        inner = self.inner
        if not isinstance(inner, _SizedRequests):
            return self._deliver(len(spans), lambda: inner.export(spans))
        if self._given_up():  # nothing to encode for
            return self._deliver(len(spans), lambda: SpanExportResult.FAILURE)
        try:  # requests of a bounded size, each counted as it fares
            parts = inner.requests(spans)
        except Exception:
            _logger.exception("%s span exporter could not encode a batch", self.kind)
            return self._deliver(len(spans), lambda: SpanExportResult.FAILURE)
        results = [self._deliver(n, functools.partial(inner.send, request)) for n, request in parts]
        failed = SpanExportResult.FAILURE in results
        return SpanExportResult.FAILURE if failed else SpanExportResult.SUCCESS

    def _given_up(self) -> bool:
        return self.give_up_at is not None and time.monotonic() >= self.give_up_at

    def _deliver(self, n: int, send: Callable[[], SpanExportResult]) -> SpanExportResult:
        """Send ``n`` spans with ``send``, counting how it went (at once a failure past the
        shutdown deadline)."""
        self._count(handed=n)
        if self._given_up():
            self._count(failed=n)
            return SpanExportResult.FAILURE
        try:
            result = send()
        except Exception:
            _logger.exception("%s span exporter raised", self.kind)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._count(exported=n)
        else:
            self._count(failed=n)
            if self.give_up_at is not None:
                # Shutting down and a request just failed after its own retries: the rest
                # would fail the same way, one timeout each. Give up on them now.
                self.give_up_at = time.monotonic()
        return result

    def close_books(self, received: int) -> None:
        """After a shutdown that gave up: of the ``received`` spans, those not yet delivered
        count as failed now, and nothing is counted any more. The thread still encoding or
        draining them would otherwise move the figures after :meth:`TracingSetup.shutdown`
        returned (the wrapped exporter is shut, so none of them can still be delivered)."""
        with self._lock:
            if not self._books_closed:
                self.failed += max(0, received - self.exported - self.failed)
                self._books_closed = True

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


class SpanPipe(SpanProcessor):
    """A batch processor of our own, for SDK spans (``on_end``) and direct ones (``put``).

    Ending a span costs an append to a deque (the SDK's batch processor takes a lock and may
    wake its thread per span); the export thread wakes once per batch or per schedule delay,
    takes a whole batch and hands it to the exporter, which encodes it there. Every loss is
    counted, not only logged: a span that finds the queue full, or ends while shutting down,
    is ``dropped``. ``force_flush`` returns once everything queued before it was exported.
    The thread belongs to this processor: it ends with :meth:`shutdown` (bounded by the
    setup), and is a daemon so that a hung exporter cannot hold the interpreter's exit.
    """

    def __init__(self, exporter: CountingExporter, *, max_queue_size: int) -> None:
        self.counter = exporter
        self.takes_direct = exporter.takes_direct
        self.told_road: str | None = None  # the road last logged for this pipe's setup
        self._max_queue = max_queue_size
        self._batch = min(_MAX_EXPORT_BATCH, max_queue_size)
        self._queue: deque[Any] = deque()
        self._taken = 0  # spans the export thread took off the queue (only it writes this)
        self._dropped = 0
        self._lock = threading.Lock()  # the drop count and the flush waiters
        self._flushes: list[threading.Event] = []
        self._wake = threading.Event()
        self._stopping = False
        self._thread = self._start_thread()
        if hasattr(os, "register_at_fork"):  # a forked child gets its own thread, as the SDK's
            own = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: (method := own()) and method())

    def _start_thread(self) -> threading.Thread:
        thread = threading.Thread(
            target=self._export_loop, name="orchestrator-span-export", daemon=True
        )
        thread.start()
        return thread

    def _after_fork(self) -> None:
        """In a forked child: the parent's queue is the parent's to export, its thread and
        locks did not come along; start afresh (unless the parent had shut down)."""
        self._queue.clear()
        self._lock = threading.Lock()
        self._flushes = []
        self._wake = threading.Event()
        if not self._stopping:
            self._thread = self._start_thread()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.put(span)

    def put(self, span: ReadableSpan | DirectSpan) -> None:
        """Queue one ended span (what a direct span's ``end`` calls)."""
        queue = self._queue
        if len(queue) >= self._max_queue or self._stopping:
            with self._lock:
                self._dropped += 1
            return
        queue.append(span)
        if len(queue) == self._batch:  # once per batch, not per span
            self._wake.set()

    @property
    def ended(self) -> int:
        """Sampled spans that ended and reached this processor."""
        return self._taken + len(self._queue) + self._dropped

    @property
    def dropped(self) -> int:
        return self._dropped

    def _export_loop(self) -> None:
        while True:
            self._wake.wait(_SCHEDULE_DELAY_MS / 1000)
            self._wake.clear()
            with self._lock:  # taken before draining: each was asked after what it waits for
                flushes, self._flushes = self._flushes, []
            self._drain()
            for done in flushes:
                done.set()
            if self._stopping and not self._queue:
                return

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            batch = [queue.popleft() for _ in range(min(len(queue), self._batch))]
            self._taken += len(batch)
            self.counter.export(batch)  # counts, logs and never raises

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if not self._thread.is_alive():
            return not self._queue
        done = threading.Event()
        with self._lock:
            self._flushes.append(done)
        self._wake.set()
        return done.wait(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Export what is queued, then stop the thread and the exporter (the setup bounds
        this: past its deadline the exporter fails the remaining batches at once)."""
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self.counter.shutdown()


class Dispatch(SpanProcessor):
    """The one processor we add to a provider, passing spans to the live setups' processors.

    The SDK cannot remove a processor from a provider: a program that configures tracing,
    shuts it down and configures it again (a service, per job) would otherwise keep every
    shut-down processor on the global provider, each costing every later span a little more.
    """

    def __init__(self) -> None:
        self.targets: tuple[SpanPipe, ...] = ()
        self._lock = threading.Lock()
        self._direct: DirectTracer | None = None

    def direct_tracer(self, provider: TracerProvider) -> DirectTracer | None:
        """The direct road's tracer for ``provider`` when it may take it (see
        :func:`direct_tracer`), else None. The road a setup's runs take is logged once per
        setup (and again should it change): the SDK's as a warning saying why."""
        targets = self.targets
        if not targets:
            return None
        why = [reason for t in targets if (reason := t.counter.sdk_only)]
        why += _provider_unfit(provider, self)
        road = "; ".join(dict.fromkeys(why)) or _DIRECT_ROAD
        if any(t.told_road != road for t in targets):
            self._tell(targets, road)
        if why:
            return None
        if self._direct is None:
            from .. import __version__

            scope = InstrumentationScope(TRACER_NAME, __version__)
            self._direct = DirectTracer(self, provider.resource, scope)
        return self._direct

    def _tell(self, targets: Sequence[SpanPipe], road: str) -> None:
        with self._lock:  # runs of one setup may start in several threads at once
            untold = [t for t in targets if t.told_road != road]
            for target in untold:
                target.told_road = road
        if not untold:
            return
        if road == _DIRECT_ROAD:
            _logger.debug("tracing: runs take the direct road (no SDK span objects)")
        else:
            _logger.warning(
                "tracing: runs take the OpenTelemetry SDK's road, several times the CPU per span "
                "of the direct road (the same trace), because %s",
                road,
            )

    def attach(self, processors: Sequence[SpanPipe]) -> None:
        with self._lock:
            self.targets = (*self.targets, *processors)

    def detach(self, processors: Sequence[SpanPipe]) -> None:
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
            target.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flushed = [target.force_flush(timeout_millis) for target in self.targets]  # every one
        return all(flushed)


_DISPATCH: weakref.WeakKeyDictionary[TracerProvider, Dispatch] = weakref.WeakKeyDictionary()
_DISPATCH_LOCK = threading.Lock()


_DEFAULT_SAMPLER: Final = (
    "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,"
    "remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,"
    "localParentNotSampled:AlwaysOffSampler}"
)


_DIRECT_ROAD: Final = "direct"


def _provider_unfit(provider: TracerProvider, dispatch: Dispatch) -> list[str]:
    """Why spans of ``provider`` may not skip the SDK (none: they may). They may when
    ``dispatch`` is its only processor, and it samples, makes ids and limits spans as the SDK
    does by default.

    The processors and limits are private SDK state, read defensively: should they ever
    move, every run takes the SDK's road, slower but the same trace (and the warning says so).
    """
    why: list[str] = []
    processors = getattr(
        getattr(provider, "_active_span_processor", None), "_span_processors", None
    )
    if not isinstance(processors, tuple):
        why.append(_unread("TracerProvider._active_span_processor._span_processors"))
    elif processors != (dispatch,):  # a processor of the program's own sees every span
        why.append("the tracer provider has a span processor of the program's own (SDK spans)")
    disabled = getattr(provider, "_disabled", None)
    if disabled is None:
        why.append(_unread("TracerProvider._disabled"))
    elif disabled:
        why.append("the tracer provider is disabled")
    limits = getattr(provider, "_span_limits", None)
    if limits is None:
        why.append(_unread("TracerProvider._span_limits"))
    elif not (
        getattr(limits, "max_span_attributes", None) == MAX_ATTRIBUTES
        and getattr(limits, "max_events", None) == MAX_EVENTS
        and getattr(limits, "max_links", None) == MAX_LINKS
        and getattr(limits, "max_event_attributes", None) == MAX_ATTRIBUTES
        and getattr(limits, "max_link_attributes", None) == MAX_ATTRIBUTES
        and getattr(limits, "max_span_attribute_length", 0) is None
    ):
        why.append("the tracer provider's span limits are not the SDK's defaults")
    if type(provider.id_generator) is not RandomIdGenerator:
        why.append("the tracer provider's id generator is not the SDK's RandomIdGenerator")
    sampler = provider.sampler.get_description()
    if sampler != _DEFAULT_SAMPLER:
        why.append(f"the tracer provider's sampler is {sampler}, not the SDK's default")
    return why


def _unread(field: str) -> str:
    """Why the road is the SDK's when a private SDK field the direct road reads is missing."""
    return f"this OpenTelemetry SDK has no {field}, which the direct road reads (1.45 has it)"


def direct_tracer(provider: object) -> DirectTracer | None:
    """The tracer of the direct road (:mod:`.direct`) when ``provider``'s spans may take it:
    :func:`~.setup.configure_tracing` attached its exporters to it, every one of them takes
    direct spans, and nothing else sees its spans (see :func:`_provider_unfit`)."""
    try:
        dispatch = _DISPATCH.get(provider)  # type: ignore[call-overload]
    except TypeError:  # not weakly referable: not a provider of ours
        return None
    return None if dispatch is None else dispatch.direct_tracer(cast(TracerProvider, provider))


def _split(
    spans: Sequence[ReadableSpan | DirectSpan],
) -> tuple[list[ReadableSpan], list[DirectSpan]]:
    """A batch's SDK spans and direct spans, each in order."""
    direct = [s for s in spans if type(s) is DirectSpan]
    if len(direct) == len(spans):
        return [], direct
    return [s for s in spans if type(s) is not DirectSpan], direct  # type: ignore[misc]


def dispatch_for(provider: TracerProvider) -> Dispatch:
    """The one :class:`Dispatch` of ``provider``, added to it the first time."""
    with _DISPATCH_LOCK:
        dispatch = _DISPATCH.get(provider)
        if dispatch is None:
            dispatch = _DISPATCH[provider] = Dispatch()
            provider.add_span_processor(dispatch)
        return dispatch


def otlp_exporter(
    endpoint: str, protocol: Protocol, timeout: float
) -> tuple[SpanExporter, str | None]:
    """Our OTLP exporter for ``protocol`` (the SDK's, sending requests of a bounded size), and
    why its spans cannot take the direct road (None: they can; OTLP/HTTP on an SDK that has
    the exporter's client)."""
    if protocol == "grpc":
        insecure: bool | None = None
        if "://" not in endpoint:
            # No scheme: the exporter would assume TLS; for a bare host:port (the usual local
            # collector) plaintext is what people mean, unless the variables say otherwise.
            env = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_INSECURE") or os.environ.get(
                "OTEL_EXPORTER_OTLP_INSECURE"
            )
            insecure = True if env is None else env.strip().lower() == "true"
        grpc = _grpc_exporter_class()(endpoint=endpoint, insecure=insecure, timeout=timeout)
        return _OtlpGrpcSized(grpc), (
            "OTLP over gRPC is sent by the SDK's exporter, which takes SDK spans only"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    exporter = cast(SpanExporter, HttpExporter(endpoint=endpoint, timeout=timeout))
    client = getattr(exporter, "_client", None)
    if callable(getattr(client, "export", None)):
        return _OtlpHttpDirect(exporter, client), None
    # an exporter without the client seam (before 1.45): SDK spans only, batches unsized
    return exporter, _unread("OTLPSpanExporter._client (the OTLP/HTTP exporter's client)")


class _SizedRequests(SpanExporter):
    """An OTLP exporter that sends a batch as requests of at most
    :data:`~.batches.MAX_REQUEST_BYTES` each (:func:`~.batches.sized_parts`): a receiver
    refuses a request over its limit whole (4 MiB by default over gRPC), and a batch of spans
    with captured messages can pass it. :class:`_CountingExporter` sends the requests one by
    one and counts each; :meth:`export` does the same for a caller of its own."""

    takes_direct = False

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def encode(self, spans: Sequence[ReadableSpan | DirectSpan]) -> Any:
        """One request holding ``spans``."""
        raise NotImplementedError

    def size(self, request: Any) -> int:
        """The bytes ``request`` takes on the wire."""
        raise NotImplementedError

    def send(self, request: Any) -> SpanExportResult:
        """Send one request (with the SDK exporter's retries, headers and timeout)."""
        raise NotImplementedError

    def requests(self, spans: Sequence[ReadableSpan | DirectSpan]) -> list[tuple[int, Any]]:
        """``spans`` as requests of a bounded size, each with how many spans it holds."""
        return sized_parts(spans, self.encode, self.size)

    def export(self, spans: Sequence[ReadableSpan | DirectSpan]) -> SpanExportResult:
        results = [self.send(request) for _, request in self.requests(spans)]
        failed = SpanExportResult.FAILURE in results
        return SpanExportResult.FAILURE if failed else SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _OtlpHttpDirect(_SizedRequests):
    """The SDK's OTLP/HTTP exporter, also sending direct spans (:mod:`.direct`).

    Direct spans are encoded by :func:`~.otlp_proto.encode_direct_proto`, SDK spans by the
    SDK's encoder; serialized requests concatenate into one (protobuf merges repeated
    fields), which goes through the SDK exporter's own HTTP client: its headers, compression,
    TLS settings, retries and shutdown all stay the SDK's. The client is private SDK state,
    read defensively (:func:`otlp_exporter` does not use this class without it).
    """

    takes_direct = True

    def __init__(self, inner: SpanExporter, client: Any) -> None:
        super().__init__(inner)
        self._client = client

    def encode(self, spans: Sequence[ReadableSpan | DirectSpan]) -> bytes:
        from .otlp_proto import encode_direct_proto

        sdk, direct = _split(spans)
        data = b""
        if sdk:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            data = encode_spans(sdk).SerializePartialToString()
        if direct:
            data += encode_direct_proto(direct)
        return data

    def size(self, request: bytes) -> int:
        return len(request)

    def send(self, request: bytes) -> SpanExportResult:
        result = self._client.export(request)
        return SpanExportResult.SUCCESS if result.success else SpanExportResult.FAILURE


class _OtlpGrpcSized(_SizedRequests):
    """The SDK's OTLP/gRPC exporter (SDK spans only), sent requests built and sized here
    (:func:`_grpc_exporter_class`), so each batch is encoded once."""

    def encode(self, spans: Sequence[ReadableSpan | DirectSpan]) -> Any:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        return encode_spans(cast(Sequence[ReadableSpan], spans))

    def size(self, request: Any) -> int:
        return int(request.ByteSize())

    def send(self, request: Any) -> SpanExportResult:
        return self.inner.export(request)


_GRPC_EXPORTER: Callable[..., SpanExporter] | None = None


def _grpc_exporter_class() -> Callable[..., SpanExporter]:
    """The SDK's OTLP/gRPC span exporter, taught to send a request built beforehand: its
    ``export`` takes one in place of spans (``_translate_data`` and ``_count_data``, the hooks
    the SDK's exporters override, pass it through), keeping its retries, headers and channel."""
    global _GRPC_EXPORTER
    if _GRPC_EXPORTER is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        class PrebuiltRequests(OTLPSpanExporter):
            def _translate_data(self, data: Any) -> ExportTraceServiceRequest:
                if isinstance(data, ExportTraceServiceRequest):
                    return data
                return super()._translate_data(data)

            def _count_data(self, data: Any) -> int:
                if isinstance(data, ExportTraceServiceRequest):
                    return sum(len(ss.spans) for rs in data.resource_spans for ss in rs.scope_spans)
                return int(super()._count_data(data))

        _GRPC_EXPORTER = PrebuiltRequests
    return _GRPC_EXPORTER
