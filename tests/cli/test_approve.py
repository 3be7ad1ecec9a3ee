"""``orchestrator run --approve ask|all|none``: calls behind a ``confirm`` policy, from the CLI.

Through the real command: ``all`` and ``none`` in this process with streams that are not
terminals (as pipes are not; :mod:`support.cli`), ``ask`` in a subprocess on a real
pseudo-terminal (python's ``pty``), where the live view is on and the question must show the
agent path, the tool and its arguments.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import Cli, CliRun

TREE = '''
from orchestrator import Agent, Policy, ToolResultBlock, tool
from orchestrator.models import FunctionModel, text, tool_call


@tool
def remove(name: str) -> str:
    """Remove a file for good.

    Args:
        name: The file.
    """
    print(f"[remove ran] {name}", flush=True)
    return f"removed {name}"


def decide(request):
    if request.agent.depth == 0:
        if len(request.messages) == 1:
            return tool_call("spawn_subagent", {"agent": "janitor", "task": "clean up"})
        return text("lead: " + request.messages[-1].content[0].content)
    if len(request.messages) == 1:
        return tool_call("remove", {"name": "old.log"})
    result = request.messages[-1].content[0]
    return text("NOT RUN: " + result.content if result.is_error else "RAN: " + result.content)


janitor = Agent("janitor", "Clean up.", description="Removes files.", tools=[remove],
                policy=Policy({"remove": "confirm"}))
agent = Agent("lead", "Delegate.", subagents=[janitor], model=FunctionModel(decide))
'''


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY" and "OTEL" not in k}
    out["PYTHONIOENCODING"] = "utf-8"
    return out


@pytest.fixture
def command(cli: Cli, tmp_path: Path) -> Callable[..., CliRun]:
    """``orchestrator run tree.py "clean up" OPTIONS`` in this process, in the environment
    :func:`env` builds, with ``stdin`` on standard input."""
    (tmp_path / "tree.py").write_text(TREE)
    cli.environ = env

    def run(*options: str, stdin: str = "") -> CliRun:
        return cli("run", "tree.py", "clean up", *options, input=stdin)

    return run


def test_approve_all_runs_the_confirmed_call(command: Callable[..., CliRun]) -> None:
    proc = command("--approve", "all")
    assert proc.returncode == 0, proc.stderr
    assert "[remove ran] old.log" in proc.stdout
    assert proc.stdout.strip().endswith("lead: RAN: removed old.log")


def test_approve_none_declines_it_and_progress_says_so(command: Callable[..., CliRun]) -> None:
    proc = command("--approve", "none")
    assert proc.returncode == 0, proc.stderr
    assert "[remove ran]" not in proc.stdout
    assert "lead: NOT RUN: " in proc.stdout
    assert "declined lead/janitor#1: remove (not run)" in proc.stderr


def test_without_a_terminal_the_default_is_none(command: Callable[..., CliRun]) -> None:
    proc = command(stdin="y\n")  # a pipe, even one holding a yes, is not asked
    assert proc.returncode == 0, proc.stderr
    assert "approve?" not in proc.stderr
    assert "declined lead/janitor#1: remove" in proc.stderr


def test_an_unknown_approve_mode_is_a_usage_error(command: Callable[..., CliRun]) -> None:
    proc = command("--approve", "maybe")
    assert proc.returncode == 2
    assert "invalid choice: 'maybe'" in proc.stderr


def run_on_a_terminal(tmp_path: Path, answer: bytes, *options: str) -> tuple[int, str]:
    """Run the command with stdin, stdout and stderr on a real pty; answer the first question
    with ``answer``; return the exit code and everything the terminal showed."""
    (tmp_path / "tree.py").write_text(TREE)
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", "tree.py", "clean up", *options],
        cwd=tmp_path,
        env={**env(), "TERM": "xterm", "COLUMNS": "100", "LINES": "40"},
        stdin=child,
        stdout=child,
        stderr=child,
        close_fds=True,
    )
    os.close(child)
    shown = b""
    answered = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            if not answered and b"[y]es / [N]o / [a]ll: " in shown:
                time.sleep(0.3)  # the live view must stay paused while the question waits
                os.write(main, answer)
                answered = True
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(10)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    return code, shown.decode("utf-8", "replace")


def test_approve_ask_on_a_terminal_shows_the_call_and_runs_it_on_yes(tmp_path: Path) -> None:
    code, shown = run_on_a_terminal(tmp_path, b"y\n", "--approve", "ask")
    assert code == 0, shown
    assert 'approve? lead/janitor#1 wants to run remove {"name":"old.log"}' in shown
    assert "approved" in shown
    assert "[remove ran] old.log" in shown
    assert "lead: RAN: removed old.log" in shown
    question = shown.index("approve? lead/janitor#1")
    answer = shown.index("approved", question)
    # nothing redrew the live view between the question and its answer
    assert "agents" not in shown[question:answer]


def test_ask_is_the_default_on_a_terminal_and_no_declines(tmp_path: Path) -> None:
    code, shown = run_on_a_terminal(tmp_path, b"n\n")
    assert code == 0, shown
    assert "approve? lead/janitor#1 wants to run remove" in shown
    assert "declined" in shown
    assert "[remove ran]" not in shown
    assert "lead: NOT RUN: " in shown
