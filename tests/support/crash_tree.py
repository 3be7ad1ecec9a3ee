"""A tree for the crash tests: deterministic test models, tools whose side effects are counted in
files outside the process, and markers that tell the test where the run is.

Set by the test, in the environment of the ``orchestrator run`` subprocess:
- ``CRASH_DIR``: where the logs and markers go (``effects.log``: one line per side effect,
  ``asked.log``: one line per model request, ``agent path turn``);
- ``CRASH_CHILDREN``: how many workers the lead spawns (default 3);
- ``CRASH_HOLD``: a side effect (``fetch:b``, ``email``, ``call:N``: the N-th tool call, or
  ``summary``: the lead's checkpoint summary) that writes ``<name>.held`` to ``CRASH_DIR`` when
  it starts and then waits until ``<name>.release`` appears there (the test kills the process
  while it waits, or releases it).
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from orchestrator import Agent, ContextPolicy, Limits, tool
from orchestrator.models import FunctionModel, response, text, tool_call

CRASH_DIR = Path(os.environ.get("CRASH_DIR", "."))
CHILDREN = int(os.environ.get("CRASH_CHILDREN", "3"))
HOLD = os.environ.get("CRASH_HOLD", "")


def _log(name: str, line: str) -> None:
    with open(CRASH_DIR / name, "a", encoding="utf-8") as f:  # one write per line: O_APPEND
        f.write(line + "\n")


def _calls_so_far() -> int:
    path = CRASH_DIR / "effects.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def _maybe_hold(*names: str) -> None:
    for name in names:
        if name and name == HOLD:
            (CRASH_DIR / f"{name}.held").write_text("held")
            while not (CRASH_DIR / f"{name}.release").exists():
                await trio.sleep(0.01)


@tool(idempotent=True)
async def fetch(url: str) -> str:
    """Fetch a page (idempotent: safe to run again)."""
    number = _calls_so_far() + 1
    _log("effects.log", f"fetch {url}")
    await _maybe_hold(f"fetch:{url}", f"call:{number}")
    return f"page {url}"


@tool
async def send_email(to: str) -> str:
    """Send an email (not idempotent: must never be sent twice)."""
    number = _calls_so_far() + 1
    _log("effects.log", f"email {to}")
    await _maybe_hold("email", f"call:{number}")
    _log("effects.log", f"email {to} done")
    return f"sent to {to}"


def _results(request) -> list[str]:
    return [
        b.content
        for m in request.messages
        if m.role == "user"
        for b in m.content
        if b.type == "tool_result"
    ]


async def _answer(request):
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    last = request.messages[-1].content[-1]
    if "Context checkpoint" in str(getattr(last, "text", "")):
        _log("asked.log", f"{request.agent.path} summary")
        await _maybe_hold("summary")
        sent = any("sent to" in r for r in _results(request))
        return text(
            "Summary: the workers answered; "
            + ("the email was sent." if sent else "the email is next.")
        )
    # after a checkpoint the transcript's turns count from 1 again: logged apart ("c1", ...)
    after_checkpoint = "Checkpoint of the work so far" in str(
        getattr(request.messages[0].content[0], "text", "")
    )
    _log("asked.log", f"{request.agent.path} {'c' if after_checkpoint else ''}{turn}")
    usage = {"input_tokens": request.input_tokens_estimate, "output_tokens": 20}
    if request.agent.name == "lead":
        results = _results(request)
        checkpoint = "Checkpoint of the work so far" in str(request.messages[0].content[0].text)
        if any("sent to" in r for r in results) or "the email was sent" in str(
            request.messages[0].content[0].text
        ):
            workers = "; ".join(r for r in results if r.startswith("worker"))
            return response(text(f"All done ({workers}); the boss was told."), usage=usage)
        if any("outcome is unknown" in r for r in results):
            return response(text("The email may have gone out; not sending it again."), usage=usage)
        if results or checkpoint:  # the workers answered: email the boss
            return response(tool_call("send_email", {"to": "boss"}, id=f"e{turn}"), usage=usage)
        calls = [
            tool_call("spawn_subagent", {"agent": "worker", "task": chr(97 + i)}, id=f"s{i}")
            for i in range(CHILDREN)
        ]
        return response(*calls, usage=usage)
    task = request.messages[0].content[0].text
    if turn == 1:
        return response(tool_call("fetch", {"url": task}, id=f"f-{task}"), usage=usage)
    return response(text(f"worker {task} read {_results(request)[-1]}"), usage=usage)


MODEL = FunctionModel(_answer, name="crash-model")
worker = Agent("worker", "Fetch your page, then answer.", description="fetches", tools=[fetch],
               model=MODEL)  # fmt: skip
agent = Agent(
    "lead",
    "Delegate the pages, email the boss, answer.",
    subagents=[worker],
    tools=[send_email],
    model=MODEL,
    limits=Limits(max_children=8, token_budget=200_000),
    context=ContextPolicy(compact_at_tokens=10_000_000)
    if HOLD != "summary"
    else ContextPolicy(compact_at_tokens=40),
)
