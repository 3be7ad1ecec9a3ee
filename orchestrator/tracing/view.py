"""A saved trace drawn in the terminal (``orchestrator trace show``): the span tree by parent
links, with a waterfall column, durations, tokens, cost and status.

:func:`render_trace` draws :class:`~.tracefiles.SpanRecord` values (read by :mod:`.tracefiles`)
on a ``rich`` console; rich is imported inside the functions that draw, so importing this module
stays cheap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..core.redact import secret_values
from ..core.terminal import terminal_safe
from .tracefiles import _OUTCOME, INTERRUPTED_NOTE, AttrValue, SpanRecord, _roots, _summarize

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["render_trace"]

_STATUS_STYLES: Final = {"OK": "green", "ERROR": "bold red", "UNSET": "dim"}
_BAR_STYLES: Final = {"OK": "green", "ERROR": "red", "UNSET": "cyan"}
_ROLLUP_HINTS: Final = ("subtree", "total", "cumulative", "tree")


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


def _status_cell(span: SpanRecord, secrets: tuple[str, ...]) -> Text:
    from rich.text import Text

    text = Text(terminal_safe(span.status), style=_STATUS_STYLES.get(span.status, ""))
    outcome = span.attributes.get(_OUTCOME)
    error_type = span.attributes.get("error.type")
    if outcome is not None:
        text.append(f" {terminal_safe(outcome, secrets=secrets)}")
    if error_type is not None and error_type != outcome:
        text.append(f" ({terminal_safe(error_type, secrets=secrets)})", style="red")
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

    Every text from the file (span names, ids, the service, outcomes and error types) is shown
    through :func:`~orchestrator.core.terminal.terminal_safe`: secrets redacted, and control
    characters (a newline in a name as much as an escape sequence) shown as escapes on its row.
    """
    from rich.text import Text

    secrets = secret_values()

    def safe(value: object) -> str:
        return terminal_safe(value, secrets=secrets)

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
            (safe(root.trace_id), "bold"),
            ("  run ", "dim"),
            safe(summary.run_id) if summary.run_id != "-" else "?",
            ("  service ", "dim"),
            safe(summary.service_name or "?"),
            ("  ", ""),
            summary.start.astimezone().strftime("%Y-%m-%d %H:%M:%S") if summary.start else "",
            ("  ", ""),
            (_fmt_duration(total), "bold"),
            (f"  {len(group)} spans", "dim"),
        )
        console.print(head)
        if summary.interrupted:  # the root span is missing: what remains is not how it ended
            console.print(Text(INTERRUPTED_NOTE, style="bold red"))

        rows = []
        for span, guide in _walk(group, roots, children):
            label = Text(guide, style="bright_black")
            label.append(safe(span.name), style=_name_style(span))
            figures = (
                _fmt_duration(span.duration_ns),
                _tokens_cell(span.attributes),
                _cost_cell(span.attributes),
            )
            rows.append((span, label, figures, _status_cell(span, secrets)))
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
        # and a Table's cost per row added up to seconds for a big run's spans.
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
