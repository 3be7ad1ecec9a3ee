"""``orchestrator run FILE --dask ...``: a tree from a file nobody installed on the workers.

The command runs in this process (:mod:`support.cli`; its Dask clusters are processes of their
own), but for the run that is killed mid-flight, which needs a process to kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from support.cli import Cli

TREE = textwrap.dedent(
    '''
    import multiprocessing

    from orchestrator import Agent, tool
    from orchestrator.models import FunctionModel, text, tool_call


    @tool
    def where(label: str) -> str:
        """Say where this runs."""
        return f"{label} ran in {'a worker' if multiprocessing.parent_process() else 'the CLI'}"


    def answer(request):
        if request.agent.name == "lead":
            if len(request.messages) == 1:
                return [
                    tool_call("spawn_subagent", {"agent": "helper", "task": name})
                    for name in ("one", "two")
                ]
            results = request.messages[-1].content
            return text("; ".join(b.content for b in results))
        if len(request.messages) == 1:
            return tool_call("where", {"label": request.messages[0].content[0].text})
        return text(request.messages[-1].content[0].content)


    helper = Agent("helper", "Help.", description="helps", tools=[where])
    agent = Agent("lead", "Lead.", model=FunctionModel(answer), subagents=[helper], tools=[where])
    '''
)


def inherited() -> Mapping[str, str]:
    """The environment as it is: what a subprocess of the test's would have inherited."""
    return os.environ


