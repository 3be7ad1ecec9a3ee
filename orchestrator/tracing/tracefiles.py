"""Saved traces read back: OTLP/JSON lines files as plain :class:`SpanRecord` values, the runs a
folder holds (:func:`list_runs`) and the one a run id or prefix names (:func:`resolve_run`).

With no OTLP endpoint configured, :func:`~orchestrator.tracing.configure_tracing` writes each
run's spans to a runs folder as OTLP/JSON lines (:mod:`.otlp_json`). Reading parses that JSON
directly, with no protobuf or SDK, so a run can be listed and drawn (:mod:`.view`) on a machine
that has no tracing backend; sending one to a collector later goes through protobuf instead
(:mod:`.export`), so ids and typed attributes arrive exactly as they were recorded.
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
    "AttrValue",
    "RunSummary",
    "SpanEvent",
    "SpanRecord",
    "TraceFileError",
    "TraceNotFoundError",
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
    one resource block (not copied per span).
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

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One saved run, as ``trace list`` shows it.

    ``run_id`` is the root's ``gen_ai.conversation.id`` (the run id), falling back to the file
    name. ``status`` is the root span's status and ``outcome`` its ``orchestrator.outcome``.
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
                    )
                )
    return out


def _read_lines(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read: {exc}") from exc
    # lines end at "\n" only: a captured text may hold U+2028 and the like, written raw
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if number == len(lines) and number > 1:
                return  # the last line was cut off while it was written: keep what came before
            what = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not JSON"
            raise TraceFileError(f"{path}:{number}: {what}: {exc}") from exc
        if not isinstance(doc, dict) or "resourceSpans" not in doc:
            raise TraceFileError(f"{path}:{number}: not an OTLP/JSON traces line")
        yield number, doc


def load_trace(path: Path) -> list[SpanRecord]:
    """Every span in an OTLP/JSON lines file, in file order.

    Raises :class:`TraceFileError` naming the line for anything that is not OTLP/JSON.
    """
    spans: list[SpanRecord] = []
    for number, doc in _read_lines(path):
        try:
            spans.extend(_spans_from_doc(doc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TraceFileError(f"{path}:{number}: malformed span data: {exc!r}") from exc
    return spans


def _is_trace_file(path: Path) -> bool:
    """Cheap sniff: the first non-empty line is a JSON object with ``resourceSpans``."""
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    doc = json.loads(line)
                    return isinstance(doc, dict) and "resourceSpans" in doc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
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


def _summarize(path: Path, spans: Sequence[SpanRecord]) -> RunSummary:
    roots = _roots(spans)
    root = roots[0] if roots else None
    run_id: str | None = None
    for candidate in ([root] if root else []) + list(spans):
        value = candidate.attributes.get(_CONVERSATION_ID)
        if isinstance(value, str) and value:
            run_id = value
            break
    start_ns = min((s.start_ns for s in spans), default=0)
    end_ns = max((s.end_ns for s in spans), default=0)
    outcome = root.attributes.get(_OUTCOME) if root else None
    service = root.resource.get("service.name") if root else None
    return RunSummary(
        run_id=run_id or path.name.removesuffix(".jsonl"),
        path=path,
        root_agent=_agent_name(root) if root else None,
        start=datetime.fromtimestamp(start_ns / 1e9, tz=UTC) if start_ns else None,
        duration_s=max(0, end_ns - start_ns) / 1e9,
        span_count=len(spans),
        status=root.status if root else "UNSET",
        outcome=str(outcome) if outcome is not None else None,
        trace_id=root.trace_id if root else None,
        service_name=str(service) if service is not None else None,
    )


def list_runs(runs_dir: Path) -> list[RunSummary]:
    """The saved runs under ``runs_dir`` (searched recursively), newest first.

    Every ``*.jsonl`` file whose first line is OTLP/JSON traces counts as one run; other JSONL
    files (event logs, transcripts) are skipped, and so are trace files that fail to parse, so
    one damaged file does not hide the others. A missing folder is simply empty.
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
        runs.append(_summarize(path, spans))
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
