"""The ``orchestrator`` command end to end, each test with its own working folder.

Every test runs the command with the test's ``tmp_path`` as the working directory (so ``runs/``
lands there), without ``ANTHROPIC_API_KEY`` and without any ``OTEL_*`` variable (so traces are
written as OTLP/JSON lines under ``runs/``): in this process (the ``cli`` fixture,
:mod:`support.cli`) where output, files and exit codes are the point, as
``python -m orchestrator.cli`` where signals, a terminal, file descriptors or the entry point
itself are. The agent trees are tiny files written into ``tmp_path``; none of them names an
anthropic model except the offline-fallback ones, so most runs never import the anthropic SDK.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest
from support.cli import Cli, CliRun, cli_env

from orchestrator import Agent
from orchestrator.cli.main import EXIT_CODES
from orchestrator.core.result import RunStatus
from orchestrator.tracing.tracefiles import SpanRecord, load_trace

AGENTS = textwrap.dedent(
    '''
    """Tiny agent trees, one per run status, for the CLI tests."""

    import pathlib

    import trio

    from orchestrator import Agent, tool
    from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call

    HERE = pathlib.Path(__file__).parent


    @tool
    def echo(word: str) -> str:
        """Echo a word back.

        Args:
            word: The word.
        """
        return word


    @tool
    async def nap(seconds: float) -> str:
        """Sleep for a while (leaves a marker file when it starts).

        Args:
            seconds: How long to sleep.
        """
        (HERE / "napping").write_text("started")
        await trio.sleep(seconds)
        return "rested"


    @tool
    async def stubborn_nap(seconds: float) -> str:
        """Sleep, and refuse to be cancelled (so only a second Ctrl-C can end the process).

        Args:
            seconds: How long to sleep.
        """
        (HERE / "napping").write_text("started")
        with trio.CancelScope(shield=True):
            await trio.sleep(seconds)
        return "rested"


    def turn(request):
        return sum(1 for m in request.messages if m.role == "assistant")


    def must_not_be_called(request):
        (HERE / "model_called").write_text(request.agent.name)
        return text("the model was called")


    agent = Agent(
        "solo",
        "Answer with the echo tool.",
        model=ScriptedModel([tool_call("echo", {"word": "hi"}), text("The answer is 42.")]),
        tools=[echo],
    )
    looper = Agent(
        "looper",
        "Never finish.",
        model=FunctionModel(lambda r: tool_call("echo", {"word": f"w{turn(r)}"})),
        tools=[echo],
    )
    oddball = Agent(
        "oddball", "Stop oddly.", model=ScriptedModel([response(text("hm"), stop_reason="mystery")])
    )
    sleeper = Agent(
        "sleeper",
        "Sleep, then answer.",
        model=ScriptedModel([tool_call("nap", {"seconds": 60}), text("woke up")]),
        tools=[nap],
    )
    stubborn = Agent(
        "stubborn",
        "Sleep through anything.",
        model=ScriptedModel([tool_call("stubborn_nap", {"seconds": 60}), text("woke up")]),
        tools=[stubborn_nap],
    )
    spender = Agent(
        "spender",
        "Spend tokens.",
        model=FunctionModel(lambda r: tool_call("echo", {"word": f"w{turn(r)}"})),
        tools=[echo],
        max_output_tokens=20,
    )
    parrot = Agent(
        "parrot",
        "Repeat yourself.",
        model=FunctionModel(lambda r: tool_call("echo", {"word": "same"})),
        tools=[echo],
    )
    worker = Agent("worker", "Nap, then report.", description="Naps.", tools=[nap])
    def napping_team(seconds: float) -> ScriptedModel:
        """A lead spawning three workers at once, each napping ``seconds``."""
        spawns = [
            tool_call("spawn_subagent", {"agent": "worker", "task": f"nap {i}"}) for i in range(3)
        ]
        return ScriptedModel(
            {
                "lead": [spawns, text("The team is rested.")],
                "worker": [tool_call("nap", {"seconds": seconds}), text("rested")],
            }
        )

    team = Agent("lead", "Spawn three workers.", model=napping_team(0.5), subagents=[worker])
    # the same team whose naps outlast any Ctrl-C: none can finish before it, however loaded
    sleepy_team = team.replace(model=napping_team(600))
    dry = Agent(
        "dry",
        "Never run.",
        model=FunctionModel(must_not_be_called),
        subagents=[worker],
    )
    broken = Agent("boss", "Lead.", model=ScriptedModel([text("x")]), subagents=["nobody"])
    not_an_agent = 17
    '''
)

CLAUDE = textwrap.dedent(
    '''
    from orchestrator import Agent, tool


    @tool
    def shout(word: str) -> str:
        """Shout a word.

        Args:
            word: The word.
        """
        return word.upper() + "!"


    helper = Agent(
        "helper",
        "Shout.",
        description="Shouts words.",
        model="anthropic:claude-sonnet-5-5",
        tools=[shout],
    )
    agent = Agent(
        "boss", "Delegate.", model="anthropic:claude-sonnet-5-5", subagents=[helper]
    )
    '''
)

SUMMARY = re.compile(
    r"status=(?P<status>\w+) agents=(?P<agents>\d+) turns=(?P<turns>\d+) "
    r"tokens=(?P<tokens>[\d,]+) .*cost=\$(?P<cost>[\d.]+) wall=(?P<wall>[\d.]+)s "
    r"trace=(?P<trace>\S+) run=(?P<run>[0-9a-f]+)"
)
JSON_KEYS = {
    "run_id",
    "status",
    "output",
    "error",
    "agents",
    "turns",
    "usage",
    "wall_s",
    "trace",
    "tree",
}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "agents.py").write_text(AGENTS)
    return tmp_path


def one_line_error(proc: CliRun) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("orchestrator: ")
    assert proc.stdout == ""
    return lines[0]


def assert_spans_all_ended(trace: Path) -> list[SpanRecord]:
    """Every exported span has ended and every parent it names is in the file."""
    spans = load_trace(trace)
    assert spans
    ids = {s.span_id for s in spans}
    for s in spans:
        assert 0 < s.start_ns <= s.end_ns, s.name
        assert s.parent_span_id is None or s.parent_span_id in ids, f"{s.name} lost its parent"
    assert len({s.trace_id for s in spans}) == 1
    return spans


# --------------------------------------------------------------------------------------------
# A run: answer, summary, trace.


def test_a_run_prints_the_answer_on_stdout_and_one_summary_line_on_stderr(
    cli: Cli, work: Path
) -> None:
    proc = cli("run", "agents.py", "What is the answer?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The answer is 42.\n"
    summaries = [line for line in proc.stderr.splitlines() if line.startswith("status=")]
    assert len(summaries) == 1
    m = SUMMARY.search(summaries[0])
    assert m, summaries[0]
    assert m["status"] == "completed"
    assert (m["agents"], m["turns"]) == ("1", "2")
    assert int(m["tokens"].replace(",", "")) > 0
    assert float(m["cost"]) == 0.0
    trace = work / m["trace"]
    assert trace.is_file() and trace.parent == work / "runs"
    assert m["run"] in trace.name
    spans = assert_spans_all_ended(trace)
    assert {"invoke_agent solo", "execute_tool echo"} <= {s.name for s in spans}
    assert "offline" not in proc.stderr  # a scripted model is not replaced


def test_python_m_orchestrator_cli_is_the_command(work: Path) -> None:
    # the real entry point (the other tests here call main() in process, but for signals,
    # terminals and file descriptors): the process exits with main()'s code, argparse's too
    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=work,
            env=cli_env(),
            input="",
            capture_output=True,
            text=True,
            timeout=30,
        )

    proc = command("run", "agents.py:looper", "go", "--max-turns", "2")
    assert proc.returncode == EXIT_CODES[RunStatus.MAX_TURNS], proc.stderr
    m = SUMMARY.search(proc.stderr)
    assert m and m["status"] == "max_turns", proc.stderr
    assert (work / m["trace"]).is_file() and "Traceback" not in proc.stderr
    usage = command("run", "agents.py", "go", "--approve", "maybe")
    assert usage.returncode == 2 and "invalid choice: 'maybe'" in usage.stderr
    assert usage.stdout == ""


@pytest.mark.parametrize(
    ("target", "options", "status"),
    [
        ("agents.py", [], RunStatus.COMPLETED),
        ("agents.py:looper", ["--max-turns", "2"], RunStatus.MAX_TURNS),
        ("agents.py:oddball", [], RunStatus.ERROR),
        ("agents.py:sleeper", ["--timeout", "1"], RunStatus.TIMEOUT),
        ("agents.py:spender", ["--budget-tokens", "300"], RunStatus.BUDGET_EXCEEDED),
        ("agents.py:parrot", [], RunStatus.REPEAT_GUARD),
    ],
    ids=lambda v: v.value if isinstance(v, RunStatus) else None,
)
def test_each_status_exits_with_its_documented_code(
    cli: Cli, work: Path, target: str, options: list[str], status: RunStatus
) -> None:
    proc = cli("run", target, "go", *options)
    expected = {
        "completed": 0,
        "error": 1,
        "max_turns": 3,
        "timeout": 4,
        "budget_exceeded": 5,
        "repeat_guard": 6,
    }[status.value]
    assert proc.returncode == expected == EXIT_CODES[status], proc.stderr
    assert f"status={status.value} " in proc.stderr
    assert "Traceback" not in proc.stderr
    if status is not RunStatus.COMPLETED:
        assert f"run ended with {status.value}: " in proc.stderr


def test_the_exit_codes_in_the_readme_match_the_cli() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    documented = dict(re.findall(r"^\| `(\w+)` \|[^|]*\| (\d+) \|$", readme, re.MULTILINE))
    assert {s.value: str(code) for s, code in EXIT_CODES.items()} == documented
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)  # one distinct code per status
    assert 2 not in EXIT_CODES.values()  # 2 is bad usage


def test_json_prints_exactly_one_result_object_and_nothing_on_stderr(cli: Cli, work: Path) -> None:
    proc = cli("run", "agents.py", "go", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    assert set(doc) >= JSON_KEYS
    assert doc["status"] == "completed"
    assert doc["output"] == "The answer is 42."
    assert doc["error"] is None
    assert (doc["agents"], doc["turns"]) == (1, 2)
    assert doc["usage"]["input_tokens"] > 0 and doc["usage"]["cost_usd"] == 0
    assert isinstance(doc["wall_s"], float)
    assert (work / doc["trace"]).is_file()
    assert doc["run_id"] in doc["trace"]
    assert doc["tree"]["agent"] == "solo" and doc["tree"]["children"] == []


def test_json_reports_a_status_that_is_not_completed_with_its_exit_code(
    cli: Cli, work: Path
) -> None:
    proc = cli("run", "agents.py:parrot", "go", "--json")
    assert proc.returncode == 6
    doc = json.loads(proc.stdout)
    assert doc["status"] == "repeat_guard"
    assert "echo" in doc["error"]


# --------------------------------------------------------------------------------------------
# Bad inputs: one line, exit code 2, never a traceback.


def test_a_missing_file_is_a_one_line_error(cli: Cli, work: Path) -> None:
    line = one_line_error(cli("run", "nowhere.py", "go"))
    assert "no such file" in line and "nowhere.py" in line


def test_a_runs_dir_that_cannot_be_created_is_a_one_line_error_before_the_run(
    cli: Cli, work: Path
) -> None:
    (work / "a_file").write_text("not a folder")
    line = one_line_error(
        cli("run", "agents.py", "go", "--runs-dir", str(work / "a_file" / "runs"))
    )
    assert "trace folder" in line and "a_file" in line


def test_a_runs_dir_that_cannot_be_written_is_a_one_line_error_before_the_run(
    cli: Cli, work: Path
) -> None:
    # /proc refuses new files even to root, whose permission bits say yes to everything
    line = one_line_error(cli("run", "agents.py", "go", "--runs-dir", "/proc"))
    assert "cannot write trace files to /proc" in line


def test_an_orchestrator_corpus_that_is_not_a_folder_is_a_one_line_error(
    cli: Cli, work: Path
) -> None:
    proc = cli("run", "agents.py", "go", env={"ORCHESTRATOR_CORPUS": str(work / "missing")})
    line = one_line_error(proc)
    assert "ORCHESTRATOR_CORPUS" in line and "missing" in line


def test_an_empty_corpus_option_is_refused_not_taken_for_the_current_folder(
    cli: Cli, work: Path
) -> None:
    # `--corpus "$DOCS"` with DOCS unset: Path("") is ".", and the whole working folder (a
    # home directory, say) was walked and indexed
    line = one_line_error(cli("run", "agents.py", "go", "--corpus", ""))
    assert "--corpus" in line and "empty" in line


def test_a_file_that_raises_on_import_is_a_one_line_error(cli: Cli, work: Path) -> None:
    (work / "bad.py").write_text("import os\n\nraise ValueError('boom at import')\n")
    line = one_line_error(cli("run", "bad.py", "go"))
    assert "bad.py" in line and "ValueError" in line and "boom at import" in line


def test_a_file_with_a_syntax_error_is_a_one_line_error(cli: Cli, work: Path) -> None:
    (work / "syntax.py").write_text("agent = (\n")
    line = one_line_error(cli("run", "syntax.py", "go"))
    assert "SyntaxError" in line


def test_a_file_using_postponed_annotations_with_a_dataclass_loads(cli: Cli, work: Path) -> None:
    # dataclasses (and pydantic) resolve string annotations through sys.modules
    (work / "dc.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from orchestrator import Agent\n\n"
        "@dataclass\nclass Settings:\n    depth: int = 1\n\n"
        "agent = Agent('a', 'Answer briefly.', model='offline')\n"
    )
    proc = cli("run", "dc.py", "hello", "--quiet")
    assert proc.returncode == 0, proc.stderr


def test_the_agent_name_is_after_the_last_colon_and_a_file_that_exits_says_so(
    cli: Cli,
    work: Path,
) -> None:
    folder = work / "v2:trees"
    folder.mkdir()
    (folder / "tree.py").write_text((work / "agents.py").read_text())
    proc = cli("run", "v2:trees/tree.py:worker", "hello", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert cli("run", "agents.py:", "hello", "--quiet").returncode == 0
    line = one_line_error(cli("run", "agents.py:1bad", "go"))
    assert "'1bad' is not a Python name" in line
    (work / "exits.py").write_text("import sys\nsys.exit(3)\n")
    line = one_line_error(cli("run", "exits.py", "go"))
    assert "exits.py" in line and "sys.exit(3)" in line


def test_a_missing_name_is_a_one_line_error_listing_the_agents_defined(
    cli: Cli, work: Path
) -> None:
    line = one_line_error(cli("run", "agents.py:nobody_here", "go"))
    assert "'nobody_here'" in line
    for name in ("agent", "looper", "sleeper", "team", "worker"):
        assert name in line
    assert "not_an_agent" not in line


def test_an_object_that_is_not_an_agent_is_a_one_line_error(cli: Cli, work: Path) -> None:
    line = one_line_error(cli("run", "agents.py:not_an_agent", "go"))
    assert "not an Agent" in line and "int" in line


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_invalid_tree_is_a_one_line_error(cli: Cli, work: Path, dry_run: bool) -> None:
    extra = ["--dry-run"] if dry_run else []
    line = one_line_error(cli("run", "agents.py:broken", "go", *extra))
    assert "'nobody'" in line and "'boss'" in line
    assert not (work / "runs").exists() or not list((work / "runs").iterdir())


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--max-turns", "0", "max_turns"),
        ("--timeout", "-1", "timeout"),
        ("--concurrency", "0", "max_concurrency"),
        ("--budget-tokens", "0", "token_budget"),
        ("--max-depth", "-1", "max_depth"),
    ],
)
def test_an_invalid_option_value_is_a_one_line_error(
    cli: Cli, work: Path, option: str, value: str, field: str
) -> None:
    line = one_line_error(cli("run", "agents.py", "go", option, value))
    assert field in line and value in line


# --------------------------------------------------------------------------------------------
# The offline fallback.


def test_without_an_api_key_anthropic_agents_run_offline_and_the_cli_says_so_once(
    cli: Cli,
    tmp_path: Path,
) -> None:
    (tmp_path / "claude.py").write_text(CLAUDE)
    proc = cli("run", "claude.py", "Shout the word hello")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("offline") == 1, proc.stderr
    assert "ANTHROPIC_API_KEY" in proc.stderr
    assert proc.stdout.strip()
    assert "status=completed agents=2 " in proc.stderr  # the subagent ran too, offline
    spans = load_trace(next((tmp_path / "runs").glob("*.jsonl")))
    providers = {
        s.attributes.get("gen_ai.provider.name") for s in spans if s.name.startswith("chat")
    }
    assert providers == {"offline"}


def test_ctrl_c_while_spans_wait_for_a_dead_collector_keeps_the_answer(work: Path) -> None:
    # a collector that accepts connections and never answers holds the exit flush for
    # seconds; a Ctrl-C then used to end the process by the signal with no answer printed
    import socket

    with socket.socket() as collector:
        collector.bind(("127.0.0.1", 0))
        collector.listen(16)  # connections complete in the kernel; nothing ever answers
        endpoint = f"http://127.0.0.1:{collector.getsockname()[1]}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "run", "agents.py:team", "Rest"],
            cwd=work,
            env=cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no answer before the flush"
        answer = proc.stdout.readline()
        assert proc.poll() is None  # still flushing to the collector that never answers
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=30)
    assert answer.strip() and not rest
    assert proc.returncode == EXIT_CODES[RunStatus.CANCELLED], stderr
    assert "trace export interrupted" in stderr and "Traceback" not in stderr
    assert "status=completed" in stderr  # the run itself completed


def test_a_model_given_its_own_api_key_is_not_swapped_for_the_offline_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a key from a secret store: the CLI answered offline and exited 0, tokens=0, in CI
    from orchestrator.cli.run import offline_fallback
    from orchestrator.models import AnthropicModel

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    keyed = Agent("keyed", "k", model=AnthropicModel(api_key="sk-from-a-vault"))
    plain = Agent("plain", "p", model=AnthropicModel(), subagents=[keyed])
    tree, default, swapped = offline_fallback(plain, None)
    assert swapped and default == "offline" and tree.model == "offline"
    (child,) = tree.subagents
    assert isinstance(child, Agent) and isinstance(child.model, AnthropicModel)
    assert not offline_fallback(keyed, "offline")[2]  # nothing to swap: nothing said


# --------------------------------------------------------------------------------------------
# Ctrl-C.


def interrupt_mid_run(
    work: Path, target: str, signals: int, signum: int = signal.SIGINT
) -> tuple[int, str, float]:
    """Start a run, wait until its tool is running, send ``signals`` signals 0.3 s apart.

    Returns (exit code, stderr, seconds from the first SIGINT to the exit).
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", target, "go"],
        cwd=work,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (work / "napping").exists():  # the tool is running: the run is mid-way
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.02)
        started = time.monotonic()
        for i in range(signals):
            if i:
                time.sleep(0.3)
            proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=15)
        return proc.returncode, stderr, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_mid_run_cancels_the_tree_exits_130_and_leaves_a_complete_trace(
    work: Path, signum: int
) -> None:
    # SIGTERM (timeout, docker stop, a CI cancel) is handled like Ctrl-C
    code, stderr, took = interrupt_mid_run(work, "agents.py:sleeper", signals=1, signum=signum)
    assert took < 30  # the 60 s nap was cut, not waited for (a bound load cannot break)
    assert code == 130, stderr
    assert "Traceback" not in stderr
    assert "cancel" in stderr
    assert "run ended with cancelled" in stderr
    m = SUMMARY.search(stderr)
    assert m and m["status"] == "cancelled", stderr
    spans = assert_spans_all_ended(work / m["trace"])
    roots = [s for s in spans if s.parent_span_id is None]
    assert [s.name for s in roots] == ["invoke_agent sleeper"]
    assert roots[0].attributes["orchestrator.outcome"] == "cancelled"
    assert "execute_tool nap" in {s.name for s in spans}


