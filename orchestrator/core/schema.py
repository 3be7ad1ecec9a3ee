"""Tools described by a JSON schema (``Tool.from_schema``) and the check of their arguments.

An MCP server, an OpenAPI description or a plugin hands over a tool as a name, a description
and a JSON schema of its input, not as a Python signature. :func:`schema_tool` wraps one so the
runtime treats it like any ``@tool``: the model sees the schema as given, and the arguments are
checked against it before the handler runs, so a bad call is an ``is_error`` result the model
can correct instead of a request the far side rejects, or worse, acts on.

The check covers the JSON Schema vocabulary that tool schemas use (``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``prefixItems``, ``enum``, ``const``, the
numeric and length bounds, ``pattern``, ``uniqueItems``, ``anyOf``, ``oneOf``, ``allOf``,
``not`` and local ``$ref`` into ``$defs`` / ``definitions``). Keywords outside it (``format``,
``if``/``then``, remote references...) are not enforced: the far side still checks them. The
schema is compiled once, when the tool is built, so a call pays only for the checks its schema
names; a schema the checker cannot read is a ConfigurationError then, not at the first call.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import pydantic

from .errors import ConfigurationError

__all__ = ["SchemaCheck", "compile_schema", "schema_tool"]

Problem = tuple[tuple[str | int, ...], str]
"""Where in the arguments (a path of keys and indexes) and what is wrong there."""
SchemaCheck = Callable[[Any, tuple[str | int, ...], list[Problem]], None]
"""A compiled schema: appends the problems of a value, found at a path, to a list."""

_MAX_PROBLEMS: Final = 20
"""A check stops collecting past this many problems (the model is shown the first ten)."""

_JSON_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list | tuple),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
}


def _json_type(value: Any) -> str:
    """The JSON type a value would have, for a message."""
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Compiler:
    """Compiles one schema document; ``$ref`` resolves against its root."""

    def __init__(self, root: Mapping[str, Any], tool_name: str) -> None:
        self.root = root
        self.tool_name = tool_name
        self.refs: dict[str, SchemaCheck] = {}

    def fail(self, why: str) -> ConfigurationError:
        return ConfigurationError(f"tool {self.tool_name!r}: its input schema {why}")

    def ref(self, pointer: str) -> SchemaCheck:
        if pointer in self.refs:
            return self.refs[pointer]
        if not pointer.startswith("#"):
            raise self.fail(f"has a $ref that is not local to it: {pointer!r}")
        target: Any = self.root
        for part in filter(None, pointer[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise self.fail(f"has a $ref that points nowhere: {pointer!r}")
            target = target[part]
        checks: list[SchemaCheck] = []

        def deferred(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            checks[0](value, path, out)  # compiled below; recursive schemas refer to themselves

        self.refs[pointer] = deferred
        checks.append(self.compile(target))
        return deferred

    def compile(self, schema: Any) -> SchemaCheck:
        if schema is True or schema == {}:
            return _accept
        if schema is False:
            return _refuse
        if not isinstance(schema, Mapping):
            raise self.fail(f"has {_shown(schema)} where a schema (an object) belongs")
        checks: list[SchemaCheck] = []
        if "$ref" in schema:
            checks.append(self.ref(str(schema["$ref"])))
        if "type" in schema:
            checks.append(self.types(schema["type"]))
        if "enum" in schema:
            checks.append(_enum(list(schema["enum"])))
        if "const" in schema:
            checks.append(_enum([schema["const"]]))
        checks.extend(self.numbers(schema))
        checks.extend(self.strings(schema))
        if any(k in schema for k in ("properties", "required", "additionalProperties")):
            checks.append(self.object(schema))
        if any(
            k in schema for k in ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")
        ):
            checks.append(self.array(schema))
        for keyword in ("anyOf", "oneOf", "allOf"):
            if keyword in schema:
                options = schema[keyword]
                if not isinstance(options, Sequence) or not options:
                    raise self.fail(f"has {keyword} that is not a list of schemas")
                checks.append(_combined(keyword, [self.compile(o) for o in options]))
        if "not" in schema:
            checks.append(_negated(self.compile(schema["not"])))
        if not checks:
            return _accept
        if len(checks) == 1:
            return checks[0]
        return _all_of(checks)

    def types(self, declared: Any) -> SchemaCheck:
        names = [declared] if isinstance(declared, str) else list(declared)
        unknown = [n for n in names if n not in _JSON_TYPES]
        if unknown or not names:
            raise self.fail(f"names an unknown type {_shown(declared)}")
        tests = [_JSON_TYPES[n] for n in names]
        wanted = " or ".join(names)

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            for test in tests:
                if test(value):
                    return
            out.append((path, f"expected {wanted}, got {_json_type(value)} {_shown(value)}"))

        return check

    def numbers(self, schema: Mapping[str, Any]) -> list[SchemaCheck]:
        bounds: list[tuple[str, float, Callable[[float, float], bool]]] = []
        for keyword, ok in (
            ("minimum", lambda v, b: v >= b),
            ("maximum", lambda v, b: v <= b),
            ("exclusiveMinimum", lambda v, b: v > b),
            ("exclusiveMaximum", lambda v, b: v < b),
            ("multipleOf", lambda v, b: math.isclose(v / b, round(v / b))),
        ):
            if keyword in schema:
                bound = schema[keyword]
                if isinstance(bound, bool) or not isinstance(bound, int | float):
                    raise self.fail(f"has {keyword} {_shown(bound)}, not a number")
                bounds.append((keyword, bound, ok))
        if not bounds:
            return []

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return  # "type" says whether it must be a number
            for keyword, bound, ok in bounds:
                if not ok(value, bound):
                    out.append((path, f"{_shown(value)} fails {keyword} {bound}"))

        return [check]

    def strings(self, schema: Mapping[str, Any]) -> list[SchemaCheck]:
        low, high = schema.get("minLength"), schema.get("maxLength")
        pattern = schema.get("pattern")
        if low is None and high is None and pattern is None:
            return []
        try:
            compiled = re.compile(pattern) if pattern is not None else None
        except (re.error, TypeError) as exc:
            raise self.fail(
                f"has a pattern Python cannot read ({exc}): {_shown(pattern)}"
            ) from None

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if not isinstance(value, str):
                return
            if low is not None and len(value) < low:
                out.append((path, f"at least {low} characters expected, got {len(value)}"))
            if high is not None and len(value) > high:
                out.append((path, f"at most {high} characters expected, got {len(value)}"))
            if compiled is not None and compiled.search(value) is None:
                out.append((path, f"{_shown(value)} does not match the pattern {pattern!r}"))

        return [check]

    def object(self, schema: Mapping[str, Any]) -> SchemaCheck:
        properties = schema.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise self.fail("has properties that are not an object")
        fields = {str(k): self.compile(v) for k, v in properties.items()}
        required = [str(r) for r in schema.get("required") or ()]
        extra_schema = schema.get("additionalProperties", True)
        extra = None if extra_schema is True else self.compile(extra_schema)
        refuse_extra = extra_schema is False

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if not isinstance(value, Mapping):
                return
            for name in required:
                if name not in value:
                    out.append(((*path, name), "a required argument is missing"))
            for key, item in value.items():
                field = fields.get(key)
                if field is not None:
                    field(item, (*path, key), out)
                elif refuse_extra:
                    out.append(((*path, key), "no such argument in the schema"))
                elif extra is not None:
                    extra(item, (*path, key), out)
                if len(out) >= _MAX_PROBLEMS:
                    return

        return check

    def array(self, schema: Mapping[str, Any]) -> SchemaCheck:
        prefix = [self.compile(s) for s in schema.get("prefixItems") or ()]
        items_schema = schema.get("items", True)
        items = None if items_schema is True else self.compile(items_schema)
        low, high = schema.get("minItems"), schema.get("maxItems")
        unique = bool(schema.get("uniqueItems"))

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if not isinstance(value, list | tuple):
                return
            if low is not None and len(value) < low:
                out.append((path, f"at least {low} items expected, got {len(value)}"))
            if high is not None and len(value) > high:
                out.append((path, f"at most {high} items expected, got {len(value)}"))
            for i, item in enumerate(value):
                if i < len(prefix):
                    prefix[i](item, (*path, i), out)
                elif items is not None:
                    items(item, (*path, i), out)
                if len(out) >= _MAX_PROBLEMS:
                    return
            if unique and len({_frozen(v) for v in value}) < len(value):
                out.append((path, "the items must be unique"))

        return check


def _accept(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
    return None


def _refuse(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
    out.append((path, "no value is allowed here"))


def _frozen(value: Any) -> Any:
    """A hashable stand-in that compares as JSON values do (for ``enum`` and ``uniqueItems``)."""
    if isinstance(value, Mapping):
        return ("object", frozenset((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_frozen(v) for v in value))
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    return value


def _enum(allowed: list[Any]) -> SchemaCheck:
    frozen = {_frozen(v) for v in allowed}
    shown = ", ".join(_shown(v) for v in allowed[:10])

    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        try:
            if _frozen(value) in frozen:
                return
        except TypeError:  # unhashable inside: not one of them
            pass
        out.append((path, f"{_shown(value)} is not one of: {shown}"))

    return check


def _combined(keyword: str, options: list[SchemaCheck]) -> SchemaCheck:
    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        results = []
        for option in options:
            problems: list[Problem] = []
            option(value, path, problems)
            results.append(problems)
        passed = sum(1 for problems in results if not problems)
        if keyword == "allOf":
            for problems in results:
                out.extend(problems)
        elif keyword == "anyOf" and not passed:
            out.append((path, f"matches none of the anyOf schemas ({_first(results)})"))
        elif keyword == "oneOf" and passed != 1:
            if passed:
                out.append((path, f"matches {passed} of the oneOf schemas, exactly one expected"))
            else:
                out.append((path, f"matches none of the oneOf schemas ({_first(results)})"))

    return check


def _first(results: list[list[Problem]]) -> str:
    """The first option's first problem, as a hint of what was expected."""
    _, message = results[0][0]
    return f"the first: {message}"


