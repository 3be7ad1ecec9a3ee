"""The rows of ``orchestrator trace show``, worked out once for both of :mod:`.view`'s writers.

:func:`trace_rows` turns one trace's spans into a :class:`TraceRows`: its heading's texts, and a
:class:`Row` per span in tree order (guides, name, duration, tokens, cost, status, the lines
under it) with the widths the writers lay the columns out by. Every text here is plain and
already shown through :func:`~orchestrator.core.terminal.terminal_safe`; the writers add only
the layout (which depends on the console) and, on a terminal, the styles.

A big run's trace has tens of thousands of spans, so the rows are made for it: where a span's
figures are is worked out once per set of attribute keys, and the texts rows repeat (guides,
names, statuses, figures) are made once. No ``rich`` here but its cell counts, and those only
for text that is not plain ASCII.
"""

from __future__ import annotations

import json
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

from ..core.terminal import terminal_safe
from ._figures import TokensSaid, format_count, format_duration, number, span_figures
from .tracefiles import (
    AGENT_DEPTH,
    AGENT_PATH,
    OUTCOME,
    SpanRecord,
    root_spans,
    summarize,
)

__all__ = [
    "Row",
    "Safe",
    "TraceRows",
    "cell_len",
    "label",
    "status_parts",
    "trace_rows",
    "traces",
]

Safe = Callable[[object], str]
"""How a text from the file is shown: :func:`~orchestrator.core.terminal.terminal_safe` with the
environment's secrets (remembered per text by :mod:`.view`)."""

_DETAIL_CHARS: Final = 240
"""Characters of a task or an error shown under a row (``--span`` shows them whole)."""
_START_AND_NAME: Final = operator.attrgetter("start_ns", "name")
"""How siblings are ordered: by start time, then name."""
_NOT_NARROW: Final = re.compile(r"[^ -~│├└─·█…→Σ↻✗]")
"""Anything but printable ASCII and the glyphs the view draws itself, one cell wide each."""


def status_parts(span: SpanRecord, secrets: tuple[str, ...]) -> tuple[str, str, str]:
    """The status cell's three texts: the status, `` <outcome>`` and `` (<error.type>)``
    (each empty when not shown)."""
    outcome = span.attributes.get(OUTCOME)
    error_type = span.attributes.get("error.type")
    said = ""
    if outcome is not None and not (outcome == "ok" and span.status == "OK"):  # not "OK ok"
        said = f" {terminal_safe(outcome, secrets=secrets)}"
    error = ""
    if error_type is not None and error_type != outcome:
        error = f" ({terminal_safe(error_type, secrets=secrets)})"
    return terminal_safe(span.status, secrets=secrets), said, error


def label(span: SpanRecord, safe: Safe) -> str:
    """The row's name: an agent by its path's last part (``invoke_agent researcher#2``), so
    siblings are told apart; any other span by its name."""
    path = span.attributes.get(AGENT_PATH)
    if span.name.startswith("invoke_agent") and isinstance(path, str) and path:
        return f"invoke_agent {safe(path.rsplit('/', 1)[-1])}"
    return safe(span.name)


def cell_len(text: str) -> int:
    """Terminal cells ``text`` takes: its length when it is printable ASCII and the view's own
    glyphs (the common case, tested in C), else rich's count character by character."""
    if (text.isascii() and text.isprintable()) or _NOT_NARROW.search(text) is None:
        return len(text)
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


_OUR_SCOPE: Final = "orchestrator"  # the runtime's spans' instrumentation scope

_GUIDE_LEVELS = 64
"""Levels of tree guides drawn in full; deeper rows keep the guides of their last levels
behind :data:`_FOLD`, so a chain thousands of spans deep draws in lines of bounded width (its
guides grew with the depth: a 10,000-deep chain drew 301 MB)."""
_GUIDE_CHARS = 3 * _GUIDE_LEVELS
_FOLD = "…  "


