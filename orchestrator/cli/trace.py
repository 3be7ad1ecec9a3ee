"""``orchestrator trace list/show/export``: saved runs on the console, each command an exit code.

The library side is in :mod:`orchestrator.tracing` (:mod:`~orchestrator.tracing.tracefiles`
reads and finds runs, :mod:`~orchestrator.tracing.view` draws one,
:mod:`~orchestrator.tracing.export` sends one); these commands print through ``rich`` (imported
when one runs) and turn a failure into one error line and an exit code.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import OrchestratorError
from ..core.redact import secret_values
from ..core.terminal import terminal_safe
from ..tracing.tracefiles import (
    RunSummary,
    TraceFileError,
    TraceNotFoundError,
    load_trace,
    resolve_run,
)
from ..tracing.view import STATUS_STYLES, find_span, format_duration, render_span, render_trace
from ._common import stdout_to_devnull, without_userinfo

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["cmd_trace", "escape", "export_command", "jaeger_links", "list_command", "show"]


def escape(text: str) -> str:
    """``text`` shown as it is by rich (a path or a message holding "[...]" is not markup), and
    fit for a terminal (:func:`~orchestrator.core.terminal.terminal_safe`: secrets redacted,
    control characters shown as escapes)."""
    from rich.markup import escape as rich_escape

    return rich_escape(terminal_safe(text))


def show(
    run: str | None,
    runs_dir: Path,
    console: Console,
    *,
    errors: Console | None = None,
    depth: int | None = None,
    span: str | None = None,
) -> int:
    """``orchestrator trace show [RUN] [--depth N] [--span ID|PATH]``: draw a saved run
    (default: the newest), or one span of it whole. Errors go to ``errors`` (the CLI's
    stderr), else to ``console``. Piped, names are shown whole (the lines are as wide as they
    need); on a terminal they give way to the figures."""
    try:
        path = resolve_run(run, runs_dir)
        spans = load_trace(path)
    except (TraceNotFoundError, TraceFileError) as exc:
        (errors or console).print(f"[red]error:[/red] {escape(str(exc))}")
        return 1
    if span is not None:
        found = find_span(spans, span)
        if len(found) != 1:
            problem = "matches no span" if not found else f"matches {len(found)} spans"
            (errors or console).print(
                f"[red]error:[/red] --span {escape(span)} {problem} in {escape(str(path))} "
                "(give a span id, a longer prefix of one, or an agent's path such as "
                "lead/researcher#2)"
            )
            return 1
        render_span(found[0], spans, console)
        return 0
    console.print(f"[dim]{escape(str(path))}[/dim]", no_wrap=True, crop=False)
    if spans.damage_note:
        console.print(f"[yellow]{escape(spans.damage_note)}[/yellow]")
    render_trace(spans, console, depth=depth, fit_names=not console.is_terminal)
    return 0


def list_command(runs_dir: Path, console: Console, *, limit: int | None = None) -> int:
    """``orchestrator trace list``: the saved runs, newest first.

    The status column shows the root's ``orchestrator.outcome`` (``completed``, ``timeout``...)
    coloured by its span status, or the bare status when no outcome was recorded.
    """
    from rich.table import Table
    from rich.text import Text

    from .runindex import AWAITING, RUNNING, journal_only_summaries, run_index, shown_status

    entries = run_index(runs_dir)  # the traces, and runs known only by their journal
    runs: list[RunSummary] = []
    said: dict[Path, str] = {}  # what the journal says, where the trace cannot know it yet
    for entry in entries:
        traces = sorted(entry.traces, key=_started, reverse=True)
        runs += traces or journal_only_summaries([entry])
        if entry.status in (AWAITING, RUNNING):
            said.update((t.path, shown_status(entry.status)) for t in traces)
    if not runs:
        console.print(f"no saved traces in {escape(str(runs_dir))}")
        return 0
    secrets = secret_values()

    def safe(text: str) -> str:  # every field comes from a file: anyone may have written it
        return terminal_safe(text, secrets=secrets)

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
                safe(r.run_id),
                safe(r.root_agent or ""),
                r.start.astimezone().strftime(time_format) if r.start else "",
                format_duration(int(r.duration_s * 1e9)),
                str(r.span_count),
                # The outcome says more than the span status; its colour still shows the status.
                safe(said.get(r.path) or shown_status(r.outcome or r.status)),
                safe(where),
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
        style = STATUS_STYLES.get(r.status, "")
        # Text, not str: rich would read "[link=...]" in a name from the file as markup
        cells = [Text(cell, style=style if i == 5 else "") for i, cell in enumerate(row)]
        table.add_row(*cells)
    console.print(table)
    for r in shown:  # a damaged line hides only itself: say which
        if r.damage_note:
            console.print(f"[yellow]{escape(r.run_id)}: {escape(r.damage_note)}[/yellow]")
    return 0


def _started(summary: RunSummary) -> float:
    return summary.start.timestamp() if summary.start else 0.0


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
    # here, not at the top: the exporter's protobuf and HTTP modules are ~30 ms that
    # `trace show` and `trace list` do not need
    from ..tracing.endpoints import resolve_otlp_endpoint
    from ..tracing.export import TraceExportError, send_trace

    try:
        path = resolve_run(run, runs_dir)
        sent = send_trace(path, endpoint, protocol, timeout=timeout)
    except (TraceNotFoundError, TraceFileError, TraceExportError) as exc:
        (errors or console).print(f"[red]error:[/red] {escape(without_userinfo(str(exc)))}")
        return 1
    except OrchestratorError as exc:  # e.g. an unsupported protocol
        (errors or console).print(f"[red]error:[/red] {escape(without_userinfo(str(exc)))}")
        return 2
    target = without_userinfo(str(resolve_otlp_endpoint(endpoint, protocol)))
    console.print(f"sent {sent.spans} spans from {escape(str(path))} to {escape(target)}")
    if sent.damage_note:
        console.print(f"[yellow]{escape(sent.damage_note)}[/yellow]")
    for url in jaeger_links(sent.trace_ids):
        console.print(f"see it in Jaeger: {escape(url)}", soft_wrap=True)
    return 0


def jaeger_links(trace_ids: Iterable[str]) -> list[str]:
    """Where Jaeger's UI shows each trace, when ``JAEGER_UI_URL`` says where the UI is
    (``http://127.0.0.1:16686``): ``{JAEGER_UI_URL}/trace/{trace id}``; none otherwise."""
    base = os.environ.get("JAEGER_UI_URL", "").strip().rstrip("/")
    return [f"{base}/trace/{trace_id}" for trace_id in trace_ids] if base else []


def cmd_trace(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    # `trace show | head`: the reader has what it wanted, which is no failure (rich's own
    # handler exits 1); the rest of the output goes nowhere
    console.on_broken_pipe = stdout_to_devnull  # type: ignore[method-assign]
    errors = Console(stderr=True, soft_wrap=True)  # a message is one line, whatever the width
    runs_dir = Path(args.runs_dir)
    if args.trace_command == "list":
        return list_command(runs_dir, console)
    if args.trace_command == "show":
        return show(
            args.run,
            runs_dir,
            console,
            errors=errors,
            depth=getattr(args, "depth", None),
            span=getattr(args, "span", None),
        )
    return export_command(args.run, runs_dir, args.endpoint, args.protocol, console, errors=errors)
