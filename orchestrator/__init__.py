"""orchestrator: run trees of LLM agents under trio, traced end to end with OpenTelemetry.

A parent agent gets a ``spawn_subagent`` tool; each child starts with a fresh transcript and a
narrowed tool set, runs concurrently with its siblings in the parent's nursery, and returns only
its final answer. Every turn is a span, so a whole tree is one trace.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .agent import Agent
from .context import ContextPolicy
from .errors import ConfigurationError, ModelError, OrchestratorError, RunFailedError, ToolError
from .limits import DEFAULT_LIMITS, Limits
from .messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage
from .policy import PendingCall, Policy
from .result import RunResult, RunStatus
from .run import RunHandle, open_run, run, run_sync
from .tools import Tool, ToolContext, tool

__all__ = [
    "DEFAULT_LIMITS",
    "Agent",
    "ConfigurationError",
    "ContextPolicy",
    "Limits",
    "Message",
    "ModelError",
    "OrchestratorError",
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
    "run",
    "run_sync",
    "tool",
]
