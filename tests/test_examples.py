"""Every example in examples/ runs: as a script, and through the ``orchestrator run`` command.

Each runs with the test's ``tmp_path`` as the working folder and no API key, in this process:
a script as ``python NAME`` runs it (``runpy``, ``__name__ == "__main__"``, its own ``sys.argv``,
standard streams of its own), the command as :mod:`support.cli` runs it. The examples hold no
state beyond their own module (no signal handler, global tracer provider or event loop left
behind), so nothing leaks into the next test; the one whose script starts processes of its own
(``dask_fanout.py``: a LocalCluster) runs as a real script in a subprocess. The approval example
reads its answer from stdin, so the tests feed it one that is not a terminal, as a pipe is not.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import Cli, CliRun, standard_streams, unconfigured_logging

EXAMPLES = Path(__file__).parents[1] / "examples"

# example file -> (stdin, a fragment its stdout must hold, the prompt for the CLI)
EXPECTED: dict[str, tuple[str, str, str]] = {
    "calculator.py": ("", "5 + 10 = 15", "What is 5 + 10?"),
    "research_team.py": (
        "",
        "Summary: trio runs tasks in nurseries",
        "How does trio keep concurrent tasks in order?",
    ),
    "fanout.py": ("", "The sum of the squares of 1..20 is 2870.", "Sum the squares of 1..20"),
    "approval.py": ("y\n", "Done: deleted draft-1", "Delete draft-1"),
    # as a script its children run on a LocalCluster of two processes; through the CLI, here
    "dask_fanout.py": ("", "8 workers counted 48456 primes in all.", "Count the primes"),
    "durable_run.py": ("", "Report sent: 3 sections (report sent).", "Write the report"),
    "typed_report.py": (
        "",
        "a cancel scope cancels everything inside it, deadlines included.",
        "How does trio keep concurrent tasks in order?",
    ),
}


def env() -> dict[str, str]:
    out = {
        k: v
        for k, v in os.environ.items()
        if k != "ANTHROPIC_API_KEY" and not k.startswith("OTEL_")
    }
    out["PYTHONIOENCODING"] = "utf-8"
    return out


def run(args: list[str], cwd: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


# examples that need more than pip, run by the tests of their own marker
NEEDS_NODE = {"mcp_files.py": "tests/toolsets/test_mcp_npm.py (marker npm)"}
# asyncio programs (their tools are asyncio's, so not for the trio CLI), run by their own tests
ASYNCIO = {
    "asyncio_script.py": "tests/test_aio.py",
    "fastapi_app.py": "tests/test_aio_fastapi.py (under uvicorn)",
    "fastapi_approvals.py": "tests/test_aio_fastapi_approvals.py (under uvicorn, restarted)",
}


def test_every_example_has_an_expected_output() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(
        [*EXPECTED, *NEEDS_NODE, *ASYNCIO]
    )


# examples whose script starts processes of its own: run as real scripts, in a subprocess
PROCESSES = {"dask_fanout.py": "its children run on a LocalCluster of two worker processes"}


def is_local(module: object, *folders: Path) -> bool:
    where = getattr(module, "__file__", None)
    return bool(where) and any(Path(where).resolve().is_relative_to(f) for f in folders)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], CliRun]:
    """``script(name, stdin)``: ``python examples/NAME`` in this process, answered like
    :func:`run`: in ``tmp_path``, with the environment :func:`env` builds and ``sys.argv`` of
    the script, ``stdin`` as its standard input; the working folder, the environment,
    ``sys.argv``, the standard streams and ``sys.modules`` are as they were afterwards."""

    def run_script(name: str, stdin: str) -> CliRun:
        path = str(EXAMPLES / name)
        wanted = env()
        modules = dict(sys.modules)
        with monkeypatch.context() as patch:
            patch.chdir(tmp_path)
            for variable in [v for v in os.environ if v not in wanted]:
                patch.delenv(variable)
            for variable, value in wanted.items():
                patch.setenv(variable, value)
            patch.setattr(sys, "argv", [path])
            try:
                with standard_streams(stdin) as (out, err), unconfigured_logging():
                    try:
                        runpy.run_path(path, run_name="__main__")
                        code = 0
                    except SystemExit as exit:  # what the interpreter would exit with
                        code = (
                            0
                            if exit.code is None
                            else exit.code
                            if isinstance(exit.code, int)
                            else 1
                        )
            finally:
                for module_name, module in modules.items():
                    if sys.modules.get(module_name) is not module:
                        sys.modules[module_name] = module
                for module_name in sys.modules.keys() - modules.keys():
                    if is_local(sys.modules[module_name], EXAMPLES, tmp_path):
                        del sys.modules[module_name]
        return CliRun([path], code, out.getvalue(), err.getvalue())

    return run_script


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The ``orchestrator`` command in this process, in ``tmp_path``, in :func:`env`'s
    environment."""
    return Cli(monkeypatch, tmp_path, env)


