"""Real crashes: ``orchestrator run`` SIGKILLed at chosen points, then ``orchestrator resume``.

The tree (tests/support/crash_tree.py) counts its side effects and model requests in files
outside the process and holds at a named point until told to go on; the test waits for that
marker (never a bare sleep), kills the process with SIGKILL, and resumes it in a new process.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import RunStatus, resume
from orchestrator.core.messages import transcript_problem

TREE = Path(__file__).resolve().parents[1] / "support" / "crash_tree.py"
BUDGET = 50_000


def cli(args: list[str], work: Path, hold: str, children: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "CRASH_DIR": str(work),
        "CRASH_HOLD": hold,
        "CRASH_CHILDREN": str(children),
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            *args,
            "--runs-dir",
            str(work / "runs"),
            "--json",
            "--budget-tokens",
            str(BUDGET),
        ],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {path.name}: {proc.communicate()}")
        assert time.monotonic() < end, f"no {path.name} after {timeout}s"
        time.sleep(0.01)


def finished(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def recorded_turns(journal: Path) -> set[str]:
    with sqlite3.connect(f"file:{journal}?mode=ro", uri=True) as db:
        return {f"{p} {t}" for p, t in db.execute("SELECT path, turn FROM responses")}


def reference(tmp_path: Path, hold: str, children: int) -> dict:
    """The same tree run without a crash (what a resumed run must end with)."""
    work = tmp_path / "reference"
    work.mkdir()
    (work / f"{hold}.release").write_text("go")
    return finished(cli(["run", str(TREE), "go"], work, hold, children))


def crash_and_resume(tmp_path: Path, hold: str, children: int, *, settle=None):
    """Run until ``hold`` is reached, SIGKILL, resume; the resumed result and what happened."""
    work = tmp_path / "crashed"
    work.mkdir()
    first = cli(["run", str(TREE), "go"], work, hold, children)
    wait_for(work / f"{hold}.held", first)
    if settle is not None:
        settle(work)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert first.returncode == -signal.SIGKILL
    [journal] = (work / "runs").glob("*.db")
    recorded = recorded_turns(journal)
    asked_before = len(lines(work / "asked.log"))
    (work / f"{hold}.release").write_text("go")
    result = finished(cli(["resume", journal.stem[:10]], work, hold, children))
    asked_after = lines(work / "asked.log")[asked_before:]
    return result, work, journal, recorded, asked_after


def assert_recovered(tmp_path, hold, children, result, work, journal, recorded, asked_after):
    expected = reference(tmp_path, hold, children)
    assert result["status"] == "completed"
    effects = Counter(lines(work / "effects.log"))
    if effects["email boss done"]:
        assert result["output"] == expected["output"]
    else:  # killed inside the email: the model was told its outcome is unknown
        assert result["output"] == "The email may have gone out; not sending it again."
    # no turn the journal had recorded was asked of the model again
    assert not recorded & {line for line in asked_after if not line.endswith("summary")}
    assert effects["email boss"] == 1  # the non-idempotent call never ran twice
    assert effects["email boss done"] <= 1
    total = result["usage"]["input_tokens"] + result["usage"]["output_tokens"]
    assert total <= BUDGET  # the budget held across both processes
    # replayed once more in this process: every transcript valid, nothing asked, nothing run
    replay = trio.run(lambda: resume(journal))
    assert replay.status is RunStatus.COMPLETED and replay.output == result["output"]

    def walk(r):
        yield r
        for c in r.children:
            yield from walk(c)

    assert all(transcript_problem(r.messages) is None for r in walk(replay))
    assert len(list(walk(replay))) == children + 1  # the whole tree, every child


@pytest.fixture(autouse=True)
def _module_env(monkeypatch, tmp_path):
    # the in-process replay loads the tree file too: its logs go to a scratch folder
    monkeypatch.setenv("CRASH_DIR", str(tmp_path))


def test_killed_after_children_finished_resumes_without_running_them_again(tmp_path):
    def both_others_done(work: Path) -> None:  # wait (on the journal) for a and c to answer
        journal = next((work / "runs").glob("*.db"))
        deadline = time.monotonic() + 60  # bounded: a run that never gets there fails here
        while not {"lead/worker#1 2", "lead/worker#3 2"} <= recorded_turns(journal):
            assert time.monotonic() < deadline, "workers a and c never answered"
            time.sleep(0.01)

    outcome = crash_and_resume(tmp_path, "fetch:b", 3, settle=both_others_done)
    work = outcome[1]
    assert_recovered(tmp_path, "fetch:b", 3, *outcome)
    effects = Counter(lines(work / "effects.log"))
    assert (effects["fetch a"], effects["fetch b"], effects["fetch c"]) == (1, 2, 1)


def test_killed_inside_a_non_idempotent_call_it_is_not_run_again_and_the_model_is_told(tmp_path):
    outcome = crash_and_resume(tmp_path, "email", 2)
    result, work, *_ = outcome
    assert "not sending it again" in result["output"]
    effects = Counter(lines(work / "effects.log"))
    assert (effects["email boss"], effects["email boss done"]) == (1, 0)
    expected = reference(tmp_path, "email", 2)
    assert expected["output"].startswith("All done")  # uninterrupted, the email went out
    # everything else as an uninterrupted run: no recorded turn asked again, a whole tree
    _, _, journal, recorded, asked_after = outcome
    assert not recorded & set(asked_after)
    replay = trio.run(lambda: resume(journal))
    assert len(replay.children) == 2 and all(
        transcript_problem(c.messages) is None for c in replay.children
    )


def test_killed_while_children_run_in_parallel(tmp_path):
    outcome = crash_and_resume(tmp_path, "call:1", 4)
    assert_recovered(tmp_path, "call:1", 4, *outcome)


def test_killed_during_compaction(tmp_path):
    outcome = crash_and_resume(tmp_path, "summary", 2)
    assert_recovered(tmp_path, "summary", 2, *outcome)
    asked_after = outcome[4]
    assert asked_after[0] == "lead summary"  # the summary in flight is asked again, then on


def test_a_second_resume_of_a_journal_in_use_is_refused(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    first = cli(["run", str(TREE), "go"], work, "email", 1)
    wait_for(work / "email.held", first)
    [journal] = (work / "runs").glob("*.db")
    second = cli(["resume", str(journal)], work, "email", 1)
    _, err = second.communicate(timeout=60)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert second.returncode == 2
    assert "in use" in err and len(err.strip().splitlines()) == 1


def test_a_failed_journal_write_ends_the_run_and_what_was_recorded_can_be_resumed(
    tmp_path, monkeypatch
):
    """A real write failure: the process may write no file past 64 KiB (RLIMIT_FSIZE), and a
    tool result of 100,000 characters (the default cap) must go into the journal."""
    script = tmp_path / "big.py"
    script.write_text(
        "import resource, signal, sys\n"
        "from orchestrator import Agent, run_sync, tool\n"
        "from orchestrator.models import ScriptedModel, text, tool_call\n"
        "@tool\n"
        "def big() -> str:\n"
        "    '''A large result.'''\n"
        "    with open('ran.log', 'a') as f:\n"
        "        f.write('ran\\n')\n"
        "    return 'x' * 300_000\n"
        "agent = Agent('a', 'x', tools=[big], model=ScriptedModel([[tool_call('big', {}, id='b1')],"
        " text('done')]))\n"
        "if __name__ == '__main__':\n"
        "    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))\n"
        "    r = run_sync(agent, 'go', journal=sys.argv[1])\n"
        "    print(r.status.value, '|', r.error)\n"
    )
    path = tmp_path / "big.db"
    out = subprocess.run(
        [sys.executable, str(script), str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    status, _, error = out.stdout.strip().partition(" | ")
    assert status == "error", out
    assert "journal" in error
    # without the limit, the run goes on from what was recorded: the call runs if its start
    # could not be recorded, and is not run again (its outcome unknown) if only its result
    # could not be; either way it ran once in all
    monkeypatch.chdir(tmp_path)  # ran.log, where the first process wrote it
    sys.path.insert(0, str(tmp_path))
    try:
        import big  # type: ignore[import-not-found]

        result = trio.run(lambda: resume(path, agent=big.agent))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("big", None)
    assert result.status is RunStatus.COMPLETED and result.output == "done"
    assert lines(tmp_path / "ran.log") == ["ran"]


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(children=st.integers(1, 4), data=st.data())
def test_any_kill_point_resumes_to_the_uninterrupted_result(tmp_path_factory, children, data):
    kill_at = data.draw(st.integers(1, children + 1), label="kill at tool call")  # +1: email
    tmp = tmp_path_factory.mktemp("prop")
    outcome = crash_and_resume(tmp, f"call:{kill_at}", children)
    assert_recovered(tmp, f"call:{kill_at}", children, *outcome)
