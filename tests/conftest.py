"""Shared test helpers (kept tiny): a checker for the transcript invariant of DESIGN.md."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import pytest
from hypothesis import settings
from support.transcripts import check_transcript

pytest_plugins = ["orchestrator.testing"]  # the orchestrator_spans fixture users get too

# CI runs the property tests with a fixed seed (HYPOTHESIS_PROFILE=ci in .ci/run): a landing
# must not depend on luck. Local runs explore new examples each time.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# `trace list` keeps an index of the files it read under $XDG_CACHE_HOME: the suite's go to a
# folder of its own (inherited by the commands it runs), never to the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="orchestrator-tests-cache-")


@pytest.fixture(scope="session")
def valid_transcript() -> Callable[..., None]:
    """The transcript checker, as a fixture (session-scoped so hypothesis tests can use it)."""
    return check_transcript
