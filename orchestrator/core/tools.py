"""Tool definition: ``@tool``, :class:`Tool`, its schema and validator, and how results read.

A tool is a sync or async function with type hints and a docstring. ``@tool`` builds a pydantic
model from the signature (so the model sees a JSON schema, and arguments are validated before
the call) and reads parameter descriptions from the docstring's ``Args:`` section. A first
parameter annotated :class:`ToolContext` is injected by the runtime and left out of the schema.
Running a call is :mod:`.execute`'s; the wording it shares with the agent state and the loop
(``to_content``, ``describe_exception``, ``error_result``) sits here, below both. Past ~500 lines
as one concern: signature, hints and docstring become one schema and one validator, read whole.
"""

from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pydantic
import trio
from opentelemetry import trace

from ..models.base import ModelResponse, ToolSpec
from .errors import ConfigurationError, ToolError
from .ledger import text_units
from .messages import (
    MAX_NESTING,
    Block,
    RedactedThinkingBlock,
    RefusedInput,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    canonical_json,
    clamp_usage,
    is_blank,
    nesting_exceeds,
    well_formed,
)
from .records import record
from .redact import redact

if TYPE_CHECKING:
    from .runner import Parent

__all__ = ["NotedResult", "SchemaTool", "Tool", "ToolContext", "tool"]

F = TypeVar("F", bound=Callable[..., Any])
_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # fullmatch ("$" allows "x\n")
RESERVED_TOOL_NAMES = frozenset({"spawn_subagent"})
NO_OUTPUT = "(no output)"
MAX_ERROR_CHARS = 100_000
"""The cap of an error result made outside a tool call (the loop's refusals)."""


@record
class NotedResult:
    """A runtime tool's answer (``spawn_subagent``'s) with notes that follow it as text blocks
    of their own (:attr:`~.messages.ToolResultBlock.notes`); ``is_error``: the call failed and
    ``text`` says why."""

    text: str
    notes: tuple[str, ...] = ()
    is_error: bool = False


@record
class ToolContext:
    """What the runtime tells a tool about the call it is serving.

    Declare a first parameter annotated ``ToolContext`` to receive it; it never appears in the
    tool's schema. ``deps`` is whatever the caller passed to ``run(..., deps=...)``.
    """

    run_id: str
    agent_name: str
    agent_path: str
    depth: int
    deps: Any = None
    tool_call_id: str = ""
    turn: int = 0
    """The calling agent's turn (from 1): with ``agent_path`` and ``tool_call_id``, where the
    call sits in the run."""
    span: trace.Span = field(default=trace.INVALID_SPAN, repr=False, compare=False)
    """The call's ``execute_tool`` span (a non-recording one when the run is not traced): a
    tool calling a service passes its context on (an MCP request's ``_meta``)."""
    _parent: Parent | None = field(default=None, repr=False, compare=False)
    """For the runtime's spawn tool only: the calling agent's side of the children it starts
    (not part of what a tool may use)."""


@dataclass(frozen=True, slots=True)
class ToolRuntime:
    """Per-agent execution settings for tool calls (internal)."""

    timeout: float
    max_result_chars: int
    thread_limiter: trio.CapacityLimiter
    on_abandoned_thread: Callable[[], None] = lambda: None


