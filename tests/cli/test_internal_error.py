"""A run that ends by an internal error (a bug, or a BaseException out of user code): status
``error`` (exit 1) with one line saying so, and its journal kept when it recorded anything, so
``orchestrator resume`` continues it without repeating what was done (issue 39, part 1)."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import Cli

TREE = '''
import os
from pathlib import Path

from orchestrator import Agent, tool
from orchestrator.models import FunctionModel, response, text, tool_call


class Bug(BaseException):
    """Not an Exception: what the runtime does not turn into a model error."""


@tool
def pay(who: str) -> str:
    """Pay someone (not idempotent)."""
    with open("effects.log", "a") as f:
        f.write(f"paid {who}\\n")
    return f"paid {who}"


async def answer(request):
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    if turn == int(os.environ.get("CRASH_AT_TURN", "0")):
        raise Bug("the model adapter broke")
    if turn == 1:
        return response(tool_call("pay", {"who": "alice"}, id="p1"))
    return response(text("paid alice"))


agent = Agent("lead", "Pay alice.", tools=[pay], model=FunctionModel(answer, name="m"))
'''


def journals(work: Path) -> list[Path]:
    return sorted((work / "runs").glob("*.db"))


def test_a_crash_after_a_tool_ran_keeps_the_journal_and_resume_does_not_pay_again(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    crashed = cli("run", "tree.py", "go", env={"CRASH_AT_TURN": "2"})

    assert crashed.returncode == 1  # the exit code of status error
    last = crashed.stderr.strip().splitlines()[-1]
    assert last.startswith("run ended with error: internal error (Bug: the model adapter broke)")
    assert "the journal is kept: resume with `orchestrator resume " in last
    assert "Traceback" in crashed.stderr  # for a bug report
    [journal] = journals(tmp_path)
    assert (tmp_path / "effects.log").read_text() == "paid alice\n"

    resumed = cli("resume", journal.stem)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "paid alice"
    assert (tmp_path / "effects.log").read_text() == "paid alice\n"  # replayed, not paid again


def test_json_reports_the_internal_error_as_status_error(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    crashed = cli("run", "tree.py", "go", "--json", env={"CRASH_AT_TURN": "2"})
    assert crashed.returncode == 1
    payload = json.loads(crashed.stdout)
    assert payload["status"] == "error" and "Bug: the model adapter broke" in payload["error"]
    assert payload["run_id"] == journals(tmp_path)[0].stem


def test_a_crash_before_anything_was_recorded_leaves_no_journal_behind(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    crashed = cli("run", "tree.py", "go", env={"CRASH_AT_TURN": "1"})
    assert crashed.returncode == 1
    assert "nothing was recorded, so no journal is kept" in crashed.stderr
    assert journals(tmp_path) == []
    assert not (tmp_path / "effects.log").exists()
