"""``examples/fastapi_approvals.py`` under uvicorn on 127.0.0.1, in processes of its own: a run
parks its email and answers with the pending call; after the service restarted, the approval
decides it and answers with the run's result; the email is sent once, also when the approval
is sent again."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.cli import cli_env

EXAMPLE = Path(__file__).parents[1] / "examples" / "fastapi_approvals.py"


@contextmanager
def service(folder: Path) -> Iterator[int]:
    """The example served by uvicorn in a process of its own; its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", str(port)],
        cwd=folder,
        env=cli_env(APPROVALS_DIR=str(folder / "data")),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no service"
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def post(port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def sent(folder: Path) -> list[str]:
    outbox = folder / "data" / "outbox" / "sent.txt"
    return outbox.read_text().splitlines() if outbox.exists() else []


def test_a_parked_email_is_approved_after_a_restart_and_sent_exactly_once(
    tmp_path: Path,
) -> None:
    with service(tmp_path) as port:
        status, started = post(port, "/runs", {"to": "ann@example.com"})
    assert status == 200, started
    assert started["status"] == "awaiting_approval"
    [pending] = started["pending"]
    assert pending["tool"] == "send_email" and pending["input"]["to"] == "ann@example.com"
    assert sent(tmp_path) == []  # nothing sent before a person said yes

    with service(tmp_path) as port:  # a new process: the one that started the run is gone
        path = f"/runs/{started['run_id']}/approvals"
        status, done = post(port, path, {"allow": [pending["id"]]})
        assert status == 200, done
        assert (done["status"], done["output"], done["pending"]) == (
            "completed",
            "sent to ann@example.com",
            [],
        )
        status, again = post(port, path, {"allow": [pending["id"]]})  # the request repeated
        assert status == 200, again
        assert again["status"] == "completed"
        status, unknown = post(port, path, {"allow": ["no-such-call"]})
        assert status == 200 and unknown["status"] == "completed"  # nothing pending: replayed
    assert sent(tmp_path) == ["ann@example.com: The report is ready."]


def test_a_denied_email_is_never_sent(tmp_path: Path) -> None:
    with service(tmp_path) as port:
        _, started = post(port, "/runs", {"to": "bob@example.com"})
        [pending] = started["pending"]
        path = f"/runs/{started['run_id']}/approvals"
        status, missing = post(port, path, {"allow": ["nope"]})
        assert status == 409 and "no pending call 'nope'" in missing["detail"]
        status, done = post(port, path, {"deny": [pending["id"]]})
    assert status == 200 and done["status"] == "completed"
    assert sent(tmp_path) == []
