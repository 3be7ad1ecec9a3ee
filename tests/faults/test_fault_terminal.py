"""Terminal injection: no text a model, a tool, a provider or a trace file chose can drive the
terminal the command line writes to.

Each test runs the real ``orchestrator`` command: on a real terminal, in a subprocess (``script``
gives it a pseudo-terminal, so progress is rich's live tree), or with standard streams that are not
terminals, in this process (:mod:`support.cli`; plain progress lines, as in CI logs, and whatever
reached the process's file descriptors 1 and 2 directly is read too). The hostile texts are the
escape sequences a terminal acts on: a CSI that clears the screen, an OSC that retitles the window,
an OSC 8 hyperlink, an 8-bit C1 CSI, a BEL and a right-to-left override. Every one of them is
followed by an ``INJ-`` marker, so that what the terminal got can be told apart from the command's
own drawing (rich's colours and cursor moves): the terminal must get no OSC, no C1, no BEL and no
format character at all, no escape that begins one of the hostile texts, and each marker must still
be visible (the text is shown escaped, not dropped). Only the run's answer on stdout is written as
the model wrote it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cli import Cli, CliRun
from support.fake_messages_server import Error, FakeMessagesServer

CSI = "\x1b[2JINJ-CSI"
TITLE = "\x1b]0;INJ-TITLE\x07"
LINK = "\x1b]8;;https://evil.example/INJ-LINK\x1b\\click\x1b]8;;\x1b\\"
C1 = "\x9b31mINJ-C1"
BIDI = "\u202eINJ-BIDI"
MARKERS = ("INJ-CSI", "INJ-TITLE", "INJ-LINK", "INJ-C1", "INJ-BIDI")
ANSWER = "the answer, \x1b[1mbold\x1b[0m as the model wrote it"

AGENTS = textwrap.dedent(
    '''
    """Agents whose model, tools and provider write escape sequences."""

    import os

    import trio

    from orchestrator import Agent, Limits, ModelError, ToolError, tool
    from orchestrator.models import AnthropicModel, FunctionModel, text, tool_call

    CSI = {CSI!r}
    TITLE = {TITLE!r}
    LINK = {LINK!r}
    C1 = {C1!r}
    BIDI = {BIDI!r}
    ANSWER = {ANSWER!r}
    EVIL_TOOL = "look" + CSI + TITLE + BIDI
    PAUSE = float(os.environ.get("INJECTION_TREE_PAUSE", "0"))  # seconds per tool call's start


    def turn(request):
        return sum(1 for m in request.messages if m.role == "assistant")


    class Streaming(FunctionModel):
        """A FunctionModel that reports each tool call as it starts, as a streaming provider
        does, and takes a moment over it when told to (so the live view draws it)."""

        async def request(self, request, ctx):
            reply = await super().request(request, ctx)
            for block in reply.content:
                if block.type == "tool_use":
                    ctx.on_tool_call_start(block.id, block.name)
                    await trio.sleep(PAUSE)
            return reply


    @tool
    def fail(x: str) -> str:
        """Fail with a hostile error text.

        Args:
            x: anything
        """
        raise ToolError(LINK + TITLE + C1 + BIDI)


    def lead_steps(request):
        if turn(request) == 0:
            return [
                tool_call(EVIL_TOOL, {{}}),
                tool_call("spawn_subagent", {{"agent": "worker", "task": "go " + TITLE + CSI}}),
            ]
        return text(ANSWER)


    def worker_fails(request):
        raise ModelError(LINK + TITLE + C1 + BIDI, kind="odd" + CSI)


    worker = Agent("worker", "Work.", description="Works.", model=Streaming(worker_fails))
    lead = Agent("lead", "Lead.", model=Streaming(lead_steps), subagents=[worker])
    solo = Agent(
        "solo",
        "Fail.",
        model=Streaming(lambda request: tool_call("fail", {{"x": "y"}})),
        tools=[fail],
        limits=Limits(max_consecutive_errors=1),
    )
    provider = Agent(
        "provider",
        "Ask the provider.",
        model=AnthropicModel(
            "claude-sonnet-5-5", base_url=os.environ.get("FAKE_URL", ""), max_retries=0
        ),
    )
    '''
).format(CSI=CSI, TITLE=TITLE, LINK=LINK, C1=C1, BIDI=BIDI, ANSWER=ANSWER)


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "ANTHROPIC_"))
        and k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES")
    }
    env.update(COLUMNS="250", PYTHONIOENCODING="utf-8", TERM="xterm-256color", **extra)
    return env


@pytest.fixture
def piped(
    work: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> Callable[..., CliRun]:
    """``piped(*args, **env)``: the command in this process, in ``work``, with standard
    streams that are not terminals (plain progress lines); its stdout and stderr hold what
    reached file descriptors 1 and 2 directly too, as a piped process's would."""

    def run(*args: str, **env: str) -> CliRun:
        capfd.readouterr()  # (what came before the command is not its)
        proc = Cli(monkeypatch, work, lambda: cli_env(**env))(*args)
        direct = capfd.readouterr()
        return CliRun(
            proc.args, proc.returncode, proc.stdout + direct.out, proc.stderr + direct.err
        )

    return run


