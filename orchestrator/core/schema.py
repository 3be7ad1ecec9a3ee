"""Tools described by a JSON schema (``Tool.from_schema``) and the check of their arguments.

An MCP server, an OpenAPI description or a plugin hands over a tool as a name, a description
and a JSON schema of its input, not as a Python signature. :func:`schema_tool` wraps one so the
runtime treats it like any ``@tool``: the model sees the schema as given, and the arguments are
checked against it before the handler runs, so a bad call is an ``is_error`` result the model
can correct instead of a request the far side rejects, or worse, acts on.

Two checkers. The built-in one compiles the schema once, when the tool is built, into plain
Python closures, so a call pays only for the checks its schema names (several times faster
than a general validator: ``tests/benchmarks/bench_schema.py``). It covers the JSON Schema
(draft 2020-12) vocabulary that tool schemas use: :data:`FAST_KEYWORDS`, checked against the
official JSON-Schema-Test-Suite (``tests/core/test_schema_suite.py``). A schema that needs more
(:data:`FALLBACK_KEYWORDS`: ``unevaluatedProperties``, ``$dynamicRef``, ``$anchor``, a nested
``$id``, a ``$ref`` that is not a JSON pointer into the document, another draft's ``$schema``)
is checked by ``jsonschema``'s validator for its draft instead, which comes with the ``mcp``
extra; without it, building the tool is a ConfigurationError naming the keyword. Annotations
(``format``, ``title``, ``default``, ``contentMediaType``...) are not enforced, as the draft says.

Safe on any input: a schema the checker cannot read (a keyword with a value of the wrong kind,
a ``$ref`` that points nowhere, a ``$ref`` cycle that never reaches a value, combinators whose
references expand past :data:`_MAX_EXPANSION` checks per value) is a ConfigurationError when
the tool is built, not at the first call; a check that fails anyway (a ``$ref`` ``jsonschema``
cannot resolve, a recursion past the interpreter's limit) refuses the call with an ``is_error``
result naming what happened, and the run goes on. Patterns are matched in linear time
(:mod:`.patterns`), and a schema with one is checked in a worker thread under the call's
``tool_timeout`` (``Tool.checks_in_thread``).
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final
from urllib.parse import unquote

import pydantic

from .errors import ConfigurationError
from .patterns import compile_pattern

__all__ = [
    "FALLBACK_KEYWORDS",
    "FAST_KEYWORDS",
    "SchemaCheck",
    "compile_schema",
    "schema_tool",
]

Problem = tuple[tuple[str | int, ...], str]
"""Where in the arguments (a path of keys and indexes) and what is wrong there."""
SchemaCheck = Callable[[Any, tuple[str | int, ...], list[Problem]], None]
"""A compiled schema: appends the problems of a value, found at a path, to a list."""

FAST_KEYWORDS: Final = frozenset(
    {
        "type", "enum", "const",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "pattern",
        "properties", "patternProperties", "additionalProperties", "required",
        "propertyNames", "minProperties", "maxProperties", "dependentRequired",
        "dependentSchemas",
        "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
        "contains", "minContains", "maxContains",
        "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
        "$ref", "$defs", "definitions",
    }
)  # fmt: skip
"""The keywords the built-in checker enforces (a ``$ref`` as a JSON pointer into the schema)."""

FALLBACK_KEYWORDS: Final = frozenset(
    {
        "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$dynamicAnchor",
        "$recursiveRef", "$recursiveAnchor", "$anchor", "$id",
    }
)  # fmt: skip
"""Keywords that send a schema to ``jsonschema`` (``$id`` only below the root), as do a
``$ref`` that is not a JSON pointer into the document and a ``$schema`` of another draft."""

_DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"

_MAX_PROBLEMS: Final = 20
"""A check stops collecting past this many problems (the model is shown the first ten)."""

_MAX_EXPANSION: Final = 10_000
"""The most checks one value may take through combinators and references (a schema of
``$ref``s each naming two others would otherwise double the work at every level)."""

_MAX_MESSAGE: Final = 300
"""A problem's wording is cut past this many characters (a validator's message may quote a
20,000-value enum, or the whole value)."""

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

# keywords whose subschemas apply to the same value (a $ref cycle through them never ends)
_IN_PLACE: Final = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE: Final = ("not", "if", "then", "else")


class _Unsupported(Exception):
    """The schema needs a keyword the built-in checker does not compile."""

    def __init__(self, keyword: str) -> None:
        super().__init__(keyword)
        self.keyword = keyword


def _json_type(value: Any) -> str:
    """The JSON type a value would have, for a message."""
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a value of our caller's with a broken __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _cut(message: str) -> str:
    if len(message) <= _MAX_MESSAGE:
        return message
    return f"{message[: _MAX_MESSAGE - 40]}... ({len(message):,} characters in all)"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Compiler:
    """Compiles one schema document; ``$ref`` resolves against its root."""

    def __init__(self, root: Mapping[str, Any], tool_name: str) -> None:
        self.root = root
        self.tool_name = tool_name
        self.refs: dict[str, SchemaCheck] = {}
        self.targets: dict[str, Any] = {}

    def fail(self, why: str) -> ConfigurationError:
        return ConfigurationError(f"tool {self.tool_name!r}: its input schema {why}")

    def compile_root(self, schema: Any) -> SchemaCheck:
        check = self.compile(schema)
        self.check_expansion(schema)
        return check

    def resolve(self, pointer: str) -> Any:
        if not pointer.startswith("#") or (len(pointer) > 1 and pointer[1] != "/"):
            raise _Unsupported("$ref")  # another document, or an anchor: jsonschema's
        target: Any = self.root
        for raw in pointer[2:].split("/") if len(pointer) > 1 else ():
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise self.fail(f"has a $ref that points nowhere: {pointer!r}")
        return target

    def ref(self, pointer: Any) -> SchemaCheck:
        if not isinstance(pointer, str):
            raise self.fail(f"has a $ref that is not a string: {_shown(pointer)}")
        if pointer in self.refs:
            return self.refs[pointer]
        target = self.resolve(pointer)
        checks: list[SchemaCheck] = []

        def deferred(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            checks[0](value, path, out)  # compiled below; recursive schemas refer to themselves

        self.refs[pointer] = deferred
        self.targets[pointer] = target
        checks.append(self.compile(target))
        return deferred

    def check_expansion(self, root: Any) -> None:
        """Refuse a ``$ref`` cycle that stays on one value (a -> b -> a: no check could end),
        and references that multiply one value's checks past :data:`_MAX_EXPANSION`."""
        sizes: dict[str, int] = {}
        visiting: list[str] = []

        def size(schema: Any) -> int:
            if not isinstance(schema, Mapping):
                return 1
            total = 1
            pointer = schema.get("$ref")
            if isinstance(pointer, str) and pointer in self.targets:
                total += of_ref(pointer)
            for keyword in _IN_PLACE:
                for option in schema.get(keyword) or ():
                    total += size(option)
            for keyword in _IN_PLACE_ONE:
                if keyword in schema:
                    total += size(schema[keyword])
            for sub in (schema.get("dependentSchemas") or {}).values():
                total += size(sub)
            return min(total, _MAX_EXPANSION + 1)

        def of_ref(pointer: str) -> int:
            if pointer in visiting:
                cycle = " -> ".join([*visiting[visiting.index(pointer) :], pointer])
                raise self.fail(f"has a $ref cycle that never reaches a value: {cycle}")
            if pointer not in sizes:
                visiting.append(pointer)
                sizes[pointer] = size(self.targets[pointer])
                visiting.pop()
            return sizes[pointer]

        if size(root) > _MAX_EXPANSION:
            raise self.fail(
                f"makes more than {_MAX_EXPANSION:,} checks of one value (its references and "
                f"combinators multiply each other)"
            )
        for pointer in list(self.targets):
            if of_ref(pointer) > _MAX_EXPANSION:
                raise self.fail(
                    f"makes more than {_MAX_EXPANSION:,} checks of one value through {pointer!r}"
                )

    def compile(self, schema: Any) -> SchemaCheck:
        if schema is True:
            return _accept
        if schema is False:
            return _refuse
        if not isinstance(schema, Mapping):
            raise self.fail(f"has {_shown(schema)} where a schema (an object or a boolean) belongs")
        for keyword in FALLBACK_KEYWORDS:
            if keyword in schema and not (keyword == "$id" and schema is self.root):
                raise _Unsupported(keyword)  # a nested $id changes what its $refs mean
        if "$schema" in schema:
            declared = schema["$schema"]
            if not isinstance(declared, str) or declared.rstrip("#") != _DRAFT_2020_12:
                raise _Unsupported("$schema")  # another draft's keywords mean other things
        checks: list[SchemaCheck] = []
        if "$ref" in schema:
            checks.append(self.ref(schema["$ref"]))
        if "type" in schema:
            checks.append(self.types(schema["type"]))
        if "enum" in schema:
            allowed = schema["enum"]
            if not isinstance(allowed, list):
                raise self.fail(f"has an enum that is not a list: {_shown(allowed)}")
            checks.append(_enum(allowed))
        if "const" in schema:
            checks.append(_enum([schema["const"]]))
        checks.extend(self.numbers(schema))
        checks.extend(self.strings(schema))
        if any(k in schema for k in _OBJECT_KEYWORDS):
            checks.append(self.object(schema))
        if any(k in schema for k in _ARRAY_KEYWORDS):
            checks.append(self.array(schema))
        for keyword in _IN_PLACE:
            if keyword in schema:
                options = schema[keyword]
                if not isinstance(options, list) or not options:
                    raise self.fail(f"has {keyword} that is not a list of schemas")
                checks.append(_combined(keyword, [self.compile(o) for o in options]))
        if "not" in schema:
            checks.append(_negated(self.compile(schema["not"])))
        if "if" in schema:
            then = self.compile(schema["then"]) if "then" in schema else None
            otherwise = self.compile(schema["else"]) if "else" in schema else None
            if then is not None or otherwise is not None:
                checks.append(_conditional(self.compile(schema["if"]), then, otherwise))
        if not checks:
            return _accept
        if len(checks) == 1:
            return checks[0]
        return _all_of(checks)

    def types(self, declared: Any) -> SchemaCheck:
        names = [declared] if isinstance(declared, str) else declared
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and n in _JSON_TYPES for n in names)
        ):
            raise self.fail(f"names an unknown type {_shown(declared)}")
        tests = [_JSON_TYPES[n] for n in names]
        wanted = " or ".join(names)

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            for test in tests:
                if test(value):
                    return
            out.append((path, f"expected {wanted}, got {_json_type(value)} {_shown(value)}"))

        return check

    def count(self, schema: Mapping[str, Any], keyword: str) -> int | None:
        """A non-negative integer keyword (``2.0`` counts as 2, as the draft says)."""
        if keyword not in schema:
            return None
        value = schema[keyword]
        if _is_number(value) and value >= 0 and float(value).is_integer():
            return int(value)
        raise self.fail(f"has {keyword} {_shown(value)}, not a non-negative integer")

    def numbers(self, schema: Mapping[str, Any]) -> list[SchemaCheck]:
        bounds: list[tuple[str, Any, Callable[[Any, Any], bool], str]] = []
        for keyword, ok in (
            ("minimum", lambda v, b: v >= b),
            ("maximum", lambda v, b: v <= b),
            ("exclusiveMinimum", lambda v, b: v > b),
            ("exclusiveMaximum", lambda v, b: v < b),
            ("multipleOf", _multiple_of),
        ):
            if keyword in schema:
                bound = schema[keyword]
                if not _is_number(bound) or not math.isfinite(bound):
                    raise self.fail(f"has {keyword} {_shown(bound)}, not a number")
                if keyword == "multipleOf" and bound <= 0:
                    raise self.fail(f"has multipleOf {_shown(bound)}, not above 0")
                exact = _exact(bound) if keyword == "multipleOf" else bound
                bounds.append((keyword, exact, ok, _shown(bound)))
        if not bounds:
            return []

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return  # "type" says whether it must be a number
            for keyword, bound, ok, shown in bounds:
                if not ok(value, bound):
                    out.append((path, f"{_shown(value)} fails {keyword} {shown}"))

        return [check]

    def strings(self, schema: Mapping[str, Any]) -> list[SchemaCheck]:
        low, high = self.count(schema, "minLength"), self.count(schema, "maxLength")
        pattern = schema.get("pattern")
        if low is None and high is None and pattern is None:
            return []
        compiled = self.pattern(pattern) if pattern is not None else None

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if not isinstance(value, str):
                return
            if low is not None and len(value) < low:
                out.append((path, f"at least {low} characters expected, got {len(value)}"))
            if high is not None and len(value) > high:
                out.append((path, f"at most {high} characters expected, got {len(value)}"))
            if compiled is not None and not compiled(value):
                out.append((path, f"{_shown(value)} does not match the pattern {_shown(pattern)}"))

        return [check]

    def pattern(self, pattern: Any) -> Callable[[str], bool]:
        """Whether a string holds a match of ``pattern``: in linear time (no backtracking, see
        :mod:`.patterns`), or by ``re`` for what that matcher does not cover."""
        try:
            compiled = re.compile(pattern)
        except (re.error, TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise self.fail(
                f"has a pattern Python cannot read ({_cut(str(exc))}): {_shown(pattern)}"
            ) from None
        linear = compile_pattern(pattern)
        if linear is not None:
            return linear
        return lambda text: compiled.search(text) is not None

    def schemas(self, schema: Mapping[str, Any], keyword: str) -> dict[str, SchemaCheck]:
        found = schema.get(keyword) or {}
        if not isinstance(found, Mapping):
            raise self.fail(f"has {keyword} that is not an object")
        return {str(k): self.compile(v) for k, v in found.items()}

    def names(self, value: Any, keyword: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise self.fail(f"has {keyword} {_shown(value)}, not a list of names")
        return value

    def object(self, schema: Mapping[str, Any]) -> SchemaCheck:
        fields = self.schemas(schema, "properties")
        patterns = [
            (self.pattern(p), check)
            for p, check in self.schemas(schema, "patternProperties").items()
        ]
        required = self.names(schema.get("required", []), "required")
        extra_schema = schema.get("additionalProperties", True)
        extra = None if extra_schema is True else self.compile(extra_schema)
        refuse_extra = extra_schema is False
        key_check = self.compile(schema["propertyNames"]) if "propertyNames" in schema else None
        low, high = self.count(schema, "minProperties"), self.count(schema, "maxProperties")
        needs = schema.get("dependentRequired") or {}
        if not isinstance(needs, Mapping):
            raise self.fail("has dependentRequired that is not an object")
        dependent_required = {str(k): self.names(v, "dependentRequired") for k, v in needs.items()}
        dependent_schemas = self.schemas(schema, "dependentSchemas")
        constrained = low is not None or high is not None or key_check is not None
        if not (patterns or constrained or dependent_required or dependent_schemas):

            def plain(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
                # what most tool schemas need: properties, required, additionalProperties
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

            return plain

        def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
            if not isinstance(value, Mapping):
                return
            for name in required:
                if name not in value:
                    out.append(((*path, name), "a required argument is missing"))
            if low is not None and len(value) < low:
                out.append((path, f"at least {low} properties expected, got {len(value)}"))
            if high is not None and len(value) > high:
                out.append((path, f"at most {high} properties expected, got {len(value)}"))
            for key, item in value.items():
                where = (*path, key)
                field = fields.get(key)
                if field is not None:
                    field(item, where, out)
                matched = False
                for matches, pattern_check in patterns:
                    if matches(key):
                        matched = True
                        pattern_check(item, where, out)
                if field is None and not matched:
                    if refuse_extra:
                        out.append((where, "no such argument in the schema"))
                    elif extra is not None:
                        extra(item, where, out)
                if key_check is not None:
                    before = len(out)
                    key_check(key, where, out)
                    if len(out) > before:
                        del out[before:]
                        out.append((where, f"the name {_shown(key)} is not allowed"))
                if key in dependent_required:
                    for name in dependent_required[key]:
                        if name not in value:
                            out.append(((*path, name), f"required when {key!r} is given"))
                if key in dependent_schemas:
                    dependent_schemas[key](value, path, out)
                if len(out) >= _MAX_PROBLEMS:
                    return

        return check

    def array(self, schema: Mapping[str, Any]) -> SchemaCheck:
        prefix_schemas = schema.get("prefixItems", [])
        if not isinstance(prefix_schemas, list):
            raise self.fail("has prefixItems that is not a list of schemas")
        prefix = [self.compile(s) for s in prefix_schemas]
        items_schema = schema.get("items", True)
        items = None if items_schema is True else self.compile(items_schema)
        low, high = self.count(schema, "minItems"), self.count(schema, "maxItems")
        unique = schema.get("uniqueItems", False)
        if not isinstance(unique, bool):
            raise self.fail(f"has uniqueItems {_shown(unique)}, not a boolean")
        contains = self.compile(schema["contains"]) if "contains" in schema else None
        at_least = self.count(schema, "minContains")
        at_most = self.count(schema, "maxContains")
        if at_least is None:
            at_least = 1

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
            if unique and not _all_unique(value):
                out.append((path, "the items must be unique"))
            if contains is not None:
                found = 0
                for item in value:
                    problems: list[Problem] = []
                    contains(item, path, problems)
                    found += not problems
                if found < at_least:
                    out.append((path, f"at least {at_least} item(s) must match 'contains'"))
                elif at_most is not None and found > at_most:
                    out.append((path, f"at most {at_most} item(s) may match 'contains'"))

        return check


_OBJECT_KEYWORDS: Final = (
    "properties",
    "patternProperties",
    "required",
    "additionalProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
)
_ARRAY_KEYWORDS: Final = (
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
)


def _exact(number: float) -> Fraction:
    """A JSON number as the exact decimal it was written as (``0.1`` is 1/10, not the binary
    float nearest it), so ``multipleOf`` neither overflows nor misjudges by a rounding."""
    return Fraction(repr(number)) if isinstance(number, float) else Fraction(number)


def _multiple_of(value: Any, step: Fraction) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return (_exact(value) / step).denominator == 1


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


def _all_unique(values: Sequence[Any]) -> bool:
    try:
        return len({_frozen(v) for v in values}) == len(values)
    except TypeError:  # something unhashable that JSON does not have: compare pairwise
        frozen = [_frozen(v) for v in values]
        return all(a != b for i, a in enumerate(frozen) for b in frozen[i + 1 :])


def _enum(allowed: list[Any]) -> SchemaCheck:
    frozen = {_frozen(v) for v in allowed}
    shown = ", ".join(_shown(v) for v in allowed[:10])
    if len(allowed) > 10:
        shown += f" (and {len(allowed) - 10:,} more)"

    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        try:
            if _frozen(value) in frozen:
                return
        except TypeError:  # unhashable inside: not one of them
            pass
        if len(allowed) == 1:
            out.append((path, f"{_shown(value)} is not the allowed value {shown}"))
        else:
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


def _conditional(
    condition: SchemaCheck, then: SchemaCheck | None, otherwise: SchemaCheck | None
) -> SchemaCheck:
    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        problems: list[Problem] = []
        condition(value, path, problems)
        chosen = otherwise if problems else then
        if chosen is not None:
            chosen(value, path, out)

    return check


def _all_of(checks: list[SchemaCheck]) -> SchemaCheck:
    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        for one in checks:
            one(value, path, out)

    return check


def _fallback(schema: Any, tool_name: str, keyword: str) -> SchemaCheck:
    """``schema`` checked by ``jsonschema`` (the validator for its ``$schema``, else draft
    2020-12), for what the built-in checker does not compile."""
    try:
        from jsonschema import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            exceptions,
            validators,
        )
    except ImportError:
        raise ConfigurationError(
            f"tool {tool_name!r}: its input schema uses {keyword}, which the built-in checker "
            f"does not enforce; checking it needs jsonschema: pip install 'orchestrator[mcp]'"
        ) from None
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: its input schema is not valid JSON Schema: {_cut(exc.message)}"
        ) from None
    validator = cls(schema)

    def check(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        for error in validator.iter_errors(value):
            out.append(((*path, *error.absolute_path), _cut(error.message)))
            if len(out) >= _MAX_PROBLEMS:
                return

    return check


def compile_schema(schema: Any, tool_name: str = "?", *, fallback: bool = True) -> SchemaCheck:
    """``schema`` compiled into a check; raises ConfigurationError naming ``tool_name`` if it
    cannot be used. What the built-in checker does not compile goes to ``jsonschema`` (with
    ``fallback=False``: a ConfigurationError naming the keyword)."""
    compiler = _Compiler(schema if isinstance(schema, Mapping) else {}, tool_name)
    try:
        return compiler.compile_root(schema)
    except _Unsupported as exc:
        if not fallback:
            raise compiler.fail(
                f"uses {exc.keyword}, which the built-in checker does not enforce"
            ) from None
        return _fallback(schema, tool_name, exc.keyword)
    except RecursionError:
        raise compiler.fail("is nested too deeply to be read") from None


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


def has_patterns(schema: Any) -> bool:
    """Whether ``schema`` holds a ``pattern`` or ``patternProperties``: a regular expression
    may backtrack for minutes on a string the model chose (``^(a+)+$`` on 30 a's and a ``!``),
    so such a tool's arguments are checked in a worker thread, bounded by the call's timeout."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if "pattern" in node or "patternProperties" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def unchecked(exc: Exception) -> Problem:
    """The one problem of arguments whose check failed itself (a recursion past the
    interpreter's limit, a pattern Python rejects at match time): the call is refused, never
    run unchecked, and the run goes on."""
    return (
        (),
        f"the arguments could not be checked against the tool's schema "
        f"({type(exc).__name__}: {_cut(str(exc))}); the call was not run",
    )


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
    try:
        schema = (
            copy.deepcopy(dict(input_schema)) if isinstance(input_schema, Mapping) else input_schema
        )
    except RecursionError:
        raise ConfigurationError(
            f"tool {name!r}: its input schema is nested too deeply to be read"
        ) from None
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
