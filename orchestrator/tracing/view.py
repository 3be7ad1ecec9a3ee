"""A saved trace drawn in the terminal (``orchestrator trace show``): the span tree by parent
links, with a waterfall column, durations, tokens, cost and status.

:func:`render_trace` draws :class:`~.tracefiles.SpanRecord` values (read by :mod:`.tracefiles`)
on a ``rich`` console; rich is imported inside the functions that draw, so importing this module
stays cheap. Agents are named by their path's last part (``researcher#2``), so siblings are told
apart; under a row come its task (when content was captured), its error text and its retries;
``depth`` folds agents below a depth into one row each. :func:`render_span` shows one span
whole: its attributes, events and (when captured) its messages.
"""

from __future__ import annotations

import json
import operator
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ..core.redact import secret_values
from ..core.terminal import terminal_safe
from .tracefiles import (
    _OUTCOME,
    INTERRUPTED_NOTE,
    AttrValue,
    SpanRecord,
    _no_collection,
    _roots,
    _summarize,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["find_span", "render_span", "render_trace"]

_STATUS_STYLES: Final = {"OK": "green", "ERROR": "bold red", "UNSET": "dim"}
_BAR_STYLES: Final = {"OK": "green", "ERROR": "red", "UNSET": "cyan"}
_ROLLUP_HINTS: Final = ("subtree", "total", "cumulative", "tree")
_PATH: Final = "orchestrator.agent.path"
_DEPTH: Final = "orchestrator.agent.depth"
_DETAIL_CHARS: Final = 240
"""Characters of a task or an error shown under a row (``--span`` shows them whole)."""
_MESSAGE_ATTRIBUTES: Final = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
)


def _fmt_duration(ns: int) -> str:
    """``0.25ms``, ``250ms``, ``2.50s``, ``1m02.5s``: as the float formatting below rounds.

    Under a minute the digits are worked out in integers (this runs for every row of a big
    run, and float formatting was most of its cost). They are the float's: a float quotient
    is off by far less than one nanosecond, so it rounds the same way except on an exact tie,
    which is left to the float.
    """
    if type(ns) is int and 0 <= ns < 60_000_000_000:
        if ns < 1_000_000:  # hundredths of a millisecond
            units, remainder = divmod(ns, 10_000)
            if remainder != 5_000:
                units += remainder > 5_000
                return f"{units // 100}.{units % 100:02d}ms"
        elif ns < 1_000_000_000:  # milliseconds
            units, remainder = divmod(ns, 1_000_000)
            if remainder != 500_000:
                return f"{units + (remainder > 500_000)}ms"
        else:  # hundredths of a second
            units, remainder = divmod(ns, 10_000_000)
            if remainder != 5_000_000:
                units += remainder > 5_000_000
                return f"{units // 100}.{units % 100:02d}s"
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


_RANKED: dict[tuple[tuple[str, ...], str, str], tuple[str, ...]] = {}
_RANKED_LIMIT: Final = 1024


def _ranked_keys(attrs: Mapping[str, AttrValue], suffix: str, exclude: str) -> tuple[str, ...]:
    """The keys of ``attrs`` that may hold a figure (``suffix`` ``"cost"``: a cost; else a key
    ending in ``suffix`` without ``exclude``), best first by :func:`_rollup_rank`.

    Remembered by the span's keys: a big run's spans have a few key sets between them, and
    scanning and ranking every key of every span took seconds for 65,000 of them.
    """
    keys = tuple(attrs)
    ranked = _RANKED.get((keys, suffix, exclude))
    if ranked is None:
        if suffix == "cost":
            found = [k for k in keys if "cost" in k.rsplit(".", 1)[-1]]
        else:
            found = [k for k in keys if k.endswith(suffix) and exclude not in k]
        ranked = tuple(sorted(found, key=_rollup_rank))
        if len(_RANKED) >= _RANKED_LIMIT:
            _RANKED.clear()
        _RANKED[(keys, suffix, exclude)] = ranked
    return ranked


