"""``orchestrator runs`` lists the runs of the runs folder through the index ``trace list``
uses, and ``runs prune`` deletes old runs' files, keeping a running or parked one."""

from __future__ import annotations

import os
import time
from pathlib import Path

from support.cli import Cli

TREE = '''
import os

from orchestrator import Agent, Policy, tool
from orchestrator.models import FunctionModel, response, text, tool_call


@tool
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def answer(request):
    if len(request.messages) == 1:
        return response(tool_call("send_email", {"to": "ann"}, id="mail-ann"))
    return text(request.messages[-1].content[0].content)


agent = Agent("mailer", "Mail.", tools=[send_email], model=FunctionModel(answer, name="m"),
              policy=Policy({"send_email": "confirm"}))
'''


def files_of(work: Path, run_id: str) -> list[str]:
    return sorted(p.name for p in (work / "runs").iterdir() if p.name.startswith(run_id))


def age(work: Path, run_id: str, days: float) -> None:
    then = time.time() - days * 86400
    for p in (work / "runs").iterdir():
        if p.name.startswith(run_id):
            os.utime(p, (then, then))


def test_runs_lists_each_run_with_its_status_and_prune_deletes_only_old_finished_ones(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    done = cli("run", "tree.py", "go", "--approve", "all", "--json")
    parked = cli("run", "tree.py", "go", "--approve", "defer", "--json")
    fresh = cli("run", "tree.py", "go", "--approve", "all", "--json")
    assert (done.returncode, parked.returncode, fresh.returncode) == (0, 11, 0)
    ids = [r.stdout.split('"run_id": "')[1][:32] for r in (done, parked, fresh)]

    listed = cli("runs")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert set(rows) == set(ids)
    assert "completed" in rows[ids[0]] and "mailer" in rows[ids[0]]
    assert "awaiting approval" in rows[ids[1]]

    age(tmp_path, ids[0], 10)
    age(tmp_path, ids[1], 10)
    dry = cli("runs", "prune", "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0
    assert f"would delete runs/{ids[0]}.db" in dry.stdout
    assert f"kept {ids[1]} (awaiting approval)" in dry.stdout
    assert files_of(tmp_path, ids[0])  # a dry run deletes nothing

    pruned = cli("runs", "prune", "--older-than", "7d")
    assert pruned.returncode == 0
    assert files_of(tmp_path, ids[0]) == []  # journal and trace
    assert f"deleted runs/{ids[0]}.jsonl" in pruned.stdout
    assert files_of(tmp_path, ids[1]) and files_of(tmp_path, ids[2])  # parked; too young

    cli("runs", "prune", "--older-than", "7d", "--include-pending")
    assert files_of(tmp_path, ids[1]) == []
    assert files_of(tmp_path, ids[2])


def test_a_bad_duration_is_a_usage_error(cli: Cli) -> None:
    refused = cli("runs", "prune", "--older-than", "soon")
    assert refused.returncode == 2
    assert "expected a duration such as 7d" in refused.stderr
