"""Saved traces read back: OTLP/JSON lines files as plain :class:`SpanRecord` values, the runs a
folder holds (:func:`list_runs`) and the one a run id or prefix names (:func:`resolve_run`).

With no OTLP endpoint configured, :func:`~orchestrator.tracing.configure_tracing` writes each
run's spans to a runs folder as OTLP/JSON lines (:mod:`.otlp_json`). Reading parses that JSON
directly, with no protobuf or SDK, so a run can be listed and drawn (:mod:`.view`) on a machine
that has no tracing backend; sending one to a collector later goes through protobuf instead
(:mod:`.export`), so ids and typed attributes arrive exactly as they were recorded.

A damaged line (a batch cut off by a full disk or a killed writer, a stray byte) costs only
itself: it is skipped and reported as a :class:`DamagedLine`, and every other line still loads.
A run whose root span is missing (the process was killed or crashed before the root ended, or
its last batch was lost) is :attr:`RunSummary.interrupted`, never a success.

A big run's file is tens of MB (65,000 spans for 5,000 agents), so reading is built for it: a
file is streamed a line at a time, repeated strings are shared between the records, and the
garbage collector is paused while they are made (see :func:`_iter_docs`, :class:`_Reader`,
:func:`no_collection`); ``trace list`` keeps what each file holds in a small index and reads
only the files that changed (:class:`_SummaryCache`).
"""

from __future__ import annotations

import base64
import gc
import glob
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeAlias

from ..core.errors import OrchestratorError

__all__ = [
    "INTERRUPTED_NOTE",
    "AttrValue",
    "DamagedLine",
    "LoadedTrace",
    "RunSummary",
    "SpanEvent",
    "SpanRecord",
    "TraceFileError",
    "TraceNotFoundError",
    "damage_note",
    "list_runs",
    "load_trace",
    "resolve_run",
]

AttrValue: TypeAlias = (
    str | bool | int | float | bytes | list["AttrValue"] | dict[str, "AttrValue"] | None
)

_logger = logging.getLogger("orchestrator.tracing")
_STATUS_NAMES: Final = {0: "UNSET", 1: "OK", 2: "ERROR"}
_CONVERSATION_ID: Final = "gen_ai.conversation.id"
OUTCOME: Final = "orchestrator.outcome"
AGENT_DEPTH: Final = "orchestrator.agent.depth"
AGENT_PATH: Final = "orchestrator.agent.path"
_OUR_SCOPE: Final = "orchestrator"  # spans.TRACER_NAME (not imported: it pulls the API in)
# SpanFlags: bit 8 says whether bit 9 (the parent is remote) is known
_FLAGS_HAS_IS_REMOTE: Final = 0x100
_FLAGS_IS_REMOTE: Final = 0x200
# Every line our exporter (and the Collector's file exporter) writes starts so.
_LINE_START: Final = b'{"resourceSpans"'
_SALVAGE_TRIES: Final = 16
_SNIFF_LINES: Final = 8

INTERRUPTED: Final = "interrupted"
INTERRUPTED_NOTE: Final = (
    "interrupted: the run's root span is missing (the process was killed or crashed before "
    "the run ended, or its last spans were never written); below is what was written"
)
"""What ``trace show`` says above a trace whose root span is missing."""


class TraceFileError(OrchestratorError, ValueError):
    """A file that is not OTLP/JSON lines (names the file and the line)."""


