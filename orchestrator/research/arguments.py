"""Example arguments for a tool described only by its JSON schema.

The offline model calls a tool it knows nothing about once, with arguments that validate: the
required fields of the schema, following ``$ref``, ``anyOf``/``oneOf``/``allOf``, formats,
lengths, numeric bounds and ``multipleOf``, with text taken from the task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..models.base import ToolSpec

__all__ = ["example_arguments"]

_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "duration": "P1D",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "hostname": "example.com",
}


def example_arguments(spec: ToolSpec, task: str) -> dict[str, Any]:
    """Arguments valid for ``spec``'s JSON schema (required fields only), text from the task."""
    schema = spec.input_schema
    value = _example_value(schema, task, schema, 0)
    return value if isinstance(value, dict) else {}


def _example_value(  # noqa: C901 - one branch a JSON-schema type or keyword
    prop: Mapping[str, Any], task: str, root: Mapping[str, Any], depth: int
) -> Any:
    if depth > 8:
        return None
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, Mapping) else {}
        merged = {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
        return _example_value(merged, task, root, depth + 1)
    if "const" in prop:
        return prop["const"]
    if prop.get("enum"):
        return prop["enum"][0]
    if "default" in prop:
        return prop["default"]
    for key in ("anyOf", "oneOf"):
        if key in prop:
            options = [p for p in prop[key] if p.get("type") != "null"] or list(prop[key])
            return _example_value(options[0], task, root, depth + 1) if options else None
    if prop.get("allOf"):
        merged = {}
        for part in prop["allOf"]:
            merged.update(part)
        return _example_value(merged, task, root, depth + 1)
    kind = prop.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if kinds else "null"
    if kind == "string":
        return _example_string(prop, task)
    if kind == "integer":
        return _example_number(prop, integer=True)
    if kind == "number":
        return _example_number(prop, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        prefix = list(prop.get("prefixItems", []))
        items = prop.get("items", {"type": "string"})
        count = max(int(prop.get("minItems", 0)), len(prefix))
        values = [
            _example_value(prefix[i] if i < len(prefix) else items, task, root, depth + 1)
            for i in range(count)
        ]
        if prop.get("uniqueItems") and all(isinstance(v, int | float) for v in values):
            values = [v + i for i, v in enumerate(values)]
        elif prop.get("uniqueItems") and all(isinstance(v, str) for v in values):
            values = [f"{v}{i}" if i else v for i, v in enumerate(values)]
        return values
    if kind == "object" or "properties" in prop:
        props: Mapping[str, Any] = prop.get("properties", {})
        return {
            name: _example_value(props.get(name, {}), task, root, depth + 1)
            for name in prop.get("required", [])
        }
    return task[:200] or "x"  # no type at all: any JSON value is valid; a string is simplest


def _example_string(prop: Mapping[str, Any], task: str) -> str:
    fmt = prop.get("format")
    if fmt in _FORMATS:
        return _FORMATS[fmt]
    text = " ".join(task.split()) or "x"
    low = int(prop.get("minLength", 0))
    high = prop.get("maxLength")
    if len(text) < low:
        text = (text + " ") * (low // (len(text) + 1) + 1)
        text = text[: max(low, 1)]
    limit = min(int(high), 200) if high is not None else 200
    text = text[: max(limit, low)]
    if high is not None and int(high) == 0:
        return ""
    return text


def _example_number(prop: Mapping[str, Any], *, integer: bool) -> int | float:
    """The first of a few candidates (1, the bounds, just inside them, their middle, multiples
    of ``multipleOf``) that satisfies every numeric keyword of ``prop``."""
    low, high = prop.get("minimum"), prop.get("maximum")
    xlow, xhigh = prop.get("exclusiveMinimum"), prop.get("exclusiveMaximum")
    multiple = prop.get("multipleOf")

    def valid(v: float) -> bool:
        return (
            (low is None or v >= low)
            and (high is None or v <= high)
            and (xlow is None or v > xlow)
            and (xhigh is None or v < xhigh)
            and (not multiple or abs(v / multiple - round(v / multiple)) < 1e-9)
        )

    bottom = low if low is not None else xlow
    top = high if high is not None else xhigh
    candidates: list[float] = [1, 0]
    for edge in (low, high):
        if edge is not None:
            candidates.append(edge)
    if xlow is not None:
        candidates += [xlow + 1, xlow + 1e-3]
    if xhigh is not None:
        candidates += [xhigh - 1, xhigh - 1e-3]
    if bottom is not None and top is not None:
        candidates.append((bottom + top) / 2)
    candidates += [-1]
    if multiple:
        candidates += [
            multiple * f(c / multiple) for c in list(candidates) for f in (math.ceil, math.floor)
        ]
    for c in candidates:
        for v in [math.ceil(c), math.floor(c)] if integer else [c]:
            if valid(v):
                return int(v) if integer else float(v)
    fallback = bottom if bottom is not None else top if top is not None else 1
    return int(fallback) if integer else float(fallback)
