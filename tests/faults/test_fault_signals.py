"""Signals and BaseExceptions: a tool that holds the event loop, and user code that raises what
is not an ``Exception``.

An ``async def`` tool that awaits once and then computes without awaiting holds trio's only
thread: no trio task runs until it returns, so neither a deadline nor a signal watched by a task
can act. The command line's signal handling and its deadline watchdog are plain signal handlers
(they run between two bytecodes whatever the tasks do); these tests run the real command in a
subprocess and send it real signals (``os.kill``). A library program gets trio's own Ctrl-C
handling: tested in a subprocess too, with a real SIGINT.

A tool (or an approver) that raises ``KeyboardInterrupt``, ``GeneratorExit``, a stray
``trio.Cancelled`` or any other ``BaseException`` itself gets an ``is_error`` result, and the run
goes on: tested in-process through ``run()``, which runs under trio's real SIGINT handler (so a
``KeyboardInterrupt`` from the tool's own code is told apart from a Ctrl-C).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from support.cli import cli_env as clean_env  # the CLI tests' environment

from orchestrator import Agent, Limits, Policy, RunStatus, open_run, run, tool
from orchestrator.models import ScriptedModel, response, text, tool_call
from orchestrator.tracing.tracefiles import load_trace

# --------------------------------------------------------------------------------------------
# The command line and library programs, in subprocesses.

AGENTS = textwrap.dedent(
    '''
    """Agents whose second tool holds the event loop (or awaits, for comparison)."""

    import time
    from pathlib import Path

    import trio

    from orchestrator import Agent, tool
    from orchestrator.models import ScriptedModel, response, text, tool_call

    HERE = Path(__file__).parent


    @tool
    async def good() -> str:
        """Finish at once."""
        return "good work"


    @tool
    async def spin(seconds: float) -> str:
        """Await once, then compute without awaiting.

        Args:
            seconds: How long to compute.
        """
        await trio.sleep(0)
        (HERE / "busy").write_text("spinning")
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            pass
        return "spun"


    @tool
    async def stubborn_spin(seconds: float) -> str:
        """Compute without awaiting, and swallow whatever interrupts it (from the moment the
        ``busy`` file is written: a signal sent once it exists is swallowed).

        Args:
            seconds: How long to compute.
        """
        await trio.sleep(0)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            try:
                (HERE / "busy").write_text("spinning")
                while time.monotonic() - start < seconds:
                    pass
            except BaseException:
                pass
        return "spun"


    @tool
    async def nap(seconds: float) -> str:
        """Sleep (a tool that awaits).

        Args:
            seconds: How long to sleep.
        """
        (HERE / "busy").write_text("napping")
        await trio.sleep(seconds)
        return "rested"


    def pair(name, tool_name):
        script = [response(tool_call("good", {}), tool_call(tool_name, {"seconds": 60})), text("done")]
        return Agent(name, "Work.", model=ScriptedModel(script), tools=[good, spin, stubborn_spin, nap])


    spinner = pair("spinner", "spin")
    stubborn = pair("stubborn", "stubborn_spin")
    napper = pair("napper", "nap")
    '''
)

LIBRARY = textwrap.dedent(
    '''
    """A program running a tree with open_run under trio.run: its report on stdout as JSON."""

    import json
    import signal
    import sys
    import time

    import trio

    from agents import napper, spinner
    from orchestrator import open_run

    # Python's own Ctrl-C handling, as at a terminal: a test runner started as a background
    # job hands its children SIGINT ignored, and then neither Python nor trio would install it
    signal.signal(signal.SIGINT, signal.default_int_handler)

    agent = {"nap": napper, "spin": spinner}[sys.argv[1]]
    restrict = sys.argv[2] == "restrict"
    report = {}


    async def main():
        handle = None
        try:
            async with open_run(agent, "go") as handle:
                await handle.result()
            report["raised"] = None
        except BaseException as exc:
            report["raised"] = type(exc).__name__
            report["at"] = time.monotonic()
            result = await handle.result()
            report["status"] = result.status.value
            report["results"] = [
                [b.content, b.error_type]
                for m in result.messages
                for b in m.content
                if b.type == "tool_result"
            ]


    trio.run(main, restrict_keyboard_interrupt_to_checkpoints=restrict)
    print(json.dumps(report))
    '''
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "agents.py").write_text(AGENTS)
    (tmp_path / "library.py").write_text(LIBRARY)
    return tmp_path


class Signalled:
    """What a process did after being signalled: exit code, output, seconds from the last
    signal sent to its exit, and (after :func:`signal_when_busy`) the moment of that signal."""

    def __init__(self, code: int, stdout: str, stderr: str, took: float) -> None:
        self.code, self.stdout, self.stderr, self.took = code, stdout, stderr, took


# The tools below compute or sleep for 60 s; a run that stops "at once" (or within the 5 s grace
# period) ends well under half of that whatever the machine's load, and a run that waited for
# the tool ends after it. Every bound on a process is this one.
TOOL_SECONDS = 60
WELL_UNDER_THE_TOOL = TOOL_SECONDS / 2


def signal_when_busy(
    work: Path,
    argv: list[str],
    signals: list[int],
    *,
    gap: float = 0.3,
    limit: float = WELL_UNDER_THE_TOOL,
) -> Signalled:
    """Start ``argv`` in ``work``, wait until its second tool runs (the ``busy`` file), send
    ``signals`` ``gap`` seconds apart (none: let it run); wait at most ``limit`` seconds (a
    process still running then fails the test: it waited for the tool)."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=work,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60  # start-up and the first tool, on a loaded machine
        while not (work / "busy").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.02)
        sent = time.monotonic()  # the tool has started: the signals land in its code
        for i, signum in enumerate(signals):
            if i:
                time.sleep(gap)
            sent = time.monotonic()
            os.kill(proc.pid, signum)
        try:
            stdout, stderr = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            pytest.fail(f"still running {limit}s after the signals: {stderr[-2000:]}")
        return Signalled(proc.returncode, stdout, stderr, time.monotonic() - sent)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def cli(target: str, *options: str) -> list[str]:
    return ["-m", "orchestrator.cli", "run", target, "go", *options]