class Tool:
    """A callable the model may ask for, with its schema and validation.

    Build tools with :func:`tool`; instances are immutable and can be shared by many agents.
    """

    __slots__ = (
        "_plain_fields",
        "_spec",
        "_validator",
        "args_model",
        "checks_in_thread",
        "description",
        "fn",
        "idempotent",
        "input_schema",
        "is_async",
        "max_retries",
        "name",
        "never_waits",
        "runtime_tool",
        "spec_chars",
        "takes_context",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        max_retries: int = 2,
        _allow_reserved: bool = False,
        _runtime_tool: bool = False,
    ) -> None:
        if not callable(fn) or isinstance(fn, Tool):
            raise ConfigurationError(f"@tool needs a function, got {fn!r}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME_RE.fullmatch(self.name):
            raise ConfigurationError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if self.name in RESERVED_TOOL_NAMES and not _allow_reserved:
            raise ConfigurationError(
                f"tool name {self.name!r} is reserved for the runtime; rename the tool"
            )
        runs = _annotated(fn)
        if inspect.isgeneratorfunction(runs) or inspect.isasyncgenfunction(runs):
            raise ConfigurationError(
                f"tool {self.name!r} is a generator function; a tool returns its whole result "
                "(collect the items into a list or a string)"
            )
        doc = runs.__doc__  # its own (inspect.getdoc would find "Call self as a function.")
        if doc is None and not isinstance(fn, functools.partial):  # not functools' docstring
            doc = inspect.getdoc(fn)  # a callable object's class
        summary, param_docs = _parse_docstring(inspect.cleandoc(doc) if doc else "")
        self.description = description if description is not None else summary
        self.idempotent = idempotent
        self.max_retries = max_retries if idempotent else 0
        self.runtime_tool = _runtime_tool  # spawn_subagent: no timeout, bugs propagate
        # what runs is ``fn`` itself (an ``async def`` wrapper of a sync function is async), but
        # a sync wrapper returning the coroutine of an ``async def`` it wraps is async too
        self.is_async = (
            inspect.iscoroutinefunction(fn)
            or inspect.iscoroutinefunction(inspect.unwrap(fn))
            or inspect.iscoroutinefunction(
                getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
            )
        )
        self.never_waits = _never_waits(fn)
        self.checks_in_thread = False
        """Arguments checked in a worker thread, under the call's timeout (a schema pattern may
        backtrack for minutes on a model-chosen string): see :class:`SchemaTool`."""
        """An ``async def`` whose body has no ``await``: it cannot reach a checkpoint."""
        self.takes_context, self.args_model, schema = _build_args_model(self.name, fn, param_docs)
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        self.input_schema: dict[str, Any] = schema
        self._spec = ToolSpec(self.name, self.description, self.input_schema)
        self._validator = self.args_model.__pydantic_validator__
        self._plain_fields = _plain_fields(self.args_model)
        self.spec_chars = (
            len(self.name) + text_units(self.description) + text_units(canonical_json(schema))
        )
        """The tool's size in the prompt, for input estimates (quarter tokens: ``text_units``)."""

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        handler: Callable[..., Any],
        *,
        idempotent: bool = False,
        max_retries: int = 2,
        takes_context: bool = False,
    ) -> Tool:
        """A tool described by a JSON schema instead of a signature (an MCP server's, an API's).

        ``handler(arguments)`` (sync or async; ``handler(ctx, arguments)`` with
        ``takes_context=True``) receives the call's arguments as one dict, after they were
        checked against ``input_schema`` (see :mod:`.schema` for the keywords enforced): a call
        that fails the check is an ``is_error`` result naming each problem, and the handler is
        not called. The model sees ``input_schema`` as given. ``idempotent`` and
        ``max_retries`` mean what they mean for :func:`tool`.
        """
        from .schema import schema_tool  # the checker: only loaded by tools that need it

        tool: Tool = schema_tool(
            cls,
            name,
            description,
            input_schema,
            handler,
            idempotent=idempotent,
            max_retries=max_retries,
            takes_context=takes_context,
        )
        return tool

    def __reduce__(self) -> tuple[Callable[..., Tool], tuple[Any, ...]]:
        """A tool pickles as its function and options, and is built again where it lands (its
        argument model and validator are made at run time): what lets a runner send an agent's
        tools to another process."""
        options = {
            "name": self.name,
            "description": self.description,
            "idempotent": self.idempotent,
            "max_retries": self.max_retries if self.idempotent else 2,
            "_allow_reserved": self.runtime_tool,
            "_runtime_tool": self.runtime_tool,
        }
        return _rebuild_tool, (self.fn, options)

    @classmethod
    def _schema_tool(
        cls,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        check: Callable[[Any, tuple[str | int, ...], list[Any]], None],
        is_async: bool,
        idempotent: bool,
        max_retries: int,
        takes_context: bool,
    ) -> SchemaTool:
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise ConfigurationError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
        if name in RESERVED_TOOL_NAMES:
            raise ConfigurationError(
                f"tool name {name!r} is reserved for the runtime; rename the tool"
            )
        t = object.__new__(SchemaTool)
        t.fn = fn
        t.name = name
        t.description = description
        t.idempotent = idempotent
        t.max_retries = max_retries if idempotent else 0
        t.runtime_tool = False
        t.is_async = is_async
        t.never_waits = False
        from .schema import has_patterns  # loaded: the schema was just compiled

        t.checks_in_thread = has_patterns(input_schema)
        t.takes_context = takes_context
        t.args_model = None  # type: ignore[assignment]  # no signature: the schema is the model
        t.input_schema = input_schema
        t._spec = ToolSpec(name, description, input_schema)
        t._validator = None  # type: ignore[assignment]  # SchemaTool.validate checks instead
        t._plain_fields = None
        t._check = check
        t.spec_chars = (
            len(name) + text_units(description) + text_units(canonical_json(input_schema))
        )
        return t

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return self._spec

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as code and tests may (no validation, timeout or retry:
        that is the runtime's when the model calls it)."""
        return self.fn(*args, **kwargs)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments for the function; raises pydantic's ValidationError."""
        plain = self._plain_fields
        if plain is not None and type(arguments) is dict:
            # Arguments that are already exactly what every field declares (the common case
            # for str/int/float/bool parameters) are what pydantic would return: no need to
            # build its model instance. Anything else (a conversion, an error) goes to it.
            kwargs: dict[str, Any] = {}
            given = 0
            for name, kind, default in plain:
                if name in arguments:
                    value = arguments[name]
                    if type(value) is not kind:
                        break
                    kwargs[name] = value
                    given += 1
                elif default is _REQUIRED:
                    break
                else:
                    kwargs[name] = default
            else:
                if given == len(arguments):  # no extra keys (the model forbids them)
                    return kwargs
        if type(arguments) is RefusedInput:  # input the runtime did not keep: never runs
            raise pydantic.ValidationError.from_exception_data(
                self.name,
                [{"type": "value_error", "loc": (), "input": {}, "ctx": {"error": _TOO_DEEP}}],
            )
        # the validator itself (model_validate adds a Python-level call), and the instance's
        # __dict__, which holds exactly the declared fields
        return dict(self._validator.validate_python(arguments).__dict__)


def _rebuild_tool(fn: Callable[..., Any], options: dict[str, Any]) -> Tool:
    return Tool(fn, **options)


def _rebuild_schema_tool(fn: Callable[..., Any], options: dict[str, Any]) -> Tool:
    from .schema import compile_schema  # checked as an input schema where it was made

    check = compile_schema(options["input_schema"], options["name"])
    return Tool._schema_tool(fn, check=check, **options)


class SchemaTool(Tool):
    """A tool made by :meth:`Tool.from_schema`: its arguments are checked against its JSON
    schema, and passed to the handler as one dict."""

    __slots__ = ("_check",)
    _check: Callable[[Any, tuple[str | int, ...], list[Any]], None]

    def __reduce__(self) -> tuple[Callable[..., Tool], tuple[Any, ...]]:
        """Pickled as its handler and schema; the check is compiled again where it lands."""
        options = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "is_async": self.is_async,
            "idempotent": self.idempotent,
            "max_retries": self.max_retries,
            "takes_context": self.takes_context,
        }
        return _rebuild_schema_tool, (self.fn, options)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments, checked against the schema; raises pydantic's ValidationError (as
        every tool's validation does) listing each problem."""
        if type(arguments) is RefusedInput:
            return super().validate(arguments)  # the nesting refusal, worded once
        problems: list[Any] = []
        try:
            self._check(arguments, (), problems)
        except Exception as exc:  # the check failed itself: refused, never run unchecked
            from .schema import unchecked

            problems.append(unchecked(exc))
        if problems:
            from .schema import validation_error

            raise validation_error(self.name, problems)
        return dict(arguments)


