"""The public API: the names each public module exports, and where the facades take them from.

A name added to or dropped from ``__all__`` is a change users see: this file is where it shows.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from support.cli import run_main

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator"

EXPORTS = {
    "orchestrator": [
        "DEFAULT_LIMITS",
        "DEFER",
        "Agent",
        "BudgetLease",
        "ChildOutcome",
        "ChildRunner",
        "ChildSpec",
        "ConfigurationError",
        "ContextPolicy",
        "ContextWindowExceeded",
        "Corpus",
        "InProcessRunner",
        "Journal",
        "Limits",
        "Message",
        "ModelError",
        "NoteStore",
        "NullJournal",
        "OrchestratorError",
        "OutputContext",
        "OutputRejected",
        "Parent",
        "PendingApproval",
        "PendingCall",
        "Policy",
        "RunFailedError",
        "RunHandle",
        "RunResult",
        "RunStatus",
        "TextBlock",
        "ThinkingBlock",
        "Tool",
        "ToolContext",
        "ToolError",
        "ToolResultBlock",
        "ToolUseBlock",
        "Usage",
        "WebFetch",
        "WebSearch",
        "__version__",
        "corpus_tools",
        "notes_tools",
        "open_run",
        "redact",
        "resume",
        "resume_sync",
        "run",
        "run_sync",
        "tool",
    ],
    "orchestrator.models": [
        "AgentInfo",
        "AnthropicModel",
        "ClientPool",
        "FallbackModel",
        "FunctionModel",
        "Model",
        "ModelContext",
        "ModelRequest",
        "ModelResponse",
        "OfflineModel",
        "OpenAIModel",
        "ScriptedModel",
        "Step",
        "ToolSpec",
        "final",
        "resolve_model",
        "response",
        "text",
        "tool_call",
    ],
    "orchestrator.tracing": [
        "CONTENT_CAPTURE_ENV",
        "DEFAULT_SERVICE_NAME",
        "OtlpJsonLinesExporter",
        "Protocol",
        "TracingSetup",
        "configure_tracing",
        "content_capture_enabled",
        "content_for_span",
        "decode_otlp_json",
        "encode_otlp_json",
        "export_trace",
        "flush_tracer_provider",
        "load_trace",
        "render_trace",
        "resolve_otlp_endpoint",
        "resolve_protocol",
    ],
    "orchestrator.mcp": ["MCPServer"],
    "orchestrator.tools": ["Tool", "ToolContext", "ToolError", "WebFetch", "WebSearch", "tool"],
    "orchestrator.aio": ["AioEvents", "AioRunHandle", "open_run", "resume", "run"],
    "orchestrator.testing": [
        "ConformanceError",
        "FunctionModel",
        "ScriptedModel",
        "SpanRecorder",
        "Step",
        "check_journal",
        "check_runner",
        "final",
        "recording_spans",
        "replace_models",
        "response",
        "text",
        "tool_call",
    ],
}

# Modules the README, docs/ and examples/ import from by path (each the room a name lives in).
DOCUMENTED_PATHS = {
    "orchestrator.models.anthropic": ["AnthropicModel", "DEFAULT_MODEL", "PRICES"],
    "orchestrator.models.openai": ["OpenAIModel", "PRICES", "ollama"],
    "orchestrator.models.scripted": ["ScriptedModel", "FunctionModel"],
    "orchestrator.cli": ["main"],
}

# A name lives at one path, its room; a facade exports that same object. These are the names
# the deleted compatibility modules (orchestrator.notes, .corpus, .research_tools, .redact,
# .traceview ...) used to give, and what a tool author uses.
FACADE_NAMES = {
    "orchestrator": {
        "Corpus": "orchestrator.research.corpus",
        "WebFetch": "orchestrator.core.hosted",
        "WebSearch": "orchestrator.core.hosted",
        "NoteStore": "orchestrator.toolsets.notes",
        "corpus_tools": "orchestrator.research.tools",
        "notes_tools": "orchestrator.toolsets.notes",
        "redact": "orchestrator.core.redact",
    },
    "orchestrator.tracing": {
        "export_trace": "orchestrator.tracing.export",
        "load_trace": "orchestrator.tracing.tracefiles",
        "render_trace": "orchestrator.tracing.view",
    },
    "orchestrator.tools": {
        "Tool": "orchestrator.core.tools",
        "ToolContext": "orchestrator.core.tools",
        "ToolError": "orchestrator.core.errors",
        "WebFetch": "orchestrator.core.hosted",
        "WebSearch": "orchestrator.core.hosted",
        "tool": "orchestrator.core.tools",
    },
}


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_each_public_module_exports_exactly_the_pinned_names(module: str) -> None:
    assert list(importlib.import_module(module).__all__) == EXPORTS[module]


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_every_exported_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name


def test_the_top_level_reexports_with_explicit_aliases() -> None:
    # ``from .core.agent import Agent as Agent``: type checkers treat the name as re-exported
    # (they sit under ``if TYPE_CHECKING:``: at run time a module __getattr__ loads them)
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    found = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:  # the package's own names
            found += 1
            assert all(alias.asname == alias.name for alias in node.names), ast.unparse(node)
    assert found


def test_the_top_level_names_type_checkers_see_are_the_ones_loaded_on_first_use() -> None:
    import orchestrator

    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    seen = {
        (f"orchestrator.{node.module}", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }
    assert seen == {(module, name) for name, module in orchestrator._LAZY.items()}
    assert sorted(orchestrator._LAZY) == sorted(set(orchestrator.__all__) - {"__version__"})


@pytest.mark.parametrize("module", sorted(DOCUMENTED_PATHS))
def test_a_documented_import_path_gives_its_names(module: str) -> None:
    mod = importlib.import_module(module)
    for name in DOCUMENTED_PATHS[module]:
        assert getattr(mod, name) is not None, f"{module}.{name}"


@pytest.mark.parametrize("facade", sorted(FACADE_NAMES))
def test_a_facade_exports_the_object_its_room_defines(facade: str) -> None:
    mod = importlib.import_module(facade)
    for name, room in FACADE_NAMES[facade].items():
        assert name in mod.__all__, f"{facade}.{name}"
        assert getattr(mod, name) is getattr(importlib.import_module(room), name), name


@pytest.mark.parametrize(
    "gone",
    [
        "orchestrator.context",
        "orchestrator.corpus",
        "orchestrator.messages",
        "orchestrator.notes",
        "orchestrator.redact",
        "orchestrator.research_tools",
        "orchestrator.traceview",
        "orchestrator.models.offline",
    ],
)
def test_no_compatibility_module_is_left(gone: str) -> None:
    # the project has not been released: a name lives at one path, and a facade exports it
    relative = Path(*gone.split(".")[1:]).with_suffix(".py")
    assert not (PACKAGE / relative).exists(), gone


def test_the_test_models_are_the_same_objects_in_testing_and_models() -> None:
    import orchestrator.models
    import orchestrator.testing

    for name in ("FunctionModel", "ScriptedModel", "Step", "response", "text", "tool_call"):
        assert getattr(orchestrator.testing, name) is getattr(orchestrator.models, name)


def test_the_command_prints_its_version() -> None:
    # main() in this process: ``python -m orchestrator.cli`` itself has a smoke test of its own
    # (tests/cli/test_cli.py, test_python_m_orchestrator_cli_is_the_command)
    out = run_main(["--version"])
    assert out.returncode == 0, out.stderr
    assert "0.1.0" in out.stdout
