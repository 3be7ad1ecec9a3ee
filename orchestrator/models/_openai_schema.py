"""A typed agent's answer as OpenAI's structured outputs take it: ``response_format`` with a
strict JSON schema.

Strict mode accepts a subset of JSON schema: every object says ``additionalProperties: false``
and lists all its properties in ``required``; a ``$ref`` stands alone. pydantic's schemas say
neither, so :func:`strict_schema` rewrites one (a copy): objects closed, every property required
(a field with a default is then always given by the model, which pydantic accepts), defaults
dropped (they can no longer apply, and Azure refuses them), ``oneOf`` as ``anyOf`` (which every
valid answer also matches; pydantic still checks the union), a ``$ref`` with other keys inlined.
A model that allows extra keys is closed too (its own fields are its answer). What cannot be
made strict (a map with free keys, a field of any type) is sent with
``strict: false``: the server takes the schema as guidance, and pydantic checks the answer.

A server that refuses ``json_schema`` but takes ``json_object`` (llama-cpp-python's) is asked
with ``{"type": "json_object", "schema": ...}``, from which it builds a grammar.

The openai SDK has such a rewrite, but as a private function of a type, not of a schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .base import OutputFormat

__all__ = ["format_name", "response_format", "strict_schema"]

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]+")
_KINDS: Final = frozenset({"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const"})
"""Keys one of which a schema node needs to say what it accepts (else: any value)."""


def format_name(name: str) -> str:
    """``json_schema.name`` for an output type's name: only letters, digits, ``_`` and ``-``,
    at most 64 characters (what the API accepts), ``"output"`` if nothing is left."""
    return _UNSAFE.sub("_", name).strip("_")[:64] or "output"


def response_format(output: OutputFormat, *, json_schema: bool = True) -> dict[str, Any]:
    """The ``response_format`` body field asking for JSON of ``output``'s schema;
    ``json_schema=False``: llama-cpp-python's form, ``json_object`` with the schema beside it
    (its server refuses ``json_schema`` and builds a grammar from this one)."""
    schema, strict = strict_schema(output.schema)
    if not json_schema:
        return {"type": "json_object", "schema": schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": format_name(output.name), "schema": schema, "strict": strict},
    }


def strict_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``schema`` rewritten for strict mode (a new dict: ``schema`` is not changed), and
    whether strict mode can take it (see the module docstring)."""
    problems: list[str] = []
    out = _node(schema, schema, problems, ())
    return out, not problems


def _node(
    node: Any, root: Mapping[str, Any], problems: list[str], inlining: tuple[str, ...]
) -> Any:
    if not isinstance(node, Mapping):
        return node  # not a schema (a malformed one): sent as it is, the server judges
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        target = _resolve(root, ref)
        if target is not None and ref not in inlining:
            # the node's own keys (a description) win over the target's
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return _node(merged, root, problems, (*inlining, ref))
        # A recursive type (or a reference we cannot follow): the bare reference, which
        # strict mode takes; its neighbours (a description) are what we lose.
        return {"$ref": ref}
    if not _KINDS.intersection(node):
        problems.append("a value of any type")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("default", "discriminator"):
            continue  # no effect once every property is required; discriminator: not JSON schema
        if key in ("$defs", "definitions", "properties") and isinstance(value, Mapping):
            out[key] = {name: _node(sub, root, problems, inlining) for name, sub in value.items()}
        elif key in ("items", "not") and isinstance(value, Mapping):
            out[key] = _node(value, root, problems, inlining)
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            out[key] = [_node(sub, root, problems, inlining) for sub in value]
        else:
            out[key] = value
    if "oneOf" in out and "anyOf" not in out:
        out["anyOf"] = out.pop("oneOf")
    if "allOf" in out and isinstance(out["allOf"], list) and len(out["allOf"]) == 1:
        only = out.pop("allOf")[0]
        if isinstance(only, Mapping):
            out = {**only, **out}
    if out.get("type") == "object" or isinstance(out.get("properties"), Mapping):
        properties = out.get("properties")
        if properties or out.get("additionalProperties", False) is False:
            # closed: a model that allows extra keys is answered with its own fields
            out["additionalProperties"] = False
        else:
            problems.append("a map with free keys")
        out["required"] = list(properties) if isinstance(properties, Mapping) else []
    return out


def _resolve(root: Mapping[str, Any], ref: str) -> Mapping[str, Any] | None:
    """The schema ``ref`` (``#/$defs/Name``) points to in ``root``, if it is there."""
    if not ref.startswith("#/"):
        return None
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, Mapping) or part not in target:
            return None
        target = target[part]
    return target if isinstance(target, Mapping) else None
