"""The public API: the names each public module exports, and the old import paths that still work.

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
        "Agent",
        "BudgetLease",
        "ChildOutcome",
        "ChildRunner",
        "ChildSpec",
        "ConfigurationError",
        "ContextPolicy",
        "ContextWindowExceeded",
        "InProcessRunner",
        "Journal",
        "Limits",
        "Message",
        "ModelError",
        "NullJournal",
        "OrchestratorError",
        "ParentSide",
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
        "__version__",
        "open_run",
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
        "flush_tracer_provider",
        "resolve_otlp_endpoint",
        "resolve_protocol",
    ],
    "orchestrator.mcp": ["MCPServer"],
    "orchestrator.aio": ["AioEvents", "AioRunHandle", "open_run", "run"],
    "orchestrator.testing": [
        "FunctionModel",
        "ScriptedModel",
        "SpanRecorder",
        "Step",
        "recording_spans",
        "replace_models",
        "response",
        "text",
        "tool_call",
    ],
}

# Paths the README, docs/ and examples/ name, or that earlier releases had: they keep working.
OLD_PATHS = {
    "orchestrator.context": ["ContextPolicy"],
    "orchestrator.notes": ["notes_tools"],
    "orchestrator.research_tools": ["corpus_tools"],
    "orchestrator.corpus": ["Corpus"],
    "orchestrator.messages": ["Message", "Usage"],
    "orchestrator.redact": ["redact"],
    "orchestrator.traceview": ["load_trace", "render_trace", "export_trace"],
    "orchestrator.models.anthropic": ["AnthropicModel", "DEFAULT_MODEL", "PRICES"],
    "orchestrator.models.openai": ["OpenAIModel", "PRICES", "ollama"],
    "orchestrator.models.scripted": ["ScriptedModel", "FunctionModel"],
    "orchestrator.models.offline": ["OfflineModel"],
    "orchestrator.cli": ["main"],
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


@pytest.mark.parametrize("module", sorted(OLD_PATHS))
def test_an_old_import_path_still_gives_the_same_objects(module: str) -> None:
    mod = importlib.import_module(module)
    for name in OLD_PATHS[module]:
        assert getattr(mod, name) is not None, f"{module}.{name}"


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
