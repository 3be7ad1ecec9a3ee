"""Runs that ended badly are listed and resumable (issue 39, part 8): the journal's header keeps
the command line's options that change what runs, and ``resume`` gives them again unless the
command gives them anew; a secret in them is not written down; a journal that cannot be created
or read is one line and exit 2, with nothing half-made left; and ``trace list`` lists a run
known only by its journal."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

from support.cli import Cli, cli_env
from support.mcp_servers import http_test_server

from orchestrator.core.journal_sqlite import read_header

TREE = """
from orchestrator import Agent
from orchestrator.models import FunctionModel, response, text, tool_call


async def answer(request):
    results = [b for m in request.messages for b in m.content if hasattr(b, "tool_use_id")]
    if not results:
        return response(tool_call("web__echo", {"text": "hello"}, id="e1"))
    return response(text(f"the tool said: {results[-1].content}"))


agent = Agent("lead", "Echo.", model=FunctionModel(answer, name="m"))
"""


def journal_of(work: Path) -> Path:
    [journal] = sorted((work / "runs").glob("*.db"))
    return journal


def test_resume_gives_the_runs_mcp_server_and_limits_again_unless_given_anew(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    with http_test_server(tmp_path) as (url, _):
        first = cli("run", "tree.py", "go", "--mcp", f"web={url}", "--max-turns", "1")
        assert first.returncode == 3, first.stderr  # max_turns: the call never ran
        journal = journal_of(tmp_path)
        recorded = read_header(journal).options["cli"]
        assert recorded == {"max_turns": 1, "mcp": [f"web={url}"]}

        again = cli("resume", journal.stem)  # --max-turns 1 given again: the same end
        assert again.returncode == 3, again.stderr

        done = cli("resume", journal.stem, "--max-turns", "3")  # anew: it wins
        assert done.returncode == 0, done.stderr
        # the MCP server was given again: its tool ran (without it: an unknown tool)
        assert done.stdout.strip() == "the tool said: hello"


def test_a_secret_in_an_mcp_url_is_not_written_and_resume_asks_for_the_option_again(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    with http_test_server(tmp_path) as (url, _):
        secret_url = url.replace("://", "://ann:s3cret-pw@") + "?api_key=k3y-value&mode=fast"
        first = cli("run", "tree.py", "go", "--mcp", f"web={secret_url}", "--max-turns", "1")
        assert first.returncode == 3, first.stderr
        journal = journal_of(tmp_path)
        [spec] = read_header(journal).options["cli"]["mcp"]
        assert "s3cret-pw" not in spec and "k3y-value" not in spec
        assert spec.endswith("?api_key=[REDACTED]&mode=fast")  # what is not secret stays
        on_disk = b"".join(p.read_bytes() for p in journal.parent.glob(f"{journal.name}*"))
        assert b"s3cret-pw" not in on_disk and b"k3y-value" not in on_disk

        refused = cli("resume", journal.stem, "--max-turns", "3")
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            "orchestrator: the run's --mcp web held a secret, which the journal does not keep: "
            "give --mcp web=... again"
        ]
        # given anew, the run goes on (the guard: a secret does not make a run unresumable)
        done = cli("resume", journal.stem, "--max-turns", "3", "--mcp", f"web={secret_url}")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "the tool said: hello"


def test_a_header_with_a_bad_value_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    first = cli("run", "tree.py", "go", "--max-turns", "1")
    assert first.returncode == 3, first.stderr
    journal = journal_of(tmp_path)
    with sqlite3.connect(journal) as db:
        db.execute("UPDATE header SET value = 'not a number' WHERE key = 'trace_id'")
    refused = cli("resume", journal.stem)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.endswith("the journal's header has a bad value for trace_id ('not a number')")

    with sqlite3.connect(journal) as db:
        db.execute("UPDATE header SET value = '0' WHERE key = 'trace_id'")
        options = json.dumps({"cli": {"max_turns": "many"}})
        db.execute("UPDATE header SET value = ? WHERE key = 'options'", (options,))
    refused = cli("resume", journal.stem)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.endswith("the journal's header has a bad value for --max-turns ('many')")

    with sqlite3.connect(journal) as db:  # the guard: good values resume
        options = json.dumps({"cli": {"max_turns": 3}})
        db.execute("UPDATE header SET value = ? WHERE key = 'options'", (options,))
    assert cli("resume", journal.stem).returncode == 0


def _limited(size: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def run_limited(work: Path, size: int) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own whose files may not grow past ``size`` bytes."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", "tree.py", "go", "--max-turns", "3"],
        cwd=work,
        env=cli_env(PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: _limited(size),
    )


def test_a_journal_that_cannot_be_created_over_ulimit_f_is_one_line_exit_2_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "tree.py").write_text(TREE.replace("web__echo", "nothing"))
    refused = run_limited(tmp_path, 2048)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("orchestrator: cannot write the run's journal to runs/")
    leftovers = [p.name for p in (tmp_path / "runs").iterdir() if ".db" in p.name]
    assert leftovers == []  # nothing half-made to block the next run

    # the guard: room enough, the same run completes and keeps its journal
    done = run_limited(tmp_path, 50_000_000)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "runs").glob("*.db"))) == 1


def test_a_run_killed_before_any_span_was_written_is_listed_as_interrupted(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    first = cli("run", "tree.py", "go", "--max-turns", "1")
    journal = journal_of(tmp_path)
    for trace in (tmp_path / "runs").glob("*.jsonl"):  # as if killed before its spans were out
        trace.unlink()
    with sqlite3.connect(journal) as db:  # ... and before it recorded its end
        db.execute("DELETE FROM header WHERE key IN ('status', 'ended_at')")
    assert first.returncode == 3
    listed = cli("trace", "list")
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if journal.stem in line]
    assert "interrupted" in row and "lead" in row
    # the guard: a run whose journal recorded its end shows that end, not "interrupted"
    with sqlite3.connect(journal) as db:
        db.execute("INSERT INTO header (key, value) VALUES ('status', 'max_turns')")
    [row] = [line for line in cli("trace", "list").stdout.splitlines() if journal.stem in line]
    assert "max_turns" in row and "interrupted" not in row
    assert os.path.exists(journal)
