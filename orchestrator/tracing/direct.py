"""Direct spans: the runtime's own spans, made and exported without the SDK's span objects.

Tracing is what people come here for, and the CLI traces every run into a trace file; but an
SDK span costs several times what the runtime spends on the model call it describes (its
context, attribute cleaning and locking, the batch processor's lock and wake-up per span,
then an encoder that walks generic objects). When a run's provider is one that
:func:`~.setup.configure_tracing` set up and nobody else added a processor to, its spans take
this shorter road instead: a :class:`DirectTracer` makes :class:`DirectSpan` objects (plain
slots, ids from :mod:`random` as the SDK's default generator makes them), and a span that ends
is appended to the queue of each of the setup's exporters, which encode whole batches straight
to OTLP/JSON (:func:`~.otlp_json.encode_direct_json`) or OTLP protobuf
(:func:`~.otlp_proto.encode_direct_proto`) in their export thread.

The trace is the same standard one: the same names, attributes, events, statuses, ids and
parent links, in the same files and requests (the tests hold both roads to one pinned span
set). A direct span is an OpenTelemetry :class:`~opentelemetry.trace.Span`, current in the
context like any other, so a tool's own spans nest under its ``execute_tool`` span, and
``trace.get_current_span().set_attribute(...)`` in a tool writes to it. Whatever the road
cannot promise sends the run through the SDK instead, decided once per run by
:func:`~.exporters.direct_tracer`: a processor of the program's own on the provider, a sampler,
id generator or span limits other than the defaults, an exporter that only takes SDK spans
(the console, gRPC, OTLP/HTTP before opentelemetry-exporter-otlp 1.45); the setup then logs one
warning saying why.

Every text written to a direct span is redacted here (what :class:`~.spans._RedactedSpan`
does for SDK spans), content attributes excepted: they are redacted when they are made.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, cast

from opentelemetry import trace
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util import types

from ..core.messages import well_formed
from ..core.redact import RUN_SECRETS, redact
from .spans import CONTENT_KEYS, exception_event

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource

    from .exporters import Dispatch

__all__ = ["DirectSpan", "DirectTracer"]

_logger = logging.getLogger("orchestrator.tracing")

# The SDK's default span limits, which a direct span keeps (other limits take the SDK's road).
MAX_ATTRIBUTES: Final = 128
MAX_EVENTS: Final = 128
MAX_LINKS: Final = 128

_SAMPLED: Final = TraceFlags.SAMPLED
_RANDOM: Final = TraceFlags.RANDOM_TRACE_ID  # W3C level 2: the trace id's bits are random
_EMPTY_STATE: Final = TraceState()
_PLAIN: Final = (str, bool, int, float)


_STATUS_CODES: Final = {code: code.value for code in StatusCode}  # (an enum's .value is slow)
_OK: Final = StatusCode.OK.value
_REMEMBERED_TEXT: Final = 256
_REMEMBERED_LIMIT: Final = 4096


class _Memo(dict[str, str]):
    """Texts and what :func:`redact` made of them under one run's secrets snapshot."""

    __slots__ = ("secrets",)

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self.secrets = secrets  # held: the snapshot's id stays unique while it is a key


_memos: dict[int, _Memo] = {}


def _redaction_memo() -> _Memo | None:
    """What :func:`redact` made of short texts under the running run's secrets snapshot.

    Most texts of a span are the same few names span after span (agents, models, tools,
    outcomes, the run id); each is redacted once per snapshot. None outside a run: then
    :func:`redact` reads the environment each time, and so must we.
    """
    secrets = RUN_SECRETS.get()
    if secrets is None:
        return None
    memo = _memos.get(id(secrets))
    if memo is None or memo.secrets is not secrets:
        if len(_memos) >= 16:
            _memos.clear()
        memo = _memos[id(secrets)] = _Memo(secrets)
    return memo


def _redacted(text: str, memo: _Memo | None) -> str:
    if memo is None:
        return redact(text)
    out = memo.get(text)
    if out is None:
        out = redact(text, memo.secrets)  # the span's run's snapshot, whatever runs this
        if len(text) <= _REMEMBERED_TEXT:
            if len(memo) >= _REMEMBERED_LIMIT:
                memo.clear()
            memo[text] = out
    return out