def tool_outcomes(work: Path, root: str) -> dict[str, str]:
    """Each tool call's outcome, from the run's trace file, after checking that every span
    ended, that every parent is in the file and that the root agent's span is there."""
    (trace,) = (work / "runs").glob("*.jsonl")
    spans = load_trace(trace)
    ids = {s.span_id for s in spans}
    assert all(s.end_ns >= s.start_ns > 0 for s in spans)
    assert all(s.parent_span_id is None or s.parent_span_id in ids for s in spans)
    assert [s.name for s in spans if s.parent_span_id is None] == [f"invoke_agent {root}"]
    return {
        s.name.removeprefix("execute_tool "): str(s.attributes["orchestrator.outcome"])
        for s in spans
        if s.name.startswith("execute_tool ")
    }


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_one_signal_stops_an_async_tool_that_never_awaits_and_the_run_ends_cancelled(
    work: Path, signum: int
) -> None:
    # the old watcher was a trio task: it never ran while the tool computed (60 s)
    done = signal_when_busy(work, cli("agents.py:spinner", "--json"), [signum])
    assert done.code == 130, done.stderr
    assert done.took < WELL_UNDER_THE_TOOL, done.took
    assert "cancelling the run" in done.stderr and "Traceback" not in done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
    # the sibling's work is kept, the cut call ends cancelled, every span ended
    assert tool_outcomes(work, "spinner") == {"good": "ok", "spin": "cancelled"}


