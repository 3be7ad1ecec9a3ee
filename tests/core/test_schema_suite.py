"""The schema checker against the official JSON-Schema-Test-Suite (draft 2020-12).

Each file of tests/core/json_schema_suite/ (see its README) is one test: every case's verdict
(valid or not) must be the suite's, with no exception. The files of the keywords the built-in
checker claims must be compiled by it (not handed to ``jsonschema``) except where a case's
schema uses a keyword it does not claim; the fallback's files are run through the fallback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import ConfigurationError
from orchestrator.core.schema import FALLBACK_KEYWORDS, FAST_KEYWORDS, compile_schema

SUITE = Path(__file__).with_name("json_schema_suite") / "draft2020-12"
FILES = sorted(p.relative_to(SUITE).as_posix() for p in SUITE.rglob("*.json"))
FALLBACK_FILES = {
    "anchor.json",
    "defs.json",  # its schema declares $schema with the draft's meta-schema by $ref
    "unevaluatedItems.json",
    "unevaluatedProperties.json",
    "optional/anchor.json",
    "optional/id.json",
}


def keywords_in(schema: object) -> set[str]:
    """Every key of every object in ``schema`` (a superset of the keywords it uses)."""
    if isinstance(schema, dict):
        found = set(schema)
        for value in schema.values():
            found |= keywords_in(value)
        return found
    if isinstance(schema, list):
        return set().union(*(keywords_in(v) for v in schema)) if schema else set()
    return set()


def needs_fallback(schema: object) -> bool:
    """The schema uses something the built-in checker hands to ``jsonschema``: a fallback
    keyword, an ``$id`` below the root, a ``$ref`` that is not a pointer into the document, or
    another draft's ``$schema``."""
    below_root = (
        {k: v for k, v in schema.items() if k != "$id"} if isinstance(schema, dict) else schema
    )
    refs = [r for r in _values_of(schema, "$ref") if not (r == "#" or r.startswith("#/"))]
    drafts = {s.rstrip("#") for s in _values_of(schema, "$schema")}
    return (
        bool(keywords_in(schema) & (FALLBACK_KEYWORDS - {"$id"}))
        or "$id" in keywords_in(below_root)
        or bool(refs)
        or bool(drafts - {"https://json-schema.org/draft/2020-12/schema"})
    )


def _values_of(schema: object, key: str) -> list:
    if isinstance(schema, dict):
        found = [schema[key]] if key in schema and isinstance(schema[key], str) else []
        for value in schema.values():
            found += _values_of(value, key)
        return found
    if isinstance(schema, list):
        return [x for v in schema for x in _values_of(v, key)]
    return []


def verdicts(path: str) -> tuple[list[str], int, int]:
    """The cases whose verdict differs from the suite's, and how many cases each checker took."""
    wrong: list[str] = []
    fast = slow = 0
    for group in json.loads((SUITE / path).read_text(encoding="utf-8")):
        try:
            check = compile_schema(group["schema"], fallback=False)
            fast += len(group["tests"])
        except ConfigurationError:
            check = compile_schema(group["schema"])
            slow += len(group["tests"])
        for case in group["tests"]:
            found: list = []
            check(case["data"], (), found)
            if (not found) != case["valid"]:
                wrong.append(f"{group['description']} / {case['description']}: {found[:2]}")
    return wrong, fast, slow


def test_the_vendored_suite_is_there_with_its_licence():
    assert (SUITE.parent / "LICENSE").read_text().startswith("Copyright (c) 2012 Julian Berman")
    assert len(FILES) >= 45


@pytest.mark.parametrize("path", FILES)
def test_every_case_of_the_suite_gets_the_suites_verdict(path):
    wrong, fast, slow = verdicts(path)
    assert wrong == [], f"{len(wrong)} wrong verdict(s) in {path}:\n" + "\n".join(wrong)
    assert fast + slow > 0


@pytest.mark.parametrize("path", [p for p in FILES if p not in FALLBACK_FILES])
def test_the_built_in_checker_compiles_every_schema_of_the_keywords_it_claims(path):
    """Only a schema using a keyword the checker does not claim goes to ``jsonschema``: the
    fast path is not silently given up."""
    for group in json.loads((SUITE / path).read_text(encoding="utf-8")):
        schema = group["schema"]
        if needs_fallback(schema):
            with pytest.raises(ConfigurationError, match="does not enforce"):
                compile_schema(schema, fallback=False)
        else:
            compile_schema(schema, fallback=False)


def test_the_claimed_keywords_each_have_their_file():
    covered = {Path(p).stem for p in FILES}
    aliases = {"$ref": "ref", "$defs": "defs", "definitions": "ref", "then": "if-then-else",
               "else": "if-then-else", "if": "if-then-else"}  # fmt: skip
    missing = {k for k in FAST_KEYWORDS if aliases.get(k, k) not in covered}
    assert missing == set()
