"""Saved traces: list them, draw one in the terminal, send one to a collector later.

With no OTLP endpoint configured, :func:`~orchestrator.tracing.configure_tracing` writes each
run's spans to a runs folder as OTLP/JSON lines (the OpenTelemetry Collector file-exporter
format). This module reads those files back, so a run can be inspected on a machine that has no
tracing backend (``orchestrator trace list`` / ``trace show``), and shipped to Jaeger or any
OTLP backend afterwards, byte-for-byte the same spans (``orchestrator trace export``).

Reading parses the JSON directly into :class:`SpanRecord` (fast, no protobuf needed to draw a
trace); exporting goes through protobuf (:func:`~orchestrator.otlp_json.decode_otlp_json`) so
ids, timestamps and typed attributes arrive exactly as they were recorded.

The CLI entry points return exit codes and print through a ``rich`` console: :func:`show`,
:func:`list_command`, :func:`export_command`.
"""

from __future__ import annotations

import base64
import glob
import http.client
import json
import os
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast

from ..core.errors import OrchestratorError
from .otlp_json import decode_otlp_json
from .setup import resolve_otlp_endpoint, resolve_protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = [
    "AttrValue",
    "RunSummary",
    "SpanEvent",
    "SpanRecord",
    "TraceExportError",
    "TraceFileError",
    "TraceNotFoundError",
    "export_command",
    "export_trace",
    "list_command",
    "list_runs",
    "load_trace",
    "render_trace",
    "resolve_run",
    "show",
]

AttrValue: TypeAlias = (
    str | bool | int | float | bytes | list["AttrValue"] | dict[str, "AttrValue"] | None
)

_STATUS_NAMES: Final = {0: "UNSET", 1: "OK", 2: "ERROR"}
_STATUS_STYLES: Final = {"OK": "green", "ERROR": "bold red", "UNSET": "dim"}
_BAR_STYLES: Final = {"OK": "green", "ERROR": "red", "UNSET": "cyan"}
_ROLLUP_HINTS: Final = ("subtree", "total", "cumulative", "tree")
_CONVERSATION_ID: Final = "gen_ai.conversation.id"
_OUTCOME: Final = "orchestrator.outcome"


class TraceFileError(OrchestratorError, ValueError):
    """A file that is not OTLP/JSON lines (names the file and the line)."""


class TraceNotFoundError(OrchestratorError, LookupError):
    """No saved trace matches the run id, prefix or path asked for (or several do)."""


class TraceExportError(OrchestratorError):
    """The collector refused or could not be reached; spans already sent stay sent."""


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


# --------------------------------------------------------------------------------------------
# Drawing.


def _fmt_duration(ns: int) -> str:
    seconds = ns / 1e9
    if seconds < 0.001:
        return f"{ns / 1e6:.2f}ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:04.1f}s"


def _fmt_count(n: int | float) -> str:
    n = int(n)
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def _number(value: AttrValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _rollup_rank(key: str) -> tuple[bool, bool, int, str]:
    """Sort key among several roll-ups on one span: a subtree/total figure before an agent's
    own (``orchestrator.usage.*`` before ``orchestrator.own_usage.*``), then the shortest name."""
    return (not any(h in key for h in _ROLLUP_HINTS), "own" in key, len(key), key)


def _pick(attrs: Mapping[str, AttrValue], suffix: str, exclude: str = "cache") -> float | None:
    """A numeric attribute ending in ``suffix``: the standard ``gen_ai.usage`` one first, else
    the best roll-up by :func:`_rollup_rank`; cache counts are left out (they are part of the
    input already)."""
    standard = _number(attrs.get(f"gen_ai.usage.{suffix}"))
    if standard is not None:
        return standard
    found = [
        (key, num)
        for key, value in attrs.items()
        if key.endswith(suffix) and exclude not in key and (num := _number(value)) is not None
    ]
    if not found:
        return None
    found.sort(key=lambda kv: _rollup_rank(kv[0]))
    return found[0][1]


def _tokens_cell(attrs: Mapping[str, AttrValue]) -> str:
    """``in→out`` tokens; ``Σ`` marks a roll-up (an agent's subtree) rather than one call."""
    tokens_in = _pick(attrs, "input_tokens")
    tokens_out = _pick(attrs, "output_tokens")
    if tokens_in is None and tokens_out is None:
        return ""
    rolled = "gen_ai.usage.input_tokens" not in attrs and "gen_ai.usage.output_tokens" not in attrs
    left = _fmt_count(tokens_in) if tokens_in is not None else "?"
    right = _fmt_count(tokens_out) if tokens_out is not None else "?"
    return f"{'Σ' if rolled else ''}{left}→{right}"


def _cost_cell(attrs: Mapping[str, AttrValue]) -> str:
    costs = [
        (key, num)
        for key, value in attrs.items()
        if "cost" in key.rsplit(".", 1)[-1] and (num := _number(value)) is not None
    ]
    if not costs:
        return ""
    costs.sort(key=lambda kv: _rollup_rank(kv[0]))
    cost = costs[0][1]
    return f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}"