_TOO_DEEP = ValueError(
    f"the arguments were nested deeper than {MAX_NESTING} levels (objects and arrays inside "
    f"each other), which the runtime does not accept; the call was not run. Send arguments "
    f"nested at most {MAX_NESTING} levels deep (pass deeper data as a JSON string)",
)


def unique_call_ids(content: tuple[Block, ...]) -> tuple[Block, ...]:
    """The blocks with every tool call's id unique: the first call with an id keeps it, a
    later one gets ``id~2`` (``~3``...: the first suffix no call of the reply has). Worked out
    from the reply alone, so a reply replayed from a journal gets the same ids again."""
    given = {b.id for b in content if isinstance(b, ToolUseBlock)}
    taken: set[str] = set()
    out: list[Block] = []
    for block in content:
        if isinstance(block, ToolUseBlock):
            new_id = block.id
            if new_id in taken:
                n = 2
                while f"{block.id}~{n}" in given or f"{block.id}~{n}" in taken:
                    n += 1
                new_id = f"{block.id}~{n}"
                block = dataclasses.replace(block, id=new_id)
            taken.add(new_id)
        out.append(block)
    return tuple(out)


def admit_response(response: ModelResponse) -> ModelResponse:
    """A model's reply as the runtime takes it in: where every reply enters, before anything
    (spans, the transcript, the repeat guard, the next request) walks it.

    A tool call whose input nests past :data:`MAX_NESTING` keeps its id and name with a
    :class:`RefusedInput` in place of its input, which validation answers with an ``is_error``
    result naming the limit (the model can send flatter arguments). Usage is clamped
    (:func:`clamp_usage`). Tool-call ids are made unique within the reply
    (:func:`unique_call_ids`): the journal keys a call by (agent, turn, id), and a stateless API
    pairs each call with its result by id in the next request. A reply that is not made of what a reply holds (text, thinking and
    tool-use blocks with string fields, a string ``stop_reason``, a ``Usage``) raises
    ``TypeError`` saying what is wrong: the caller ends the agent with ``error``, as for any
    broken adapter. The reply itself is returned when nothing needs changing.
    """
    # Every reply passes here: exact-class checks first, the full ones only when they fail.
    content = response.content
    if content.__class__ is not tuple:
        content = tuple(content)
    deep = False
    flat = _FLAT_VALUES
    ids: list[str] = []
    for block in content:
        kind = block.__class__
        if kind is TextBlock:
            if block.text.__class__ is not str:  # type: ignore[union-attr]
                _check_block(block)
        elif kind is ToolUseBlock:
            if block.id.__class__ is not str or block.name.__class__ is not str:  # type: ignore[union-attr]
                _check_block(block)
            ids.append(block.id)  # type: ignore[union-attr]
            arguments = block.input  # type: ignore[union-attr]
            if arguments.__class__ is dict:
                for value in arguments.values():  # most arguments: plain values, one level
                    if value.__class__ not in flat:
                        deep = deep or nesting_exceeds(arguments)
                        break
            else:
                deep = deep or nesting_exceeds(arguments)
        else:
            _check_block(block)
    if deep:
        content = tuple(_admitted_block(b) for b in content)
    if len(ids) > 1 and len(set(ids)) < len(ids):
        content = unique_call_ids(content)
    if response.stop_reason.__class__ is not str and not isinstance(response.stop_reason, str):
        raise TypeError(
            f"the model's reply has stop_reason {_what(response.stop_reason)}, not a string"
        )
    usage = response.usage
    if usage.__class__ is not Usage and not isinstance(usage, Usage):
        raise TypeError(f"the model's reply has usage {_what(usage)}, not a Usage")
    usage = clamp_usage(usage)
    if content is response.content and usage is response.usage:
        return response
    return dataclasses.replace(response, content=content, usage=usage)