def test_a_second_sigint_exits_at_once_even_when_the_tree_will_not_stop(work: Path) -> None:
    code, stderr, took = interrupt_mid_run(work, "agents.py:stubborn", signals=2)
    assert code == 130, stderr
    assert took < 30  # the shielded 60 s nap was not waited for
    assert "Ctrl-C again" in stderr
    # the second signal ended it, not the 5 s grace period the first one started
    assert "did not stop within" not in stderr, stderr
    assert "Traceback" not in stderr


# --------------------------------------------------------------------------------------------
# Progress output.


def run_in_pty(
    cwd: Path, *args: str, interrupt_when: Path | None = None, timeout: float = 30
) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal (120x40); return (code, stdout, terminal).

    With ``interrupt_when``, send SIGINT 0.3 s after that file appears.
    """
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = cli_env(TERM="xterm-256color")
    del env["COLUMNS"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    interrupt_at: float | None = None
    try:
        while time.monotonic() < deadline:
            if interrupt_when is not None and interrupt_at is None and interrupt_when.exists():
                interrupt_at = time.monotonic() + 0.3
            if interrupt_at is not None and time.monotonic() >= interrupt_at:
                proc.send_signal(signal.SIGINT)
                interrupt_at = math.inf
            ready, _, _ = select.select([master], [], [], 0.02)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as exc:  # EIO: every slave end is closed
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            chunks.append(data)
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, out, b"".join(chunks).decode(errors="replace")


def final_screen(terminal: str) -> list[str]:
    """What a terminal shows after ``terminal`` was written to it (the subset rich Live uses:
    carriage return, newline, cursor up, erase line; colours and cursor hiding ignored)."""
    lines = [""]
    row = col = 0
    for token in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", terminal):
        if not token:
            continue
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif token.startswith("\x1b["):
            command, arg = token[-1], token[2:-1]
            if command == "A":
                row = max(0, row - int(arg or 1))
            elif command == "K":
                lines[row] = "" if arg == "2" else lines[row][:col]
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token) :]
            col += len(token)
    return [line.rstrip() for line in lines if line.strip()]


def test_progress_on_a_terminal_draws_the_agent_tree_updating_in_place(work: Path) -> None:
    code, out, terminal = run_in_pty(work, "run", "agents.py:team", "Rest, all of you")
    assert code == 0, terminal
    assert out == "The team is rested.\n"
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal)
    assert "start  lead" not in plain  # not the plain event lines
    # while the naps run, a frame shows the three siblings running in parallel, with the tool
    assert plain.count("[running] running nap") >= 3, plain
    # updated in place: the screen ends with the tree drawn once, all done, in spawn order
    screen = final_screen(terminal)
    assert screen[0] == "agents", screen
    assert re.match(r"└── lead \[done\] completed  turns=2 tokens=\d", screen[1]), screen
    for i, line in enumerate(screen[2:5], start=1):
        assert re.match(rf"    [├└]── worker#{i} \[done\] completed  turns=2 tokens=\d", line)
    assert screen[5].startswith("status=completed agents=4 "), screen
    assert len(screen) == 6, screen


def test_an_approvers_prompt_on_a_terminal_is_shown_as_written(work: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "approval.py"
    code, _, terminal = run_in_pty(work, "run", str(example), "Delete draft-1")
    assert code == 0, terminal
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal)
    assert "wants to run delete_draft({'name': 'draft-1'}). Allow? [y/N]" in plain, plain


def test_ctrl_c_on_a_terminal_keeps_the_cancel_notice_and_draws_the_final_tree(
    work: Path,
) -> None:
    code, out, terminal = run_in_pty(
        work, "run", "agents.py:sleepy_team", "Rest", interrupt_when=work / "napping"
    )
    assert code == 130, terminal
    assert out == ""
    screen = final_screen(terminal)
    assert screen[0].startswith("cancelling the run"), screen  # not erased by a redraw
    assert screen[1] == "agents", screen
    assert "lead [failed] cancelled" in screen[2]
    assert all("[failed] cancelled" in line for line in screen[3:6]), screen
    assert not any("[running]" in line for line in screen), screen
    assert screen[-1].startswith("status=cancelled agents=4 "), screen


def test_progress_without_a_terminal_is_plain_one_line_events(cli: Cli, work: Path) -> None:
    proc = cli("run", "agents.py:team", "Rest, all of you")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The team is rested.\n"
    lines = proc.stderr.splitlines()
    assert "\x1b[" not in proc.stderr
    starts = [line for line in lines if line.startswith("start ")]
    finishes = [line for line in lines if line.startswith("finish ")]
    assert len(starts) == 4 and len(finishes) == 4, proc.stderr
    assert starts[0].startswith("start  lead:")
    assert finishes[-1].startswith("finish lead: completed")
    assert any(line.startswith("tool   lead/worker#") and "nap" in line for line in lines)
    assert lines[-1].startswith("status=completed agents=4 ")


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_quiet_and_json_print_nothing_but_the_result(cli: Cli, work: Path, flag: str) -> None:
    proc = cli("run", "agents.py:team", "Rest, all of you", flag)
    assert proc.returncode == 0
    assert proc.stderr == ""
    if flag == "--quiet":
        assert proc.stdout == "The team is rested.\n"
    else:
        assert json.loads(proc.stdout)["output"] == "The team is rested."


def test_quiet_on_a_terminal_draws_no_progress(work: Path) -> None:
    code, out, terminal = run_in_pty(work, "run", "agents.py", "go", "--quiet")
    assert code == 0
    assert out == "The answer is 42.\n"
    assert terminal == ""


# --------------------------------------------------------------------------------------------
# Dry run and traces.


def test_dry_run_prints_worst_case_numbers_and_calls_no_model(cli: Cli, work: Path) -> None:
    proc = cli("run", "agents.py:dry", "go", "--dry-run", "--max-turns", "4")
    assert proc.returncode == 0, proc.stderr
    assert not (work / "model_called").exists()
    assert not (work / "runs").exists()
    report = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert report["tree"] == "valid"
    assert int(report["worst_case_agents"]) > 1
    # each agent may take 4 turns, and a turn may make two model calls
    assert int(report["worst_case_model_calls"]) == 2 * 4 * int(report["worst_case_agents"])
    assert int(report["worst_case_output_tokens"]) > 0
    proc = cli("run", "agents.py:dry", "go", "--dry-run", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["tree"] == "valid"
    assert not (work / "model_called").exists()
    unbounded = cli("run", "agents.py:dry", "go", "--dry-run", "--json", "--timeout", "inf")
    assert unbounded.returncode == 0, unbounded.stderr

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    assert json.loads(unbounded.stdout, parse_constant=refuse)["timeout_s"] is None


def test_trace_list_and_show_draw_the_runs_after_a_run(cli: Cli, work: Path) -> None:
    first = cli("run", "agents.py:team", "Rest", "--json")
    assert first.returncode == 0
    run_id = json.loads(first.stdout)["run_id"]

    listing = cli("trace", "list")
    assert listing.returncode == 0, listing.stderr
    assert run_id in listing.stdout
    assert "lead" in listing.stdout and "completed" in listing.stdout

    shown = cli("trace", "show", run_id[:8])
    assert shown.returncode == 0, shown.stderr
    for name in (
        "invoke_agent lead",
        "execute_tool spawn_subagent",
        "invoke_agent worker",
        "execute_tool nap",
        "chat scripted",
    ):
        assert name in shown.stdout, shown.stdout
    newest = cli("trace", "show")
    assert newest.returncode == 0 and "invoke_agent lead" in newest.stdout


def test_trace_list_piped_keeps_whole_values_and_trace_errors_go_to_stderr(
    cli: Cli, work: Path
) -> None:
    first = cli("run", "agents.py:looper", "Go", "--json", "--max-turns", "2")
    run_id = json.loads(first.stdout)["run_id"]
    # a narrow default, as when piped without a terminal width
    listing = cli("trace", "list", env={"COLUMNS": "40"})
    (row,) = [line for line in listing.stdout.splitlines() if run_id in line]
    assert "max_turns" in row.split() and "looper" in row.split(), listing.stdout

    for args in (
        ("trace", "show", "nope"),
        ("trace", "export", "nope", "--endpoint", "x"),
        ("trace", "export", "nope", "--to", "x"),  # the same option
    ):
        failed = cli(*args)
        assert failed.returncode == 1
        assert failed.stdout == "" and "error:" in failed.stderr
    bracketed = cli("trace", "show", "[/x]")  # not rich markup
    assert bracketed.returncode == 1 and "[/x]" in bracketed.stderr, bracketed.stderr


def test_trace_show_whose_reader_has_what_it_wanted_exits_0(cli: Cli, work: Path) -> None:
    first = cli("run", "agents.py:looper", "Go", "--json", "--max-turns", "2")
    run_id = json.loads(first.stdout)["run_id"]
    shown = subprocess.Popen(  # `trace show | head -1`: the reader has what it wanted
        [sys.executable, "-m", "orchestrator.cli", "trace", "show", run_id],
        cwd=work,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert shown.stdout is not None
    shown.stdout.read(10)
    shown.stdout.close()
    _, stderr = shown.communicate(timeout=30)
    assert shown.returncode == 0, stderr


def test_a_reader_that_goes_away_does_not_change_the_exit_code_nor_lose_the_summary(
    work: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", "agents.py:team", "Rest"],
        cwd=work,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # like `| true`: nobody reads the answer
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "status=completed" in stderr


def test_a_passing_stderr_failure_costs_only_that_text() -> None:
    # a full non-blocking pipe (EAGAIN) is not a reader that went away: later lines still go
    import io

    from orchestrator.cli.main import _Diagnostics

    failures = [BlockingIOError(errno.EAGAIN, "full")]

    class Flaky(io.StringIO):
        def write(self, text: str) -> int:
            if failures:
                raise failures.pop()
            return super().write(text)

    stream = Flaky()
    guarded = _Diagnostics(stream)
    guarded.write("lost\n")
    guarded.write("kept\n")
    assert stream.getvalue() == "kept\n"


def test_a_stderr_whose_reader_went_away_or_that_is_closed_loses_diagnostics_not_the_run(
    work: Path,
) -> None:
    # `orchestrator run ... 2>&1 >answer.txt | head -1`: progress lines met a broken pipe and
    # the error cancelled the tree; `2>&-` (no stderr at all) crashed before the run
    for closed in (False, True):
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "run", "agents.py:team", "Rest"],
            cwd=work,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if closed else subprocess.PIPE,
            text=True,
            preexec_fn=(lambda: os.close(2)) if closed else None,
        )
        if proc.stderr is not None:
            proc.stderr.close()  # the reader went away before the first line
        stdout, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, (closed, stdout)
        assert stdout.strip(), closed  # the answer


# --------------------------------------------------------------------------------------------
# Review fixes: model validation in --dry-run, tracing settings, --override-model.


def test_dry_run_refuses_a_model_the_real_run_would_refuse(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "from orchestrator import Agent\nagent = Agent('a', 'i', model='gpt:4o')\n"
    )
    line = one_line_error(cli("run", "bad.py", "go", "--dry-run"))
    assert "gpt:4o" in line


def test_an_unusable_otlp_setting_is_a_one_line_error_not_a_traceback(cli: Cli, work: Path) -> None:
    proc = cli(
        "run",
        "agents.py",
        "go",
        env={  # refused where spans would go (with no endpoint it is not read)
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        },
    )
    line = one_line_error(proc)
    assert "tracing" in line


def test_override_model_replaces_the_model_every_agent_names(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "named.py").write_text(
        "from orchestrator import Agent\n"
        "agent = Agent('a', 'Answer.', model='anthropic:claude-sonnet-5-5')\n"
    )
    proc = cli("run", "named.py", "hello", "--override-model", "offline", "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["status"] == "completed"
