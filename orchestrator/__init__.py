"""orchestrator: run trees of LLM agents under trio, traced end to end with OpenTelemetry.

A parent agent gets a ``spawn_subagent`` tool; each child starts with a fresh transcript and a
narrowed tool set, runs concurrently with its siblings in the parent's nursery, and returns only
its final answer. Every turn is a span, so a whole tree is one trace.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .core.agent import Agent as Agent
    from .core.compaction import ContextPolicy as ContextPolicy
    from .core.errors import ConfigurationError as ConfigurationError
    from .core.errors import ContextWindowExceeded as ContextWindowExceeded
    from .core.errors import ModelError as ModelError
    from .core.errors import OrchestratorError as OrchestratorError
    from .core.errors import OutputRejected as OutputRejected
    from .core.errors import RunFailedError as RunFailedError
    from .core.errors import ToolError as ToolError
    from .core.hosted import WebFetch as WebFetch
    from .core.hosted import WebSearch as WebSearch
    from .core.inprocess import InProcessRunner as InProcessRunner
    from .core.journal import Journal as Journal
    from .core.journal import NullJournal as NullJournal
    from .core.limits import DEFAULT_LIMITS as DEFAULT_LIMITS
    from .core.limits import Limits as Limits
    from .core.messages import Message as Message
    from .core.messages import TextBlock as TextBlock
    from .core.messages import ThinkingBlock as ThinkingBlock
    from .core.messages import ToolResultBlock as ToolResultBlock
    from .core.messages import ToolUseBlock as ToolUseBlock
    from .core.messages import Usage as Usage
    from .core.output import OutputContext as OutputContext
    from .core.policy import DEFER as DEFER
    from .core.policy import PendingCall as PendingCall
    from .core.policy import Policy as Policy
    from .core.redact import redact as redact
    from .core.result import PendingApproval as PendingApproval
    from .core.result import RunResult as RunResult
    from .core.result import RunStatus as RunStatus
    from .core.resume import resume as resume
    from .core.resume import resume_sync as resume_sync
    from .core.run import RunHandle as RunHandle
    from .core.run import open_run as open_run
    from .core.run import run as run
    from .core.run import run_sync as run_sync
    from .core.runner import BudgetLease as BudgetLease
    from .core.runner import ChildOutcome as ChildOutcome
    from .core.runner import ChildRunner as ChildRunner
    from .core.runner import ChildSpec as ChildSpec
    from .core.runner import Parent as Parent
    from .core.tools import Tool as Tool
    from .core.tools import ToolContext as ToolContext
    from .core.tools import tool as tool
    from .research.corpus import Corpus as Corpus
    from .research.tools import corpus_tools as corpus_tools
    from .toolsets.notes import NoteStore as NoteStore
    from .toolsets.notes import notes_tools as notes_tools

__all__ = [
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
]

# The names load their modules (trio and the whole runtime) on first use, not at ``import
# orchestrator``: every ``orchestrator`` command runs this file first (the command line is a
# subpackage), and ``--help`` or ``trace list`` need none of the runtime.
_LAZY: dict[str, str] = {
    "Agent": "orchestrator.core.agent",
    "ContextPolicy": "orchestrator.core.compaction",
    "ConfigurationError": "orchestrator.core.errors",
    "ContextWindowExceeded": "orchestrator.core.errors",
    "ModelError": "orchestrator.core.errors",
    "OrchestratorError": "orchestrator.core.errors",
    "OutputRejected": "orchestrator.core.errors",
    "RunFailedError": "orchestrator.core.errors",
    "ToolError": "orchestrator.core.errors",
    "Journal": "orchestrator.core.journal",
    "NullJournal": "orchestrator.core.journal",
    "DEFAULT_LIMITS": "orchestrator.core.limits",
    "Limits": "orchestrator.core.limits",
    "Message": "orchestrator.core.messages",
    "TextBlock": "orchestrator.core.messages",
    "ThinkingBlock": "orchestrator.core.messages",
    "ToolResultBlock": "orchestrator.core.messages",
    "ToolUseBlock": "orchestrator.core.messages",
    "Usage": "orchestrator.core.messages",
    "OutputContext": "orchestrator.core.output",
    "DEFER": "orchestrator.core.policy",
    "PendingApproval": "orchestrator.core.result",
    "PendingCall": "orchestrator.core.policy",
    "Policy": "orchestrator.core.policy",
    "RunResult": "orchestrator.core.result",
    "RunStatus": "orchestrator.core.result",
    "resume": "orchestrator.core.resume",
    "resume_sync": "orchestrator.core.resume",
    "RunHandle": "orchestrator.core.run",
    "open_run": "orchestrator.core.run",
    "run": "orchestrator.core.run",
    "run_sync": "orchestrator.core.run",
    "BudgetLease": "orchestrator.core.runner",
    "ChildOutcome": "orchestrator.core.runner",
    "ChildRunner": "orchestrator.core.runner",
    "ChildSpec": "orchestrator.core.runner",
    "InProcessRunner": "orchestrator.core.inprocess",
    "WebFetch": "orchestrator.core.hosted",
    "WebSearch": "orchestrator.core.hosted",
    "Parent": "orchestrator.core.runner",
    "Tool": "orchestrator.core.tools",
    "ToolContext": "orchestrator.core.tools",
    "tool": "orchestrator.core.tools",
    "redact": "orchestrator.core.redact",
    "Corpus": "orchestrator.research.corpus",
    "corpus_tools": "orchestrator.research.tools",
    "NoteStore": "orchestrator.toolsets.notes",
    "notes_tools": "orchestrator.toolsets.notes",
}


if not TYPE_CHECKING:  # type checkers see the imports above (and flag a misspelled name)

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