@pytest.fixture
def orchestrator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``orchestrator(*args)``: the command in this process, in ``tmp_path``, in the test's
    own environment."""
    return Cli(monkeypatch, tmp_path, inherited)


# slow by hand: the cluster's worker processes start inside orchestrator.dask, through
# multiprocessing, where tests/conftest.py neither reads nor hears them (no audit event)
@pytest.mark.slow
def test_a_tree_from_a_file_runs_its_children_on_a_local_cluster(orchestrator: Cli, tmp_path: Path):
    (tmp_path / "mytree.py").write_text(TREE)
    runs = tmp_path / "runs"
    done = orchestrator(
        "run",
        "mytree.py",
        "go",
        "--dask",
        "local:2",
        "--json",
        "--runs-dir",
        str(runs),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed"
    assert result["output"] == "one ran in a worker; two ran in a worker"
    assert result["agents"] == 3
    # the workers' spans are in the run's trace file, under the CLI's spawn spans
    [trace] = runs.glob("*.jsonl")
    spans = [
        s
        for line in trace.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    ids = {s["spanId"]: s for s in spans}
    helpers = [s for s in spans if s["name"] == "invoke_agent helper"]
    assert len(helpers) == 2
    for s in helpers:
        assert ids[s["parentSpanId"]]["name"] == "execute_tool spawn_subagent"
    assert len({s["traceId"] for s in spans}) == 1


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("local:0", "local:N needs a number of worker processes >= 1"),
        ("127.0.0.1:8786", "give a scheduler address with its scheme"),
        ("ftp://host:1", "unknown scheme 'ftp'"),
    ],
)
def test_bad_dask_values_exit_2_with_one_line(
    orchestrator: Cli, tmp_path: Path, value: str, says: str
):
    (tmp_path / "mytree.py").write_text(TREE)
    done = orchestrator(
        "run",
        "mytree.py",
        "go",
        "--dask",
        value,
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]


CRASH_TREE = textwrap.dedent(
    '''
    import os
    from pathlib import Path

    import trio

    from orchestrator import Agent, tool
    from orchestrator.models import FunctionModel, text, tool_call

    MARK = Path(os.environ["DASK_CRASH_MARK"])


    @tool
    async def slow() -> str:
        """Mark the start, then take a long time."""
        with MARK.open("a") as f:
            f.write("started\\n")
        await trio.sleep(60)
        return "finished"


    def answer(request):
        if request.agent.name == "lead":
            if len(request.messages) == 1:
                return tool_call("spawn_subagent", {"agent": "helper", "task": "slowly"})
            return text("lead saw: " + request.messages[-1].content[0].content)
        if len(request.messages) == 1:
            return tool_call("slow", {})
        return text("helper done")


    helper = Agent("helper", "Help.", description="helps", tools=[slow])
    agent = Agent("lead", "Lead.", model=FunctionModel(answer), subagents=[helper])
    '''
)


def test_a_remote_child_in_flight_at_a_crash_is_not_run_again_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "crash.py").write_text(CRASH_TREE)
    mark = tmp_path / "started.log"
    env = {**os.environ, "DASK_CRASH_MARK": str(mark)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    runs = tmp_path / "runs"
    # the run that crashes is a process of its own, killed with its cluster
    command = [sys.executable, "-m", "orchestrator.cli"]
    proc = subprocess.Popen(
        [*command, "run", "crash.py", "go", "--dask", "local:1", "--runs-dir", str(runs)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its cluster's processes too, to kill them all
    )
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    [journal] = runs.glob("*.db")
    resume = Cli(monkeypatch, tmp_path, lambda: env)  # the resumed run in this process
    done = resume("resume", journal.stem, "--dask", "local:1", "--json", "--runs-dir", str(runs))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed"
    assert "it is not run again, and its outcome is unknown" in result["output"]
    assert mark.read_text() == "started\n"  # once: never again on a worker


@pytest.mark.slow  # a local cluster, started inside orchestrator.dask (as above)
def test_the_research_tree_runs_its_researchers_on_a_local_cluster(orchestrator: Cli):
    """The main job: its corpus tools pickle as where the corpus is, and each worker opens its
    own index; the answer is the one the in-process run gives."""
    research = Path(__file__).parents[2] / "agents" / "research.py"
    prompt = "How do lambda expressions work?"
    here = orchestrator("run", str(research), prompt, "--json", "--runs-dir", "a")
    there = orchestrator(
        "run", str(research), prompt, "--json", "--runs-dir", "b", "--dask", "local:2"
    )
    assert here.returncode == 0 and there.returncode == 0, there.stderr
    local, remote = json.loads(here.stdout), json.loads(there.stdout)
    assert remote["status"] == "completed"
    assert remote["output"] == local["output"] and "[topic:lambda]" in remote["output"]
    assert [c["output"] for c in remote["tree"]["children"]] == [
        c["output"] for c in local["tree"]["children"]
    ]


BREAKS = textwrap.dedent(
    """
    import os

    from mytree import agent, helper

    from orchestrator.models import FunctionModel

    def broken(request):
        raise RuntimeError("the helper's model broke on purpose")

    if os.environ.get("HELPER_BREAKS"):
        agent = agent.replace(subagents=[helper.replace(model=FunctionModel(broken))])
    """
)


CLI = (sys.executable, "-m", "orchestrator.cli")


@pytest.mark.parametrize("breaks", [False, True])
def test_a_dask_run_keeps_dasks_own_logs_off_stderr_and_a_failure_still_says_why(
    tmp_path: Path, breaks: bool
):
    (tmp_path / "mytree.py").write_text(TREE)
    (tmp_path / "tree.py").write_text(BREAKS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if breaks:
        env["HELPER_BREAKS"] = "1"
    with socket.socket() as held:  # Dask's default HTTP port taken, as by another cluster
        with contextlib.suppress(OSError):  # already taken by someone else: as good
            held.bind(("127.0.0.1", 8787))
            held.listen()
        done = subprocess.run(
            [
                *CLI,
                "run",
                "tree.py",
                "go",
                "--dask",
                "local:2",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    # nothing of distributed's own: no logged traceback, no port warning
    assert "Traceback" not in done.stderr
    assert "distributed" not in done.stderr
    assert "Warning" not in done.stderr
    if breaks:  # the helpers' failure, from the workers, is still on stderr, with why
        assert "finish lead/helper#1: error" in done.stderr
        assert "the helper's model broke on purpose" in done.stderr
    else:
        assert done.stdout.strip() == "one ran in a worker; two ran in a worker"