_FLAT_VALUES = frozenset({str, int, float, bool, type(None)})


def _check_block(block: object) -> None:
    """The full check of one block of a reply (a subclass, a thinking block, a field of a
    ``str`` subclass, or something that is no block): raises ``TypeError`` saying what is
    wrong with it."""
    if isinstance(block, ToolUseBlock):
        if not isinstance(block.id, str) or not isinstance(block.name, str):
            _malformed(block, ("id", "name"))
    elif isinstance(block, TextBlock):
        if not isinstance(block.text, str):
            _malformed(block, ("text",))
    elif isinstance(block, ThinkingBlock):
        if not isinstance(block.thinking, str) or not isinstance(block.signature, str):
            _malformed(block, ("thinking", "signature"))
    elif isinstance(block, RedactedThinkingBlock):
        if not isinstance(block.data, str):
            _malformed(block, ("data",))
    elif isinstance(block, ServerToolUseBlock | ServerToolResultBlock):
        if not isinstance(block.data, Mapping):
            _malformed(block, ("data",))
    else:
        raise TypeError(
            f"the model's reply holds {_what(block)}; a reply holds text, thinking, tool_use "
            "and hosted tools' blocks"
        )


def _what(value: object) -> str:
    """A short description of an unexpected value: its type and the start of its repr."""
    try:
        shown = repr(value)
    except Exception:  # a repr that raises, or one too deep to write
        shown = "..."
    return f"a {type(value).__name__} ({shown[:60]}{'...' if len(shown) > 60 else ''})"


