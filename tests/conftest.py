"""Shared test helpers (kept tiny): a checker for the transcript invariant of DESIGN.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.transcripts import check_transcript


@pytest.fixture(scope="session")
def valid_transcript() -> Callable[..., None]:
    """The transcript checker, as a fixture (session-scoped so hypothesis tests can use it)."""
    return check_transcript
