"""Models: the :class:`Model` protocol, the model-string registry, the test models, the adapters.

The provider adapters load their SDKs, so ``AnthropicModel``, ``OpenAIModel`` (and the research
tree's ``OfflineModel``) are imported on first use of the name: ``import orchestrator.models``
loads no provider SDK and not the runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import AgentInfo as AgentInfo
from .base import ClientPool as ClientPool
from .base import Model as Model
from .base import ModelContext as ModelContext
from .base import ModelRequest as ModelRequest
from .base import ModelResponse as ModelResponse
from .base import ToolSpec as ToolSpec
from .base import resolve_model as resolve_model
from .fallback import FallbackModel as FallbackModel
from .scripted import FunctionModel as FunctionModel
from .scripted import ScriptedModel as ScriptedModel
from .scripted import Step as Step
from .scripted import final as final
from .scripted import response as response
from .scripted import text as text
from .scripted import tool_call as tool_call

if TYPE_CHECKING:
    from ..research.offline import OfflineModel as OfflineModel
    from .anthropic import AnthropicModel as AnthropicModel
    from .openai import OpenAIModel as OpenAIModel

__all__ = [
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
]

_LAZY = {
    "AnthropicModel": "orchestrator.models.anthropic",
    "OfflineModel": "orchestrator.research.offline",
    "OpenAIModel": "orchestrator.models.openai",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
