"""A real Jaeger v2 for the ``jaeger`` tests: the binary ``build_jaeger.sh`` builds from the Go
module proxy, started with ``jaeger.yaml`` (memory storage, OTLP gRPC and HTTP in, the query API
out, every listener on 127.0.0.1) on free ports, and read back through its query API.

The binary is ``$ORCHESTRATOR_JAEGER_BINARY``, else the build script's cache path; a missing
binary fails the tests, saying how to build it (``.ci/run`` builds it first). Jaeger's process
gets no ``OTEL_*`` variable: it would trace itself to the endpoint a test sets.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORT = Path(__file__).resolve().parent
CONFIG = SUPPORT / "jaeger.yaml"
BUILD = SUPPORT / "build_jaeger.sh"
VERSION = "v1.75.0"
# The OTLP gRPC receiver's default limit on one request (the collector's configgrpc default).
GRPC_MAX_REQUEST = 4 * 1024 * 1024


def binary() -> Path:
    """Where the Jaeger binary is (it may not exist yet)."""
    given = os.environ.get("ORCHESTRATOR_JAEGER_BINARY")
    if given:
        return Path(given)
    cache = os.environ.get("ORCHESTRATOR_JAEGER_CACHE") or str(
        Path.home() / ".cache" / "orchestrator-tests" / "jaeger"
    )
    return Path(cache) / f"jaeger-{VERSION}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class Jaeger:
    """One Jaeger process on free ports of 127.0.0.1; :meth:`start`, then query it."""

    log: Path
    env: dict[str, str] | None = None
    """Jaeger's environment (default: this one without ``OTEL_*`` variables)."""
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.ports['JAEGER_OTLP_HTTP_PORT']}"

    @property
    def otlp_grpc(self) -> str:
        return f"http://127.0.0.1:{self.ports['JAEGER_OTLP_GRPC_PORT']}"

    @property
    def query(self) -> str:
        return f"http://127.0.0.1:{self.ports['JAEGER_QUERY_HTTP_PORT']}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> Jaeger:
        path = binary()
        if not os.access(path, os.X_OK):
            raise RuntimeError(
                f"no Jaeger binary at {path}: build it with {BUILD} (needs Go; minutes the "
                "first time), or point ORCHESTRATOR_JAEGER_BINARY at one"
            )
        names = (
            "JAEGER_OTLP_GRPC_PORT",
            "JAEGER_OTLP_HTTP_PORT",
            "JAEGER_QUERY_HTTP_PORT",
            "JAEGER_QUERY_GRPC_PORT",
        )
        self.ports = {name: free_port() for name in names}
        env = self.env
        if env is None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env = {**env}
        env.update({name: str(port) for name, port in self.ports.items()})
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(path), "--config", str(CONFIG)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        give_up_at = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Jaeger exited ({self.proc.returncode}): {self.log_text()}")
            if self._ready():
                return self
            if time.monotonic() > give_up_at:
                self.stop()
                raise RuntimeError(f"Jaeger not ready in {timeout} s: {self.log_text()}")
            time.sleep(0.1)

    def _ready(self) -> bool:
        for name in ("JAEGER_OTLP_GRPC_PORT", "JAEGER_OTLP_HTTP_PORT"):
            try:
                socket.create_connection(("127.0.0.1", self.ports[name]), timeout=1).close()
            except OSError:
                return False
        try:
            status, _ = _get(f"{self.query}/api/services", timeout=2)
        except OSError:
            return False
        return status == 200

    def __enter__(self) -> Jaeger:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    # -- the query API -----------------------------------------------------------------------

    def get_json(self, path: str, **params: str) -> Any:
        """GET ``path`` (with ``params``) from the query API; its JSON, or raises."""
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        status, body = _get(f"{self.query}{path}{query}")
        if status != 200:
            raise LookupError(f"{path}{query}: HTTP {status} {body[:300]!r}")
        return json.loads(body)

    def trace_v3(self, trace_id: str) -> list[dict[str, Any]]:
        """``/api/v3/traces/{id}``'s spans (OTLP JSON), each with its resource's attributes
        under ``"resource"`` and its scope under ``"scope"``."""
        doc = self.get_json(f"/api/v3/traces/{trace_id}")
        spans = []
        for rs in doc["result"]["resourceSpans"]:
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    spans.append({**span, "resource": rs.get("resource", {}), "scope": ss["scope"]})
        return spans

    def trace_legacy(self, trace_id: str) -> dict[str, Any]:
        """``/api/traces/{id}``: the trace as the UI reads it (spans, references, tags, logs,
        processes)."""
        data = self.get_json(f"/api/traces/{trace_id}")["data"]
        assert len(data) == 1, data
        return dict(data[0])

    def search(self, service: str, **params: str) -> list[dict[str, Any]]:
        """``/api/traces?service=...``: the UI's search (``tags`` as a JSON object)."""
        return list(self.get_json("/api/traces", service=service, limit="100", **params)["data"])

    def has_trace(self, trace_id: str) -> bool:
        status, _ = _get(f"{self.query}/api/traces/{trace_id}")
        return status == 200

    def wait_for_spans(self, trace_id: str, count: int, timeout: float = 60.0) -> dict[str, Any]:
        """The legacy trace once it holds ``count`` spans (Jaeger stores what it receives after
        its batch processor's delay); raises after ``timeout`` with what it had."""
        give_up_at = time.monotonic() + timeout
        got: dict[str, Any] = {}
        while True:
            if self.has_trace(trace_id):
                got = self.trace_legacy(trace_id)
                if len(got["spans"]) >= count:
                    return got
            if time.monotonic() > give_up_at:
                have = len(got.get("spans", ()))
                raise AssertionError(f"trace {trace_id}: {have} of {count} spans in {timeout} s")
            time.sleep(0.5)  # a poll reads the whole trace: not too often


def tag(span: dict[str, Any], key: str) -> Any:
    """A legacy span's tag value (``None`` when absent)."""
    for t in span.get("tags", ()):
        if t["key"] == key:
            return t["value"]
    return None


def attribute(span: dict[str, Any], key: str) -> Any:
    """An OTLP JSON span's attribute value, unwrapped (``None`` when absent)."""
    for a in span.get("attributes", ()):
        if a["key"] == key:
            value = a["value"]
            return next(iter(value.values())) if value else None
    return None
