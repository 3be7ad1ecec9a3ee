"""Shared test set-up: the transcript checker, hypothesis's profiles, and the ``slow`` marker.

``slow`` is given by mechanism, never by a list of test ids: a test is slow when it carries a
marker of a step that needs more than pip (``npm``, ``local_model``, ``jaeger``), when it is
marked ``slow`` by hand (a test that takes more than about a second without a process), or when
the code it or its fixtures reach inside ``tests/`` can start a process (it names
``subprocess``, ``multiprocessing``, ``pty``, ``distributed`` or ``sys.executable``). A guard
holds the mechanism honest: a test that is not ``slow`` and starts a process anyway fails,
saying so, so ``python -m pytest -m "not slow"`` (the developers' quick loop) never starts one.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from support.transcripts import check_transcript

pytest_plugins = ["orchestrator.testing"]  # the orchestrator_spans fixture users get too

# No per-example deadline in any profile: it is a wall-clock window in disguise, which a loaded
# machine breaks. CI (HYPOTHESIS_PROFILE=ci in .ci/run) also fixes the seed: a landing must not
# depend on luck; local runs explore new examples each time.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# `trace list` keeps an index of the files it read under $XDG_CACHE_HOME: the suite's go to a
# folder of its own (inherited by the commands it runs), never to the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="orchestrator-tests-cache-")

TESTS = Path(__file__).resolve().parent
SLOW_STEPS = ("npm", "local_model", "jaeger")  # steps of their own in .ci/run
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "distributed"}
PROCESS_ATTRIBUTES = {  # a module's or class's names that start one
    "sys": {"executable"},
    "os": {"fork", "forkpty", "posix_spawn", "execv"},
    "MCPServer": {"stdio"},
}
PROCESS_EVENTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec"}
DASK_FIXTURE = "dask_client"  # one cluster per worker: its tests share an xdist group


@pytest.fixture(scope="session")
def valid_transcript() -> Callable[..., None]:
    """The transcript checker, as a fixture (session-scoped so hypothesis tests can use it)."""
    return check_transcript


# -- which tests are slow ------------------------------------------------------------------


def _in_tests(obj: Any) -> bool:
    """Whether ``obj`` (a module, function or class) is the suite's own code, read through."""
    if isinstance(obj, type):
        obj = sys.modules.get(obj.__module__)
    where = getattr(obj, "__file__", None) or getattr(
        getattr(obj, "__code__", None), "co_filename", ""
    )
    return bool(where) and Path(where).resolve().is_relative_to(TESTS)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every function, lambda and class body nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


_verdicts: dict[types.CodeType, bool] = {}  # each function read once per session


def _starts_processes(func: Any) -> bool:
    """Whether ``func`` or the suite's code it names can start a process (read, not run)."""
    func = getattr(getattr(func, "hypothesis", None), "inner_test", func)  # a @given test
    func = inspect.unwrap(func)  # a fixture or @contextmanager's own function
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    if code not in _verdicts:
        _verdicts[code] = False  # a cycle back to a function being read adds nothing
        _verdicts[code] = _names_a_process(code, getattr(func, "__globals__", {}))
    return _verdicts[code]


def _names_a_process(code: types.CodeType, scope: dict[str, Any]) -> bool:
    names = {name for c in _codes(code) for name in c.co_names}
    for name in names:
        value = scope.get(name)
        if callable(value) and not isinstance(value, type):
            value = inspect.unwrap(value)  # a @contextmanager's own function, say
        if isinstance(value, types.ModuleType):
            module = value.__name__.partition(".")[0]
            if module in PROCESS_MODULES or names & PROCESS_ATTRIBUTES.get(module, set()):
                return True
            if _in_tests(value) and any(
                _starts_processes(v) for n, v in vars(value).items() if n in names
            ):
                return True
        elif isinstance(value, type):
            if names & PROCESS_ATTRIBUTES.get(value.__name__, set()):
                return True
            if _in_tests(value) and any(_starts_processes(v) for v in vars(value).values()):
                return True
        elif _in_tests(value) and _starts_processes(value):
            return True
    return False


def _fixture_functions(item: pytest.Item) -> Iterator[Any]:
    info = getattr(item, "_fixtureinfo", None)
    for definitions in getattr(info, "name2fixturedefs", {}).values():
        for definition in definitions:
            yield definition.func


def _is_slow(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in ("slow", *SLOW_STEPS)):
        return True
    test = getattr(item, "function", None)
    return any(_starts_processes(f) for f in (test, *_fixture_functions(item)) if f)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
        if DASK_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(DASK_FIXTURE))
    # The slow tests first (a stable sort): on several workers the long ones start early and
    # the quick ones fill the gaps, instead of one long test finishing the run alone.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# -- the guard: a test that is not slow starts no process ----------------------------------

_current: list[pytest.Item] = []  # the test being run (set up, called, torn down)
_offenders: dict[str, str] = {}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in PROCESS_EVENTS and _current and not _current[0].get_closest_marker("slow"):
        _offenders.setdefault(_current[0].nodeid, f"{event} {args[:2]!r}")


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _current[:] = [item]
    try:
        return (yield)
    finally:
        _current.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    if report.when != "teardown":
        return report
    started = _offenders.pop(item.nodeid, None)
    if started and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a process ({started}) but is not marked slow: the quick "
            "loop (-m 'not slow') must start none. Start it through the suite's code (which "
            "tests/conftest.py reads) or mark the test slow."
        )
    return report