class _FigureKeys(NamedTuple):
    """Where a span's figures are, best first (see :func:`_figure_keys`)."""

    tokens_in: tuple[str, ...]
    tokens_out: tuple[str, ...]
    cost: tuple[str, ...]
    rolled: bool  # no standard ``gen_ai.usage`` count: the tokens are a roll-up


_FIGURE_KEYS: dict[tuple[str, ...], _FigureKeys] = {}


def _figure_keys(attrs: Mapping[str, AttrValue]) -> _FigureKeys:
    """The keys of ``attrs`` that may hold its tokens (the standard ``gen_ai.usage`` count
    first, else the best roll-up by :func:`_rollup_rank`; cache counts are left out, they are
    part of the input already) and its cost.

    Depends on the keys alone, so it is worked out once per key set (a big run's spans have
    a few between them): a row then reads only the keys that may hold its figures.
    """
    keys = tuple(attrs)
    found = _FIGURE_KEYS.get(keys)
    if found is None:
        picked: list[tuple[str, ...]] = []
        for suffix in ("input_tokens", "output_tokens"):
            standard = f"gen_ai.usage.{suffix}"
            ranked = _ranked_keys(attrs, suffix, "cache")
            if standard in attrs:
                ranked = (standard, *(k for k in ranked if k != standard))
            picked.append(ranked)
        rolled = (
            "gen_ai.usage.input_tokens" not in attrs and "gen_ai.usage.output_tokens" not in attrs
        )
        found = _FigureKeys(picked[0], picked[1], _ranked_keys(attrs, "cost", ""), rolled)
        if len(_FIGURE_KEYS) >= _RANKED_LIMIT:
            _FIGURE_KEYS.clear()
        _FIGURE_KEYS[keys] = found
    return found


def _first_number(attrs: Mapping[str, AttrValue], keys: tuple[str, ...]) -> float | None:
    """The first of ``keys`` in ``attrs`` that holds a number (not a bool), as a float."""
    for key in keys:
        value = attrs[key]
        kind = type(value)
        if kind is int or kind is float:
            return float(value)  # type: ignore[arg-type]
        number = _number(value)
        if number is not None:
            return number
    return None


def _tokens_text(tokens_in: float | None, tokens_out: float | None, rolled: bool) -> str:
    """``in→out`` tokens; ``Σ`` marks a roll-up (an agent's subtree) rather than one call."""
    if tokens_in is None and tokens_out is None:
        return ""
    left = _fmt_count(tokens_in) if tokens_in is not None else "?"
    right = _fmt_count(tokens_out) if tokens_out is not None else "?"
    return f"{'Σ' if rolled else ''}{left}→{right}"


def _tokens_cell(attrs: Mapping[str, AttrValue]) -> str:
    """The tokens column of a span (see :func:`_tokens_text`)."""
    where = _figure_keys(attrs)
    return _tokens_text(
        _first_number(attrs, where.tokens_in), _first_number(attrs, where.tokens_out), where.rolled
    )


def _cost_text(cost: float | None) -> str:
    if cost is None:
        return ""
    return f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}"


def _cost_cell(attrs: Mapping[str, AttrValue]) -> str:
    """The cost column of a span: its best cost figure, in dollars."""
    return _cost_text(_first_number(attrs, _figure_keys(attrs).cost))


def _status_parts(span: SpanRecord, secrets: tuple[str, ...]) -> tuple[str, str, str]:
    """The status cell's three texts: the status, `` <outcome>`` and `` (<error.type>)``
    (each empty when not shown)."""
    outcome = span.attributes.get(_OUTCOME)
    error_type = span.attributes.get("error.type")
    said = ""
    if outcome is not None and not (outcome == "ok" and span.status == "OK"):  # not "OK ok"
        said = f" {terminal_safe(outcome, secrets=secrets)}"
    error = ""
    if error_type is not None and error_type != outcome:
        error = f" ({terminal_safe(error_type, secrets=secrets)})"
    return terminal_safe(span.status, secrets=secrets), said, error


