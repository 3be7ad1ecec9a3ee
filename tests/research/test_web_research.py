"""agents/web_research.py: researchers on Claude search and fetch with the provider's hosted
tools, their claims may cite only URLs their own results gave, and the tree needs a model that
can search the web.

End to end: the real ``orchestrator`` command in a subprocess, the real anthropic SDK over HTTP
to the fake Messages server on 127.0.0.1 (ANTHROPIC_BASE_URL, a dummy key), answered by
tests/support/web_tree.py's simulated Claude."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli, cli_env
from support.fake_messages_server import FakeMessagesServer
from support.web_tree import UNREAD_URL, WebTreeResponder, site

from orchestrator import OutputContext, OutputRejected
from orchestrator.core.messages import Message, ServerToolResultBlock, ServerToolUseBlock
from orchestrator.research.findings import (
    WebClaim,
    WebFindings,
    cited_sources_were_read,
    url_key,
    urls_seen,
)

WEB = Path(__file__).parents[2] / "agents" / "web_research.py"
PARTS = [
    "Which is the tallest building in Europe",
    "When did it open",
    "Who designed it",
]
QUESTION = "Which is the tallest building in Europe, when did it open, and who designed it?"
URL = re.compile(r"https?://[^\s\])>]+")


def _run_cli(server: FakeMessagesServer, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(WEB), QUESTION, "--json"],
        cwd=cwd,
        env=cli_env(ANTHROPIC_API_KEY="dummy-key-not-secret", ANTHROPIC_BASE_URL=server.url),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _system(body: dict[str, Any]) -> str:
    return "".join(b["text"] for b in body.get("system") or () if b.get("type") == "text")


def _researcher_bodies(server: FakeMessagesServer) -> dict[str, list[dict[str, Any]]]:
    """The researchers' requests, by the sub-question each was given."""
    out: dict[str, list[dict[str, Any]]] = {}
    for body in server.bodies:
        if not _system(body).startswith("You lead"):
            first = body["messages"][0]["content"]
            task = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
            out.setdefault(task, []).append(body)
    return out


def test_researchers_search_and_fetch_and_the_answer_cites_only_pages_they_read(
    tmp_path: Path,
) -> None:
    responder = WebTreeResponder(PARTS, cite_unread=frozenset({1}))
    with FakeMessagesServer(responder=responder) as server:
        proc = _run_cli(server, tmp_path)
        assert not server.errors, server.errors
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "completed"
    children = out["tree"]["children"]
    assert [c["status"] for c in children] == ["completed"] * 3

    # each researcher held the hosted tools, searched and fetched (the provider's counts)
    by_task = _researcher_bodies(server)
    assert sorted(by_task) == sorted(PARTS)
    for bodies in by_task.values():
        types = {t.get("type", "custom") for t in bodies[0]["tools"]}
        assert any(t.startswith("web_search_") for t in types)
        assert any(t.startswith("web_fetch_") for t in types)
    assert out["usage"]["web_search_requests"] == 3
    assert out["usage"]["web_fetch_requests"] == 6

    # the claim citing an unread URL was rejected, naming it, and the researcher asked again
    second = by_task[PARTS[1]]
    assert len(second) == 2
    rejection = [
        b
        for b in second[1]["messages"][-1]["content"]
        if b.get("type") == "tool_result" and b.get("is_error")
    ]
    assert len(rejection) == 1
    problem = json.dumps(rejection[0]["content"])
    assert "claims.2" in problem and UNREAD_URL in problem and "did not read" in problem
    assert all(len(by_task[p]) == 1 for p in (PARTS[0], PARTS[2]))  # no problem, no retry

    # the answer cites the fetched pages of all three parts and no other URL
    answer = out["output"]
    cited = {u.rstrip(".,") for u in URL.findall(answer)}
    fetched = {f"{site(i)}/page-{k}" for i in range(3) for k in (0, 1)}
    assert cited == fetched
    assert UNREAD_URL not in answer
    for i, child in enumerate(children):  # each one's findings: only pages it read
        sources = {s for c in child["output"]["claims"] for s in c["sources"]}
        assert sources == {f"{site(i)}/page-{k}" for k in (0, 1)}


def test_a_researcher_that_found_nothing_is_said_in_the_answer(tmp_path: Path) -> None:
    responder = WebTreeResponder(PARTS, nothing_found=frozenset({2}))
    with FakeMessagesServer(responder=responder) as server:
        proc = _run_cli(server, tmp_path)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)["output"]
    assert f"Not found: {PARTS[2]}." in answer
    assert site(2) not in answer


def test_without_a_key_the_web_tree_exits_2_with_one_line_saying_what_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = Cli(monkeypatch, tmp_path)("run", str(WEB), QUESTION)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs a model that can search the web" in lines[0]
    assert "ANTHROPIC_API_KEY" in lines[0]


