"""A FastAPI service whose agent tree waits for a person before it sends an email.

`POST /runs` starts a tree whose `send_email` call needs confirmation; the run's policy defers
it (`DEFER`), so the call is parked in the run's journal and the request answers at once with
the pending call. A person reads it later (an hour later, after a restart of the service) and
`POST /runs/{run_id}/approvals` with `{"allow": [ID]}` or `{"deny": [ID]}` decides it: the
decision goes into the journal before it acts, the run goes on with `aio.resume`, and the
answer is the run's result. The email is sent once, also when the approval is sent twice: the
second request finds the call decided and its result recorded, and the run replays.

Needs `pip install fastapi uvicorn` (the `dev` extra has them). Serve it with
`python examples/fastapi_approvals.py --port 8000` (journals and "sent" emails go under
`$APPROVALS_DIR`, default `./approvals`), then
`curl -s localhost:8000/runs -H 'content-type: application/json' -d '{"to": "ann@example.com"}'`.
The model is scripted, so no API key is needed.
"""

from __future__ import annotations

import argparse
import os
import re
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from orchestrator import DEFER, Agent, ConfigurationError, Policy, RunResult, aio, tool
from orchestrator.models import ScriptedModel, text, tool_call

FOLDER = Path(os.environ.get("APPROVALS_DIR", "approvals"))


@tool
async def send_email(to: str, body: str) -> str:
    """Send an email (here: a file in the outbox folder).

    Args:
        to: The recipient's address.
        body: What to say.
    """
    outbox = FOLDER / "outbox"
    outbox.mkdir(parents=True, exist_ok=True)
    with (outbox / "sent.txt").open("a") as f:
        f.write(f"{to}: {body}\n")
    return f"sent to {to}"


mailer = Agent(
    "mailer",
    "Send the email the task asks for with send_email, then say so.",
    tools=[send_email],
    policy=Policy({"send_email": "confirm"}),  # a person says yes first
)


def tree_for(to: str) -> Agent:
    """The tree of one request (the scripted model writes to the given address)."""
    script = ScriptedModel(
        [tool_call("send_email", {"to": to, "body": "The report is ready."}), text(f"sent to {to}")]
    )
    return mailer.replace(model=script)


app = FastAPI()


class NewRun(BaseModel):
    to: str


class Decisions(BaseModel):
    allow: list[str] = []
    deny: list[str] = []


def _journal(run_id: str) -> Path:
    if not re.fullmatch(r"[0-9a-f]{32}", run_id):
        raise HTTPException(404, f"no run {run_id!r}")
    path = FOLDER / f"{run_id}.db"
    if not path.exists():
        raise HTTPException(404, f"no run {run_id!r}")
    return path


def _remember(run_id: str, to: str) -> None:
    """What rebuilds the run's tree later (a small file: no need for a thread)."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    (FOLDER / f"{run_id}.to").write_text(to)


def _recipient(run_id: str) -> str:
    return (FOLDER / f"{run_id}.to").read_text()


def _answer(result: RunResult[Any]) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "status": result.status.value,
        "output": result.output,
        "pending": [p.to_dict() for p in result.pending_approvals],
    }


@app.post("/runs")
async def start(new: NewRun) -> dict[str, Any]:
    """Start a run; it parks its email and answers with the pending call."""
    run_id = uuid.uuid4().hex
    tree = tree_for(new.to)
    _remember(run_id, new.to)
    result = await aio.run(
        tree,
        f"Email {new.to} that the report is ready.",
        policy=Policy(approver=DEFER),
        journal=FOLDER / f"{run_id}.db",
        run_id=run_id,
    )
    return _answer(result)


@app.post("/runs/{run_id}/approvals")
async def approve(run_id: str, decisions: Decisions) -> dict[str, Any]:
    """Decide the run's parked calls and answer with its result (a repeat replays)."""
    journal = _journal(run_id)
    tree = tree_for(_recipient(run_id))
    wanted = {**{i: True for i in decisions.allow}, **{i: False for i in decisions.deny}}
    try:
        result = await aio.resume(journal, agent=tree, approvals=wanted)
    except ConfigurationError as exc:  # decided already (a repeated request)? replay it
        result = await aio.resume(journal, agent=tree)
        if result.pending_approvals:  # no: an id that names no pending call
            raise HTTPException(409, str(exc)) from None
    return _answer(result)


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
