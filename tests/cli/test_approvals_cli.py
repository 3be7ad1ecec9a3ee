"""``--approve defer`` and ``orchestrator approve``: a run parks a ``confirm`` call and exits 11,
another process decides it; side effects are counted from outside, in a file."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from support.cli import Cli, cli_env

TREE = '''
import os
import time
from pathlib import Path

from orchestrator import Agent, Policy, tool
from orchestrator.models import FunctionModel, response, text, tool_call


@tool
def send_email(to: str) -> str:
    """Send an email (not idempotent)."""
    with open("sent.log", "a") as f:
        f.write(f"{to}\\n")
    return f"sent to {to}"


@tool
def wait_for_go(what: str) -> str:
    """Work until the file `go` exists (the tests hold a run alive with it)."""
    Path("waiting").write_text("yes")
    while not Path("go").exists():
        time.sleep(0.05)
    return f"worked on {what}"


def answer(request):
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    name = request.agent.name
    last = request.messages[-1].content[0]
    if name == "lead":
        if turn == 1:
            calls = [tool_call("spawn_subagent", {"agent": "mailer", "task": t}, id=f"s-{t}")
                     for t in os.environ.get("MAIL_TO", "ann").split(",")]
            if os.environ.get("SLOW"):
                calls.append(tool_call("spawn_subagent", {"agent": "worker", "task": "w"}, id="w"))
            return response(*calls)
        return text("lead: " + "; ".join(b.content for b in request.messages[-1].content))
    if name == "worker":
        if turn == 1:
            return response(tool_call("wait_for_go", {"what": "w"}, id="g1"))
        return text(last.content)
    task = request.messages[0].content[0].text
    if turn == 1:
        return response(tool_call("send_email", {"to": task}, id=f"mail-{task}"))
    return text(last.content)


mailer = Agent("mailer", "Mail.", tools=[send_email], description="mails",
               policy=Policy({"send_email": "confirm"}))
worker = Agent("worker", "Work.", tools=[wait_for_go], description="works")
agent = Agent("lead", "Delegate.", subagents=[mailer, worker], model=FunctionModel(answer, name="m"))
'''


def sent(work: Path) -> list[str]:
    log = work / "sent.log"
    return log.read_text().split() if log.exists() else []


def orchestrator(work: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=work,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_id_of(work: Path) -> str:
    [journal] = (work / "runs").glob("*.db")
    return journal.stem


def test_a_run_parked_in_one_process_is_approved_by_another_and_sends_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    parked = orchestrator(tmp_path, "run", "tree.py", "go", "--approve", "defer")
    assert parked.returncode == 11, parked.stderr
    assert "run ended with awaiting_approval" in parked.stderr
    assert '  mail-ann  lead/mailer#1  send_email {"to": "ann"}' in parked.stderr
    assert sent(tmp_path) == []
    run_id = run_id_of(tmp_path)

    listed = orchestrator(tmp_path, "trace", "list")
    assert "awaiting approval" in listed.stdout and "interrupted" not in listed.stdout

    approved = orchestrator(tmp_path, "approve", run_id[:8], "--allow", "mail-ann")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == "lead: sent to ann"
    assert sent(tmp_path) == ["ann"]
    # what it replayed (lead's and the mailer's first replies) and ran new: the approved call,
    # the mailer's answer and the spawn's, and the two replies after them
    assert (
        "resumed: replayed 2 model responses and 0 tool results; 0 calls were in flight (run "
        "again if idempotent, else answered 'outcome unknown'); new: 2 model responses, 2 tool "
        "results (children's answers included)"
    ) in approved.stderr

    again = orchestrator(tmp_path, "approve", run_id, "--allow", "mail-ann")
    assert again.returncode == 2  # not parked any more: refused, one line
    assert again.stderr.strip().splitlines() == [
        f"orchestrator: run {run_id} has no call waiting for approval (it ended completed)"
    ]
    assert sent(tmp_path) == ["ann"]


def test_two_parked_calls_are_decided_one_at_a_time_and_a_denied_one_never_runs(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    env = {"MAIL_TO": "ann,bob"}
    parked = cli("run", "tree.py", "go", "--approve", "defer", "--json", env=env)
    assert parked.returncode == 11
    payload = json.loads(parked.stdout)
    assert payload["status"] == "awaiting_approval"
    assert sorted(p["id"] for p in payload["pending_approvals"]) == ["mail-ann", "mail-bob"]
    run_id = payload["run_id"]

    unknown = cli("approve", run_id, "--allow", "mail-zed", env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "orchestrator: no pending call 'mail-zed' in this run (pending: mail-ann, mail-bob)"
    ]
    listing = cli("approve", run_id, env=env)  # no decision: what is pending
    assert listing.returncode == 11 and "mail-bob" in listing.stdout

    first = cli("approve", run_id, "--deny", "mail-bob", env=env)
    assert first.returncode == 11  # ann's call is still parked
    assert "mail-ann" in first.stderr and "mail-bob" not in first.stderr.split("awaiting")[-1]
    assert sent(tmp_path) == []
    done = cli("approve", run_id, "--allow-all", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "lead: sent to ann; the call to 'send_email' was declined by a person; it was not run"
    )
    assert sent(tmp_path) == ["ann"]


def test_an_unknown_run_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    refused = cli("approve", "nosuchrun", "--allow-all")
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_run_killed_while_a_call_was_parked_is_approved_later(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    env = cli_env(SLOW="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", "tree.py", "go", "--approve", "defer"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        # parked (on record) while the worker still works: then killed
        while not (tmp_path / "waiting").exists() or not _parked(tmp_path):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    (tmp_path / "go").write_text("")
    run_id = run_id_of(tmp_path)
    approved = orchestrator(tmp_path, "approve", run_id, "--allow", "mail-ann", SLOW="1")
    assert approved.returncode == 0, approved.stderr
    assert sent(tmp_path) == ["ann"]
    # the worker's call was in flight when the process was killed: its outcome is unknown
    assert approved.stdout.startswith("lead: sent to ann; ")


def _parked(work: Path) -> bool:
    journals = list((work / "runs").glob("*.db"))
    if not journals:
        return False
    try:
        with sqlite3.connect(f"file:{journals[0]}?mode=ro", uri=True) as db:
            return bool(db.execute("SELECT count(*) FROM parked").fetchone()[0])
    except sqlite3.OperationalError:
        return False