@pytest.mark.parametrize("name", sorted(EXPECTED.keys() - PROCESSES.keys()))
def test_the_example_runs_as_a_script(name: str, script: Callable[[str, str], CliRun]) -> None:
    stdin, fragment, _ = EXPECTED[name]
    proc = script(name, stdin)
    assert proc.returncode == 0, proc.stderr
    assert fragment in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_the_example_runs_as_a_real_script(name: str, tmp_path: Path) -> None:
    stdin, fragment, _ = EXPECTED[name]
    proc = run([str(EXAMPLES / name)], tmp_path, stdin)
    assert proc.returncode == 0, proc.stderr
    assert fragment in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_example_runs_through_the_cli(name: str, cli: Cli, tmp_path: Path) -> None:
    stdin, fragment, prompt = EXPECTED[name]
    proc = cli("run", str(EXAMPLES / name), prompt, input=stdin)
    assert proc.returncode == 0, proc.stderr
    assert fragment in proc.stdout, proc.stdout
    assert "status=completed " in proc.stderr
    assert list((tmp_path / "runs").glob("*.jsonl"))


def test_the_fanout_example_runs_its_twenty_workers_in_parallel(
    script: Callable[[str, str], CliRun],
) -> None:
    proc = script("fanout.py", "")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("20 workers (completed) in ")
    # twenty 0.2 s tool calls one after another take 4 s at the least, on any machine; in
    # parallel, one wave (the rest of the room is for a loaded machine)
    assert float(last.rsplit(" ", 1)[-1].rstrip("s")) < 4.0


def test_the_approval_example_runs_the_tool_when_the_user_answers_yes(
    script: Callable[[str, str], CliRun],
) -> None:
    proc = script("approval.py", "y\n")
    assert proc.returncode == 0, proc.stderr
    assert "wants to run delete_draft({'name': 'draft-1'}). Allow? [y/N]" in proc.stderr
    assert "[delete_draft] deleted draft-1" in proc.stderr  # the tool itself ran
    assert proc.stdout == "Done: deleted draft-1; drafts left: draft-2.\n"


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["no", "end-of-input"])
def test_the_approval_example_declines_the_tool_unless_the_user_answers_yes(
    script: Callable[[str, str], CliRun], answer: str
) -> None:
    proc = script("approval.py", answer)
    assert proc.returncode == 0, proc.stderr
    assert "Allow? [y/N]" in proc.stderr
    assert "[delete_draft]" not in proc.stderr  # the tool never ran
    assert proc.stdout.startswith("I did not delete draft-1: ")
    assert "declined by the approver" in proc.stdout


def test_the_durable_example_resumes_without_doing_anything_twice(
    script: Callable[[str, str], CliRun],
) -> None:
    proc = script("durable_run.py", "")
    assert proc.returncode == 0, proc.stderr
    assert "stopped: cancelled after 2 sections" in proc.stdout
    # where exactly the cancellation lands is the scheduler's: section 2's call may be cut in
    # flight (idempotent, so it runs again), or turn 3 may have begun. What holds either way:
    # the recorded turns were replayed, section 1 was not written again, the report went once
    line = next(x for x in proc.stdout.splitlines() if x.startswith("on resume:"))
    calls = int(line.split()[2])
    written = line.split("written [")[1].split("]")[0]
    assert calls <= 4, line  # at most turns 2-5: turn 1 at least came from the journal
    assert "1" not in written.split(", "), line
    assert line.endswith("report sent 1 time(s)"), line


def test_the_typed_report_example_reports_each_researchers_checked_findings(
    script: Callable[[str, str], CliRun],
) -> None:
    proc = script("typed_report.py", "")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "How does trio keep concurrent tasks in order? (completed)"
    assert "## What does a nursery do?" in lines and "## What does a cancel scope do?" in lines
    assert (
        "- Nurseries: a nursery owns its child tasks, and none outlives it. [nurseries.md]" in lines
    )
    assert "Sources: nurseries.md, cancel-scopes.md" in lines
    assert lines[-2:] == [
        "  lead/researcher#1: completed, 2 claim(s)",
        "  lead/researcher#2: completed, 2 claim(s)",
    ]
