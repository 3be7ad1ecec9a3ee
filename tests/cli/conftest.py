"""The CLI tests' fixtures: ``cli``, the command in this process (:mod:`support.cli`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Cli


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli("run", "agents.py", "go")``: ``main(argv)`` in ``tmp_path`` with the environment
    of :func:`support.cli.cli_env` (a test module that builds its own overrides it with
    ``cli.environ = ...``); answers ``returncode``, ``stdout`` and ``stderr``."""
    return Cli(monkeypatch, tmp_path)
