"""A tree's identity: where it is defined, what it is made of, and the journal header naming it.

A journal (and a runner's worker) names the tree it ran by a reference (``FILE.py[:NAME]`` or
``module:attr``) and holds a fingerprint of its definitions; resuming a different tree is
refused, naming the first difference. :func:`load_tree` loads the tree a reference names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from ..models.base import Model
from .agent import Agent
from .errors import ConfigurationError
from .journal_sqlite import JournalHeader, SQLiteJournal
from .limits import Limits
from .messages import canonical_json

__all__ = [
    "check_tree",
    "fingerprint",
    "journal_header",
    "load_tree",
    "load_tree_file",
    "open_journal",
    "recorded_limits",
    "tree_reference",
]


def fingerprint(agent: Agent) -> tuple[str, dict[str, str]]:
    """A digest of the tree's definitions, and the parts it was made of (``agent.field`` ->
    digest): what must be the same for a journal to be replayed on it."""
    parts: dict[str, str] = {}
    for a in _definitions(agent):
        fields = {
            "instructions": a.instructions,
            "description": a.description,
            "model": a.model if isinstance(a.model, str) else type(a.model).__name__,
            "tools": [
                [t.name, t.description, canonical_json(t.input_schema)] for t in a.tools or ()
            ]
            if a.tools is not None
            else None,
            "subagents": [s if isinstance(s, str) else s.name for s in a.subagents],
            "limits": repr(a.limits),
            "max_output_tokens": a.max_output_tokens,
        }
        if a.models:  # a menu (absent otherwise: a tree without menus keeps its digest)
            fields["models"] = [m if isinstance(m, str) else type(m).__name__ for m in a.models]
        if a.output_spec is not None:  # a typed answer: changing its type changes the tree
            fields["output"] = [a.output_spec.mode, canonical_json(a.output_spec.schema)]
        for name, value in fields.items():
            digest = hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]
            parts[f"{a.name}.{name}"] = digest
    whole = hashlib.sha256(canonical_json(parts).encode()).hexdigest()
    return whole, parts


def _definitions(root: Agent) -> list[Agent]:
    """Every agent of the tree, each once, in the order first met (the tree is not validated:
    a policy naming tools of servers not yet connected is checked when the run starts)."""
    seen: dict[int, Agent] = {}
    pending = [root]
    while pending:
        agent = pending.pop(0)
        if id(agent) in seen:
            continue
        seen[id(agent)] = agent
        pending.extend(s for s in agent.subagents if isinstance(s, Agent))
    return list(seen.values())


def _first_difference(recorded: dict[str, str], given: dict[str, str]) -> str:
    # keys are "agent.part": an agent's name may hold dots, a part's never does
    in_both = {k.rpartition(".")[0] for k in recorded} & {k.rpartition(".")[0] for k in given}
    for key in sorted(set(recorded) | set(given)):
        agent, _, part = key.rpartition(".")
        # only a typed agent has an "output" part: a text agent made typed (or back) is in both
        if part == "output" and agent in in_both and recorded.get(key) != given.get(key):
            return f"agent {agent!r} has another output type or mode than when it was journaled"
        if key not in given:
            return f"agent {agent!r} is in the journal's tree, not in this one"
        if key not in recorded:
            return f"agent {agent!r} is in this tree, not in the journal's"
        if recorded[key] != given[key]:
            return f"agent {agent!r} has other {part} than when the run was journaled"
    return "the trees differ"


def tree_reference(agent: Agent) -> str:
    """``module:attr`` for a root agent some imported module holds as a global, else ``""``."""
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith("_orchestrator_user_"):
            continue
        try:
            values = vars(module)
        except TypeError:
            continue
        for attr, value in list(values.items()):
            if value is agent and not attr.startswith("_"):
                return f"{name}:{attr}"
    return ""


def load_tree(reference: str) -> Agent:
    """The root agent a reference names: ``FILE.py[:NAME]`` (default ``agent``) or
    ``module:attr``; raises ConfigurationError saying what is wrong."""
    head, _, tail = reference.rpartition(":")
    if not head or os.path.exists(reference) or head.endswith(".py") or os.path.isfile(head):
        return load_tree_file(reference)
    try:
        module = importlib.import_module(head)
    except Exception as exc:
        raise ConfigurationError(
            f"cannot import {head!r} for the tree {reference!r}: {exc}"
        ) from None
    obj = getattr(module, tail or "agent", None)
    if not isinstance(obj, Agent):
        raise ConfigurationError(f"{reference!r} does not name an Agent")
    return obj


def load_tree_file(target: str) -> Agent:
    """The Agent named by ``FILE.py[:NAME]`` (default name ``agent``), the file executed as a
    module of its own (what ``orchestrator run`` loads); raises ConfigurationError saying what
    is wrong, in one line."""
    path_text, name = target, ""
    if not os.path.exists(target):  # NAME after the last ":" (a folder or a drive may hold one)
        head, _, tail = target.rpartition(":")
        if head and (os.path.isfile(head) or tail.isidentifier()):
            path_text, name = head, tail
            if name and not name.isidentifier():
                raise ConfigurationError(f"{name!r} is not a Python name (in {target})")
    name = name or "agent"
    path = Path(path_text)
    if not path.is_file():
        raise ConfigurationError(f"no such file: {path}")
    # one name per file, so two files of one stem loaded in one process stay apart
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_orchestrator_user_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    # registered like any import: dataclasses and pydantic resolve string annotations
    # (``from __future__ import annotations``) through sys.modules
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    loaded = False
    try:
        spec.loader.exec_module(module)
        loaded = True
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}: {exc}") from None
    except Exception as exc:
        raise ConfigurationError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:
        raise ConfigurationError(
            f"{path} called sys.exit({exc.code!r}) while being imported"
        ) from None
    finally:
        sys.path.pop(0)
        if not loaded:  # a file that failed to load leaves no module behind
            sys.modules.pop(module_name, None)
    if not hasattr(module, name):
        agents = [k for k, v in vars(module).items() if isinstance(v, Agent)]
        raise ConfigurationError(
            f"{path} has no {name!r} (agents defined there: {', '.join(agents) or 'none'})"
        )
    obj = getattr(module, name)
    if not isinstance(obj, Agent):
        raise ConfigurationError(f"{path}:{name} is a {type(obj).__name__}, not an Agent")
    return obj


def journal_header(
    agent: Agent,
    prompt: str,
    run_id: str,
    *,
    tree_ref: str | None = None,
    model: Model | str | None = None,
    limits: Limits | None = None,
    defer: bool = False,
) -> JournalHeader:
    """The header of a new run's journal (``defer``: the run parks calls, and so does its
    resume unless told otherwise)."""
    whole, parts = fingerprint(agent)
    options: dict[str, Any] = {}
    if defer:
        options["defer"] = True
    if isinstance(model, str):
        options["model"] = model
    if limits is not None:
        options["limits"] = {k: v for k, v in dataclasses.asdict(limits).items() if v is not None}
    return JournalHeader(
        run_id=run_id,
        prompt=prompt,
        tree_ref=tree_reference(agent) if tree_ref is None else tree_ref,
        fingerprint=whole,
        fingerprint_parts=parts,
        options=options,
    )


def open_journal(
    path: str | os.PathLike[str],
    agent: Agent,
    prompt: str,
    run_id: str,
    model: Model | str | None,
    limits: Limits | None,
    *,
    defer: bool = False,
) -> SQLiteJournal:
    """A new journal at ``path`` for a run about to start (``open_run(journal=PATH)``)."""
    header = journal_header(agent, prompt, run_id, model=model, limits=limits, defer=defer)
    return SQLiteJournal.create(path, header)


def check_tree(header: JournalHeader, agent: Agent, path: Path) -> None:
    """Raise ConfigurationError, naming the first difference, if ``agent`` is not the tree the
    journal was written by."""
    whole, parts = fingerprint(agent)
    if whole != header.fingerprint:
        raise ConfigurationError(
            f"the journal {path} was written by another tree: "
            f"{_first_difference(header.fingerprint_parts, parts)}"
        )


def recorded_limits(options: dict[str, Any]) -> Limits | None:
    """The run-wide limits a journal's header options recorded, if any."""
    values = options.get("limits")
    if not values:
        return None
    known = {f.name for f in dataclasses.fields(Limits)}
    return Limits(**{k: v for k, v in values.items() if k in known})