def in_terminal(cwd: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """The command on a real pseudo-terminal (``script``), its stdout sent to a file:
    (exit code, everything the terminal got, stdout). A model's tool call takes a moment as it
    starts (so the live view draws it)."""
    answer = cwd / "stdout.txt"
    command = shlex.join([sys.executable, "-m", "orchestrator.cli", *args])
    proc = subprocess.run(
        ["script", "-qefc", f"{command} > {shlex.quote(str(answer))}", "/dev/null"],
        cwd=cwd,
        env=cli_env(INJECTION_TREE_PAUSE="0.4", **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), answer.read_text()


_OWN_CSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z])?")


def hostile(terminal: str) -> list[str]:
    """What in ``terminal`` could drive a terminal and is not the command's own drawing: an
    escape that is not a plain CSI or that begins a hostile text (its ``INJ-`` marker follows),
    and every BEL, DEL, C1 and format character (bidi controls, zero-width characters)."""
    found = [
        repr(terminal[m.start() : m.end() + 12])
        for m in _OWN_CSI.finditer(terminal)
        if m.group(1) is None or terminal.startswith("INJ", m.end())
    ]
    found += sorted(
        repr(ch)
        for ch in set(terminal)
        if ch not in "\x1b\r\n" and unicodedata.category(ch) in ("Cc", "Cf")
    )
    return found


def assert_clean(terminal: str, markers: tuple[str, ...] = MARKERS) -> None:
    assert hostile(terminal) == [], terminal
    for marker in markers:  # neutralized, not dropped: the text is still there to read
        assert marker in terminal, (marker, terminal)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "agents.py").write_text(AGENTS)
    return tmp_path


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as fake:
        yield fake


def test_the_live_view_shows_hostile_tool_names_tasks_and_errors_escaped(work: Path) -> None:
    code, terminal, answer = in_terminal(work, "run", "agents.py:lead", "go")
    assert code == 0, terminal
    assert "\x1b[" in terminal  # rich did draw the live tree, in colour
    # the model-chosen tool name while the model writes it, the child's failed row
    assert "model is calling look\\x1b[2JINJ-CSI\\x1b]0;INJ-TITLE\\x07\\u202eINJ-BIDI" in terminal
    assert "[failed] \x1b[0merror: \\x1b]8;;https://evil.example/INJ-LINK\\x1b\\click" in terminal
    assert_clean(terminal, ("INJ-CSI", "INJ-TITLE", "INJ-LINK", "INJ-BIDI"))
    # the answer alone is written as the model wrote it
    assert answer == ANSWER + "\n"


def test_plain_progress_lines_carry_no_escape_at_all(piped: Callable[..., CliRun]) -> None:
    proc = piped("run", "agents.py:lead", "go " + TITLE)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr
    assert_clean(proc.stderr, ("INJ-CSI", "INJ-TITLE"))
    starts = [line for line in proc.stderr.splitlines() if line.startswith("start ")]
    assert starts[0] == "start  lead: 'go \\x1b]0;INJ-TITLE\\x07'", proc.stderr
    # an errored child's finish line says why, its error escaped like every other text
    assert "\\x1b]8;;https://evil.example/INJ-LINK" in proc.stderr
    assert proc.stdout == ANSWER + "\n"


def test_a_tool_errors_text_in_the_run_ended_diagnostic_is_shown_escaped(
    work: Path, piped: Callable[..., CliRun]
) -> None:
    code, terminal, answer = in_terminal(work, "run", "agents.py:solo", "go")
    assert code == 7, terminal  # error_threshold
    assert "run ended with error_threshold: " in terminal
    assert "last error: \\x1b]8;;https://evil.example/INJ-LINK\\x1b\\click" in terminal
    assert_clean(terminal, ("INJ-TITLE", "INJ-LINK", "INJ-C1", "INJ-BIDI"))
    assert answer == ""
    proc = piped("run", "agents.py:solo", "go")
    assert proc.returncode == 7
    assert "\x1b" not in proc.stderr
    assert_clean(proc.stderr, ("INJ-TITLE", "INJ-LINK", "INJ-C1", "INJ-BIDI"))


def test_a_providers_error_body_reaches_the_terminal_escaped(
    work: Path, server: FakeMessagesServer
) -> None:
    server.push(Error(400, "invalid_request_error", "bad request " + LINK + TITLE + C1 + BIDI))
    code, terminal, _ = in_terminal(
        work, "run", "agents.py:provider", "go", FAKE_URL=server.url, ANTHROPIC_API_KEY="x" * 20
    )
    assert code == 1, terminal
    assert "run ended with error: anthropic claude-sonnet-5-5: " in terminal
    assert_clean(terminal, ("INJ-TITLE", "INJ-LINK", "INJ-C1", "INJ-BIDI"))


