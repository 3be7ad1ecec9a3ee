"""The Jaeger tests' fixtures: one real Jaeger per session (:mod:`support.jaeger`), and the CLI
run as a process against it. Every test here is marked ``jaeger`` (a step of its own in
``.ci/run``, which builds the binary first; outside the README's command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.jaeger import Jaeger

SUPPORT = Path(__file__).resolve().parents[1] / "support"
TREES = SUPPORT / "jaeger_trees.py"
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.jaeger)


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """A Jaeger on free ports of 127.0.0.1, for the whole session."""
    server = Jaeger(tmp_path_factory.mktemp("jaeger") / "jaeger.log").start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Run:
    """A CLI run: its id, answer, stderr and trace file (kept beside the export)."""

    run_id: str
    answer: str
    stderr: str
    trace_file: Path


def cli_env(**extra: str) -> dict[str, str]:
    """This environment without OTEL_* settings or an API key, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OTEL_") and k not in ("ANTHROPIC_API_KEY", "JAEGER_UI_URL")
    }
    env.update(extra)
    return env


def orchestrator(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator.cli ARGS`` in ``cwd``, as a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_tree(
    tree: str,
    work: Path,
    *,
    endpoint: str | None = None,
    protocol: str = "http/protobuf",
    **env: str,
) -> Run:
    """``orchestrator run jaeger_trees.py:TREE`` with spans sent to ``endpoint`` over
    ``protocol`` (or only to the trace file); the run must complete."""
    otel = {}
    if endpoint is not None:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    proc = orchestrator(
        "run",
        f"{TREES}:{tree}",
        "Go.",
        "--json",
        "--runs-dir",
        str(work / "runs"),
        cwd=work,
        env=cli_env(**otel, **env),
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert "dropped" not in proc.stderr and "failed to export" not in proc.stderr, proc.stderr
    return Run(payload["run_id"], payload["output"], proc.stderr, work / payload["trace_file"])


def file_spans(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP/JSON lines trace file, in file order."""
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans.extend(ss["spans"])
    return spans


def trace_id_of(spans: list[dict[str, Any]]) -> str:
    """The one trace id the spans share (a run is one trace)."""
    ids = {s["traceId"] for s in spans}
    assert len(ids) == 1, ids
    return ids.pop()