def _negated(inner: SchemaCheck) -> SchemaCheck:
    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        problems: list[Problem] = []
        inner(value, path, problems)
        if not problems:
            out.append((path, "matches a schema it must not ('not')"))

    return check


def _all_of(checks: list[SchemaCheck]) -> SchemaCheck:
    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        for one in checks:
            one(value, path, out)

    return check


def compile_schema(schema: Any, tool_name: str = "?") -> SchemaCheck:
    """``schema`` compiled into a check; raises ConfigurationError naming ``tool_name`` if the
    checker cannot read it."""
    return _Compiler(schema if isinstance(schema, Mapping) else {}, tool_name).compile(schema)


def _input_check(schema: Any, tool_name: str) -> SchemaCheck:
    """A tool's input schema compiled: it must describe an object (a call's arguments are
    one)."""
    if not isinstance(schema, Mapping):
        raise ConfigurationError(
            f"tool {tool_name!r}: its input schema must be a JSON schema object, got "
            f"{_shown(schema)}"
        )
    declared = schema.get("type", "object")
    if declared != "object":
        raise ConfigurationError(
            f"tool {tool_name!r}: its input schema must describe an object (type 'object'), "
            f"got type {_shown(declared)}"
        )
    return compile_schema(schema, tool_name)


def validation_error(tool_name: str, problems: list[Problem]) -> pydantic.ValidationError:
    """The problems as the ValidationError every tool's arguments raise (so one formatter
    words them for the model)."""
    return pydantic.ValidationError.from_exception_data(
        tool_name,
        [
            {"type": "value_error", "loc": loc, "input": None, "ctx": {"error": ValueError(msg)}}
            for loc, msg in problems[:_MAX_PROBLEMS]
        ],
    )


def schema_tool(
    tool_class: type[Any],
    name: str,
    description: str,
    input_schema: Mapping[str, Any],
    handler: Callable[..., Any],
    *,
    idempotent: bool,
    max_retries: int,
    takes_context: bool,
) -> Any:
    """The body of ``Tool.from_schema`` (see there)."""
    if not callable(handler):
        raise ConfigurationError(f"tool {name!r}: the handler must be callable, got {handler!r}")
    if not isinstance(description, str):
        raise ConfigurationError(f"tool {name!r}: the description must be a string")
    schema = (
        copy.deepcopy(dict(input_schema)) if isinstance(input_schema, Mapping) else input_schema
    )
    check = _input_check(schema, name)
    is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - objects with an async __call__
    )
    fn: Callable[..., Any]
    if is_async:

        async def fn(*context: Any, **arguments: Any) -> Any:
            return await handler(*context, arguments)

    else:

        def fn(*context: Any, **arguments: Any) -> Any:
            return handler(*context, arguments)

    return tool_class._schema_tool(
        fn,
        name=name,
        description=description,
        input_schema=schema,
        check=check,
        is_async=is_async,
        idempotent=idempotent,
        max_retries=max_retries,
        takes_context=takes_context,
    )
