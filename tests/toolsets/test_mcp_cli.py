"""``orchestrator run FILE.py PROMPT --mcp NAME=COMMAND`` / ``--mcp NAME=URL``, and bad input.

Each test runs the real command in this process (:mod:`support.cli`: what a process's start-up
would add is not the point here), with the test MCP server of tests/support as a real process
(stdio) or on a free 127.0.0.1 port (HTTP). Bad input is one line on stderr and exit code 2, and
nothing is left running (read from the process table) once the command has returned.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
from support.cli import Cli, CliRun
from support.mcp_servers import SERVER, free_port, http_test_server


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with http_test_server(tmp_path) as server:
        yield server


AGENTS = """\
from orchestrator import Agent, Policy
from orchestrator.models import ScriptedModel, text, tool_call

agent = Agent(
    "root",
    "Use the tools.",
    model=ScriptedModel([tool_call("{name}__echo", {{"text": "over {name}"}}), text("echoed")]),
    {policy}
)
"""
POLICY = 'policy=Policy({{"{name}__fail": "deny", "{name}__s*": "confirm"}}),'


def env() -> dict[str, str]:
    """No Anthropic key, no OTLP exporter setting: traces go to files under ``runs/``."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_"))}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliRun]:
    """``orchestrator run agents.py Go. ARGS`` in this process, in ``tmp_path`` with the
    environment :func:`env` builds; the tree calls ``{name}__echo`` (and holds a policy over
    the server's tools when ``policy``)."""
    command = Cli(monkeypatch, tmp_path, env)

    def run(*args: str, name: str = "test", policy: bool = False) -> CliRun:
        rules = POLICY.format(name=name) if policy else ""
        (tmp_path / "agents.py").write_text(AGENTS.format(name=name, policy=rules))
        return command("run", "agents.py", "Go.", *args)

    return run


def stdio_spec(tmp_path: Path, name: str = "test") -> str:
    command = [sys.executable, str(SERVER), "--marker-dir", str(tmp_path)]
    return f"{name}={shlex.join(command)}"


def running_with(fragment: str) -> list[str]:
    """Processes whose command line holds ``fragment`` (this test's own folder)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if fragment in line and "ps -eo" not in line]


def test_a_stdio_server_from_the_command_line_gives_the_root_its_tools(
    cli: Callable[..., CliRun], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc = cli("--mcp", stdio_spec(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "echoed\n"
    assert "status=completed " in proc.stderr
    # the server's stderr is in a log beside the trace, never on the terminal: neither the
    # command's sys.stderr nor this process's file descriptor 2, which the server would inherit
    assert "test server default starting" not in proc.stderr
    assert "test server default starting" not in capfd.readouterr().err
    (log,) = (tmp_path / "runs").glob("*.mcp-test.stderr.log")
    assert "test server default starting" in log.read_text()
    assert log.name.split(".")[0] == next((tmp_path / "runs").glob("*.jsonl")).stem
    assert running_with(str(tmp_path)) == []


def test_an_http_server_from_the_command_line(
    cli: Callable[..., CliRun], http_server: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, _ = http_server
    proc = cli("--mcp", f"web={url}", name="web")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "echoed\n"


def test_dry_run_starts_the_servers_to_list_their_tools_and_policy(
    cli: Callable[..., CliRun], tmp_path: Path
) -> None:
    proc = cli("--dry-run", "--mcp", stdio_spec(tmp_path), policy=True)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert lines["toolsets"] == "started 1 to list their tools"
    listed = lines["tools of root"].split(", ")
    assert "test__echo (allow)" in listed and "test__fail (deny)" in listed
    assert "test__sleep (confirm)" in listed and "test__sample (confirm)" in listed
    assert running_with(str(tmp_path)) == []


@contextmanager
def not_mcp(folder: Path) -> Iterator[str]:
    """A plain HTTP server (not MCP) on a free 127.0.0.1 port, once it accepts connections."""
    port = free_port()
    served = folder / "plain"
    served.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=served,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:  # bounded by the process: one that exits ends the wait
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("the plain HTTP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "test",
            "--mcp 'test': expected [AGENT:]NAME=COMMAND (stdio) or [AGENT:]NAME=URL "
            "(streamable HTTP)",
        ),
        ("test=ws://127.0.0.1:9/mcp", "--mcp test: unknown transport 'ws'"),
        (
            "test=no-such-mcp-server-command --flag",
            "MCP server 'test' failed to start: its command 'no-such-mcp-server-command' was "
            "not found",
        ),
        ("test=http://127.0.0.1:{port}/mcp", "MCP server 'test' failed to start: nothing answered"),
        ("test={plain}", "failed to start: it did not answer as an MCP server"),
        ("test={printer}", "failed to start: it closed the connection before answering"),
        ("test={failing}", "its last stderr line: error: cannot open the database"),
    ],
    ids=[
        "no-equals",
        "unknown-transport",
        "not-found",
        "no-answer",
        "not-mcp",
        "not-mcp-stdio",
        "exits",
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_left_running(
    cli: Callable[..., CliRun], tmp_path: Path, spec: str, expected: str
) -> None:
    failing = shlex.join(
        [sys.executable, str(SERVER), "--variant", "fail-start", "--marker-dir", str(tmp_path)]
    )
    printer = shlex.join([sys.executable, "-c", "print('hello, not MCP')"])
    with not_mcp(tmp_path) if "{plain}" in spec else nullcontext("") as plain:
        spec = spec.format(port=free_port(), plain=plain, failing=failing, printer=printer)
        proc = cli("--mcp", spec)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("orchestrator: ") and expected in line, line
    assert "Traceback" not in proc.stderr
    assert running_with(str(tmp_path)) == []


SLEEPER = """\
from orchestrator import Agent
from orchestrator.models import ScriptedModel, text, tool_call

agent = Agent(
    "root",
    "Sleep.",
    model=ScriptedModel(
        [tool_call("test__sleep", {{"seconds": 600, "marker": "nap"}}), text("slept")]
    ),
)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no reaper has collected yet does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.xfail(
    strict=False,
    reason="known bug (issue 39, part 10): one of the server and the process it started can "
    "outlive a SIGKILLed command for more than 30 s; on 2026-12-07 it passed 14 runs of 14 alone "
    "or in tests/toolsets, then failed in a clean clone's full suite (the survivor was gone "
    "before it could be identified)",
)
def test_a_stdio_server_and_what_it_started_die_with_a_sigkilled_command(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text(SLEEPER.format())
    command = [sys.executable, "-m", "orchestrator.cli", "run", "agents.py", "Go.", "--quiet"]
    server = [sys.executable, str(SERVER), "--variant", "helper", "--marker-dir", str(tmp_path)]
    proc = subprocess.Popen(
        [*command, "--mcp", f"test={shlex.join(server)}"],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60  # the call reaches the server (a bound, not a window)
        while not (tmp_path / "nap.started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the call never started"
            time.sleep(0.05)
        (log,) = (tmp_path / "runs").glob("*.mcp-test.stderr.log")
        pids = [
            int(log.read_text().split("(pid ")[1].split(")")[0]),  # the server
            int((tmp_path / "helper.pid").read_text()),  # and the process it started
        ]
        assert all(map(alive, pids))
        proc.kill()  # SIGKILL: the command runs no cleanup of its own
        proc.wait(10)
        deadline = time.monotonic() + 30  # ends once the keeper sees its parent gone
        while any(map(alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if alive(pid)], "outlived the command"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:  # what this test started, if it failed
            if alive(pid):
                os.kill(pid, 9)