def _new_id(bits: int) -> int:
    value = random.getrandbits(bits)
    while not value:  # zero is the invalid id
        value = random.getrandbits(bits)
    return value


def _clean(key: object, value: object, memo: _Memo | None) -> Any:
    """``value`` as an attribute may hold it (the SDK's rules: a plain value, or a sequence of
    one plain type, None items allowed), texts redacted; None when it may not be kept."""
    if not isinstance(key, str) or not key:
        _logger.warning("invalid span attribute key %r: dropped", key)
        return None
    if isinstance(value, str):
        return value if key in CONTENT_KEYS else _redacted(value, memo)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        kinds = {type(v) for v in value if v is not None}
        if len(kinds) <= 1 and kinds <= {str, bool, int, float}:
            return tuple(_redacted(v, memo) if isinstance(v, str) else v for v in value)
    _logger.warning("invalid type %s for span attribute %r: dropped", type(value).__name__, key)
    return None


def _cleaned(attributes: types.Attributes, memo: _Memo | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        cleaned = _clean(key, value, memo)
        if cleaned is not None and len(out) < MAX_ATTRIBUTES:
            out[key] = cleaned
    return out


class DirectSpan(Span):
    """One span of the direct road (see the module's doc): a recording span until it ends,
    then an entry in each exporter's queue. Read by the encoders through its slots."""

    __slots__ = (
        "_context",
        "_memo",
        "attributes",
        "dropped_attributes",
        "dropped_events",
        "dropped_links",
        "end_time",
        "events",
        "flags",
        "kind",
        "links",
        "name",
        "parent_id",
        "parent_remote",
        "span_id",
        "start_time",
        "status_code",
        "status_message",
        "trace_id",
        "trace_state",
        "tracer",
    )

    redacts: Final = True
    """Every text written to it is redacted (:func:`~.spans.span` wraps other spans)."""

    def __init__(
        self,
        tracer: DirectTracer,
        name: str,
        kind: SpanKind,
        trace_id: int,
        parent_id: int,
        parent_remote: bool,
        trace_state: TraceState,
        flags: int,
        start_time: int,
    ) -> None:
        self.tracer = tracer
        self._context: SpanContext | None = None
        self._memo = _redaction_memo()  # the run's: what a span is given comes from its run
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = _new_id(64)
        self.parent_id = parent_id  # 0: a root span
        self.parent_remote = parent_remote
        self.trace_state = trace_state
        self.flags = flags
        self.start_time = start_time
        self.end_time = 0  # 0 until it ends
        self.attributes: dict[str, Any] = {}
        self.events: list[tuple[str, dict[str, Any], int]] | None = None
        self.links: list[tuple[SpanContext, dict[str, Any]]] | None = None
        self.dropped_attributes = 0
        self.dropped_events = 0
        self.dropped_links = 0
        self.status_code = 0  # StatusCode's value: UNSET
        self.status_message = ""

    @property
    def instrumentation_scope(self) -> InstrumentationScope:
        """The tracer's scope, read as the SDK's spans have it (``record_retry`` checks it)."""
        return self.tracer.scope

    def end(self, end_time: int | None = None) -> None:
        if self.end_time:
            _logger.warning("calling end() on an ended span %r", self.name)
            return
        self.end_time = end_time or time.time_ns()
        for pipe in self.tracer.dispatch.targets:
            pipe.put(self)

    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:  # made when asked: most spans are only ever parents by slot
            context = self._context = SpanContext(
                self.trace_id,
                self.span_id,
                is_remote=False,
                trace_flags=TraceFlags(self.flags),
                trace_state=self.trace_state,
            )
        return context

    def is_recording(self) -> bool:
        return not self.end_time

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self.end_time:
            return
        own = self.attributes
        if len(own) + len(attributes) > MAX_ATTRIBUTES:
            for key, value in attributes.items():
                self.set_attribute(key, value)
            return
        memo = self._memo
        for key, value in attributes.items():
            kind = type(value)
            if kind is str:  # most values: texts (redacted), counts and flags
                text = cast(str, value)
                if key in CONTENT_KEYS:
                    own[key] = text
                else:
                    done = None if memo is None else memo.get(text)
                    own[key] = _redacted(text, memo) if done is None else done
            elif kind is int or kind is float or kind is bool:
                own[key] = value
            else:
                cleaned = _clean(key, value, memo)
                if cleaned is not None:
                    own[key] = cleaned

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self.end_time:
            return
        if type(value) is str and type(key) is str and key:  # the common case, inline
            cleaned: Any = value if key in CONTENT_KEYS else _redacted(value, self._memo)
        else:
            cleaned = _clean(key, value, self._memo)
            if cleaned is None:
                return
        own = self.attributes
        if key not in own and len(own) >= MAX_ATTRIBUTES:
            self.dropped_attributes += 1
            return
        own[key] = cleaned

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if self.end_time:
            return
        if self.events is None:
            self.events = []
        if len(self.events) >= MAX_EVENTS:
            self.dropped_events += 1
            return
        memo = self._memo
        self.events.append(
            (_redacted(name, memo), _cleaned(attributes, memo), timestamp or time.time_ns())
        )

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self.end_time or context is None or not context.is_valid:
            return
        if self.links is None:
            self.links = []
        if len(self.links) >= MAX_LINKS:
            self.dropped_links += 1
            return
        self.links.append((context, _cleaned(attributes, self._memo)))

    def update_name(self, name: str) -> None:
        if not self.end_time:
            self.name = _redacted(well_formed(name), self._memo)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # the SDK's rules: OK is final; a description is kept for ERROR only
        if self.end_time or self.status_code == _OK:
            return
        if isinstance(status, Status):
            code, message = status.status_code, status.description
        else:
            code, message = status, description
        self.status_code = _STATUS_CODES[code]
        error = message and code is StatusCode.ERROR
        self.status_message = _redacted(message, self._memo) if error else ""  # type: ignore[arg-type]

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The exception event the SDK records, its message and traceback redacted."""
        self.add_event("exception", exception_event(exception, attributes, escaped), timestamp)

    def __repr__(self) -> str:
        return f"DirectSpan({self.name!r}, span_id={self.span_id:016x})"


class DirectTracer(trace.Tracer):
    """The tracer of the direct road, one per provider: it makes :class:`DirectSpan` objects
    whose ends go to the provider's live exporters (``dispatch.targets``)."""

    def __init__(self, dispatch: Dispatch, resource: Resource, scope: InstrumentationScope):
        self.dispatch = dispatch
        self.resource = resource
        self.scope = scope
        self.encoded: dict[str, Any] = {}  # the encoders' per-tracer prefixes (resource, scope)

    @staticmethod
    def span_name(name: str) -> str:
        """``name`` as a span may carry it (well formed, redacted), remembered: a tree's span
        names are a few (``chat {model}``, ``turn {agent}``, ``execute_tool {tool}``)."""
        memo = _redaction_memo()
        done = None if memo is None else memo.get(name)
        return _redacted(well_formed(name), memo) if done is None else done

    @property
    def span_processor(self) -> Dispatch:
        """Where finished SDK spans are handed, as to an SDK tracer's (the spans of children
        that ran elsewhere, ended again here: :func:`orchestrator.dask._spans.emit`)."""
        return self.dispatch

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = trace.get_current_span(context)
        ids: tuple[int, int, bool, TraceState, int]  # trace, parent, remote, state, flags
        if type(parent) is DirectSpan:  # the usual case: read by slot, no SpanContext made
            ids = (parent.trace_id, parent.span_id, False, parent.trace_state, parent.flags)
        else:
            up = parent.get_span_context()
            if not up.is_valid:  # a root
                ids = (_new_id(128), 0, False, _EMPTY_STATE, _SAMPLED | _RANDOM)
            elif not up.trace_flags.sampled:  # ParentBased: a parent sampled out leaves us out
                return NonRecordingSpan(
                    SpanContext(
                        up.trace_id,
                        _new_id(64),
                        is_remote=False,
                        trace_flags=TraceFlags(up.trace_flags),
                        trace_state=up.trace_state,
                    )
                )
            else:
                flags = _SAMPLED | (up.trace_flags & _RANDOM)
                ids = (up.trace_id, up.span_id, up.is_remote, up.trace_state, flags)
        span = DirectSpan(self, name, kind, *ids, start_time or time.time_ns())
        if attributes:
            span.set_attributes(attributes)
        for link in links or ():
            span.add_link(link.context, link.attributes)
        return span

    @contextmanager  # the API's own decorator is private; any context manager will do
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time, record_exception)
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current
