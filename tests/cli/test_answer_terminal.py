"""The run's answer on stdout (issue 39, part 10): neutralized like stderr when stdout is a
terminal (a real pseudo-terminal), written as the model wrote it when piped."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from support.cli import Cli, cli_env

HOSTILE = "done \x1b]0;pwned\x07 \x1b[2J then \u202eevil\nsecond line\tend"

TREE = f"""
from orchestrator import Agent
from orchestrator.models import ScriptedModel, text

agent = Agent("root", "Answer.", model=ScriptedModel([text({HOSTILE!r})]))
"""


def stdout_on_a_terminal(cwd: Path) -> tuple[int, str]:
    """Run the command with stdout on a pseudo-terminal; its code and what the terminal got."""
    main, child = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", "tree.py", "go", "--quiet"],
        cwd=cwd,
        env=cli_env(TERM="xterm"),
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=subprocess.DEVNULL,
    )
    os.close(child)
    shown = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # every other end is closed
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(10)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    return code, shown.decode("utf-8", "replace")


def test_the_answer_on_a_terminal_shows_control_characters_as_escapes(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    code, shown = stdout_on_a_terminal(tmp_path)
    assert code == 0, shown
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "done \\x1b]0;pwned\\x07 \\x1b[2J then \\u202eevil" in shown
    # lines and tabs are text, kept (the terminal shows \n as \r\n)
    assert "second line\tend" in shown and shown.count("\n") == 2


def test_the_answer_piped_is_written_as_the_model_wrote_it(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    proc = cli("run", "tree.py", "go", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == HOSTILE + "\n"
