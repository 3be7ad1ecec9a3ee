"""The command line with typed agents (issue 34): a typed answer printed as indented JSON, held
as a JSON value by ``--json``, ``invalid_output`` exiting 10, and the dry run naming each
agent's output type and mode. The trees are a file written into the test's folder."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from support.cli import Cli

from orchestrator.cli.main import EXIT_CODES
from orchestrator.core.result import RunStatus

TREES = textwrap.dedent(
    '''
    """Typed trees for the CLI tests."""

    import json

    from pydantic import BaseModel

    from orchestrator import Agent, Limits
    from orchestrator.models import FunctionModel, final, text, tool_call


    class Findings(BaseModel):
        topic: str
        facts: list[str]


    class Summary(BaseModel):
        headline: str
        sources: int


    def answer(request):
        """The lead spawns a researcher, then sums up what it found; the researcher finds two
        facts ("ünïcode" among them); "stubborn" answers without its required fields."""
        agent, messages = request.agent, request.messages
        if agent.name == "lead":
            if len(messages) == 1:
                return tool_call("spawn_subagent", {"agent": "researcher", "task": "trio"})
            found = json.loads(messages[-1].content[0].content)
            return final(Summary(headline=f"{found['topic']}: done", sources=len(found["facts"])))
        if agent.name == "stubborn":
            return tool_call("final_result", {"headline": "no count"})
        return final(Findings(topic="trio", facts=["nurseries", "ünïcode"]))


    MODEL = FunctionModel(answer)
    researcher = Agent(
        "researcher", "Find facts.", description="finds facts", output_type=Findings
    )
    agent = Agent("lead", "Sum up.", model=MODEL, subagents=[researcher], output_type=Summary)
    counter = Agent("counter", "Count.", model=FunctionModel(lambda r: final(3)), output_type=int)
    lister = Agent("lister", "List.", model=MODEL, output_type=list[Findings])
    stubborn = Agent(
        "stubborn",
        "Answer.",
        model=MODEL,
        output_type=Summary,
        limits=Limits(output_retries=1),
    )
    fussy = Agent(
        "fussy", "Answer.", description="answers a summary", output_type=Summary,
        limits=Limits(output_retries=0),
    )


    def picky_answer(request):
        """The lead spawns "fussy" and answers with what its spawn returned; "fussy" gives an
        answer without its fields."""
        if request.agent.name == "fussy":
            return tool_call("final_result", {})
        if len(request.messages) == 1:
            return tool_call("spawn_subagent", {"agent": "fussy", "task": "sum up"})
        return text(request.messages[-1].content[0].content)


    picky = Agent("picky", "Lead.", model=FunctionModel(picky_answer), subagents=[fussy])
    native = Agent(
        "native", "N.", model=MODEL, output_type=Findings, output_mode="native",
        subagents=[researcher, Agent("plain", "P.", description="answers text")],
    )
    '''
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "typed.py").write_text(TREES)
    return tmp_path


def test_a_typed_answer_is_printed_as_indented_json(cli: Cli, work: Path) -> None:
    proc = cli("run", "typed.py", "go")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == json.dumps({"headline": "trio: done", "sources": 2}, indent=2) + "\n"
    assert "status=completed agents=2 " in proc.stderr
    # a type that is not an object: the value itself, not {"result": ...}
    counted = cli("run", "typed.py:counter", "go")
    assert (counted.returncode, counted.stdout) == (0, "3\n"), counted.stderr


def test_json_holds_each_typed_answer_as_a_json_value(cli: Cli, work: Path) -> None:
    proc = cli("run", "typed.py", "go", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["output"] == {"headline": "trio: done", "sources": 2}
    assert doc["tree"]["output"] == doc["output"]
    [child] = doc["tree"]["children"]
    assert child["output"] == {"topic": "trio", "facts": ["nurseries", "ünïcode"]}


def test_invalid_output_exits_10_naming_the_status_and_the_last_output(
    cli: Cli, work: Path
) -> None:
    proc = cli("run", "typed.py:stubborn", "go")
    assert proc.returncode == 10 == EXIT_CODES[RunStatus.INVALID_OUTPUT], proc.stderr
    assert proc.stdout == ""
    assert "run ended with invalid_output: the output was rejected 2 times" in proc.stderr
    assert '"headline": "no count"' in proc.stderr  # the last output, kept in the reason
    assert "status=invalid_output " in proc.stderr and "Traceback" not in proc.stderr
    doc = json.loads(cli("run", "typed.py:stubborn", "go", "--json").stdout)
    assert (doc["status"], doc["output"]) == ("invalid_output", None)
    # the trace says so: trace list's status column, trace show's agent row
    listed = cli("trace", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if doc["run_id"][:8] in line]
    assert len(rows) == 1 and "invalid_output" in rows[0], listed.stdout
    shown = cli("trace", "show", doc["run_id"])
    assert shown.returncode == 0, shown.stderr
    [agent_row] = [line for line in shown.stdout.splitlines() if "invoke_agent stubborn" in line]
    assert "ERROR invalid_output" in agent_row


def test_the_dry_run_names_each_agents_output_type_fields_and_mode(cli: Cli, work: Path) -> None:
    proc = cli("run", "typed.py:native", "go", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "output of native: Findings {topic, facts} (native mode)" in lines
    assert "output of researcher: Findings {topic, facts} (tool mode)" in lines
    assert "output of plain: text" in lines
    counted = cli("run", "typed.py:counter", "go", "--dry-run")
    assert "output of counter: int (tool mode)" in counted.stdout.splitlines()
    listed = cli("run", "typed.py:lister", "go", "--dry-run")
    assert "output of lister: list[Findings] (tool mode)" in listed.stdout.splitlines()
    doc = json.loads(cli("run", "typed.py:native", "go", "--dry-run", "--json").stdout)
    assert doc["outputs"] == {
        "native": {
            "type": "Findings",
            "fields": ["topic", "facts"],
            "mode": "native",
            "validators": [],
        },
        "researcher": {
            "type": "Findings",
            "fields": ["topic", "facts"],
            "mode": "tool",
            "validators": [],
        },
        "plain": {"type": "str", "fields": [], "mode": "text", "validators": []},
    }


def test_the_dry_run_names_the_validators_that_check_each_answer(
    cli: Cli, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    research = Path(__file__).parents[2] / "agents" / "research.py"
    proc = cli("run", str(research), "go", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "output of lead: text, checked by answer_cites_only_findings" in lines
    assert (
        "output of researcher: Findings {summary, claims} (tool mode), "
        "checked by cited_sources_were_read"
    ) in lines


def test_a_child_ending_invalid_output_shows_in_the_progress_and_its_parent_goes_on(
    cli: Cli, work: Path
) -> None:
    proc = cli("run", "typed.py:picky", "go")
    assert proc.returncode == 0, proc.stderr
    assert "finish picky/fussy#1: invalid_output (1 turns, " in proc.stderr
    assert "ended with status invalid_output" in proc.stdout  # the envelope its parent read


def test_run_and_resume_help_list_every_exit_code(cli: Cli) -> None:
    for command in ("run", "resume"):
        proc = cli(command, "--help")
        assert proc.returncode == 0, proc.stderr
        listed = " ".join(proc.stdout.split())
        for status, code in EXIT_CODES.items():
            assert f"{code} {status.value}" in listed
        assert "2 bad usage" in listed


def test_resume_prints_the_same_typed_answer_from_the_journal(cli: Cli, work: Path) -> None:
    first = cli("run", "typed.py", "go", "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    again = cli("resume", doc["run_id"])  # the tree file loaded again: its classes are new
    assert again.returncode == 0, again.stderr
    assert again.stdout == json.dumps(doc["output"], indent=2) + "\n"
    resumed = json.loads(cli("resume", doc["run_id"], "--json").stdout)
    assert resumed["tree"]["children"][0]["output"] == doc["tree"]["children"][0]["output"]
