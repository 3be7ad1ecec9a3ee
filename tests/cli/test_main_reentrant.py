"""``main(argv)`` is re-entrant: runs one after another in one process each trace to a provider
of their own, and leave the process as they found it (signal handlers, the interval timer,
the standard streams, ``logging.lastResort``, the environment, the global tracer provider,
the tree files they loaded), whichever way they end."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from opentelemetry import trace
from opentelemetry.util._once import Once
from support.cli import Cli, cli_env, standard_streams

from orchestrator.cli.main import main
from orchestrator.core.treeref import load_tree_file
from orchestrator.testing import SpanRecorder
from orchestrator.tracing.tracefiles import load_trace

TREES = '''
import json
import os
import pathlib
import signal

from orchestrator import Agent, tool
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call

HERE = pathlib.Path(__file__).parent


@tool
def look() -> str:
    """Note what the process looks like while the run goes on."""
    handler = signal.getsignal(signal.SIGINT)
    seen = {
        "sigint": getattr(handler, "__qualname__", repr(handler)),
        "timer": signal.getitimer(signal.ITIMER_REAL)[0],
        "corpus": os.environ.get("ORCHESTRATOR_CORPUS"),
    }
    (HERE / "seen.json").write_text(json.dumps(seen))
    return "looked"


agent = Agent(
    "solo",
    "Look around, then answer.",
    model=ScriptedModel([tool_call("look", {}), text("The answer is 42.")]),
    tools=[look],
)
worker = Agent("worker", "Report.", description="Reports.")
team = Agent(
    "lead",
    "Spawn two workers.",
    model=ScriptedModel(
        {
            "lead": [
                [tool_call("spawn_subagent", {"agent": "worker", "task": f"t{i}"}) for i in (1, 2)],
                text("The team reported."),
            ],
            "worker": [text("reported")],
        }
    ),
    subagents=[worker],
)
oddball = Agent(
    "oddball", "Stop oddly.", model=ScriptedModel([response(text("hm"), stop_reason="mystery")])
)
broken = Agent("boss", "Lead.", model=ScriptedModel([text("x")]), subagents=["nobody"])
looker = Agent("looker", "Look.", model=FunctionModel(lambda r: tool_call("look", {})), tools=[look])
'''


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "trees.py").write_text(TREES)
    return tmp_path


@pytest.fixture
def global_recorder() -> Iterator[SpanRecorder]:
    """A program's own global tracer provider, recording every span that reaches it; the
    process's global provider as it was afterwards (OpenTelemetry sets it once per process)."""
    saved, saved_once = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    recorder = SpanRecorder()
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(recorder.tracer_provider)
    try:
        yield recorder
    finally:
        recorder.close()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved, saved_once


