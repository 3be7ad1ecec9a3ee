"""A saved trace drawn in the terminal (``orchestrator trace show``): the span tree by parent
links, with a waterfall column, durations, tokens, cost and status.

:func:`render_trace` draws :class:`~.tracefiles.SpanRecord` values (read by :mod:`.tracefiles`)
on a ``rich`` console; rich is imported inside the functions that draw, so importing this module
stays cheap. Agents are named by their path's last part (``researcher#2``), so siblings are told
apart; under a row come its task (when content was captured), its error text and its retries;
``depth`` folds agents below a depth into one row each. :func:`render_span` shows one span
whole: its attributes, events and (when captured) its messages.

The rows are worked out once, as plain text (:mod:`._rows`); two writers lay them out: plain
text for a console that shows no styles (a pipe, a file), exactly what rich would print, and
rich text on a terminal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ..core.redact import secret_values
from ..core.terminal import terminal_safe
from ._figures import format_duration as format_duration
from ._rows import (
    Row,
    Safe,
    TraceRows,
    cell_len,
    label,
    status_parts,
    trace_rows,
    traces,
)
from .tracefiles import AGENT_PATH, INTERRUPTED_NOTE, AttrValue, SpanRecord, no_collection

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["STATUS_STYLES", "find_span", "format_duration", "render_span", "render_trace"]

STATUS_STYLES: Final = {"OK": "green", "ERROR": "bold red", "UNSET": "dim"}
"""The rich style a span status is shown in (``trace show``'s status column, ``trace list``'s)."""
_BAR_STYLES: Final = {"OK": "green", "ERROR": "red", "UNSET": "cyan"}
_MESSAGE_ATTRIBUTES: Final = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
)
_GAP: Final = "  "
_CHUNK_LINES: Final = 2000
"""Lines handed to rich at once: a big run's 65,000 rows as one Text took hundreds of MB."""
_TRAILING_SPACE: Final = re.compile(r"\s+$")


def render_trace(
    spans: Sequence[SpanRecord],
    console: Console,
    *,
    bar_width: int | None = None,
    depth: int | None = None,
    fit_names: bool = False,
) -> None:
    """Draw ``spans`` as a tree (by parent links) with a waterfall column, one table per trace.

    Columns: the span (tree guides, name), its bar on the trace's timeline, duration, tokens
    (``in→out``; ``Σ`` for an agent's roll-up), cost, and status with the
    ``orchestrator.outcome`` and ``error.type`` when set. Children are ordered by start time;
    spans whose parent is missing from the file are drawn as roots, so a partial trace (a
    crashed run, a truncated file) still shows everything it has. Agents are named by the last
    part of their path (``invoke_agent researcher#2``). Under a row: the agent's task (when
    content was captured), the error text of a failed span and its retries. ``depth`` folds
    every agent at that depth (the root is 0) into its row, saying how many spans it holds.

    The figures are not cut: the timeline takes what the console width leaves (10 to 40 cells,
    or exactly ``bar_width``), then span names give way with an ellipsis; only a console too
    narrow for the figures themselves (under ~60 columns) crops the rightmost columns. With
    ``fit_names`` (the CLI's, when its output is not a terminal: a pipe, a file) nothing gives
    way: the lines are as wide as the names need. The tokens and cost columns appear only when
    some span has a figure in them that is not zero.

    Every text from the file (span names, ids, the service, outcomes and error types) is shown
    through :func:`~orchestrator.core.terminal.terminal_safe`: secrets redacted, and control
    characters (a newline in a name as much as an escape sequence) shown as escapes on its row.
    """
    with no_collection():  # a big run's rows are many objects and no cycles
        _render_trace(spans, console, bar_width=bar_width, depth=depth, fit_names=fit_names)