def _status_cell(span: SpanRecord, secrets: tuple[str, ...]) -> Text:
    from rich.text import Text

    status, said, error = _status_parts(span, secrets)
    text = Text(status, style=_STATUS_STYLES.get(span.status, ""))
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
    of a span in ``folded`` are not drawn.
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


def _label(span: SpanRecord, safe: Any) -> str:
    """The row's name: an agent by its path's last part (``invoke_agent researcher#2``), so
    siblings are told apart; any other span by its name."""
    path = span.attributes.get(_PATH)
    if span.name.startswith("invoke_agent") and isinstance(path, str) and path:
        return f"invoke_agent {safe(path.rsplit('/', 1)[-1])}"
    return str(safe(span.name))


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
    span: SpanRecord, parent: SpanRecord | None, folded_count: int, safe: Any
) -> list[tuple[str, str]]:
    """What goes under a row, as (text, style): the task, the error text, the retries."""
    out: list[tuple[str, str]] = []
    if span.name.startswith("invoke_agent"):
        task = _spawn_task(parent) or _captured_task(span)
        if task is not None:
            out.append((f"task: {_short(safe(task))}", "dim"))
    if span.status == "ERROR" and span.status_message:
        reason = span.status_message
        outcome = span.attributes.get(_OUTCOME)
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


class _Row(NamedTuple):
    """One span's row, as plain text: laid out once the widths of every row are known."""

    span: SpanRecord
    guide: str  # the tree's guides (``├─``...)
    label: str  # the name, shown through terminal_safe
    label_cells: int  # of both
    status_cells: int
    figures: tuple[str, str, str]  # duration, tokens, cost
    status: tuple[str, str, str]  # see _status_parts
    below: str  # the guide the lines under the row start with
    details: Sequence[tuple[str, str]]  # (text, style): see _details


class _Layout(NamedTuple):
    name_cells: int
    width: int  # of the timeline
    figure_widths: list[int]
    figures_shown: list[int]
    t0: int
    total: int
    fit_names: bool


_START_AND_NAME: Final = operator.attrgetter("start_ns", "name")
"""How siblings are ordered: by start time, then name."""
_GAP: Final = "  "
_CHUNK_LINES: Final = 2000
"""Lines handed to rich at once: a big run's 65,000 rows as one Text took hundreds of MB."""
_TRAILING_SPACE: Final = re.compile(r"\s+$")


def _header(layout: _Layout) -> str:
    text = "span".ljust(layout.name_cells) + _GAP + "timeline".ljust(layout.width)
    for k in layout.figures_shown:
        text += _GAP + ("duration", "tokens", "cost")[k].rjust(layout.figure_widths[k])
    return text + _GAP + "status"


_NOT_NARROW: Final = re.compile(r"[^ -~│├└─·█…→Σ↻✗]")
"""Anything but printable ASCII and the glyphs the view draws itself, one cell wide each."""


def _cell_len(text: str) -> int:
    """Terminal cells ``text`` takes: its length when it is printable ASCII and the view's own
    glyphs (the common case, tested in C), else rich's count character by character."""
    if (text.isascii() and text.isprintable()) or _NOT_NARROW.search(text) is None:
        return len(text)
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def _fit(text: str, cells: int, pad: bool = False) -> str:
    """``text`` cut to ``cells`` with an ellipsis (and padded): rich's ``Text.truncate``."""
    from rich.cells import set_cell_size

    length = _cell_len(text)
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


