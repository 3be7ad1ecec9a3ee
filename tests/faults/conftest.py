"""Fixtures of the fault-injection suite, and the hook that writes docs/faults.md.

Every test here injects one fault at depth 0, 1 or 2 of a tree (see ``faultkit.py``) and checks
the guarantees of issue 8 through :meth:`faultkit.Observer.verify`. With
``ORCHESTRATOR_WRITE_FAULT_MATRIX=1`` in the environment, the session writes the observed
fault x depth matrix to ``docs/faults.md`` (normal runs leave the tree untouched).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import CANARY, MATRIX, Observer, write_matrix

MATRIX_ENV = "ORCHESTRATOR_WRITE_FAULT_MATRIX"


@pytest.fixture(autouse=True)
def _fault_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The canary key, message content on spans (so the secret check covers it), and no
    exporter configuration from the outside environment."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    for name in (
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_LOG",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SDK_DISABLED",
    ):
        monkeypatch.delenv(name, raising=False)
    yield


@pytest.fixture
def obs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Observer:
    return Observer(tmp_path, caplog)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(MATRIX_ENV) != "1" or not MATRIX:
        return
    path = Path(str(session.config.rootpath)) / "docs" / "faults.md"
    write_matrix(path)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"fault matrix: {len(MATRIX)} cases written to {path}, "
            f"{sum(1 for row in MATRIX.values() if not row.ok)} marked as bugs"
        )