def _render_trace(
    spans: Sequence[SpanRecord],
    console: Console,
    *,
    bar_width: int | None,
    depth: int | None,
    fit_names: bool,
) -> None:
    from rich.text import Text

    if not spans:
        console.print("[dim](no spans)[/dim]")
        return
    secrets = secret_values()
    safe = _remembered_safe(secrets)
    plain = console.color_system is None and not console.record
    for group in traces(spans):
        trace = trace_rows(group, depth, safe, secrets)
        _print_heading(console, trace)
        layout = _lay_out(console, trace, bar_width, fit_names)
        if plain:
            _write_plain(console, trace.rows, layout)
        else:
            _write_rich(console, trace.rows, layout)
        if trace.model_calls is not None:
            console.print(Text(trace.model_calls, style="dim"))


def _remembered_safe(secrets: tuple[str, ...]) -> Safe:
    """:func:`terminal_safe` with ``secrets``: a big run's names, paths and outcomes are a few
    texts repeated, so each is made safe once."""
    made_safe: dict[str, str] = {}

    def safe(value: object) -> str:
        if type(value) is not str:
            return terminal_safe(value, secrets=secrets)
        shown = made_safe.get(value)
        if shown is None:
            shown = made_safe[value] = terminal_safe(value, secrets=secrets)
        return shown

    return safe


def _print_heading(console: Console, trace: TraceRows) -> None:
    """The run, its start, duration and spans; the trace id and service; whether it was cut."""
    from rich.text import Text

    head = Text.assemble(
        ("run ", "dim"),
        (trace.run, "bold"),
        ("  ", ""),
        trace.started,
        ("  ", ""),
        (trace.duration, "bold"),
        (f"  {trace.span_count} spans", "dim"),
    )
    console.print(head, no_wrap=True, crop=False)
    console.print(
        Text.assemble(("trace ", "dim"), trace.trace_id, ("  service ", "dim"), trace.service),
        no_wrap=True,
        crop=False,
    )
    if trace.interrupted:  # the root span is missing: what remains is not how it ended
        console.print(Text(INTERRUPTED_NOTE, style="bold red"))


class _Layout(NamedTuple):
    """Where a trace's columns go on the console (see :func:`_lay_out`)."""

    name_cells: int
    width: int  # of the timeline
    figure_widths: list[int]
    figures_shown: list[int]
    t0: int
    total: int
    fit_names: bool


def _lay_out(console: Console, trace: TraceRows, bar_width: int | None, fit_names: bool) -> _Layout:
    """The columns' widths: the figures whole, the timeline what the width leaves (10 to 40
    cells, or ``bar_width``), the names the rest. With ``fit_names`` the console is widened to
    what the names and the lines under the rows need."""
    figure_widths = [
        max(len("duration"), trace.duration_width),
        max(len("tokens"), *map(len, trace.tokens)),
        max(len("cost"), *map(len, trace.costs), 0),
    ]
    show_figure = [
        True,
        any(t and any(c.isdigit() and c != "0" for c in t) for t in trace.tokens),
        any(c and c not in ("$0.0000",) for c in trace.costs),
    ]
    status_width = max(len("status"), *trace.status_widths)
    fixed = sum(w for w, on in zip(figure_widths, show_figure, strict=True) if on)
    gaps = 2 * (2 + sum(show_figure))
    name_width = trace.name_width
    if bar_width is None:  # names get up to 40 cells before the timeline shrinks to 10
        room = console.width - fixed - gaps - min(status_width, 16) - min(name_width, 40)
        width = max(10, min(40, room))
    else:
        width = bar_width
    if fit_names:  # piped: whole names, whatever the width
        console.width = max(console.width, name_width + gaps + fixed + width + status_width)

    name_room = console.width - fixed - gaps - width - status_width
    name_cells = max(12, min(name_width, name_room))
    figures_shown = [k for k in range(3) if show_figure[k]]
    if fit_names:  # a detail (a whole error text) may be wider than the rows
        widest = max(
            (cell_len(row.below + text) for row in trace.rows for text, _style in row.details),
            default=0,
        )
        row_cells = name_cells + 2 + width + sum(2 + figure_widths[k] for k in figures_shown)
        widest = max(
            widest,
            row_cells + 2 + len("status"),  # the header
            *(row_cells + 2 + cells for cells in trace.status_widths),
        )
        console.width = max(console.width, widest)
    return _Layout(
        name_cells, width, figure_widths, figures_shown, trace.t0, trace.total, fit_names
    )


