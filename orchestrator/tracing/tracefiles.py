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
"""

from __future__ import annotations

import base64
import glob
import json
from collections.abc import Iterable, Mapping, Sequence
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

_STATUS_NAMES: Final = {0: "UNSET", 1: "OK", 2: "ERROR"}
_CONVERSATION_ID: Final = "gen_ai.conversation.id"
_OUTCOME: Final = "orchestrator.outcome"
_DEPTH: Final = "orchestrator.agent.depth"
_AGENT_PATH: Final = "orchestrator.agent.path"
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


def _spans_from_doc(doc: Mapping[str, Any]) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for resource_spans in doc.get("resourceSpans", ()):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", ()))
        for scope_spans in resource_spans.get("scopeSpans", ()):
            scope = str(scope_spans.get("scope", {}).get("name", ""))
            for s in scope_spans.get("spans", ()):
                status = s.get("status", {})
                code = status.get("code", 0)
                if isinstance(code, str):  # enum names are legal OTLP/JSON for lenient writers
                    code = {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code, 0)
                out.append(
                    SpanRecord(
                        trace_id=str(s.get("traceId", "")).lower(),
                        span_id=str(s.get("spanId", "")).lower(),
                        parent_span_id=str(s.get("parentSpanId", "")).lower() or None,
                        name=str(s.get("name", "")),
                        kind=int(s.get("kind", 0)) if not isinstance(s.get("kind"), str) else 0,
                        start_ns=int(s.get("startTimeUnixNano", 0)),
                        end_ns=int(s.get("endTimeUnixNano", 0)),
                        attributes=_attributes(s.get("attributes", ())),
                        status=_STATUS_NAMES.get(int(code), "UNSET"),
                        status_message=str(status.get("message", "")),
                        events=tuple(
                            SpanEvent(
                                name=str(e.get("name", "")),
                                time_ns=int(e.get("timeUnixNano", 0)),
                                attributes=_attributes(e.get("attributes", ())),
                            )
                            for e in s.get("events", ())
                        ),
                        resource=resource,
                        scope=scope,
                        parent_remote=_parent_remote(s.get("flags")),
                    )
                )
    return out


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


def _read_docs(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[DamagedLine]]:
    """The file's OTLP/JSON documents with their line numbers, and the lines that are damaged.

    A damaged line costs only itself: it is skipped and listed, and reading goes on. Raises
    :class:`TraceFileError` only when the file cannot be read at all.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read: {exc}") from exc
    # lines end at "\n" only: a captured text may hold U+2028 and the like, written raw
    lines = data.split(b"\n")
    docs: list[tuple[int, dict[str, Any]]] = []
    damaged: list[DamagedLine] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        doc, reason, detail = _parse_line(raw)
        if doc is None:
            at_end = number == len(lines)  # no newline after it: cut off while written
            salvaged = _salvage(raw)
            if salvaged is not None:
                reason = "a batch cut off mid-write"
                detail = "the whole batch appended after it on the same line was read"
            damaged.append(DamagedLine(number, reason, detail, at_end and salvaged is None))
            if salvaged is None:
                continue
            doc = salvaged
        docs.append((number, doc))
    return docs, damaged


def _unreadable(path: Path, damaged: Sequence[DamagedLine]) -> TraceFileError:
    first = damaged[0]
    detail = f": {first.detail}" if first.detail else ""
    return TraceFileError(f"{path}:{first.number}: {first.reason}{detail}")


def load_trace(path: Path) -> LoadedTrace:
    """Every span in an OTLP/JSON lines file, in file order.

    Damaged lines are skipped and listed in the result's ``damaged`` (with
    :attr:`~LoadedTrace.damage_note` to show): a batch cut off by a full disk, a killed process
    or a stray write costs that batch, not the file. A line that holds a cut-off batch followed
    by a whole one still yields the whole one. Raises :class:`TraceFileError` naming the line
    when no line at all is OTLP/JSON traces (not a trace file), or the file cannot be read.
    """
    docs, damaged = _read_docs(path)
    spans: list[SpanRecord] = []
    readable = 0
    for number, doc in docs:
        try:
            spans.extend(_spans_from_doc(doc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            damaged.append(DamagedLine(number, "malformed span data", repr(exc)))
            continue
        readable += 1
    if damaged and not readable:  # nothing of it is a trace: say what the first line is
        raise _unreadable(path, sorted(damaged, key=lambda d: d.number))
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
                except (UnicodeDecodeError, json.JSONDecodeError):
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


def _roots(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
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
        depth = span.attributes.get(_DEPTH)
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
        path = s.attributes.get(_AGENT_PATH)
        agent = s.attributes.get("gen_ai.agent.name")
        if isinstance(path, str) and isinstance(agent, str) and agent:
            key = (path.count("/"), s.start_ns)
            if best is None or key < best:
                best, name = key, agent
    return name


def _summarize(
    path: Path, spans: Sequence[SpanRecord], damaged: Sequence[DamagedLine] = ()
) -> RunSummary:
    tops = _roots(spans)
    starts = [s for s in tops if _starts_a_run(s)]
    root = starts[0] if starts else None
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
    outcome = root.attributes.get(_OUTCOME) if root else None
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


def list_runs(runs_dir: Path) -> list[RunSummary]:
    """The saved runs under ``runs_dir`` (searched recursively), newest first.

    Every ``*.jsonl`` file that holds OTLP/JSON traces counts as one run; other JSONL files
    (event logs, transcripts) are skipped, and so are files with no readable span, so one
    damaged file does not hide the others. A damaged line hides only itself: the run is
    listed from the rest, with :attr:`RunSummary.damaged` saying what was skipped, and a run
    whose root span is missing is listed as interrupted. A missing folder is simply empty.
    """
    if not runs_dir.is_dir():
        return []
    runs: list[RunSummary] = []
    for path in sorted(runs_dir.rglob("*.jsonl")):
        if not path.is_file() or not _is_trace_file(path):
            continue
        try:
            spans = load_trace(path)
        except TraceFileError:
            continue
        if spans:
            runs.append(_summarize(path, spans, getattr(spans, "damaged", ())))
    epoch = datetime.fromtimestamp(0, tz=UTC)
    runs.sort(
        key=lambda r: (r.start or epoch, r.path.stat().st_mtime if r.path.exists() else 0.0),
        reverse=True,
    )
    return runs


def _trace_file_named(run: str, runs_dir: Path) -> Path | None:
    """The one trace file named ``<run>.jsonl`` (or ``run`` itself) under ``runs_dir``, if any.

    The CLI names trace files by run id, so a run asked for by its id is found without reading
    every saved trace (``list_runs`` parses them all, which is slow with many large ones). A
    file so named wins over another file whose spans carry ``run`` as their run id.
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