def _status_cell(span: SpanRecord) -> Text:
    from rich.text import Text

    text = Text(span.status, style=_STATUS_STYLES.get(span.status, ""))
    outcome = span.attributes.get(_OUTCOME)
    error_type = span.attributes.get("error.type")
    if outcome is not None:
        text.append(f" {outcome!s}")
    if error_type is not None and error_type != outcome:
        text.append(f" ({error_type!s})", style="red")
    return text


def _bar(span: SpanRecord, t0: int, total: int, width: int) -> Text:
    """The span's place on the trace's timeline: offset and length scaled to ``width`` cells.

    Every span gets at least one cell, so instant spans stay visible; the rest of the row is a
    faint rule so offsets can be read across rows.
    """
    from rich.text import Text

    if total > 0:  # integer arithmetic: float scaling put 200 ms of 1 s in cell 5, not 6
        first = min(width - 1, (span.start_ns - t0) * width // total)
        last = min(width, max(first + 1, -(-(span.end_ns - t0) * width // total)))
    else:
        first, last = 0, width
    text = Text("·" * first, style="bright_black")
    text.append("█" * (last - first), style=_BAR_STYLES.get(span.status, "cyan"))
    text.append("·" * (width - last), style="bright_black")
    return text


def _name_style(span: SpanRecord) -> str:
    operation = span.attributes.get("gen_ai.operation.name") or span.name.split(" ", 1)[0]
    return {
        "invoke_agent": "bold cyan",
        "execute_tool": "yellow",
        "chat": "magenta",
    }.get(str(operation), "")


def _walk(
    group: Sequence[SpanRecord],
    roots: Sequence[SpanRecord],
    children: Mapping[str, Sequence[SpanRecord]],
) -> Iterable[tuple[SpanRecord, str]]:
    """Depth-first rows with their tree guides (``├─``, ``└─``, ``│``).

    Iterative, so a deep chain of agents cannot hit the recursion limit, and each span is
    visited once, so a corrupt file with a parent cycle still ends; spans only reachable
    through such a cycle are drawn as extra roots at the end rather than hidden.
    """
    seen: set[str] = set()
    pending = [*roots, *(s for s in group if s.parent_span_id is not None)]
    for top in pending:
        if top.span_id in seen:
            continue
        stack: list[tuple[SpanRecord, str, str]] = [(top, "", "")]
        while stack:
            span, prefix, connector = stack.pop()
            if span.span_id in seen:
                continue
            seen.add(span.span_id)
            yield span, prefix + connector
            below = prefix + ("" if not connector else ("   " if connector == "└─ " else "│  "))
            kids = children.get(span.span_id, ())
            for index in range(len(kids) - 1, -1, -1):
                stack.append((kids[index], below, "└─ " if index == len(kids) - 1 else "├─ "))


def _one_line(name: str) -> str:
    """A span name fit for one row: control characters (a newline, a tab) shown as spaces."""
    if name.isprintable():
        return name
    return "".join(ch if ch.isprintable() else " " for ch in name)


def render_trace(
    spans: Sequence[SpanRecord], console: Console, *, bar_width: int | None = None
) -> None:
    """Draw ``spans`` as a tree (by parent links) with a waterfall column, one table per trace.

    Columns: the span (tree guides, name), its bar on the trace's timeline, duration, tokens
    (``in→out``; ``Σ`` for an agent's roll-up), cost, and status with the
    ``orchestrator.outcome`` and ``error.type`` when set. Children are ordered by start time;
    spans whose parent is missing from the file are drawn as roots, so a partial trace (a
    crashed run, a truncated file) still shows everything it has.

    The figures are not cut: the timeline takes what the console width leaves (10 to 40 cells,
    or exactly ``bar_width``), then span names give way with an ellipsis; only a console too
    narrow for the figures themselves (under ~60 columns) crops the rightmost columns. The
    tokens and cost columns appear only when some span has them.
    """
    from rich.text import Text

    if not spans:
        console.print("[dim](no spans)[/dim]")
        return
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    ordered = sorted(by_trace.values(), key=lambda group: min(s.start_ns for s in group))
    for group in ordered:
        t0 = min(s.start_ns for s in group)
        total = max(s.end_ns for s in group) - t0
        roots = _roots(group)
        children: dict[str, list[SpanRecord]] = defaultdict(list)
        root_ids = {r.span_id for r in roots}
        for span in group:
            if span.span_id not in root_ids and span.parent_span_id is not None:
                children[span.parent_span_id].append(span)
        for kids in children.values():
            kids.sort(key=lambda s: (s.start_ns, s.name))

        root = roots[0] if roots else group[0]
        summary = _summarize(Path("-"), group)
        head = Text.assemble(
            ("trace ", "dim"),
            (root.trace_id, "bold"),
            ("  run ", "dim"),
            summary.run_id if summary.run_id != "-" else "?",
            ("  service ", "dim"),
            summary.service_name or "?",
            ("  ", ""),
            summary.start.astimezone().strftime("%Y-%m-%d %H:%M:%S") if summary.start else "",
            ("  ", ""),
            (_fmt_duration(total), "bold"),
            (f"  {len(group)} spans", "dim"),
        )
        console.print(head)

        rows = []
        for span, guide in _walk(group, roots, children):
            label = Text(guide, style="bright_black")
            label.append(_one_line(span.name), style=_name_style(span))
            figures = (
                _fmt_duration(span.duration_ns),
                _tokens_cell(span.attributes),
                _cost_cell(span.attributes),
            )
            rows.append((span, label, figures, _status_cell(span)))
        figure_widths = [
            max(len(header), *(len(row[2][k]) for row in rows))
            for k, header in enumerate(("duration", "tokens", "cost"))
        ]
        show_figure = [True, any(r[2][1] for r in rows), any(r[2][2] for r in rows)]
        status_width = max(len("status"), *(row[3].cell_len for row in rows))
        name_width = max(row[1].cell_len for row in rows)
        fixed = sum(w for w, on in zip(figure_widths, show_figure, strict=True) if on)
        gaps = 2 * (2 + sum(show_figure))
        if bar_width is None:
            room = console.width - fixed - gaps - min(status_width, 16) - min(name_width, 28)
            width = max(10, min(40, room))
        else:
            width = bar_width

        # Lines are laid out here rather than by a rich Table: the widths are already known,
        # and a Table took ~0.8 ms per row (9 s for a 1,000-agent run's 13,000 spans).
        name_room = console.width - fixed - gaps - width - status_width
        name_cells = max(12, min(name_width, name_room))
        figures_shown = [k for k in range(3) if show_figure[k]]
        gap = "  "
        header = Text(style="bold dim")
        header.append("span".ljust(name_cells) + gap + "timeline".ljust(width))
        for k in figures_shown:
            header.append(gap + ("duration", "tokens", "cost")[k].rjust(figure_widths[k]))
        header.append(gap + "status")
        lines = [header]
        for span, label, figures, status in rows:
            label.truncate(name_cells, overflow="ellipsis", pad=True)
            line = Text.assemble(label, gap, _bar(span, t0, total, width))
            for k in figures_shown:
                line.append(gap + figures[k].rjust(figure_widths[k]))
            line.append(gap)
            line.append_text(status)
            lines.append(line)
        console.print(Text("\n").join(lines), no_wrap=True, crop=True, overflow="ellipsis")
        chat_in = sum(_number(s.attributes.get("gen_ai.usage.input_tokens")) or 0.0 for s in group)
        chat_out = sum(
            _number(s.attributes.get("gen_ai.usage.output_tokens")) or 0.0 for s in group
        )
        if chat_in or chat_out:
            console.print(
                Text(
                    f"model calls: {_fmt_count(chat_in)} input → {_fmt_count(chat_out)} output "
                    "tokens (sum of gen_ai.usage on chat spans)",
                    style="dim",
                )
            )


# --------------------------------------------------------------------------------------------
# Export.


def _headers_from_env() -> dict[str, str]:
    from opentelemetry.util.re import parse_env_headers

    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get(
        "OTEL_EXPORTER_OTLP_HEADERS", ""
    )
    return dict(parse_env_headers(raw, liberal=True)) if raw else {}


def _send_http(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST one request; returns the collector's rejected-span count."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={**headers, "Content-Type": "application/x-protobuf"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:200].decode("utf-8", "replace")
        raise TraceExportError(f"{url}: HTTP {exc.code} {exc.reason} {detail}".strip()) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise TraceExportError(f"{url}: {exc}") from exc
    except (http.client.InvalidURL, ValueError) as exc:
        raise TraceExportError(f"{url}: {exc}") from exc
    except http.client.HTTPException as exc:  # not HTTP at all: say, the gRPC port
        raise TraceExportError(
            f"{url}: the answer is not HTTP ({type(exc).__name__}); is this the OTLP/HTTP port "
            "(4318), or should --protocol be grpc (4317)?"
        ) from exc
    answer = ExportTraceServiceResponse()
    if payload:
        try:
            answer.ParseFromString(payload)
        except Exception:  # a non-OTLP 200 body (some proxies); the spans were accepted
            return 0
    return int(answer.partial_success.rejected_spans)


def export_trace(
    path: Path,
    endpoint: str | None,
    protocol: str | None = "http/protobuf",
    *,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Send a saved trace file to an OTLP endpoint; returns the number of spans sent.

    Each line of the file is decoded back into the ``ExportTraceServiceRequest`` it was made
    from and sent as one request, so trace and span ids, timestamps, resource and typed
    attributes arrive unchanged: the run shows up in Jaeger as if it had been exported live.

    ``endpoint`` is a base URL (``http://localhost:4318``; ``/v1/traces`` is added for HTTP) or
    None to use the ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variables. ``protocol`` is
    ``http/protobuf`` or ``grpc`` (None: the ``OTEL_EXPORTER_OTLP_*PROTOCOL`` variables).
    Headers default to ``OTEL_EXPORTER_OTLP_HEADERS``. Raises :class:`TraceExportError` on a
    refusal, an unreachable endpoint, or spans the collector reports as rejected.
    """
    proto = resolve_protocol(protocol)
    url = resolve_otlp_endpoint(endpoint, proto)
    if url is None:
        raise TraceExportError("no OTLP endpoint: pass one or set OTEL_EXPORTER_OTLP_ENDPOINT")
    send_headers = dict(_headers_from_env() if headers is None else headers)
    requests = [decode_otlp_json(doc) for _, doc in _read_lines(path)]
    sent = rejected = 0
    if proto == "grpc":
        import grpc  # type: ignore[import-untyped, unused-ignore]
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
            TraceServiceStub,
        )

        target = url.split("://", 1)[-1].split("/", 1)[0]
        channel = (
            grpc.secure_channel(target, grpc.ssl_channel_credentials())
            if url.startswith("https://")
            else grpc.insecure_channel(target)
        )
        try:
            # The generated stub is unannotated.
            stub = cast(Any, TraceServiceStub)(channel)
            for request in requests:
                try:
                    answer = stub.Export(
                        request, timeout=timeout, metadata=tuple(send_headers.items())
                    )
                except grpc.RpcError as exc:
                    raise TraceExportError(
                        f"{target}: gRPC {exc.code().name}: {exc.details()}"
                    ) from exc
                rejected += int(answer.partial_success.rejected_spans)
                sent += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        finally:
            channel.close()
    else:
        for request in requests:
            rejected += _send_http(url, request.SerializeToString(), send_headers, timeout)
            sent += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if rejected:
        raise TraceExportError(f"{url}: the collector rejected {rejected} of {sent} spans")
    return sent


# --------------------------------------------------------------------------------------------
# CLI entry points: print, return an exit code.


def escape(text: str) -> str:
    """``text`` shown as it is by rich (a path or a message holding "[...]" is not markup)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def show(
    run: str | None, runs_dir: Path, console: Console, *, errors: Console | None = None
) -> int:
    """``orchestrator trace show [RUN]``: draw a saved run (default: the newest). Errors go to
    ``errors`` (the CLI's stderr), else to ``console``."""
    try:
        path = resolve_run(run, runs_dir)
        spans = load_trace(path)
    except (TraceNotFoundError, TraceFileError) as exc:
        (errors or console).print(f"[red]error:[/red] {escape(str(exc))}")
        return 1
    console.print(f"[dim]{escape(str(path))}[/dim]")
    render_trace(spans, console)
    return 0


def list_command(runs_dir: Path, console: Console, *, limit: int | None = None) -> int:
    """``orchestrator trace list``: the saved runs, newest first.

    The status column shows the root's ``orchestrator.outcome`` (``completed``, ``timeout``...)
    coloured by its span status, or the bare status when no outcome was recorded.
    """
    from rich.table import Table
    from rich.text import Text

    runs = list_runs(runs_dir)
    if not runs:
        console.print(f"no saved traces in {escape(str(runs_dir))}")
        return 0
    shown = runs[:limit] if limit else runs
    this_year = datetime.now().year
    same_year = all(r.start is None or r.start.astimezone().year == this_year for r in shown)
    time_format = "%m-%d %H:%M" if same_year else "%Y-%m-%d %H:%M"  # 80 columns are tight
    rows = []
    for r in shown:
        try:
            where = str(r.path.relative_to(runs_dir))
        except ValueError:
            where = str(r.path)
        rows.append(
            [
                r.run_id,
                r.root_agent or "",
                r.start.astimezone().strftime(time_format) if r.start else "",
                _fmt_duration(int(r.duration_s * 1e9)),
                str(r.span_count),
                # The outcome says more than the span status; its colour still shows the status.
                r.outcome or r.status,
                where,
            ]
        )
    headers = ["run", "agent", "started", "duration", "spans", "status", "file"]
    widest = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    if not console.is_terminal:  # piped (grep, a file): whole values, nothing cut to fit
        console.width = max(console.width, sum(widest) + 2 * len(headers))
    # The CLI names files <run id>.jsonl, so the file column mostly repeats the run id: it is
    # the first thing to go when the terminal is too narrow for everything.
    if all(row[6] == f"{row[0]}.jsonl" for row in rows) or sum(widest) + 2 * 6 > console.width:
        headers.pop()
        rows = [row[:-1] for row in rows]
    table = Table(box=None, pad_edge=False, header_style="bold dim")
    for index, header in enumerate(headers):
        table.add_column(
            header,
            no_wrap=True,
            # Only the agent name gives way on a narrow terminal; the run id (what users copy
            # into `trace show`) and the figures stay whole.
            min_width=None if header == "agent" else widest[index],
            overflow="ellipsis",
            justify="right" if header in ("duration", "spans") else "left",
        )
    for r, row in zip(shown, rows, strict=True):
        style = _STATUS_STYLES.get(r.status, "")
        table.add_row(*row[:5], Text(row[5], style=style), *row[6:])
    console.print(table)
    return 0


def export_command(
    run: str | None,
    runs_dir: Path,
    endpoint: str | None,
    protocol: str | None,
    console: Console,
    *,
    timeout: float = 10.0,
    errors: Console | None = None,
) -> int:
    """``orchestrator trace export RUN --endpoint URL``: send a saved run to a collector.
    Errors go to ``errors`` (the CLI's stderr), else to ``console``."""
    try:
        path = resolve_run(run, runs_dir)
        sent = export_trace(path, endpoint, protocol, timeout=timeout)
    except (TraceNotFoundError, TraceFileError, TraceExportError) as exc:
        (errors or console).print(f"[red]error:[/red] {escape(str(exc))}")
        return 1
    except OrchestratorError as exc:  # e.g. an unsupported protocol
        (errors or console).print(f"[red]error:[/red] {escape(str(exc))}")
        return 2
    target = resolve_otlp_endpoint(endpoint, protocol)
    console.print(f"sent {sent} spans from {escape(str(path))} to {escape(str(target))}")
    return 0