class TraceNotFoundError(OrchestratorError, LookupError):
    """No saved trace matches the run id, prefix or path asked for (or several do)."""


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event (an exception record, typically)."""

    name: str
    time_ns: int
    attributes: dict[str, AttrValue]


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span from a saved trace, with plain Python values.

    Ids are lowercase hex; ``parent_span_id`` is None for a span without a parent.
    ``status`` is ``"UNSET"``, ``"OK"`` or ``"ERROR"``. ``resource`` is shared by the spans of
    one resource block (not copied per span). ``parent_remote`` is what the span's flags say of
    its parent: in another process (True), in this one (False), or not recorded (None).
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    status: str
    status_message: str
    events: tuple[SpanEvent, ...]
    resource: dict[str, AttrValue]
    scope: str
    parent_remote: bool | None = None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass(frozen=True, slots=True)
class DamagedLine:
    """A line of a trace file that could not be read, and was skipped.

    ``number`` counts from 1; ``reason`` is short (``not JSON``, ``not UTF-8``, ``malformed span
    data``...), ``detail`` the parser's own words. ``at_end``: the last line, with no newline
    after it (a batch still being written, or one whose writer stopped mid-line).
    """

    number: int
    reason: str
    detail: str = ""
    at_end: bool = False


def damage_note(damaged: Sequence[DamagedLine]) -> str | None:
    """One line saying which lines were skipped (``2 damaged lines skipped (lines 2, 7)``), or
    None when there were none."""
    if not damaged:
        return None
    if len(damaged) == 1:
        d = damaged[0]
        where = "the last line, cut off" if d.at_end else d.reason
        return f"1 damaged line skipped (line {d.number}: {where})"
    numbers = ", ".join(str(d.number) for d in damaged[:6])
    more = ", ..." if len(damaged) > 6 else ""
    return f"{len(damaged)} damaged lines skipped (lines {numbers}{more})"


class LoadedTrace(list[SpanRecord]):
    """What :func:`load_trace` returns: the spans, in file order (a plain list for every other
    use), and ``damaged``, the lines it skipped."""

    __slots__ = ("damaged",)

    def __init__(
        self, spans: Iterable[SpanRecord] = (), damaged: Iterable[DamagedLine] = ()
    ) -> None:
        super().__init__(spans)
        self.damaged: tuple[DamagedLine, ...] = tuple(damaged)

    @property
    def damage_note(self) -> str | None:
        return damage_note(self.damaged)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One saved run, as ``trace list`` shows it.

    ``run_id`` is the root's ``gen_ai.conversation.id`` (the run id), falling back to the file
    name. ``status`` is the root span's status and ``outcome`` its ``orchestrator.outcome``.

    ``interrupted``: some trace in the file has lost its root span (the process was killed or
    crashed before the root ended, or the batch holding it was never written), so what the
    spans that remain say is not how the run ended: ``status`` is then ``"ERROR"`` and
    ``outcome`` ``"interrupted"``, and ``root_agent`` names the top agent the spans mention.
    ``damaged`` lists the lines of the file that could not be read (skipped; the rest counts).
    """

    run_id: str
    path: Path
    root_agent: str | None
    start: datetime | None
    duration_s: float
    span_count: int
    status: str
    outcome: str | None
    trace_id: str | None
    service_name: str | None
    interrupted: bool = False
    damaged: tuple[DamagedLine, ...] = ()

    @property
    def damage_note(self) -> str | None:
        """``2 damaged lines skipped (lines 2, 7)``, or None."""
        return damage_note(self.damaged)


# --------------------------------------------------------------------------------------------
# Reading OTLP/JSON.


def _any_value(value: Mapping[str, Any]) -> AttrValue:
    """An OTLP/JSON ``AnyValue`` as a Python value (64-bit ints arrive as strings)."""
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in value["arrayValue"].get("values", ())]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", ()))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _attributes(pairs: Iterable[Mapping[str, Any]]) -> dict[str, AttrValue]:
    return {str(kv["key"]): _any_value(kv.get("value", {})) for kv in pairs}