def _malformed(block: Block, fields: tuple[str, ...]) -> None:
    found = ", ".join(f"{f} is {_what(getattr(block, f, None))}" for f in fields)
    raise TypeError(
        f"the model's reply holds a malformed {type(block).__name__} ({found}); "
        f"{' and '.join(fields)} must be {'strings' if len(fields) > 1 else 'a string'}"
    )


def _admitted_block(block: Block) -> Block:
    if isinstance(block, ToolUseBlock) and nesting_exceeds(block.input):
        return ToolUseBlock(block.id, block.name, RefusedInput())
    return block


@overload
def tool(fn: F, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    max_retries: int = 2,
) -> Callable[[F], Tool]: ...


def tool(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    max_retries: int = 2,
) -> Tool | Callable[[F], Tool]:
    """Turn a typed function into a :class:`Tool`: ``@tool`` or ``@tool(idempotent=True)``.

    Only ``idempotent=True`` tools are retried (up to ``max_retries`` times, with backoff) after
    an exception or a timeout: a timeout can happen after a side effect succeeded, so retrying a
    tool that mutates something is the caller's decision, not the runtime's. A ``ToolError`` is
    the tool's own final word and goes to the model at once, never retried.
    """

    def wrap(f: F) -> Tool:
        return Tool(
            f, name=name, description=description, idempotent=idempotent, max_retries=max_retries
        )

    return wrap(fn) if fn is not None else wrap