def test_a_second_ctrl_c_exits_at_once_while_a_tool_holds_the_event_loop(work: Path) -> None:
    # this tool swallows the interrupt the first Ctrl-C raises into it and goes on computing
    done = signal_when_busy(work, cli("agents.py:stubborn"), [signal.SIGINT, signal.SIGINT])
    assert done.code == 130, done.stderr
    assert done.took < WELL_UNDER_THE_TOOL, done.took
    assert "Ctrl-C again to exit at once" not in done.stderr  # the loop never got to print it
    # the second signal ended it, not the grace period the first one started
    assert "did not stop within" not in done.stderr, done.stderr
    assert done.stderr.rstrip().endswith(
        "interrupted again: exiting at once; the result and spans not yet written are lost"
    ), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_that_will_not_stop_after_one_signal_exits_within_the_grace_period(
    work: Path, signum: int
) -> None:
    # unattended (docker stop, a CI cancel): nobody sends the second signal
    done = signal_when_busy(work, cli("agents.py:stubborn"), [signum])
    assert done.code == 130, done.stderr
    # the 5 s grace period (a timer the signal started: never shorter), not the tool's 60 s
    assert 4.5 < done.took < WELL_UNDER_THE_TOOL, done.took
    what = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert f"the run did not stop within 5s of the {what}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_timeout_ends_a_run_whose_tool_never_awaits_after_a_second_past_the_deadline(
    work: Path,
) -> None:
    # the deadline is a trio cancel scope: it cannot fire while the tool computes (60 s)
    proc = subprocess.run(
        [sys.executable, *cli("agents.py:spinner", "--json", "--timeout", "2")],
        cwd=work,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=WELL_UNDER_THE_TOOL,  # past it, the run waited for the tool: the test fails
    )
    assert proc.returncode == 4, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["status"] == "timeout"
    assert (work / "busy").exists()  # the tool was computing when the deadline passed
    # not before the deadline plus the 1 s stall (timers: never early), well before the 60 s
    assert 2.8 < payload["wall_s"] < WELL_UNDER_THE_TOOL, payload["wall_s"]
    assert tool_outcomes(work, "spinner") == {"good": "ok", "spin": "timeout"}


def test_timeout_exits_at_once_when_the_tool_holding_the_event_loop_swallows_the_interrupt(
    work: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, *cli("agents.py:stubborn", "--timeout", "1")],
        cwd=work,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=WELL_UNDER_THE_TOOL,  # past it, the process waited for the tool: the test fails
    )
    assert proc.returncode == 4, proc.stderr
    assert (work / "busy").exists()  # the tool was computing when the deadline passed
    # exited by the watchdog (deadline 1 s + stall 1 s + grace 5 s), not by the tool's end
    assert "the run did not stop within 6s of its deadline" in proc.stderr, proc.stderr


def test_a_ctrl_c_while_a_tool_awaits_cancels_the_run_and_keeps_the_siblings_work(
    work: Path,
) -> None:
    done = signal_when_busy(work, cli("agents.py:napper", "--json"), [signal.SIGINT])
    assert done.code == 130, done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
    assert tool_outcomes(work, "napper") == {"good": "ok", "nap": "cancelled"}


@pytest.mark.parametrize(
    ("tool_name", "restrict"),
    [("spin", "default"), ("nap", "default"), ("nap", "restrict")],
    ids=["computing-tool", "awaiting-tool", "awaiting-tool-ki-at-checkpoints"],
)
def test_a_real_ctrl_c_cancels_a_library_run_then_raises_keyboard_interrupt(
    work: Path, tool_name: str, restrict: str
) -> None:
    # trio raises a Ctrl-C inside a tool that is computing: that one used to escape run() as a
    # BaseExceptionGroup, the tree ended "internal error"; now it is the run's cancellation
    done = signal_when_busy(work, ["library.py", tool_name, restrict], [signal.SIGINT])
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["raised"] == "KeyboardInterrupt"  # itself, not inside a group
    assert report["status"] == "cancelled"
    assert report["results"][0] == ["good work", None]
    assert report["results"][1][1] == "cut_off"
    assert done.took < WELL_UNDER_THE_TOOL  # the 60 s tool was cut, not waited for


# --------------------------------------------------------------------------------------------
# BaseExceptions raised by user code itself, in-process.


class Stop(BaseException):
    """A BaseException subclass of the user's own."""