def _print_plain(console: Console, rows: Sequence[_Row], layout: _Layout) -> None:
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
    duration_cells = layout.figure_widths[0]  # always shown, first (see _render_trace)
    rest = [(k, cells) for k, cells in shown if k]
    for span, guide, label, label_cells, status_cells, figures, status, below, details in rows:
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
        label = guide + label  # _fit(label, name_cells, pad=True), its cells known
        if label_cells > name_cells:
            label = set_cell_size(label, name_cells - 1) + "…"
        elif label_cells < name_cells:
            label += " " * (name_cells - label_cells)
        line = label + drawn + figures[0].rjust(duration_cells) + end
        if before_status + status_cells > width or len(line) > width:
            line = _fit_line(line, width)
        append(line)
        for text, _style in details:
            detail = below + text
            if not layout.fit_names:  # piped: whole (up to _DETAIL_CHARS)
                detail = _fit(detail, width)
            append(_fit_line(detail, width))
        if len(lines) >= _CHUNK_LINES:
            console.print(Segments([Segment("\n".join(lines) + "\n")]), crop=False)
            lines = []
            append = lines.append
    if lines:
        console.print(Segments([Segment("\n".join(lines) + "\n")]), crop=False)


def _print_styled(
    console: Console, rows: Sequence[_Row], layout: _Layout, secrets: tuple[str, ...]
) -> None:
    """The rows as styled rich text (a terminal), a chunk of lines at a time.

    Lines are laid out here rather than by a rich Table: the widths are already known, and a
    Table's cost per row added up to seconds for a big run's spans.
    """
    from rich.text import Text

    header = Text(_header(layout), style="bold dim")
    lines = [header]
    for row in rows:
        span = row.span
        label = Text(row.guide, style="bright_black")
        label.append(row.label, style=_name_style(span))
        label.truncate(layout.name_cells, overflow="ellipsis", pad=True)
        line = Text.assemble(label, _GAP, _bar(span, layout.t0, layout.total, layout.width))
        for k in layout.figures_shown:
            line.append(_GAP + row.figures[k].rjust(layout.figure_widths[k]))
        line.append(_GAP)
        line.append_text(_status_cell(span, secrets))
        lines.append(line)
        for text, style in row.details:
            detail = Text(row.below, style="bright_black")
            detail.append(text, style=style)
            if not layout.fit_names:  # piped: whole (up to _DETAIL_CHARS)
                detail.truncate(console.width, overflow="ellipsis")
            lines.append(detail)
        if len(lines) >= _CHUNK_LINES:
            console.print(Text("\n").join(lines), no_wrap=True, crop=True, overflow="ellipsis")
            lines = []
    if lines:
        console.print(Text("\n").join(lines), no_wrap=True, crop=True, overflow="ellipsis")


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
    way: the lines are as wide as the names need. The tokens and cost columns appear only when some span has a figure in them
    that is not zero.

    Every text from the file (span names, ids, the service, outcomes and error types) is shown
    through :func:`~orchestrator.core.terminal.terminal_safe`: secrets redacted, and control
    characters (a newline in a name as much as an escape sequence) shown as escapes on its row.
    """
    with _no_collection():  # a big run's rows are many objects and no cycles
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

    secrets = secret_values()
    # A big run's names, paths and outcomes are a few texts repeated: each is made safe once.
    made_safe: dict[str, str] = {}

    def safe(value: object) -> str:
        if type(value) is not str:
            return terminal_safe(value, secrets=secrets)
        shown = made_safe.get(value)
        if shown is None:
            shown = made_safe[value] = terminal_safe(value, secrets=secrets)
        return shown

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
            kids.sort(key=_START_AND_NAME)
        by_id = {s.span_id: s for s in group}
        folded: set[str] | None = None
        if depth is not None:
            folded = {
                s.span_id
                for s in group
                if s.name.startswith("invoke_agent")
                and isinstance(d := _number(s.attributes.get(_DEPTH)), float)
                and d >= depth
            }

        root = roots[0] if roots else group[0]
        summary = _summarize(Path("-"), group)
        head = Text.assemble(
            ("run ", "dim"),
            (safe(summary.run_id) if summary.run_id != "-" else "?", "bold"),
            ("  ", ""),
            summary.start.astimezone().strftime("%Y-%m-%d %H:%M:%S") if summary.start else "",
            ("  ", ""),
            (_fmt_duration(total), "bold"),
            (f"  {len(group)} spans", "dim"),
        )
        console.print(head, no_wrap=True, crop=False)
        console.print(
            Text.assemble(
                ("trace ", "dim"),
                safe(root.trace_id),
                ("  service ", "dim"),
                safe(summary.service_name or "?"),
            ),
            no_wrap=True,
            crop=False,
        )
        if summary.interrupted:  # the root span is missing: what remains is not how it ended
            console.print(Text(INTERRUPTED_NOTE, style="bold red"))

        # Every row is kept until the widths are known; the texts of a big run's rows repeat
        # (guides, names, statuses, figures), so equal ones are kept once.
        shared: dict[Any, Any] = {}
        share = shared.setdefault
        status_widths: dict[tuple[str, str, str], int] = {}
        status_memo: dict[tuple[object, ...], tuple[str, str, str]] = {}
        rows: list[_Row] = []
        append = rows.append
        # per row, written for speed (a big run has tens of thousands): the figures' keys are
        # worked out once per key set, equal texts made once, and a row without details
        # skips _details
        tokens_memo: dict[tuple[float | None, float | None, bool], str] = {}
        costs: set[str] = set()
        guide_cells: dict[str, int | None] = {}
        figure_keys = _FIGURE_KEYS.get
        duration_width = name_width = 0
        for span, guide, below in _walk(group, roots, children, folded):
            span_id = span.span_id
            inside = (
                _mark_seen(span_id, children, set())
                if folded is not None and span_id in folded
                else 0
            )
            attributes = span.attributes
            where = figure_keys(tuple(attributes)) or _figure_keys(attributes)
            tokens_in = tokens_out = None
            if where.tokens_in:
                value = attributes[where.tokens_in[0]]
                if type(value) is int:  # the common case of _first_number, inline
                    tokens_in = float(value)
                else:
                    tokens_in = _first_number(attributes, where.tokens_in)
            if where.tokens_out:
                value = attributes[where.tokens_out[0]]
                if type(value) is int:
                    tokens_out = float(value)
                else:
                    tokens_out = _first_number(attributes, where.tokens_out)
            said_tokens = (tokens_in, tokens_out, where.rolled)
            tokens = tokens_memo.get(said_tokens)
            if tokens is None:
                tokens = tokens_memo[said_tokens] = _tokens_text(*said_tokens)
            duration = _fmt_duration(max(0, span.end_ns - span.start_ns))
            if len(duration) > duration_width:
                duration_width = len(duration)
            if where.cost:
                cost = _cost_text(_first_number(attributes, where.cost))
                costs.add(cost)
            else:
                cost = ""
            figures = (duration, tokens, cost)
            name = span.name
            details: Sequence[tuple[str, str]] = ()
            if inside or span.events or span.status == "ERROR" or name.startswith("invoke_agent"):
                details = _details(span, by_id.get(span.parent_span_id or ""), inside, safe)
            path = attributes.get(_PATH)
            if name.startswith("invoke_agent") and isinstance(path, str) and path:
                name = f"invoke_agent {safe(path.rsplit('/', 1)[-1])}"  # as _label
            else:
                name = safe(name)
            outcome, error_type = attributes.get(_OUTCOME), attributes.get("error.type")
            # what _status_parts depends on (types too: True and 1 are equal keys)
            said = (span.status, type(outcome), outcome, type(error_type), error_type)
            try:  # a list attribute is not hashable
                status = status_memo[said]
            except KeyError:
                status = status_memo[said] = _status_parts(span, secrets)
            except TypeError:
                status = _status_parts(span, secrets)
                status = share(status, status)
            status_cells = status_widths.get(status)
            if status_cells is None:
                status_cells = status_widths[status] = _cell_len("".join(status))
            # cells of the guide and the name: their lengths when both are one cell a
            # character (the guide's glyphs, printable ASCII), as _cell_len says
            cells = guide_cells.get(guide, -1)
            if cells == -1:
                cells = guide_cells[guide] = None if _NOT_NARROW.search(guide) else len(guide)
            if cells is not None and name.isascii() and name.isprintable():
                cells += len(name)
            else:
                cells = _cell_len(guide + name)
            if cells > name_width:
                name_width = cells
            figures = share(figures, figures)  # equal ones are common: durations repeat
            below = share(below, below)
            row = (span, guide, name, cells, status_cells, figures, status, below, details)
            append(tuple.__new__(_Row, row))  # _Row(*row), without its Python-level __new__
        del shared
        # every row's tokens and cost are among these (each text once)
        tokens_shown = tokens_memo.values()
        figure_widths = [
            max(len("duration"), duration_width),
            max(len("tokens"), *map(len, tokens_shown)),
            max(len("cost"), *map(len, costs), 0),
        ]
        show_figure = [
            True,
            any(t and any(c.isdigit() and c != "0" for c in t) for t in tokens_shown),
            any(c and c not in ("$0.0000",) for c in costs),
        ]
        status_width = max(len("status"), *status_widths.values())
        fixed = sum(w for w, on in zip(figure_widths, show_figure, strict=True) if on)
        gaps = 2 * (2 + sum(show_figure))
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
                (_cell_len(row.below + text) for row in rows for text, _style in row.details),
                default=0,
            )
            row_cells = name_cells + 2 + width + sum(2 + figure_widths[k] for k in figures_shown)
            widest = max(
                widest,
                row_cells + 2 + len("status"),  # the header
                *(row_cells + 2 + cells for cells in status_widths.values()),
            )
            console.width = max(console.width, widest)
        layout = _Layout(name_cells, width, figure_widths, figures_shown, t0, total, fit_names)
        if console.color_system is None and not console.record:
            _print_plain(console, rows, layout)
        else:
            _print_styled(console, rows, layout, secrets)
        chat_in = chat_out = 0.0
        for span in group:
            attributes = span.attributes
            if "gen_ai.usage.input_tokens" in attributes:
                chat_in += _number(attributes["gen_ai.usage.input_tokens"]) or 0.0
            if "gen_ai.usage.output_tokens" in attributes:
                chat_out += _number(attributes["gen_ai.usage.output_tokens"]) or 0.0
        if chat_in or chat_out:
            console.print(
                Text(
                    f"model calls: {_fmt_count(chat_in)} input → {_fmt_count(chat_out)} output "
                    "tokens (sum of gen_ai.usage on chat spans)",
                    style="dim",
                )
            )


def find_span(spans: Sequence[SpanRecord], selector: str) -> list[SpanRecord]:
    """The spans ``selector`` names: a span id or a unique prefix of one (4 hex digits at
    least), or an agent's path (``lead/researcher#2``: its ``invoke_agent`` span)."""
    by_path = [
        s
        for s in spans
        if s.name.startswith("invoke_agent") and s.attributes.get(_PATH) == selector
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
    console.print(Text(_label(span, safe), style="bold " + _name_style(span)), no_wrap=True)
    facts = [
        ("span", span.span_id),
        ("trace", span.trace_id),
        ("parent", f"{span.parent_span_id} ({_label(parent, safe)})" if parent else "none"),
        ("started", _clock(span.start_ns)),
        ("duration", _fmt_duration(span.duration_ns)),
    ]
    for key, value in facts:
        console.print(Text.assemble((f"  {key:<9}", "dim"), safe(value)), no_wrap=True)
    status = _status_cell(span, secrets)
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
            offset = _fmt_duration(max(0, event.time_ns - span.start_ns))
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