def test_on_the_offline_model_by_name_the_web_tree_says_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = Cli(monkeypatch, tmp_path, lambda: cli_env(ANTHROPIC_API_KEY="k"))(
        "run", str(WEB), QUESTION, "--override-model", "offline"
    )
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "needs a model that can search the web" in proc.stderr


# -- the validator, on transcripts with hosted tool blocks --------------------------------------


def _searched_and_fetched() -> tuple[Message, ...]:
    search = {
        "type": "web_search_tool_result",
        "tool_use_id": "s1",
        "content": [
            {"type": "web_search_result", "url": "https://a.example/x/", "title": "x"},
            {"type": "web_search_result", "url": "https://b.example/y", "title": "y"},
        ],
    }
    fetch = {
        "type": "web_fetch_tool_result",
        "tool_use_id": "f1",
        "content": {"type": "web_fetch_result", "url": "https://c.example/final", "content": {}},
    }
    failed = {
        "type": "web_fetch_tool_result",
        "tool_use_id": "f2",
        "content": {"type": "web_fetch_tool_error", "error_code": "url_not_accessible"},
    }
    content = (
        ServerToolUseBlock({"id": "s1", "name": "web_search", "input": {"query": "q"}}),
        ServerToolResultBlock(search),
        ServerToolUseBlock(
            {"id": "f1", "name": "web_fetch", "input": {"url": "https://c.example/r"}}
        ),
        ServerToolResultBlock(fetch),
        ServerToolUseBlock(
            {"id": "f2", "name": "web_fetch", "input": {"url": "https://d.example/"}}
        ),
        ServerToolResultBlock(failed),
    )
    return (Message.user("q"), Message("assistant", content))


def _ctx(messages: tuple[Message, ...]) -> OutputContext:
    return OutputContext("researcher", "lead/researcher#1", "run", None, (), messages)


def test_urls_seen_are_search_results_and_fetched_pages_but_not_failed_fetches() -> None:
    assert urls_seen(_searched_and_fetched()) == {
        "https://a.example/x",
        "https://b.example/y",
        "https://c.example/final",
        "https://c.example/r",  # the URL asked for, redirected to /final
    }


def test_url_key_ignores_case_of_the_host_a_fragment_and_a_trailing_slash() -> None:
    assert url_key(" <HTTPS://A.Example/x/#part> ") == "https://a.example/x"
    assert url_key("topic:for") == "topic:for"


def test_a_claim_citing_a_url_the_researcher_got_passes() -> None:
    given = WebFindings(
        summary="s",
        claims=[WebClaim(text="t", sources=["https://a.example/x", "[https://c.example/final/]"])],
    )
    kept = cited_sources_were_read(_ctx(_searched_and_fetched()), given)
    assert kept.claims[0].sources == ["https://a.example/x", "https://c.example/final/"]


def test_a_claim_citing_a_url_no_result_gave_is_rejected_naming_it() -> None:
    given = WebFindings(
        summary="s",
        claims=[
            WebClaim(text="fine", sources=["https://b.example/y"]),
            WebClaim(text="failed fetch", sources=["https://d.example/"]),
            WebClaim(text="from memory", sources=["https://e.example/z"]),
        ],
    )
    with pytest.raises(OutputRejected) as caught:
        cited_sources_were_read(_ctx(_searched_and_fetched()), given)
    problem = str(caught.value)
    assert "claims.1" in problem and "[https://d.example/]" in problem
    assert "claims.2" in problem and "[https://e.example/z]" in problem
    assert "claims.0" not in problem
    assert "URLs your web searches or fetches returned" in problem


def test_a_web_researcher_that_got_nothing_may_cite_nothing() -> None:
    with pytest.raises(OutputRejected, match="you have read none"):
        cited_sources_were_read(
            _ctx((Message.user("q"),)),
            WebFindings(summary="s", claims=[WebClaim(text="t", sources=["https://x.example"])]),
        )


def test_a_lead_citing_a_url_no_researcher_found_is_asked_again_and_drops_it(
    tmp_path: Path,
) -> None:
    own = "https://lead.example.com/from-memory"
    responder = WebTreeResponder(PARTS, lead_cites=[own])
    with FakeMessagesServer(responder=responder) as server:
        proc = _run_cli(server, tmp_path)
        assert not server.errors, server.errors
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "completed"
    first, second = responder.answers
    assert f"[{own}]" in first
    leads = [b for b in server.bodies if _system(b).startswith("You lead")]
    told = json.dumps(leads[-1]["messages"][-1]["content"])
    assert f"[{own}], which no researcher's findings cite" in told
    assert own not in out["output"] and out["output"] == second
    cited = {u.rstrip(".,") for u in URL.findall(out["output"])}
    assert cited == {f"{site(i)}/page-{k}" for i in range(3) for k in (0, 1)}
