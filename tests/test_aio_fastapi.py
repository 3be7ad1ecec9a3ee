"""orchestrator.aio in a real FastAPI app under uvicorn on 127.0.0.1, over real HTTP.

The app is ``examples/fastapi_app.py`` (loaded by path), served by ``uvicorn.Server`` in a thread
of the test process (its own asyncio loop), so the test can look at the example's inventory and
at the spans of an in-memory exporter. Requests are plain HTTP/1.1 over sockets.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import importlib.util
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import uvicorn  # the dev extra installs fastapi and uvicorn

EXAMPLE = Path(__file__).parents[1] / "examples" / "fastapi_app.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ModuleType, int]]:
    example = load_example()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(example.app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield example, port
    server.should_exit = True
    thread.join(10)
    assert not thread.is_alive()


def ask(
    port: int, question: str = "How many apples?", *, timeout: float = 30
) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body = json.dumps({"question": question})
        conn.request("POST", "/ask", body, {"content-type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def test_a_request_awaits_a_tree_whose_asyncio_tool_runs_on_uvicorns_loop(
    served: tuple[ModuleType, int],
) -> None:
    _, port = served
    status, body = ask(port)
    assert status == 200
    assert body == {"status": "completed", "answer": "We have 12 apples.", "error": None}


def test_concurrent_requests_run_their_trees_concurrently(served: tuple[ModuleType, int]) -> None:
    # every tree's tool call waits on uvicorn's loop until all twenty are in theirs at once:
    # trees run one after another would never get there (each gives up after 30 s)
    example, port = served
    count = example.Inventory.count
    in_tool = met = 0
    everyone: Any = None  # an asyncio.Event of uvicorn's loop, made there
    give_up_at = 0.0

    async def meeting(self: Any, item: str) -> int:
        import asyncio

        nonlocal in_tool, met, everyone, give_up_at
        if everyone is None:
            everyone = asyncio.Event()
            give_up_at = asyncio.get_running_loop().time() + 30
        in_tool += 1
        if in_tool == 20:
            everyone.set()
        async with asyncio.timeout_at(give_up_at):
            await everyone.wait()
        met += 1
        return await count(self, item)

    example.Inventory.count = meeting
    try:
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            replies = list(pool.map(lambda _: ask(port, timeout=60), range(20)))
    finally:
        example.Inventory.count = count
    assert all(
        r == (200, {"status": "completed", "answer": "We have 12 apples.", "error": None})
        for r in replies
    )
    assert met == 20  # all twenty trees were in their tool call at once


def test_a_client_that_hangs_up_cancels_its_run(served: tuple[ModuleType, int]) -> None:
    example, port = served
    example.inventory.delay = 30.0
    cancelled: list[str] = []
    entered: list[str] = []
    count = example.Inventory.count

    async def watched(self: Any, item: str) -> int:
        import asyncio

        entered.append(item)
        try:
            return await count(self, item)
        except asyncio.CancelledError:
            cancelled.append(item)
            raise

    example.Inventory.count = watched
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            body = json.dumps({"question": "How many apples?"}).encode()
            sock.sendall(
                b"POST /ask HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            deadline = time.monotonic() + 30
            while not entered:  # the tree is in its tool call (a 30 s count) now
                assert time.monotonic() < deadline, "the tree never called its tool"
                time.sleep(0.02)
        deadline = time.monotonic() + 30
        while not cancelled:
            assert time.monotonic() < deadline, "the run was not cancelled"
            time.sleep(0.02)
        assert cancelled == ["apples"]
        # the server goes on serving
        example.inventory.delay = 0.01
        assert ask(port)[0] == 200
    finally:
        example.Inventory.count = count
        example.inventory.delay = 0.05