async def stray_cancelled() -> None:
    """A ``trio.Cancelled`` from a cancel scope of the tool's own, raised outside it."""
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.sleep(1)
        except trio.Cancelled as exc:
            caught = exc
    raise caught


async def mixed_group() -> None:
    """The tool's own nursery, whose tasks raise KeyboardInterrupt and GeneratorExit."""

    async def interrupt() -> None:
        raise KeyboardInterrupt

    async def exit_generator() -> None:
        await trio.lowlevel.checkpoint()
        raise GeneratorExit("closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt)
        nursery.start_soon(exit_generator)


async def raise_(exc: BaseException) -> None:
    await trio.lowlevel.checkpoint()
    raise exc


RAISERS: dict[str, tuple[Callable[[], Any], str]] = {
    "KeyboardInterrupt": (lambda: raise_(KeyboardInterrupt()), "KeyboardInterrupt"),
    "GeneratorExit": (lambda: raise_(GeneratorExit()), "GeneratorExit"),
    "custom": (lambda: raise_(Stop("stop everything")), f"{__name__}.Stop"),
    "stray-Cancelled": (stray_cancelled, "trio.Cancelled"),
    "mixed-group": (mixed_group, "BaseExceptionGroup"),
}


def base_exception_tools(raiser: Callable[[], Any]) -> list[Any]:
    @tool
    async def bad() -> str:
        """Raise."""
        await raiser()
        return "unreachable"

    @tool
    async def good() -> str:
        """Work, slowly: still running when the sibling raises."""
        await trio.sleep(0.05)
        return "good work"

    return [bad, good]


def results_of(result: Any) -> list[Any]:
    return [b for m in result.messages for b in m.content if b.type == "tool_result"]


def two_calls(first: str = "bad") -> ScriptedModel:
    return ScriptedModel([response(tool_call(first, {}), tool_call("good", {})), text("done")])


@pytest.mark.parametrize("kind", list(RAISERS))
async def test_a_base_exception_a_tool_raises_itself_is_an_error_result_and_the_run_goes_on(
    kind: str,
) -> None:
    raiser, error_type = RAISERS[kind]
    agent = Agent("a", "Work.", model=two_calls(), tools=base_exception_tools(raiser))
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED and result.output == "done"
    bad, good = results_of(result)
    assert bad.is_error and bad.error_type == error_type
    assert "tool 'bad' raised" in bad.content
    assert not good.is_error and good.content == "good work"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, GeneratorExit, Stop])
async def test_a_sync_tool_raising_a_base_exception_in_its_thread_is_an_error_result(
    exc_type: type[BaseException],
) -> None:
    @tool
    def bad() -> str:
        """Raise in the worker thread."""
        raise exc_type()

    @tool
    async def good() -> str:
        """Work."""
        return "good work"

    agent = Agent("a", "Work.", model=two_calls(), tools=[bad, good])
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED
    bad_result, good_result = results_of(result)
    assert bad_result.is_error and exc_type.__name__ in bad_result.error_type
    assert good_result.content == "good work"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, GeneratorExit, Stop])
@pytest.mark.parametrize("style", ["async", "sync"])
async def test_an_approver_raising_a_base_exception_refuses_the_call_and_the_run_goes_on(
    exc_type: type[BaseException], style: str
) -> None:
    ran: list[str] = []

    @tool
    async def guarded() -> str:
        """Needs approval."""
        ran.append("guarded")
        return "ran"

    @tool
    async def good() -> str:
        """Work."""
        return "good work"

    async def async_approver(call: Any) -> bool:
        raise exc_type()

    def sync_approver(call: Any) -> bool:
        raise exc_type()

    policy = Policy(
        {"guarded": "confirm"}, approver=async_approver if style == "async" else sync_approver
    )
    agent = Agent("a", "Work.", model=two_calls("guarded"), tools=[guarded, good])
    result = await run(agent, "go", policy=policy)
    assert result.status is RunStatus.COMPLETED
    refused, good_result = results_of(result)
    assert refused.is_error and refused.error_type == "refused"
    assert f"approver failed ({exc_type.__name__})" in refused.content
    assert not ran  # fails closed
    assert good_result.content == "good work"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, GeneratorExit, Stop])
