"""The one exception tree: every ``OrchestratorError`` subclass of the package is drawn in
``core/errors.py``'s docstring, under its own parent and with the module it lives in; and a
provider error's kind builds the class the loop decides on (``ModelError.from_kind``).
"""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re
from dataclasses import dataclass

import pytest

import orchestrator
from orchestrator import ContextWindowExceeded, ModelError, OrchestratorError, Usage
from orchestrator.core import errors


@dataclass(frozen=True)
class Drawn:
    name: str
    parent: str | None
    module: str | None  # the module named in parentheses, when the class lives elsewhere
    also: str | None = None  # "(also a ValueError)": the built-in exception it also is


_NODE = re.compile(r"^(?P<bars>(?:\|   |    )*)\+-- (?P<name>\w+)")
_MODULE = re.compile(r"\((?P<module>[a-z_]+(?:\.[a-z_]+)*)\)")
_ALSO = re.compile(r"\(also an? (?P<builtin>\w+)\)")


def drawn_tree() -> dict[str, Drawn]:
    """The classes the docstring's tree draws, by name."""
    doc = errors.__doc__ or ""
    lines = doc.split("::\n\n", 1)[1].splitlines()
    assert lines[0].strip() == "OrchestratorError", lines[0]
    drawn = {"OrchestratorError": Drawn("OrchestratorError", None, None)}
    parents = ["OrchestratorError"]  # the last class drawn at each depth
    for line in lines[1:]:
        if not line.strip():
            break  # the tree ends at the docstring's end or a blank line
        node = line.removeprefix("    ")
        match = _NODE.match(node)
        assert match, f"not a node of the tree: {line!r}"
        depth = len(match["bars"]) // 4 + 1
        del parents[depth:]
        rest = node[match.end() :]
        module, also = _MODULE.search(rest), _ALSO.search(rest)
        drawn[match["name"]] = Drawn(
            match["name"],
            parents[depth - 1],
            module["module"] if module else None,
            also["builtin"] if also else None,
        )
        parents.append(match["name"])
    return drawn


def every_module_of_the_package() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(orchestrator.__path__, "orchestrator."):
        if info.name.endswith(".__main__"):
            continue  # running the command, not a module to import
        importlib.import_module(info.name)
        names.append(info.name)
    return names


def subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | subclasses(sub)
    return found


def the_packages_errors() -> list[type[OrchestratorError]]:
    assert len(every_module_of_the_package()) > 50  # the walk found the package
    return sorted(
        (c for c in subclasses(OrchestratorError) if c.__module__.startswith("orchestrator.")),
        key=lambda c: c.__qualname__,
    )


def test_every_orchestrator_error_of_the_package_is_drawn_under_its_parent() -> None:
    drawn = drawn_tree()
    classes = the_packages_errors()
    assert {c.__name__ for c in classes} >= {"ToolsetFailed", "CorpusError", "TraceFileError"}
    for cls in classes:
        assert cls.__name__ in drawn, f"{cls.__module__}.{cls.__qualname__} is not drawn"
        (parent,) = [b for b in cls.__bases__ if issubclass(b, OrchestratorError)]
        assert drawn[cls.__name__].parent == parent.__name__, cls
        builtins = [b.__name__ for b in cls.__bases__ if not issubclass(b, OrchestratorError)]
        assert builtins == ([drawn[cls.__name__].also] if drawn[cls.__name__].also else []), cls
    assert sorted(drawn) == sorted(["OrchestratorError", *(c.__name__ for c in classes)])


def test_the_tree_names_the_module_of_each_class_that_lives_elsewhere() -> None:
    drawn = drawn_tree()
    for cls in the_packages_errors():
        module = cls.__module__.removeprefix("orchestrator.")
        if cls.__module__ == errors.__name__:
            assert drawn[cls.__name__].module is None, cls
        else:
            assert drawn[cls.__name__].module == module, cls


def test_the_tree_reader_sees_nesting() -> None:
    drawn = drawn_tree()
    assert drawn["ContextWindowExceeded"] == Drawn("ContextWindowExceeded", "ModelError", None)
    assert drawn["ToolError"].parent == "OrchestratorError"
    assert drawn["BudgetExceeded"].module == "core.ledger"
    assert drawn["ConfigurationError"].also == "ValueError"


def test_from_kind_gives_the_class_the_loop_decides_on() -> None:
    usage = Usage(input_tokens=3, output_tokens=1)
    too_long = ModelError.from_kind("prompt is too long", kind="context_exceeded", usage=usage)
    assert type(too_long) is ContextWindowExceeded
    assert (str(too_long), too_long.kind, too_long.fatal) == (
        "prompt is too long",
        "context_exceeded",
        False,
    )
    assert too_long.usage == usage
    # fatal has no say: an input too long is one agent's to compact or end with
    assert not ModelError.from_kind("x", kind="context_exceeded", fatal=True).fatal
    other = ModelError.from_kind("slow down", kind="rate_limit", fatal=True, usage=usage)
    assert type(other) is ModelError
    assert (other.kind, other.fatal, other.usage) == ("rate_limit", True, usage)


def test_the_constructor_never_changes_the_class() -> None:
    plain = ModelError("prompt is too long", kind="context_exceeded")
    assert type(plain) is ModelError and plain.kind == "context_exceeded"
    with pytest.raises(TypeError):
        ContextWindowExceeded("x", fatal=True)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "error",
    [
        ModelError("bad key", fatal=True, kind="authentication"),
        ContextWindowExceeded("too long", usage=Usage(input_tokens=5)),
    ],
)
def test_model_errors_pickle_as_themselves(error: ModelError) -> None:
    # a child's error crosses to its parent's process this way (the Dask runner)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (str(copy), copy.kind, copy.fatal, copy.usage) == (
        str(error),
        error.kind,
        error.fatal,
        error.usage,
    )
