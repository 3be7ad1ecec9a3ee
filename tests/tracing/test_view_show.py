"""``orchestrator trace show`` answering "what happened?", through the real command (in this
process, :mod:`support.cli`).

The research tree on the offline model, and a small tree whose tool is retried and whose
child's model fails: agent paths (``researcher#2``), tasks (when content was captured), error
text and retry events under their rows, ``--depth N``, ``--span ID|PATH``, and layouts that stay
readable in a pipe (nothing cut) and at 80 columns.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from support.cli import Cli, CliRun

AGENTS = Path(__file__).parents[2] / "agents" / "research.py"
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

FAILING_TREE = '''
from orchestrator import Agent, tool
from orchestrator.models import FunctionModel, text, tool_call

calls = {"n": 0}


@tool(idempotent=True)
def flaky(q: str) -> str:
    """A lookup that fails twice.

    Args:
        q: The query.
    """
    calls["n"] += 1
    if calls["n"] < 3:
        raise ConnectionError("upstream reset the connection")
    return "found " + q


def decide(request):
    if request.agent.depth == 0:
        if len(request.messages) == 1:
            return tool_call("spawn_subagent", {"agent": "worker", "task": "Find the flaky thing"})
        return text("done")
    if len(request.messages) == 1:
        return tool_call("flaky", {"q": "x"})
    raise RuntimeError("the model server dropped the connection")


worker = Agent("worker", "Work.", description="Works.", tools=[flaky])
agent = Agent("lead", "Lead.", subagents=[worker], model=FunctionModel(decide))
'''


def command(cwd: Path, *args: str, capture: bool = False, columns: int | None = None) -> CliRun:
    """The command in this process (:mod:`support.cli`), in ``cwd``: the module's fixtures run
    it too, so it patches the environment with a monkeypatch of its own."""

    def environ() -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.pop("ANTHROPIC_API_KEY", None)
        env["PYTHONIOENCODING"] = "utf-8"
        if capture:
            env[CAPTURE] = "true"
        if columns is not None:
            env["COLUMNS"] = str(columns)
        return env

    return Cli(pytest.MonkeyPatch(), cwd, environ)(*args)


def cli(cwd: Path, *args: str, capture: bool = False, columns: int | None = None) -> str:
    proc = command(cwd, *args, capture=capture, columns=columns)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def research(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("research")
    question = "How do lambda expressions and list comprehensions work?"
    cli(work, "run", str(AGENTS), question, "--quiet", capture=True)
    return work


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("failing")
    (work / "tree.py").write_text(FAILING_TREE)
    cli(work, "run", "tree.py", "go", "--quiet")
    return work


def test_siblings_show_their_paths_and_tasks_and_nothing_is_cut_in_a_pipe(research: Path) -> None:
    shown = cli(research, "trace", "show")
    assert "invoke_agent researcher#1" in shown and "invoke_agent researcher#2" in shown
    assert "execute_tool spawn_subagent" in shown  # whole names, not "spawn_s…"
    assert "…" not in shown
    assert shown.count("task: ") == 3  # the root's prompt and each researcher's task
    assert "OK ok" not in shown
    assert "Σ0→0" not in shown and "$0.0000" not in shown  # offline: no token or cost columns


def test_depth_folds_the_agents_below_it(research: Path) -> None:
    whole = cli(research, "trace", "show").splitlines()
    folded = cli(research, "trace", "show", "--depth", "1").splitlines()
    assert len(folded) < len(whole) - 15
    assert sum("spans below, folded (--depth)" in line for line in folded) == 2
    assert any("invoke_agent researcher#2" in line for line in folded)
    assert not any("execute_tool search" in line for line in folded)
    root_only = cli(research, "trace", "show", "--depth", "0")
    assert "invoke_agent researcher" not in root_only


def test_span_shows_one_span_with_its_attributes_and_captured_messages(research: Path) -> None:
    agent = cli(research, "trace", "show", "--span", "lead/researcher#2")
    assert agent.startswith("invoke_agent researcher#2")
    assert re.search(r"orchestrator\.agent\.path\s+lead/researcher#2", agent)
    root = cli(research, "trace", "show", "--span", "lead")
    assert "messages (captured content)" in root
    assert "user: How do lambda expressions and list comprehensions work?" in root
    span_id = re.search(r"span\s+([0-9a-f]{16})", agent)
    assert span_id is not None
    by_id = cli(research, "trace", "show", "--span", span_id.group(1)[:8])
    assert by_id.startswith("invoke_agent researcher#2")


def test_an_unknown_span_is_an_error(research: Path) -> None:
    proc = command(research, "trace", "show", "--span", "lead/nobody#9")
    assert proc.returncode == 1
    assert "--span lead/nobody#9 matches no span" in proc.stderr


def test_error_text_and_retries_are_under_their_rows(failing: Path) -> None:
    shown = cli(failing, "trace", "show").splitlines()
    worker = next(i for i, line in enumerate(shown) if "invoke_agent worker#1" in line)
    assert "ERROR error" in shown[worker]
    assert "✗ model call raised RuntimeError: the model server dropped the connection" in "\n".join(
        shown[worker : worker + 3]
    )
    flaky = next(i for i, line in enumerate(shown) if "execute_tool flaky" in line)
    assert "↻ retry 1 after ConnectionError, backoff" in shown[flaky + 1]
    assert "↻ retry 2 after ConnectionError, backoff" in shown[flaky + 2]
    # the spawn's result and the agent's reason; the turn that failed repeats neither
    assert sum("the model server dropped the connection" in line for line in shown) == 2


def test_the_tree_fits_80_columns_in_a_terminal_width(research: Path) -> None:
    from rich.console import Console

    from orchestrator.tracing.tracefiles import load_trace, resolve_run
    from orchestrator.tracing.view import render_trace

    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    render_trace(load_trace(resolve_run(None, research / "runs")), console)
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    # names give way (with an ellipsis) only once the timeline is at its narrowest, 10 cells;
    # whether a name is cut at 80 depends on the figures' widths (this run's token counts)
    lead_row = next(line for line in lines if "invoke_agent lead" in line)
    if any("…" in line for line in lines):
        assert "█" * 10 in lead_row and "█" * 11 not in lead_row, lead_row
    assert any("invoke_agent researche" in line for line in lines)