def hostile_trace(runs: Path) -> tuple[Path, str]:
    """A real run's trace file, then edited as anyone who can write to the folder could:
    the root's agent name (with rich markup too), outcome, error type, run id and service."""
    (original,) = runs.glob("*.jsonl")
    doc_lines = [json.loads(line) for line in original.read_text().splitlines() if line]
    run_id = "run" + LINK + "INJ-RUN"
    for doc in doc_lines:
        for resource_spans in doc["resourceSpans"]:
            resource_spans["resource"]["attributes"] = [
                {"key": "service.name", "value": {"stringValue": "svc" + BIDI + TITLE}}
            ]
            for scope in resource_spans["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] != "invoke_agent lead":
                        continue
                    span["attributes"] = [
                        {"key": "gen_ai.conversation.id", "value": {"stringValue": run_id}},
                        {
                            "key": "gen_ai.agent.name",
                            "value": {
                                "stringValue": "lead" + TITLE + "[link=https://evil.example/]"
                                "INJ-MARKUP[/link]"
                            },
                        },
                        {"key": "orchestrator.outcome", "value": {"stringValue": "x" + CSI}},
                        {"key": "error.type", "value": {"stringValue": "y" + C1}},
                    ]
                    span["status"] = {"code": 2, "message": "z" + TITLE}
    edited = runs / "edited.jsonl"
    edited.write_text("".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in doc_lines))
    original.unlink()
    return edited, run_id


def test_trace_list_and_show_draw_every_field_of_a_hostile_trace_file_escaped(
    work: Path, piped: Callable[..., CliRun]
) -> None:
    proc = piped("run", "agents.py:lead", "go", "--quiet")
    assert proc.returncode == 0, proc.stderr
    runs = work / "runs"
    (trace,) = runs.glob("*.jsonl")
    # first the file as the run wrote it: the model's tool name is in a span name
    code, terminal, shown = in_terminal(work, "trace", "show", str(trace))
    assert code == 0, terminal
    assert "execute_tool look\\x1b[2JINJ-CSI" in shown
    assert_clean(shown, ("INJ-CSI", "INJ-TITLE", "INJ-BIDI"))
    edited, _ = hostile_trace(runs)
    listed = ("INJ-RUN", "INJ-LINK", "INJ-TITLE", "INJ-MARKUP", "INJ-CSI")  # id, agent, outcome
    drawn = ("INJ-RUN", "INJ-LINK", "INJ-BIDI", "INJ-TITLE", "INJ-CSI", "INJ-C1")  # + service
    for args, markers in (
        (["trace", "list"], listed),
        (["trace", "show", str(edited)], drawn),
        (["trace", "show"], drawn),
    ):
        # on a terminal (stdout is the terminal here: rich draws in colour) and piped
        command = shlex.join([sys.executable, "-m", "orchestrator.cli", *args])
        proc_tty = subprocess.run(
            ["script", "-qefc", command, "/dev/null"],
            cwd=work,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
        terminal = proc_tty.stdout.decode("utf-8", "replace")
        assert proc_tty.returncode == 0, terminal
        assert "\x1b[" in terminal  # styled output, so the check below is not vacuous
        assert_clean(terminal, markers)
        if "INJ-MARKUP" in markers:
            assert "[link=https://evil.example/]INJ-MARKUP[/link]" in terminal  # not markup
        proc = piped(*args)
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout
        assert_clean(proc.stdout, markers)


def test_a_usage_error_quoting_an_agent_files_exception_is_shown_escaped(
    work: Path, piped: Callable[..., CliRun]
) -> None:
    (work / "bad.py").write_text(f"raise RuntimeError({(TITLE + CSI)!r})\n")
    proc = piped("run", "bad.py", "go")
    assert proc.returncode == 2
    assert proc.stderr.startswith("orchestrator: bad.py failed to import: RuntimeError: ")
    assert_clean(proc.stderr, ("INJ-TITLE", "INJ-CSI"))


def test_argparse_quoting_the_command_line_is_shown_escaped(piped: Callable[..., CliRun]) -> None:
    proc = piped("run", "agents.py", "go", "extra" + TITLE)
    assert proc.returncode == 2
    assert "unrecognized arguments: extra\\x1b]0;INJ-TITLE\\x07" in proc.stderr
    assert_clean(proc.stderr, ("INJ-TITLE",))


def test_a_library_warning_on_stderr_is_shown_escaped(
    work: Path, piped: Callable[..., CliRun]
) -> None:
    # a library warning (here: an approver that broke) goes through Python's handler of last
    # resort when the program configured no logging (in process too: support.cli)
    (work / "approve.py").write_text(
        textwrap.dedent(
            f"""
            from orchestrator import Agent, Policy, tool
            from orchestrator.models import ScriptedModel, text, tool_call

            @tool
            def act() -> str:
                '''Act.'''
                return "done"

            def approver(call):
                raise RuntimeError({(TITLE + BIDI)!r})

            agent = Agent(
                "asker",
                "Act.",
                model=ScriptedModel([tool_call("act", {{}}), text("over")]),
                tools=[act],
                policy=Policy(rules={{"act": "confirm"}}, approver=approver),
            )
            """
        )
    )
    proc = piped("run", "approve.py", "go")
    assert proc.returncode == 0, proc.stderr
    assert "the approver raised on a call to 'act'" in proc.stderr
    assert_clean(proc.stderr, ("INJ-TITLE", "INJ-BIDI"))
