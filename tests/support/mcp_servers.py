"""Starting the MCP test server (``mcp_server.py`` beside this file) for the tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SERVER = Path(__file__).with_name("mcp_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@contextmanager
def http_test_server(folder: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server over streamable HTTP on a free port of 127.0.0.1, in a process of its
    own (its output in ``folder/http-server.log``): its URL and the process."""
    port = free_port()
    with (folder / "http-server.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(port), "--marker-dir", str(folder)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("the HTTP test server did not start") from None
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp", proc
        finally:
            proc.kill()
            proc.wait(10)