_STATUS_CODES: Final = {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_NO_VALUE: Final[Mapping[str, Any]] = {}
_NO_EVENTS: Final[tuple[()]] = ()


class _Reader:
    """Turns OTLP/JSON documents into :class:`SpanRecord` values, sharing repeated strings.

    A big run repeats the same few strings tens of thousands of times (its trace id, the run
    id in every span, agent names, attribute keys, a parent's id in each child); ``json``
    makes a new object for each. Sharing them through one dict while a file is read cut a
    65,000-span trace's records by tens of MB. The common attribute values (strings, ints)
    are decoded inline; anything else goes through :func:`_any_value`, with the same result.
    An attribute key or an id already seen is one dict look-up (``_keys``, ``_ids``: the id
    as written to the shared lowercase one), as that runs for every attribute and span.
    """

    __slots__ = ("_ids", "_keys", "_shared")

    def __init__(self) -> None:
        self._shared: dict[str, str] = {}
        self._keys: dict[str, str] = {}  # attribute keys seen, each the shared one
        self._ids: dict[str, str] = {}  # ids as written, each as shared lowercase

    def attributes(self, pairs: Iterable[Mapping[str, Any]]) -> dict[str, AttrValue]:
        # Per attribute of every span: written for speed (a 5,000-child run has 300,000). A
        # key already seen is one dict look-up (a big run has a few dozen keys).
        share = self._shared.setdefault
        keys = self._keys
        out: dict[str, AttrValue] = {}
        for kv in pairs:
            key = kv["key"]
            try:
                shared_key = keys[key]
            except (KeyError, TypeError):  # new, or not a string (then not kept)
                shared_key = share(key, key) if type(key) is str else str(key)
                if type(key) is str:
                    keys[key] = shared_key
            try:
                value = kv["value"]
            except KeyError:
                value = _NO_VALUE
            if "stringValue" in value:
                found = value["stringValue"]
                out[shared_key] = share(found, found) if type(found) is str else str(found)
            elif "intValue" in value and "boolValue" not in value:
                out[shared_key] = int(value["intValue"])
            else:
                out[shared_key] = _any_value(value)
        return out

    def _id(self, raw: object) -> str:
        """An id as the shared lowercase text (a parent's id is its span's id, shared)."""
        if type(raw) is str:
            found = self._ids.get(raw)
            if found is None:
                lowered = raw.lower()
                found = self._ids[raw] = self._shared.setdefault(lowered, lowered)
            return found
        text = str(raw).lower()
        return self._shared.setdefault(text, text)

    def spans(self, doc: Mapping[str, Any]) -> list[SpanRecord]:
        """The spans of one document (one line), in order; raises on malformed span data
        (``KeyError``, ``TypeError``, ``ValueError``, ``AttributeError``) as before."""
        share = self._shared.setdefault
        attributes = self.attributes
        ids = self._ids.get
        to_id = self._id
        out: list[SpanRecord] = []
        append = out.append
        for resource_spans in doc.get("resourceSpans", ()):
            resource = attributes(resource_spans.get("resource", _NO_VALUE).get("attributes", ()))
            for scope_spans in resource_spans.get("scopeSpans", ()):
                name = str(scope_spans.get("scope", _NO_VALUE).get("name", ""))
                scope = share(name, name)
                for s in scope_spans.get("spans", ()):
                    get = s.get
                    status = get("status", _NO_VALUE)
                    code = status.get("code", 0)
                    if isinstance(code, str):  # enum names are legal OTLP/JSON for lenient writers
                        code = _STATUS_CODES.get(code, 0)
                    kind = get("kind", 0)
                    events = get("events", _NO_EVENTS)
                    flags = get("flags")
                    if type(flags) is int:  # as _parent_remote says, inline
                        remote = (
                            bool(flags & _FLAGS_IS_REMOTE) if flags & _FLAGS_HAS_IS_REMOTE else None
                        )
                    else:
                        remote = None if flags is None else _parent_remote(flags)
                    raw = get("traceId", "")
                    trace_id = (type(raw) is str and ids(raw)) or to_id(raw)
                    raw = get("spanId", "")
                    span_id = (type(raw) is str and ids(raw)) or to_id(raw)
                    raw = get("parentSpanId", "")
                    parent_id = (type(raw) is str and ids(raw)) or to_id(raw)
                    name = str(get("name", ""))
                    append(
                        SpanRecord(
                            trace_id,
                            span_id,
                            parent_id or None,
                            share(name, name),
                            0 if isinstance(kind, str) else int(kind),
                            int(get("startTimeUnixNano", 0)),
                            int(get("endTimeUnixNano", 0)),
                            attributes(get("attributes", ())),
                            _STATUS_NAMES.get(int(code), "UNSET"),
                            str(status.get("message", "")),
                            tuple(
                                SpanEvent(
                                    name=str(e.get("name", "")),
                                    time_ns=int(e.get("timeUnixNano", 0)),
                                    attributes=attributes(e.get("attributes", ())),
                                )
                                for e in events
                            )
                            if events is not _NO_EVENTS
                            else (),
                            resource,
                            scope,
                            remote,
                        )
                    )
        return out


def _spans_from_doc(doc: Mapping[str, Any]) -> list[SpanRecord]:
    return _Reader().spans(doc)


def _parent_remote(flags: object) -> bool | None:
    if isinstance(flags, bool) or not isinstance(flags, int) or not flags & _FLAGS_HAS_IS_REMOTE:
        return None
    return bool(flags & _FLAGS_IS_REMOTE)


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str, str]:
    """A line's OTLP/JSON document, else None with the reason and the parser's words."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        what = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not JSON"
        return None, what, str(exc)
    except RecursionError:  # JSON nested past what the parser can follow: no trace line is
        return None, "JSON nested too deeply", ""
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        return None, "not an OTLP/JSON traces line", ""
    return doc, "", ""


def _salvage(raw: bytes) -> dict[str, Any] | None:
    """The whole batch in a damaged line, if one follows a batch cut off mid-write on it.

    A writer that appended after a failed write without starting a new line (as this
    package's did before) leaves ``<cut batch><whole batch>``; the whole one starts where a
    line starts (a string value holds that text only with its quotes escaped), so try there.
    """
    at = raw.find(_LINE_START, 1)
    for _ in range(_SALVAGE_TRIES):
        if at < 0:
            return None
        doc, _reason, _detail = _parse_line(raw[at:])
        if doc is not None:
            return doc
        at = raw.find(_LINE_START, at + 1)
    return None


def _iter_docs(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, DamagedLine | None]]:
    """The file's lines, one at a time: ``(number, document, damage)`` for each line that is
    not blank, with the document None when the line is damaged beyond salvage.

    Streamed, so only one line's document is in memory at once: a 65,000-span trace is
    hundreds of MB as JSON objects, and holding them all (with the file's bytes) is what made
    ``trace show`` of a big run take over 300 MB. Lines end at ``\n`` only (binary reading
    splits there and nowhere else): a captured text may hold U+2028 and the like, written raw.
    A damaged line costs only itself. Raises :class:`TraceFileError` only when the file cannot
    be read at all.
    """
    try:
        f = path.open("rb")
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read: {exc}") from exc
    with f:
        number = 0
        while True:
            try:
                raw = f.readline()
            except OSError as exc:
                raise TraceFileError(f"{path}: cannot read: {exc}") from exc
            if not raw:
                return
            number += 1
            if not raw.strip():
                continue
            at_end = not raw.endswith(b"\n")  # no newline after it: cut off while written
            line = raw if at_end else raw[:-1]  # the parser's words are about the line itself
            del raw
            doc, reason, detail = _parse_line(line)
            if doc is None:
                doc = _salvage(line)
                if doc is not None:
                    reason = "a batch cut off mid-write"
                    detail = "the whole batch appended after it on the same line was read"
                damage: DamagedLine | None = DamagedLine(
                    number, reason, detail, at_end and doc is None
                )
            else:
                damage = None
            del line
            yield number, doc, damage
            doc = None  # not alive while the next line is decoded


def read_docs(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[DamagedLine]]:
    """The file's OTLP/JSON documents with their line numbers, and the lines that are damaged
    (all at once: :func:`_iter_docs` streams them)."""
    docs: list[tuple[int, dict[str, Any]]] = []
    damaged: list[DamagedLine] = []
    for number, doc, damage in _iter_docs(path):
        if damage is not None:
            damaged.append(damage)
        if doc is not None:
            docs.append((number, doc))
    return docs, damaged


def unreadable(path: Path, damaged: Sequence[DamagedLine]) -> TraceFileError:
    first = damaged[0]
    detail = f": {first.detail}" if first.detail else ""
    return TraceFileError(f"{path}:{first.number}: {first.reason}{detail}")


@contextmanager
def no_collection() -> Iterator[None]:
    """The cyclic garbage collector paused for a block that makes millions of objects.

    Reading a big trace makes ~1.5 million attribute values and dicts, none in a cycle; each
    allocation batch woke the collector, which walked the whole growing heap again: that was
    almost half of reading a 65,000-span trace. Reference counting still frees everything;
    the collector resumes (if it ran before) when the block ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_trace(path: Path) -> LoadedTrace:
    """Every span in an OTLP/JSON lines file, in file order.

    Damaged lines are skipped and listed in the result's ``damaged`` (with
    :attr:`~LoadedTrace.damage_note` to show): a batch cut off by a full disk, a killed process
    or a stray write costs that batch, not the file. A line that holds a cut-off batch followed
    by a whole one still yields the whole one. Raises :class:`TraceFileError` naming the line
    when no line at all is OTLP/JSON traces (not a trace file), or the file cannot be read.
    """
    with no_collection():
        return _load(path)


def _load(path: Path) -> LoadedTrace:
    reader = _Reader()
    spans: list[SpanRecord] = []
    damaged: list[DamagedLine] = []
    readable = 0
    for number, doc, damage in _iter_docs(path):
        if damage is not None:
            damaged.append(damage)
        if doc is None:
            continue
        try:
            spans.extend(reader.spans(doc))
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            damaged.append(DamagedLine(number, "malformed span data", repr(exc)[:200]))
        else:
            readable += 1
        doc = None  # not alive while the next line is decoded
    if damaged and not readable:  # nothing of it is a trace: say what the first line is
        raise unreadable(path, sorted(damaged, key=lambda d: d.number))
    return LoadedTrace(spans, sorted(damaged, key=lambda d: d.number))


def _is_trace_file(path: Path) -> bool:
    """Cheap sniff: the first readable line is a JSON object with ``resourceSpans``, or a line
    starts as trace lines do (a first batch cut off mid-write still marks a trace file).

    Up to a few unreadable lines are passed over, so a damaged first line does not hide the
    intact ones after it.
    """
    unreadable = 0
    try:
        with path.open("rb") as f:
            for raw in f:
                if not raw.strip():
                    continue
                if raw.lstrip().startswith(_LINE_START):
                    return True
                try:
                    doc = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    unreadable += 1
                    if unreadable >= _SNIFF_LINES:
                        return False
                    continue
                return isinstance(doc, dict) and "resourceSpans" in doc
    except OSError:
        return False
    return False


# --------------------------------------------------------------------------------------------
# Runs.


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def root_spans(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    """Spans whose parent is not in the file, earliest first.

    A run started inside a caller's span has a parent that lives in the caller's trace, not in
    this file; it is still this file's root.
    """
    ids = {s.span_id for s in spans}
    return sorted(
        (s for s in spans if s.parent_span_id is None or s.parent_span_id not in ids),
        key=lambda s: (s.start_ns, s.parent_span_id is not None),
    )


def _agent_name(span: SpanRecord) -> str:
    name = span.attributes.get("gen_ai.agent.name")
    if isinstance(name, str) and name:
        return name
    return span.name.removeprefix("invoke_agent ").strip() or span.name


def _starts_a_run(span: SpanRecord) -> bool:
    """Whether a span whose parent is not in the file is where its trace begins, rather than a
    span whose parent was lost (never ended, or never written).

    Every span the runtime makes descends from the run's root agent span (``invoke_agent`` at
    depth 0), whose parent, if any, is the caller's span in the caller's trace. Another
    instrumentation's span starts its trace if it has no parent, or one in another process
    (or its flags do not say); a parent in this process that is not in the file was lost.
    """
    if span.scope == _OUR_SCOPE:
        operation = span.attributes.get("gen_ai.operation.name")
        if operation is None:
            operation = span.name.split(" ", 1)[0]
        if operation != "invoke_agent":
            return False
        depth = span.attributes.get(AGENT_DEPTH)
        if isinstance(depth, int) and not isinstance(depth, bool):
            return depth == 0
        return span.parent_span_id is None
    return span.parent_span_id is None or span.parent_remote is not False


def _top_agent(spans: Sequence[SpanRecord]) -> str | None:
    """The name of the shallowest agent the spans mention (the root's, if any span of its
    own turns survived), for a run whose root span is missing."""
    best: tuple[int, int] | None = None
    name: str | None = None
    for s in spans:
        path = s.attributes.get(AGENT_PATH)
        agent = s.attributes.get("gen_ai.agent.name")
        if isinstance(path, str) and isinstance(agent, str) and agent:
            key = (path.count("/"), s.start_ns)
            if best is None or key < best:
                best, name = key, agent
    return name


def summarize(
    path: Path, spans: Sequence[SpanRecord], damaged: Sequence[DamagedLine] = ()
) -> RunSummary:
    tops = root_spans(spans)
    starts = [s for s in tops if _starts_a_run(s)]
    # the run's own root agent span, whatever started earlier beside it (another library's
    # spans that made traces of their own, as the MCP SDK's connection spans once did)
    ours = [s for s in starts if s.scope == _OUR_SCOPE]
    root = (ours or starts)[0] if starts else None
    # a trace of the file without a root of its own: killed, crashed, or its root's batch lost
    interrupted = {s.trace_id for s in spans} != {s.trace_id for s in starts}
    first = root or (tops[0] if tops else None)
    run_id: str | None = None
    for candidate in ([root] if root else []) + list(spans):
        value = candidate.attributes.get(_CONVERSATION_ID)
        if isinstance(value, str) and value:
            run_id = value
            break
    start_ns = min((s.start_ns for s in spans), default=0)
    end_ns = max((s.end_ns for s in spans), default=0)
    outcome = root.attributes.get(OUTCOME) if root else None
    service = first.resource.get("service.name") if first else None
    if interrupted:
        status, outcome = "ERROR", INTERRUPTED
        agent = _agent_name(root) if root else _top_agent(spans)
    else:
        status = root.status if root else "UNSET"
        agent = _agent_name(root) if root else None
    return RunSummary(
        run_id=run_id or path.name.removesuffix(".jsonl"),
        path=path,
        root_agent=agent,
        start=datetime.fromtimestamp(start_ns / 1e9, tz=UTC) if start_ns else None,
        duration_s=max(0, end_ns - start_ns) / 1e9,
        span_count=len(spans),
        status=status,
        outcome=str(outcome) if outcome is not None else None,
        trace_id=first.trace_id if first else None,
        service_name=str(service) if service is not None else None,
        interrupted=interrupted,
        damaged=tuple(damaged),
    )


def list_runs(runs_dir: Path, *, cache: bool = True) -> list[RunSummary]:
    """The saved runs under ``runs_dir`` (searched recursively), newest first.

    Every ``*.jsonl`` file that holds OTLP/JSON traces counts as one run; other JSONL files
    (event logs, transcripts) are skipped, and so are files with no readable span, so one
    damaged file does not hide the others. A damaged line hides only itself: the run is
    listed from the rest, with :attr:`RunSummary.damaged` saying what was skipped, and a run
    whose root span is missing is listed as interrupted. A missing folder is simply empty.

    A summary needs every line of its file (the span count, the earliest start, the damaged
    lines), and reading a big run's file takes seconds; so with ``cache`` the summaries are
    kept in a small index (see :class:`_SummaryCache`) and a file is read again only when its
    size, modification time or inode changed (a run still being written, a file replaced).
    """
    if not runs_dir.is_dir():
        return []
    index = _SummaryCache.open(runs_dir) if cache else None
    runs: list[RunSummary] = []
    for path in sorted(runs_dir.rglob("*.jsonl")):
        try:
            st = path.stat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        if index is not None:
            hit, summary = index.get(path, key)
            if hit:
                if summary is not None:
                    runs.append(summary)
                continue
        found = _summary_of(path)
        if isinstance(found, Exception):
            continue  # not remembered: each listing says it skipped the file
        if index is not None:
            index.put(path, key, found)
        if found is not None:
            runs.append(found)
    if index is not None:
        index.save()
    epoch = datetime.fromtimestamp(0, tz=UTC)
    runs.sort(
        key=lambda r: (r.start or epoch, r.path.stat().st_mtime if r.path.exists() else 0.0),
        reverse=True,
    )
    return runs


def _summary_of(path: Path) -> RunSummary | Exception | None:
    """The run a file holds; None when it is not a trace file or has no span; what went
    wrong when it looks like a trace file but cannot be read (logged as a one-line warning
    naming it: one hostile file must not take the listing of every other run down with it,
    nor vanish without a word)."""
    try:
        if not _is_trace_file(path):
            return None
        spans = load_trace(path)
        if not spans:
            return None
        return summarize(path, spans, spans.damaged)
    except TraceFileError as exc:  # it names the file and the line
        _logger.warning("skipped %s", _one_line(exc))
        return exc
    except Exception as exc:  # a reader's bug met by a hostile file
        _logger.warning("skipped %s: it cannot be read: %s", path, _one_line(exc))
        return exc


_CACHE_VERSION: Final = 2
"""2: summaries name the run's own root agent whatever other roots the file holds."""
_RECENT_NS: Final = 2_000_000_000


class _SummaryCache:
    """What ``trace list`` found in each file of one runs folder, by the file's identity.

    Kept as one JSON file per folder under ``$XDG_CACHE_HOME/orchestrator/trace-list/``
    (``~/.cache`` when unset), not in the runs folder: listing should not write into a folder
    of someone's results, which may be read-only or shared. Entries are keyed by the file's
    path relative to the folder and checked against its ``(size, mtime_ns, inode)``, so a
    file that grew (a run still writing), was rewritten or replaced is read again; a file
    found to be no trace is remembered as such. Anything wrong with the index (missing,
    damaged, another version, not writable) only means files are read: it is never an error,
    and an entry that does not have exactly the expected shape counts as missing.
    """

    __slots__ = ("_changed", "_entries", "_file", "_folder", "_root", "_seen")

    def __init__(self, folder: Path, root: Path, file: Path, entries: dict[str, Any]) -> None:
        self._folder = folder  # as given: the paths listed are under it
        self._root = root
        self._file = file
        self._entries = entries
        self._seen: set[str] = set()
        self._changed = False

    @classmethod
    def open(cls, runs_dir: Path) -> _SummaryCache:
        root = runs_dir.resolve()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:24]
        file = Path(base) / "orchestrator" / "trace-list" / f"{digest}.json"
        entries: dict[str, Any] = {}
        try:
            data = json.loads(file.read_bytes())
            if (
                isinstance(data, dict)
                and data.get("version") == _CACHE_VERSION
                and data.get("root") == str(root)
                and isinstance(data.get("files"), dict)
            ):
                entries = data["files"]
        except (OSError, ValueError):
            pass
        return cls(runs_dir, root, file, entries)

    def _name(self, path: Path) -> str:
        """The path as listed, not resolved: a run without a run id is named by its file, so
        a link under another name is an entry of its own."""
        try:
            return str(path.relative_to(self._folder))
        except ValueError:
            return str(path)

    def get(self, path: Path, key: tuple[int, int, int]) -> tuple[bool, RunSummary | None]:
        """``(True, summary)`` when the index knows this very file (``summary`` None: no
        trace in it), else ``(False, None)``."""
        name = self._name(path)
        self._seen.add(name)
        entry = self._entries.get(name)
        if not isinstance(entry, dict) or entry.get("key") != list(key):
            return False, None
        if entry.get("run") is None:
            return True, None
        try:
            return True, _summary_from_json(entry["run"], path)
        except (KeyError, TypeError, ValueError):
            return False, None

    def put(self, path: Path, key: tuple[int, int, int], summary: RunSummary | None) -> None:
        """Remember what ``path`` holds, unless it was modified just now: a file's times are
        coarse (a few ms), so a file rewritten at once to the same size could pass for the
        one read; such a file (a run still writing, typically) is read every time instead."""
        name = self._name(path)
        self._seen.add(name)
        if time.time_ns() - key[1] < _RECENT_NS:
            if self._entries.pop(name, None) is not None:
                self._changed = True
            return
        run = None if summary is None else _summary_to_json(summary)
        self._entries[name] = {"key": list(key), "run": run}
        self._changed = True

    def save(self) -> None:
        """Write the index when it changed (entries of files now gone are dropped), atomically."""
        gone = set(self._entries) - self._seen
        if not self._changed and not gone:
            return
        entries = {name: self._entries[name] for name in self._seen if name in self._entries}
        data = {"version": _CACHE_VERSION, "root": str(self._root), "files": entries}
        try:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._file.with_name(f"{self._file.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            os.replace(temporary, self._file)
        except OSError:
            pass


def _summary_to_json(r: RunSummary) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "root_agent": r.root_agent,
        "start": r.start.isoformat() if r.start is not None else None,
        "duration_s": r.duration_s,
        "span_count": r.span_count,
        "status": r.status,
        "outcome": r.outcome,
        "trace_id": r.trace_id,
        "service_name": r.service_name,
        "interrupted": r.interrupted,
        "damaged": [[d.number, d.reason, d.detail, d.at_end] for d in r.damaged],
    }


def _optional_str(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"not a string: {value!r}")
    return value


def _summary_from_json(data: Mapping[str, Any], path: Path) -> RunSummary:
    """A cached summary back, checking every field's type (raises TypeError/KeyError/ValueError)."""
    start = _optional_str(data["start"])
    duration = data["duration_s"]
    count = data["span_count"]
    interrupted = data["interrupted"]
    if not isinstance(duration, int | float) or isinstance(duration, bool):
        raise TypeError("duration_s")
    if type(count) is not int or type(interrupted) is not bool:
        raise TypeError("span_count or interrupted")
    damaged = []
    for number, reason, detail, at_end in data["damaged"]:
        if type(number) is not int or type(at_end) is not bool:
            raise TypeError("damaged")
        damaged.append(DamagedLine(number, str(reason), str(detail), at_end))
    run_id, status = data["run_id"], data["status"]
    if not isinstance(run_id, str) or not isinstance(status, str):
        raise TypeError("run_id or status")
    return RunSummary(
        run_id=run_id,
        path=path,
        root_agent=_optional_str(data["root_agent"]),
        start=datetime.fromisoformat(start) if start is not None else None,
        duration_s=float(duration),
        span_count=count,
        status=status,
        outcome=_optional_str(data["outcome"]),
        trace_id=_optional_str(data["trace_id"]),
        service_name=_optional_str(data["service_name"]),
        interrupted=interrupted,
        damaged=tuple(damaged),
    )


def _trace_file_named(run: str, runs_dir: Path) -> Path | None:
    """The one trace file named ``<run>.jsonl`` (or ``run`` itself) under ``runs_dir``, if any.

    The CLI names trace files by run id, so a run asked for by its id is found without reading
    every saved trace (``list_runs`` reads every file its index does not know yet, which is
    slow with many large ones). A file so named wins over another file whose spans carry
    ``run`` as their run id.
    """
    if not runs_dir.is_dir() or Path(run).name != run or run in (".", ".."):
        return None  # only a bare name: no absolute path, folder or ``..`` to search with
    name = run if run.endswith(".jsonl") else f"{run}.jsonl"
    files = [p for p in runs_dir.rglob(glob.escape(name)) if p.is_file()]
    found = [p for p in files if _is_trace_file(p)]
    if files and not found:  # say so, rather than "no saved trace matches"
        raise TraceNotFoundError(f"{files[0]} is not a saved trace (no OTLP/JSON trace lines)")
    return found[0] if len(found) == 1 else None


def resolve_run(run: str | None, runs_dir: Path) -> Path:
    """The trace file for ``run``: a path, a run id, a unique run-id (or file-name) prefix, or
    ``None`` for the newest run. Raises :class:`TraceNotFoundError` with the candidates when
    the prefix is ambiguous."""
    if run is not None:
        as_path = Path(run).expanduser()
        if as_path.is_file():
            return as_path
        named = _trace_file_named(run, runs_dir)
        if named is not None:
            return named
    runs = list_runs(runs_dir)
    if not runs:
        raise TraceNotFoundError(f"no saved traces in {runs_dir}")
    if run is None:
        return runs[0].path
    exact = [r for r in runs if r.run_id == run or r.path.name == run]
    if len(exact) == 1:
        return exact[0].path
    matches = exact or [
        r
        for r in runs
        if r.run_id.startswith(run)
        or r.path.name.startswith(run)
        or (r.trace_id or "").startswith(run)
    ]
    if not matches:
        raise TraceNotFoundError(f"no saved trace matches {run!r} in {runs_dir}")
    if len(matches) > 1:
        names = ", ".join(r.run_id for r in matches[:8])
        raise TraceNotFoundError(f"{run!r} matches {len(matches)} runs ({names}); be more specific")
    return matches[0].path