def _never_waits(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is an ``async def`` whose own body never suspends.

    A coroutine suspends only at a ``YIELD_VALUE`` (every ``await``, ``async for`` and ``async
    with`` compiles to one); without any, a call finishes in its first step and never reaches
    a trio checkpoint, so no timeout could ever interrupt it. Anything but a plain ``async def``
    (a partial, a callable object, a sync wrapper) is assumed to wait; an ``async def`` wrapper
    is judged by its own body, which is what runs. The one way around it is a greenlet portal
    (``greenback.await_`` called from sync code), which suspends a task without an ``await``
    in the coroutine: a tool doing that must have an ``await`` of its own to keep its timeout.
    """
    if not isinstance(fn, types.FunctionType) or not fn.__code__.co_flags & inspect.CO_COROUTINE:
        return False
    # co_code, which dis reads, is never the instrumented copy (INSTRUMENTED_YIELD_VALUE)
    return all("YIELD" not in ins.opname for ins in dis.get_instructions(fn.__code__))


_PARAM_SECTIONS = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
)
_OTHER_SECTIONS = frozenset(
    {
        "returns",
        "return",
        "raises",
        "yields",
        "yield",
        "examples",
        "example",
        "note",
        "notes",
        "see also",
        "warning",
        "warnings",
        "references",
        "attributes",
        "other parameters",
    }
)
_SPHINX_PARAM = re.compile(r":param\s+(?:[^:]*\s+)?(\w+):\s*(.*)")
_GOOGLE_PARAM = re.compile(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")
_NUMPY_PARAM = re.compile(r"(\w+)(?:\s*:.*)?")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and its parameter docs.

    Google (``Args:``), NumPy (``Parameters`` over a dashed line) and Sphinx (``:param x:``)
    styles. Other sections (``Returns``, ``Raises``, ``Examples`` ...) are left out of the
    description: the model reads the schema, not the function's contract with its callers.
    """
    lines = doc.splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None  # None: the description; "params"; "other"
    numpy = False
    header_indent = 0
    param_indent: int | None = None
    current: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        underline = lines[i + 1].strip() if i + 1 < len(lines) else ""
        dashed = len(underline) >= 3 and set(underline) == {"-"}
        name = stripped.rstrip(":").lower()
        if (stripped.endswith(":") or dashed) and name in _PARAM_SECTIONS | _OTHER_SECTIONS:
            section = "params" if name in _PARAM_SECTIONS else "other"
            numpy, header_indent, param_indent, current = dashed, indent, None, None
            i += 2 if dashed else 1
            continue
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx:
            params[sphinx.group(1)] = sphinx.group(2)
            i += 1
            continue
        if stripped.startswith(":"):  # other Sphinx fields (:returns:, :raises ...:)
            i += 1
            continue
        if section is not None and stripped and not numpy and indent <= header_indent:
            section = None  # a Google section ends where the text comes back to its margin
        if section is None:
            summary.append(line)
        elif section == "params" and stripped:
            if numpy:
                is_name = indent <= header_indent
                match = _NUMPY_PARAM.fullmatch(stripped) if is_name else None
            else:
                param_indent = indent if param_indent is None else param_indent
                is_name = indent <= param_indent
                match = _GOOGLE_PARAM.fullmatch(stripped) if is_name else None
            if match:
                current = match.group(1)
                params[current] = match.group(2) if not numpy else ""
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
        i += 1
    return "\n".join(summary).strip(), params


def _annotated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Where ``fn``'s code and type hints are: a partial's function, a callable object's
    ``__call__``, else ``fn`` itself."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return fn
    call: Callable[..., Any] = getattr(fn, "__call__", fn)  # noqa: B004 - a callable object
    return call


def _bound_keywords(fn: Callable[..., Any]) -> frozenset[str]:
    """Keyword arguments a partial (or a partial of a partial) fixes."""
    names: set[str] = set()
    while isinstance(fn, functools.partial):
        names.update(fn.keywords)
        fn = fn.func
    return frozenset(names)


def _mentions_context(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    return any(_mentions_context(a) for a in typing.get_args(annotation))


def _build_args_model(
    tool_name: str, fn: Callable[..., Any], param_docs: Mapping[str, str]
) -> tuple[bool, type[pydantic.BaseModel], dict[str, Any]]:
    """Whether ``fn`` takes a ToolContext, its arguments model, and that model's JSON schema."""
    try:
        hints = typing.get_type_hints(_annotated(fn), include_extras=True)
    except Exception as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: cannot resolve its type hints: {exc}"
        ) from exc
    takes_context = False
    fields: dict[str, Any] = {}
    bound = _bound_keywords(fn)
    for i, (pname, param) in enumerate(inspect.signature(fn).parameters.items()):
        if pname in bound:  # fixed by the code that made the tool: neither shown nor settable
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(
                f"tool {tool_name!r}: *args and **kwargs cannot be described to a model"
            )
        annotation = hints.get(pname, inspect.Parameter.empty)
        if typing.get_origin(annotation) is typing.Annotated:
            base = typing.get_args(annotation)[0]  # constraints stay on the field's annotation
        else:
            base = annotation
        if base is not ToolContext and _mentions_context(base):
            # an Optional[ToolContext] would be a model-supplied argument: a forged context
            raise ConfigurationError(
                f"tool {tool_name!r}: annotate {pname!r} as plain ToolContext (it is always "
                "given); any other type naming ToolContext would let the model fill it in"
            )
        if param.kind is param.POSITIONAL_ONLY and base is not ToolContext:
            raise ConfigurationError(
                f"tool {tool_name!r}: parameter {pname!r} is positional-only, but the model "
                "passes arguments by name"
            )
        if base is ToolContext:
            if i != 0:
                raise ConfigurationError(
                    f"tool {tool_name!r}: the ToolContext parameter must come first"
                )
            takes_context = True
            continue
        if annotation is inspect.Parameter.empty and pname in ("self", "cls") and i == 0:
            method = getattr(fn, "__name__", tool_name)
            raise ConfigurationError(
                f"tool {tool_name!r} is a method: make the tool from the bound method "
                f"(tool(instance.{method})), not with @tool in the class"
            )
        if annotation is inspect.Parameter.empty:
            raise ConfigurationError(
                f"tool {tool_name!r}: parameter {pname!r} has no type hint; "
                "annotate every parameter so its schema can be generated"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, pydantic.Field(default, description=param_docs.get(pname)))
    try:
        model = pydantic.create_model(
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        schema = model.model_json_schema()
    except Exception as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: its parameters have no JSON schema: {exc}"
        ) from exc
    lost = sorted(set(fields) - set(model.model_fields))
    if lost:  # names pydantic keeps for itself (model_config) are silently not fields
        raise ConfigurationError(
            f"tool {tool_name!r}: rename parameter(s) {lost}: pydantic keeps these names for "
            "itself, so they would never reach the function"
        )
    return takes_context, typing.cast(type[pydantic.BaseModel], model), schema


_REQUIRED = object()
_PLAIN_TYPES = (str, int, float, bool)
_PLAIN_DEFAULTS = (str, int, float, bool, type(None))


def _plain_fields(model: type[pydantic.BaseModel]) -> tuple[tuple[str, type, Any], ...] | None:
    """``(name, type, default)`` of each field if every one is a bare ``str``, ``int``,
    ``float`` or ``bool`` with no constraint, alias or mutable default; else ``None``.

    For such fields a value of exactly the declared type passes pydantic unchanged, and a
    missing one takes its default as it is (pydantic does not validate defaults), which is what
    :meth:`Tool.validate`'s fast path relies on.
    """
    plain: list[tuple[str, type, Any]] = []
    for name, info in model.model_fields.items():
        if (
            info.annotation not in _PLAIN_TYPES
            or info.metadata
            or info.alias is not None
            or info.validation_alias is not None
            or info.default_factory is not None
            or info.validate_default  # pydantic would convert the default
        ):
            return None
        if info.is_required():
            default: Any = _REQUIRED
        elif type(info.default) in _PLAIN_DEFAULTS:
            default = info.default
        else:
            return None
        plain.append((name, typing.cast(type, info.annotation), default))
    return tuple(plain)


def to_content(value: Any) -> str:
    """A tool's return value as the text the model reads.

    Raises ``ValueError`` for data nested deeper than :data:`MAX_NESTING` levels (the caller
    turns it into an error result): return such data as a string of its own.
    """
    if isinstance(value, str):
        # the API may refuse a blank result (is_blank, inline: every result passes here)
        return NO_OUTPUT if not value or value.isspace() else value
    if value is None:
        return NO_OUTPUT
    try:
        return _structured_content(value)
    except RecursionError:  # deep data inside a dataclass or a model: no walk of ours saw it
        raise ValueError(
            f"it is nested too deeply to write (the limit is {MAX_NESTING} levels)"
        ) from None


def _structured_content(value: Any) -> str:
    if isinstance(value, pydantic.BaseModel):
        try:
            return value.model_dump_json()
        except ValueError:  # pydantic could not serialize a field (say, non-UTF-8 bytes)
            return json.dumps(value.model_dump(), ensure_ascii=False, default=_json_default)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"(binary data, {len(value)} bytes, not shown)"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # its fields' depth, walked here: str() would recurse, and whether that ends in a
        # RecursionError depends on a process-wide limit any library may have raised
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        if nesting_exceeds(fields):
            raise ValueError(
                f"it is nested too deeply to write (the limit is {MAX_NESTING} levels)"
            )
    if isinstance(value, dict | list | tuple | int | float | bool):
        if type(value) not in _FLAT_RESULTS and nesting_exceeds(value):
            raise ValueError(f"it is nested deeper than {MAX_NESTING} levels")
        try:
            return json.dumps(value, ensure_ascii=False, default=_json_default)
        except (TypeError, ValueError):
            return repr(value)
    return str(value)


_FLAT_RESULTS = frozenset({int, float, bool})


def _json_default(value: Any) -> Any:
    """JSON for what ``json`` cannot write: models and dataclasses nested in a result as
    data, anything else as its ``str()``."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def describe_exception(exc: BaseException, *, with_type: bool = True) -> str:
    """``Type: message`` for an exception, even one whose ``str()`` raises.

    A group (a tool's own nursery wraps what its tasks raised) is described by its leaves:
    "Exceptions from Trio nursery" says nothing the model can act on.
    """
    if isinstance(exc, BaseExceptionGroup):
        leaves = _leaves(exc)
        described = [describe_exception(e, with_type=not isinstance(e, ToolError)) for e in leaves]
        return "; ".join(described)
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    return f"{type(exc).__name__}: {message}" if with_type else message


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """The exceptions in ``group`` that are not groups, in order, however deep the groups nest
    (iterative: a tool may raise a group of groups thousands deep)."""
    out: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(reversed(e.exceptions))
        else:
            out.append(e)
    return out


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a visible marker saying what was cut."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n[truncated: showing {limit} of {len(text)} characters; "
        "ask for a narrower range or a smaller page]"
    )


def error_result(
    call_id: str, message: str, limit: int = MAX_ERROR_CHARS, kind: str = "tool_error"
) -> ToolResultBlock:
    """An ``is_error`` result (redacted with the run's secret snapshot, see ``RUN_SECRETS``),
    capped like any result: an exception quoting a whole HTTP body, or a long list of bad
    arguments, must not fill the context window. ``kind`` is its ``error_type``."""
    if is_blank(message):  # the API refuses an empty is_error result (a fatal 400)
        message = "the call failed without an error message"
    return ToolResultBlock(call_id, cap(redact(well_formed(message)), limit), True, kind)