def _walk(
    group: Sequence[SpanRecord],
    roots: Sequence[SpanRecord],
    children: Mapping[str, Sequence[SpanRecord]],
    folded: set[str] | None = None,
) -> Iterable[tuple[SpanRecord, str, str]]:
    """Depth-first rows with their tree guides (``├─``, ``└─``, ``│``), and the guide that the
    lines under a row (its details) continue with.

    Iterative, so a deep chain of agents cannot hit the recursion limit, and each span is
    visited once, so a corrupt file with a parent cycle still ends; spans only reachable
    through such a cycle are drawn as extra roots at the end rather than hidden. The children
    of a span in ``folded`` are not drawn. Past :data:`_GUIDE_LEVELS` levels the guides'
    left part is folded into :data:`_FOLD`.
    """
    seen: set[str] = set()
    pending = [*roots, *(s for s in group if s.parent_span_id is not None)]
    for top in pending:
        if top.span_id in seen:
            continue
        # (span, its guide, the guide its children's rows start with): siblings share theirs
        stack: list[tuple[SpanRecord, str, str]] = [(top, "", "")]
        while stack:
            span, guide, below = stack.pop()
            span_id = span.span_id
            if span_id in seen:
                continue
            seen.add(span_id)
            kids = children.get(span_id, ())
            if folded is not None and span_id in folded:
                _mark_seen(span_id, children, seen)
                kids = ()
            yield span, guide, below + ("│  " if kids else "   ")
            if kids:
                if len(below) >= _GUIDE_CHARS:  # past the fold: keep the last levels' guides
                    below = _FOLD + below[len(_FOLD) + 3 :]
                stack.append((kids[-1], below + "└─ ", below + "   "))
                middle, under = below + "├─ ", below + "│  "
                stack.extend([(kid, middle, under) for kid in reversed(kids[:-1])])


def _mark_seen(span_id: str, children: Mapping[str, Sequence[SpanRecord]], seen: set[str]) -> int:
    """Mark a folded span's descendants as drawn (they are, inside its row); how many."""
    count = 0
    stack = list(children.get(span_id, ()))
    while stack:
        span = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        count += 1
        stack.extend(children.get(span.span_id, ()))
    return count


def _captured_task(span: SpanRecord) -> str | None:
    """An agent's task, when content was captured: the first user text of its input."""
    raw = span.attributes.get("gen_ai.input.messages")
    if not isinstance(raw, str):
        return None
    try:
        messages = json.loads(raw)
    except ValueError:
        return None
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        for part in message.get("parts") or ():
            if isinstance(part, dict) and part.get("type") == "text":
                content = part.get("content")
                if isinstance(content, str) and content.strip():
                    return content
    return None


def _spawn_task(spawn: SpanRecord | None) -> str | None:
    """A child's task from the arguments of the spawn that started it (captured content)."""
    raw = None if spawn is None else spawn.attributes.get("gen_ai.tool.call.arguments")
    if not isinstance(raw, str):
        return None
    try:
        arguments = json.loads(raw)
    except ValueError:
        return None
    task = arguments.get("task") if isinstance(arguments, dict) else None
    return task if isinstance(task, str) and task.strip() else None


def _details(
    span: SpanRecord, parent: SpanRecord | None, folded_count: int, safe: Safe
) -> list[tuple[str, str]]:
    """What goes under a row, as (text, style): the task, the error text, the retries."""
    out: list[tuple[str, str]] = []
    if span.name.startswith("invoke_agent"):
        task = _spawn_task(parent) or _captured_task(span)
        if task is not None:
            out.append((f"task: {_short(safe(task))}", "dim"))
    if span.status == "ERROR" and span.status_message:
        reason = span.status_message
        outcome = span.attributes.get(OUTCOME)
        said = parent is not None and parent.status_message == reason  # a turn's, its agent's
        if reason not in (outcome, span.attributes.get("error.type")) and not said:
            out.append((f"✗ {_short(safe(reason))}", "red"))
    for event in span.events:
        if event.name == "orchestrator.retry":
            a = event.attributes
            out.append(
                (
                    f"↻ retry {safe(a.get('orchestrator.retry.attempt', '?'))} after "
                    f"{safe(a.get('error.type', '?'))}, backoff "
                    f"{safe(a.get('orchestrator.retry.delay_s', '?'))}s",
                    "yellow",
                )
            )
        elif event.name == "exception":
            kind = event.attributes.get("exception.type", "exception")
            message = event.attributes.get("exception.message", "")
            out.append((f"✗ {safe(kind)}: {_short(safe(message))}", "red"))
    if folded_count:
        out.append((f"… {folded_count} spans below, folded (--depth)", "dim"))
    return out


