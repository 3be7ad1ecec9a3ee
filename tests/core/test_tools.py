"""@tool: schemas, injection, validation, threads, timeouts, errors as results, retries, caps."""

from __future__ import annotations

import functools
import itertools
import json
import threading
from typing import Annotated

import pydantic
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import (
    Agent,
    ConfigurationError,
    Limits,
    Policy,
    RunStatus,
    Tool,
    ToolContext,
    ToolError,
    ToolResultBlock,
    open_run,
    run,
    tool,
)
from orchestrator.core.messages import to_wire
from orchestrator.core.tools import _never_waits
from orchestrator.models import FunctionModel, ScriptedModel, text, tool_call


def results_of(result):
    """Every tool_result block of a run's transcript, in order."""
    return [b for m in result.messages for b in m.content if b.type == "tool_result"]


async def call_once(t, args=None, *, limits=None, **run_options):
    """Run an agent that calls ``t`` once with ``args`` then answers; return (result, tool_result)."""
    model = ScriptedModel([tool_call(t.name, args or {}), text("done")])
    agent = Agent("worker", "Use the tool.", model=model, tools=[t])
    result = await run(agent, "go", limits=limits, **run_options)
    assert result.status is RunStatus.COMPLETED, result.error
    (only,) = results_of(result)
    return result, only


# --- schema ----------------------------------------------------------------------------------


@tool
def search(query: str, limit: int = 5) -> str:
    """Search the corpus for matching passages.

    Args:
        query: What to look for.
        limit: How many hits to return.
    """
    return f"{limit} hits for {query}"


def test_the_schema_comes_from_type_hints_and_docstring():
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search the corpus for matching passages."
    schema = search.input_schema
    assert schema["type"] == "object"
    assert schema["properties"]["query"]["type"] == "string"
    assert schema["properties"]["query"]["description"] == "What to look for."
    assert schema["properties"]["limit"]["type"] == "integer"
    assert schema["properties"]["limit"]["description"] == "How many hits to return."
    assert schema["properties"]["limit"]["default"] == 5
    assert schema["required"] == ["query"]