async def test_a_cancel_still_cuts_a_tool_that_raises_a_base_exception_on_its_way_out(
    exc_type: type[BaseException],
) -> None:
    started = trio.Event()

    @tool
    async def bad() -> str:
        """Turn the cancellation into something else."""
        started.set()
        try:
            await trio.sleep(60)
        except trio.Cancelled:
            raise exc_type() from None
        return "unreachable"

    @tool
    async def good() -> str:
        """Work."""
        return "good work"

    agent = Agent("a", "Work.", model=two_calls(), tools=[bad, good])
    with trio.fail_after(WELL_UNDER_THE_TOOL):  # the tool or the approver waits 60 s
        async with open_run(agent, "go") as handle:
            await started.wait()
            handle.cancel()
            result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    bad_result, good_result = results_of(result)
    assert bad_result.error_type == "cut_off"
    assert good_result.content == "good work"


async def test_a_deadline_still_cuts_a_tool_that_raises_a_base_exception_on_its_way_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # virtual time: both calls start before the deadline however slow the machine is
    @tool
    async def bad() -> str:
        """Turn the cancellation into a KeyboardInterrupt."""
        try:
            await trio.sleep(60)
        except trio.Cancelled:
            raise KeyboardInterrupt from None
        return "unreachable"

    @tool
    async def good() -> str:
        """Work."""
        return "good work"

    agent = Agent("a", "Work.", model=two_calls(), tools=[bad, good])
    result = await run(agent, "go", limits=Limits(timeout=0.3))
    assert result.status is RunStatus.TIMEOUT
    assert [r.error_type for r in results_of(result)] == ["cut_off", None]


@pytest.fixture
def warnings_of_execute(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="orchestrator.core.execute"):
        yield caplog


async def test_an_async_tool_that_holds_the_loop_past_its_tool_timeout_is_reported(
    warnings_of_execute: pytest.LogCaptureFixture,
) -> None:
    @tool
    async def hog() -> str:
        """Compute without awaiting for longer than the timeout."""
        await trio.lowlevel.checkpoint()
        start = time.monotonic()
        while time.monotonic() - start < 0.4:
            pass
        return "computed"

    model = ScriptedModel([tool_call("hog", {}), text("done")])
    agent = Agent("a", "Work.", model=model, tools=[hog], limits=Limits(tool_timeout=0.1))
    result = await run(agent, "go")
    assert result.status is RunStatus.COMPLETED
    (hogged,) = results_of(result)
    assert hogged.content == "computed" and not hogged.is_error  # done: its result is kept
    (record,) = [r for r in warnings_of_execute.records if "tool_timeout" in r.getMessage()]
    message = record.getMessage()
    assert "'hog'" in message and "0.1s tool_timeout" in message
    assert "sync tool" in message  # what to do about it


@pytest.mark.parametrize("on_cancel", ["waits", "raises-KeyboardInterrupt"])
async def test_a_cancel_while_an_approver_waits_cancels_the_run_and_refuses_nothing(
    on_cancel: str,
) -> None:
    asked = trio.Event()

    @tool
    async def guarded() -> str:
        """Needs approval."""
        return "ran"

    @tool
    async def good() -> str:
        """Work."""
        return "good work"

    async def approver(call: Any) -> bool:
        asked.set()
        try:
            await trio.sleep(60)
        except trio.Cancelled:
            if on_cancel == "raises-KeyboardInterrupt":
                raise KeyboardInterrupt from None
            raise
        return True

    policy = Policy({"guarded": "confirm"}, approver=approver)
    agent = Agent("a", "Work.", model=two_calls("guarded"), tools=[guarded, good])
    with trio.fail_after(WELL_UNDER_THE_TOOL):  # the tool or the approver waits 60 s
        async with open_run(agent, "go", policy=policy) as handle:
            await asked.wait()
            handle.cancel()
            result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    assert [r.error_type for r in results_of(result)] == ["not_run", None]