def test_two_runs_in_one_process_each_write_their_own_trace_through_their_own_provider(
    cli: Cli, work: Path, global_recorder: SpanRecorder
) -> None:
    global_provider = trace.get_tracer_provider()
    runs = []
    for target, prompt, root in (("trees.py", "go", "solo"), ("trees.py:team", "Rest", "lead")):
        proc = cli("run", target, prompt, "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        runs.append((doc["run_id"], work / doc["trace"], root))
    assert runs[0][1] != runs[1][1]
    trace_ids = set()
    for run_id, path, root in runs:
        spans = load_trace(path)
        assert {s.attributes.get("gen_ai.conversation.id") for s in spans} == {run_id}
        (only_root,) = [s for s in spans if s.parent_span_id is None]
        assert only_root.name == f"invoke_agent {root}"
        trace_ids |= {s.trace_id for s in spans}
    assert len(trace_ids) == 2  # one trace per run, none shared
    assert {s.name for s in load_trace(runs[1][1]) if s.name.startswith("invoke_agent")} == {
        "invoke_agent lead",
        "invoke_agent worker",
    }
    # the program's global provider neither replaced nor fed: the CLI's spans are its own
    assert trace.get_tracer_provider() is global_provider
    assert global_recorder.spans == []


def test_without_a_global_provider_runs_set_none(cli: Cli, work: Path) -> None:
    before = trace.get_tracer_provider()
    for _ in range(2):
        assert cli("run", "trees.py:team", "Rest", "--quiet").returncode == 0
    assert trace.get_tracer_provider() is before
    assert len(list((work / "runs").glob("*.jsonl"))) == 2


def _handler(signum: int, frame: FrameType | None) -> None:  # never called: the timer is long
    raise AssertionError(f"signal {signum} reached the test")


@pytest.fixture
def process_state() -> Iterator[None]:
    """Handlers of the test's own for SIGINT, SIGTERM and SIGALRM, and a long interval timer
    going, as a program calling main() might have; the process's own afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    for signum in saved:
        signal.signal(signum, _handler)
    signal.setitimer(signal.ITIMER_REAL, 600)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in saved.items():
            signal.signal(signum, handler)


# (the command, its exit code, whether the run's tool looks around while it runs)
OUTCOMES = {
    "completed": (["run", "trees.py", "go", "--timeout", "60"], 0, True),
    "error": (["run", "trees.py:oddball", "go"], 1, False),  # the run ended with an error
    "max-turns": (["run", "trees.py:looker", "go", "--max-turns", "2", "--timeout", "30"], 3, True),
    "raised": (["run", "trees.py:broken", "go"], 2, False),  # inside the run's signal guard
    "refused": (["run", "trees.py", "go", "--max-turns", "0"], 2, False),  # before the run
    "usage": (["run", "--approve", "maybe", "trees.py", "go"], 2, False),  # argparse's
    "dry-run": (["run", "trees.py", "go", "--dry-run"], 0, False),
    "trace": (["trace", "list"], 0, False),
    "version": (["--version"], 0, False),
}


@pytest.mark.parametrize(("args", "code", "looks"), OUTCOMES.values(), ids=OUTCOMES.keys())
@pytest.mark.usefixtures("process_state")
def test_main_leaves_the_process_as_it_found_it(
    work: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int, looks: bool
) -> None:
    monkeypatch.chdir(work)
    wanted = cli_env()
    for name in os.environ.keys() - wanted.keys():
        monkeypatch.delenv(name)
    for name, value in wanted.items():
        monkeypatch.setenv(name, value)
    environ = dict(os.environ)
    last_resort = logging.lastResort
    provider = trace.get_tracer_provider()
    with standard_streams() as (out, err):
        stdin = sys.stdin
        assert main(args) == code, err.getvalue()
        assert sys.stdin is stdin and sys.stdout is out and sys.stderr is err
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
        assert signal.getsignal(signum) is _handler, signal.Signals(signum).name
    assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 600  # still going
    assert logging.lastResort is last_resort
    assert dict(os.environ) == environ
    assert trace.get_tracer_provider() is provider
    assert (work / "seen.json").exists() == looks
    if looks:  # the run's tool saw the CLI's guard, not the program's handlers
        seen = json.loads((work / "seen.json").read_text())
        assert seen["sigint"] == "_SignalGuard._on_signal"
        # the run's own watchdog (its deadline and a second), the program's timer paused
        assert 0 < seen["timer"] <= float(args[args.index("--timeout") + 1]) + 1


def test_a_run_with_a_corpus_sets_it_for_the_run_only(
    cli: Cli, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = work / "docs"
    corpus.mkdir()
    monkeypatch.delenv("ORCHESTRATOR_CORPUS", raising=False)
    proc = cli("run", "trees.py", "go", "--corpus", str(corpus))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((work / "seen.json").read_text())
    assert seen["corpus"] == str(corpus.resolve())  # the run's tools saw it
    assert "ORCHESTRATOR_CORPUS" not in os.environ
    monkeypatch.setenv("ORCHESTRATOR_CORPUS", str(work))  # a variable set on purpose: kept
    assert cli("run", "trees.py", "go", "--corpus", str(corpus)).returncode == 0
    assert json.loads((work / "seen.json").read_text())["corpus"] == str(corpus.resolve())
    assert os.environ["ORCHESTRATOR_CORPUS"] == str(work)


def test_tree_files_of_one_name_in_two_folders_stay_apart_and_an_edit_is_read(
    cli: Cli, tmp_path: Path
) -> None:
    tree = (
        "from orchestrator import Agent\n"
        "from orchestrator.models import ScriptedModel, text\n"
        "agent = Agent('solo', 'Answer.', model=ScriptedModel([text({answer!r})]))\n"
    )
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "agents.py").write_text(tree.format(answer=f"from {folder}"))
    for folder in ("a", "b", "a"):
        proc = cli("run", "agents.py", "go", "--quiet", cwd=tmp_path / folder)
        assert proc.stdout == f"from {folder}\n", proc.stderr
    # (of another size: an edit within the second of the last load that keeps the size is
    # Python's own blind spot, the bytecode cache's)
    (tmp_path / "a" / "agents.py").write_text(tree.format(answer="edited since"))
    assert cli("run", "agents.py", "go", "--quiet", cwd=tmp_path / "a").stdout == "edited since\n"


def test_a_warning_the_tree_logs_reaches_the_commands_stderr_as_in_a_process_of_its_own(
    cli: Cli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # pytest's log capture holds the root logger's handlers while a test runs: in process, a
    # record must still reach the CLI's handler of last resort, as a process's would
    (tmp_path / "loud.py").write_text(
        "import logging\n"
        "from orchestrator import Agent, tool\n"
        "from orchestrator.models import ScriptedModel, text, tool_call\n"
        "logging.getLogger('loud').warning('warned at import')\n"
        "@tool\n"
        "def shout() -> str:\n"
        '    """Warn."""\n'
        "    logging.getLogger('loud').warning('warned in the run')\n"
        "    return 'shouted'\n"
        "agent = Agent('loud', 'Shout.', tools=[shout],\n"
        "    model=ScriptedModel([tool_call('shout', {}), text('done')]))\n"
    )
    handlers = logging.getLogger().handlers
    proc = cli("run", "loud.py", "go", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["warned at import", "warned in the run"]
    assert json.loads(proc.stdout)["output"] == "done"
    assert logging.getLogger().handlers == handlers  # pytest's again
    assert caplog.records == []  # what the command logged went where a process's goes


def test_the_tree_files_a_command_loaded_are_unloaded_when_it_returns(cli: Cli, work: Path) -> None:
    # a program calling main() again and again must not keep every tree it ran alive (nor
    # what a tree holds: here a list that would outlive the run)
    (work / "heavy.py").write_text(
        "from orchestrator import Agent\n"
        "from orchestrator.models import ScriptedModel, text\n"
        "BALLAST = [bytes(1000) for _ in range(1000)]\n"
        "agent = Agent('solo', 'Answer.', model=ScriptedModel([text('done')]))\n"
    )

    def trees() -> dict[str, object]:
        return {n: m for n, m in sys.modules.items() if n.startswith("_orchestrator_user_")}

    before = trees()
    for args in (
        ["run", "heavy.py", "go", "--quiet"],
        ["run", "trees.py:team", "Rest", "--quiet"],
        ["run", "trees.py:broken", "go"],  # loaded, then refused
        ["run", "heavy.py", "go", "--dry-run"],
    ):
        proc = cli(*args)
        assert proc.returncode in (0, 2), proc.stderr
        assert trees() == before, args
    # a tree file the program loaded itself is left as it was, even when main() loads it again
    load_tree_file(str(work / "heavy.py"))
    ((name, module),) = [(n, m) for n, m in trees().items() if n not in before]
    try:
        assert cli("run", "heavy.py", "go", "--quiet").stdout == "done\n"
        assert sys.modules[name] is module
    finally:
        sys.modules.pop(name, None)