def _weather_google(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Args:
        city (str): The city name, e.g. "Paris".
        days: How many days.
            Up to 7.

    Returns:
        A JSON string with the forecast for each day.

    Raises:
        ValueError: if the city is unknown.
    """
    return ""


def _weather_numpy(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Parameters
    ----------
    city : str
        The city name, e.g. "Paris".
    days : int
        How many days.
        Up to 7.

    Returns
    -------
    str
        A JSON string with the forecast for each day.
    """
    return ""


def _weather_sphinx(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    :param str city: The city name, e.g. "Paris".
    :param days: How many days. Up to 7.
    :returns: A JSON string with the forecast for each day.
    :raises ValueError: if the city is unknown.
    """
    return ""


@pytest.mark.parametrize("fn", [_weather_google, _weather_numpy, _weather_sphinx])
def test_google_numpy_and_sphinx_docstrings_give_the_same_description_and_parameters(fn):
    t = tool(fn)
    assert t.description == "Get the weather forecast."
    props = t.input_schema["properties"]
    assert props["city"]["description"] == 'The city name, e.g. "Paris".'
    assert props["days"]["description"] == "How many days. Up to 7."


def test_a_continuation_line_with_a_colon_stays_with_its_parameter():
    def fetch(url: str, timeout: float = 1.0) -> str:
        """Fetch a page.

        Args:
          url: The address to fetch.
            Example: https://example.com/page
          timeout: Seconds to wait.
        """
        return ""

    props = tool(fetch).input_schema["properties"]
    assert props["url"]["description"] == "The address to fetch. Example: https://example.com/page"
    assert props["timeout"]["description"] == "Seconds to wait."
    assert "Example" not in props


def test_the_schema_is_plain_json():
    json.dumps(search.input_schema)


def test_tool_options_set_the_name_and_description():
    @tool(name="lookup", description="Look a word up.")
    def f(word: str) -> str:
        """Ignored docstring."""
        return word

    assert f.name == "lookup"
    assert f.description == "Look a word up."


def test_a_tool_context_parameter_is_left_out_of_the_schema():
    @tool
    def whoami(ctx: ToolContext, shout: bool = False) -> str:
        """Say who is calling."""
        return ctx.agent_name

    assert set(whoami.input_schema["properties"]) == {"shout"}
    assert "ctx" not in json.dumps(whoami.input_schema)


async def test_the_model_is_offered_each_tool_with_its_schema():
    seen = {}

    def fn(request):
        seen.update({t.name: t for t in request.tools})
        return text("done")

    await run(Agent("a", "x", model=FunctionModel(fn), tools=[search]), "go")
    assert set(seen) == {"search"}
    assert seen["search"].input_schema == search.input_schema
    assert seen["search"].description == search.description


async def test_the_tool_context_is_injected_with_the_calling_agent():
    got = []

    @tool
    async def whoami(ctx: ToolContext) -> str:
        """Say who is calling."""
        got.append(ctx)
        return ctx.agent_name

    result, res = await call_once(whoami, deps={"db": "conn"})
    (ctx,) = got
    assert res.content == "worker"
    assert ctx.agent_name == "worker"
    assert ctx.agent_path == "worker"
    assert ctx.depth == 0
    assert ctx.deps == {"db": "conn"}
    assert ctx.run_id == result.run_id and ctx.run_id


async def test_an_annotated_tool_context_is_injected_too():
    @tool
    async def whoami(ctx: Annotated[ToolContext, "the caller"]) -> str:
        """Say who is calling."""
        return ctx.agent_name

    assert whoami.input_schema["properties"] == {}
    _, res = await call_once(whoami)
    assert res.content == "worker"


def test_a_tool_context_the_model_could_fill_in_is_rejected_when_defined():
    # Optional[ToolContext] is not injected: it would be an argument, with deps in its schema
    def whoami(ctx: ToolContext | None = None) -> str:
        """Say who is calling."""
        return "x"

    with pytest.raises(ConfigurationError, match="plain ToolContext"):
        tool(whoami)


def test_parameters_the_model_cannot_set_by_name_are_rejected_when_defined():
    def positional(a: int, /) -> int:
        """Positional only."""
        return a

    def reserved(model_config: str) -> str:
        """A name pydantic keeps for itself."""
        return model_config

    with pytest.raises(ConfigurationError, match="positional-only"):
        tool(positional)
    with pytest.raises(ConfigurationError, match="model_config"):
        tool(reserved)


# --- validation ------------------------------------------------------------------------------


async def test_arguments_are_validated_before_the_call_and_the_handler_is_not_called():
    calls = []

    @tool
    def repeat(word: str, times: int) -> str:
        """Repeat a word."""
        calls.append((word, times))
        return word * times

    _, res = await call_once(repeat, {"word": "ha", "times": "many"})
    assert calls == []
    assert res.is_error
    assert "repeat" in res.content
    assert "times" in res.content
    # the schema is included so the model can fix the call
    assert json.dumps(repeat.input_schema["properties"]["times"]).replace(" ", "") in res.content


async def test_a_missing_required_argument_is_named_in_the_error():
    calls = []

    @tool
    def greet(name: str, greeting: str = "hello") -> str:
        """Greet someone."""
        calls.append(name)
        return f"{greeting} {name}"

    _, res = await call_once(greet, {"greeting": "hi"})
    assert calls == []
    assert res.is_error
    assert "name" in res.content
    assert "missing" in res.content.lower() or "required" in res.content.lower()


async def test_an_unexpected_argument_is_rejected_not_silently_dropped():
    calls = []

    @tool
    def greet(name: str) -> str:
        """Greet someone."""
        calls.append(name)
        return f"hello {name}"

    _, res = await call_once(greet, {"name": "Ada", "mood": "grumpy"})
    assert calls == []
    assert res.is_error
    assert "mood" in res.content


@tool
def _all_plain(name: str, count: int, ratio: float = 0.5, loud: bool = False) -> None:
    """A tool whose parameters are all bare str/int/float/bool: validated without pydantic."""


_ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
_EXACT = {"name": st.text(max_size=5), "count": st.integers(), "ratio": st.floats()}
_EXACT["loud"] = st.booleans()
_NEAR_MISS = {  # what pydantic converts: bool for int, int for float, 0/1 and "yes" for bool...
    "name": st.just(b"x"),
    "count": st.one_of(st.booleans(), st.floats(), st.just("7")),
    "ratio": st.one_of(st.integers(), st.booleans(), st.just("1.5")),
    "loud": st.one_of(st.integers(0, 1), st.sampled_from(["yes", "no", "true", "0"])),
}


@st.composite
def _arguments(draw: st.DrawFn) -> dict[str, object]:
    arguments = {}
    for name, exact in _EXACT.items():
        kind = draw(st.sampled_from(["exact", "exact", "exact", "near miss", "other", "absent"]))
        if kind == "exact":
            arguments[name] = draw(exact)
        elif kind == "near miss":
            arguments[name] = draw(_NEAR_MISS[name])
        elif kind == "other":
            arguments[name] = draw(_ANY_VALUE)
    if draw(st.integers(0, 4)) == 0:
        arguments["extra"] = draw(_ANY_VALUE)
    return arguments


@settings(max_examples=300, deadline=None)
@given(_arguments())
def test_validation_gives_what_pydantic_gives_for_any_arguments(arguments):
    # the fast path for plain parameters must be invisible: same values, same types, same
    # failures as pydantic's own validation of the arguments model
    assert _all_plain._plain_fields is not None
    try:
        expected = dict(_all_plain.args_model.model_validate(arguments).__dict__)
    except pydantic.ValidationError:
        with pytest.raises(pydantic.ValidationError):
            _all_plain.validate(arguments)
        return
    got = _all_plain.validate(arguments)
    assert got == expected
    assert list(got) == list(expected)
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_constrained_or_aliased_parameters_are_always_validated_by_pydantic():
    @tool
    def bounded(n: Annotated[int, pydantic.Field(ge=0)]) -> int:
        """Bounded."""
        return n

    @tool
    def listed(names: list[str]) -> int:
        """Listed."""
        return len(names)

    @tool
    def optional(note: str | None = None) -> str:
        """Optional."""
        return note or ""

    @tool
    def converted(n: Annotated[int, pydantic.Field(validate_default=True)] = "5") -> int:  # type: ignore[assignment]
        """A default pydantic converts."""
        return n

    assert converted._plain_fields is None and converted.validate({}) == {"n": 5}

    assert bounded._plain_fields is None and listed._plain_fields is None
    assert optional._plain_fields is None
    with pytest.raises(pydantic.ValidationError):
        bounded.validate({"n": -1})


async def test_valid_arguments_reach_the_handler_coerced_to_their_types():
    got = []

    @tool
    def add(a: int, b: float) -> float:
        """Add."""
        got.append((a, b))
        return a + b

    _, res = await call_once(add, {"a": 2, "b": 0.5})
    assert got == [(2, 0.5)]
    assert not res.is_error
    assert res.content == "2.5"


# --- sync tools, threads, timeouts -----------------------------------------------------------


async def test_a_sync_tool_runs_in_a_worker_thread():
    threads = []

    @tool
    def where() -> str:
        """Report the thread."""
        threads.append(threading.get_ident())
        return "here"

    _, res = await call_once(where)
    assert res.content == "here"
    assert threads and threads[0] != threading.get_ident()


async def test_an_async_tool_runs_in_the_trio_task():
    @tool
    async def where() -> str:
        """Report the thread."""
        await trio.lowlevel.checkpoint()
        return str(threading.get_ident())

    _, res = await call_once(where)
    assert res.content == str(threading.get_ident())


async def test_a_sync_tool_hanging_past_tool_timeout_is_abandoned_and_counted():
    # real time on purpose: a worker thread does not advance trio's virtual clock
    release = threading.Event()
    finished = threading.Event()

    @tool
    def hang() -> str:
        """Hang until released (or for a minute)."""
        try:
            release.wait(60)
            return "late"
        finally:
            finished.set()

    model = ScriptedModel([tool_call("hang"), text("gave up")])
    agent = Agent("worker", "x", model=model, tools=[hang])
    try:
        async with open_run(agent, "go", limits=Limits(tool_timeout=0.2)) as handle:
            result = await handle.result()
        assert not finished.is_set(), "the run waited for the hung thread instead of abandoning it"
        assert result.status is RunStatus.COMPLETED
        (res,) = results_of(result)
        assert res.is_error
        assert "timed out" in res.content
        assert handle.abandoned_threads == 1
    finally:
        release.set()
        await trio.to_thread.run_sync(finished.wait, 30)


@pytest.mark.parametrize("threads", [None, 3], ids=["default-32", "tool_threads=3"])
async def test_a_sync_tool_that_finds_every_worker_thread_busy_says_it_never_ran(
    threads: int | None,
):
    # one hanging call more than the run's worker threads: the last never starts
    pool = threads or 32
    release = threading.Event()
    finished = threading.Semaphore(0)

    @tool
    def hang(i: int) -> str:
        """Hang until released.

        Args:
            i: which call
        """
        try:
            release.wait(10)
            return "late"
        finally:
            finished.release()

    calls = [tool_call("hang", {"i": i}) for i in range(pool + 1)]
    model = ScriptedModel([calls, text("gave up")])
    agent = Agent("worker", "x", model=model, tools=[hang])
    options = {} if threads is None else {"tool_threads": threads}
    try:
        async with open_run(agent, "go", limits=Limits(tool_timeout=0.5), **options) as handle:
            result = await handle.result()
        results = results_of(result)
        assert len(results) == pool + 1 and all(r.is_error for r in results)
        never_ran = [r for r in results if "never ran" in r.content]
        assert len(never_ran) == 1
        assert "could not start within 0.5s" in never_ran[0].content
        assert f"all {pool} worker threads" in never_ran[0].content
        assert sum("timed out after 0.5s" in r.content for r in results) == pool
        assert handle.abandoned_threads == pool  # the one that never got a thread is not counted
    finally:
        release.set()
    for _ in range(pool):  # every thread that started finishes before the test ends
        assert await trio.to_thread.run_sync(finished.acquire, True, 5)


async def test_a_sync_tool_timing_out_before_its_thread_starts_is_a_timeout_not_a_full_pool():
    ran = []

    @tool
    def quick(i: int) -> int:
        """Return at once."""
        ran.append(i)
        return i

    model = ScriptedModel([tool_call("quick", {"i": 1}), text("done")])
    agent = Agent("worker", "x", model=model, tools=[quick])
    result = await run(agent, "go", limits=Limits(tool_timeout=1e-9))  # past before the thread
    (res,) = results_of(result)
    assert res.is_error and res.error_type == "timeout" and ran == []
    assert "before it could start; it never ran" in res.content
    assert "worker threads" not in res.content  # all 32 were free


async def test_an_async_tool_hanging_past_tool_timeout_becomes_a_timed_out_result(autojump_clock):
    @tool
    async def hang() -> str:
        """Hang."""
        await trio.sleep(10_000)
        return "late"

    start = trio.current_time()
    _, res = await call_once(hang, limits=Limits(tool_timeout=5))
    assert res.is_error
    assert "timed out" in res.content
    assert 5 <= trio.current_time() - start < 6


async def test_the_default_tool_timeout_is_120_seconds(autojump_clock):
    @tool
    async def hang() -> str:
        """Hang."""
        await trio.sleep(10_000)
        return "late"

    start = trio.current_time()
    _, res = await call_once(hang)
    assert res.is_error and "timed out" in res.content
    assert 120 <= trio.current_time() - start < 121


async def test_an_async_tool_that_never_awaits_runs_without_a_timeout_scope():
    # it cannot reach a checkpoint, so a timeout could never fire in it: none is set up
    deadlines = {}

    @tool
    async def instant() -> str:
        """Answer at once."""
        deadlines["instant"] = trio.current_effective_deadline()
        return "now"

    @tool
    async def waits() -> str:
        """Answer after a checkpoint."""
        deadlines["waits"] = trio.current_effective_deadline()
        await trio.lowlevel.checkpoint()
        return "later"

    _, instant_result = await call_once(instant, limits=Limits(tool_timeout=5))
    _, waits_result = await call_once(waits, limits=Limits(tool_timeout=5))
    assert (instant_result.content, waits_result.content) == ("now", "later")
    # the waiting one sees its 5 s tool timeout, the other only the run's own, later deadline
    assert deadlines["waits"] - 5 <= trio.current_time()
    assert deadlines["instant"] > deadlines["waits"] + 60


def _double(x: int) -> int:
    """Double a number.

    Args:
        x: the number
    """
    return 2 * x


async def _double_later(x: int) -> int:
    """Double a number after a checkpoint.

    Args:
        x: the number
    """
    await trio.lowlevel.checkpoint()
    return 2 * x


def _as_async(fn):
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def _as_async_after_a_checkpoint(fn):
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        await trio.lowlevel.checkpoint()
        return fn(*args, **kwargs)

    return wrapper


def _passing_the_coroutine_on(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize(
    "fn",
    [
        _as_async(_double),
        _as_async_after_a_checkpoint(_double),
        _passing_the_coroutine_on(_double_later),
    ],
    ids=["async-wrapper", "async-wrapper-that-awaits", "sync-wrapper-returning-a-coroutine"],
)
async def test_a_decorated_tool_runs_as_what_its_wrapper_returns(fn):
    _, res = await call_once(tool(fn, name="double"), {"x": 21}, limits=Limits(tool_timeout=5))
    assert (res.content, res.is_error) == ("42", False)


class _Doubler:
    """Double a number."""

    async def __call__(self, x: int) -> str:
        return str(2 * x)


async def _scale(factor: int, x: int) -> str:
    """Multiply a number."""
    return str(factor * x)


@pytest.mark.parametrize(
    "fn",
    [_Doubler(), functools.partial(_scale, 2)],
    ids=["callable-object", "partial"],
)
async def test_a_callable_object_or_a_partial_is_a_tool_described_by_what_it_calls(fn):
    t = tool(fn, name="double")
    assert list(t.input_schema["properties"]) == ["x"]
    assert t.description in ("Double a number.", "Multiply a number.")
    _, res = await call_once(t, {"x": 21}, limits=Limits(tool_timeout=5))
    assert (res.content, res.is_error) == ("42", False)


async def test_a_keyword_a_partial_binds_is_neither_shown_to_the_model_nor_settable_by_it():
    async def read_file(path: str, root: str) -> str:
        """Read a file under a root folder."""
        return f"read {root}/{path}"

    t = tool(functools.partial(read_file, root="/srv/sandbox"), name="read_file")
    assert list(t.input_schema["properties"]) == ["path"]
    assert "/srv/sandbox" not in json.dumps(t.input_schema)
    _, res = await call_once(t, {"path": "notes.txt"}, limits=Limits(tool_timeout=5))
    assert (res.content, res.is_error) == ("read /srv/sandbox/notes.txt", False)
    _, res = await call_once(t, {"path": "passwd", "root": "/etc"}, limits=Limits(tool_timeout=5))
    assert res.is_error and "/etc/passwd" not in res.content


def test_a_generator_function_is_not_a_tool():
    def numbers(n: int):  # type: ignore[no-untyped-def]
        """Count."""
        yield from range(n)

    async def stream(n: int):  # type: ignore[no-untyped-def]
        """Count slowly."""
        for i in range(n):
            yield i

    for fn in (numbers, stream):
        with pytest.raises(ConfigurationError, match="generator function"):
            tool(fn)


async def _awaits() -> None:
    await trio.lowlevel.checkpoint()


class _AsyncCallable:
    async def __call__(self) -> None:
        return None


def _never_waiting_cases():
    async def plain() -> int:
        return 1

    async def with_await() -> None:
        await trio.lowlevel.checkpoint()

    async def with_async_with() -> None:
        async with trio.open_nursery():
            pass

    async def with_async_for(items) -> None:
        async for _ in items:
            pass

    async def with_async_comprehension(items) -> list[int]:
        return [x async for x in items]

    async def awaits_in_a_branch(flag: bool) -> None:
        if flag:
            await trio.lowlevel.checkpoint()

    def sync() -> int:
        return 1

    def returns_a_coroutine():
        return _awaits()

    @functools.wraps(plain)
    async def wrapper() -> int:
        return await plain()

    return [
        (plain, True),
        (with_await, False),
        (with_async_with, False),
        (with_async_for, False),
        (with_async_comprehension, False),
        (awaits_in_a_branch, False),
        (sync, False),
        (returns_a_coroutine, False),
        (wrapper, False),
        (functools.partial(plain), False),
        (_AsyncCallable(), False),
    ]


@pytest.mark.parametrize(("fn", "expected"), _never_waiting_cases())
def test_only_an_async_def_without_any_suspension_point_counts_as_never_waiting(fn, expected):
    assert _never_waits(fn) is expected


# --- errors as results -----------------------------------------------------------------------


async def test_a_tool_that_raises_becomes_an_error_result_the_model_can_read():
    seen = []

    @tool
    def divide(a: int, b: int) -> float:
        """Divide."""
        return a / b

    def fn(request):
        seen.append(list(request.messages))
        if len(request.messages) == 1:
            return tool_call("divide", {"a": 1, "b": 0})
        return text("cannot divide by zero")

    result = await run(Agent("w", "x", model=FunctionModel(fn), tools=[divide]), "go")
    assert result.status is RunStatus.COMPLETED
    last_request = seen[-1]
    (res,) = [b for b in last_request[-1].content if b.type == "tool_result"]
    assert res.is_error
    assert "ZeroDivisionError" in res.content
    assert "division by zero" in res.content


async def test_a_tool_error_message_is_passed_to_the_model_verbatim():
    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise ToolError("Only https URLs are allowed; retry with https://.")

    _, res = await call_once(fetch, {"url": "http://x"})
    assert res.is_error
    assert res.content == "Only https URLs are allowed; retry with https://."


async def test_an_unknown_tool_becomes_an_error_result_listing_the_available_tools():
    model = ScriptedModel([tool_call("serch", {"query": "x"}), text("done")])
    agent = Agent("w", "x", model=model, tools=[search, tool(lambda_free_add)])
    result = await run(agent, "go")
    (res,) = results_of(result)
    assert res.is_error
    assert "serch" in res.content
    assert "search" in res.content.replace("serch", "")
    assert "lambda_free_add" in res.content


async def test_an_error_result_is_capped_like_any_result():
    @tool
    def fetch() -> str:
        """Fetch a page."""
        raise RuntimeError("HTTP 500: " + "<html>" * 100_000)

    _, res = await call_once(fetch, limits=Limits(max_result_chars=1_000))
    assert res.is_error and res.content.startswith("tool 'fetch' raised RuntimeError: HTTP 500")
    assert len(res.content) < 1_200 and "truncated" in res.content


async def test_a_refusal_naming_a_huge_unknown_tool_is_capped():
    model = ScriptedModel([tool_call("x" * 200_000, {}), text("done")])
    agent = Agent("w", "x", model=model, tools=[search])
    result = await run(agent, "go", limits=Limits(max_result_chars=1_000))
    (res,) = results_of(result)
    assert res.is_error and len(res.content) < 1_200


async def test_a_long_list_of_bad_arguments_names_the_first_problems_only():
    @tool
    def total(values: list[int]) -> int:
        """Add numbers up."""
        return sum(values)

    _, res = await call_once(total, {"values": ["x"] * 5_000})
    assert res.is_error
    assert "values.0: " in res.content and "and 4990 more" in res.content
    assert len(res.content) < 2_000


@pytest.mark.parametrize("raised", [ToolError(), ToolError("  "), RuntimeError()])
async def test_an_error_without_a_message_still_says_the_call_failed(raised):
    # the Messages API refuses an empty is_error result with a 400 that would end the run
    @tool
    def quiet() -> str:
        """Fail quietly."""
        raise raised

    _, res = await call_once(quiet)
    assert res.is_error and res.content.strip()


async def test_an_empty_string_result_is_shown_as_no_output():
    @tool
    def silent() -> str:
        """Say nothing."""
        return ""

    _, res = await call_once(silent)
    assert not res.is_error and res.content == "(no output)"


async def test_a_tool_calling_sys_exit_gets_an_error_result_and_the_run_goes_on():
    # argparse exits on arguments it refuses: that is the tool's failure, not the program's
    @tool
    def cli(argv: list[str]) -> str:
        """Run the command line."""
        raise SystemExit(2)

    @tool
    async def cli_async(argv: list[str]) -> str:
        """Run the command line."""
        raise SystemExit("usage: cli [-h]")

    @tool
    async def cli_in_a_task(argv: list[str]) -> str:
        """Run the command line in a task of its own."""

        async def main() -> None:
            raise SystemExit(2)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(main)
        return "never"

    for t in (cli, cli_async, cli_in_a_task):
        _, res = await call_once(t, {"argv": ["--bogus"]})
        assert res.is_error and "SystemExit" in res.content, res.content


async def test_errors_from_a_tools_own_nursery_reach_the_model_with_their_messages():
    @tool
    async def fan_out() -> str:
        """Fetch two pages at once."""

        async def fail(message: str) -> None:
            raise ConnectionError(message)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail, "host a unreachable")
        return "never"

    @tool
    async def refuse() -> str:
        """Refuse from a task."""

        async def no() -> None:
            raise ToolError("Ask for one page at a time.")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(no)
        return "never"

    _, res = await call_once(fan_out)
    assert res.is_error and "ConnectionError: host a unreachable" in res.content
    _, res = await call_once(refuse)
    assert res.is_error and res.content == "Ask for one page at a time."


def lambda_free_add(a: int, b: int) -> int:
    """Add."""
    return a + b


# --- retries ---------------------------------------------------------------------------------


async def test_an_idempotent_tool_is_retried_with_backoff_until_it_succeeds(autojump_clock):
    attempts = []

    @tool(idempotent=True)
    async def flaky() -> str:
        """Flaky read."""
        attempts.append(trio.current_time())
        if len(attempts) < 3:
            raise ConnectionError("reset by peer")
        return "data"

    _, res = await call_once(flaky)
    assert not res.is_error
    assert res.content == "data"
    assert len(attempts) == 3
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(g > 0 for g in gaps), "retries must back off, not spin"


async def test_an_idempotent_tool_that_keeps_failing_is_tried_a_bounded_number_of_times(
    autojump_clock,
):
    attempts = []

    @tool(idempotent=True, max_retries=4)
    async def broken() -> str:
        """Always fails."""
        attempts.append(1)
        raise ConnectionError("down")

    _, res = await call_once(broken)
    assert res.is_error
    assert "ConnectionError" in res.content
    assert len(attempts) == 5


async def test_a_tool_not_marked_idempotent_is_never_retried(autojump_clock):
    attempts = []

    @tool
    async def send_email(to: str) -> str:
        """Send an email."""
        attempts.append(to)
        raise ConnectionError("smtp down")

    _, res = await call_once(send_email, {"to": "a@b.c"})
    assert res.is_error
    assert attempts == ["a@b.c"]


async def test_a_tool_error_is_the_tools_final_word_and_is_not_retried(autojump_clock):
    attempts = []

    @tool(idempotent=True, max_retries=4)
    async def fetch(url: str) -> str:
        """Fetch a page."""
        attempts.append(url)
        raise ToolError("Only https URLs are allowed.")

    _, res = await call_once(fetch, {"url": "http://x"})
    assert res.is_error and res.content == "Only https URLs are allowed."
    assert attempts == ["http://x"]


async def test_an_idempotent_tool_that_times_out_is_not_retried(autojump_clock):
    # three attempts would turn a 5 s tool_timeout into 15 s (the probe saw 15 s become 45 s)
    attempts = []

    @tool(idempotent=True, max_retries=2)
    async def slow() -> str:
        """Slow every time."""
        attempts.append(trio.current_time())
        await trio.sleep(100)
        return "never"

    start = trio.current_time()
    _, res = await call_once(slow, limits=Limits(tool_timeout=5))
    assert res.is_error and "timed out after 5s" in res.content
    assert len(attempts) == 1
    assert trio.current_time() - start == pytest.approx(5, abs=0.01)


async def test_the_tool_timeout_covers_every_attempt_of_an_idempotent_tool(autojump_clock):
    attempts = []

    @tool(idempotent=True, max_retries=5)
    async def flaky() -> str:
        """Fails after 2 s, every time."""
        attempts.append(trio.current_time())
        await trio.sleep(2)
        raise ConnectionError("reset by peer")

    start = trio.current_time()
    _, res = await call_once(flaky, limits=Limits(tool_timeout=5))
    assert res.is_error
    assert 2 <= len(attempts) <= 3  # retried, within the 5 s: not six attempts of 2 s
    assert trio.current_time() - start <= 5 + 0.01


async def test_an_idempotent_tool_that_fails_fast_is_retried_within_its_timeout(autojump_clock):
    attempts = []

    @tool(idempotent=True, max_retries=1)
    async def flaky() -> str:
        """Fails once, then answers."""
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("reset by peer")
        return "fast now"

    _, res = await call_once(flaky, limits=Limits(tool_timeout=5))
    assert len(attempts) == 2
    assert res.content == "fast now"


# --- result size and content ------------------------------------------------------------------


async def test_a_result_past_max_result_chars_is_cut_with_a_visible_truncated_marker():
    @tool
    def dump() -> str:
        """Dump a lot."""
        return "x" * 5000

    _, res = await call_once(dump, limits=Limits(max_result_chars=100))
    assert res.content.startswith("x" * 100)
    assert "x" * 101 not in res.content
    assert "truncated" in res.content.lower()
    assert len(res.content) < 5000


async def test_a_result_within_max_result_chars_is_untouched():
    @tool
    def small() -> str:
        """Small."""
        return "y" * 100

    _, res = await call_once(small, limits=Limits(max_result_chars=100))
    assert res.content == "y" * 100


class Point(pydantic.BaseModel):
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "check"),
    [
        ({"answer": 42}, lambda c: json.loads(c) == {"answer": 42}),
        ([1, "two"], lambda c: json.loads(c) == [1, "two"]),
        (Point(x=1, y=2), lambda c: json.loads(c) == {"x": 1, "y": 2}),
        (7, lambda c: c == "7"),
        (None, lambda c: c.strip() != ""),
        (b"\x00\x01\x02", lambda c: "3" in c and "byte" in c.lower()),
    ],
    ids=["dict", "list", "pydantic", "int", "none", "bytes"],
)
async def test_a_non_text_return_value_is_turned_into_readable_text(value, check):
    @tool
    def produce() -> object:
        """Produce a value."""
        return value

    _, res = await call_once(produce)
    assert isinstance(res.content, str)
    assert not res.is_error
    assert check(res.content), res.content


async def test_lone_surrogates_in_a_result_or_an_error_become_replacement_characters():
    # a file name decoded with surrogateescape is a str that no HTTP body can carry
    @tool
    def listing() -> str:
        """List files."""
        return "caf\udce9.txt, \ud83d\ude00.txt"

    @tool
    def opening() -> str:
        """Open a file."""
        raise FileNotFoundError("no such file: caf\udce9.txt")

    _, res = await call_once(listing)
    assert res.content == "caf\ufffd.txt, \U0001f600.txt"  # a split pair is joined again
    _, err = await call_once(opening)
    assert err.is_error and "no such file: caf\ufffd.txt" in err.content
    for content in (res.content, err.content):
        content.encode("utf-8")


class Inner(pydantic.BaseModel):
    k: list[int]


class Outer(pydantic.BaseModel):
    x: int
    inner: Inner


class Raw(pydantic.BaseModel):
    data: bytes


async def test_models_nested_in_a_result_are_shown_as_json_data():
    @tool
    def listing() -> list[Outer]:
        """List things."""
        return [Outer(x=1, inner=Inner(k=[1, 2]))]

    _, res = await call_once(listing)
    assert json.loads(res.content) == [{"x": 1, "inner": {"k": [1, 2]}}]


async def test_a_model_json_cannot_hold_is_still_a_successful_result():
    # the call ran (with its side effects): an error result would invite a second call
    @tool
    def read() -> Raw:
        """Read raw bytes."""
        return Raw(data=b"\xff\xfe")

    _, res = await call_once(read)
    assert not res.is_error and "data" in res.content


# --- bad definitions ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["has space", "lookup\n", "x" * 65, "naïve"])
def test_a_tool_name_the_api_would_refuse_is_rejected_when_defined(name: str) -> None:
    with pytest.raises(ConfigurationError, match="tool name"):
        tool(name=name)(lambda_free_add)


@pytest.mark.parametrize("name", ["", "has space", "helper\n", "x" * 65, "-dash-first"])
def test_an_agent_name_outside_the_allowed_pattern_is_rejected(name: str) -> None:
    with pytest.raises(ConfigurationError):
        Agent(name, "Help.")


def test_two_tools_with_one_name_in_an_agent_are_rejected_naming_it():
    @tool(name="lookup")
    def a(x: str) -> str:
        """A."""
        return x

    @tool(name="lookup")
    def b(x: str) -> str:
        """B."""
        return x

    with pytest.raises(ConfigurationError, match="lookup"):
        Agent("w", "x", tools=[a, b])


def test_a_user_tool_named_spawn_subagent_is_rejected():
    def spawn_subagent(agent: str, task: str) -> str:
        """My own spawner."""
        return task

    with pytest.raises(ConfigurationError, match="spawn_subagent"):
        tool(spawn_subagent)
    with pytest.raises(ConfigurationError, match="spawn_subagent"):
        tool(name="spawn_subagent")(lambda_free_add)
    with pytest.raises(ConfigurationError, match="spawn_subagent"):
        Agent("w", "x", tools=[spawn_subagent])


def test_a_tool_parameter_without_a_type_hint_is_rejected_naming_it():
    def untyped(query) -> str:  # type: ignore[no-untyped-def]
        """Untyped."""
        return str(query)

    with pytest.raises(ConfigurationError, match="query") as info:
        tool(untyped)
    assert "untyped" in str(info.value)


def test_a_plain_function_in_an_agents_tools_is_checked_like_a_tool():
    def untyped(query) -> str:  # type: ignore[no-untyped-def]
        """Untyped."""
        return str(query)

    with pytest.raises(ConfigurationError, match="untyped"):
        Agent("w", "x", tools=[untyped])


def test_a_non_callable_approver_is_rejected():
    with pytest.raises(ConfigurationError, match="approver"):
        Policy(rules={"search": "confirm"}, approver="yes please")  # type: ignore[arg-type]


def test_tool_rejects_something_that_is_not_a_function():
    with pytest.raises(ConfigurationError):
        tool(42)  # type: ignore[call-overload]


async def test_another_librarys_exception_is_typed_with_its_module_so_it_is_not_taken_for_ours():
    # a client library's own "ToolError" must not read as the tool's deliberate ToolError
    ForeignToolError = type("ToolError", (Exception,), {"__module__": "somelib.errors"})

    @tool
    async def client() -> str:
        """Call a library that fails."""
        raise ForeignToolError("backend down")

    model = ScriptedModel([[tool_call("client", {})], text("done")])
    result = await run(Agent("w", "x", model=model, tools=[client]), "go")
    (failed,) = results_of(result)
    assert failed.is_error and failed.error_type == "somelib.errors.ToolError"
    assert "ToolError: backend down" in failed.content


async def test_a_failed_calls_error_type_names_the_kind_of_failure(autojump_clock):
    @tool
    async def slow() -> str:
        """Take too long."""
        await trio.sleep(1_000)
        return "late"

    @tool
    async def crash() -> str:  # async: the virtual clock jumps while a worker thread works
        """Crash."""
        raise KeyError("x")

    @tool
    async def refuse() -> str:
        """Refuse."""
        raise ToolError("no")

    @tool
    def needs(n: int) -> int:
        """Needs a number."""
        return n

    model = ScriptedModel(
        [
            [
                tool_call("slow", {}),
                tool_call("crash", {}),
                tool_call("refuse", {}),
                tool_call("needs", {"n": "x"}),
                tool_call("nope", {}),
            ],
            text("done"),
        ]
    )
    agent = Agent("w", "x", model=model, tools=[slow, crash, refuse, needs])
    result = await run(agent, "go", limits=Limits(tool_timeout=5))
    kinds = [r.error_type for r in results_of(result)]
    assert kinds == ["timeout", "KeyError", "ToolError", "invalid_arguments", "refused"]
    # not part of what the model is sent, nor of equality
    first = results_of(result)[0]
    assert first == ToolResultBlock(first.tool_use_id, first.content, True)
    assert "error_type" not in json.dumps(to_wire(first))


async def test_an_idempotent_tools_exception_named_like_ours_is_still_retried(autojump_clock):
    # only our own ToolError is final: another library's class of that name is an error
    other_tool_error = type("ToolError", (Exception,), {})  # as another library names it
    attempts = []

    @tool(idempotent=True, max_retries=2)
    async def flaky() -> str:
        """Fail once."""
        attempts.append(1)
        if len(attempts) == 1:
            raise other_tool_error("transient")
        return "ok"

    _, res = await call_once(flaky)
    assert not res.is_error and res.content == "ok" and len(attempts) == 2


def test_a_tool_can_still_be_called_as_the_function_it_was() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert add(2, 3) == 5 and add.fn(2, b=3) == 5


def test_a_tool_decorated_inside_a_class_says_to_use_the_bound_method() -> None:
    class Store:
        def get(self, key: str) -> str:
            """Get a value."""
            return key

    with pytest.raises(ConfigurationError, match=r"tool\(instance\.get\)"):
        tool(name="fetch")(Store.get)
    assert tool(Store().get).input_schema["properties"].keys() == {"key"}


def test_a_tool_is_not_made_a_tool_again() -> None:
    with pytest.raises(ConfigurationError, match="needs a function"):
        tool(search)


def _add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


def _echo(arguments: dict) -> str:
    return str(arguments)


def test_a_tool_pickles_as_its_function_and_options_and_validates_on_the_other_side() -> None:
    import pickle

    import cloudpickle  # type: ignore[import-untyped, unused-ignore]  # the dask extra's

    made = tool(idempotent=True, max_retries=4)(_add)
    again = pickle.loads(pickle.dumps(made))
    assert (again.name, again.description, again.idempotent, again.max_retries) == (
        made.name,
        made.description,
        True,
        4,
    )
    assert again.input_schema == made.input_schema
    assert again.validate({"a": 2}) == {"a": 2, "b": 1}
    with pytest.raises(pydantic.ValidationError):
        again.validate({"a": "two"})
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    described = Tool.from_schema("echo", "Echo.", schema, _echo)
    # its function wraps the handler in a closure: cloudpickle (what runners send with) takes it
    back = pickle.loads(cloudpickle.dumps(described))
    assert type(back) is type(described) and back.input_schema == schema
    assert back.validate({"q": "x"}) == {"q": "x"}
    with pytest.raises(pydantic.ValidationError):
        back.validate({"q": 3})
