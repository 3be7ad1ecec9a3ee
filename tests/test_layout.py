"""The package's rooms: imports flow one way, and importing the library stays light.

The import-direction rules are DESIGN.md's ("Inside `orchestrator/`"): every ``import``
statement in ``orchestrator/`` is read (also those inside functions and ``TYPE_CHECKING``
blocks, since a lazy import is still a dependency), resolved to a module name, and checked
against what its room may use.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator"
HEAVY = (
    "opentelemetry.sdk",
    "opentelemetry.exporter",
    "anthropic",
    "openai",
    "rich",
    "mcp",
    "dask",
    "distributed",
    "cloudpickle",
)

# What core/ may use of the rooms above it: the Model protocol and the API-only tracing helpers.
CORE_MAY_REACH = frozenset(
    {
        "orchestrator.models.base",
        "orchestrator.tracing.spans",
        "orchestrator.tracing.content",
        "orchestrator.tracing.flush",
    }
)
# The loop's internals: what models, tracing and toolsets must never reach into.
LOOP_INTERNALS = frozenset(
    {
        "orchestrator.core.loop",
        "orchestrator.core.state",
        "orchestrator.core.execute",
        "orchestrator.core.spawn",
        "orchestrator.core.run",
    }
)
# core's lowest layers: all that models/base.py and tracing/spans.py may build on.
CORE_BOTTOM = frozenset(
    {
        "orchestrator.core.messages",
        "orchestrator.core.records",
        "orchestrator.core.errors",
        "orchestrator.core.redact",
        "orchestrator.core.cancellation",
    }
)
# typing_extensions: pydantic's own dependency, for the output type's TypeVar default (PEP 696)
CORE_THIRD_PARTY = frozenset(
    {"trio", "pydantic", "pydantic_core", "opentelemetry", "typing_extensions"}
)
# A facade's lazy name as type checkers see it: ``orchestrator.models`` names the research tree's
# OfflineModel by a string (imported on first use of the name) and imports it for type checkers
# only, under TYPE_CHECKING (test_a_type_only_reexport_is_a_lazy_name_of_its_facade).
TYPE_ONLY_REEXPORTS = frozenset({("orchestrator.models", "orchestrator.research.offline")})


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) for each import in ``path``; ``from X import y`` also yields
    ``X.y``, so that importing a submodule by name counts as importing it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"


def package_modules() -> set[str]:
    return {module_name(p) for p in PACKAGE.rglob("*.py")}


def is_module(name: str, known: set[str]) -> bool:
    return name in known or not name.startswith("orchestrator")


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(room: str, rule: Callable[[str, str], str | None]) -> list[str]:
    known = package_modules()
    found = []
    for path in sorted((PACKAGE / room).rglob("*.py") if room else PACKAGE.glob("*.py")):
        source = module_name(path)
        for line, target in imports_of(path):
            if not is_module(target, known):
                continue  # a name imported from a module, not a module
            if (source, target) in TYPE_ONLY_REEXPORTS:
                continue
            problem = rule(source, target)
            if problem:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {target} ({problem})")
    return found


def test_every_room_of_the_layout_exists() -> None:
    for room in ("core", "models", "tracing", "toolsets", "research", "cli", "dask"):
        assert (PACKAGE / room / "__init__.py").is_file(), room
    assert (PACKAGE / "testing.py").is_file()


def test_core_imports_only_itself_the_model_protocol_and_the_span_helpers() -> None:
    def rule(source: str, target: str) -> str | None:
        top = target.split(".")[0]
        if top == "orchestrator":
            if within(target, "orchestrator.core") or target in CORE_MAY_REACH:
                return None
            if target in ("orchestrator.models", "orchestrator.tracing"):
                return None  # the package itself, for a name from one of the modules above
            return "core reaches above itself"
        if top in sys.stdlib_module_names or top in CORE_THIRD_PARTY:
            if any(within(target, heavy) for heavy in HEAVY):
                return "core must not load the OpenTelemetry SDK or an exporter"
            return None
        if (source, top) in CORE_OPTIONAL:
            return None
        return f"core imports the third-party {top!r}"

    assert violations("core", rule) == []


# Optional packages a core module may import, in a function, only when a run needs them (never
# a core dependency): the schema checker's fallback for what it does not compile (an extra's).
CORE_OPTIONAL = frozenset({("orchestrator.core.schema", "jsonschema")})


def test_core_loads_its_optional_packages_only_when_used() -> None:
    modules = loaded_after(
        "from orchestrator import Tool\n"
        "Tool.from_schema('t', 'd', {'type': 'object', 'patternProperties': {'^x': {}}}, print)"
    )
    assert "orchestrator.core.schema" in modules
    assert not [m for m in modules if m.split(".")[0] in {top for _, top in CORE_OPTIONAL}]


def test_the_modules_core_builds_on_sit_on_cores_lowest_layers() -> None:
    known = package_modules()
    for name in sorted(CORE_MAY_REACH):
        path = PACKAGE.parent / (name.replace(".", "/") + ".py")
        for line, target in imports_of(path):
            if within(target, "orchestrator.core") and is_module(target, known):
                assert target in CORE_BOTTOM, f"{name}:{line} imports {target}"


def test_models_tracing_and_toolsets_never_import_the_loop_or_anything_above_them() -> None:
    def rule(source: str, target: str) -> str | None:
        if target in LOOP_INTERNALS:
            return "the loop's internals"
        for above in ("orchestrator.cli", "orchestrator.research", "orchestrator.testing"):
            if within(target, above):
                return "a room above"
        return None

    for room in ("models", "tracing", "toolsets"):
        assert violations(room, rule) == [], room


# The child seam: what a runner outside core (the Dask package) may use of core.
SEAM = frozenset({"orchestrator.core.runner", "orchestrator.core.host"})


def test_the_dask_package_reaches_core_only_through_the_seam() -> None:
    # the runner through core/runner.py, its worker through core/host.py; anything else it
    # needs is a public name (``from orchestrator import Usage``)
    def rule(source: str, target: str) -> str | None:
        if within(target, "orchestrator.core") and not any(within(target, s) for s in SEAM):
            return "core's internals: only core.runner and core.host"
        return None

    assert violations("dask", rule) == []


def test_the_seam_module_loads_no_runtime() -> None:
    # a runner imports core/runner.py without the loop, the state or the in-process runner
    modules = loaded_after("import orchestrator.core.runner")
    core = {m for m in modules if within(m, "orchestrator.core")}
    assert "orchestrator.core.runner" in core
    assert core <= {"orchestrator.core", "orchestrator.core.runner", "orchestrator.core.limits"} | {
        f"orchestrator.core.{m}" for m in ("result", "errors", "messages", "records")
    }


def test_the_loop_never_imports_spawn() -> None:
    loop = PACKAGE / "core" / "loop.py"
    assert "orchestrator.core.spawn" not in {target for _, target in imports_of(loop)}


def test_nothing_below_the_command_line_imports_it() -> None:
    def rule(source: str, target: str) -> str | None:
        return "the command line" if within(target, "orchestrator.cli") else None

    for room in ("core", "models", "tracing", "toolsets", "research"):
        assert violations(room, rule) == [], room


def test_the_research_application_is_named_only_as_a_string_by_the_model_registry() -> None:
    def rule(source: str, target: str) -> str | None:
        return "the research application" if within(target, "orchestrator.research") else None

    # models/base.py names "orchestrator.research.offline" as a string, loaded for "offline";
    # so does the models package for its OfflineModel (see TYPE_ONLY_REEXPORTS)
    for room in ("core", "models", "tracing", "toolsets"):
        assert violations(room, rule) == [], room


def test_a_type_only_reexport_is_a_lazy_name_of_its_facade() -> None:
    for package, target in sorted(TYPE_ONLY_REEXPORTS):
        path = PACKAGE.parent / package.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text())
        guarded = [
            node
            for node in tree.body
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        ]
        lines = {statement.lineno for block in guarded for statement in block.body}
        found = [line for line, name in imports_of(path) if name == target]
        assert found and set(found) <= lines, f"{package} imports {target} at run time"
        names = [
            alias.name
            for block in guarded
            for node in ast.walk(block)
            if isinstance(node, ast.ImportFrom) and node.lineno in found
            for alias in node.names
        ]
        lazy = importlib.import_module(package)._LAZY
        assert names and all(lazy[name] == target for name in names), (package, names)
        assert target not in loaded_after(f"import {package}")


# --------------------------------------------------------------------------------------------
# Naming (trio's rule): a private name is used only in its own module


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for an expression that is a name followed by attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def private_names_taken(package: Path = PACKAGE) -> list[str]:
    """Each private name (``_x``, not a dunder) that a module of ``package`` takes from another
    of its modules, as ``path:line: module._x``: ``from X import _x`` (unless ``X._x`` is a
    module: a helper module carries the underscore, and its siblings import it) and ``X._x`` on
    a module imported by name (``from . import anthropic``, then ``anthropic._x``)."""
    root, ours = package.parent, package.name

    def name_of(path: Path) -> str:
        parts = path.relative_to(root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    known = {name_of(p) for p in package.rglob("*.py")}
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        source = name_of(path)
        here = source if path.name == "__init__.py" else source.rpartition(".")[0]
        where = path.relative_to(root)
        tree = ast.parse(path.read_text(), str(path))
        modules: dict[str, str] = {}  # a name bound by an import -> the module of ours it is
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if within(alias.name, ours):
                        bound = alias.asname or alias.name.partition(".")[0]
                        modules[bound] = alias.name if alias.asname else bound
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not within(target, ours):
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in known:
                        modules[alias.asname or alias.name] = full
                    elif is_private(alias.name):
                        found.append(f"{where}:{node.lineno}: {full}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
                continue
            name = dotted(node.value)
            head, _, rest = (name or "").partition(".")
            if head not in modules:
                continue
            module = f"{modules[head]}.{rest}" if rest else modules[head]
            if module in known and module != source:
                found.append(f"{where}:{node.lineno}: {module}.{node.attr}")
    return found


def test_the_private_names_check_finds_both_ways_of_taking_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("_hidden = 1\nshown = 2\n")
    (package / "_helper.py").write_text("plain = 3\n")
    (package / "b.py").write_text(
        "import pkg.a\n"
        "import pkg.a as alias\n"
        "from . import _helper, a\n"
        "from .a import _hidden, shown\n"
        "x = a._hidden + _helper.plain + pkg.a._hidden + alias._hidden + shown + _hidden\n"
        "y = a.__name__, _helper.__name__\n"
    )
    assert sorted(private_names_taken(package)) == [
        "pkg/b.py:4: pkg.a._hidden",
        "pkg/b.py:5: pkg.a._hidden",
        "pkg/b.py:5: pkg.a._hidden",
        "pkg/b.py:5: pkg.a._hidden",
    ]


def test_no_module_outside_core_takes_a_private_name_from_another_module() -> None:
    # Helper modules carry the underscore (``models/_retry``, ``toolsets/_mcp_session``); the
    # names they share with their package are plain (``_retry.Failure``). Listed for the whole
    # package, asserted for every module outside core/ (models, tracing, toolsets, research,
    # cli, dask, aio, the facades): what a module there needs of another is a plain name.
    found = private_names_taken()
    assert [f for f in found if not f.startswith("orchestrator/core/")] == []


def test_importing_the_models_package_loads_no_adapter_and_no_sdk() -> None:
    modules = loaded_after("import orchestrator, orchestrator.models")
    assert "orchestrator.models.base" in modules  # the check would pass vacuously otherwise
    adapters = ("orchestrator.models.anthropic", "orchestrator.models.openai")
    assert [m for m in modules if m in adapters or m.startswith("orchestrator.models._")] == []
    assert [m for m in modules if any(within(m, heavy) for heavy in HEAVY)] == []


def test_each_adapter_loads_without_the_other() -> None:
    # what both use is in models/_shared.py, not in one of them
    for name, other in (("OpenAIModel", "anthropic"), ("AnthropicModel", "openai")):
        modules = loaded_after(f"from orchestrator.models import {name}")
        assert "orchestrator.models._shared" in modules
        assert [m for m in modules if f"models.{other}" in m or f"models._{other}" in m] == []


def loaded_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    modules: list[str] = json.loads(out.stdout)
    return modules


# Every public name of the package, loaded (``import orchestrator`` alone loads none of them).
ALL_NAMES = "from orchestrator import *"


def test_importing_the_library_loads_no_sdk_no_provider_and_no_terminal_toolkit() -> None:
    modules = loaded_after(f"{ALL_NAMES}\nimport orchestrator.models, orchestrator.tracing")
    assert "orchestrator.core.run" in modules  # the check would pass vacuously otherwise
    heavy = [m for m in modules if any(within(m, h) for h in HEAVY)]
    assert heavy == []


@pytest.mark.parametrize(
    "statement",
    [
        "from orchestrator.tracing import configure_tracing",
        "from orchestrator.models import AnthropicModel",
        "from orchestrator.models import OpenAIModel",
    ],
)
def test_the_lazy_names_load_what_they_need_on_first_use(statement: str) -> None:
    modules = loaded_after(statement)
    wanted = {
        "configure_tracing": "opentelemetry.sdk",
        "AnthropicModel": "orchestrator.models.anthropic",
        "OpenAIModel": "orchestrator.models.openai",
    }[statement.split()[-1]]
    assert wanted in modules
    assert "openai" not in modules  # an adapter imports its SDK on its first call


def test_mcp_servers_load_the_mcp_sdk_only_when_a_run_connects_one() -> None:
    modules = loaded_after(
        "from orchestrator.mcp import MCPServer; from orchestrator import Agent\n"
        "Agent('a', 'x', tools=[MCPServer.stdio('fs', 'server-command').only('read')])"
    )
    assert "orchestrator.toolsets.mcp" in modules
    assert not [m for m in modules if within(m, "mcp") or m == "orchestrator.toolsets._mcp_session"]


def test_naming_a_model_by_string_loads_its_adapter_only_then() -> None:
    before = loaded_after(ALL_NAMES)
    after = loaded_after("from orchestrator.models import resolve_model; resolve_model('offline')")
    assert "orchestrator.research.offline" not in before
    assert "orchestrator.research.offline" in after


def test_importing_the_package_loads_no_runtime_until_a_name_is_used() -> None:
    # The command line is a subpackage, so every ``orchestrator`` command runs the package's
    # __init__ first: the runtime's names load on first use (a module __getattr__).
    modules = loaded_after("import orchestrator")
    assert [m for m in modules if within(m, "orchestrator")] == ["orchestrator"]
    assert not [m for m in modules if m.split(".")[0] in CORE_THIRD_PARTY]
    assert "orchestrator.core.run" in loaded_after("from orchestrator import run")


def test_the_command_lines_help_loads_no_runtime() -> None:
    modules = loaded_after(
        "import contextlib, io\nfrom orchestrator.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['run', '--help'])"
    )
    assert "orchestrator.cli.main" in modules
    assert not [m for m in modules if m.split(".")[0] in CORE_THIRD_PARTY]
    core = {m for m in modules if within(m, "orchestrator.core")}
    assert core <= {"orchestrator.core"} | {f"orchestrator.core.{m}" for m in LIGHT_CORE}


# What the exit codes (core.result) and the terminal helpers of ``cli/main.py`` build on.
LIGHT_CORE = ("result", "errors", "messages", "records", "redact", "terminal")


def test_the_runtime_defers_what_only_some_runs_need() -> None:
    # sqlite3: a journal (a run given one, resume); opentelemetry.propagate (which reads its
    # entry points on import): a traced spawn; difflib: a misspelled policy rule's hint.
    deferred = ("sqlite3", "opentelemetry.propagate", "difflib")
    modules = loaded_after(ALL_NAMES)
    assert "orchestrator.core.run" in modules
    assert [m for m in modules if any(within(m, d) for d in deferred)] == []
    # and a run without a journal or a tracer loads none of them, nor the journal's modules
    modules = loaded_after(
        "from orchestrator import Agent, run_sync\n"
        "from orchestrator.testing import ScriptedModel, text\n"
        "result = run_sync(Agent('a', 'x', model=ScriptedModel([text('done')])), 'hi')\n"
        "assert result.status == 'completed', result"
    )
    deferred += ("orchestrator.core.journal_sqlite", "orchestrator.core.resume")
    assert [m for m in modules if any(within(m, d) for d in deferred)] == []