def _header(layout: _Layout) -> str:
    text = "span".ljust(layout.name_cells) + _GAP + "timeline".ljust(layout.width)
    for k in layout.figures_shown:
        text += _GAP + ("duration", "tokens", "cost")[k].rjust(layout.figure_widths[k])
    return text + _GAP + "status"


def _fit(text: str, cells: int, pad: bool = False) -> str:
    """``text`` cut to ``cells`` with an ellipsis (and padded): rich's ``Text.truncate``."""
    from rich.cells import set_cell_size

    length = cell_len(text)
    if length > cells:
        text = set_cell_size(text, cells - 1) + "…"
    if pad and length < cells:
        text += " " * (cells - length)
    return text


def _fit_line(text: str, cells: int) -> str:
    """A line as rich prints it with ``no_wrap`` and ``overflow="ellipsis"``: whitespace past
    the width dropped first (``Text.rstrip_end``), then cut with an ellipsis."""
    if len(text) > cells:
        trailing = _TRAILING_SPACE.search(text)
        if trailing is not None:
            text = text[: len(text) - min(len(trailing.group(0)), len(text) - cells)]
    return _fit(text, cells)


def _write_plain(console: Console, rows: Sequence[Row], layout: _Layout) -> None:
    """The rows written as plain text, for a console that shows no styles (a pipe, a file).

    What rich would print, character for character, without building a ``Text`` (and its
    segments) per row: that cost ~100 µs a row, seconds for a big run. Handed to the console
    as ready segments in chunks, so its capture, recording and broken-pipe handling apply.
    """
    from rich.cells import set_cell_size
    from rich.segment import Segment, Segments

    width = console.width
    name_cells, bar, t0, total = layout.name_cells, layout.width, layout.t0, layout.total
    shown = [(k, layout.figure_widths[k]) for k in layout.figures_shown]
    # a row's cells but its status's: the name's column, the timeline, the figures, the gaps
    before_status = name_cells + 2 + bar + sum(2 + cells for _k, cells in shown) + 2
    lines = [_fit_line(_header(layout), width)]
    append = lines.append
    # the texts of a big run's rows repeat: its bars, and what follows the duration
    bars: dict[tuple[int, int], str] = {}
    ends: dict[tuple[str, str, tuple[str, str, str]], str] = {}
    duration_cells = layout.figure_widths[0]  # always shown, first (see _lay_out)
    rest = [(k, cells) for k, cells in shown if k]
    for span, guide, name, label_cells, status_cells, figures, status, below, details in rows:
        if total > 0:  # as _bar_cells
            first = min(bar - 1, (span.start_ns - t0) * bar // total)
            last = min(bar, max(first + 1, -(-(span.end_ns - t0) * bar // total)))
        else:
            first, last = 0, bar
        drawn = bars.get((first, last))
        if drawn is None:
            drawn = bars[first, last] = "".join(
                (_GAP, "·" * first, "█" * (last - first), "·" * (bar - last), _GAP)
            )
        said = (figures[1], figures[2], status)
        end = ends.get(said)
        if end is None:
            parts = [_GAP + figures[k].rjust(cells) for k, cells in rest]
            end = ends[said] = "".join([*parts, _GAP, *status])
        name = guide + name  # _fit(name, name_cells, pad=True), its cells known
        if label_cells > name_cells:
            name = set_cell_size(name, name_cells - 1) + "…"
        elif label_cells < name_cells:
            name += " " * (name_cells - label_cells)
        line = name + drawn + figures[0].rjust(duration_cells) + end
        if before_status + status_cells > width or len(line) > width:
            line = _fit_line(line, width)
        append(line)
        for text, _style in details:
            detail = below + text
            if not layout.fit_names:  # piped: whole (up to the rows' detail characters)
                detail = _fit(detail, width)
            append(_fit_line(detail, width))
        if len(lines) >= _CHUNK_LINES:
            console.print(Segments([Segment("\n".join(lines) + "\n")]), crop=False)
            lines = []
            append = lines.append
    if lines:
        console.print(Segments([Segment("\n".join(lines) + "\n")]), crop=False)


def _write_rich(console: Console, rows: Sequence[Row], layout: _Layout) -> None:
    """The rows as styled rich text (a terminal), a chunk of lines at a time.

    Lines are laid out here rather than by a rich Table: the widths are already known, and a
    Table's cost per row added up to seconds for a big run's spans.
    """
    from rich.text import Text

    header = Text(_header(layout), style="bold dim")
    lines = [header]
    for row in rows:
        span = row.span
        name = Text(row.guide, style="bright_black")
        name.append(row.label, style=_name_style(span))
        name.truncate(layout.name_cells, overflow="ellipsis", pad=True)
        line = Text.assemble(name, _GAP, _bar(span, layout.t0, layout.total, layout.width))
        for k in layout.figures_shown:
            line.append(_GAP + row.figures[k].rjust(layout.figure_widths[k]))
        line.append(_GAP)
        line.append_text(_status_text(row.status, span.status))
        lines.append(line)
        for text, style in row.details:
            detail = Text(row.below, style="bright_black")
            detail.append(text, style=style)
            if not layout.fit_names:  # piped: whole (up to the rows' detail characters)
                detail.truncate(console.width, overflow="ellipsis")
            lines.append(detail)
        if len(lines) >= _CHUNK_LINES:
            console.print(Text("\n").join(lines), no_wrap=True, crop=True, overflow="ellipsis")
            lines = []
    if lines:
        console.print(Text("\n").join(lines), no_wrap=True, crop=True, overflow="ellipsis")


def _status_text(parts: tuple[str, str, str], status: str) -> Text:
    """The status cell (see :func:`~._rows.status_parts`), styled by the span's ``status``."""
    from rich.text import Text

    shown, said, error = parts
    text = Text(shown, style=STATUS_STYLES.get(status, ""))
    if said:
        text.append(said)
    if error:
        text.append(error, style="red")
    return text


def _bar_cells(span: SpanRecord, t0: int, total: int, width: int) -> tuple[int, int]:
    """Where the span's bar starts and ends on a timeline of ``width`` cells (see :func:`_bar`)."""
    if total > 0:  # integer arithmetic: float scaling put 200 ms of 1 s in cell 5, not 6
        first = min(width - 1, (span.start_ns - t0) * width // total)
        last = min(width, max(first + 1, -(-(span.end_ns - t0) * width // total)))
    else:
        first, last = 0, width
    return first, last


def _bar(span: SpanRecord, t0: int, total: int, width: int) -> Text:
    """The span's place on the trace's timeline: offset and length scaled to ``width`` cells.

    Every span gets at least one cell, so instant spans stay visible; the rest of the row is a
    faint rule so offsets can be read across rows.
    """
    from rich.text import Text

    first, last = _bar_cells(span, t0, total, width)
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


def find_span(spans: Sequence[SpanRecord], selector: str) -> list[SpanRecord]:
    """The spans ``selector`` names: a span id or a unique prefix of one (4 hex digits at
    least), or an agent's path (``lead/researcher#2``: its ``invoke_agent`` span)."""
    by_path = [
        s
        for s in spans
        if s.name.startswith("invoke_agent") and s.attributes.get(AGENT_PATH) == selector
    ]
    if by_path:
        return by_path
    wanted = selector.lower()
    if len(wanted) < 4 or any(c not in "0123456789abcdef" for c in wanted):
        return []
    exact = [s for s in spans if s.span_id == wanted]
    return exact or [s for s in spans if s.span_id.startswith(wanted)]


def render_span(span: SpanRecord, spans: Sequence[SpanRecord], console: Console) -> None:
    """One span whole: where it sits, its timing and status (with the error text), every
    attribute, its events, and its messages when content was captured (system instructions,
    input and output messages, shown by role and part)."""
    from rich.text import Text

    secrets = secret_values()

    def safe(value: object, multiline: bool = False) -> str:
        return terminal_safe(value, secrets=secrets, multiline=multiline)

    by_id = {s.span_id: s for s in spans}
    parent = by_id.get(span.parent_span_id or "")
    console.print(Text(label(span, safe), style="bold " + _name_style(span)), no_wrap=True)
    facts = [
        ("span", span.span_id),
        ("trace", span.trace_id),
        ("parent", f"{span.parent_span_id} ({label(parent, safe)})" if parent else "none"),
        ("started", _clock(span.start_ns)),
        ("duration", format_duration(span.duration_ns)),
    ]
    for key, value in facts:
        console.print(Text.assemble((f"  {key:<9}", "dim"), safe(value)), no_wrap=True)
    status = _status_text(status_parts(span, secrets), span.status)
    if span.status_message:
        status.append(f": {safe(span.status_message)}", style="red")
    console.print(Text.assemble(("  status   ", "dim"), status))
    shown = {k: v for k, v in span.attributes.items() if k not in _MESSAGE_ATTRIBUTES}
    if shown:
        from rich.table import Table

        console.print(Text("attributes", style="bold dim"))
        grid = Table.grid(padding=(0, 2), pad_edge=False)
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for key in sorted(shown):
            grid.add_row(Text(f"  {safe(key)}"), Text(_value(shown[key], safe)))
        console.print(grid)
    if span.events:
        console.print(Text("events", style="bold dim"))
        for event in span.events:
            offset = format_duration(max(0, event.time_ns - span.start_ns))
            attributes = "  ".join(
                f"{safe(k)}={_value(v, safe)}" for k, v in event.attributes.items()
            )
            console.print(
                Text.assemble(f"  +{offset} ", (safe(event.name), "bold"), f"  {attributes}")
            )
    captured = [k for k in _MESSAGE_ATTRIBUTES if isinstance(span.attributes.get(k), str)]
    if captured:
        console.print(Text("messages (captured content)", style="bold dim"))
        for key in captured:
            for role, text in _messages(str(span.attributes[key]), key):
                console.print(Text.assemble((f"  {safe(role)}: ", "bold"), safe(text, True)))
    elif span.name.split(" ", 1)[0] in ("invoke_agent", "chat", "execute_tool"):
        console.print(
            Text(
                "(no messages: content is recorded only with "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)",
                style="dim",
            )
        )


def _clock(ns: int) -> str:
    moment = datetime.fromtimestamp(ns / 1e9, tz=UTC).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _value(value: AttrValue, safe: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(safe(v)) for v in value) + "]"
    return str(safe(value))


def _messages(raw: str, key: str) -> list[tuple[str, str]]:
    """A captured GenAI messages attribute as (role, text) lines: one per part."""
    try:
        data = json.loads(raw)
    except ValueError:
        return [(key, raw)]
    if key == "gen_ai.system_instructions":
        parts = data if isinstance(data, list) else [data]
        return [("system", _part_text(p)) for p in parts]
    out = []
    for message in data if isinstance(data, list) else [data]:
        if not isinstance(message, dict):
            out.append(("?", json.dumps(message)))
            continue
        role = str(message.get("role", "?"))
        for part in message.get("parts") or ():
            out.append((role, _part_text(part)))
        if message.get("finish_reason"):
            out.append((role, f"(finish_reason: {message['finish_reason']})"))
    return out


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    kind = part.get("type")
    if kind in ("text", "reasoning"):
        return str(part.get("content", ""))
    if kind == "tool_call":
        return f"→ {part.get('name')}({json.dumps(part.get('arguments'), ensure_ascii=False)})"
    if kind == "tool_call_response":
        return f"← [{part.get('id')}] {part.get('response')}"
    return json.dumps(part, ensure_ascii=False)