def _short(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


class Row(NamedTuple):
    """One span's row, as plain text: laid out once the widths of every row are known."""

    span: SpanRecord
    guide: str  # the tree's guides (``├─``...)
    label: str  # the name, shown through terminal_safe
    label_cells: int  # of both
    status_cells: int
    figures: tuple[str, str, str]  # duration, tokens, cost
    status: tuple[str, str, str]  # see status_parts
    below: str  # the guide the lines under the row start with
    details: Sequence[tuple[str, str]]  # (text, style): see _details


class TraceRows(NamedTuple):
    """One trace as ``trace show`` draws it: its heading, its rows, and the widths and figures
    the writers lay them out by (see :func:`trace_rows`)."""

    run: str  # the run id, or "?"
    started: str  # local time, or ""
    duration: str  # of the whole trace
    span_count: int
    trace_id: str
    service: str
    interrupted: bool  # its root span is missing
    t0: int  # where the timeline starts (ns)
    total: int  # and how long it is
    rows: list[Row]
    duration_width: int  # the widest duration's characters
    name_width: int  # the widest guide and name's cells
    tokens: Collection[str]  # every row's tokens text, each once
    costs: Collection[str]  # every row's cost text, each once
    status_widths: Collection[int]  # every row's status cells, each once
    model_calls: str | None  # the line under the rows: the chat spans' tokens, if any


def traces(spans: Sequence[SpanRecord]) -> list[list[SpanRecord]]:
    """The spans by trace: the traces holding a run's agents first, each kind earliest first
    (another library's traces beside a run, as the MCP SDK's connection spans once made,
    come after it)."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    return sorted(
        by_trace.values(),
        key=lambda group: (
            not any(s.scope == _OUR_SCOPE and s.name.startswith("invoke_agent") for s in group),
            min(s.start_ns for s in group),
        ),
    )


def trace_rows(
    group: Sequence[SpanRecord], depth: int | None, safe: Safe, secrets: tuple[str, ...]
) -> TraceRows:
    """The rows of one trace's spans (``group``), agents at ``depth`` and below folded into
    their rows (see :func:`~.view.render_trace`)."""
    t0 = min(s.start_ns for s in group)
    total = max(s.end_ns for s in group) - t0
    roots = root_spans(group)
    children: dict[str, list[SpanRecord]] = defaultdict(list)
    root_ids = {r.span_id for r in roots}
    for span in group:
        if span.span_id not in root_ids and span.parent_span_id is not None:
            children[span.parent_span_id].append(span)
    for kids in children.values():
        kids.sort(key=_START_AND_NAME)
    folded: set[str] | None = None
    if depth is not None:
        folded = {
            s.span_id
            for s in group
            if s.name.startswith("invoke_agent")
            and isinstance(d := number(s.attributes.get(AGENT_DEPTH)), float)
            and d >= depth
        }
    rows = _Rows(group, children, folded, safe, secrets)
    rows.make(_walk(group, roots, children, folded))
    summary = summarize(Path("-"), group)
    return TraceRows(
        run=safe(summary.run_id) if summary.run_id != "-" else "?",
        started=summary.start.astimezone().strftime("%Y-%m-%d %H:%M:%S") if summary.start else "",
        duration=format_duration(total),
        span_count=len(group),
        trace_id=safe((roots[0] if roots else group[0]).trace_id),
        service=safe(summary.service_name or "?"),
        interrupted=summary.interrupted,
        t0=t0,
        total=total,
        rows=rows.rows,
        duration_width=rows.duration_width,
        name_width=rows.name_width,
        tokens=rows.tokens.values(),
        costs=rows.costs,
        status_widths=rows.status_widths.values(),
        model_calls=_model_calls(group),
    )


def _model_calls(group: Sequence[SpanRecord]) -> str | None:
    chat_in = chat_out = 0.0
    for span in group:
        attributes = span.attributes
        if "gen_ai.usage.input_tokens" in attributes:
            chat_in += number(attributes["gen_ai.usage.input_tokens"]) or 0.0
        if "gen_ai.usage.output_tokens" in attributes:
            chat_out += number(attributes["gen_ai.usage.output_tokens"]) or 0.0
    if not (chat_in or chat_out):
        return None
    return (
        f"model calls: {format_count(chat_in)} input → {format_count(chat_out)} output "
        "tokens (sum of gen_ai.usage on chat spans)"
    )


class _Rows:
    """A trace's rows as they are made (:meth:`make`), and the texts and widths they share.

    Written for speed (a big run has tens of thousands of rows): the figures' keys are worked
    out once per key set, equal texts made once and kept once (the guides, names, statuses and
    figures of a big run's rows repeat), and a row without details skips :func:`_details`.
    """

    def __init__(
        self,
        group: Sequence[SpanRecord],
        children: Mapping[str, Sequence[SpanRecord]],
        folded: set[str] | None,
        safe: Safe,
        secrets: tuple[str, ...],
    ) -> None:
        self.by_id = {s.span_id: s for s in group}
        self.children, self.folded, self.safe, self.secrets = children, folded, safe, secrets
        self.rows: list[Row] = []
        self.tokens: dict[TokensSaid, str] = {}
        self.costs: set[str] = set()
        self.status_widths: dict[tuple[str, str, str], int] = {}
        self.statuses: dict[tuple[object, ...], tuple[str, str, str]] = {}
        self.guide_cells: dict[str, int | None] = {}
        self.duration_width = self.name_width = 0

    def make(self, walked: Iterable[tuple[SpanRecord, str, str]]) -> None:
        """A row for each (span, guide, below) of ``walked``, in order."""
        children, folded, by_id, safe = self.children, self.folded, self.by_id, self.safe
        status_of, cells_of = self._status, self._cells
        tokens_made, costs = self.tokens, self.costs
        shared: dict[Any, Any] = {}
        share = shared.setdefault
        append = self.rows.append
        duration_width = name_width = 0
        for span, guide, below in walked:
            span_id = span.span_id
            inside = (
                _mark_seen(span_id, children, set())
                if folded is not None and span_id in folded
                else 0
            )
            figures = span_figures(span, tokens_made, costs)
            if len(figures[0]) > duration_width:
                duration_width = len(figures[0])
            details: Sequence[tuple[str, str]] = ()
            name = span.name
            if inside or span.events or span.status == "ERROR" or name.startswith("invoke_agent"):
                details = _details(span, by_id.get(span.parent_span_id or ""), inside, safe)
            name = label(span, safe)
            status, status_cells = status_of(span, share)
            cells = cells_of(guide, name)
            if cells > name_width:
                name_width = cells
            figures = share(figures, figures)  # equal ones are common: durations repeat
            below = share(below, below)
            row = (span, guide, name, cells, status_cells, figures, status, below, details)
            append(tuple.__new__(Row, row))  # Row(*row), without its Python-level __new__
        self.duration_width, self.name_width = duration_width, name_width

    def _status(
        self, span: SpanRecord, share: Callable[[Any, Any], Any]
    ) -> tuple[tuple[str, str, str], int]:
        """The row's status texts (see :func:`status_parts`) and their cells, each made once."""
        attributes = span.attributes
        outcome, error_type = attributes.get(OUTCOME), attributes.get("error.type")
        # what status_parts depends on (types too: True and 1 are equal keys)
        said = (span.status, type(outcome), outcome, type(error_type), error_type)
        try:  # a list attribute is not hashable
            status = self.statuses[said]
        except KeyError:
            status = self.statuses[said] = status_parts(span, self.secrets)
        except TypeError:
            status = status_parts(span, self.secrets)
            status = share(status, status)
        cells = self.status_widths.get(status)
        if cells is None:
            cells = self.status_widths[status] = cell_len("".join(status))
        return status, cells

    def _cells(self, guide: str, name: str) -> int:
        """Cells of the guide and the name: their lengths when both are one cell a character
        (the guide's glyphs, printable ASCII), as :func:`cell_len` says."""
        cells = self.guide_cells.get(guide, -1)
        if cells == -1:
            cells = self.guide_cells[guide] = None if _NOT_NARROW.search(guide) else len(guide)
        if cells is not None and name.isascii() and name.isprintable():
            return cells + len(name)
        return cell_len(guide + name)
