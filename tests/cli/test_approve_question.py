"""``--approve ask`` never hides what it asks about (issue 39, part 6): the question the
terminal approver writes, and what it does with each answer, through its public class with the
terminal's two streams as text buffers."""

from __future__ import annotations

import io
import re

from orchestrator.cli.progress import TerminalApprover
from orchestrator.core.policy import PendingCall

HOSTILE = "notes.txt" + " " * 700 + "; ALSO DELETE ~/.ssh/id_rsa"


def pending(arguments: dict[str, object]) -> PendingCall:
    return PendingCall("remove", arguments, "call-1", "janitor", "lead/janitor#1")


async def ask(arguments: dict[str, object], answers: str) -> tuple[bool, str]:
    out = io.StringIO()
    approver = TerminalApprover(out, io.StringIO(answers))
    verdict = await approver(pending(arguments))
    return verdict, out.getvalue()


async def test_spaces_cannot_push_the_end_of_an_argument_out_of_sight() -> None:
    verdict, shown = await ask({"name": HOSTILE}, "n\n")
    question = shown.splitlines()[0]
    assert "; ALSO DELETE ~/.ssh/id_rsa" in question
    assert "[700 spaces]" in question
    assert not verdict and shown.endswith("declined\n")


async def test_a_long_argument_shows_its_start_its_end_and_how_much_is_between() -> None:
    middle = "m" * 5_000
    verdict, shown = await ask({"path": "START" + middle + "THE-END"}, "y\n")
    question = shown.splitlines()[0]
    assert "START" in question and "THE-END" in question
    assert "more characters; v shows them" in question
    hidden = int(question.split("…[")[1].split(" more")[0].replace(",", ""))
    # what is shown plus what is counted is the whole argument
    shown_ms = sum(len(run) for run in re.findall("m{2,}", question))
    assert hidden + shown_ms == len(middle)
    assert "[v]iew all" in shown and verdict


async def test_v_shows_the_whole_argument_and_asks_again() -> None:
    secret_middle = "x" * 2_000 + "rm -rf /" + "x" * 2_000
    verdict, shown = await ask({"cmd": secret_middle}, "v\nn\n")
    assert shown.count("approve? lead/janitor#1 wants to run remove") == 2
    assert "rm -rf /" not in shown.splitlines()[0]  # cut from the question...
    assert '{"cmd":"' + secret_middle + '"}' in shown  # ...and shown whole on v
    assert not verdict and shown.endswith("declined\n")


async def test_a_short_argument_is_shown_whole_as_before() -> None:
    verdict, shown = await ask({"name": "old.log"}, "y\n")
    assert shown == (
        'approve? lead/janitor#1 wants to run remove {"name":"old.log"}\n'
        "  [y]es / [N]o / [a]ll: approved\n"
    )
    assert verdict
    # a few spaces are text, not a trick: kept as they are
    _, shown = await ask({"name": "a   b"}, "n\n")
    assert '{"name":"a   b"}' in shown
